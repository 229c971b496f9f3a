//! The raw results grid (`data/resultats-bruts.csv`): one row per real run, never edited by the
//! tool, only appended to.
//!
//! Appends are safe with any number of concurrent writers: the file is opened in append mode and
//! locked exclusively (`File::lock`, an OS advisory lock every `iteragpu` honours); under the lock
//! the whole grid is read and checked (header, every row, the measurement not yet recorded), then
//! the new row goes out in one `write_all` and is synced before the lock is released.

use std::io::{Read, Write};
use std::path::Path;
use std::str::FromStr;

use serde::Serialize;

use crate::error::LedgerError;

/// The grid's columns, in order; the first line of the file must be exactly these.
pub const HEADER: [&str; 16] = [
    "run_id",
    "date_utc",
    "protocol_sha256",
    "corpus_id",
    "gpu",
    "days",
    "lots",
    "device_model",
    "device_uuid",
    "driver_version",
    "measurement_sha256",
    "units_submitted",
    "units_accepted",
    "acceptance_threshold",
    "threshold_met",
    "notes",
];

/// Package durations the catalogue sells, in days.
pub const DAYS: [u32; 3] = [3, 7, 30];

/// The header line as it is written.
pub fn header_line() -> String {
    HEADER.join(",")
}

/// A rented package: GPU model slug, duration and number of lots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Package {
    /// Catalogue slug, e.g. `b200` (lower case).
    pub gpu: String,
    /// 3, 7 or 30.
    pub days: u32,
    /// 1 or more.
    pub lots: u32,
}

impl Package {
    /// Checks each part; used for `GPU:DAYS:LOTS` and for rows read back.
    pub fn new(gpu: &str, days: &str, lots: &str) -> Result<Package, LedgerError> {
        let value = format!("{gpu}:{days}:{lots}");
        let bad = |reason: String| LedgerError::BadPackage {
            value: value.clone(),
            reason,
        };
        let gpu = gpu.trim().to_ascii_lowercase();
        if gpu.is_empty()
            || !gpu
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(bad(format!(
                "the GPU {gpu:?} must be a catalogue slug such as b200 (letters, digits, - _ .)"
            )));
        }
        let days = days
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|d| DAYS.contains(d))
            .ok_or_else(|| bad(format!("days must be 3, 7 or 30, not {days:?}")))?;
        let lots = lots
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|l| *l >= 1)
            .ok_or_else(|| bad(format!("lots must be a whole number >= 1, not {lots:?}")))?;
        Ok(Package { gpu, days, lots })
    }
}

impl FromStr for Package {
    type Err = LedgerError;

    fn from_str(s: &str) -> Result<Package, LedgerError> {
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            [gpu, days, lots] => Package::new(gpu, days, lots),
            _ => Err(LedgerError::BadPackage {
                value: s.to_string(),
                reason: "expected GPU:DAYS:LOTS, e.g. b200:7:2".into(),
            }),
        }
    }
}

impl std::fmt::Display for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.gpu, self.days, self.lots)
    }
}

/// One run in the grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// First 12 hex digits of the measurement's SHA-256.
    pub run_id: String,
    /// When the measured run started, UTC (`2026-09-24T08:15:00Z`).
    pub date_utc: String,
    /// SHA-256 of the locked protocol.
    pub protocol_sha256: String,
    /// The protocol's corpus.
    pub corpus_id: String,
    /// The package.
    #[serde(flatten)]
    pub package: Package,
    /// GPU name, or the CPU model for the CPU reference device.
    pub device_model: String,
    /// GPU UUID, or `cpu-reference`.
    pub device_uuid: String,
    /// Driver version (`none` for the CPU reference device).
    pub driver_version: String,
    /// SHA-256 of the measurement file's bytes.
    pub measurement_sha256: String,
    /// Units submitted to the judge.
    pub units_submitted: u64,
    /// Units the judge accepted (<= submitted).
    pub units_accepted: u64,
    /// The protocol's minimum acceptance rate.
    pub acceptance_threshold: String,
    /// `accepted / submitted >= threshold`, exactly.
    pub threshold_met: bool,
    /// Free text, one line.
    pub notes: String,
}

