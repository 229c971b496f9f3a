//! `fleet check DIR`: every node's results judged together, against the plan.
//!
//! `fleet slurm` and `fleet skypilot` write the plan, `DIR/fleet.json` (package, nodes, checks,
//! GPUs per node, device), before any node runs; the job writes its id to `DIR/fleet.job` and
//! (Slurm) its node names to `DIR/nodes.txt`; every node leaves one folder, `DIR/<node>/`, with,
//! for each check, the document `<check>.json`, the step's exit code `<check>.exit` and its
//! error line `<check>.err`. This module reads them all and gives one [`FleetVerdict`]. The plan
//! is the contract: every planned node x check must have left a complete document with exit 0,
//! from that job. The verdict fails, each cause a [`FleetFinding`] naming the node (and GPU):
//!
//! - a node or a check missing, an empty node folder, a step that failed (its exit code and the
//!   first line of its `.err`; 124 its time limit, 137/143 a kill by signal), a step that did
//!   not finish (no `.exit`, a partial document), an `.exit` that is not an exit code;
//! - documents of another job (job id, node count), the same node name, rank or GPU UUID in two
//!   folders, a folder the job's node list does not name, a job Slurm cancelled (its own
//!   `*** ... CANCELLED ... ***` line);
//! - every warning a node's own documents carry (ECC errors, retired or remapped rows, clock
//!   throttling, power cap, NVLink down, a figure below its datasheet share, ...): lifted to the
//!   fleet with node and GPU, failing the verdict or only warning, each with why;
//! - a GPU more than [`lab::probe::LOT_OUTLIER_PERCENT`] below the median of every other GPU of
//!   every node on a probe figure (sorted once: O(G log G) for G GPUs);
//! - with a package (`--package`, else the plan's), the whole package over all nodes.
//!
//! Without a plan the verdict says what it could not check. Usage mistakes (no such folder) are
//! [`FleetError`]s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use lab::environment::{ENVIRONMENT_SCHEMA, EnvironmentReport};
use lab::lot::{
    Expectation, Finding, GpuFacts, LOT_SCHEMA, LotReport, Severity, check_package_findings,
};
use lab::measure::document::{MEASUREMENT_LIMIT, MEASUREMENT_SCHEMA, MeasurementDocument};
use lab::node::NodeIdentity;
use lab::probe::{LOT_OUTLIER_PERCENT, PROBE_SCHEMA, ProbeDocument};
use lab::stats::low_outliers_of_lot;
use lab_torch::collective::{
    COLLECTIVE_LIMIT, COLLECTIVE_SCHEMA, CollectiveDocument, SizeResult, judge, slow_pairs,
};
use rent::datasheet::Datasheet;

use crate::{Check, Device, JOB_FILE, PLAN_FILE, Plan};

/// Schema identifier of the verdict (`fleet check --json`).
pub const FLEET_VERDICT_SCHEMA: &str = "iteragpu.fleet-verdict/2";

/// The most of a `.err` file read: its first line is what counts.
const SMALL_FILE_LIMIT: u64 = 1 << 20;
/// The most of an `.exit` file read: a number and a newline.
const EXIT_FILE_LIMIT: u64 = 64;
/// The most of the plan read.
const PLAN_LIMIT: u64 = 1 << 20;
/// The first error line is cut to this many characters.
const ERROR_LINE_CHARS: usize = 400;
/// The most of the batch script's own output read for Slurm's cancel lines.
const SLURM_OUT_LIMIT: u64 = 4 << 20;
/// What `fleet slurm --submit` wrote of Slurm's own account of the job once it ended: its
/// state, reason and exit code (`scontrol show job`), `sacct`'s lines where accounting runs, and
/// the job's nodes Slurm marks down or drained.
pub const SLURM_ACCOUNT_FILE: &str = "fleet.slurm.json";
/// The most table rows printed without `--table` (outliers and failing GPUs always are).
pub const TABLE_ROWS: usize = 16;

/// Why a folder cannot be judged at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The folder does not exist or is not a folder.
    #[error("{} is not a folder; give the folder the fleet's batch script wrote its node folders into", .0.display())]
    NotAFolder(PathBuf),
    /// It could not be listed.
    #[error("could not read {}: {reason}", .path.display())]
    Read {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// It holds no node folder and no plan.
    #[error("{} holds no node folder and no fleet.json (DIR/<node>/environment.json, probe.json, measure.json with their .exit and .err)", .0.display())]
    NoNode(PathBuf),
}

/// What the check compares against.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The package the fleet must make up in all (its `share` is ignored: the whole package).
    pub package: Option<Expectation>,
    /// The datasheet table the models are looked up in.
    pub datasheet: Datasheet,
    /// How far below the fleet's median of the others a figure makes its GPU an outlier.
    pub outlier_percent: f64,
    /// The nodes expected (else the plan's, else the largest node count the documents give).
    pub nodes: Option<u32>,
    /// The plan file, when it is not `DIR/fleet.json` (`fleet skypilot` writes it beside the
    /// task YAML).
    pub plan: Option<PathBuf>,
    /// The all-reduce bus bandwidth the package's fabric should give at 1 GiB, GB/s: what the
    /// provider promises, stated by the renter (the catalogue does not know the fabric).
    pub expected_busbw_gb_s: Option<f64>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            package: None,
            datasheet: Datasheet::embedded(),
            outlier_percent: LOT_OUTLIER_PERCENT,
            nodes: None,
            plan: None,
            expected_busbw_gb_s: None,
        }
    }
}

/// Whether a finding fails the verdict or only warns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The verdict is FAILED because of it.
    Fails,
    /// Worth knowing; the verdict can still be OK.
    Warns,
}

/// One thing the fleet check found, about the fleet, a node or one GPU of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetFinding {
    /// A stable name (`node_missing`, `ecc_uncorrected_errors`, ...), for scripts.
    pub code: String,
    /// Whether it fails the verdict.
    pub effect: Effect,
    /// The node's folder, when it is about one node.
    pub node: Option<String>,
    /// The GPU (`cuda:1`), when it is about one GPU.
    pub gpu: Option<String>,
    /// One sentence with the figures.
    pub message: String,
    /// Why it fails the verdict or only warns.
    pub why: String,
    /// The figures, as numbers.
    pub figures: Value,
}

impl FleetFinding {
    fn fails(code: &str, node: Option<&str>, message: String, why: &str, figures: Value) -> Self {
        FleetFinding {
            code: code.to_string(),
            effect: Effect::Fails,
            node: node.map(str::to_string),
            gpu: None,
            message,
            why: why.to_string(),
            figures,
        }
    }

    fn warns(code: &str, node: Option<&str>, message: String, why: &str, figures: Value) -> Self {
        FleetFinding {
            effect: Effect::Warns,
            ..Self::fails(code, node, message, why, figures)
        }
    }
}

/// How one check went on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Exit 0 and a complete document that reads.
    Ok,
    /// A non-zero exit, an `.exit` that is not one, a document that does not read or is
    /// partial, or a step that did not finish.
    Failed,
    /// Planned (or run by the other nodes), but this node left no file of it.
    Missing,
}

/// One check on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepOutcome {
    /// `environment`, `probe` or `measure`.
    pub check: String,
    /// How it went.
    pub status: StepStatus,
    /// The exit code from `<check>.exit`, when there is one.
    pub exit_code: Option<i32>,
    /// What ended it, when an exit code or Slurm says (`killed by SIGKILL`, `its time limit`).
    pub cause: Option<String>,
    /// The first line of `<check>.err`, or why the document does not read.
    pub error: Option<String>,
    /// Whether `<check>.json` was there.
    pub document: bool,
}

/// One node of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    /// Its folder's name.
    pub folder: String,
    /// What its documents say about it (the first that says).
    pub identity: Option<NodeIdentity>,
    /// One entry per check the plan names (without a plan: any node ran).
    pub steps: Vec<StepOutcome>,
    /// GPUs its driver sees.
    pub visible_gpus: Option<usize>,
    /// Findings its own documents carry (their lot and probe checks), lifted to the fleet.
    pub document_findings: usize,
    /// Every step ok.
    pub ok: bool,
}

/// One probe figure of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetFigure {
    /// `h2d_pinned`, `d2d`, `bfloat16`, ...
    pub figure: String,
    /// GB/s or TFLOP/s.
    pub value: f64,
    /// `GB/s` or `TFLOP/s`.
    pub unit: String,
    /// Its percentage of the datasheet figure, when judged.
    pub percent: Option<f64>,
}

/// One row of the table: a GPU (or the CPU reference device) of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetGpu {
    /// The node's folder.
    pub node: String,
    /// `cuda:N` or `cpu`.
    pub device: String,
    /// The model (the driver's name, or the CPU's).
    pub model: String,
    /// Its UUID (GPUs).
    pub uuid: Option<String>,
    /// Its total memory, MiB (GPUs).
    pub memory_mib: Option<u64>,
    /// The driver version NVML gives, else the CUDA version of the driver.
    pub driver: Option<String>,
    /// True for a GPU, false for the CPU reference device.
    pub gpu: bool,
    /// Its probe figures, in the probe's order.
    pub figures: Vec<FleetFigure>,
}

/// A GPU below the rest of the fleet on one figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetOutlier {
    /// The node's folder.
    pub node: String,
    /// `cuda:N`.
    pub device: String,
    /// Which figure.
    pub figure: String,
    /// Its value.
    pub value: f64,
    /// The median of every other GPU of the fleet on it.
    pub median_of_others: f64,
    /// How far below, percent.
    pub percent_below: f64,
}

/// The fleet's verdict: `fleet check DIR --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetVerdict {
    /// Always [`FLEET_VERDICT_SCHEMA`].
    pub schema: String,
    /// The folder judged.
    pub folder: String,
    /// The plan (`fleet.json`) the nodes were held to, when the folder has one.
    pub plan: Option<Plan>,
    /// The job the documents must come from (`fleet.job`, else the documents' majority).
    pub job: Option<String>,
    /// The nodes expected (from `--nodes`, the plan or the documents), when known.
    pub expected_nodes: Option<u32>,
    /// One entry per node (folder, or node the job's list names), by name.
    pub nodes: Vec<NodeVerdict>,
    /// The checks every node must have run (the plan's; without one, any node ran).
    pub checks: Vec<String>,
    /// The table: every GPU of every node.
    pub gpus: Vec<FleetGpu>,
    /// The package checked over all nodes.
    pub package: Option<Expectation>,
    /// Outliers against the fleet.
    pub outliers: Vec<FleetOutlier>,
    /// The collective check's judgement, when the plan (or a node) ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveVerdict>,
    /// Every finding, those that fail the verdict first.
    pub findings: Vec<FleetFinding>,
    /// How many findings fail the verdict.
    pub failures: usize,
    /// How many findings only warn.
    pub warnings: usize,
    /// What the verdict could not check, and why (no plan, no package, ...).
    pub not_checked: Vec<String>,
    /// No finding fails the verdict.
    pub ok: bool,
    /// 0 when `ok`, else 1.
    pub exit_code: u8,
}

/// The network between the nodes, as the collective check measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveVerdict {
    /// `passed`, `failed` or `not checked`.
    pub verdict: String,
    /// `nccl` or `gloo` (the first rank's).
    pub backend: Option<String>,
    /// What NCCL chose (`IB`, `Socket`, ...) or `gloo TCP`.
    pub transport: Option<String>,
    /// The run's ranks.
    pub world_size: Option<u32>,
    /// The documents found, one per rank.
    pub documents: usize,
    /// The all-reduce bus bandwidth at the largest size, GB/s.
    pub busbw_gb_s: Option<f64>,
    /// What it was held to, GB/s (`--expect-busbw`).
    pub expected_busbw_gb_s: Option<f64>,
    /// The curve, as nccl-tests prints it: rank 0's rows (the time is the slowest rank's).
    pub curve: Vec<SizeResult>,
    /// The pair pass: the all-reduce bus bandwidth at the largest size over each pair of nodes.
    pub pairs: Vec<PairFigure>,
}

