//! Reading what the report shows: measurement, probe, price, fit and ledger documents, and
//! sweep folders.

use std::path::{Path, PathBuf};

use lab::measure::document::{
    MEASUREMENT_KIND, MEASUREMENT_LIMIT, MEASUREMENT_SCHEMA, MeasurementDocument,
};
use lab::probe::{PROBE_SCHEMA, ProbeDocument};
use lab_io::files::InputError;
use sweep::summary::{Row, SUMMARY_FILE, SummaryError, read_summary};

/// The most a report reads in all (documents and summaries together): what one page can show
/// and a browser can open.
pub const TOTAL_LIMIT: u64 = 64 << 20;

/// Why the report cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A path given does not exist.
    #[error("{} does not exist; give measurement, probe, price, fit or cost documents (.json) or sweep folders", .0.display())]
    Missing(PathBuf),
    /// A folder could not be listed.
    #[error("could not read {}: {reason}", .path.display())]
    Read {
        /// The folder.
        path: PathBuf,
        /// The OS error, once.
        reason: String,
    },
    /// A file could not be read, or is over its limit.
    #[error(transparent)]
    Input(#[from] InputError),
    /// All inputs together are over the total limit, `TOTAL_LIMIT`.
    #[error(
        "the inputs add up to more than {}, the most one report reads; make several reports",
        lab_io::bytes::exact(TOTAL_LIMIT)
    )]
    TooMuch,
    /// A summary row names a file that is not a plain name inside the sweep folder.
    #[error("{}: the row for {dimension} {value} names the file {file:?}, which is not a file name inside the sweep folder; a sweep's summary only names its own point documents", .summary.display())]
    OutsideFile {
        /// The summary.
        summary: PathBuf,
        /// The row's dimension.
        dimension: String,
        /// The row's value.
        value: usize,
        /// The file it names.
        file: String,
    },
    /// A file is not a measurement document (nor, where one may stand, a probe, price, fit or
    /// ledger document).
    #[error("{} is not a measurement document ({why}); give files written by `iteragpu measure`, `probe`, or `price`, `fit` and `cost` with --json", .path.display())]
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

/// One probe of a device or a lot.
#[derive(Debug, Clone)]
pub struct Probe {
    /// How the page names it: the path as given.
    pub label: String,
    /// The document.
    pub doc: ProbeDocument,
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

/// What a money document is: the output of `iteragpu price --json`, `fit --json` or
/// `cost --json`, told apart by their keys (these documents carry no schema field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoneyKind {
    /// `iteragpu price --json`: one package and its price.
    Price,
    /// `iteragpu fit --json`: the packages a model fits on, each with its price.
    Fit,
    /// `iteragpu cost --json`: the ledger's rentals, their prices and accepted units.
    Ledger,
}

/// A price, fit or ledger document, kept as JSON: the page reads only the fields it shows.
#[derive(Debug, Clone)]
pub struct Money {
    /// How the page names it: the path as given.
    pub label: String,
    /// Which command wrote it.
    pub kind: MoneyKind,
    /// The document.
    pub doc: serde_json::Value,
    /// A fit document's rows and assumptions, as the decision table reads them.
    pub fit: Option<crate::fit::FitDocument>,
}

/// Everything the page shows.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Single measurements, in the order given.
    pub runs: Vec<Run>,
    /// Sweeps, in the order given.
    pub sweeps: Vec<Sweep>,
    /// Probe documents, in the order given.
    pub probes: Vec<Probe>,
    /// Price, fit and ledger documents, in the order given.
    pub money: Vec<Money>,
    /// Verdicts the page leads with (a fit document's, a fleet's `fleet check`); the page shows
    /// the failing ones first.
    pub verdicts: Vec<Verdict>,
}

/// How a verdict, or one of its lines, stands: the page marks the failing ones and the doubtful
/// ones in their colours, and puts them first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Standing {
    /// It says no: FAILED, does not fit.
    Fails,
    /// Not a clear yes: tight, warnings, not known.
    Warns,
    /// It says yes.
    #[default]
    Ok,
}

impl Standing {
    /// The page's class for it.
    pub fn class(self) -> &'static str {
        match self {
            Standing::Fails => "bad",
            Standing::Warns => "warn",
            Standing::Ok => "ok",
        }
    }
}

/// A verdict the page leads with (a fleet's `fleet check`, a fit's decision): one headline and
/// its findings, each one line.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// What was judged (the fleet's folder, the fit document).
    pub label: String,
    /// How it stands.
    pub standing: Standing,
    /// The verdict line.
    pub headline: String,
    /// The findings and what was not checked, each with how it stands.
    pub lines: Vec<(Standing, String)>,
}

