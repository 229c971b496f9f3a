//! The quality protocol: written and locked before the test, so that what counts as an accepted
//! result cannot be adjusted to the results.
//!
//! # File format
//!
//! A plain text file, one field per line, `key = value`: the value is the rest of the line with
//! surrounding spaces removed (no quoting; `=` inside a value is fine). Blank lines and lines
//! starting with `#` are comments. Every field of [`FIELDS`] must appear exactly once; unknown keys
//! are refused (a typo would otherwise silently leave a field empty).
//!
//! # Lock
//!
//! `protocol lock FILE` checks that no field is empty and that the numbers, the identifiers, the
//! rule and the date have their form, then writes `FILE.lock`, a JSON document holding the
//! SHA-256 of the protocol's exact bytes (comments included) and the UTC time of the lock. Both
//! the protocol (`init`) and its lock are written whole or not at all (a temporary file, flushed,
//! then linked into place), and never over an existing file: a protocol is locked once, and an
//! interrupted lock leaves no lock rather than an empty one. [`load_locked`] re-hashes the file
//! and refuses it if a single byte changed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use lab_io::files::{self, OutputError};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::hash::sha256_hex;

/// Schema identifier of lock files.
pub const LOCK_SCHEMA: &str = "iteragpu.protocol-lock/1";

/// The largest protocol file read (a filled-in one is a few KiB).
pub const PROTOCOL_LIMIT: u64 = 1 << 20;
/// The largest lock file read (a real one is about 300 bytes).
pub const LOCK_LIMIT: u64 = 64 << 10;

/// The fields, in file order, with the help line written above each one.
pub const FIELDS: [(&str, &str); 10] = [
    (
        "useful_unit",
        "What one useful unit of work is, e.g. \"one support ticket classified into one of 12 queues\".",
    ),
    (
        "acceptance_criterion",
        "How a judge decides that one unit is accepted, e.g. \"the queue matches the reference label\".",
    ),
    (
        "minimum_acceptance_rate",
        "Share of submitted units that must be accepted for a run to count: a decimal in (0, 1], e.g. 0.95.",
    ),
    (
        "corpus_id",
        "Identifier of the corpus the units come from: letters, digits and . _ - : (a name and version, or a file hash).",
    ),
    (
        "corpus_description",
        "What the corpus is and where it comes from, in one line.",
    ),
    (
        "corpus_size",
        "Number of distinct units in the corpus: a whole number >= 1.",
    ),
    (
        "judged_by",
        "Who or what judges acceptance (a person's role, a reference file, a script and its version).",
    ),
    (
        "distinctness_rule",
        "What makes two units distinct; repeats of the same unit or benchmark are not new units.",
    ),
    (
        "aggregation",
        "Which run counts when the corpus runs more than once on one rental (of the runs meeting minimum_acceptance_rate): best, last or mean (rounded down).",
    ),
    (
        "date",
        "The day this protocol was written, YYYY-MM-DD (UTC).",
    ),
];

/// Which of a corpus's runs on one rental gives its accepted units: the protocol's
/// `aggregation`. Only runs that met the protocol's threshold take part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// The run with the most accepted units.
    Best,
    /// The run recorded last (lowest in the grid).
    Last,
    /// The mean of the runs' accepted units, rounded down to a whole unit.
    Mean,
}

impl Aggregation {
    /// All rules, in the order the help names them.
    pub const ALL: [Aggregation; 3] = [Aggregation::Best, Aggregation::Last, Aggregation::Mean];

    /// The word in the protocol and the grid.
    pub fn name(self) -> &'static str {
        match self {
            Aggregation::Best => "best",
            Aggregation::Last => "last",
            Aggregation::Mean => "mean",
        }
    }

    /// Reads the word.
    pub fn parse(text: &str) -> Option<Aggregation> {
        Aggregation::ALL.into_iter().find(|a| a.name() == text)
    }

    /// The accepted units of `runs` (accepted counts in grid order) under this rule; `None`
    /// without runs.
    pub fn apply(self, runs: &[u64]) -> Option<u64> {
        let last = *runs.last()?;
        Some(match self {
            Aggregation::Best => runs.iter().copied().max().unwrap_or(last),
            Aggregation::Last => last,
            Aggregation::Mean => {
                let sum: u128 = runs.iter().map(|&r| u128::from(r)).sum();
                // The mean of u64 values fits a u64.
                u64::try_from(sum / runs.len() as u128).unwrap_or(u64::MAX)
            }
        })
    }

    /// How the rule reads in `cost`: "best of", "last of", "mean (rounded down) of".
    pub fn of(self) -> &'static str {
        match self {
            Aggregation::Best => "best of",
            Aggregation::Last => "last of",
            Aggregation::Mean => "mean (rounded down) of",
        }
    }
}