impl Row {
    /// The row's fields in [`HEADER`] order.
    pub fn fields(&self) -> [String; 16] {
        [
            self.run_id.clone(),
            self.date_utc.clone(),
            self.protocol_sha256.clone(),
            self.corpus_id.clone(),
            self.package.gpu.clone(),
            self.package.days.to_string(),
            self.package.lots.to_string(),
            self.device_model.clone(),
            self.device_uuid.clone(),
            self.driver_version.clone(),
            self.measurement_sha256.clone(),
            self.units_submitted.to_string(),
            self.units_accepted.to_string(),
            self.acceptance_threshold.clone(),
            self.threshold_met.to_string(),
            self.notes.clone(),
        ]
    }

    /// The row as one CSV line with its LF (quoted where a field needs it).
    pub fn to_line(&self) -> Vec<u8> {
        let mut out = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(Vec::new());
        // Writing to a Vec cannot fail.
        let _ = out.write_record(self.fields());
        out.into_inner().unwrap_or_default()
    }

    /// Reads a row back, checking every field's form.
    fn from_record(record: &csv::StringRecord) -> Result<Row, String> {
        if record.len() != HEADER.len() {
            return Err(format!(
                "{} fields, the header has {}",
                record.len(),
                HEADER.len()
            ));
        }
        let f = |i: usize| record.get(i).unwrap_or("").to_string();
        let count = |i: usize| {
            f(i).parse::<u64>()
                .map_err(|_| format!("{} {:?} is not a whole number", HEADER[i], f(i)))
        };
        let package = Package::new(&f(4), &f(5), &f(6)).map_err(|e| e.to_string())?;
        let threshold_met = match f(14).as_str() {
            "true" => true,
            "false" => false,
            other => return Err(format!("threshold_met {other:?} is not true or false")),
        };
        let row = Row {
            run_id: f(0),
            date_utc: f(1),
            protocol_sha256: f(2),
            corpus_id: f(3),
            package,
            device_model: f(7),
            device_uuid: f(8),
            driver_version: f(9),
            measurement_sha256: f(10),
            units_submitted: count(11)?,
            units_accepted: count(12)?,
            acceptance_threshold: f(13),
            threshold_met,
            notes: f(15),
        };
        if row.units_accepted > row.units_submitted {
            return Err(format!(
                "units_accepted {} exceeds units_submitted {}",
                row.units_accepted, row.units_submitted
            ));
        }
        let is_sha = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_sha(&row.measurement_sha256) {
            return Err(format!(
                "measurement_sha256 {:?} is not a SHA-256",
                row.measurement_sha256
            ));
        }
        Ok(row)
    }
}

/// A row read back with its line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineRow {
    /// 1-based line in the file.
    pub line: u64,
    /// The row.
    pub row: Row,
}

/// Parses a whole grid: the exact header, then rows that fit it.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<LineRow>, LedgerError> {
    let expected = header_line();
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    if first != expected.as_bytes() {
        return Err(LedgerError::Header {
            path: path.to_path_buf(),
            expected,
            found: String::from_utf8_lossy(first).into_owned(),
        });
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(bytes);
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| LedgerError::BadRow {
            path: path.to_path_buf(),
            line: e.position().map_or(0, |p| p.line()),
            reason: e.to_string(),
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let row = Row::from_record(&record).map_err(|reason| LedgerError::BadRow {
            path: path.to_path_buf(),
            line,
            reason,
        })?;
        rows.push(LineRow { line, row });
    }
    Ok(rows)
}

/// Reads a grid file.
pub fn read(path: &Path) -> Result<Vec<LineRow>, LedgerError> {
    let bytes = std::fs::read(path).map_err(LedgerError::io(path))?;
    parse(path, &bytes)
}

/// Where an appended row landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// 1-based line of the new row.
    pub line: u64,
    /// True when the grid did not exist (or was empty) and the header was written first.
    pub created: bool,
}

