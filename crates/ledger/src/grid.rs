//! The raw results grid (`data/resultats-bruts.csv`): one row per real run, never edited by the
//! tool, only added to.
//!
//! **All or nothing, without a rewrite.** A row is appended in place: under the lock the writer
//! writes a journal beside the grid ([`journal_path`]: the grid's length before the row) and
//! flushes it, appends the row and flushes it, then removes the journal. A reader reads the grid
//! under a shared lock, so never during an append, and up to a journal's length when a killed
//! writer left one; the next writer cuts that unfinished row off and removes the journal. A kill
//! or a full disk at any moment leaves the old grid or the new one, never half a row, and the
//! cost of an append does not grow with the grid's rows but for one streamed pass in constant
//! memory.
//!
//! **One writer at a time.** Writers take an exclusive OS lock (`File::lock`, advisory, honoured
//! by every `iteragpu`) on the grid file, and check once they hold it that the file they locked is
//! still the one at the path (an earlier version replaced the grid by renaming a new file over
//! it), starting again if not. Under the lock the grid is read once, line by line (`scan`: the
//! header, a line end at the end, the header's 19 fields on every line, and the new row against
//! the rows it could contradict: the same measurement, the first row of its rental, corpus and
//! protocol), and, when the grid with the new row is still within [`GRID_LIMIT`] (the most any
//! reader of it accepts), the row is appended; a grid that would grow past it is left as it was
//! and the row is refused, with the way to a new grid.
//!
//! **Readers trust nothing.** [`parse`] checks the exact header, every field of every row, the
//! rows against each other, and that the file ends with a line end: a torn row (a grid cut by an
//! earlier version, or by hand) or a foreign line is reported by its line number, never counted.

use std::fs::File;
use std::path::Path;
use std::str::FromStr;

use lab_io::files::{self, OutputError, Written};
use serde::Serialize;

use crate::error::LedgerError;
use crate::hash::is_sha256;
use crate::protocol::{Aggregation, is_identifier, parse_rate};

/// The grid's columns, in order; the first line of the file must be exactly these.
pub const HEADER: [&str; 19] = [
    "run_id",
    "date_utc",
    "protocol_sha256",
    "corpus_id",
    "rental",
    "gpu",
    "days",
    "lots",
    "device_model",
    "device_uuid",
    "driver_version",
    "device_mismatch",
    "measurement_sha256",
    "units_submitted",
    "units_accepted",
    "acceptance_threshold",
    "threshold_met",
    "aggregation",
    "notes",
];

/// The header of grids written before rentals, device checks and aggregation rules existed.
const EARLIER_HEADER: &str = "run_id,date_utc,protocol_sha256,corpus_id,gpu,days,lots,device_model,device_uuid,driver_version,measurement_sha256,units_submitted,units_accepted,acceptance_threshold,threshold_met,notes";

/// The largest grid read: about 150,000 rows.
pub const GRID_LIMIT: u64 = 64 << 20;

/// The longest `--notes`, in characters.
pub const NOTES_MAX: usize = 1000;

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
            || !gpu.as_bytes()[0].is_ascii_alphanumeric()
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
    /// The rental the run was made on, named by the user: one rented package.
    pub rental: String,
    /// The rental's package.
    #[serde(flatten)]
    pub package: Package,
    /// GPU name, or the CPU model for the CPU reference device (as a spreadsheet-safe cell).
    pub device_model: String,
    /// GPU UUID, or `cpu-reference`.
    pub device_uuid: String,
    /// Driver version (`none` for the CPU reference device).
    pub driver_version: String,
    /// True when the measured device is not the package's GPU and the run was recorded anyway
    /// (`--allow-device-mismatch`).
    pub device_mismatch: bool,
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
    /// The protocol's rule for repeated runs of a corpus on one rental.
    pub aggregation: Aggregation,
    /// Free text, one line (as a spreadsheet-safe cell).
    pub notes: String,
}

/// `accepted / submitted >= rate`, exactly (no division, no rounding).
pub fn threshold_met(accepted: u64, submitted: u64, rate: rust_decimal::Decimal) -> bool {
    use rust_decimal::Decimal;
    submitted > 0 && Decimal::from(accepted) >= rate * Decimal::from(submitted)
}

/// Checks a text cell: a value a spreadsheet shows as text and a terminal prints as it is.
fn text_cell(column: &str, value: &str, may_be_empty: bool) -> Result<(), String> {
    if value.is_empty() && !may_be_empty {
        return Err(format!("{column} is empty"));
    }
    if value.chars().any(lab_io::text::is_unsafe_char) {
        return Err(format!(
            "{column} {:?} holds a control character",
            lab_io::text::printable(value)
        ));
    }
    if lab_io::text::starts_like_formula(value) {
        return Err(format!(
            "{column} {value:?} starts like a spreadsheet formula (this tool writes such a cell \
             with a leading ')"
        ));
    }
    Ok(())
}