/// One run of the pair pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFigure {
    /// The first node.
    pub a: String,
    /// The second node.
    pub b: String,
    /// The all-reduce bus bandwidth at the largest size, GB/s, when the pair measured it.
    pub busbw_gb_s: Option<f64>,
}

impl FleetVerdict {
    /// The process exit code that says the verdict.
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }
}

/// What one node's documents hold, once read.
#[derive(Default)]
struct NodeDocuments {
    lot: Option<LotReport>,
    environment: Option<EnvironmentReport>,
    probe: Option<ProbeDocument>,
    measure: Option<MeasurementDocument>,
    collective: Option<CollectiveDocument>,
}

fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(ERROR_LINE_CHARS).collect())
}

/// What a path is when it is not a regular file, for a sentence.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "symbolic link"
    } else if t.is_dir() {
        "folder"
    } else {
        "special file (a FIFO, socket or device)"
    }
}

/// Reads a regular file of at most `limit` bytes; a link, FIFO or device is never opened.
fn read_regular(path: &Path, limit: u64, what: &'static str) -> Result<Option<Vec<u8>>, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match path.symlink_metadata() {
        Err(_) => Ok(None),
        Ok(m) if !m.is_file() => Err(format!(
            "{name} is a {}, not a file the step wrote",
            kind_of(&m)
        )),
        Ok(m) if m.len() > limit => Err(format!(
            "{name} holds {} bytes, more than {what} can ({limit})",
            m.len()
        )),
        Ok(_) => lab_io::files::read_bounded(path, limit, what)
            .map(Some)
            .map_err(|e| e.to_string()),
    }
}

/// An `.exit` file as the step scripts write it: a decimal number from 0 to 255 and a newline.
enum ExitRead {
    Absent,
    Code(i32),
    Bad(String),
}

fn read_exit(path: &Path) -> ExitRead {
    match read_regular(path, EXIT_FILE_LIMIT, "an exit code file") {
        Ok(None) => ExitRead::Absent,
        Err(e) => ExitRead::Bad(e),
        Ok(Some(bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            let t = text.trim();
            let code = (!t.is_empty() && t.len() <= 3 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<i32>().ok())
                .flatten()
                .filter(|c| (0..=255).contains(c));
            match code {
                Some(c) => ExitRead::Code(c),
                None => ExitRead::Bad(format!(
                    "{} holds `{}`, not an exit code from 0 to 255",
                    path.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    t.chars()
                        .take(40)
                        .map(|c| if c.is_control() { '?' } else { c })
                        .collect::<String>()
                )),
            }
        }
    }
}

/// What an exit code says ended the step, when it is more than "it failed".
pub fn exit_cause(code: i32) -> Option<String> {
    match code {
        124 => Some("its time limit ended it (`timeout`, exit 124)".to_string()),
        137 => Some(
            "killed by SIGKILL (exit 137: out of memory, or Slurm ending the step at its time limit or on scancel)"
                .to_string(),
        ),
        143 => Some("killed by SIGTERM (exit 143: scancel, or Slurm's time limit)".to_string()),
        129..=192 => Some(format!("killed by signal {} (exit {code})", code - 128)),
        _ => None,
    }
}

/// Reads `<check>.json` into `docs`; `Err` says why it does not read or is partial.
fn read_document(path: &Path, check: Check, docs: &mut NodeDocuments) -> Result<(), String> {
    let bytes = match read_regular(path, MEASUREMENT_LIMIT, "a fleet node's document")? {
        Some(b) => b,
        None => return Err(format!("no {}.json", check.name())),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(format!(
            "{}.json is empty: the step wrote nothing (killed before its document?)",
            check.name()
        ));
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_eof() {
            format!(
                "{}.json is cut short ({} bytes, {e}): the step was ended while writing it",
                check.name(),
                bytes.len()
            )
        } else {
            format!("{}.json is not JSON: {e}", check.name())
        }
    })?;
    let schema = value.get("schema").and_then(Value::as_str).unwrap_or("");
    let wrong = |e: serde_json::Error| format!("{}.json does not read: {e}", check.name());
    match (check, schema) {
        (Check::Environment, LOT_SCHEMA) => {
            let l: LotReport = serde_json::from_value(value).map_err(wrong)?;
            docs.lot = Some(l);
        }
        (Check::Environment, ENVIRONMENT_SCHEMA) => {
            docs.environment = Some(serde_json::from_value(value).map_err(wrong)?);
        }
        (Check::Probe, PROBE_SCHEMA) => {
            let p: ProbeDocument = serde_json::from_value(value).map_err(wrong)?;
            let partial = (!p.complete).then(|| {
                format!(
                    "probe.json is partial (complete: false){}",
                    p.error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )
            });
            docs.probe = Some(p);
            if let Some(e) = partial {
                return Err(e);
            }
        }
        (Check::Measure, MEASUREMENT_SCHEMA) => {
            let m: MeasurementDocument = serde_json::from_value(value).map_err(wrong)?;
            let partial = (!m.complete).then(|| {
                format!(
                    "measure.json is partial (complete: false){}",
                    m.error
                        .as_ref()
                        .map(|e| format!(": {}", e.message))
                        .unwrap_or_default()
                )
            });
            docs.measure = Some(m);
            if let Some(e) = partial {
                return Err(e);
            }
        }
        (Check::Collective, COLLECTIVE_SCHEMA) => {
            docs.collective = Some(serde_json::from_value(value).map_err(wrong)?);
        }
        (_, other) => {
            return Err(format!(
                "{}.json has the schema {other:?}, not a {} document",
                check.name(),
                check.name()
            ));
        }
    }
    Ok(())
}

struct NodeRead {
    folder: String,
    /// False for a node the job's node list names but no folder holds.
    exists: bool,
    docs: NodeDocuments,
    /// Per check: what its files say, or `None` when the node left no file of it.
    steps: Vec<(Check, Option<StepRead>)>,
}

struct StepRead {
    exit: ExitRead,
    error: Option<String>,
    document: bool,
    unreadable: Option<String>,
}

fn read_node(folder: &Path, name: String) -> NodeRead {
    let mut docs = NodeDocuments::default();
    let mut steps = Vec::new();
    for check in Check::ALL {
        let file = |ext: &str| folder.join(format!("{}.{ext}", check.name()));
        let json_path = file("json");
        let document = json_path.symlink_metadata().is_ok();
        let exit = read_exit(&file("exit"));
        let err = read_regular(&file("err"), SMALL_FILE_LIMIT, "a step's stderr line");
        let err_present = !matches!(err, Ok(None));
        if !document && matches!(exit, ExitRead::Absent) && !err_present {
            steps.push((check, None));
            continue;
        }
        let unreadable = if document {
            read_document(&json_path, check, &mut docs).err()
        } else {
            None
        };
        steps.push((
            check,
            Some(StepRead {
                exit,
                error: match err {
                    Ok(b) => b.as_deref().and_then(first_line),
                    Err(e) => Some(e),
                },
                document,
                unreadable,
            }),
        ));
    }
    NodeRead {
        folder: name,
        exists: true,
        docs,
        steps,
    }
}

/// Reads the plan `DIR/fleet.json`: `Ok(None)` when there is none, `Err` (a sentence) when it
/// is there but does not read.
pub fn read_plan(dir: &Path) -> Result<Option<Plan>, String> {
    read_plan_file(&dir.join(PLAN_FILE))
}

/// Reads a plan file: `Ok(None)` when there is none, `Err` (a sentence) when it does not read.
pub fn read_plan_file(path: &Path) -> Result<Option<Plan>, String> {
    let bytes = match read_regular(path, PLAN_LIMIT, "a fleet plan")? {
        Some(b) => b,
        None => return Ok(None),
    };
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{PLAN_FILE} is not JSON: {e}"))?;
    if value.get("schema").and_then(Value::as_str) != Some(crate::PLAN_SCHEMA) {
        return Err(format!(
            "{PLAN_FILE} is not a fleet plan (its schema is not {})",
            crate::PLAN_SCHEMA
        ));
    }
    let plan: Plan =
        serde_json::from_value(value).map_err(|e| format!("{PLAN_FILE} does not read: {e}"))?;
    plan.validate()
        .map_err(|e| format!("{PLAN_FILE} is not a plan that can run: {e}"))?;
    Ok(Some(plan))
}

/// A job id or node name as the job wrote it: one plain token, else nothing.
fn token_file(path: &Path) -> Result<Option<String>, String> {
    let Some(bytes) = read_regular(path, 4096, "a job id file")? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    if text.is_empty()
        || text.len() > lab::node::MAX_TOKEN_CHARS
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
    {
        return Err(format!(
            "{} holds `{}`, not a job id",
            path.display(),
            text.chars().take(40).collect::<String>()
        ));
    }
    Ok(Some(text))
}

/// Slurm's own lines in the batch script's output that say a job or step was ended:
/// `slurmstepd: error: *** STEP 12.1 ON n2 CANCELLED AT ... DUE TO TIME LIMIT ***`, and
/// `srun: error: n3: task 2: Killed`. (node, line) pairs, the node when the line names one.
fn slurm_endings(dir: &Path) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("slurm-") && n.ends_with(".out"))
        })
        .collect();
    files.sort();
    for f in files {
        let Ok(Some(bytes)) = read_regular(&f, SLURM_OUT_LIMIT, "the batch script's output") else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            let line = line.trim();
            let node = if line.contains("***") && line.contains("CANCELLED") {
                line.split(" ON ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .map(str::to_string)
            } else if let Some(rest) = line.strip_prefix("srun: error: ")
                && (line.ends_with("Killed")
                    || line.contains("Terminated")
                    || line.contains("Cancelled")
                    || line.contains("CANCELLED"))
            {
                rest.split(':').next().map(|n| n.trim().to_string())
            } else {
                continue;
            };
            let line: String = line.chars().take(ERROR_LINE_CHARS).collect();
            if !out.iter().any(|(_, l)| *l == line) && out.len() < 32 {
                out.push((node, line));
            }
        }
    }
    out
}

fn identities(docs: &NodeDocuments) -> Vec<(Check, &NodeIdentity)> {
    let mut out = Vec::new();
    if let Some(i) = docs.lot.as_ref().and_then(|d| d.node.as_ref()) {
        out.push((Check::Environment, i));
    }
    if let Some(i) = docs.environment.as_ref().and_then(|d| d.node.as_ref()) {
        out.push((Check::Environment, i));
    }
    if let Some(i) = docs.probe.as_ref().and_then(|d| d.node.as_ref()) {
        out.push((Check::Probe, i));
    }
    if let Some(i) = docs.measure.as_ref().and_then(|d| d.node.as_ref()) {
        out.push((Check::Measure, i));
    }
    if let Some(i) = docs.collective.as_ref().and_then(|d| d.node.as_ref()) {
        out.push((Check::Collective, i));
    }
    out
}

