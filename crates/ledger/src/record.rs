//! `record`: one run, checked against its locked protocol, its rental's package in the tariff
//! catalogue and the device it was measured on, then added to the grid.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use lab::measure::document::{
    MEASUREMENT_KIND, MEASUREMENT_LIMIT, MEASUREMENT_SCHEMA, MeasurementDocument,
};
use lab_io::text::{neutralise_cell, printable};
use rent::catalogue::Catalogue;

use crate::device::{self, CPU_REFERENCE};
use crate::error::LedgerError;
use crate::grid::{self, Conflict, NOTES_MAX, Package, Row};
use crate::protocol::{self, is_identifier};

pub use crate::grid::threshold_met;
pub use crate::hash::sha256_hex;

/// Everything `record` is given.
#[derive(Debug, Clone)]
pub struct RecordRequest {
    /// The results grid.
    pub results: PathBuf,
    /// The locked protocol.
    pub protocol: PathBuf,
    /// The measurement document.
    pub measurement: PathBuf,
    /// The rental the run was made on, named by the user.
    pub rental: String,
    /// The rental's package.
    pub package: Package,
    /// Units submitted to the judge.
    pub submitted: u64,
    /// Units the judge accepted.
    pub accepted: u64,
    /// Free text, one line.
    pub notes: Option<String>,
    /// Record a measurement made on another device than the package's GPU (the row says so).
    pub allow_device_mismatch: bool,
}

/// What `record` added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The row.
    pub row: Row,
    /// Its line in the grid.
    pub line: u64,
    /// True when the grid was created for it.
    pub created: bool,
    /// The package's GPU model, from the catalogue.
    pub model: String,
    /// A sentence for stderr when the grid is written but its folder could not be flushed.
    pub warning: Option<String>,
}