impl Row {
    /// The row's fields in [`HEADER`] order.
    pub fn fields(&self) -> [String; 19] {
        [
            self.run_id.clone(),
            self.date_utc.clone(),
            self.protocol_sha256.clone(),
            self.corpus_id.clone(),
            self.rental.clone(),
            self.package.gpu.clone(),
            self.package.days.to_string(),
            self.package.lots.to_string(),
            self.device_model.clone(),
            self.device_uuid.clone(),
            self.driver_version.clone(),
            self.device_mismatch.to_string(),
            self.measurement_sha256.clone(),
            self.units_submitted.to_string(),
            self.units_accepted.to_string(),
            self.acceptance_threshold.clone(),
            self.threshold_met.to_string(),
            self.aggregation.name().to_string(),
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

    /// Checks every field's form, as a reader does (see [`parse`]).
    pub fn check(&self) -> Result<(), String> {
        if !is_sha256(&self.measurement_sha256) {
            return Err(format!(
                "measurement_sha256 {:?} is not a SHA-256 (64 lower-case hex digits)",
                self.measurement_sha256
            ));
        }
        if self.run_id != self.measurement_sha256[..12] {
            return Err(format!(
                "run_id {:?} is not the first 12 digits of measurement_sha256",
                self.run_id
            ));
        }
        if !is_sha256(&self.protocol_sha256) {
            return Err(format!(
                "protocol_sha256 {:?} is not a SHA-256",
                self.protocol_sha256
            ));
        }
        if self.date_utc.len() != 20
            || !self.date_utc.ends_with('Z')
            || crate::time::parse_utc(&self.date_utc).is_none()
        {
            return Err(format!(
                "date_utc {:?} is not a UTC time written YYYY-MM-DDTHH:MM:SSZ",
                self.date_utc
            ));
        }
        for (column, value) in [("corpus_id", &self.corpus_id), ("rental", &self.rental)] {
            if !is_identifier(value) {
                return Err(format!(
                    "{column} {value:?} is not an identifier (letters, digits, . _ - :)"
                ));
            }
        }
        text_cell("device_model", &self.device_model, false)?;
        text_cell("device_uuid", &self.device_uuid, false)?;
        text_cell("driver_version", &self.driver_version, false)?;
        text_cell("notes", &self.notes, true)?;
        if self.notes.chars().count() > NOTES_MAX + 1 {
            return Err(format!("notes are longer than {NOTES_MAX} characters"));
        }
        if self.units_submitted == 0 {
            return Err("units_submitted is 0; a run is judged on 1 unit or more".into());
        }
        if self.units_accepted > self.units_submitted {
            return Err(format!(
                "units_accepted {} exceeds units_submitted {}",
                self.units_accepted, self.units_submitted
            ));
        }
        let rate = parse_rate(&self.acceptance_threshold).map_err(|e| e.to_string())?;
        if rate.to_string() != self.acceptance_threshold {
            return Err(format!(
                "acceptance_threshold {:?} is not written as this tool writes it ({rate})",
                self.acceptance_threshold
            ));
        }
        if threshold_met(self.units_accepted, self.units_submitted, rate) != self.threshold_met {
            return Err(format!(
                "threshold_met is {} but {} of {} against {} says {}",
                self.threshold_met,
                self.units_accepted,
                self.units_submitted,
                self.acceptance_threshold,
                !self.threshold_met
            ));
        }
        Ok(())
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
        // A count is read as `record` writes it: plain digits, no sign, space or leading zero.
        let count = |i: usize| {
            let text = f(i);
            rent::units::plain_decimal(&text).ok_or_else(|| {
                format!(
                    "{} {text:?} is not a whole number in plain digits (no sign, spaces or \
                     leading zeros)",
                    HEADER[i]
                )
            })
        };
        let flag = |i: usize| match f(i).as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(format!("{} {other:?} is not true or false", HEADER[i])),
        };
        let package = Package::new(&f(5), &f(6), &f(7)).map_err(|e| e.to_string())?;
        if package.to_string() != format!("{}:{}:{}", f(5), f(6), f(7)) {
            return Err(format!(
                "the package {}:{}:{} is not written as this tool writes it ({package})",
                f(5),
                f(6),
                f(7)
            ));
        }
        let aggregation = Aggregation::parse(&f(17))
            .ok_or_else(|| format!("aggregation {:?} is not best, last or mean", f(17)))?;
        let row = Row {
            run_id: f(0),
            date_utc: f(1),
            protocol_sha256: f(2),
            corpus_id: f(3),
            rental: f(4),
            package,
            device_model: f(8),
            device_uuid: f(9),
            driver_version: f(10),
            device_mismatch: flag(11)?,
            measurement_sha256: f(12),
            units_submitted: count(13)?,
            units_accepted: count(14)?,
            acceptance_threshold: f(15),
            threshold_met: flag(16)?,
            aggregation,
            notes: f(18),
        };
        row.check()?;
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

/// What one row may contradict in the rows before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// The same measurement is already a row.
    Duplicate {
        /// That row's line.
        line: u64,
        /// Its run id.
        run_id: String,
    },
    /// The rental was recorded with another package: one rental is one package.
    RentalPackage {
        /// The rental.
        rental: String,
        /// Its package so far.
        package: String,
        /// Where.
        line: u64,
    },
    /// The corpus was judged under another protocol in this grid.
    CorpusProtocol {
        /// The corpus.
        corpus: String,
        /// The other protocol.
        protocol: String,
        /// Where.
        line: u64,
    },
    /// The same protocol with another threshold or rule: a hand-edited row.
    ProtocolRules {
        /// Where the protocol first appears.
        line: u64,
    },
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conflict::Duplicate { line, run_id } => write!(
                f,
                "the same measurement is already the row at line {line} (run {run_id}); each run \
                 is recorded once"
            ),
            Conflict::RentalPackage {
                rental,
                package,
                line,
            } => write!(
                f,
                "rental {rental} is package {package} (line {line}); one rental is one package: \
                 name a second rental differently"
            ),
            Conflict::CorpusProtocol {
                corpus,
                protocol,
                line,
            } => write!(
                f,
                "corpus {corpus} is judged by protocol {} in this grid (line {line}); a corpus \
                 is judged by one protocol per grid: start a new grid, or give the new protocol \
                 a new corpus_id",
                &protocol[..12]
            ),
            Conflict::ProtocolRules { line } => write!(
                f,
                "the same protocol has another acceptance_threshold or aggregation at line \
                 {line}; the row was not written by this tool"
            ),
        }
    }
}

