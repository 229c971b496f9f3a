//! `summary.csv`: one row per point, rewritten atomically after every point.

use std::path::{Path, PathBuf};

use lab_io::files::{InputError, OutputError, Written};

use lab::dtype::DType;
use lab::measure::document::MeasurementDocument;
use serde::{Deserialize, Serialize};

/// The file name of a sweep's summary inside its folder.
pub const SUMMARY_FILE: &str = "summary.csv";

/// How a point ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Measured, complete, check passed.
    Ok,
    /// Refused before any device work: the pre-flight estimate exceeds the ceiling.
    WouldNotFit,
    /// A phase ran out of memory; the finished phases are in the point's document.
    OutOfMemory,
    /// Any other failure (a device error, a failed numerical check, a child that crashed).
    Failed,
    /// Not run: the sweep was interrupted (Ctrl-C, SIGTERM) before this point.
    Interrupted,
    /// Being measured when this summary was written; a summary that still says so after the
    /// sweep ended belongs to a sweep that was killed, and the point's document (if present) was
    /// not read into it.
    Running,
}

impl Status {
    /// The word used in `summary.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::WouldNotFit => "would_not_fit",
            Status::OutOfMemory => "out_of_memory",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
            Status::Running => "running",
        }
    }
}

/// One row of `summary.csv`. Empty cells are figures that do not exist (no document, no device
/// clock), never zeros.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The varied option: `batch`, `context`, `width` or `hidden`.
    pub dimension: String,
    /// Its value at this point.
    pub value: usize,
    /// Batch size of the point.
    pub batch: usize,
    /// Context of the point.
    pub context: usize,
    /// Width of the point.
    pub width: usize,
    /// Resolved hidden width of the point.
    pub hidden: usize,
    /// Storage type.
    pub dtype: DType,
    /// Highest allocated bytes over all phases.
    pub peak_allocated_bytes: Option<u64>,
    /// Highest reserved bytes over all phases.
    pub peak_reserved_bytes: Option<u64>,
    /// Median wall-clock seconds of the warm forward passes.
    pub warm_forward_median_wall_seconds: Option<f64>,
    /// Median device seconds of the warm forward passes (empty where the device has no clock).
    pub warm_forward_median_device_seconds: Option<f64>,
    /// `forward_flops` / the median (device time when present, else wall time).
    pub achieved_flops_per_second: Option<f64>,
    /// The numerical check's verdict (empty when no check ran).
    pub check_passed: Option<bool>,
    /// How the point ended.
    pub status: Status,
    /// Why, for every status but `ok`.
    pub reason: String,
    /// The point's document, relative to the sweep folder (empty when none was written).
    pub file: String,
    /// The device every point ran on, as given to `--device`: `cpu` (the CPU reference device,
    /// host arithmetic, not a GPU figure) or `cuda:N`. Empty in a summary written before the
    /// column existed. The last column, so that a reader of the earlier columns by position
    /// still finds them.
    #[serde(default)]
    pub device: String,
    /// The engine that measured: `native` (iteragpu's own) or `torch` (the machine's PyTorch).
    /// Empty in a summary written before the column existed (the native engine's).
    #[serde(default)]
    pub engine: String,
}

