//! `record`: one run, checked against its locked protocol, its rental's package in the tariff
//! catalogue and the device it was measured on, then added to the grid.

use std::path::{Path, PathBuf};

use lab::catalogue::Catalogue;
use lab::measure::document::{
    MEASUREMENT_KIND, MEASUREMENT_LIMIT, MEASUREMENT_SCHEMA, MeasurementDocument,
};
use lab::text::{neutralise_cell, printable};

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
    let bytes = lab::files::read_bounded(path, MEASUREMENT_LIMIT, MEASUREMENT_KIND)?;
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
                    std::fs::read_link(&current).map_err(|e| lab::files::OutputError::Io {
                        path: current.clone(),
                        reason: lab::files::os_message(&e),
                    })?;
                if current.metadata().is_err() {
                    return Err(lab::files::OutputError::DanglingLink(path.to_path_buf()).into());
                }
                current = lab::files::folder_of(&current).join(target);
            }
            _ => break,
        }
    }
    lab::files::check_replace(&current)?;
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
    if notes.chars().any(lab::text::is_unsafe_char) || notes.chars().count() > NOTES_MAX {
        return Err(LedgerError::Notes { max: NOTES_MAX });
    }
    // The package must be one the catalogue sells, or `cost` could never price the row.
    let quote = lab::price::quote(
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
