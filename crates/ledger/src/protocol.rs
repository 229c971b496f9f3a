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
//! `protocol lock FILE` checks that no field is empty and that the numbers and the date have their
//! form, then writes `FILE.lock`, a JSON document holding the SHA-256 of the protocol's exact
//! bytes (comments included) and the UTC time of the lock. The lock is created exclusively: a
//! protocol is locked once. [`load_locked`] re-hashes the file and refuses it if a single byte
//! changed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;

/// Schema identifier of lock files.
pub const LOCK_SCHEMA: &str = "iteragpu.protocol-lock/1";

/// The fields, in file order, with the help line written above each one.
pub const FIELDS: [(&str, &str); 9] = [
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
        "Share of submitted units that must be accepted for the run to pass: a decimal in (0, 1], e.g. 0.95.",
    ),
    (
        "corpus_id",
        "Identifier of the corpus the units come from (a name and version, or a file hash).",
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
        "date",
        "The day this protocol was written, YYYY-MM-DD (UTC).",
    ),
];

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
}

impl Protocol {
    fn fields_mut(&mut self) -> [(&'static str, &mut String); 9] {
        [
            ("useful_unit", &mut self.useful_unit),
            ("acceptance_criterion", &mut self.acceptance_criterion),
            ("minimum_acceptance_rate", &mut self.minimum_acceptance_rate),
            ("corpus_id", &mut self.corpus_id),
            ("corpus_description", &mut self.corpus_description),
            ("corpus_size", &mut self.corpus_size),
            ("judged_by", &mut self.judged_by),
            ("distinctness_rule", &mut self.distinctness_rule),
            ("date", &mut self.date),
        ]
    }

    /// Field names and values, in file order.
    pub fn fields(&self) -> [(&'static str, &str); 9] {
        [
            ("useful_unit", &self.useful_unit),
            ("acceptance_criterion", &self.acceptance_criterion),
            ("minimum_acceptance_rate", &self.minimum_acceptance_rate),
            ("corpus_id", &self.corpus_id),
            ("corpus_description", &self.corpus_description),
            ("corpus_size", &self.corpus_size),
            ("judged_by", &self.judged_by),
            ("distinctness_rule", &self.distinctness_rule),
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
            date: String::new(),
        };
        let mut seen = [false; 9];
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
        let rate = parse_rate(&self.minimum_acceptance_rate)?;
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
        Ok(Checked { rate, corpus_size })
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

/// Writes a fresh protocol to fill in; never overwrites.
pub fn init(path: &Path, now: SystemTime) -> Result<(), LedgerError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                LedgerError::ProtocolExists(path.to_path_buf())
            } else {
                LedgerError::io(path)(e)
            }
        })?;
    file.write_all(template(&crate::time::utc_date(now)).as_bytes())
        .map_err(LedgerError::io(path))
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

/// Checks a filled-in protocol and locks it; refuses empty fields and a second lock.
pub fn lock(path: &Path, now: SystemTime, tool_version: &str) -> Result<Lock, LedgerError> {
    let bytes = std::fs::read(path).map_err(LedgerError::io(path))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| LedgerError::ProtocolSyntax {
        path: path.to_path_buf(),
        line: 0,
        message: "the file is not UTF-8 text".into(),
    })?;
    Protocol::parse(path, text)?.check(path)?;
    let lock_file = lock_path(path);
    if let Ok(existing) = read_lock(&lock_file) {
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
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        protocol_sha256: crate::record::sha256_hex(&bytes),
        locked_utc: crate::time::utc_seconds(now),
        tool_version: tool_version.to_string(),
    };
    let mut text = serde_json::to_string_pretty(&lock).map_err(|e| LedgerError::LockInvalid {
        path: lock_file.clone(),
        reason: e.to_string(),
    })?;
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock_file)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                LedgerError::AlreadyLocked {
                    path: path.to_path_buf(),
                    lock: lock_file.clone(),
                    locked_utc: "an unknown time (the lock file is unreadable)".into(),
                }
            } else {
                LedgerError::io(&lock_file)(e)
            }
        })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(LedgerError::io(&lock_file))?;
    Ok(lock)
}

fn read_lock(lock_file: &Path) -> Result<Lock, LedgerError> {
    let bytes = std::fs::read(lock_file).map_err(LedgerError::io(lock_file))?;
    let lock: Lock = serde_json::from_slice(&bytes).map_err(|e| LedgerError::LockInvalid {
        path: lock_file.to_path_buf(),
        reason: e.to_string(),
    })?;
    if lock.schema != LOCK_SCHEMA {
        return Err(LedgerError::LockInvalid {
            path: lock_file.to_path_buf(),
            reason: format!("schema {:?}, expected {LOCK_SCHEMA:?}", lock.schema),
        });
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
    let bytes = std::fs::read(path).map_err(LedgerError::io(path))?;
    let lock_file = lock_path(path);
    if !lock_file.exists() {
        return Err(LedgerError::NotLocked {
            path: path.to_path_buf(),
            lock: lock_file,
        });
    }
    let lock = read_lock(&lock_file)?;
    let current = crate::record::sha256_hex(&bytes);
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
        init(&path, SystemTime::now()).unwrap();
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
        let l = lock(&path, SystemTime::now(), "0").unwrap();
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
