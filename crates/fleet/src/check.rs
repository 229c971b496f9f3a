//! `fleet check DIR`: every node's results judged together.
//!
//! The generated batch script leaves one folder per node, `DIR/<node>/`, with, for each check
//! (`environment`, `probe`, `measure`), the document `<check>.json`, the step's exit code as text
//! `<check>.exit` and its stderr `<check>.err`. This module reads them all and gives one
//! [`FleetVerdict`]:
//!
//! - one table of node x GPU: model, UUID, memory, driver, and every probe figure with its
//!   percentage of the datasheet;
//! - nodes whose step failed (a non-zero `.exit`, with the first line of `.err`), or that are
//!   missing (a rank the documents count but no folder holds, a check the others ran that this
//!   node did not);
//! - the package (`--package`) over all nodes: the whole package's GPU count, each GPU's model
//!   and memory;
//! - outliers against the fleet: a GPU more than [`lab::probe::LOT_OUTLIER_PERCENT`] below the
//!   median of every other GPU of every node on a probe figure (the lot rule, across nodes).
//!
//! The verdict's exit code: 0 when all is well, 1 when a node failed or is missing, a GPU is an
//! outlier or the package does not match. Usage mistakes (no such folder) are [`FleetError`]s.

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
use rent::datasheet::Datasheet;

use crate::Check;

/// Schema identifier of the verdict (`fleet check --json`).
pub const FLEET_VERDICT_SCHEMA: &str = "iteragpu.fleet-verdict/1";

/// The most of a `.err` or `.exit` file read: its first line is what counts.
const SMALL_FILE_LIMIT: u64 = 1 << 20;
/// The first error line is cut to this many characters.
const ERROR_LINE_CHARS: usize = 400;

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
    /// It holds no node folder.
    #[error("{} holds no node folder (DIR/<node>/environment.json, probe.json, measure.json with their .exit and .err)", .0.display())]
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
    /// The nodes expected (else the largest node count the documents give).
    pub nodes: Option<u32>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            package: None,
            datasheet: Datasheet::embedded(),
            outlier_percent: LOT_OUTLIER_PERCENT,
            nodes: None,
        }
    }
}

/// How one check went on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Exit 0 (or no `.exit`) and a document that reads.
    Ok,
    /// A non-zero exit, or a document that does not read.
    Failed,
    /// The other nodes ran it; this one left nothing.
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
    /// One entry per check the fleet ran.
    pub steps: Vec<StepOutcome>,
    /// GPUs its driver sees.
    pub visible_gpus: Option<usize>,
    /// Warnings in its own documents (their lot and probe checks).
    pub document_warnings: usize,
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
    /// The nodes expected (from `--nodes` or the documents), when known.
    pub expected_nodes: Option<u32>,
    /// One entry per node folder, by name.
    pub nodes: Vec<NodeVerdict>,
    /// The checks the fleet ran (any node left a file of).
    pub checks: Vec<String>,
    /// The table: every GPU of every node.
    pub gpus: Vec<FleetGpu>,
    /// The package checked over all nodes.
    pub package: Option<Expectation>,
    /// Outliers against the fleet.
    pub outliers: Vec<FleetOutlier>,
    /// Every finding, warnings first.
    pub findings: Vec<Finding>,
    /// How many findings are warnings.
    pub warnings: usize,
    /// No warning: every node ran every check, no outlier, the package matches.
    pub ok: bool,
    /// 0 when `ok`, else 1.
    pub exit_code: u8,
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
}

fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(ERROR_LINE_CHARS).collect())
}

fn read_small(path: &Path) -> Option<Vec<u8>> {
    if !path.symlink_metadata().is_ok_and(|m| m.is_file()) {
        return None;
    }
    lab_io::files::read_bounded(path, SMALL_FILE_LIMIT, "a step's exit code or stderr").ok()
}

