//! Everything the ledger refuses, each naming the bad value and what would be accepted.

use std::path::PathBuf;

/// A ledger operation that failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `protocol init` never overwrites.
    #[error("{} already exists; choose a new file name (a protocol is never overwritten)", .0.display())]
    ProtocolExists(PathBuf),
    /// A protocol line that is not `key = value`, an unknown or repeated key, a missing key.
    #[error("{}, line {line}: {message}", path.display())]
    ProtocolSyntax {
        /// The protocol file.
        path: PathBuf,
        /// 1-based line number (0 when the problem is the whole file).
        line: usize,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// `protocol lock` refuses empty fields.
    #[error("{} cannot be locked: fill in {}", path.display(), fields.join(", "))]
    EmptyFields {
        /// The protocol file.
        path: PathBuf,
        /// The empty fields.
        fields: Vec<String>,
    },
    /// A field whose value has the wrong form.
    #[error("{field} = {value:?} is not valid: {expected}")]
    BadField {
        /// The field.
        field: String,
        /// Its value.
        value: String,
        /// What would be accepted.
        expected: String,
    },
    /// A second lock would hide a change: refused.
    #[error("{} is already locked (at {locked_utc}, see {}); a locked protocol cannot be changed or locked again: write a new protocol file", path.display(), lock.display())]
    AlreadyLocked {
        /// The protocol file.
        path: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// When it was locked.
        locked_utc: String,
    },
    /// Results need a locked protocol.
    #[error("{} is not locked (no {}); run `iteragpu protocol lock {}` before the test", path.display(), lock.display(), path.display())]
    NotLocked {
        /// The protocol file.
        path: PathBuf,
        /// The lock file looked for.
        lock: PathBuf,
    },
    /// The protocol's bytes differ from what was locked.
    #[error("{} was changed after it was locked at {locked_utc}: its SHA-256 is {current}, the lock says {locked}; results are only recorded against the protocol as locked", path.display())]
    ProtocolChanged {
        /// The protocol file.
        path: PathBuf,
        /// SHA-256 at lock time.
        locked: String,
        /// SHA-256 now.
        current: String,
        /// When it was locked.
        locked_utc: String,
    },
    /// The lock file cannot be used.
    #[error("{} is not a valid protocol lock: {reason}", path.display())]
    LockInvalid {
        /// The lock file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The measurement is not a measurement document this tool can read.
    #[error("{} is not a usable measurement: {reason}", path.display())]
    Measurement {
        /// The measurement file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The measurement did not finish or failed its check.
    #[error("{} is an incomplete measurement (complete: false{reason}); only complete measurements are recorded", path.display())]
    IncompleteMeasurement {
        /// The measurement file.
        path: PathBuf,
        /// The run's own error, prefixed with `, `, or empty.
        reason: String,
    },
    /// The same measurement file (same SHA-256) is already in the grid.
    #[error("this measurement (SHA-256 {sha256}) is already recorded in {}, line {line} (run {run_id}); each run is recorded once", path.display())]
    AlreadyRecorded {
        /// The grid.
        path: PathBuf,
        /// The measurement's SHA-256.
        sha256: String,
        /// The existing row's run id.
        run_id: String,
        /// The existing row's line.
        line: u64,
    },
    /// Counts that cannot be.
    #[error("{0}")]
    Counts(String),
    /// A `GPU:DAYS:LOTS` that is not one.
    #[error("package {value:?} is not valid: {reason}")]
    BadPackage {
        /// What was given.
        value: String,
        /// Why, and what is accepted.
        reason: String,
    },
    /// The grid's first line is not the expected header.
    #[error("{} does not start with the results grid header; expected exactly:\n{expected}\nfound:\n{found}", path.display())]
    Header {
        /// The grid.
        path: PathBuf,
        /// The header line required.
        expected: String,
        /// The first line found.
        found: String,
    },
    /// A row of the grid that does not fit its header.
    #[error("{}, line {line}: {reason}", path.display())]
    BadRow {
        /// The grid.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// Notes that would break the one-line-per-run grid.
    #[error("--notes must be one line of text (no line breaks or control characters)")]
    Notes,
}

impl LedgerError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
        move |source| LedgerError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