impl std::fmt::Display for Aggregation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// True for an identifier the grid can hold as it is: 1 to 128 ASCII letters, digits and
/// `. _ - :`, starting with a letter or digit (so it never starts like a spreadsheet formula).
pub fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text.as_bytes()[0].is_ascii_alphanumeric()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

/// A protocol as read from its file; values may still be empty (see [`Protocol::check`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protocol {
    /// What one useful unit is.
    pub useful_unit: String,
    /// How a unit is accepted.
    pub acceptance_criterion: String,
    /// Minimum accepted share, as written.
    pub minimum_acceptance_rate: String,
    /// The corpus's identifier.
    pub corpus_id: String,
    /// The corpus in words.
    pub corpus_description: String,
    /// Distinct units in the corpus, as written.
    pub corpus_size: String,
    /// Who judges.
    pub judged_by: String,
    /// What makes units distinct.
    pub distinctness_rule: String,
    /// Which runs of a corpus count (`best`, `last`, `mean`), as written.
    pub aggregation: String,
    /// When the protocol was written.
    pub date: String,
}

/// The numbers of a checked protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// `minimum_acceptance_rate`, in (0, 1].
    pub rate: Decimal,
    /// `corpus_size`, >= 1.
    pub corpus_size: u64,
    /// `aggregation`.
    pub aggregation: Aggregation,
}