impl Row {
    /// The figures of a measured point, read from its document.
    pub fn from_document(
        dimension: &str,
        value: usize,
        file: &str,
        doc: &MeasurementDocument,
    ) -> Row {
        let c = &doc.configuration;
        let peak = |f: fn(&lab::measure::document::PhaseMemory) -> u64| {
            doc.phases.iter().map(|r| f(&r.memory)).max()
        };
        let (wall, device) = doc.warm_forward_medians();
        let flops = doc.achieved_flops_per_second();
        let (status, reason) = match &doc.error {
            None if doc.complete => (Status::Ok, String::new()),
            Some(e) if e.kind == "out_of_memory" => (Status::OutOfMemory, e.message.clone()),
            Some(e) => (Status::Failed, e.message.clone()),
            None => (
                Status::Failed,
                "the document says it is incomplete but gives no reason".to_string(),
            ),
        };
        Row {
            dimension: dimension.to_string(),
            value,
            batch: c.batch,
            context: c.context,
            width: c.width,
            hidden: c.hidden,
            dtype: c.dtype,
            peak_allocated_bytes: peak(|m| m.peak_allocated_bytes),
            peak_reserved_bytes: peak(|m| m.peak_reserved_bytes),
            warm_forward_median_wall_seconds: wall,
            warm_forward_median_device_seconds: device,
            achieved_flops_per_second: flops,
            check_passed: doc.check.as_ref().map(|c| c.passed),
            status,
            reason,
            file: file.to_string(),
            device: c.device.clone(),
            engine: doc
                .engine
                .as_ref()
                .map_or_else(|| "native".to_string(), |e| e.name.clone()),
        }
    }
}

/// The largest `summary.csv` read: a sweep of thousands of points is far smaller.
pub const SUMMARY_LIMIT: u64 = 16 << 20;