/// A document of any kind the report reads.
enum Document {
    Measurement(Box<MeasurementDocument>),
    Probe(Box<ProbeDocument>),
    Money(MoneyKind, serde_json::Value),
}

/// The keys that tell a schema-less money document apart, each with the type it must have.
fn money_kind(value: &serde_json::Value) -> Option<MoneyKind> {
    use serde_json::Value as V;
    let has = |k: &str, f: fn(&V) -> bool| value.get(k).is_some_and(f);
    let s = |k: &str| has(k, V::is_string);
    let n = |k: &str| has(k, V::is_u64);
    if s("results") && s("catalogue") && has("rentals", V::is_array) && has("totals", V::is_array) {
        Some(MoneyKind::Ledger)
    } else if s("model")
        && s("catalogue")
        && has("estimate", V::is_object)
        && has("options", V::is_array)
    {
        Some(MoneyKind::Fit)
    } else if s("gpu")
        && s("currency")
        && s("catalogue")
        && n("lot_price_cents")
        && n("total_price_cents")
        && n("days")
        && n("lots")
    {
        Some(MoneyKind::Price)
    } else {
        None
    }
}

/// A summary's `file` cell as a path inside `folder`: a plain file name (no folder part, no
/// `..`, not absolute) of a regular file there (not a link, which could point anywhere).
fn inside(folder: &Path, summary: &Path, row: &Row) -> Result<Option<PathBuf>, ReportError> {
    if row.file.is_empty() {
        return Ok(None);
    }
    let outside = || ReportError::OutsideFile {
        summary: summary.to_path_buf(),
        dimension: row.dimension.clone(),
        value: row.value,
        file: row.file.clone(),
    };
    let name = Path::new(&row.file);
    let plain = matches!(
        name.components().collect::<Vec<_>>().as_slice(),
        [std::path::Component::Normal(_)]
    ) && !row.file.contains(['/', '\\']);
    if !plain {
        return Err(outside());
    }
    let path = folder.join(name);
    match path.symlink_metadata() {
        Ok(meta) if meta.file_type().is_symlink() => Err(outside()),
        Ok(meta) if meta.is_file() => Ok(Some(path)),
        // Named but absent (a point killed before it wrote): nothing to read.
        _ => Ok(None),
    }
}

/// Counts what is read against [`TOTAL_LIMIT`].
#[derive(Debug, Default)]
struct Budget(u64);

impl Budget {
    fn take(&mut self, bytes: usize) -> Result<(), ReportError> {
        self.0 = self.0.saturating_add(bytes as u64);
        if self.0 > TOTAL_LIMIT {
            Err(ReportError::TooMuch)
        } else {
            Ok(())
        }
    }
}

/// Reads documents and folders: a folder with a `summary.csv` is a sweep, whose documents are
/// read only by plain file names inside it; a fleet's folder (node sub-folders holding
/// `probe.json` or `measure.json`) contributes those; any other folder contributes each `.json` document
/// in it (sorted by name). A document is a measurement or a probe, told apart by its schema. Each document is read within [`MEASUREMENT_LIMIT`], all of them within
/// `TOTAL_LIMIT`.
pub fn load(paths: &[PathBuf]) -> Result<Inputs, ReportError> {
    let mut inputs = Inputs::default();
    let mut budget = Budget::default();
    for path in paths {
        if path.is_dir() {
            let summary = path.join(SUMMARY_FILE);
            if summary.is_file() {
                let rows = read_summary(&summary)?;
                let mut first = None;
                for r in &rows {
                    if let Some(file) = inside(path, &summary, r)?
                        && first.is_none()
                    {
                        first = Some(document(&file, &mut budget)?);
                    }
                }
                inputs.sweeps.push(Sweep {
                    label: path.display().to_string(),
                    rows,
                    first,
                });
            } else if let Some(nodes) = fleet_documents(path)? {
                for f in nodes {
                    add(&mut inputs, &f, &mut budget)?;
                }
            } else {
                let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                    .map_err(|e| ReportError::Read {
                        path: path.clone(),
                        reason: lab_io::files::os_message(&e),
                    })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.symlink_metadata().is_ok_and(|m| m.is_file())
                            && p.extension().is_some_and(|e| e == "json")
                    })
                    .collect();
                if files.is_empty() {
                    return Err(ReportError::EmptyFolder(path.clone()));
                }
                files.sort();
                for f in files {
                    add(&mut inputs, &f, &mut budget)?;
                }
            }
        } else if path.exists() {
            // A file, or anything else that reads like one (a device, a pipe): within its limit.
            add(&mut inputs, path, &mut budget)?;
        } else {
            return Err(ReportError::Missing(path.clone()));
        }
    }
    Ok(inputs)
}