/// Reads a measurement file (within [`MEASUREMENT_LIMIT`]): its SHA-256 and its document, which
/// must be complete.
fn load_measurement(path: &Path) -> Result<(String, MeasurementDocument), LedgerError> {
    let bytes = lab_io::files::read_bounded(path, MEASUREMENT_LIMIT, MEASUREMENT_KIND)?;
    let sha = sha256_hex(&bytes);
    let bad = |reason: String| LedgerError::Measurement {
        path: path.to_path_buf(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON ({e})")))?;
    let schema = value.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    if schema != MEASUREMENT_SCHEMA {
        return Err(bad(format!(
            "schema {:?}, expected {MEASUREMENT_SCHEMA:?} (a file written by `iteragpu measure`)",
            printable(schema)
        )));
    }
    if value.get("complete").and_then(|c| c.as_bool()) != Some(true) {
        let reason = value
            .pointer("/error/message")
            .and_then(|m| m.as_str())
            .map(|m| format!(", {}", printable(m)))
            .unwrap_or_default();
        return Err(LedgerError::IncompleteMeasurement {
            path: path.to_path_buf(),
            reason,
        });
    }
    let doc: MeasurementDocument =
        serde_json::from_value(value).map_err(|e| bad(format!("{e}")))?;
    Ok((sha, doc))
}

/// How far past the recording machine's clock a document's run may end: the measuring
/// machine's clock may run a little ahead of this one.
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// A figure from a document (seconds, an error), readably: `-1`, `0.25`, `1e308`, `NaN`.
fn figure(value: f64) -> String {
    if value == 0.0 || (1e-4..1e7).contains(&value.abs()) {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// Refuses a complete document that cannot be a real run on a rental of `package`, with one
/// sentence naming the field, its value and what would be accepted:
///
/// - no phase at all: a complete run has a row for every phase it ran;
/// - a numerical check that did not pass (`check.passed: false`, or a relative error that is not
///   finite or over its bound): only runs whose output was checked right are recorded;
/// - a time (`device_init_seconds`, each phase's `wall_seconds` and `device_seconds`) that is not
///   a finite number of seconds, 0 or more;
/// - a run longer than the package: `device_init_seconds` and the phases' `wall_seconds` add up
///   to more than its days, or any one `device_seconds` is longer;
/// - a run that starts, or ends (`started_utc` plus those seconds), later than `now` plus
///   [`CLOCK_SKEW`].
///
/// These are figures that cannot be. A document is not signed: one written by hand with
/// possible figures passes, and its SHA-256 in the row names its exact bytes.
pub fn check_real_run(
    doc: &MeasurementDocument,
    package: &Package,
    started: SystemTime,
    now: SystemTime,
) -> Result<(), String> {
    if doc.phases.is_empty() {
        return Err(
            "complete is true but phases is empty: a complete run has one row for each phase \
             it ran (model_load, inputs, cold_forward, warmup, warm_forward)"
                .into(),
        );
    }
    if let Some(check) = &doc.check {
        if !check.passed {
            return Err(format!(
                "complete is true but check.passed is false (relative error {}, bound {}): only \
                 a run whose numerical check passed is recorded",
                figure(check.relative_error),
                figure(check.bound)
            ));
        }
        if !(check.relative_error.is_finite() && check.relative_error <= check.bound) {
            return Err(format!(
                "check.passed is true but check.relative_error {} is not a finite number within \
                 check.bound {}: a check passes only when its error is within its bound",
                figure(check.relative_error),
                figure(check.bound)
            ));
        }
    }
    let wall = std::iter::once(("device_init_seconds".to_string(), doc.device_init_seconds))
        .chain(doc.phases.iter().enumerate().map(|(i, row)| {
            (
                format!("phases[{i}].wall_seconds ({})", row.phase.name()),
                row.wall_seconds,
            )
        }))
        .collect::<Vec<_>>();
    let device = doc.phases.iter().enumerate().filter_map(|(i, row)| {
        row.device_seconds.map(|t| {
            (
                format!("phases[{i}].device_seconds ({})", row.phase.name()),
                t,
            )
        })
    });
    let days = package.days;
    let longest = f64::from(days) * 86_400.0;
    for (field, value) in wall.iter().cloned().chain(device) {
        if !(value.is_finite() && value >= 0.0) {
            return Err(format!(
                "{field} is {}: a time is a finite number of seconds, 0 or more",
                figure(value)
            ));
        }
        if value > longest {
            return Err(format!(
                "{field} is {} seconds, longer than the {days} days ({longest} seconds) of \
                 package {package}: a run on the rental cannot outlast it",
                figure(value)
            ));
        }
    }
    let total: f64 = wall.iter().map(|(_, t)| t).sum();
    if total > longest {
        return Err(format!(
            "device_init_seconds and the phases' wall_seconds add up to {} seconds, longer than \
             the {days} days ({longest} seconds) of package {package}: a run on the rental cannot \
             outlast it",
            figure(total)
        ));
    }
    let allowed = now + CLOCK_SKEW;
    let minutes = CLOCK_SKEW.as_secs() / 60;
    let started_utc = printable(&doc.started_utc);
    if started > allowed {
        return Err(format!(
            "started_utc {started_utc:?} is later than now ({}): a run is recorded after it \
             started, so its start may be at most {minutes} minutes past this machine's clock",
            crate::time::utc_seconds(now),
        ));
    }
    let ended = started + Duration::from_secs_f64(total);
    if ended > allowed {
        return Err(format!(
            "started_utc {started_utc:?} plus the {} seconds of device_init_seconds and the \
             phases' wall_seconds ends at {}, later than now ({}): a run is recorded after it \
             ended, so its end may be at most {minutes} minutes past this machine's clock",
            figure(total),
            crate::time::utc_seconds(ended),
            crate::time::utc_seconds(now),
        ));
    }
    Ok(())
}

/// A value from a document as a grid cell: escapes instead of control characters, and a
/// leading `'` instead of a formula.
fn cell(value: &str) -> String {
    neutralise_cell(&printable(value)).into_owned()
}

/// The results path to write: a link to an existing grid is followed (the grid is rewritten
/// where it is, the link stays); a link to nothing is refused, as every result writer does.
fn resolve_results(path: &Path) -> Result<PathBuf, LedgerError> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match current.symlink_metadata() {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target =
                    std::fs::read_link(&current).map_err(|e| lab_io::files::OutputError::Io {
                        path: current.clone(),
                        reason: lab_io::files::os_message(&e),
                    })?;
                if current.metadata().is_err() {
                    return Err(lab_io::files::OutputError::DanglingLink(path.to_path_buf()).into());
                }
                current = lab_io::files::folder_of(&current).join(target);
            }
            _ => break,
        }
    }
    lab_io::files::check_replace(&current)?;
    Ok(current)
}

/// Checks the request, the protocol, the package and the measurement, and adds the row.
pub fn record(req: &RecordRequest, catalogue: &Catalogue) -> Result<Recorded, LedgerError> {
    if req.submitted == 0 {
        return Err(LedgerError::Counts(
            "--submitted must be at least 1: a run judged on no units has no acceptance rate"
                .into(),
        ));
    }
    if req.accepted > req.submitted {
        return Err(LedgerError::Counts(format!(
            "--accepted {} exceeds --submitted {}: a unit can only be accepted once it is submitted",
            req.accepted, req.submitted
        )));
    }
    if !is_identifier(&req.rental) || req.rental.len() > 64 {
        return Err(LedgerError::Rental {
            value: printable(&req.rental).into_owned(),
            expected: "1 to 64 letters, digits and . _ - :, starting with a letter or digit, \
                       such as h200-2026-09-a"
                .into(),
        });
    }
    let notes = req.notes.clone().unwrap_or_default();
    if notes.chars().any(lab_io::text::is_unsafe_char) || notes.chars().count() > NOTES_MAX {
        return Err(LedgerError::Notes { max: NOTES_MAX });
    }
    // The package must be one the catalogue sells, or `cost` could never price the row.
    let quote = rent::price::quote(
        catalogue,
        &req.package.gpu,
        req.package.days,
        u64::from(req.package.lots),
        None,
    )
    .map_err(|e| LedgerError::BadPackage {
        value: req.package.to_string(),
        reason: format!("{e} (catalogue {})", catalogue.name()),
    })?;
    // Before reading anything else: the grid can be written where it is.
    let results = resolve_results(&req.results)?;

    let locked = protocol::load_locked(&req.protocol)?;
    if req.submitted > locked.checked.corpus_size {
        return Err(LedgerError::Counts(format!(
            "--submitted {} exceeds the protocol's corpus_size {}: units are distinct units of corpus {}",
            req.submitted, locked.checked.corpus_size, locked.protocol.corpus_id
        )));
    }
    let (sha, doc) = load_measurement(&req.measurement)?;
    let started =
        crate::time::parse_utc(&doc.started_utc).ok_or_else(|| LedgerError::Measurement {
            path: req.measurement.clone(),
            reason: format!(
                "started_utc {:?} is not an RFC 3339 UTC time",
                printable(&doc.started_utc)
            ),
        })?;
    check_real_run(&doc, &req.package, started, SystemTime::now()).map_err(|reason| {
        LedgerError::Measurement {
            path: req.measurement.clone(),
            reason,
        }
    })?;
    let identity = device::identify(&doc.environment);
    let matches = device::is_package_gpu(&identity, &quote.gpu, &quote.model);
    if !matches && !req.allow_device_mismatch {
        let measured = if identity.uuid == CPU_REFERENCE {
            format!("the CPU reference device ({})", printable(&identity.model))
        } else {
            format!(
                "{} ({})",
                printable(&identity.model),
                printable(&identity.uuid)
            )
        };
        return Err(LedgerError::DeviceMismatch {
            path: req.measurement.clone(),
            measured,
            expected: quote.model.clone(),
            package: req.package.to_string(),
        });
    }
    let rate = locked.checked.rate;
    let row = Row {
        run_id: sha[..12].to_string(),
        date_utc: crate::time::utc_seconds(started),
        protocol_sha256: locked.lock.protocol_sha256.clone(),
        corpus_id: locked.protocol.corpus_id.clone(),
        rental: req.rental.clone(),
        package: req.package.clone(),
        device_model: cell(&identity.model),
        device_uuid: cell(&identity.uuid),
        driver_version: cell(&identity.driver),
        device_mismatch: !matches,
        measurement_sha256: sha,
        units_submitted: req.submitted,
        units_accepted: req.accepted,
        acceptance_threshold: rate.to_string(),
        threshold_met: threshold_met(req.accepted, req.submitted, rate),
        aggregation: locked.checked.aggregation,
        notes: neutralise_cell(&notes).into_owned(),
    };
    let appended = grid::append(&results, &row, |conflict| match conflict {
        Conflict::Duplicate { line, run_id } => LedgerError::AlreadyRecorded {
            path: req.results.clone(),
            sha256: row.measurement_sha256.clone(),
            run_id,
            line,
        },
        other => LedgerError::Conflict {
            path: req.results.clone(),
            message: other.to_string(),
        },
    })?;
    Ok(Recorded {
        warning: appended.written.warning(&req.results),
        row,
        line: appended.line,
        created: appended.created,
        model: quote.model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rust_decimal::Decimal;

    #[test]
    fn threshold_is_exact() {
        let rate: Decimal = "0.9".parse().unwrap();
        assert!(threshold_met(9, 10, rate));
        assert!(!threshold_met(8, 10, rate));
        let third: Decimal = "0.333".parse().unwrap();
        assert!(threshold_met(1, 3, third));
        assert!(threshold_met(5, 5, Decimal::ONE));
        assert!(!threshold_met(0, 0, Decimal::ONE));
    }

    #[test]
    fn cells_from_documents_are_safe() {
        assert_eq!(cell("NVIDIA H200"), "NVIDIA H200");
        assert_eq!(cell("=cmd|' /C calc'!A0"), "'=cmd|' /C calc'!A0");
        assert_eq!(cell("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(cell("\tx"), "\\u{9}x");
    }

    /// A real run of a tiny model on the CPU reference device, started at `started_utc`.
    fn real_run(started_utc: &str) -> MeasurementDocument {
        use lab::measure::config::{MeasureOptions, Plan};
        use lab::measure::runner::{Mode, RunInfo, Silent, run};
        let plan = Plan::new(MeasureOptions {
            device: "cpu".into(),
            batch: 1,
            context: 4,
            width: 8,
            hidden: None,
            dtype: lab::dtype::DType::Float32,
            warmup: 1,
            repeats: 2,
            seed: 1,
            allow_tf32: false,
        })
        .unwrap();
        let tool = lab::tool::ToolInfo::new(None);
        let info = RunInfo {
            tool: tool.clone(),
            started_utc: started_utc.into(),
            device_init_seconds: 0.001,
            preflight: lab::measure::document::Preflight {
                estimated_peak_reserved_bytes: 0,
                device_free_bytes: None,
            },
        };
        let mut device = lab_cpu::CpuDevice::new(tool);
        let doc = run(&mut device, &plan, info, Mode::Measure, &mut Silent);
        assert!(doc.complete && doc.check.as_ref().is_some_and(|c| c.passed));
        doc
    }

    /// Issue 27: what `record` refuses in a complete document, and the sentence it says.
    #[test]
    fn documents_that_cannot_be_a_real_run_are_refused() {
        let now = crate::time::parse_utc("2026-12-01T12:00:00Z").unwrap();
        let started = "2026-12-01T11:00:00Z";
        let at = crate::time::parse_utc(started).unwrap();
        let package: Package = "h200:3:1".parse().unwrap();
        let good = real_run(started);
        assert_eq!(check_real_run(&good, &package, at, now), Ok(()));

        let refused = |change: &dyn Fn(&mut MeasurementDocument), at: SystemTime| {
            let mut doc = good.clone();
            change(&mut doc);
            check_real_run(&doc, &package, at, now).unwrap_err()
        };
        let day3 = 3.0 * 86_400.0;
        for (change, words) in [
            (
                Box::new(|d: &mut MeasurementDocument| d.phases.clear())
                    as Box<dyn Fn(&mut MeasurementDocument)>,
                "complete is true but phases is empty",
            ),
            (
                Box::new(|d| d.check.as_mut().unwrap().passed = false),
                "complete is true but check.passed is false",
            ),
            (
                Box::new(|d| d.check.as_mut().unwrap().relative_error = f64::NAN),
                "check.relative_error NaN is not a finite number within check.bound",
            ),
            (
                Box::new(|d| d.check.as_mut().unwrap().relative_error = 0.5),
                "check.relative_error 0.5 is not a finite number within check.bound",
            ),
            (
                Box::new(|d| d.phases[2].wall_seconds = -1.0),
                "phases[2].wall_seconds (cold_forward) is -1: a time is a finite number of \
                 seconds, 0 or more",
            ),
            (
                Box::new(|d| d.phases[0].wall_seconds = f64::INFINITY),
                "phases[0].wall_seconds (model_load) is inf:",
            ),
            (
                Box::new(|d| d.phases[1].device_seconds = Some(f64::NAN)),
                "phases[1].device_seconds (inputs) is NaN:",
            ),
            (
                Box::new(|d| d.device_init_seconds = -0.5),
                "device_init_seconds is -0.5:",
            ),
            (
                Box::new(|d| d.phases[3].wall_seconds = 1e308),
                "phases[3].wall_seconds (warmup) is 1e308 seconds, longer than the 3 days \
                 (259200 seconds) of package h200:3:1",
            ),
            (
                Box::new(move |d| d.phases[4].device_seconds = Some(day3 + 1.0)),
                "phases[4].device_seconds (warm_forward) is 259201 seconds, longer than",
            ),
            (
                Box::new(move |d| {
                    d.phases[3].wall_seconds = day3 / 2.0;
                    d.phases[4].wall_seconds = day3 / 2.0 + 1.0;
                }),
                "the phases' wall_seconds add up to 259201",
            ),
        ] {
            let err = refused(&*change, at);
            assert!(err.contains(words), "{err}");
        }

        // A start in the future, and a run that would end there.
        let far = crate::time::parse_utc("9999-01-01T00:00:00Z").unwrap();
        let err = refused(&|d| d.started_utc = "9999-01-01T00:00:00Z".into(), far);
        assert!(
            err.contains(
                "started_utc \"9999-01-01T00:00:00Z\" is later than now (2026-12-01T12:00:00Z)"
            ),
            "{err}"
        );
        let err = refused(&|d| d.phases[3].wall_seconds = 7200.0, at);
        assert!(
            err.contains("ends at 2026-12-01T13:00:0") && err.contains("later than now"),
            "{err}"
        );
        // The clock skew allowed, to the second.
        let skew = now + CLOCK_SKEW;
        let mut instant = good.clone();
        instant.device_init_seconds = 0.0;
        for row in &mut instant.phases {
            row.wall_seconds = 0.0;
            row.device_seconds = None;
        }
        assert_eq!(check_real_run(&instant, &package, skew, now), Ok(()));
        assert!(check_real_run(&instant, &package, skew + Duration::from_secs(1), now).is_err());
        // A time of exactly the package's length is possible, one more second is not.
        let mut long = instant.clone();
        long.phases[3].wall_seconds = day3;
        assert_eq!(
            check_real_run(&long, &package, at - Duration::from_secs(4 * 86_400), now),
            Ok(())
        );
        // A document without a check is judged on the rest.
        let mut unchecked = good.clone();
        unchecked.check = None;
        assert_eq!(check_real_run(&unchecked, &package, at, now), Ok(()));
        assert_eq!(figure(0.25), "0.25");
        assert_eq!(figure(1e-9), "1e-9");
    }

    proptest! {
        #[test]
        fn threshold_matches_integer_arithmetic(
            submitted in 1u64..1_000_000,
            accepted_frac in 0u64..=1000,
            rate_thousandths in 1u64..=1000,
        ) {
            let accepted = submitted * accepted_frac / 1000;
            let rate = Decimal::new(rate_thousandths as i64, 3);
            let expected = accepted * 1000 >= rate_thousandths * submitted;
            prop_assert_eq!(threshold_met(accepted, submitted, rate), expected);
        }
    }
}