/// Why `summary.csv` could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// The file could not be written.
    #[error(transparent)]
    Write(#[from] OutputError),
    /// The file could not be read, or is over [`SUMMARY_LIMIT`].
    #[error(transparent)]
    Input(#[from] InputError),
    /// Not a summary this tool writes.
    #[error("{} is not a sweep summary: {reason}", .path.display())]
    Read {
        /// The summary file.
        path: PathBuf,
        /// What the CSV reader said.
        reason: String,
    },
}

/// Writes the rows as CSV (header included). A reason (it may quote a child's stderr) is stored
/// with control characters escaped and, if it starts like a spreadsheet formula, a leading `'`.
pub fn to_csv(rows: &[Row]) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    if rows.is_empty() {
        // serde writes the header with the first row; an empty sweep still gets one.
        w.write_record(HEADER)?;
    }
    for r in rows {
        let mut r = r.clone();
        r.reason = lab_io::text::neutralise_cell(&lab_io::text::printable(&r.reason)).into_owned();
        w.serialize(&r)?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

/// The columns of `summary.csv`, in order.
pub const HEADER: [&str; 18] = [
    "dimension",
    "value",
    "batch",
    "context",
    "width",
    "hidden",
    "dtype",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "warm_forward_median_wall_seconds",
    "warm_forward_median_device_seconds",
    "achieved_flops_per_second",
    "check_passed",
    "status",
    "reason",
    "file",
    "device",
    "engine",
];

/// Replaces `DIR/summary.csv` with `rows` atomically ([`lab_io::files::replace`]): a temporary
/// file in the same folder, flushed, then renamed over the old one, so a reader (or a crash)
/// sees either the previous summary or the new one, never half of one.
pub fn write_summary(dir: &Path, rows: &[Row]) -> Result<Written, SummaryError> {
    let path = dir.join(SUMMARY_FILE);
    let bytes = to_csv(rows).map_err(|e| OutputError::Io {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(lab_io::files::replace(&path, &bytes)?)
}

/// Reads a `summary.csv` (within [`SUMMARY_LIMIT`]).
pub fn read_summary(path: &Path) -> Result<Vec<Row>, SummaryError> {
    let bytes = lab_io::files::read_bounded(path, SUMMARY_LIMIT, "a sweep summary")?;
    let err = |e: csv::Error| SummaryError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut r = csv::Reader::from_reader(bytes.as_slice());
    let headers = r.headers().map_err(err)?.clone();
    // A summary written before the `device` or the `engine` column: the same columns without
    // the last one or two.
    if headers.iter().ne(HEADER)
        && headers.iter().ne(HEADER[..17].iter().copied())
        && headers.iter().ne(HEADER[..16].iter().copied())
    {
        return Err(SummaryError::Read {
            path: path.to_path_buf(),
            reason: format!("its header is not {}", HEADER.join(",")),
        });
    }
    r.deserialize()
        .collect::<Result<Vec<Row>, _>>()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn row(value: usize, status: Status) -> Row {
        Row {
            dimension: "width".into(),
            value,
            batch: 2,
            context: 128,
            width: value,
            hidden: 4 * value,
            dtype: DType::Float32,
            peak_allocated_bytes: (status == Status::Ok).then_some(1 << 20),
            peak_reserved_bytes: (status == Status::Ok).then_some(2 << 20),
            warm_forward_median_wall_seconds: (status == Status::Ok).then_some(0.25),
            warm_forward_median_device_seconds: None,
            achieved_flops_per_second: (status == Status::Ok).then_some(1.5e9),
            check_passed: (status == Status::Ok).then_some(true),
            status,
            reason: if status == Status::Ok {
                String::new()
            } else {
                "needs 3 bytes, \"quoted\", and more".into()
            },
            file: format!("point-width-{value}.json"),
            device: "cpu".into(),
            engine: "native".into(),
        }
    }

    #[test]
    fn writes_reads_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let _ = write_summary(dir.path(), &[]).unwrap();
        let text = std::fs::read_to_string(dir.path().join(SUMMARY_FILE)).unwrap();
        assert_eq!(text.trim_end(), HEADER.join(","));
        let rows = vec![row(64, Status::Ok), row(128, Status::WouldNotFit)];
        let _ = write_summary(dir.path(), &rows).unwrap();
        let text = std::fs::read_to_string(dir.path().join(SUMMARY_FILE)).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(HEADER.join(",").as_str()));
        assert_eq!(
            lines.next(),
            Some(
                "width,64,2,128,64,256,float32,1048576,2097152,0.25,,1500000000.0,true,ok,,point-width-64.json,cpu,native"
            )
        );
        assert_eq!(
            lines.next(),
            Some(
                "width,128,2,128,128,512,float32,,,,,,,would_not_fit,\"needs 3 bytes, \"\"quoted\"\", and more\",point-width-128.json,cpu,native"
            )
        );
        assert_eq!(read_summary(&dir.path().join(SUMMARY_FILE)).unwrap(), rows);
        // Only the summary: no temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_reason_that_looks_like_a_formula_is_stored_as_text() {
        let mut r = row(64, Status::Failed);
        r.reason = "=cmd|'/C calc'!A0\u{1b}[2J".into();
        let text = String::from_utf8(to_csv(&[r]).unwrap()).unwrap();
        assert!(text.contains("'=cmd|'/C calc'!A0\\u{1b}[2J"), "{text}");
    }

    #[test]
    fn a_summary_from_before_the_device_or_engine_column_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let _ = write_summary(dir.path(), &[row(64, Status::Ok)]).unwrap();
        let p = dir.path().join(SUMMARY_FILE);
        let text = std::fs::read_to_string(&p).unwrap();
        let drop_last = |text: &str| -> String {
            text.lines()
                .map(|l| format!("{}\n", l.rsplit_once(',').unwrap().0))
                .collect()
        };
        let without_engine = drop_last(&text);
        std::fs::write(&p, &without_engine).unwrap();
        let rows = read_summary(&p).unwrap();
        assert_eq!(
            (rows[0].device.as_str(), rows[0].engine.as_str()),
            ("cpu", "")
        );
        std::fs::write(&p, drop_last(&without_engine)).unwrap();
        let rows = read_summary(&p).unwrap();
        assert_eq!((rows[0].device.as_str(), rows[0].engine.as_str()), ("", ""));
        assert_eq!(rows[0].value, 64);
    }

    #[test]
    fn a_foreign_csv_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("summary.csv");
        std::fs::write(&p, "a,b\n1,2\n").unwrap();
        let err = read_summary(&p).unwrap_err().to_string();
        assert!(err.contains("is not a sweep summary"), "{err}");
    }
}