/// A fleet's folder (as `fleet slurm` and `fleet skypilot` lay it out): one sub-folder per node
/// holding `probe.json` and `measure.json` (`environment.json` is not drawn). Their paths, nodes
/// by name, or `None` when no sub-folder holds one (then the folder is read as any other).
fn fleet_documents(path: &Path) -> Result<Option<Vec<PathBuf>>, ReportError> {
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| ReportError::Read {
            path: path.to_path_buf(),
            reason: lab_io::files::os_message(&e),
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()))
        .collect();
    nodes.sort();
    let found: Vec<PathBuf> = nodes
        .iter()
        .flat_map(|n| ["probe.json", "measure.json"].map(|f| n.join(f)))
        .filter(|p| p.symlink_metadata().is_ok_and(|m| m.is_file()))
        .collect();
    Ok((!found.is_empty()).then_some(found))
}

fn add(inputs: &mut Inputs, path: &Path, budget: &mut Budget) -> Result<(), ReportError> {
    let label = path.display().to_string();
    match any_document(path, budget)? {
        Document::Measurement(doc) => inputs.runs.push(Run { label, doc: *doc }),
        Document::Probe(doc) => inputs.probes.push(Probe { label, doc: *doc }),
        Document::Money(kind, doc) => {
            let fit = match kind {
                MoneyKind::Fit => {
                    let fit: crate::fit::FitDocument = serde_json::from_value(doc.clone())
                        .map_err(|e| ReportError::NotADocument {
                            path: path.to_path_buf(),
                            why: format!("a fit document whose rows do not read: {e}"),
                        })?;
                    inputs.verdicts.push(crate::fit::verdict(&label, &fit));
                    Some(fit)
                }
                MoneyKind::Price | MoneyKind::Ledger => None,
            };
            inputs.money.push(Money {
                label,
                kind,
                doc,
                fit,
            });
        }
    }
    Ok(())
}

/// A sweep's point: a measurement document only.
fn document(path: &Path, budget: &mut Budget) -> Result<MeasurementDocument, ReportError> {
    match any_document(path, budget)? {
        Document::Measurement(doc) => Ok(*doc),
        Document::Probe(_) | Document::Money(..) => Err(ReportError::NotADocument {
            path: path.to_path_buf(),
            why: "it is not a measurement, and a sweep's points are measurements".to_string(),
        }),
    }
}

fn any_document(path: &Path, budget: &mut Budget) -> Result<Document, ReportError> {
    // A probe document is smaller than a measurement's bound allows: the same bound serves both.
    let bytes = lab_io::files::read_bounded(path, MEASUREMENT_LIMIT, MEASUREMENT_KIND)?;
    budget.take(bytes.len())?;
    let not = |why: String| ReportError::NotADocument {
        path: path.to_path_buf(),
        why,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| not(format!("not JSON: {e}")))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(MEASUREMENT_SCHEMA) => serde_json::from_value(value)
            .map(|d| Document::Measurement(Box::new(d)))
            .map_err(|e| not(e.to_string())),
        Some(PROBE_SCHEMA) => serde_json::from_value(value)
            .map(|d| Document::Probe(Box::new(d)))
            .map_err(|e| not(format!("a probe document that does not read: {e}"))),
        Some(other) => Err(not(format!("its schema is {other:?}"))),
        None => match money_kind(&value) {
            Some(kind) => Ok(Document::Money(kind, value)),
            None => Err(not(
                "it has no schema, and it is not the output of `iteragpu price --json`, \
                 `fit --json` or `cost --json`"
                    .to_string(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn money_documents_are_told_apart_by_their_keys_and_their_types() {
        let price = json!({"gpu": "h100", "currency": "USD", "catalogue": "embedded",
            "lot_price_cents": 1, "total_price_cents": 1, "days": 7, "lots": 1});
        assert_eq!(money_kind(&price), Some(MoneyKind::Price));
        let fit = json!({"model": "m", "catalogue": "embedded", "estimate": {}, "options": []});
        assert_eq!(money_kind(&fit), Some(MoneyKind::Fit));
        let ledger =
            json!({"results": "r.csv", "catalogue": "embedded", "rentals": [], "totals": []});
        assert_eq!(money_kind(&ledger), Some(MoneyKind::Ledger));
        // A price in words, or a key missing: not a document the report reads.
        let mut wrong = price.clone();
        wrong["total_price_cents"] = json!("a lot");
        assert_eq!(money_kind(&wrong), None);
        assert_eq!(money_kind(&json!({"gpu": "h100"})), None);
        assert_eq!(money_kind(&json!([1, 2])), None);
    }
}