/// What the rows so far say, to check the next one against.
#[derive(Debug, Default)]
pub struct Index {
    measurements: std::collections::HashMap<String, (u64, String)>,
    rentals: std::collections::HashMap<String, (u64, Package)>,
    corpora: std::collections::HashMap<String, (u64, String)>,
    protocols: std::collections::HashMap<String, (u64, String, Aggregation)>,
}

impl Index {
    /// Checks `row` against the rows admitted so far.
    pub fn conflict(&self, row: &Row) -> Option<Conflict> {
        if let Some((line, run_id)) = self.measurements.get(&row.measurement_sha256) {
            return Some(Conflict::Duplicate {
                line: *line,
                run_id: run_id.clone(),
            });
        }
        if let Some((line, package)) = self.rentals.get(&row.rental)
            && *package != row.package
        {
            return Some(Conflict::RentalPackage {
                rental: row.rental.clone(),
                package: package.to_string(),
                line: *line,
            });
        }
        if let Some((line, protocol)) = self.corpora.get(&row.corpus_id)
            && *protocol != row.protocol_sha256
        {
            return Some(Conflict::CorpusProtocol {
                corpus: row.corpus_id.clone(),
                protocol: protocol.clone(),
                line: *line,
            });
        }
        if let Some((line, threshold, aggregation)) = self.protocols.get(&row.protocol_sha256)
            && (*threshold != row.acceptance_threshold || *aggregation != row.aggregation)
        {
            return Some(Conflict::ProtocolRules { line: *line });
        }
        None
    }

    /// Adds `row` (at `line`) to what later rows are checked against.
    pub fn admit(&mut self, row: &Row, line: u64) {
        self.measurements
            .insert(row.measurement_sha256.clone(), (line, row.run_id.clone()));
        self.rentals
            .entry(row.rental.clone())
            .or_insert_with(|| (line, row.package.clone()));
        self.corpora
            .entry(row.corpus_id.clone())
            .or_insert_with(|| (line, row.protocol_sha256.clone()));
        self.protocols
            .entry(row.protocol_sha256.clone())
            .or_insert_with(|| (line, row.acceptance_threshold.clone(), row.aggregation));
    }
}

/// A whole grid read back and checked.
#[derive(Debug, Default)]
pub struct Grid {
    /// The rows in file order.
    pub rows: Vec<LineRow>,
    /// What they say together, to check a new row against.
    pub index: Index,
    /// Lines in the file.
    pub lines: u64,
}

fn header_error(path: &Path, first: &[u8]) -> LedgerError {
    let found = String::from_utf8_lossy(first).into_owned();
    let hint = if found == EARLIER_HEADER {
        "It was written by an earlier iteragpu, before rentals, device checks and aggregation \
         rules (16 columns): record new runs in a new grid (a file that does not exist yet is \
         created with the header)."
    } else {
        "It is not a grid this tool writes: give the path of a results grid, or of a file that \
         does not exist yet (it is created with the header)."
    };
    LedgerError::Header {
        path: path.to_path_buf(),
        expected: header_line(),
        found,
        hint: hint.to_string(),
    }
}

/// What a grid whose last line has no line end is told.
const TORN: &str = "the last line has no line end: it is half a row (a write that was cut off) or \
     text added by hand; nothing in this grid is counted until that line is completed or removed";