/// Reads `<check>.json` into `docs`; `Err` says why it does not read.
fn read_document(path: &Path, check: Check, docs: &mut NodeDocuments) -> Result<(), String> {
    let bytes = lab_io::files::read_bounded(path, MEASUREMENT_LIMIT, "a fleet node's document")
        .map_err(|e| e.to_string())?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}.json is not JSON: {e}", check.name()))?;
    let schema = value.get("schema").and_then(Value::as_str).unwrap_or("");
    let wrong = |e: serde_json::Error| format!("{}.json does not read: {e}", check.name());
    match (check, schema) {
        (Check::Environment, LOT_SCHEMA) => {
            docs.lot = Some(serde_json::from_value(value).map_err(wrong)?);
        }
        (Check::Environment, ENVIRONMENT_SCHEMA) => {
            docs.environment = Some(serde_json::from_value(value).map_err(wrong)?);
        }
        (Check::Probe, PROBE_SCHEMA) => {
            docs.probe = Some(serde_json::from_value(value).map_err(wrong)?);
        }
        (Check::Measure, MEASUREMENT_SCHEMA) => {
            docs.measure = Some(serde_json::from_value(value).map_err(wrong)?);
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
    docs: NodeDocuments,
    /// Per check: (exit code, first error line, document present, document error), or `None`
    /// when the node left no file of it.
    steps: Vec<(Check, Option<StepRead>)>,
}

struct StepRead {
    exit_code: Option<i32>,
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
        let document = json_path.symlink_metadata().is_ok_and(|m| m.is_file());
        let exit_bytes = read_small(&file("exit"));
        let err_bytes = read_small(&file("err"));
        if !document && exit_bytes.is_none() && err_bytes.is_none() {
            steps.push((check, None));
            continue;
        }
        let exit_code = exit_bytes
            .as_deref()
            .and_then(first_line)
            .and_then(|l| l.parse::<i32>().ok());
        let unreadable = if document {
            read_document(&json_path, check, &mut docs).err()
        } else {
            None
        };
        steps.push((
            check,
            Some(StepRead {
                exit_code,
                error: err_bytes.as_deref().and_then(first_line),
                document,
                unreadable,
            }),
        ));
    }
    NodeRead {
        folder: name,
        docs,
        steps,
    }
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

fn document_warnings(docs: &NodeDocuments) -> usize {
    docs.lot.as_ref().map_or(0, |l| l.warnings) + docs.probe.as_ref().map_or(0, |p| p.warnings)
}

/// Judges every node folder of `dir`.
pub fn check(dir: &Path, options: &CheckOptions) -> Result<FleetVerdict, FleetError> {
    if !dir.is_dir() {
        return Err(FleetError::NotAFolder(dir.to_path_buf()));
    }
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
    if folders.is_empty() {
        return Err(FleetError::NoNode(dir.to_path_buf()));
    }
    let read: Vec<NodeRead> = folders
        .into_iter()
        .map(|(name, path)| read_node(&path, name))
        .collect();
    let ran: Vec<Check> = Check::ALL
        .into_iter()
        .filter(|c| {
            read.iter()
                .any(|n| n.steps.iter().any(|(s, r)| s == c && r.is_some()))
        })
        .collect();
    let mut findings: Vec<Finding> = Vec::new();
    let mut nodes = Vec::new();
    for n in &read {
        let mut steps = Vec::new();
        for (check, step) in &n.steps {
            if !ran.contains(check) {
                continue;
            }
            let outcome = match step {
                None => StepOutcome {
                    check: check.name().to_string(),
                    status: StepStatus::Missing,
                    exit_code: None,
                    error: None,
                    document: false,
                },
                Some(s) => {
                    let failed_exit = s.exit_code.is_some_and(|c| c != 0);
                    let no_document = !s.document && !failed_exit;
                    let status = if failed_exit || s.unreadable.is_some() || no_document {
                        StepStatus::Failed
                    } else {
                        StepStatus::Ok
                    };
                    let error = if failed_exit {
                        s.error.clone().or_else(|| s.unreadable.clone())
                    } else if no_document {
                        Some(format!(
                            "no {}.json was written{}",
                            check.name(),
                            s.error
                                .as_deref()
                                .map(|e| format!(" ({e})"))
                                .unwrap_or_default()
                        ))
                    } else {
                        s.unreadable.clone()
                    };
                    StepOutcome {
                        check: check.name().to_string(),
                        status,
                        exit_code: s.exit_code,
                        error,
                        document: s.document,
                    }
                }
            };
            match outcome.status {
                StepStatus::Ok => {}
                StepStatus::Failed => findings.push(Finding::warning(
                    "node_failed",
                    Some(&n.folder),
                    format!(
                        "node {}: {} failed{}: {}",
                        n.folder,
                        outcome.check,
                        outcome
                            .exit_code
                            .map(|c| format!(" with exit code {c}"))
                            .unwrap_or_default(),
                        outcome.error.as_deref().unwrap_or("no error line was left")
                    ),
                    json!({"node": n.folder, "check": outcome.check, "exit_code": outcome.exit_code, "error": outcome.error}),
                )),
                StepStatus::Missing => findings.push(Finding::warning(
                    "node_missing",
                    Some(&n.folder),
                    format!(
                        "node {}: left no {} files ({0}.json, .exit, .err) where the other nodes did: the step never ran or its files were lost",
                        n.folder, outcome.check
                    ),
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
        nodes.push(NodeVerdict {
            folder: n.folder.clone(),
            ok: steps.iter().all(|s| s.status == StepStatus::Ok),
            identity,
            steps,
            visible_gpus: visible,
            document_warnings: document_warnings(&n.docs),
        });
    }
    // Nodes the job counts but no folder holds.
    let expected_nodes = options.nodes.or_else(|| {
        nodes
            .iter()
            .filter_map(|n| n.identity.as_ref().and_then(|i| i.count))
            .max()
    });
    if let Some(expected) = expected_nodes
        && (nodes.len() as u64) < u64::from(expected)
    {
        let seen: Vec<u32> = nodes
            .iter()
            .filter_map(|n| n.identity.as_ref().and_then(|i| i.rank))
            .collect();
        let absent: Vec<u32> = (0..expected).filter(|r| !seen.contains(r)).collect();
        let which = if absent.is_empty() || absent.len() != expected as usize - nodes.len() {
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
        findings.push(Finding::warning(
            "node_missing",
            None,
            format!(
                "the job has {expected} nodes but {} holds {} node folder(s): {} node(s) left nothing{which}",
                dir.display(),
                nodes.len(),
                expected as usize - nodes.len()
            ),
            json!({"expected_nodes": expected, "node_folders": nodes.len(), "absent_ranks": absent}),
        ));
    }
    // The table.
    let gpus: Vec<FleetGpu> = read.iter().flat_map(rows_of).collect();
    // Outliers across the fleet, GPUs only, per figure.
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
        for o in low_outliers_of_lot(&values, options.outlier_percent) {
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
    let mut outlying: Vec<(&str, &str)> = Vec::new();
    for o in &outliers {
        if !outlying.contains(&(o.node.as_str(), o.device.as_str())) {
            outlying.push((&o.node, &o.device));
        }
    }
    for (node, device) in outlying {
        let mine: Vec<&FleetOutlier> = outliers
            .iter()
            .filter(|o| o.node == node && o.device == device)
            .collect();
        let parts: Vec<String> = mine
            .iter()
            .map(|o| {
                format!(
                    "{} {:.3}, {:.0}% below the fleet's median of the others {:.3}",
                    o.figure, o.value, o.percent_below, o.median_of_others
                )
            })
            .collect();
        findings.push(Finding::warning(
            "fleet_outlier",
            Some(&format!("{node}/{device}")),
            format!(
                "node {node} {device} is the fleet's outlier, more than {:.0}% below the other GPUs of every node on {} figure(s): {}",
                options.outlier_percent,
                mine.len(),
                parts.join("; ")
            ),
            json!({"node": node, "device": device, "figures": mine}),
        ));
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
        for mut f in check_package_findings(&facts, visible, exp, &options.datasheet) {
            if f.code == "gpu_missing" {
                f.message = f.message.replace(
                    "this machine or container",
                    &format!("the fleet's {} node(s)", nodes.len()),
                );
            }
            findings.push(f);
        }
    }
    findings.sort_by_key(|f| f.severity == Severity::Note);
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let ok = warnings == 0;
    Ok(FleetVerdict {
        schema: FLEET_VERDICT_SCHEMA.to_string(),
        folder: dir.display().to_string(),
        expected_nodes,
        nodes,
        checks: ran.iter().map(|c| c.name().to_string()).collect(),
        gpus,
        package,
        outliers,
        findings,
        warnings,
        ok,
        exit_code: u8::from(!ok),
    })
}

fn pad(cell: &str, width: usize) -> String {
    format!("{cell:<width$}")
}

/// The verdict as text: the nodes, the table of node x GPU, the findings, one verdict line.
pub fn render(v: &FleetVerdict) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fleet check {}: {} node folder(s){}, {} GPU(s), checks: {}",
        v.folder,
        v.nodes.len(),
        v.expected_nodes
            .map(|n| format!(" of {n} expected"))
            .unwrap_or_default(),
        v.gpus.iter().filter(|g| g.gpu).count(),
        v.checks.join(", ")
    );
    if let Some(p) = &v.package {
        let _ = writeln!(
            out,
            "package: {} promises {} x {} over all nodes",
            p.package, p.gpus, p.model
        );
    }
    let _ = writeln!(out);
    for n in &v.nodes {
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
            steps.join(", ")
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
    let mut rows: Vec<Vec<String>> = vec![
        ["node", "device", "model", "uuid", "MiB", "driver"]
            .iter()
            .map(|s| s.to_string())
            .chain(figures.iter().map(|f| f.to_string()))
            .collect(),
    ];
    for g in &v.gpus {
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
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let _ = writeln!(out);
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| pad(c, *w)).collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    }
    let _ = writeln!(out);
    let notes = v.findings.len() - v.warnings;
    let _ = writeln!(
        out,
        "fleet checks: {} warning(s), {notes} note(s)",
        v.warnings
    );
    for f in &v.findings {
        let level = match f.severity {
            Severity::Warning => "WARNING",
            Severity::Note => "note",
        };
        let _ = writeln!(out, "  {level} {}: {}", f.code, f.message);
    }
    let _ = writeln!(
        out,
        "verdict: {} (exit {})",
        if v.ok {
            "OK: every node ran every check, no outlier, the package matches"
        } else {
            "FAILED"
        },
        v.exit_code
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, node: &str, file: &str, text: &str) {
        let d = dir.join(node);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), text).unwrap();
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
    fn a_failed_step_and_a_missing_one_are_named_with_their_error() {
        let dir = tempfile::tempdir().unwrap();
        let env = serde_json::to_string(&EnvironmentReport {
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
        .unwrap();
        for n in ["n0", "n1", "n2"] {
            write(dir.path(), n, "environment.json", &env);
            write(dir.path(), n, "environment.exit", "0\n");
        }
        write(dir.path(), "n1", "probe.exit", "1\n");
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
        let codes: Vec<(&str, Option<&str>)> = v
            .findings
            .iter()
            .map(|f| (f.code.as_str(), f.device.as_deref()))
            .collect();
        // n0's probe exited 0 but wrote no document; n1's failed; n2 left nothing.
        assert_eq!(
            codes,
            [
                ("node_failed", Some("n0")),
                ("node_failed", Some("n1")),
                ("node_missing", Some("n2"))
            ]
        );
        assert!(
            v.findings[1].message.contains(
                "node n1: probe failed with exit code 1: iteragpu: error: no NVIDIA driver was found"
            ),
            "{}",
            v.findings[1].message
        );
        let text = render(&v);
        assert!(
            text.contains("node n1: environment ok, probe FAILED (exit 1)"),
            "{text}"
        );
        assert!(text.contains("verdict: FAILED (exit 1)"), "{text}");
    }
}