/// Whether a warning or note a node's own document carries fails the fleet, and why.
pub fn lifted_effect(severity: Severity, code: &str) -> (Effect, &'static str) {
    use Effect::{Fails, Warns};
    match code {
        "pcie_link_degraded" => (
            Warns,
            "an idle GPU lowers its PCIe link to save power; the probe's host copies judge the link under load (copy_below_datasheet fails)",
        ),
        "ecc_uncorrected_errors" => (
            Fails,
            "uncorrected memory errors crash jobs or corrupt their results",
        ),
        "retired_pages_pending" | "row_remap_failure" | "row_remap_pending" => (
            Fails,
            "the GPU's memory has a fault that needs a reset or another GPU",
        ),
        "clock_throttled" => (
            Fails,
            "a GPU slowing its clocks delivers less than the datasheet promises",
        ),
        "power_limit_reduced" => (
            Fails,
            "capped below its default power the GPU cannot reach its full clocks",
        ),
        "nvlink_links_down" => (
            Fails,
            "with links down, GPU-to-GPU traffic is slower than the card's",
        ),
        "copy_below_datasheet" | "gemm_below_datasheet" => (
            Fails,
            "the GPU measured below its share of the datasheet: less than what was paid for",
        ),
        "lot_outlier" => (Fails, "the GPU is slower than the other GPUs of its node"),
        "gpu_missing" | "gpu_extra" | "model_mismatch" | "memory_below_package" => {
            (Fails, "the node does not hold its share of the package")
        }
        "other_processes" | "memory_in_use" => {
            (Fails, "another process uses the GPU the renter pays for")
        }
        "compute_mode_prohibited" => (
            Fails,
            "no process can run on a GPU whose compute mode is prohibited",
        ),
        "xid_hardware" => (
            Fails,
            "the driver logged a fault of the GPU itself (memory, bus, NVLink or firmware)",
        ),
        "xid_application" => (
            Warns,
            "these XIDs are raised by a program's own faults: worth a look, not the GPU's fault",
        ),
        "compute_mode_exclusive" => (
            Warns,
            "one process at a time: fine for one process per GPU, fatal for several",
        ),
        "persistence_off" => (
            Warns,
            "every new process waits for the driver to set the GPU up: slower starts, same speed",
        ),
        "ecc_disabled" => (
            Warns,
            "more memory, but memory errors go undetected: a choice, not a fault",
        ),
        _ => match severity {
            Severity::Warning => (
                Fails,
                "the node's own document counts it as a warning: it can cost the renter",
            ),
            Severity::Note => (
                Warns,
                "a note in the node's own document: worth knowing, costs nothing by itself",
            ),
        },
    }
}

fn lift(node: &str, f: &Finding) -> FleetFinding {
    let (effect, why) = lifted_effect(f.severity, &f.code);
    FleetFinding {
        code: f.code.clone(),
        effect,
        node: Some(node.to_string()),
        gpu: f.device.clone(),
        message: format!("node {node}: {}", f.message),
        why: why.to_string(),
        figures: f.figures.clone(),
    }
}

fn list(items: &[String]) -> String {
    items.join(", ")
}