impl Protocol {
    fn fields_mut(&mut self) -> [(&'static str, &mut String); 10] {
        [
            ("useful_unit", &mut self.useful_unit),
            ("acceptance_criterion", &mut self.acceptance_criterion),
            ("minimum_acceptance_rate", &mut self.minimum_acceptance_rate),
            ("corpus_id", &mut self.corpus_id),
            ("corpus_description", &mut self.corpus_description),
            ("corpus_size", &mut self.corpus_size),
            ("judged_by", &mut self.judged_by),
            ("distinctness_rule", &mut self.distinctness_rule),
            ("aggregation", &mut self.aggregation),
            ("date", &mut self.date),
        ]
    }

    /// Field names and values, in file order.
    pub fn fields(&self) -> [(&'static str, &str); 10] {
        [
            ("useful_unit", &self.useful_unit),
            ("acceptance_criterion", &self.acceptance_criterion),
            ("minimum_acceptance_rate", &self.minimum_acceptance_rate),
            ("corpus_id", &self.corpus_id),
            ("corpus_description", &self.corpus_description),
            ("corpus_size", &self.corpus_size),
            ("judged_by", &self.judged_by),
            ("distinctness_rule", &self.distinctness_rule),
            ("aggregation", &self.aggregation),
            ("date", &self.date),
        ]
    }

    /// Reads the text of a protocol file (see the module docs for the format).
    pub fn parse(path: &Path, text: &str) -> Result<Protocol, LedgerError> {
        let syntax = |line: usize, message: String| LedgerError::ProtocolSyntax {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut protocol = Protocol {
            useful_unit: String::new(),
            acceptance_criterion: String::new(),
            minimum_acceptance_rate: String::new(),
            corpus_id: String::new(),
            corpus_description: String::new(),
            corpus_size: String::new(),
            judged_by: String::new(),
            distinctness_rule: String::new(),
            aggregation: String::new(),
            date: String::new(),
        };
        let mut seen = [false; FIELDS.len()];
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(syntax(
                    n + 1,
                    format!("{line:?} is not `key = value` (comments start with #)"),
                ));
            };
            let key = key.trim();
            let fields = protocol.fields_mut();
            let Some(i) = fields.iter().position(|(k, _)| *k == key) else {
                return Err(syntax(
                    n + 1,
                    format!(
                        "unknown field {key:?}; the fields are {}",
                        FIELDS.map(|(k, _)| k).join(", ")
                    ),
                ));
            };
            if seen[i] {
                return Err(syntax(n + 1, format!("{key} is given twice")));
            }
            seen[i] = true;
            *fields[i].1 = value.trim().to_string();
        }
        let missing: Vec<&str> = FIELDS
            .iter()
            .zip(seen)
            .filter(|(_, s)| !s)
            .map(|((k, _), _)| *k)
            .collect();
        if !missing.is_empty() {
            return Err(syntax(
                0,
                format!("missing field(s) {}", missing.join(", ")),
            ));
        }
        Ok(protocol)
    }

    /// Checks what `lock` requires: no empty field, a rate in (0, 1], a whole corpus size >= 1
    /// and a real date.
    pub fn check(&self, path: &Path) -> Result<Checked, LedgerError> {
        let empty: Vec<String> = self
            .fields()
            .iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(k, _)| k.to_string())
            .collect();
        if !empty.is_empty() {
            return Err(LedgerError::EmptyFields {
                path: path.to_path_buf(),
                fields: empty,
            });
        }
        if let Some((field, value)) = self
            .fields()
            .into_iter()
            .find(|(_, v)| v.chars().any(lab_io::text::is_unsafe_char))
        {
            return Err(LedgerError::BadField {
                field: field.into(),
                value: value.to_string(),
                expected: "text without control characters or bidirectional overrides".into(),
            });
        }
        let rate = parse_rate(&self.minimum_acceptance_rate)?;
        if !is_identifier(&self.corpus_id) {
            return Err(LedgerError::BadField {
                field: "corpus_id".into(),
                value: self.corpus_id.clone(),
                expected: "an identifier of 1 to 128 letters, digits and . _ - :, starting with a \
                           letter or digit, such as tickets-v3"
                    .into(),
            });
        }
        let aggregation =
            Aggregation::parse(&self.aggregation).ok_or_else(|| LedgerError::BadField {
                field: "aggregation".into(),
                value: self.aggregation.clone(),
                expected: "best, last or mean".into(),
            })?;
        let corpus_size = self
            .corpus_size
            .parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| LedgerError::BadField {
                field: "corpus_size".into(),
                value: self.corpus_size.clone(),
                expected: "a whole number of distinct units, 1 or more".into(),
            })?;
        if !crate::time::is_date(&self.date) {
            return Err(LedgerError::BadField {
                field: "date".into(),
                value: self.date.clone(),
                expected: "a calendar date written YYYY-MM-DD".into(),
            });
        }
        Ok(Checked {
            rate,
            corpus_size,
            aggregation,
        })
    }
}

/// Reads a minimum acceptance rate: a plain decimal in (0, 1].
pub fn parse_rate(text: &str) -> Result<Decimal, LedgerError> {
    let bad = || LedgerError::BadField {
        field: "minimum_acceptance_rate".into(),
        value: text.to_string(),
        expected: "a decimal greater than 0 and at most 1, such as 0.95 (not a percentage)".into(),
    };
    let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !plain {
        return Err(bad());
    }
    let rate: Decimal = text.parse().map_err(|_| bad())?;
    if rate > Decimal::ZERO && rate <= Decimal::ONE {
        Ok(rate.normalize())
    } else {
        Err(bad())
    }
}

/// The text `protocol init` writes: every field with its help line, `date` set to `today`.
pub fn template(today: &str) -> String {
    let mut text = String::from(
        "# IteraGPU Lab quality protocol.\n\
         # Fill in every field BEFORE the test, then lock it: iteragpu protocol lock FILE\n\
         # Format: one `key = value` per line (the value is the rest of the line); lines starting\n\
         # with # are comments. Once locked, any change to this file, comments included, makes\n\
         # `iteragpu record` refuse it: write a new protocol instead.\n",
    );
    for (key, help) in FIELDS {
        let value = if key == "date" { today } else { "" };
        text.push_str(&format!("\n# {help}\n{key} = {value}\n"));
    }
    text.replace(" \n", "\n")
}