/// Appends `row` to the grid at `path` under an exclusive lock, after checking the grid and that
/// the measurement is not in it yet. A missing or empty file gets the header first.
pub fn append(path: &Path, row: &Row) -> Result<Appended, LedgerError> {
    let io = LedgerError::io(path);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(LedgerError::io(path))?;
    file.lock().map_err(LedgerError::io(path))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(LedgerError::io(path))?;

    let mut out = Vec::new();
    let created = bytes.is_empty();
    let line = if created {
        out.extend_from_slice(header_line().as_bytes());
        out.push(b'\n');
        2
    } else {
        let rows = parse(path, &bytes)?;
        if let Some(existing) = rows
            .iter()
            .find(|r| r.row.measurement_sha256 == row.measurement_sha256)
        {
            return Err(LedgerError::AlreadyRecorded {
                path: path.to_path_buf(),
                sha256: row.measurement_sha256.clone(),
                run_id: existing.row.run_id.clone(),
                line: existing.line,
            });
        }
        if !bytes.ends_with(b"\n") {
            out.push(b'\n');
        }
        // Lines so far (a last line without its LF counts too), plus one.
        let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64
            + u64::from(!bytes.ends_with(b"\n"));
        lines + 1
    };
    out.extend_from_slice(&row.to_line());
    file.write_all(&out)
        .and_then(|()| file.sync_data())
        .map_err(io)?;
    // Closing the file releases the lock too; unlocking explicitly says when.
    let _ = file.unlock();
    Ok(Appended { line, created })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn row(sha_byte: u8) -> Row {
        let sha = format!("{sha_byte:02x}").repeat(32);
        Row {
            run_id: sha[..12].to_string(),
            date_utc: "2026-09-24T08:15:00Z".into(),
            protocol_sha256: "ab".repeat(32),
            corpus_id: "tickets-v3".into(),
            package: "b200:7:2".parse().unwrap(),
            device_model: "Intel(R) Xeon(R), 2.2 GHz".into(),
            device_uuid: "cpu-reference".into(),
            driver_version: "none".into(),
            measurement_sha256: sha,
            units_submitted: 10,
            units_accepted: 9,
            acceptance_threshold: "0.9".into(),
            threshold_met: true,
            notes: "quoted \"notes\", with a comma".into(),
        }
    }

    #[test]
    fn the_repository_grid_has_this_header() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/resultats-bruts.csv"
        ));
        assert_eq!(text.lines().next(), Some(header_line().as_str()));
        assert!(parse(Path::new("data/resultats-bruts.csv"), text.as_bytes()).is_ok());
    }

    #[test]
    fn packages() {
        let p: Package = "B200:7:2".parse().unwrap();
        assert_eq!(p.to_string(), "b200:7:2");
        for bad in [
            "b200:5:1",
            "b200:7:0",
            "b200:7",
            ":7:1",
            "b200:7:x",
            "b 200:3:1",
        ] {
            assert!(bad.parse::<Package>().is_err(), "{bad}");
        }
        let err = "b200:5:1".parse::<Package>().unwrap_err().to_string();
        assert!(err.contains("3, 7 or 30"), "{err}");
    }

    #[test]
    fn rows_round_trip_through_csv() {
        let r = row(1);
        let mut grid = format!("{}\n", header_line()).into_bytes();
        grid.extend(r.to_line());
        let rows = parse(Path::new("g.csv"), &grid).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].line, 2);
        assert_eq!(rows[0].row, r);
    }

    #[test]
    fn append_creates_checks_and_refuses_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        assert_eq!(
            append(&path, &row(1)).unwrap(),
            Appended {
                line: 2,
                created: true
            }
        );
        assert_eq!(append(&path, &row(2)).unwrap().line, 3);
        let err = append(&path, &row(1)).unwrap_err();
        assert!(
            matches!(err, LedgerError::AlreadyRecorded { line: 2, .. }),
            "{err}"
        );
        assert_eq!(read(&path).unwrap().len(), 2);

        std::fs::write(&path, "run_id,date\n").unwrap();
        assert!(matches!(
            append(&path, &row(3)),
            Err(LedgerError::Header { .. })
        ));

        std::fs::write(&path, format!("{}\na,b,c\n", header_line())).unwrap();
        let err = append(&path, &row(3)).unwrap_err().to_string();
        assert!(err.contains("line 2: 3 fields"), "{err}");
    }

    #[test]
    fn threads_appending_at_once_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let path = &path;
                s.spawn(move || {
                    for i in 0..25u8 {
                        append(path, &row(t * 25 + i)).unwrap();
                    }
                });
            }
        });
        let rows = read(&path).unwrap();
        assert_eq!(rows.len(), 100);
        let distinct: std::collections::BTreeSet<_> =
            rows.iter().map(|r| &r.row.measurement_sha256).collect();
        assert_eq!(distinct.len(), 100);
    }
}