/// Judges every node folder of `dir` against the plan beside them.
pub fn check(dir: &Path, options: &CheckOptions) -> Result<FleetVerdict, FleetError> {
    if !dir.is_dir() {
        return Err(FleetError::NotAFolder(dir.to_path_buf()));
    }
    let mut findings: Vec<FleetFinding> = Vec::new();
    let mut not_checked: Vec<String> = Vec::new();
    let read = match &options.plan {
        Some(file) => read_plan_file(file).and_then(|p| {
            p.map(Some)
                .ok_or_else(|| format!("the plan {} does not exist", file.display()))
        }),
        None => read_plan(dir),
    };
    let plan = match read {
        Ok(p) => p,
        Err(e) => {
            findings.push(FleetFinding::fails(
                "plan_unreadable",
                None,
                format!("{e}: the nodes cannot be held to the plan"),
                "without a plan that reads, what the job had to run is unknown",
                json!({}),
            ));
            None
        }
    };
    let mut folders: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| FleetError::Read {
            path: dir.to_path_buf(),
            reason: lab_io::files::os_message(&e),
        })?
        .filter_map(Result::ok)
        .filter(|e| e.path().symlink_metadata().is_ok_and(|m| m.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(|n| (n.to_string(), e.path())))
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    folders.sort();
    let node_list: Option<Vec<String>> = match read_regular(
        &dir.join(crate::slurm::NODES),
        SMALL_FILE_LIMIT,
        "a node list",
    ) {
        Ok(Some(b)) => Some(
            String::from_utf8_lossy(&b)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.contains('/') && *l != "." && *l != "..")
                .map(String::from)
                .collect(),
        ),
        Ok(None) => None,
        Err(e) => {
            findings.push(FleetFinding::fails(
                "node_list_unreadable",
                None,
                format!("{e}: which nodes the job had is unknown"),
                "the job's own list of its nodes is what the folders are checked against",
                json!({}),
            ));
            None
        }
    };
    if folders.is_empty() && plan.is_none() && node_list.is_none() {
        return Err(FleetError::NoNode(dir.to_path_buf()));
    }
    let job_file = match token_file(&dir.join(JOB_FILE)) {
        Ok(j) => j,
        Err(e) => {
            findings.push(FleetFinding::fails(
                "job_file_unreadable",
                None,
                e,
                "the job id is what tells this job's documents from another's",
                json!({}),
            ));
            None
        }
    };
    let mut read: Vec<NodeRead> = folders
        .into_iter()
        .map(|(name, path)| read_node(&path, name))
        .collect();
    if let Some(names) = &node_list {
        for n in read.iter().filter(|n| !names.contains(&n.folder)) {
            findings.push(FleetFinding::fails(
                "foreign_folder",
                Some(&n.folder),
                format!(
                    "folder {} is not one of the job's nodes ({}): its documents are not this job's",
                    n.folder,
                    list(names)
                ),
                "only the nodes the job ran on can speak for it",
                json!({"folder": n.folder, "job_nodes": names}),
            ));
        }
        for name in names {
            if !read.iter().any(|n| &n.folder == name) {
                read.push(NodeRead {
                    folder: name.clone(),
                    exists: false,
                    docs: NodeDocuments::default(),
                    steps: Check::ALL.into_iter().map(|c| (c, None)).collect(),
                });
            }
        }
        read.sort_by(|a, b| a.folder.cmp(&b.folder));
    }
    let required: Vec<Check> = match &plan {
        Some(p) => p.checks.clone(),
        None => Check::ALL
            .into_iter()
            .filter(|c| {
                read.iter()
                    .any(|n| n.steps.iter().any(|(s, r)| s == c && r.is_some()))
            })
            .collect(),
    };
    if plan.is_none() {
        not_checked.push(format!(
            "the plan: {} has no {PLAN_FILE} (`fleet slurm` and `fleet skypilot` write it), so the node count, the checks each node had to run and the package were not held to one; each node is held to the checks any node ran",
            dir.display()
        ));
    }
    if required.is_empty() {
        findings.push(FleetFinding::fails(
            "nothing_ran",
            None,
            format!(
                "no node folder of {} holds a document, an exit code or an error line of any check: nothing ran",
                dir.display()
            ),
            "empty folders are not a run",
            json!({"node_folders": read.len()}),
        ));
    }
    let endings = slurm_endings(dir);
    for (node, line) in &endings {
        let step_line = line.contains("*** STEP") || line.starts_with("srun: error:");
        let on = node.as_deref().filter(|_| step_line);
        findings.push(FleetFinding::fails(
            if line.contains("TIME LIMIT") {
                "slurm_time_limit"
            } else if line.contains("CANCELLED") {
                "slurm_cancelled"
            } else {
                "slurm_killed"
            },
            on,
            match on {
                Some(n) => format!("node {n}: Slurm ended its step: {line}"),
                None => format!("Slurm ended the job: {line}"),
            },
            "a job or step Slurm ended did not run its checks to the end",
            json!({"node": node, "line": line}),
        ));
    }
    if let Ok(Some(bytes)) = read_regular(
        &dir.join(SLURM_ACCOUNT_FILE),
        SMALL_FILE_LIMIT,
        "Slurm's account of the job",
    ) && let Ok(account) = serde_json::from_slice::<Value>(&bytes)
    {
        let text = |k: &str| account.get(k).and_then(Value::as_str).map(str::to_string);
        if let Some(state) = text("state").filter(|s| s != "COMPLETED") {
            findings.push(FleetFinding::fails(
                "slurm_job_state",
                None,
                format!(
                    "Slurm says job {} ended {state}{}{}",
                    text("job").unwrap_or_default(),
                    text("reason")
                        .filter(|r| r != "None")
                        .map(|r| format!(" (reason {r})"))
                        .unwrap_or_default(),
                    text("exit_code")
                        .map(|c| format!(", exit code {c}"))
                        .unwrap_or_default()
                ),
                "a job that did not complete did not run every check on every node",
                account.clone(),
            ));
        }
        for d in account
            .get("down")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let node = d.get("node").and_then(Value::as_str).unwrap_or("?");
            findings.push(FleetFinding::fails(
                "slurm_node_down",
                Some(node),
                format!(
                    "node {node}: Slurm marks it {} ({})",
                    d.get("state").and_then(Value::as_str).unwrap_or("down"),
                    d.get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given")
                ),
                "a node Slurm lost could not run its checks",
                d.clone(),
            ));
        }
    }
    let mut nodes = Vec::new();
    for n in &read {
        let mut steps = Vec::new();
        let nothing = n.steps.iter().all(|(_, s)| s.is_none());
        if !n.exists {
            findings.push(FleetFinding::fails(
                "node_missing",
                Some(&n.folder),
                format!(
                    "node {}: the job's node list names it but it left no folder: no check ran there (it died, or the job ended before its first step)",
                    n.folder
                ),
                "every node the job had must run every check",
                json!({"node": n.folder}),
            ));
        } else if nothing {
            findings.push(FleetFinding::fails(
                "node_empty",
                Some(&n.folder),
                format!(
                    "node {}: its folder holds no document, exit code or error of any check: nothing ran there (the job was cancelled, or the node died, before its first step)",
                    n.folder
                ),
                "an empty folder is not a run",
                json!({"node": n.folder}),
            ));
        }
        let slurm_says: Vec<&str> = endings
            .iter()
            .filter(|(node, _)| node.as_deref() == Some(n.folder.as_str()))
            .map(|(_, l)| l.as_str())
            .collect();
        for (check, step) in &n.steps {
            if !required.contains(check) {
                continue;
            }
            let outcome = match step {
                None => StepOutcome {
                    check: check.name().to_string(),
                    status: StepStatus::Missing,
                    exit_code: None,
                    cause: slurm_says.first().map(|l| l.to_string()),
                    error: None,
                    document: false,
                },
                Some(s) => {
                    let (status, exit_code, cause, error) = match &s.exit {
                        ExitRead::Bad(e) => (StepStatus::Failed, None, None, Some(e.clone())),
                        ExitRead::Code(c) if *c != 0 => (
                            StepStatus::Failed,
                            Some(*c),
                            exit_cause(*c).or_else(|| slurm_says.first().map(|l| l.to_string())),
                            s.error.clone().or_else(|| s.unreadable.clone()),
                        ),
                        ExitRead::Code(c) => match (&s.unreadable, s.document) {
                            (Some(e), _) => (StepStatus::Failed, Some(*c), None, Some(e.clone())),
                            (None, false) => (
                                StepStatus::Failed,
                                Some(*c),
                                None,
                                Some(format!(
                                    "exit 0 but no {}.json was written{}",
                                    check.name(),
                                    s.error
                                        .as_deref()
                                        .map(|e| format!(" ({e})"))
                                        .unwrap_or_default()
                                )),
                            ),
                            (None, true) => (StepStatus::Ok, Some(*c), None, None),
                        },
                        ExitRead::Absent => {
                            let cause = slurm_says
                                .first()
                                .map(|l| l.to_string())
                                .or_else(|| Some("the step did not finish: it left no exit code (killed, or ended by Slurm before it could write one)".to_string()));
                            match (&s.unreadable, s.document) {
                                (Some(e), _) => (StepStatus::Failed, None, cause, Some(e.clone())),
                                (None, false) => (
                                    StepStatus::Failed,
                                    None,
                                    cause,
                                    s.error.clone().or_else(|| {
                                        Some(format!("no {}.json and no {0}.exit", check.name()))
                                    }),
                                ),
                                // A complete document the step did not confirm: with a plan the
                                // step scripts always write the exit code, so it did not finish.
                                (None, true) if plan.is_some() => (
                                    StepStatus::Failed,
                                    None,
                                    cause,
                                    Some(format!(
                                        "{}.json is there but {0}.exit is not",
                                        check.name()
                                    )),
                                ),
                                (None, true) => (StepStatus::Ok, None, None, None),
                            }
                        }
                    };
                    StepOutcome {
                        check: check.name().to_string(),
                        status,
                        exit_code,
                        cause,
                        error,
                        document: s.document,
                    }
                }
            };
            match outcome.status {
                StepStatus::Ok if outcome.exit_code.is_none() => {
                    findings.push(FleetFinding::warns(
                        "exit_code_missing",
                        Some(&n.folder),
                        format!(
                            "node {}: {}.json is complete but no {1}.exit confirms the step ended with exit 0",
                            n.folder, outcome.check
                        ),
                        "without a plan the documents may have been gathered by hand; the document itself says it is complete",
                        json!({"node": n.folder, "check": outcome.check}),
                    ));
                }
                StepStatus::Ok => {}
                StepStatus::Failed => findings.push(FleetFinding::fails(
                    "node_failed",
                    Some(&n.folder),
                    format!(
                        "node {}: {} failed{}{}: {}",
                        n.folder,
                        outcome.check,
                        outcome
                            .exit_code
                            .map(|c| format!(" with exit code {c}"))
                            .unwrap_or_default(),
                        outcome
                            .cause
                            .as_deref()
                            .map(|c| format!(", {c}"))
                            .unwrap_or_default(),
                        outcome.error.as_deref().unwrap_or("no error line was left")
                    ),
                    "every node must run every planned check to a complete document with exit 0",
                    json!({"node": n.folder, "check": outcome.check, "exit_code": outcome.exit_code, "cause": outcome.cause, "error": outcome.error}),
                )),
                StepStatus::Missing if nothing => {}
                StepStatus::Missing => findings.push(FleetFinding::fails(
                    "node_missing",
                    Some(&n.folder),
                    format!(
                        "node {}: left no {} files ({1}.json, .exit, .err){}: the step never ran there or its files were lost{}",
                        n.folder,
                        outcome.check,
                        if plan.is_some() { " the plan names" } else { " where other nodes did" },
                        outcome
                            .cause
                            .as_deref()
                            .map(|c| format!(" ({c})"))
                            .unwrap_or_default()
                    ),
                    "every node must run every planned check",
                    json!({"node": n.folder, "check": outcome.check}),
                )),
            }
            steps.push(outcome);
        }
        let identity = identity_of(&n.docs);
        let visible = n
            .docs
            .probe
            .as_ref()
            .and_then(|p| p.visible_devices)
            .or_else(|| n.docs.lot.as_ref().and_then(|l| l.visible_devices));
        // The node's own warnings and notes, once each (the lot report and the probe both
        // check the lot).
        let mut own: Vec<(String, Option<String>)> = Vec::new();
        let docs_findings = n
            .docs
            .lot
            .iter()
            .flat_map(|l| &l.findings)
            .chain(n.docs.probe.iter().flat_map(|p| &p.findings));
        for f in docs_findings {
            let key = (f.code.clone(), f.device.clone());
            if own.contains(&key) {
                continue;
            }
            own.push(key);
            findings.push(lift(&n.folder, f));
        }
        nodes.push(NodeVerdict {
            folder: n.folder.clone(),
            ok: n.exists && !nothing && steps.iter().all(|s| s.status == StepStatus::Ok),
            identity,
            steps,
            visible_gpus: visible,
            document_findings: own.len(),
        });
    }
    // The job: the job's own file, else the documents' majority.
    let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
    for n in &read {
        if let Some(j) = identity_of(&n.docs).and_then(|i| i.job_id) {
            *jobs.entry(j).or_default() += 1;
        }
    }
    let job: Option<String> = job_file.clone().or_else(|| {
        let best = jobs.values().copied().max()?;
        let top: Vec<&String> = jobs.iter().filter(|(_, c)| **c == best).map(|(j, _)| j).collect();
        if top.len() == 1 {
            Some(top[0].to_string())
        } else {
            findings.push(FleetFinding::fails(
                "mixed_jobs",
                None,
                format!(
                    "the documents come from as many nodes of job {} each: which one is this fleet's is unknown",
                    top.iter().map(|j| j.as_str()).collect::<Vec<_>>().join(" and ")
                ),
                "a fleet is one job's nodes",
                json!({"jobs": top}),
            ));
            None
        }
    });
    if job.is_none() && plan.is_some() {
        not_checked.push(format!(
            "the job: no {JOB_FILE} and no document names a job id, so documents of another job cannot be told apart"
        ));
    }
    let expected_nodes = options
        .nodes
        .or(plan.as_ref().map(|p| p.nodes))
        .or(node_list.as_ref().map(|l| l.len() as u32))
        .or_else(|| {
            nodes
                .iter()
                .filter_map(|n| n.identity.as_ref().and_then(|i| i.count))
                .max()
        });
    // Foreign documents: another job, a job of another size, or written on another node.
    for n in &read {
        let mut said: Vec<String> = Vec::new();
        for (check, i) in identities(&n.docs) {
            if let (Some(j), Some(want)) = (&i.job_id, &job)
                && j != want
            {
                said.push(format!("{check}.json comes from job {j}, not {want}"));
            }
            if let (Some(c), Some(e)) = (i.count, expected_nodes)
                && c != e
            {
                said.push(format!(
                    "{check}.json comes from a {c}-node job, not this {e}-node fleet"
                ));
            }
            if i.source == lab::node::NodeSource::Slurm
                && let Some(name) = &i.name
                && name != &n.folder
            {
                said.push(format!(
                    "{check}.json was written on node {name}, not {}",
                    n.folder
                ));
            }
        }
        said.dedup();
        if !said.is_empty() {
            findings.push(FleetFinding::fails(
                "foreign_documents",
                Some(&n.folder),
                format!("node {}: {}", n.folder, said.join("; ")),
                "documents of another job or another node say nothing about this fleet",
                json!({"node": n.folder, "job": job, "why": said}),
            ));
        }
    }
    // The same node, rank or GPU in two folders.
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut ranks: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut uuids: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut xid_unread: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for n in &read {
        if let Some(i) = identity_of(&n.docs) {
            if let Some(name) = i.name {
                names.entry(name).or_default().push(n.folder.clone());
            }
            if let Some(r) = i.rank {
                ranks.entry(r).or_default().push(n.folder.clone());
            }
        }
        for f in facts_of(n).0 {
            if f.nvml_matched
                && f.xid_errors.is_none()
                && let Some(why) = &f.xid_not_checked
            {
                xid_unread
                    .entry(why.clone())
                    .or_default()
                    .insert(n.folder.clone());
            }
            if !f.uuid.is_empty() {
                uuids
                    .entry(f.uuid.clone())
                    .or_default()
                    .push(f.device.clone());
            }
        }
    }
    // Past GPU faults unknown is said, never read as none; with 1,024 nodes, one line per
    // reason, the first nodes named.
    for (why, nodes) in xid_unread {
        let nodes: Vec<String> = nodes.into_iter().collect();
        let shown: Vec<String> = nodes.iter().take(8).cloned().collect();
        not_checked.push(format!(
            "XID errors since boot on {} node(s) ({}{}): {why}",
            nodes.len(),
            list(&shown),
            if nodes.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        ));
    }
    let dup = |what: &str, key: String, holders: &[String]| {
        FleetFinding::fails(
            "duplicated",
            holders.first().map(String::as_str),
            format!(
                "{what} {key} appears {} times, in {}: one is a copy, the fleet has fewer distinct {} than it shows",
                holders.len(),
                list(holders),
                if what == "GPU UUID" { "GPUs" } else { "nodes" }
            ),
            "a copied folder or document counts one node or GPU twice",
            json!({"what": what, "value": key, "in": holders}),
        )
    };
    for (k, v) in names.iter().filter(|(_, v)| v.len() > 1) {
        findings.push(dup("node name", k.clone(), v));
    }
    for (k, v) in ranks.iter().filter(|(_, v)| v.len() > 1) {
        findings.push(dup("node rank", k.to_string(), v));
    }
    for (k, v) in uuids.iter().filter(|(_, v)| v.len() > 1) {
        findings.push(dup("GPU UUID", k.clone(), v));
    }
    // Nodes the job counts but no folder holds, or more folders than it has.
    let present = read.iter().filter(|n| n.exists).count();
    if let Some(expected) = expected_nodes {
        if node_list.is_none() && (present as u64) < u64::from(expected) {
            let seen: Vec<u32> = ranks.keys().copied().collect();
            let absent: Vec<u32> = (0..expected).filter(|r| !seen.contains(r)).collect();
            let which = if absent.is_empty() || absent.len() != expected as usize - present {
                String::new()
            } else {
                format!(
                    " (rank {})",
                    absent
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            findings.push(FleetFinding::fails(
                "node_missing",
                None,
                format!(
                    "the job has {expected} nodes but {} holds {present} node folder(s): {} node(s) left nothing{which}",
                    dir.display(),
                    expected as usize - present
                ),
                "every node the job had must run every check",
                json!({"expected_nodes": expected, "node_folders": present, "absent_ranks": absent}),
            ));
        }
        if read.len() as u64 > u64::from(expected) {
            findings.push(FleetFinding::fails(
                "node_extra",
                None,
                format!(
                    "{} holds {} node folder(s) for a {expected}-node fleet: the others are not this job's",
                    dir.display(),
                    read.len()
                ),
                "only the job's nodes can speak for it",
                json!({"expected_nodes": expected, "node_folders": read.len()}),
            ));
        }
    } else {
        not_checked.push(
            "the node count: no plan, no --nodes and no document gives it, so a node that left no folder cannot be seen".to_string(),
        );
    }
    // The table.
    let gpus: Vec<FleetGpu> = read.iter().flat_map(rows_of).collect();
    let outliers = fleet_outliers(&gpus, options.outlier_percent);
    let mut by_gpu: BTreeMap<(&str, &str), Vec<&FleetOutlier>> = BTreeMap::new();
    for o in &outliers {
        by_gpu.entry((&o.node, &o.device)).or_default().push(o);
    }
    for ((node, device), mine) in by_gpu {
        let parts: Vec<String> = mine
            .iter()
            .map(|o| {
                format!(
                    "{} {:.3}, {:.0}% below the fleet's median of the others {:.3}",
                    o.figure, o.value, o.percent_below, o.median_of_others
                )
            })
            .collect();
        let mut f = FleetFinding::fails(
            "fleet_outlier",
            Some(node),
            format!(
                "node {node} {device} is the fleet's outlier, more than {:.0}% below the other GPUs of every node on {} figure(s): {}",
                options.outlier_percent,
                mine.len(),
                parts.join("; ")
            ),
            "one GPU slower than the rest holds back every job spread over the fleet",
            json!({"node": node, "device": device, "figures": mine}),
        );
        f.gpu = Some(device.to_string());
        findings.push(f);
    }
    // The package over all nodes.
    let package = options.package.clone().map(|mut p| {
        p.share = None;
        p
    });
    if let Some(exp) = &package {
        let mut facts = Vec::new();
        let mut visible = 0usize;
        for n in &read {
            let (f, v) = facts_of(n);
            visible += v.unwrap_or(f.len());
            facts.extend(f);
        }
        for f in check_package_findings(&facts, visible, exp, &options.datasheet) {
            let mut message = f.message;
            if f.code == "gpu_missing" {
                message = message.replace(
                    "this machine or container",
                    &format!("the fleet's {} node(s)", nodes.len()),
                );
            }
            let (effect, why) = match f.severity {
                Severity::Warning => (
                    Effect::Fails,
                    "the fleet does not make up the package that was paid for",
                ),
                Severity::Note => (
                    Effect::Warns,
                    "worth knowing about the package; costs nothing by itself",
                ),
            };
            let node = f
                .device
                .as_deref()
                .and_then(|d| d.split_once('/'))
                .map(|(n, _)| n.to_string());
            let gpu = f
                .device
                .as_deref()
                .and_then(|d| d.split_once('/'))
                .map(|(_, g)| g.to_string());
            findings.push(FleetFinding {
                code: f.code,
                effect,
                node,
                gpu,
                message,
                why: why.to_string(),
                figures: f.figures,
            });
        }
    } else if plan.as_ref().is_some_and(|p| p.device == Device::Cpu) {
        not_checked.push(
            "the package: the plan ran on the CPU reference device, which holds no GPU of it"
                .to_string(),
        );
    } else {
        not_checked.push(
            "the package: none given (--package GPU:DAYS:LOTS, or a plan of GPUs), so the GPU count, models and memory over all nodes were not checked".to_string(),
        );
    }
    let collective = required.contains(&Check::Collective).then(|| {
        judge_collective(
            dir,
            &read,
            plan.as_ref(),
            options.expected_busbw_gb_s,
            &mut findings,
            &mut not_checked,
        )
    });
    findings.sort_by_key(|f| f.effect == Effect::Warns);
    let failures = findings
        .iter()
        .filter(|f| f.effect == Effect::Fails)
        .count();
    let warnings = findings.len() - failures;
    let ok = failures == 0;
    Ok(FleetVerdict {
        schema: FLEET_VERDICT_SCHEMA.to_string(),
        folder: dir.display().to_string(),
        plan,
        job,
        expected_nodes,
        nodes,
        checks: required.iter().map(|c| c.name().to_string()).collect(),
        gpus,
        package,
        outliers,
        collective,
        findings,
        failures,
        warnings,
        not_checked,
        ok,
        exit_code: u8::from(!ok),
    })
}

/// What a `collective.<...>.json` or `.exit` file of a node folder belongs to: the whole run
/// (another local rank) or a pair of nodes.
enum CollectiveFile {
    Whole,
    Pair(String, String),
}

/// Reads `collective.<l>`, `collective.pair-<a>-<b>` and `collective.pair-<a>-<b>.<l>` (the
/// stem after `collective.`); `a` and `b` must be nodes of the fleet.
fn collective_file(stem: &str, names: &[&str]) -> Option<CollectiveFile> {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if digits(stem) {
        return Some(CollectiveFile::Whole);
    }
    let pair = match stem.rsplit_once('.') {
        Some((p, l)) if digits(l) => p,
        _ => stem,
    };
    let rest = pair.strip_prefix("pair-")?;
    names.iter().find_map(|a| {
        let b = rest.strip_prefix(a)?.strip_prefix('-')?;
        names
            .contains(&b)
            .then(|| CollectiveFile::Pair(a.to_string(), b.to_string()))
    })
}

/// The all-reduce bus bandwidth at the largest size of a run, from its first rank's document.
fn largest_busbw(docs: &[CollectiveDocument]) -> Option<f64> {
    docs.iter()
        .min_by_key(|d| d.rank)?
        .results
        .iter()
        .filter(|r| r.op == "all_reduce")
        .max_by_key(|r| r.bytes)
        .map(|r| r.busbw_gb_s)
}

/// The collective check over every node: the whole run judged by
/// [`lab_torch::collective::judge`] (every rank, every result, the fabric, the bus bandwidth
/// against `expected`), then the pair pass ([`lab_torch::collective::slow_pairs`]). On gloo, the
/// CPU test path, a slow pair only warns: its figure is the host's load, not a fabric's.
fn judge_collective(
    dir: &Path,
    read: &[NodeRead],
    plan: Option<&Plan>,
    expected: Option<f64>,
    findings: &mut Vec<FleetFinding>,
    not_checked: &mut Vec<String>,
) -> CollectiveVerdict {
    let names: Vec<&str> = read
        .iter()
        .filter(|n| n.exists)
        .map(|n| n.folder.as_str())
        .collect();
    let mut docs: Vec<CollectiveDocument> = Vec::new();
    let mut pairs: BTreeMap<(String, String), Vec<CollectiveDocument>> = BTreeMap::new();
    let mut pair_failures: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for n in read.iter().filter(|n| n.exists) {
        if let Some(d) = &n.docs.collective {
            docs.push(d.clone());
        }
        let folder = dir.join(&n.folder);
        let mut files: Vec<String> = std::fs::read_dir(&folder)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .filter(|f| f.starts_with("collective."))
            .collect();
        files.sort();
        for file in files {
            let Some((stem, ext)) = file["collective.".len()..].rsplit_once('.') else {
                continue;
            };
            let Some(kind) = collective_file(stem, &names) else {
                continue;
            };
            let path = folder.join(&file);
            match ext {
                "json" => {
                    let parsed = read_regular(&path, COLLECTIVE_LIMIT, "a collective document")
                        .and_then(|b| {
                            lab_torch::collective::parse(&b.unwrap_or_default())
                                .map_err(|e| format!("{file} does not read: {e}"))
                        });
                    match (parsed, kind) {
                        (Ok(d), CollectiveFile::Whole) => docs.push(d),
                        (Ok(d), CollectiveFile::Pair(a, b)) => {
                            pairs.entry((a, b)).or_default().push(d)
                        }
                        (Err(e), CollectiveFile::Whole) => findings.push(FleetFinding::fails(
                            "collective_unreadable",
                            Some(&n.folder),
                            format!("node {}: {e}", n.folder),
                            "every rank's document is what the collective is judged on",
                            json!({"node": n.folder, "file": file}),
                        )),
                        (Err(e), CollectiveFile::Pair(a, b)) => pair_failures
                            .entry((a, b))
                            .or_default()
                            .push(format!("node {}: {e}", n.folder)),
                    }
                }
                "exit" => {
                    let failed = match read_exit(&path) {
                        ExitRead::Code(0) | ExitRead::Absent => None,
                        ExitRead::Code(c) => Some(format!(
                            "exit {c}{}",
                            exit_cause(c).map(|c| format!(", {c}")).unwrap_or_default()
                        )),
                        ExitRead::Bad(e) => Some(e),
                    };
                    let Some(failed) = failed else { continue };
                    let err_file = path.with_extension("err");
                    let line = read_regular(&err_file, SMALL_FILE_LIMIT, "a step's stderr line")
                        .ok()
                        .flatten()
                        .and_then(|b| first_line(&b))
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default();
                    let message = format!("node {}: {file} says {failed}{line}", n.folder);
                    match kind {
                        // The node's first rank is its `collective` step, judged with the
                        // other checks; another local rank is judged here.
                        CollectiveFile::Whole => findings.push(FleetFinding::fails(
                            "collective_rank_failed",
                            Some(&n.folder),
                            message,
                            "every rank of every node must run the collective to the end",
                            json!({"node": n.folder, "file": file}),
                        )),
                        CollectiveFile::Pair(a, b) => {
                            pair_failures.entry((a, b)).or_default().push(message)
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let j = judge(&docs, expected);
    let first = docs.iter().min_by_key(|d| d.rank);
    // The run must be over every GPU the plan names (one rank per node on the CPU device), and
    // each rank must speak once: a copied document would otherwise stand in for a missing rank.
    if let (Some(p), Some(d)) = (plan, first) {
        let want = u64::from(p.nodes) * p.ranks_per_node();
        if u64::from(d.world_size) != want {
            findings.push(FleetFinding::fails(
                "collective_world_size",
                None,
                format!(
                    "collective: the run was over {} rank(s), but the plan's {} node(s) x {} make {want}",
                    d.world_size,
                    p.nodes,
                    p.ranks_per_node()
                ),
                "a run over fewer ranks than the package's GPUs did not measure all of the network",
                json!({"world_size": d.world_size, "expected": want}),
            ));
        }
    }
    let mut ranks: Vec<u32> = docs.iter().map(|d| d.rank).collect();
    ranks.sort_unstable();
    if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
        findings.push(FleetFinding::fails(
            "collective_rank_twice",
            None,
            format!("collective: rank {} left two documents", w[0]),
            "each rank runs once; a second document of one rank is a copy or another run's",
            json!({"rank": w[0]}),
        ));
    }
    let gloo = first.is_some_and(|d| d.backend != "nccl");
    for r in &j.reasons {
        findings.push(FleetFinding::fails(
            "collective_failed",
            None,
            format!("collective: {r}"),
            "the network between the GPUs must carry every rank's data, correctly and at the fabric's speed",
            json!({"busbw_gb_s": j.busbw_gb_s, "expected_busbw_gb_s": expected}),
        ));
    }
    for r in &j.not_checked {
        not_checked.push(format!("the collective: {r}"));
    }
    if expected.is_none() && !gloo && !docs.is_empty() {
        not_checked.push(
            "the collective's expectation: give the bus bandwidth the provider's fabric promises              with --expect-busbw (a 400 Gb/s InfiniBand or RoCE port per GPU gives about 40 to              48 GB/s at 1 GiB)"
                .to_string(),
        );
    }
    let mut figures: Vec<PairFigure> = Vec::new();
    let mut keys: Vec<&(String, String)> = pairs.keys().chain(pair_failures.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let run = pairs.get(key).map(Vec::as_slice).unwrap_or_default();
        let mut problems = pair_failures.get(key).cloned().unwrap_or_default();
        if let Some(d) = run.iter().find(|d| d.results.iter().any(|r| !r.correct)) {
            problems.push(format!("rank {} found a wrong result", d.rank));
        }
        for p in &problems {
            findings.push(FleetFinding::fails(
                "collective_pair_failed",
                None,
                format!("collective over the pair {}-{}: {p}", key.0, key.1),
                "each pair of nodes must run the collective to the end with correct results",
                json!({"a": key.0, "b": key.1}),
            ));
        }
        figures.push(PairFigure {
            a: key.0.clone(),
            b: key.1.clone(),
            busbw_gb_s: largest_busbw(run),
        });
    }
    if figures.is_empty()
        && !docs.is_empty()
        && plan.is_some_and(|p| p.nodes >= 3 && p.checks.contains(&Check::Collective))
    {
        findings.push(FleetFinding::fails(
            "collective_pairs_missing",
            None,
            "collective: the pair pass left no document (the batch script runs it after the whole run, from three nodes on)".to_string(),
            "without the pairs a slow node or link cannot be named",
            json!({}),
        ));
    }
    let measured: Vec<(String, String, f64)> = figures
        .iter()
        .filter_map(|p| p.busbw_gb_s.map(|f| (p.a.clone(), p.b.clone(), f)))
        .collect();
    for line in slow_pairs(&measured) {
        let node = line
            .strip_prefix("the node ")
            .and_then(|r| r.strip_suffix(" is in every slow pair"))
            .map(str::to_string);
        let code = if node.is_some() {
            "collective_slow_node"
        } else {
            "collective_slow_pair"
        };
        let message = format!("collective pair pass: {line}");
        let figures = json!({"pairs": measured.iter().map(|(a, b, f)| json!({"a": a, "b": b, "busbw_gb_s": f})).collect::<Vec<_>>()});
        findings.push(if gloo {
            FleetFinding::warns(
                code,
                node.as_deref(),
                message,
                "on gloo, the CPU test path, a pair's figure is the host's TCP and load, not a fabric's: named, not judged",
                figures,
            )
        } else {
            FleetFinding::fails(
                code,
                node.as_deref(),
                message,
                "a pair under half of the other pairs' bus bandwidth has a degraded node or link, which slows every collective of the cluster",
                figures,
            )
        });
    }
    CollectiveVerdict {
        verdict: j.verdict.to_string(),
        backend: first.map(|d| d.backend.clone()),
        transport: first.map(|d| d.fabric.transport.clone()),
        world_size: first.map(|d| d.world_size),
        documents: docs.len(),
        busbw_gb_s: j.busbw_gb_s,
        expected_busbw_gb_s: expected,
        curve: first.map(|d| d.results.clone()).unwrap_or_default(),
        pairs: figures,
    }
}

/// Every GPU more than `percent` below the median of all the other GPUs of the fleet, per
/// figure: one sort per figure, O(G log G).
fn fleet_outliers(gpus: &[FleetGpu], percent: f64) -> Vec<FleetOutlier> {
    let mut names: Vec<&str> = Vec::new();
    for g in gpus.iter().filter(|g| g.gpu) {
        for f in &g.figures {
            if !names.contains(&f.figure.as_str()) {
                names.push(&f.figure);
            }
        }
    }
    let mut outliers = Vec::new();
    for name in names {
        let members: Vec<(&FleetGpu, f64)> = gpus
            .iter()
            .filter(|g| g.gpu)
            .filter_map(|g| {
                g.figures
                    .iter()
                    .find(|f| f.figure == name)
                    .map(|f| (g, f.value))
            })
            .collect();
        let values: Vec<f64> = members.iter().map(|(_, v)| *v).collect();
        for o in low_outliers_of_lot(&values, percent) {
            let g = members[o.index].0;
            outliers.push(FleetOutlier {
                node: g.node.clone(),
                device: g.device.clone(),
                figure: name.to_string(),
                value: o.value,
                median_of_others: o.median_of_others,
                percent_below: o.percent_below,
            });
        }
    }
    outliers
}

fn pad(cell: &str, width: usize) -> String {
    format!("{cell:<width$}")
}

/// The verdict line: OK with what was checked, or FAILED with how many findings fail it.
pub fn verdict_line(v: &FleetVerdict) -> String {
    if v.ok {
        let mut what = match &v.plan {
            Some(p) => format!(
                "every planned check ({}) ran to a complete document with exit 0 on all {} node(s){}",
                v.checks.join(", "),
                p.nodes,
                v.job
                    .as_deref()
                    .map(|j| format!(" of job {j}"))
                    .unwrap_or_default()
            ),
            None => format!(
                "every node folder ran the checks any node ran ({})",
                v.checks.join(", ")
            ),
        };
        what.push_str(", no failing finding, no outlier");
        if v.package.is_some() {
            what.push_str(", the package matches");
        }
        if !v.not_checked.is_empty() {
            what.push_str(&format!("; {} thing(s) not checked", v.not_checked.len()));
        }
        format!("verdict: OK: {what} (exit {})", v.exit_code)
    } else {
        let mut codes: Vec<&str> = Vec::new();
        for f in v.findings.iter().filter(|f| f.effect == Effect::Fails) {
            if !codes.contains(&f.code.as_str()) {
                codes.push(&f.code);
            }
        }
        format!(
            "verdict: FAILED: {} finding(s) fail the fleet ({}) (exit {})",
            v.failures,
            codes.join(", "),
            v.exit_code
        )
    }
}

/// The collective as sentences, for a page that has no fixed-width table (the report): the
/// verdict, one line per size of the curve, one per pair.
pub fn collective_lines(c: &CollectiveVerdict) -> Vec<String> {
    let mut lines = vec![collective_headline(c)];
    lines.extend(c.curve.iter().map(|r| {
        format!(
            "collective {} {} B: {:.1} us, algbw {:.3} GB/s, busbw {:.3} GB/s{}",
            r.op,
            r.bytes,
            r.time_us,
            r.algbw_gb_s,
            r.busbw_gb_s,
            if r.correct { "" } else { ", WRONG RESULT" }
        )
    }));
    lines.extend(c.pairs.iter().map(|p| {
        format!(
            "collective pair {}-{}: {}",
            p.a,
            p.b,
            p.busbw_gb_s
                .map_or("no figure".to_string(), |b| format!("busbw {b:.3} GB/s"))
        )
    }));
    lines
}

fn collective_headline(c: &CollectiveVerdict) -> String {
    format!(
        "collective: {}: {} rank(s) over {} ({}), all-reduce bus bandwidth {} at the largest size{}",
        c.verdict,
        c.world_size.map_or("?".to_string(), |n| n.to_string()),
        c.backend.as_deref().unwrap_or("?"),
        c.transport.as_deref().unwrap_or("?"),
        c.busbw_gb_s
            .map_or("unknown".to_string(), |b| format!("{b:.3} GB/s")),
        c.expected_busbw_gb_s
            .map(|e| format!(", {e:.1} GB/s expected"))
            .unwrap_or_default()
    )
}

/// The collective's verdict, its curve as nccl-tests prints it, and the pair pass.
fn render_collective(c: &CollectiveVerdict) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "\n{}", collective_headline(c));
    if !c.curve.is_empty() {
        out.push_str(&lab_torch::collective::curve_table(&c.curve, "  "));
    }
    if !c.pairs.is_empty() {
        let _ = writeln!(
            out,
            "  pair pass (all-reduce bus bandwidth at the largest size, each node with the next):"
        );
        for p in &c.pairs {
            let _ = writeln!(
                out,
                "    {}-{}: {}",
                p.a,
                p.b,
                p.busbw_gb_s
                    .map_or("no figure".to_string(), |b| format!("{b:.3} GB/s"))
            );
        }
    }
    out
}

/// The verdict as text: the verdict line first, what was not checked, the findings, the nodes,
/// then the table of node x GPU (all of it with `table`, else at most [`TABLE_ROWS`] rows:
/// outliers and GPUs with a failing finding first, the rest summarised per figure).
pub fn render(v: &FleetVerdict, table: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{}", verdict_line(v));
    let _ = writeln!(
        out,
        "fleet check {}: {} node(s){}, {} GPU(s), checks: {}{}",
        v.folder,
        v.nodes.len(),
        v.expected_nodes
            .map(|n| format!(" of {n} expected"))
            .unwrap_or_default(),
        v.gpus.iter().filter(|g| g.gpu).count(),
        v.checks.join(", "),
        v.job
            .as_deref()
            .map(|j| format!(", job {j}"))
            .unwrap_or_default()
    );
    if let Some(p) = &v.package {
        let _ = writeln!(
            out,
            "package: {} promises {} x {} over all nodes",
            p.package, p.gpus, p.model
        );
    }
    for n in &v.not_checked {
        let _ = writeln!(out, "not checked: {n}");
    }
    let _ = writeln!(
        out,
        "\nfindings: {} fail the fleet, {} warn",
        v.failures, v.warnings
    );
    for f in &v.findings {
        let level = match f.effect {
            Effect::Fails => "FAIL",
            Effect::Warns => "warn",
        };
        let _ = writeln!(out, "  {level} {}: {} (why: {})", f.code, f.message, f.why);
    }
    if let Some(c) = &v.collective {
        out.push_str(&render_collective(c));
    }
    let _ = writeln!(out);
    let shown_nodes: Vec<&NodeVerdict> = if table || v.nodes.len() <= TABLE_ROWS {
        v.nodes.iter().collect()
    } else {
        v.nodes.iter().filter(|n| !n.ok).take(TABLE_ROWS).collect()
    };
    for n in &shown_nodes {
        let steps: Vec<String> = n
            .steps
            .iter()
            .map(|s| match s.status {
                StepStatus::Ok => format!("{} ok", s.check),
                StepStatus::Failed => format!(
                    "{} FAILED{}",
                    s.check,
                    s.exit_code
                        .map(|c| format!(" (exit {c})"))
                        .unwrap_or_default()
                ),
                StepStatus::Missing => format!("{} MISSING", s.check),
            })
            .collect();
        let _ = writeln!(
            out,
            "node {}{}: {}",
            n.folder,
            n.identity
                .as_ref()
                .map(|i| format!(" [{}]", i.describe()))
                .unwrap_or_default(),
            if steps.is_empty() {
                "no check".to_string()
            } else {
                steps.join(", ")
            }
        );
    }
    if shown_nodes.len() < v.nodes.len() {
        let _ = writeln!(
            out,
            "... {} more node(s), every step ok (--table lists every node)",
            v.nodes.len() - shown_nodes.len()
        );
    }
    // The table: fixed columns, then one per figure.
    let mut figures: Vec<&str> = Vec::new();
    for g in &v.gpus {
        for f in &g.figures {
            if !figures.contains(&f.figure.as_str()) {
                figures.push(&f.figure);
            }
        }
    }
    let flagged = |g: &FleetGpu| {
        v.outliers
            .iter()
            .any(|o| o.node == g.node && o.device == g.device)
            || v.findings.iter().any(|f| {
                f.effect == Effect::Fails
                    && f.node.as_deref() == Some(g.node.as_str())
                    && f.gpu.as_deref() == Some(g.device.as_str())
            })
    };
    let rows_shown: Vec<&FleetGpu> = if table || v.gpus.len() <= TABLE_ROWS {
        v.gpus.iter().collect()
    } else {
        let mut r: Vec<&FleetGpu> = v.gpus.iter().filter(|g| flagged(g)).collect();
        r.truncate(TABLE_ROWS);
        r
    };
    let mut rows: Vec<Vec<String>> = vec![
        ["node", "device", "model", "uuid", "MiB", "driver"]
            .iter()
            .map(|s| s.to_string())
            .chain(figures.iter().map(|f| f.to_string()))
            .collect(),
    ];
    for g in &rows_shown {
        let mut row = vec![
            g.node.clone(),
            g.device.clone(),
            g.model.clone(),
            g.uuid.clone().unwrap_or_else(|| "-".into()),
            g.memory_mib.map_or("-".into(), |m| m.to_string()),
            g.driver.clone().unwrap_or_else(|| "-".into()),
        ];
        for name in &figures {
            let cell =
                g.figures
                    .iter()
                    .find(|f| f.figure == *name)
                    .map_or("-".to_string(), |f| {
                        let outlier = v.outliers.iter().any(|o| {
                            o.node == g.node && o.device == g.device && o.figure == f.figure
                        });
                        format!(
                            "{:.1}{}{}",
                            f.value,
                            f.percent.map(|p| format!(" ({p:.0}%)")).unwrap_or_default(),
                            if outlier { " LOW" } else { "" }
                        )
                    });
            row.push(cell);
        }
        rows.push(row);
    }
    if rows.len() > 1 {
        let columns = rows[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| pad(c, *w)).collect();
            let _ = writeln!(out, "  {}", line.join("  ").trim_end());
        }
    }
    if rows_shown.len() < v.gpus.len() {
        let _ = writeln!(
            out,
            "  ... {} more GPU(s) not flagged (--table prints every row); per figure over all GPUs:",
            v.gpus.len() - rows_shown.len()
        );
        for name in &figures {
            let mut values: Vec<f64> = v
                .gpus
                .iter()
                .filter_map(|g| g.figures.iter().find(|f| f.figure == *name))
                .map(|f| f.value)
                .filter(|x| x.is_finite())
                .collect();
            values.sort_by(f64::total_cmp);
            if let (Some(lo), Some(hi)) = (values.first(), values.last()) {
                let _ = writeln!(
                    out,
                    "    {name}: {} GPU(s), min {lo:.1}, median {:.1}, max {hi:.1}",
                    values.len(),
                    lab::stats::median(&values).unwrap_or(f64::NAN)
                );
            }
        }
    }
    out
}
fn driver_of(details: &Value) -> Option<String> {
    details
        .pointer("/nvml/driver_version")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            details
                .pointer("/driver/cuda_version")
                .and_then(Value::as_str)
                .map(|v| format!("CUDA {v}"))
        })
}

fn gpu_row(node: &str, device: &str, facts: Option<&GpuFacts>, details: &Value) -> FleetGpu {
    let model = facts.map(|f| f.name.clone()).unwrap_or_else(|| {
        details
            .get("cpu_model")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string()
    });
    FleetGpu {
        node: node.to_string(),
        device: device.to_string(),
        model,
        uuid: facts.map(|f| f.uuid.clone()),
        memory_mib: facts.map(|f| f.total_memory_bytes >> 20),
        driver: driver_of(details),
        gpu: facts.is_some(),
        figures: Vec::new(),
    }
}

/// The table rows of one node: its probe's devices with their figures, else its lot report's
/// GPUs, else its one-device environment report.
fn rows_of(node: &NodeRead) -> Vec<FleetGpu> {
    let name = node.folder.as_str();
    if let Some(p) = &node.docs.probe {
        return p
            .devices
            .iter()
            .map(|d| {
                let mut row = gpu_row(name, &d.device, d.facts.as_ref(), &d.environment.details);
                for c in &d.copies {
                    if let Some(v) = c.gb_per_s {
                        row.figures.push(FleetFigure {
                            figure: c.kind.name().to_string(),
                            value: v,
                            unit: "GB/s".to_string(),
                            percent: c.reference.as_ref().map(|r| r.percent),
                        });
                    }
                }
                for g in &d.gemms {
                    if let Some(v) = g.tflops {
                        row.figures.push(FleetFigure {
                            figure: g.kind.name().to_string(),
                            value: v,
                            unit: "TFLOP/s".to_string(),
                            percent: g.reference.as_ref().map(|r| r.percent),
                        });
                    }
                }
                row
            })
            .collect();
    }
    if let Some(l) = &node.docs.lot {
        return l
            .devices
            .iter()
            .map(|d| {
                gpu_row(
                    name,
                    &d.environment.requested_device,
                    d.facts.as_ref(),
                    &d.environment.details,
                )
            })
            .collect();
    }
    if let Some(e) = &node.docs.environment {
        let env = &e.environment;
        return vec![gpu_row(name, &env.requested_device, None, &env.details)];
    }
    Vec::new()
}

/// The GPUs a node's documents describe (probe first, then the lot report), for the package.
fn facts_of(node: &NodeRead) -> (Vec<GpuFacts>, Option<usize>) {
    let renamed = |f: &GpuFacts| GpuFacts {
        device: format!("{}/{}", node.folder, f.device),
        ..f.clone()
    };
    if let Some(p) = &node.docs.probe
        && p.devices.iter().any(|d| d.facts.is_some())
    {
        let facts = p
            .devices
            .iter()
            .filter_map(|d| d.facts.as_ref().map(renamed))
            .collect();
        return (facts, p.visible_devices);
    }
    if let Some(l) = &node.docs.lot {
        let facts = l
            .devices
            .iter()
            .filter_map(|d| d.facts.as_ref().map(renamed))
            .collect();
        return (facts, l.visible_devices);
    }
    (Vec::new(), None)
}

fn identity_of(docs: &NodeDocuments) -> Option<NodeIdentity> {
    docs.lot
        .as_ref()
        .and_then(|d| d.node.clone())
        .or_else(|| docs.environment.as_ref().and_then(|d| d.node.clone()))
        .or_else(|| docs.probe.as_ref().and_then(|d| d.node.clone()))
        .or_else(|| docs.measure.as_ref().and_then(|d| d.node.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, node: &str, file: &str, text: &str) {
        let d = dir.join(node);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), text).unwrap();
    }

    fn env_doc() -> String {
        serde_json::to_string(&EnvironmentReport {
            environment: lab::environment::Environment {
                schema: ENVIRONMENT_SCHEMA.into(),
                tool: lab::tool::ToolInfo::new(None),
                requested_device: "cpu".into(),
                backend: "cpu-reference".into(),
                reference_device: true,
                usable: true,
                problem: None,
                details: json!({"cpu_model": "Test CPU"}),
            },
            node: None,
        })
        .unwrap()
    }

    fn codes(v: &FleetVerdict) -> Vec<(&str, Option<&str>, Effect)> {
        v.findings
            .iter()
            .map(|f| (f.code.as_str(), f.node.as_deref(), f.effect))
            .collect()
    }

    /// One rank's collective document: an all-reduce up to 1 GiB at `busbw` GB/s.
    fn collective_doc(rank: u32, world: u32, busbw: f64, transport: &str) -> String {
        let rows: Vec<Value> = [8u64, 1 << 20, 1 << 30]
            .iter()
            .map(|&bytes| {
                json!({"op": "all_reduce", "bytes": bytes, "time_us": 1.0,
                       "algbw_gb_s": busbw / 1.5, "busbw_gb_s": busbw,
                       "correct": true, "wrong_ranks": 0})
            })
            .collect();
        json!({"schema": COLLECTIVE_SCHEMA, "program_version": 1, "torch": "2.11.0",
               "torch_build": "CUDA 12.8", "backend": "nccl", "device": "cuda:0",
               "rendezvous": "slurm", "rank": rank, "local_rank": rank % 2,
               "world_size": world, "warmup": 5, "iters": 20, "min_bytes": 8,
               "max_bytes": 1u64 << 30,
               "fabric": {"version": "2.27.5", "transport": transport, "channels": 16},
               "results": rows})
        .to_string()
    }

    /// A GPU fleet of four nodes of two GPUs that ran the collective (NCCL) and its pairs:
    /// every whole-run rank at `busbw`, every pair at 40 GB/s except those in `slow`.
    fn collective_fleet(busbw: f64, transport: &str, slow: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            package: "h100-sxm:7:4".into(),
            model: "NVIDIA H100 SXM".into(),
            gpu: "h100-sxm".into(),
            gpus: 8,
            nodes: 4,
            checks: vec![Check::Collective],
            device: Device::Gpu,
            probe_seconds: 10.0,
            binary: "/opt/iteragpu".into(),
        };
        std::fs::write(dir.path().join(PLAN_FILE), plan.to_json()).unwrap();
        std::fs::write(dir.path().join(JOB_FILE), "7\n").unwrap();
        let nodes = ["n1", "n2", "n3", "n4"];
        std::fs::write(dir.path().join("nodes.txt"), nodes.join("\n") + "\n").unwrap();
        for (i, node) in nodes.iter().enumerate() {
            let r = 2 * i as u32;
            write(
                dir.path(),
                node,
                "collective.json",
                &collective_doc(r, 8, busbw, transport),
            );
            write(dir.path(), node, "collective.exit", "0\n");
            write(
                dir.path(),
                node,
                "collective.1.json",
                &collective_doc(r + 1, 8, busbw, transport),
            );
            write(dir.path(), node, "collective.1.exit", "0\n");
        }
        for i in 0..4 {
            let (a, b) = (nodes[i], nodes[(i + 1) % 4]);
            let figure = if slow.contains(&(a, b)) { 4.0 } else { 40.0 };
            for (k, node) in [a, b].iter().enumerate() {
                for l in 0..2u32 {
                    let stem = if l == 0 {
                        format!("collective.pair-{a}-{b}")
                    } else {
                        format!("collective.pair-{a}-{b}.{l}")
                    };
                    let doc = collective_doc(2 * k as u32 + l, 4, figure, transport);
                    write(dir.path(), node, &format!("{stem}.json"), &doc);
                    write(dir.path(), node, &format!("{stem}.exit"), "0\n");
                }
            }
        }
        dir
    }

    fn with_busbw(expected: Option<f64>) -> CheckOptions {
        CheckOptions {
            expected_busbw_gb_s: expected,
            ..CheckOptions::default()
        }
    }

    #[test]
    fn a_slow_fabric_a_socket_fallback_and_a_slow_node_fail_the_collective() {
        // Under 70% of what the provider promises.
        let d = collective_fleet(20.0, "IB", &[]);
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        assert!(!v.ok);
        assert_eq!(v.collective.as_ref().unwrap().verdict, "failed");
        assert!(codes(&v).contains(&("collective_failed", None, Effect::Fails)));
        // NCCL fell back to TCP sockets: failed whatever the figure.
        let d = collective_fleet(44.0, "Socket", &[]);
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        assert!(!v.ok);
        assert!(
            v.findings
                .iter()
                .any(|f| f.message.contains("fell back to sockets"))
        );
        // n3's two pairs at a tenth of the others: n3 named, failing.
        let d = collective_fleet(44.0, "IB", &[("n2", "n3"), ("n3", "n4")]);
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        assert!(!v.ok);
        assert!(codes(&v).contains(&("collective_slow_node", Some("n3"), Effect::Fails)));
        assert_eq!(
            codes(&v)
                .iter()
                .filter(|c| c.0 == "collective_slow_pair")
                .count(),
            2
        );
        // One slow link, n1-n2: the pair is named, no node is.
        let d = collective_fleet(44.0, "IB", &[("n1", "n2")]);
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        assert!(codes(&v).contains(&("collective_slow_pair", None, Effect::Fails)));
        assert!(!codes(&v).iter().any(|c| c.0 == "collective_slow_node"));
        // Every node's documents copied from one rank, of a one-rank run: not the package's run.
        let d = collective_fleet(44.0, "IB", &[]);
        for node in ["n1", "n2", "n3", "n4"] {
            for f in ["collective.json", "collective.1.json"] {
                std::fs::write(
                    d.path().join(node).join(f),
                    collective_doc(0, 1, 44.0, "IB"),
                )
                .unwrap();
            }
        }
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        assert!(!v.ok);
        let c = codes(&v);
        assert!(
            c.contains(&("collective_world_size", None, Effect::Fails)),
            "{c:?}"
        );
        assert!(
            c.contains(&("collective_rank_twice", None, Effect::Fails)),
            "{c:?}"
        );
        // A rank of n2 that failed, and a pair that left nothing, are failures too.
        let d = collective_fleet(44.0, "IB", &[]);
        std::fs::write(d.path().join("n2/collective.1.exit"), "1\n").unwrap();
        std::fs::remove_file(d.path().join("n2/collective.1.json")).unwrap();
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        assert!(codes(&v).contains(&("collective_rank_failed", Some("n2"), Effect::Fails)));
        assert!(
            v.findings
                .iter()
                .any(|f| f.message.contains("rank(s) 3 of 8 left no document")),
            "{:?}",
            v.findings
        );
    }

    #[test]
    fn without_the_providers_figure_the_collective_is_not_checked_and_with_it_passes() {
        let d = collective_fleet(44.0, "IB", &[]);
        let v = check(d.path(), &with_busbw(None)).unwrap();
        assert!(v.ok, "{:?}", v.findings);
        let c = v.collective.as_ref().unwrap();
        assert_eq!(c.verdict, "not checked");
        assert!(v.not_checked.iter().any(|n| n.contains("--expect-busbw")));
        let v = check(d.path(), &with_busbw(Some(45.0))).unwrap();
        let c = v.collective.as_ref().unwrap();
        assert_eq!(c.verdict, "passed", "{:?}", v.findings);
        assert_eq!((c.documents, c.pairs.len()), (8, 4));
        assert_eq!(c.busbw_gb_s, Some(44.0));
        let text = render(&v, false);
        assert!(
            text.contains("collective: passed: 8 rank(s) over nccl (IB), all-reduce bus bandwidth 44.000 GB/s at the largest size, 45.0 GB/s expected"),
            "{text}"
        );
        assert!(text.contains("n2-n3: 40.000 GB/s"), "{text}");
    }

    #[test]
    fn a_folder_that_is_not_one_is_an_error() {
        let e = check(Path::new("/nonexistent/fleet"), &CheckOptions::default()).unwrap_err();
        assert!(matches!(e, FleetError::NotAFolder(_)));
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            check(dir.path(), &CheckOptions::default()),
            Err(FleetError::NoNode(_))
        ));
    }

    #[test]
    fn empty_and_symlink_only_node_folders_never_pass() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("n1")).unwrap();
        std::fs::create_dir_all(dir.path().join("n2")).unwrap();
        let v = check(dir.path(), &CheckOptions::default()).unwrap();
        assert!(!v.ok);
        assert_eq!(
            codes(&v),
            [
                ("nothing_ran", None, Effect::Fails),
                ("node_empty", Some("n1"), Effect::Fails),
                ("node_empty", Some("n2"), Effect::Fails)
            ]
        );
        assert!(render(&v, false).starts_with("verdict: FAILED"));
        // Links to another node's documents are not documents the step wrote.
        write(dir.path(), "real", "environment.json", &env_doc());
        write(dir.path(), "real", "environment.exit", "0\n");
        for f in ["environment.json", "environment.exit"] {
            std::os::unix::fs::symlink(
                dir.path().join("real").join(f),
                dir.path().join("n1").join(f),
            )
            .unwrap();
        }
        let v = check(dir.path(), &CheckOptions::default()).unwrap();
        assert!(!v.ok);
        let n1 = v
            .findings
            .iter()
            .find(|f| f.node.as_deref() == Some("n1"))
            .unwrap();
        assert!(n1.message.contains("symbolic link"), "{}", n1.message);
    }

    #[test]
    fn exit_files_holding_garbage_a_huge_number_or_a_fifo_fail_the_step() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["n0", "n1", "n2", "n3"] {
            write(dir.path(), n, "environment.json", &env_doc());
        }
        write(dir.path(), "n0", "environment.exit", "0\n");
        write(dir.path(), "n1", "environment.exit", "zero\n");
        write(
            dir.path(),
            "n2",
            "environment.exit",
            "99999999999999999999\n",
        );
        let fifo = dir.path().join("n3/environment.exit");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let v = check(dir.path(), &CheckOptions::default()).unwrap();
        assert_eq!(
            codes(&v),
            [
                ("node_failed", Some("n1"), Effect::Fails),
                ("node_failed", Some("n2"), Effect::Fails),
                ("node_failed", Some("n3"), Effect::Fails)
            ]
        );
        assert!(
            v.findings[0]
                .message
                .contains("holds `zero`, not an exit code")
        );
        assert!(
            v.findings[1]
                .message
                .contains("not an exit code from 0 to 255")
        );
        assert!(
            v.findings[2].message.contains("FIFO"),
            "{}",
            v.findings[2].message
        );
    }

    #[test]
    fn a_failed_step_and_a_missing_one_are_named_with_their_error() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["n0", "n1", "n2"] {
            write(dir.path(), n, "environment.json", &env_doc());
            write(dir.path(), n, "environment.exit", "0\n");
        }
        write(dir.path(), "n1", "probe.exit", "137\n");
        write(
            dir.path(),
            "n1",
            "probe.err",
            "\niteragpu: error: no NVIDIA driver was found\nmore\n",
        );
        write(dir.path(), "n0", "probe.exit", "0\n");
        write(dir.path(), "n0", "probe.err", "");
        let v = check(dir.path(), &CheckOptions::default()).unwrap();
        assert_eq!(v.checks, ["environment", "probe"]);
        assert_eq!(v.exit_code(), 1);
        // n0's probe exited 0 but wrote no document; n1's was killed; n2 left nothing.
        assert_eq!(
            codes(&v),
            [
                ("node_failed", Some("n0"), Effect::Fails),
                ("node_failed", Some("n1"), Effect::Fails),
                ("node_missing", Some("n2"), Effect::Fails)
            ]
        );
        assert!(
            v.findings[1].message.contains(
                "node n1: probe failed with exit code 137, killed by SIGKILL (exit 137: out of memory, or Slurm ending the step at its time limit or on scancel): iteragpu: error: no NVIDIA driver was found"
            ),
            "{}",
            v.findings[1].message
        );
        let text = render(&v, false);
        assert!(
            text.contains("node n1: environment ok, probe FAILED (exit 137)"),
            "{text}"
        );
        assert!(text.starts_with("verdict: FAILED: 3 finding(s)"), "{text}");
        assert!(text.contains("not checked: the plan"), "{text}");
    }

    #[test]
    fn the_plan_requires_every_node_and_check_and_names_the_cancelled_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = crate::tests::plan(Device::Cpu);
        plan.checks = vec![Check::Environment, Check::Probe];
        std::fs::write(dir.path().join(PLAN_FILE), plan.to_json()).unwrap();
        std::fs::write(dir.path().join(crate::slurm::NODES), "n1\nn2\nn3\nn4\n").unwrap();
        std::fs::write(dir.path().join(JOB_FILE), "77\n").unwrap();
        for n in ["n1", "n2", "n3"] {
            write(dir.path(), n, "environment.json", &env_doc());
            write(dir.path(), n, "environment.exit", "0\n");
        }
        // n3's environment is cut short and never confirmed; Slurm says why.
        write(
            dir.path(),
            "n3",
            "environment.json",
            "{\"schema\": \"iteragpu.env",
        );
        std::fs::remove_file(dir.path().join("n3/environment.exit")).unwrap();
        std::fs::write(
            dir.path().join("slurm-77.out"),
            "== environment\nslurmstepd: error: *** STEP 77.0 ON n3 CANCELLED AT 2026-12-03T03:00:00 DUE TO TIME LIMIT ***\n",
        )
        .unwrap();
        let v = check(dir.path(), &CheckOptions::default()).unwrap();
        assert!(!v.ok);
        let text = render(&v, false);
        // The probe ran nowhere: every node misses it, n4 left nothing at all.
        for n in ["n1", "n2", "n3"] {
            assert!(
                text.contains(&format!("node {n}: left no probe files")),
                "{text}"
            );
        }
        assert!(
            text.contains("FAIL node_missing: node n4: the job's node list names it"),
            "{text}"
        );
        assert!(
            text.contains("node n3: environment failed, slurmstepd: error: *** STEP 77.0 ON n3 CANCELLED AT 2026-12-03T03:00:00 DUE TO TIME LIMIT ***: environment.json is cut short"),
            "{text}"
        );
        assert!(
            text.contains("FAIL slurm_time_limit: node n3: Slurm ended its step"),
            "{text}"
        );
        // Healthy nodes are never blamed for what happened on n3.
        assert!(
            !v.findings
                .iter()
                .any(|f| f.node.as_deref() == Some("n1") && f.code != "node_missing")
        );
        assert!(
            text.contains("not checked: the package: the plan ran on the CPU reference device"),
            "{text}"
        );
        assert!(!text.contains("the package matches"), "{text}");
    }

    #[test]
    fn documents_of_another_job_or_a_copied_node_fail() {
        let dir = tempfile::tempdir().unwrap();
        let ident = |name: &str, rank: u32, job: &str| {
            let mut v: Value = serde_json::from_str(&env_doc()).unwrap();
            v["node"] =
                json!({"source": "slurm", "name": name, "rank": rank, "count": 3, "job_id": job});
            v.to_string()
        };
        write(dir.path(), "n0", "environment.json", &ident("n0", 0, "5"));
        write(dir.path(), "n1", "environment.json", &ident("n1", 1, "5"));
        write(dir.path(), "n2", "environment.json", &ident("n2", 2, "9"));
        write(dir.path(), "n3", "environment.json", &ident("n1", 1, "5"));
        for n in ["n0", "n1", "n2", "n3"] {
            write(dir.path(), n, "environment.exit", "0\n");
        }
        let v = check(dir.path(), &CheckOptions::default()).unwrap();
        assert_eq!(v.job.as_deref(), Some("5"));
        let c = codes(&v);
        assert!(
            c.contains(&("foreign_documents", Some("n2"), Effect::Fails)),
            "{c:?}"
        );
        assert!(
            c.contains(&("foreign_documents", Some("n3"), Effect::Fails)),
            "{c:?}"
        );
        assert!(
            c.contains(&("duplicated", Some("n1"), Effect::Fails)),
            "{c:?}"
        );
        assert!(c.contains(&("node_extra", None, Effect::Fails)), "{c:?}");
        let text = render(&v, false);
        assert!(
            text.contains("environment.json comes from job 9, not 5"),
            "{text}"
        );
        assert!(
            text.contains("node name n1 appears 2 times, in n1, n3"),
            "{text}"
        );
        assert!(
            text.contains("node rank 1 appears 2 times, in n1, n3"),
            "{text}"
        );
    }

    #[test]
    fn a_nodes_own_warnings_are_lifted_with_node_gpu_and_effect() {
        let f = Finding::warning(
            "ecc_uncorrected_errors",
            Some("cuda:1"),
            "cuda:1 has had 3 uncorrected ECC error(s)".into(),
            json!({}),
        );
        let l = lift("n2", &f);
        assert_eq!(
            (l.effect, l.node.as_deref(), l.gpu.as_deref()),
            (Effect::Fails, Some("n2"), Some("cuda:1"))
        );
        assert!(l.message.starts_with("node n2: cuda:1 has had 3"));
        assert_eq!(
            lifted_effect(Severity::Warning, "pcie_link_degraded").0,
            Effect::Warns
        );
        assert_eq!(
            lifted_effect(Severity::Warning, "gemm_below_datasheet").0,
            Effect::Fails
        );
        assert_eq!(
            lifted_effect(Severity::Warning, "something_new").0,
            Effect::Fails
        );
        assert_eq!(
            lifted_effect(Severity::Note, "persistence_off").0,
            Effect::Warns
        );
    }

    #[test]
    fn exit_codes_name_their_cause() {
        assert!(exit_cause(124).unwrap().contains("time limit"));
        assert!(exit_cause(137).unwrap().contains("SIGKILL"));
        assert!(exit_cause(143).unwrap().contains("SIGTERM"));
        assert_eq!(exit_cause(1), None);
    }
}
