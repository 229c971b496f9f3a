//! Everything the ledger refuses, each naming the bad value and what would be accepted.

use std::path::PathBuf;

use lab_io::files::{InputError, OutputError};

/// A ledger operation that failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Reading a file failed or the file is over its limit.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A file cannot be written where asked (exit 2), or writing it failed (exit 1).
    #[error(transparent)]
    Output(#[from] OutputError),
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
    /// The measured device is not the package's GPU, and `--allow-device-mismatch` was not given.
    #[error("{} was measured on {measured}, not on the {expected} of package {package}; record the run measured on the rented GPU, or add --allow-device-mismatch to record it anyway (the row then says so, and so does `cost`)", path.display())]
    DeviceMismatch {
        /// The measurement file.
        path: PathBuf,
        /// What it was measured on, in words.
        measured: String,
        /// The package's GPU model.
        expected: String,
        /// The package.
        package: String,
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
    /// The new row contradicts rows already in the grid (a rental's package, a corpus's
    /// protocol).
    #[error("{}: {message}", path.display())]
    Conflict {
        /// The grid.
        path: PathBuf,
        /// What contradicts what, with the line.
        message: String,
    },
    /// Counts that cannot be.
    #[error("{0}")]
    Counts(String),
    /// A rental name that is not one.
    #[error("--rental {value:?} is not a rental name: {expected}")]
    Rental {
        /// What was given.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// A `GPU:DAYS:LOTS` that is not one, or that the catalogue does not sell.
    #[error("package {value:?} is not valid: {reason}")]
    BadPackage {
        /// What was given.
        value: String,
        /// Why, and what is accepted.
        reason: String,
    },
    /// The grid's first line is not the expected header.
    #[error("{} is not a results grid of this version: its first line must be exactly the header\n{expected}\nbut it is\n{found}\n{hint}", path.display())]
    Header {
        /// The grid.
        path: PathBuf,
        /// The header line required.
        expected: String,
        /// The first line found.
        found: String,
        /// What to do about it.
        hint: String,
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
    /// Notes that would break the one-line-per-run grid, or too long.
    #[error(
        "--notes must be one line of text of at most {max} characters (no line breaks or control characters)"
    )]
    Notes {
        /// The longest notes accepted, in characters.
        max: usize,
    },
    /// The grid with the new row would be larger than any reader of it accepts
    /// ([`crate::grid::GRID_LIMIT`]): refused before anything is written.
    #[error("{} would be {size} bytes with this row, over the {} MiB ({limit} bytes) a results grid may hold, which `record` and `cost` refuse to read; the grid is unchanged: record this run and the next ones in a new grid, --results NEW.csv with a file that does not exist yet (it is created with the header)", path.display(), .limit >> 20)]
    GridFull {
        /// The grid.
        path: PathBuf,
        /// The size the grid would have, in bytes.
        size: u64,
        /// The largest grid read, in bytes.
        limit: u64,
    },
    /// A rental that cannot be priced with the catalogue given.
    #[error("{}, line {line}: {message}; price the grid with the catalogue its runs were recorded against (--catalogue FILE)", path.display())]
    Unpriced {
        /// The grid.
        path: PathBuf,
        /// The rental's first line.
        line: u64,
        /// Which rental, with which catalogue, and why.
        message: String,
    },
}

impl LedgerError {
    /// True when the user fixes it by changing the command line (exit 2); false for a data file
    /// or a runtime failure (exit 1).
    pub fn is_usage(&self) -> bool {
        match self {
            LedgerError::Output(e) => e.is_usage(),
            LedgerError::Input(e) => e.is_not_found(),
            LedgerError::ProtocolExists(_)
            | LedgerError::Counts(_)
            | LedgerError::BadPackage { .. }
            | LedgerError::Rental { .. }
            | LedgerError::Notes { .. }
            | LedgerError::DeviceMismatch { .. }
            | LedgerError::Conflict { .. }
            | LedgerError::GridFull { .. } => true,
            _ => false,
        }
    }
}
