//! Reading what the report shows: measurement documents and sweep folders.

use std::path::{Path, PathBuf};

use lab::measure::document::{MEASUREMENT_SCHEMA, MeasurementDocument};
use sweep::summary::{Row, SUMMARY_FILE, SummaryError, read_summary};

/// Why the report cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A path given does not exist.
    #[error("{} does not exist; give measurement documents (.json) or sweep folders", .0.display())]
    Missing(PathBuf),
    /// A file could not be read.
    #[error("could not read {}: {source}", .path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not a measurement document.
    #[error("{} is not a measurement document ({why}); give files written by `iteragpu measure`", .path.display())]
    NotADocument {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A folder holds neither a sweep summary nor any document.
    #[error("{} holds no summary.csv and no .json measurement document", .0.display())]
    EmptyFolder(PathBuf),
    /// A sweep summary could not be read.
    #[error(transparent)]
    Summary(#[from] SummaryError),
    /// Plotting failed (only on an internal fault: drawing into a string cannot fail otherwise).
    #[error("could not draw the chart {chart}: {message}")]
    Chart {
        /// The chart's title.
        chart: String,
        /// What plotters said.
        message: String,
    },
}

/// One measurement.
#[derive(Debug, Clone)]
pub struct Run {
    /// How the page names it: the path as given.
    pub label: String,
    /// The document.
    pub doc: MeasurementDocument,
}

/// One sweep folder.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// How the page names it: the folder as given.
    pub label: String,
    /// The rows of its `summary.csv`.
    pub rows: Vec<Row>,
    /// The first point's document, for the environment table (absent when no point wrote one).
    pub first: Option<MeasurementDocument>,
}

impl Sweep {
    /// The varied option (`width`, ...), from the summary.
    pub fn dimension(&self) -> Option<&str> {
        self.rows.first().map(|r| r.dimension.as_str())
    }
}

/// Everything the page shows.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Single measurements, in the order given.
    pub runs: Vec<Run>,
    /// Sweeps, in the order given.
    pub sweeps: Vec<Sweep>,
}

/// Reads documents and folders: a folder with a `summary.csv` is a sweep; any other folder
/// contributes each `.json` document in it (sorted by name).
pub fn load(paths: &[PathBuf]) -> Result<Inputs, ReportError> {
    let mut inputs = Inputs::default();
    for path in paths {
        if path.is_file() {
            inputs.runs.push(run(path)?);
        } else if path.is_dir() {
            let summary = path.join(SUMMARY_FILE);
            if summary.is_file() {
                let rows = read_summary(&summary)?;
                let first = rows
                    .iter()
                    .find(|r| !r.file.is_empty() && path.join(&r.file).is_file())
                    .map(|r| document(&path.join(&r.file)))
                    .transpose()?;
                inputs.sweeps.push(Sweep {
                    label: path.display().to_string(),
                    rows,
                    first,
                });
            } else {
                let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                    .map_err(|source| ReportError::Read {
                        path: path.clone(),
                        source,
                    })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
                    .collect();
                if files.is_empty() {
                    return Err(ReportError::EmptyFolder(path.clone()));
                }
                files.sort();
                for f in files {
                    inputs.runs.push(run(&f)?);
                }
            }
        } else {
            return Err(ReportError::Missing(path.clone()));
        }
    }
    Ok(inputs)
}

fn run(path: &Path) -> Result<Run, ReportError> {
    Ok(Run {
        label: path.display().to_string(),
        doc: document(path)?,
    })
}

fn document(path: &Path) -> Result<MeasurementDocument, ReportError> {
    let bytes = std::fs::read(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let not = |why: String| ReportError::NotADocument {
        path: path.to_path_buf(),
        why,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| not(format!("not JSON: {e}")))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(MEASUREMENT_SCHEMA) => {}
        Some(other) => return Err(not(format!("its schema is {other:?}"))),
        None => return Err(not("it has no schema".to_string())),
    }
    serde_json::from_value(value).map_err(|e| not(e.to_string()))
}
