//! `record`: one run, checked against its locked protocol, appended to the grid.

use std::path::{Path, PathBuf};

use lab::measure::document::{MEASUREMENT_SCHEMA, MeasurementDocument};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::error::LedgerError;
use crate::grid::{self, Package, Row};
use crate::protocol;

/// The SHA-256 of `bytes`, as 64 lower-case hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Everything `record` is given.
#[derive(Debug, Clone)]
pub struct RecordRequest {
    /// The results grid.
    pub results: PathBuf,
    /// The locked protocol.
    pub protocol: PathBuf,
    /// The measurement document.
    pub measurement: PathBuf,
    /// The rented package.
    pub package: Package,
    /// Units submitted to the judge.
    pub submitted: u64,
    /// Units the judge accepted.
    pub accepted: u64,
    /// Free text, one line.
    pub notes: Option<String>,
}

/// What `record` appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The row.
    pub row: Row,
    /// Its line in the grid.
    pub line: u64,
    /// True when the grid was created for it.
    pub created: bool,
}

/// `accepted / submitted >= rate`, exactly (no division, no rounding).
pub fn threshold_met(accepted: u64, submitted: u64, rate: Decimal) -> bool {
    submitted > 0 && Decimal::from(accepted) >= rate * Decimal::from(submitted)
}

/// Reads a measurement file: its SHA-256 and its document, which must be complete.
fn load_measurement(path: &Path) -> Result<(String, MeasurementDocument), LedgerError> {
    let bytes = std::fs::read(path).map_err(LedgerError::io(path))?;
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
            "schema {schema:?}, expected {MEASUREMENT_SCHEMA:?} (a file written by `iteragpu measure`)"
        )));
    }
    if value.get("complete").and_then(|c| c.as_bool()) != Some(true) {
        let reason = value
            .pointer("/error/message")
            .and_then(|m| m.as_str())
            .map(|m| format!(", {m}"))
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

/// Checks the request, the protocol and the measurement, and appends the row.
pub fn record(req: &RecordRequest) -> Result<Recorded, LedgerError> {
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
    let notes = req.notes.clone().unwrap_or_default();
    if notes.chars().any(char::is_control) {
        return Err(LedgerError::Notes);
    }
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
                doc.started_utc
            ),
        })?;
    let device = crate::device::identify(&doc.environment);
    let row = Row {
        run_id: sha[..12].to_string(),
        date_utc: crate::time::utc_seconds(started),
        protocol_sha256: locked.lock.protocol_sha256.clone(),
        corpus_id: locked.protocol.corpus_id.clone(),
        package: req.package.clone(),
        device_model: device.model,
        device_uuid: device.uuid,
        driver_version: device.driver,
        measurement_sha256: sha,
        units_submitted: req.submitted,
        units_accepted: req.accepted,
        acceptance_threshold: locked.checked.rate.to_string(),
        threshold_met: threshold_met(req.accepted, req.submitted, locked.checked.rate),
        notes,
    };
    let appended = grid::append(&req.results, &row)?;
    Ok(Recorded {
        row,
        line: appended.line,
        created: appended.created,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