/// Writes a fresh protocol to fill in, whole or not at all; never overwrites.
pub fn init(path: &Path, now: SystemTime) -> Result<lab_io::files::Written, LedgerError> {
    files::write_new(path, template(&crate::time::utc_date(now)).as_bytes()).map_err(|e| match e {
        OutputError::Exists(p) => LedgerError::ProtocolExists(p),
        other => other.into(),
    })
}

/// The lock file of a protocol: `FILE.lock` next to it.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// What `protocol lock` writes next to the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// Always [`LOCK_SCHEMA`].
    pub schema: String,
    /// The protocol's file name when it was locked (for a reader; the hash is what binds).
    pub protocol_file: String,
    /// SHA-256 of the protocol's exact bytes.
    pub protocol_sha256: String,
    /// When it was locked, UTC.
    pub locked_utc: String,
    /// The tool version that locked it.
    pub tool_version: String,
}

/// Reads a protocol file within [`PROTOCOL_LIMIT`].
fn read_protocol(path: &Path) -> Result<Vec<u8>, LedgerError> {
    Ok(files::read_bounded(
        path,
        PROTOCOL_LIMIT,
        "a protocol file",
    )?)
}

/// Checks a filled-in protocol and locks it; refuses empty fields and a second lock. The lock
/// appears whole (flushed to disk first) or not at all, so a kill or a full disk at any moment
/// leaves the protocol lockable.
pub fn lock(
    path: &Path,
    now: SystemTime,
    tool_version: &str,
) -> Result<(Lock, lab_io::files::Written), LedgerError> {
    let bytes = read_protocol(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| LedgerError::ProtocolSyntax {
        path: path.to_path_buf(),
        line: 0,
        message: "the file is not UTF-8 text".into(),
    })?;
    Protocol::parse(path, text)?.check(path)?;
    let lock_file = lock_path(path);
    if lock_file.symlink_metadata().is_ok() {
        let existing = read_lock(&lock_file)?;
        return Err(LedgerError::AlreadyLocked {
            path: path.to_path_buf(),
            lock: lock_file,
            locked_utc: existing.locked_utc,
        });
    }
    let lock = Lock {
        schema: LOCK_SCHEMA.to_string(),
        protocol_file: path
            .file_name()
            .map(|n| lab_io::text::printable(&n.to_string_lossy()).into_owned())
            .unwrap_or_default(),
        protocol_sha256: sha256_hex(&bytes),
        locked_utc: crate::time::utc_seconds(now),
        tool_version: tool_version.to_string(),
    };
    let mut text = serde_json::to_string_pretty(&lock).map_err(|e| LedgerError::LockInvalid {
        path: lock_file.clone(),
        reason: e.to_string(),
    })?;
    text.push('\n');
    let written = files::write_new(&lock_file, text.as_bytes()).map_err(|e| match e {
        // Another `protocol lock` won the race.
        OutputError::Exists(_) => LedgerError::AlreadyLocked {
            path: path.to_path_buf(),
            lock: lock_file.clone(),
            locked_utc: read_lock(&lock_file)
                .map(|l| l.locked_utc)
                .unwrap_or_else(|_| "this very moment, by another process".into()),
        },
        other => other.into(),
    })?;
    Ok((lock, written))
}

fn read_lock(lock_file: &Path) -> Result<Lock, LedgerError> {
    let bytes = files::read_bounded(lock_file, LOCK_LIMIT, "a protocol lock")?;
    let invalid = |reason: String| LedgerError::LockInvalid {
        path: lock_file.to_path_buf(),
        reason,
    };
    if bytes.is_empty() {
        return Err(invalid(
            "it is empty (a lock interrupted by an earlier version of iteragpu); no lock was \
             made: remove it and run `iteragpu protocol lock` again"
                .into(),
        ));
    }
    let lock: Lock = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    if lock.schema != LOCK_SCHEMA {
        return Err(invalid(format!(
            "schema {:?}, expected {LOCK_SCHEMA:?}",
            lock.schema
        )));
    }
    if !crate::hash::is_sha256(&lock.protocol_sha256) {
        return Err(invalid(format!(
            "protocol_sha256 {:?} is not a SHA-256",
            lock.protocol_sha256
        )));
    }
    Ok(lock)
}