/// Parses a whole grid: the exact header, then rows that fit it and each other, and a line end
/// after the last one. An empty file is an empty grid.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Grid, LedgerError> {
    if bytes.is_empty() {
        return Ok(Grid::default());
    }
    let bad = |line: u64, reason: String| LedgerError::BadRow {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    if first != header_line().as_bytes() {
        return Err(header_error(path, first));
    }
    let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
    if !bytes.ends_with(b"\n") {
        return Err(bad(lines + 1, TORN.into()));
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(bytes);
    let mut grid = Grid {
        lines,
        ..Grid::default()
    };
    for record in reader.records() {
        let record = record.map_err(|e| {
            bad(
                e.position().map_or(0, |p| p.line()),
                format!("not a CSV row ({e})"),
            )
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let row = Row::from_record(&record).map_err(|reason| bad(line, reason))?;
        if let Some(conflict) = grid.index.conflict(&row) {
            return Err(bad(line, conflict.to_string()));
        }
        grid.index.admit(&row, line);
        grid.rows.push(LineRow { line, row });
    }
    Ok(grid)
}

/// Reads a grid file (within [`GRID_LIMIT`]) under a shared lock, so that no append is under
/// way while it is read; a row a killed writer left unfinished (its journal says where the grid
/// ended before it) is not part of the grid.
pub fn read(path: &Path) -> Result<Grid, LedgerError> {
    let file = files::open_input(path).map_err(|e| input_err(path, &e))?;
    // A file that cannot be locked (a file system without locks) is read as it is.
    let _ = file.lock_shared();
    let reader = file.try_clone().map_err(|e| input_err(path, &e))?;
    let mut bytes = files::read_bounded_from(reader, path, GRID_LIMIT, "a results grid")?;
    if let Some(before) = journal_length(path)
        && before <= bytes.len() as u64
        && (before == 0 || bytes[before as usize - 1] == b'\n')
    {
        bytes.truncate(before as usize);
    }
    let _ = file.unlock();
    parse(path, &bytes)
}

/// An OS error reading the grid.
fn input_err(path: &Path, e: &std::io::Error) -> lab_io::files::InputError {
    lab_io::files::InputError::Io {
        path: path.to_path_buf(),
        reason: lab_io::files::os_message(e),
        kind: e.kind(),
    }
}

/// The journal beside a grid while a row is appended: the grid's length before the row. A writer
/// killed mid-append leaves it; readers read the grid up to that length, and the next writer cuts
/// the grid back to it and removes it.
pub fn journal_path(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "grid".into(), |n| n.to_string_lossy().into_owned());
    files::folder_of(path).join(format!("{}append-{name}", files::TMP_PREFIX))
}

/// The length a journal holds, when there is one and it holds a length.
fn journal_length(path: &Path) -> Option<u64> {
    let text = std::fs::read(journal_path(path)).ok()?;
    let text = std::str::from_utf8(&text).ok()?.trim_end();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Where an appended row landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// 1-based line of the new row.
    pub line: u64,
    /// True when the grid did not exist (or was empty) and the header was written first.
    pub created: bool,
    /// What the write may still say (a folder that could not be flushed).
    pub written: Written,
}

/// True when two open files are the same file.
fn same_file(a: &File, b: &File) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (a.metadata(), b.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        true
    }
}

/// True when the open `file` is still the file at `path` (not replaced since it was opened).
fn still_at(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), path.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

/// Refuses a grid of `size` bytes that its readers would refuse (over `limit`).
fn within_limit(path: &Path, size: usize, limit: u64) -> Result<(), LedgerError> {
    let size = size as u64;
    if size > limit {
        return Err(LedgerError::GridFull {
            path: path.to_path_buf(),
            size,
            limit,
        });
    }
    Ok(())
}

/// Adds `row` to the grid at `path` under an exclusive lock, after checking the whole grid and
/// the row against it; `conflict` turns a contradiction into the caller's error. A missing or
/// empty file gets the header first. See the module docs for why this never tears a row.
///
/// A writer never makes a grid its own readers refuse: when the grid with the new row would be
/// larger than [`GRID_LIMIT`], the row is refused ([`LedgerError::GridFull`]) and the grid is
/// left as it was.
pub fn append(
    path: &Path,
    row: &Row,
    conflict: impl Fn(Conflict) -> LedgerError,
) -> Result<Appended, LedgerError> {
    append_within(path, row, GRID_LIMIT, conflict)
}

/// [`append`] to a grid read, and kept, within `limit` bytes.
fn append_within(
    path: &Path,
    row: &Row,
    limit: u64,
    conflict: impl Fn(Conflict) -> LedgerError,
) -> Result<Appended, LedgerError> {
    row.check().map_err(|reason| LedgerError::BadRow {
        path: path.to_path_buf(),
        line: 0,
        reason: format!("the new row is not valid: {reason}"),
    })?;
    loop {
        let file = match files::open_input(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = header_line().into_bytes();
                bytes.push(b'\n');
                bytes.extend(row.to_line());
                within_limit(path, bytes.len(), limit)?;
                match files::write_new(path, &bytes) {
                    Ok(written) => {
                        return Ok(Appended {
                            line: 2,
                            created: true,
                            written,
                        });
                    }
                    // Another writer created it meanwhile: add to theirs.
                    Err(OutputError::Exists(_)) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => {
                return Err(LedgerError::Input(lab_io::files::InputError::Io {
                    path: path.to_path_buf(),
                    reason: lab_io::files::os_message(&e),
                    kind: e.kind(),
                }));
            }
        };
        file.lock().map_err(|e| OutputError::Io {
            path: path.to_path_buf(),
            reason: lab_io::files::os_message(&e),
        })?;
        if !still_at(&file, path) {
            // Replaced by the writer we waited for: lock the new grid instead.
            continue;
        }
        let written = append_locked(path, &file, row, limit, &conflict);
        // Closing the file releases the lock too; unlocking explicitly says when.
        let _ = file.unlock();
        return written;
    }
}

/// An OS error on the grid as an output error.
fn out_err(path: &Path, e: &std::io::Error) -> LedgerError {
    OutputError::Io {
        path: path.to_path_buf(),
        reason: lab_io::files::os_message(e),
    }
    .into()
}

/// The append itself, under the grid's exclusive lock: a killed writer's unfinished row removed
/// (its journal), then one streamed pass over the grid ([`scan`]: header, whole last row, the new
/// row against the rows it could contradict), then the journal written and flushed, the row
/// appended and flushed, and the journal removed. Nothing but one line is held in memory, and
/// the grid is never rewritten.
fn append_locked(
    path: &Path,
    locked: &File,
    row: &Row,
    limit: u64,
    conflict: &impl Fn(Conflict) -> LedgerError,
) -> Result<Appended, LedgerError> {
    use std::io::{Seek, Write};
    // The lock is held on `file` (opened to read); the row goes through a second handle on the
    // same file, opened to write.
    let file = &std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| out_err(path, &e))?;
    if !same_file(file, locked) {
        return Err(out_err(
            path,
            &std::io::Error::other("the grid was replaced while it was locked"),
        ));
    }
    // What killed writers left in the folder (the write probes of `check_replace`), as every
    // writer removes it.
    files::clean_stale(&files::folder_of(path));
    let journal = journal_path(path);
    if journal.exists() {
        if let Some(before) = journal_length(path)
            && before <= file.metadata().map_err(|e| out_err(path, &e))?.len()
        {
            file.set_len(before).map_err(|e| out_err(path, &e))?;
            file.sync_all().map_err(|e| out_err(path, &e))?;
        }
        std::fs::remove_file(&journal).map_err(|e| out_err(&journal, &e))?;
    }
    let size = file.metadata().map_err(|e| out_err(path, &e))?.len();
    if size > limit {
        return Err(lab_io::files::InputError::TooLarge {
            path: path.to_path_buf(),
            what: "a results grid",
            limit,
        }
        .into());
    }
    let created = size == 0;
    let mut add = Vec::new();
    let lines = if created {
        add.extend(header_line().into_bytes());
        add.push(b'\n');
        0
    } else {
        let scanned = scan(path, file, row, size)?;
        if let Some(c) = scanned.conflict {
            return Err(conflict(c));
        }
        scanned.lines
    };
    add.extend(row.to_line());
    within_limit(path, size as usize + add.len(), limit)?;
    // The journal first, flushed with its folder: from here a kill leaves the grid readable at
    // `size`, whatever part of the row is written.
    let mut note = File::create(&journal).map_err(|e| out_err(&journal, &e))?;
    note.write_all(format!("{size}\n").as_bytes())
        .and_then(|()| note.sync_all())
        .map_err(|e| out_err(&journal, &e))?;
    drop(note);
    let _ = File::open(files::folder_of(path)).and_then(|f| f.sync_all());
    let mut out = file;
    let appended = out
        .seek(std::io::SeekFrom::Start(size))
        .and_then(|_| out.write_all(&add))
        .and_then(|()| out.sync_data());
    if let Err(e) = appended {
        // Nothing lost: the grid is cut back to where it was (a full disk, say).
        let _ = file.set_len(size).and_then(|()| file.sync_all());
        let _ = std::fs::remove_file(&journal);
        return Err(out_err(path, &e));
    }
    std::fs::remove_file(&journal).map_err(|e| out_err(&journal, &e))?;
    let folder = File::open(files::folder_of(path)).and_then(|f| f.sync_all());
    Ok(Appended {
        line: if created { 2 } else { lines + 1 },
        created,
        written: Written {
            folder_not_flushed: folder.err().map(|e| lab_io::files::os_message(&e)),
        },
    })
}

/// What one pass over a grid found.
struct Scanned {
    /// Line ends in the file.
    lines: u64,
    /// The new row's contradiction with the rows, the one [`Index::conflict`] reports first.
    conflict: Option<Conflict>,
}

/// One streamed pass over the grid (`size` bytes, not empty) in constant memory: the exact
/// header, a line end at the end (no torn row), and the new row against the rows it could
/// contradict, as [`Index::conflict`] checks it against a whole grid: the same measurement
/// anywhere, and the first row of its rental, its corpus and its protocol (a grid this tool
/// wrote agrees with itself, so the first row of each says what every other says). Every line
/// must have the header's 19 fields; a line that names none of these is split on commas, not
/// parsed, and a line it reads as a row is checked as [`parse`] checks it. The other rows'
/// fields are not checked again: every reader ([`read`], so `cost`) checks them all.
fn scan(path: &Path, file: &File, row: &Row, size: u64) -> Result<Scanned, LedgerError> {
    use std::io::{BufRead, BufReader, Read, Seek};
    let bad = |line: u64, reason: String| LedgerError::BadRow {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let io = |e: std::io::Error| LedgerError::from(input_err(path, &e));
    let mut handle = file.try_clone().map_err(io)?;
    handle.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
    let mut reader = BufReader::with_capacity(1 << 16, handle.take(size));
    let mut line = Vec::new();
    let header = header_line();
    // The first line, read no further than a header could go.
    (&mut reader)
        .take(header.len() as u64 + 2)
        .read_until(b'\n', &mut line)
        .map_err(io)?;
    let first = line.strip_suffix(b"\n").unwrap_or(&line);
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    if first == header.as_bytes() && !line.ends_with(b"\n") {
        return Err(bad(1, TORN.into()));
    }
    if first != header.as_bytes() {
        let mut shown = line.clone();
        if !line.ends_with(b"\n") {
            (&mut reader)
                .take(1 << 16)
                .read_until(b'\n', &mut shown)
                .map_err(io)?;
        }
        let shown = shown.split(|b| *b == b'\n').next().unwrap_or_default();
        let shown = shown.strip_suffix(b"\r").unwrap_or(shown);
        return Err(header_error(path, shown));
    }
    let mut duplicate: Option<(u64, String)> = None;
    let mut rental: Option<(u64, Package)> = None;
    let mut corpus: Option<(u64, String)> = None;
    let mut protocol: Option<(u64, String, Aggregation)> = None;
    let mut lines = 1u64;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(io)?;
        if n == 0 {
            break;
        }
        if !line.ends_with(b"\n") {
            return Err(bad(lines + 1, TORN.into()));
        }
        lines += 1;
        let wanted = [
            duplicate.is_none(),
            rental.is_none(),
            corpus.is_none(),
            protocol.is_none(),
        ];
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            // The CSV reader skips an empty line.
            continue;
        }
        // A line without quotes splits on commas exactly as the CSV reader splits it: its shape
        // is checked, and it is read as a row only when it names what the new row is checked
        // against. A quoted line is always read (and checked) as a row.
        if !text.contains(&b'"') {
            let mut fields: [&[u8]; 19] = [&[]; 19];
            let mut count = 0;
            for field in text.split(|b| *b == b',') {
                if count < fields.len() {
                    fields[count] = field;
                }
                count += 1;
            }
            if count != HEADER.len() {
                return Err(bad(
                    lines,
                    format!("{count} fields, the header has {}", HEADER.len()),
                ));
            }
            let named = [
                fields[12] == row.measurement_sha256.as_bytes(),
                fields[4] == row.rental.as_bytes(),
                fields[3] == row.corpus_id.as_bytes(),
                fields[2] == row.protocol_sha256.as_bytes(),
            ];
            if !named.iter().zip(wanted).any(|(n, w)| *n && w) {
                continue;
            }
        }
        let mut records = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(line.as_slice());
        let record = match records.records().next() {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(bad(lines, format!("not a CSV row ({e})"))),
            None => continue,
        };
        let old = Row::from_record(&record).map_err(|reason| bad(lines, reason))?;
        if wanted[0] && old.measurement_sha256 == row.measurement_sha256 {
            duplicate = Some((lines, old.run_id.clone()));
        }
        if wanted[1] && old.rental == row.rental {
            rental = Some((lines, old.package.clone()));
        }
        if wanted[2] && old.corpus_id == row.corpus_id {
            corpus = Some((lines, old.protocol_sha256.clone()));
        }
        if wanted[3] && old.protocol_sha256 == row.protocol_sha256 {
            protocol = Some((lines, old.acceptance_threshold.clone(), old.aggregation));
        }
    }
    // The same order as Index::conflict.
    let conflict = if let Some((line, run_id)) = duplicate {
        Some(Conflict::Duplicate { line, run_id })
    } else if let Some((line, package)) = rental.filter(|(_, p)| *p != row.package) {
        Some(Conflict::RentalPackage {
            rental: row.rental.clone(),
            package: package.to_string(),
            line,
        })
    } else if let Some((line, protocol)) = corpus.filter(|(_, p)| *p != row.protocol_sha256) {
        Some(Conflict::CorpusProtocol {
            corpus: row.corpus_id.clone(),
            protocol,
            line,
        })
    } else {
        protocol
            .filter(|(_, t, a)| *t != row.acceptance_threshold || *a != row.aggregation)
            .map(|(line, _, _)| Conflict::ProtocolRules { line })
    };
    Ok(Scanned { lines, conflict })
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
            rental: "r1".into(),
            package: "b200:7:2".parse().unwrap(),
            device_model: "NVIDIA B200".into(),
            device_uuid: "GPU-1234".into(),
            driver_version: "570.86.15".into(),
            device_mismatch: false,
            measurement_sha256: sha,
            units_submitted: 10,
            units_accepted: 9,
            acceptance_threshold: "0.9".into(),
            threshold_met: true,
            aggregation: Aggregation::Best,
            notes: "quoted \"notes\", with a comma".into(),
        }
    }

    fn no_conflict(c: Conflict) -> LedgerError {
        LedgerError::Counts(c.to_string())
    }

    fn grid_of(rows: &[Row]) -> Vec<u8> {
        let mut grid = format!("{}\n", header_line()).into_bytes();
        for r in rows {
            grid.extend(r.to_line());
        }
        grid
    }

    #[test]
    fn the_repository_grid_has_this_header() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/resultats-bruts.csv"
        ));
        assert_eq!(text, format!("{}\n", header_line()));
        assert!(
            parse(Path::new("data/resultats-bruts.csv"), text.as_bytes())
                .unwrap()
                .rows
                .is_empty()
        );
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
            "-b200:3:1",
        ] {
            assert!(bad.parse::<Package>().is_err(), "{bad}");
        }
        let err = "b200:5:1".parse::<Package>().unwrap_err().to_string();
        assert!(err.contains("3, 7 or 30"), "{err}");
    }

    #[test]
    fn rows_round_trip_through_csv() {
        let r = row(1);
        let grid = parse(Path::new("g.csv"), &grid_of(std::slice::from_ref(&r))).unwrap();
        assert_eq!(grid.rows.len(), 1);
        assert_eq!(grid.rows[0].line, 2);
        assert_eq!(grid.rows[0].row, r);
    }

    #[test]
    fn an_earlier_header_and_a_foreign_one_are_refused_with_what_to_do() {
        let err = parse(Path::new("g.csv"), format!("{EARLIER_HEADER}\n").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is not a results grid of this version"),
            "{err}"
        );
        assert!(err.contains("written by an earlier iteragpu"), "{err}");
        let err = parse(Path::new("g.csv"), b"a,b\n1,2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("It is not a grid this tool writes"), "{err}");
    }

    /// Every way a row can be cut or forged is reported by its line, never counted.
    #[test]
    fn torn_and_foreign_lines_are_reported_by_line_number() {
        let good = grid_of(&[row(1), row(2)]);
        let line3 = String::from_utf8(row(2).to_line()).unwrap();
        // Every cut inside the last row.
        for cut in 1..line3.len() {
            let bytes = &good[..good.len() - line3.len() + cut];
            let err = parse(Path::new("g.csv"), bytes).unwrap_err();
            assert!(
                matches!(err, LedgerError::BadRow { line: 3, .. }),
                "cut at {cut}: {err}"
            );
        }
        let text = String::from_utf8(good.clone()).unwrap();
        let forged = [
            text.replace(",9,0.9,true,", ",9,0.9,false,"),
            text.replace(",9,0.9,true,", ",11,0.9,true,"),
            text.replace(",best,", ",most,"),
            text.replace("NVIDIA B200", "=HYPERLINK(\"x\")"),
            text.replace("NVIDIA B200", "NVIDIA\u{1b}[2J"),
            text.replace("2026-09-24T08:15:00Z", "yesterday"),
            text.replace(",r1,", ",r 1,"),
            text.replace(",0.9,", ",0.90,"),
            format!("{text}not,a,row\n"),
        ];
        for (i, bad) in forged.iter().enumerate() {
            let err = parse(Path::new("g.csv"), bad.as_bytes()).unwrap_err();
            assert!(
                matches!(err, LedgerError::BadRow { line: 2 | 4, .. }),
                "forgery {i}: {err}"
            );
        }
        assert_eq!(parse(Path::new("g.csv"), &good).unwrap().rows.len(), 2);
    }

    #[test]
    fn rows_are_checked_against_each_other() {
        let mut twice = row(2);
        twice.measurement_sha256 = row(1).measurement_sha256;
        twice.run_id = row(1).run_id;
        let mut other_package = row(2);
        other_package.package = "b200:7:1".parse().unwrap();
        let mut other_protocol = row(2);
        other_protocol.protocol_sha256 = "cd".repeat(32);
        let mut other_rule = row(2);
        other_rule.aggregation = Aggregation::Mean;
        for (bad, words) in [
            (twice, "already the row at line 2"),
            (other_package, "rental r1 is package b200:7:2 (line 2)"),
            (
                other_protocol,
                "corpus tickets-v3 is judged by protocol abababababab",
            ),
            (
                other_rule,
                "another acceptance_threshold or aggregation at line 2",
            ),
        ] {
            let err = parse(Path::new("g.csv"), &grid_of(&[row(1), bad]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("line 3:") && err.contains(words), "{err}");
        }
    }

    #[test]
    fn append_creates_checks_and_refuses_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        let first = append(&path, &row(1), no_conflict).unwrap();
        assert_eq!((first.line, first.created), (2, true));
        assert_eq!(append(&path, &row(2), no_conflict).unwrap().line, 3);
        let err = append(&path, &row(1), no_conflict).unwrap_err();
        assert!(
            err.to_string().contains("already the row at line 2"),
            "{err}"
        );
        assert_eq!(read(&path).unwrap().rows.len(), 2);

        std::fs::write(&path, "run_id,date\n").unwrap();
        assert!(matches!(
            append(&path, &row(3), no_conflict),
            Err(LedgerError::Header { .. })
        ));

        std::fs::write(&path, format!("{}\na,b,c\n", header_line())).unwrap();
        let err = append(&path, &row(3), no_conflict).unwrap_err().to_string();
        assert!(err.contains("line 2: 3 fields"), "{err}");

        // An empty file is an empty grid.
        std::fs::write(&path, "").unwrap();
        let a = append(&path, &row(3), no_conflict).unwrap();
        assert_eq!((a.line, a.created), (2, true));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left behind");
    }

    /// Rows of distinct runs (the `i`-th has SHA-256 `i` in hex) whose notes pad the grid to
    /// exactly `size` bytes with its header.
    fn grid_of_size(size: usize) -> Vec<u8> {
        let mut grid = grid_of(&[]);
        let line = |i: usize, notes: usize| {
            let mut r = row(0);
            r.measurement_sha256 = format!("{i:064x}");
            r.run_id = r.measurement_sha256[..12].to_string();
            r.notes = "n".repeat(notes);
            r.to_line()
        };
        let bare = line(1, 0).len();
        let longest = bare + NOTES_MAX;
        let remaining = size - grid.len();
        let rows = remaining.div_ceil(longest);
        for i in 0..rows {
            // Spread the bytes over the rows: every row between `bare` and `longest`.
            let len = remaining / rows + usize::from(i < remaining % rows);
            grid.extend(line(i + 1, len - bare));
        }
        assert_eq!(grid.len(), size);
        grid
    }

    /// Issue 27: a grid 322 bytes under the limit and a row with a 900-character note. The
    /// writer refuses what its readers would refuse, names the way out, and leaves the grid as
    /// it was.
    #[test]
    fn append_never_writes_a_grid_its_readers_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        let full = grid_of_size(GRID_LIMIT as usize - 322);
        std::fs::write(&path, &full).unwrap();
        let mut long = row(0xee);
        long.notes = "x".repeat(900);
        let err = append(&path, &long, no_conflict).unwrap_err();
        let size = full.len() + long.to_line().len();
        assert!(
            matches!(err, LedgerError::GridFull { size: s, limit: GRID_LIMIT, .. } if s == size as u64),
            "{err}"
        );
        assert!(
            err.is_usage(),
            "the way out is on the command line (exit 2)"
        );
        let text = err.to_string();
        for words in [
            &format!("would be {size} bytes with this row"),
            "over the 64 MiB (67108864 bytes) a results grid may hold",
            "the grid is unchanged",
            "--results NEW.csv with a file that does not exist yet",
        ] {
            assert!(text.contains(words), "{text}");
        }
        assert!(
            std::fs::read(&path).unwrap() == full,
            "the grid was changed"
        );
        let rows = full.iter().filter(|b| **b == b'\n').count() - 1;
        assert_eq!(read(&path).unwrap().rows.len(), rows);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left behind");
    }

    /// The limit is the readers' own: a grid of exactly the limit is written and read back, one
    /// byte more is refused, for an existing grid and for a new one.
    #[test]
    fn append_fills_a_grid_to_its_limit_and_not_past() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        let new = grid_of(&[row(1)]);
        let limit = new.len() as u64 - 1;
        let err = append_within(&path, &row(1), limit, no_conflict).unwrap_err();
        assert!(matches!(err, LedgerError::GridFull { .. }), "{err}");
        assert!(!path.exists(), "a refused new grid was created");

        let limit = grid_of(&[row(1), row(2)]).len() as u64;
        append_within(&path, &row(1), limit, no_conflict).unwrap();
        let a = append_within(&path, &row(2), limit, no_conflict).unwrap();
        assert_eq!(a.line, 3);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, limit);
        let err = append_within(&path, &row(3), limit, no_conflict).unwrap_err();
        assert!(matches!(err, LedgerError::GridFull { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the grid was changed");
        let read_back = lab_io::files::read_bounded(&path, limit, "a results grid").unwrap();
        assert_eq!(parse(&path, &read_back).unwrap().rows.len(), 2);
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
                        append(path, &row(t * 25 + i), no_conflict).unwrap();
                    }
                });
            }
        });
        let grid = read(&path).unwrap();
        assert_eq!(grid.rows.len(), 100);
        let lines: Vec<u64> = grid.rows.iter().map(|r| r.line).collect();
        assert_eq!(lines, (2..102).collect::<Vec<_>>());
    }

    /// A killed writer's unfinished row (the journal still beside the grid) is not part of the
    /// grid for readers, and the next writer cuts it off; without a journal, a torn last line is
    /// the file's fault and refused.
    #[test]
    fn an_unfinished_append_is_cut_back_by_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        let whole = grid_of(&[row(1), row(2)]);
        let mut torn = whole.clone();
        let next = row(3).to_line();
        torn.extend(&next[..next.len() / 2]);
        std::fs::write(&path, &torn).unwrap();
        std::fs::write(journal_path(&path), format!("{}\n", whole.len())).unwrap();
        assert_eq!(read(&path).unwrap().rows.len(), 2);
        let a = append(&path, &row(4), no_conflict).unwrap();
        assert_eq!(a.line, 4);
        let mut expected = whole.clone();
        expected.extend(row(4).to_line());
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert!(!journal_path(&path).exists());
        // No journal: refused, and the grid left as it is.
        std::fs::write(&path, &torn).unwrap();
        let err = append(&path, &row(5), no_conflict).unwrap_err();
        assert!(matches!(err, LedgerError::BadRow { line: 4, .. }), "{err}");
        assert!(err.to_string().contains("no line end"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), torn);
    }

    /// The streamed check finds what the whole grid's index finds, wherever the row it
    /// contradicts is: the same measurement, rental, corpus or protocol, first or last.
    #[test]
    fn append_finds_the_conflicts_the_index_finds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.csv");
        let mut rows = Vec::new();
        for i in 0..40u8 {
            let mut r = row(i + 1);
            r.rental = format!("r{}", i % 5);
            r.package = format!("b200:7:{}", i % 5 + 1).parse().unwrap();
            r.corpus_id = format!("c{}", i % 3);
            r.protocol_sha256 = format!("{:02x}", i % 3 + 0xa0).repeat(32);
            if i % 2 == 0 {
                r.notes = "quoted, \"here\"".into();
            } else {
                r.notes = "plain".into();
            }
            rows.push(r);
        }
        let bytes = grid_of(&rows);
        let index = parse(&path, &bytes).unwrap().index;
        let mut candidates = Vec::new();
        for base in [&rows[0], &rows[39], &rows[17]] {
            let mut dup = base.clone();
            dup.rental = "new".into();
            candidates.push(dup);
            let mut other_package = row(0xf0);
            other_package.rental = base.rental.clone();
            other_package.corpus_id = base.corpus_id.clone();
            other_package.protocol_sha256 = base.protocol_sha256.clone();
            candidates.push(other_package.clone());
            let mut other_protocol = other_package.clone();
            other_protocol.rental = "fresh".into();
            other_protocol.protocol_sha256 = "ee".repeat(32);
            candidates.push(other_protocol);
            let mut other_rules = other_package.clone();
            other_rules.rental = "fresh".into();
            other_rules.acceptance_threshold = "0.8".into();
            other_rules.threshold_met = true;
            candidates.push(other_rules);
            let mut fine = other_package.clone();
            fine.rental = "fresh".into();
            candidates.push(fine);
        }
        for (at, new) in candidates.iter().enumerate() {
            std::fs::write(&path, &bytes).unwrap();
            let expected = index.conflict(new).map(|c| c.to_string());
            let got = match append(&path, new, no_conflict) {
                Ok(a) => {
                    assert_eq!(a.line, 42);
                    None
                }
                Err(LedgerError::Counts(c)) => Some(c),
                Err(e) => panic!("candidate {at}: {e}"),
            };
            assert_eq!(got, expected, "candidate {at}");
        }
        assert!(candidates.iter().any(|c| index.conflict(c).is_none()));
    }
}