/// A protocol whose bytes match its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedProtocol {
    /// The fields.
    pub protocol: Protocol,
    /// Its numbers.
    pub checked: Checked,
    /// Its lock.
    pub lock: Lock,
}

/// Loads a protocol for recording: it must be locked and unchanged since.
pub fn load_locked(path: &Path) -> Result<LockedProtocol, LedgerError> {
    let bytes = read_protocol(path)?;
    let lock_file = lock_path(path);
    if lock_file.symlink_metadata().is_err() {
        return Err(LedgerError::NotLocked {
            path: path.to_path_buf(),
            lock: lock_file,
        });
    }
    let lock = read_lock(&lock_file)?;
    let current = sha256_hex(&bytes);
    if current != lock.protocol_sha256 {
        return Err(LedgerError::ProtocolChanged {
            path: path.to_path_buf(),
            locked: lock.protocol_sha256,
            current,
            locked_utc: lock.locked_utc,
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    let protocol = Protocol::parse(path, &text)?;
    let checked = protocol.check(path)?;
    Ok(LockedProtocol {
        protocol,
        checked,
        lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn filled() -> String {
        template("2026-09-24")
            .replace("useful_unit =\n", "useful_unit = one ticket routed\n")
            .replace(
                "acceptance_criterion =\n",
                "acceptance_criterion = queue = label\n",
            )
            .replace(
                "minimum_acceptance_rate =\n",
                "minimum_acceptance_rate = 0.90\n",
            )
            .replace("corpus_id =\n", "corpus_id = tickets-v3\n")
            .replace(
                "corpus_description =\n",
                "corpus_description = 500 tickets\n",
            )
            .replace("corpus_size =\n", "corpus_size = 500\n")
            .replace("judged_by =\n", "judged_by = reference labels v3\n")
            .replace(
                "distinctness_rule =\n",
                "distinctness_rule = one ticket id\n",
            )
            .replace("aggregation =\n", "aggregation = best\n")
    }

    #[test]
    fn template_round_trips_and_is_empty_but_the_date() {
        let p = Path::new("p.txt");
        let protocol = Protocol::parse(p, &template("2026-09-24")).unwrap();
        assert_eq!(protocol.date, "2026-09-24");
        let err = protocol.check(p).unwrap_err().to_string();
        assert!(
            err.contains("fill in useful_unit, acceptance_criterion"),
            "{err}"
        );
        assert!(!err.contains("date"), "{err}");
    }

    #[test]
    fn filled_protocol_checks() {
        let p = Path::new("p.txt");
        let protocol = Protocol::parse(p, &filled()).unwrap();
        assert_eq!(protocol.acceptance_criterion, "queue = label");
        let checked = protocol.check(p).unwrap();
        assert_eq!(checked.rate.to_string(), "0.9");
        assert_eq!(checked.corpus_size, 500);
        assert_eq!(checked.aggregation, Aggregation::Best);
    }

    #[test]
    fn the_rule_and_the_corpus_id_have_their_form() {
        let p = Path::new("p.txt");
        for (from, to, field) in [
            ("aggregation = best", "aggregation = max", "aggregation"),
            (
                "corpus_id = tickets-v3",
                "corpus_id = =HYPERLINK(1)",
                "corpus_id",
            ),
            (
                "corpus_id = tickets-v3",
                "corpus_id = tickets v3",
                "corpus_id",
            ),
            (
                "corpus_description = 500 tickets",
                "corpus_description = 500 \u{1b}[31mtickets",
                "corpus_description",
            ),
        ] {
            let err = Protocol::parse(p, &filled().replace(from, to))
                .unwrap()
                .check(p)
                .unwrap_err();
            assert!(
                matches!(&err, LedgerError::BadField { field: f, .. } if f == field),
                "{err}"
            );
        }
    }

    #[test]
    fn rules_count_the_runs_that_met_the_threshold() {
        let runs = [473, 480, 468];
        assert_eq!(Aggregation::Best.apply(&runs), Some(480));
        assert_eq!(Aggregation::Last.apply(&runs), Some(468));
        assert_eq!(Aggregation::Mean.apply(&runs), Some(473)); // 1421 / 3 = 473.67
        assert_eq!(
            Aggregation::Mean.apply(&[u64::MAX, u64::MAX]),
            Some(u64::MAX)
        );
        for rule in Aggregation::ALL {
            assert_eq!(rule.apply(&[]), None);
            assert_eq!(Aggregation::parse(rule.name()), Some(rule));
        }
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let p = Path::new("p.txt");
        let text = format!("{}\ncolour = blue\n", filled());
        let err = Protocol::parse(p, &text).unwrap_err().to_string();
        assert!(err.contains("unknown field \"colour\""), "{err}");
        let text = format!("{}\ndate = 2026-09-25\n", filled());
        assert!(
            Protocol::parse(p, &text)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        let err = Protocol::parse(p, "useful_unit = x\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing field(s) acceptance_criterion"),
            "{err}"
        );
        let err = Protocol::parse(p, "just words\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1").unwrap(), Decimal::ONE);
        assert_eq!(parse_rate("0.950").unwrap().to_string(), "0.95");
        for bad in ["0", "0.0", "1.01", "95%", "-0.5", "", "1e-1", " 0.5"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lock_once_and_detect_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("protocol.txt");
        let _ = init(&path, SystemTime::now()).unwrap();
        assert!(matches!(
            init(&path, SystemTime::now()),
            Err(LedgerError::ProtocolExists(_))
        ));
        assert!(matches!(
            lock(&path, SystemTime::now(), "0"),
            Err(LedgerError::EmptyFields { .. })
        ));
        assert!(matches!(
            load_locked(&path),
            Err(LedgerError::NotLocked { .. })
        ));
        std::fs::write(&path, filled()).unwrap();
        let (l, _) = lock(&path, SystemTime::now(), "0").unwrap();
        assert_eq!(l.protocol_sha256.len(), 64);
        assert!(matches!(
            lock(&path, SystemTime::now(), "0"),
            Err(LedgerError::AlreadyLocked { .. })
        ));
        assert_eq!(load_locked(&path).unwrap().checked.corpus_size, 500);
        std::fs::write(&path, filled().replace("0.90", "0.50")).unwrap();
        let err = load_locked(&path).unwrap_err();
        assert!(matches!(err, LedgerError::ProtocolChanged { .. }), "{err}");
    }

    #[test]
    fn an_empty_lock_is_explained_and_nothing_half_written_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("protocol.txt");
        std::fs::write(&path, filled()).unwrap();
        // What an interrupted lock of an earlier version left.
        std::fs::write(lock_path(&path), b"").unwrap();
        let err = lock(&path, SystemTime::now(), "0").unwrap_err().to_string();
        assert!(
            err.contains("it is empty") && err.contains("remove it"),
            "{err}"
        );
        std::fs::remove_file(lock_path(&path)).unwrap();
        let _ = lock(&path, SystemTime::now(), "0").unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["protocol.txt", "protocol.txt.lock"]);
    }

    #[test]
    fn a_protocol_over_its_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("protocol.txt");
        let mut text = filled();
        text.push_str(&"# padding\n".repeat((PROTOCOL_LIMIT / 10 + 1) as usize));
        std::fs::write(&path, text).unwrap();
        let err = lock(&path, SystemTime::now(), "0").unwrap_err().to_string();
        assert!(
            err.contains("larger than 1 MiB, the limit for a protocol file"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn rates_in_range_parse_exactly(thousandths in 1u32..=1000) {
            let text = format!("{}.{:03}", thousandths / 1000, thousandths % 1000);
            let rate = parse_rate(&text).unwrap();
            prop_assert_eq!(rate * Decimal::from(1000), Decimal::from(thousandths));
        }

        #[test]
        fn values_round_trip(value in "[a-zA-Z0-9 =,.;:()/-]{1,60}") {
            let value = value.trim().to_string();
            prop_assume!(!value.is_empty());
            let text = filled().replace("corpus_description = 500 tickets", &format!("corpus_description = {value}"));
            let p = Protocol::parse(Path::new("p"), &text).unwrap();
            prop_assert_eq!(p.corpus_description, value);
        }
    }
}
