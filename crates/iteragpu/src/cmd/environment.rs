//! `iteragpu environment`: the diagnosis of the device a user asked for, or of the whole lot.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use lab::environment::{Environment, EnvironmentReport};
use lab::lot::{LOT_SCHEMA, LotReport, Severity, check_lot};
use lab::node::{NodeIdentity, parse_node_name};
use lab_cuda::lot::{Selection, parse_selection};
use lab_torch::environment::Devices;
use ledger::Package;
use rent::catalogue::Catalogue;
use rent::datasheet::Datasheet;
use serde_json::Value;

use crate::lot::{expectation, node_expectation, parse_package, render_findings};
use crate::{exit, output};

/// While docs/gpu-runs.md records no GPU run: the line `environment`'s text report prints under
/// its header for a GPU. README.md and README-kit.md carry the same line, and the CLI test
/// `the_not_yet_on_a_gpu_line_is_in_the_report_and_both_readmes` keeps the three together: once a
/// run is recorded there, set this to `None` and remove the two READMEs' lines.
pub const NOT_YET_ON_A_GPU: Option<&str> =
    Some("GPU path: checked against stub libraries and PyTorch's source, not yet on a GPU");

/// Options of `environment`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu environment
  iteragpu environment --device all
  iteragpu environment --device cuda:0,1 --json
  iteragpu environment --package b200:7:1
  iteragpu environment --package b200:7:4 --node n1   # one node of four
  iteragpu environment --engine torch --package mi300x:7:1   # an AMD lot, through PyTorch

`--device all` (or a list such as cuda:0,1) reports every GPU, one block each, and checks the
lot: the same model and memory on every GPU, the number of GPUs the package promises, ECC
errors, pages or rows waiting to be retired or remapped, MIG mode, persistence, clocks and
throttle reasons, the PCIe link against its maximum and the datasheet, NVLink links, peer
access between every pair, and other processes holding memory. Each finding that can cost the
renter money is a named warning with its figures. Exit 0 even when no GPU is usable: the report
then says why.

Under Slurm or SkyPilot the report records the scheduler's node name, rank, node count and job
id (SLURMD_NODENAME, SLURM_NODEID, SLURM_JOB_NUM_NODES, SLURM_JOB_ID; SKYPILOT_NODE_RANK,
SKYPILOT_NUM_NODES, SKYPILOT_TASK_ID: no other variable is read), and on node k of N the lot
check expects the node's share of --package, package GPUs / N (a package that does not split
evenly is refused). Outside a scheduler no node or host name is recorded unless --node names it.

`--engine torch` reads the GPUs through the machine's PyTorch instead of the NVIDIA driver, for
GPUs the native engine cannot open (AMD GPUs under ROCm, which torch calls cuda:N too): each
GPU's name, compute capability or gfx architecture, multiprocessor count, memory and free memory,
UUID and PCI address where torch gives them, peer access, and on ROCm the AMD SMI library's
clocks, power, temperatures, PCIe link, ECC counts, bad pages and processes when its Python
module (amdsmi) imports. What cannot be read is written \"unavailable (why)\", never guessed, and
the same lot checks run on the rest (a check whose facts are missing is not passed, it is not
run: the report says which). The documents are the native ones with the engine named. A torch
that sees no GPU is reported as the native engine reports a missing driver (exit 0, usable: no);
no Python with PyTorch is a refusal (exit 2).")]
pub struct Args {
    /// The device to describe: `cuda:N` (an NVIDIA GPU), `cpu` (the CPU reference device), `all`
    /// (every GPU, with lot checks) or a list such as `cuda:0,1` [default: cuda:0, or all with
    /// --package].
    #[arg(long)]
    pub device: Option<String>,

    /// The rented package, GPU:DAYS:LOTS (e.g. b200:7:1): the lot must hold gpus-per-lot x lots
    /// GPUs of that model, with the catalogue's memory.
    #[arg(long, value_parser = parse_package, value_name = "GPU:DAYS:LOTS")]
    pub package: Option<Package>,

    /// A tariff CSV to read the package from instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,

    /// A datasheet table to compare the GPUs with instead of the bundled one
    /// (data/gpu-datasheet.csv's columns).
    #[arg(long, value_name = "FILE")]
    pub datasheet: Option<PathBuf>,

    /// Name this node in the report (under a scheduler, instead of the scheduler's node name;
    /// outside one, no node is recorded without it).
    #[arg(long, value_name = "NAME", value_parser = parse_node_name)]
    pub node: Option<String>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,

    /// `native` (the NVIDIA driver and NVML) or `torch` (the machine's PyTorch, CUDA or ROCm:
    /// for AMD GPUs and GPUs the native engine cannot open).
    #[arg(long, default_value = "native", value_parser = ["native", "torch"], value_name = "ENGINE")]
    pub engine: String,

    /// With --engine torch: the Python that has PyTorch [default: the first python3 on the PATH
    /// with a torch package].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,

    /// Tests only, never a product path: with --engine torch, torch's CPU device stands in for
    /// one GPU (the documents say so: backend torch-cpu-test-only, reference device).
    #[arg(long, hide = true)]
    pub test_only_cpu: bool,
}

/// Runs `environment`. A GPU that is not usable is reported (exit 0), not an error.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // A file named on the command line is read even by a view that does not use it (one device,
    // or no --package), so a wrong path is refused (exit 2 when it is not there), never ignored.
    if let Some(path) = args.catalogue.as_deref() {
        Catalogue::from_path(path)?;
    }
    if args.datasheet.is_some() {
        Datasheet::load(args.datasheet.as_deref())?;
    }
    let device = args.device.clone().unwrap_or_else(|| {
        if args.package.is_some() {
            "all".to_string()
        } else {
            "cuda:0".to_string()
        }
    });
    if args.engine == "torch" {
        return run_torch(&args, &device);
    }
    if args.python.is_some() || args.test_only_cpu {
        return Err(exit::usage(
            "--python applies to --engine torch; the native engine runs no Python".to_string(),
        ));
    }
    if let Some(selection) = parse_selection(&device) {
        return lot(&args, &selection);
    }
    if args.package.is_some() {
        return Err(exit::usage(format!(
            "--package checks a whole lot, not {device}: use --device all (the default with \
             --package) or a list such as cuda:0,1"
        )));
    }
    let env = if device == "cpu" {
        lab_cpu::environment(crate::tool_info())
    } else if let Some(ordinal) = lab_cuda::parse_ordinal(&device) {
        lab_cuda::environment(ordinal, crate::tool_info())
    } else {
        return Err(exit::usage(format!(
            "unknown device {device:?}: expected cuda:N (e.g. cuda:0), all, a list such as \
             cuda:0,1, or cpu"
        )));
    };
    let report = EnvironmentReport {
        environment: env,
        node: NodeIdentity::detect(args.node.as_deref()),
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render(&report.environment, report.node.as_ref()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--engine torch`: the same reports, from what the machine's PyTorch says (see
/// [`lab_torch::environment`]). No Python with torch, or a refusal: exit 2.
fn run_torch(args: &Args, device: &str) -> anyhow::Result<ExitCode> {
    let devices = if let Some(selection) = parse_selection(device) {
        match selection {
            Selection::All => Devices::All,
            Selection::Ordinals(o) => Devices::Ordinals(o),
        }
    } else if device == "cpu" {
        return Err(exit::usage(
            "--device cpu: the torch engine describes GPUs (cuda:N, all, or a list such as \
             cuda:0,1); the CPU reference device is the native engine's (leave out --engine torch)"
                .to_string(),
        ));
    } else if let Some(ordinal) = lab_cuda::parse_ordinal(device) {
        if args.package.is_some() {
            return Err(exit::usage(format!(
                "--package checks a whole lot, not {device}: use --device all (the default with \
                 --package) or a list such as cuda:0,1"
            )));
        }
        Devices::Ordinals(vec![ordinal])
    } else {
        return Err(exit::usage(format!(
            "unknown device {device:?}: expected cuda:N (e.g. cuda:0), all, or a list such as \
             cuda:0,1"
        )));
    };
    // The catalogue, datasheet and node are checked before any Python runs.
    let datasheet = Datasheet::load(args.datasheet.as_deref())?;
    let node = NodeIdentity::detect(args.node.as_deref());
    let expectation = node_expectation(
        expectation(args.package.as_ref(), args.catalogue.as_deref())?,
        node.as_ref(),
    )?;
    let path = std::env::var("PATH").ok();
    let python = lab_torch::find_python(args.python.as_deref(), path.as_deref())
        .map_err(|e| exit::usage(e.to_string()))?;
    let scan = lab_torch::environment::scan(&python, &devices, args.test_only_cpu).map_err(
        |e| match e {
            lab_torch::TorchError::Refused(why) => exit::usage(why),
            lab_torch::TorchError::NoPython { .. } | lab_torch::TorchError::Spawn { .. } => {
                exit::usage(e.to_string())
            }
            other => anyhow::Error::new(other),
        },
    )?;
    let tool = crate::tool_info();
    let lot_asked = parse_selection(device).is_some();
    if !lot_asked {
        let environment = match scan.devices.first() {
            Some(d) => scan.environment(d, &tool),
            None => scan.missing(device, &tool),
        };
        let report = EnvironmentReport { environment, node };
        if args.json {
            output::print_json(&report)?;
        } else {
            output::print_text(&render(&report.environment, report.node.as_ref()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let devices = scan.lot_devices(&tool);
    let facts: Vec<_> = devices.iter().filter_map(|d| d.facts.clone()).collect();
    let mut findings = check_lot(
        &facts,
        scan.visible.unwrap_or(0),
        &scan.peers,
        expectation.as_ref(),
        &datasheet,
    );
    // Without a management library the lot rules name NVML; through torch, say which library
    // was missing and why.
    for f in &mut findings {
        if f.code == "nvml_unavailable" {
            let d = f.device.clone().unwrap_or_default();
            let why = devices
                .iter()
                .find(|x| x.environment.requested_device == d)
                .and_then(|x| x.environment.details.pointer("/management/problem"))
                .and_then(Value::as_str)
                .unwrap_or("no management library");
            f.message = format!(
                "no management library read {d} ({why}): clocks, throttling, PCIe link, ECC, MIG \
                 and other processes were not checked"
            );
        }
    }
    let report = LotReport {
        schema: LOT_SCHEMA.to_string(),
        tool,
        requested_device: parse_selection(device).map_or(device.to_string(), |s| s.describe()),
        visible_devices: scan.visible,
        usable: scan.problem.is_none() && devices.iter().all(|d| d.environment.usable),
        problem: scan.problem.clone(),
        package: expectation,
        node,
        engine: Some(scan.engine.clone()),
        devices,
        peers: scan.peers.clone(),
        datasheet: datasheet.name().to_string(),
        warnings: findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count(),
        findings,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render_lot(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--device all` / `cuda:0,1`: every GPU, the peer matrix and the lot checks.
fn lot(args: &Args, selection: &Selection) -> anyhow::Result<ExitCode> {
    let datasheet = Datasheet::load(args.datasheet.as_deref())?;
    let node = NodeIdentity::detect(args.node.as_deref());
    let expectation = node_expectation(
        expectation(args.package.as_ref(), args.catalogue.as_deref())?,
        node.as_ref(),
    )?;
    let tool = crate::tool_info();
    let scan = lab_cuda::lot::scan(selection, &tool);
    let facts: Vec<_> = scan
        .devices
        .iter()
        .filter_map(|d| d.facts.clone())
        .collect();
    // With no driver the driver sees no GPU, so a package's lot is reported missing too.
    let findings = check_lot(
        &facts,
        scan.visible.unwrap_or(0),
        &scan.peers,
        expectation.as_ref(),
        &datasheet,
    );
    let report = LotReport {
        schema: LOT_SCHEMA.to_string(),
        tool,
        requested_device: selection.describe(),
        visible_devices: scan.visible,
        usable: scan.problem.is_none() && scan.devices.iter().all(|d| d.environment.usable),
        problem: scan.problem.as_ref().map(ToString::to_string),
        package: expectation,
        node,
        engine: None,
        devices: scan.devices,
        peers: scan.peers,
        datasheet: datasheet.name().to_string(),
        warnings: findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count(),
        findings,
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render_lot(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The human lot report: a header, one block per GPU, the peer matrix, the findings.
fn render_lot(r: &LotReport) -> String {
    let mut out = String::new();
    let commit = r.tool.commit.as_deref().unwrap_or("unknown commit");
    let _ = writeln!(out, "{} {} ({commit})", r.tool.name, r.tool.version);
    if let Some(line) = NOT_YET_ON_A_GPU {
        let _ = writeln!(out, "{line}");
    }
    let visible = r
        .visible_devices
        .map_or("no driver".to_string(), |n| format!("{n} GPU(s) visible"));
    let _ = writeln!(out, "lot: {} ({visible})", r.requested_device);
    if let Some(e) = &r.engine {
        // The interpreter is in the JSON (and in the problem when torch sees no GPU).
        let _ = writeln!(out, "engine: {} {} ({})", e.name, e.version, e.build);
    }
    if let Some(n) = &r.node {
        let _ = writeln!(out, "node: {}", n.describe());
    }
    if let Some(p) = &r.package {
        let _ = writeln!(
            out,
            "package: {} promises {} x {} ({} per lot x {} lot(s), {} MiB each)",
            p.package, p.gpus, p.model, p.gpus_per_lot, p.lots, p.usable_memory_mib
        );
        if let Some(s) = p.share {
            let _ = writeln!(
                out,
                "share: node {} of {} expects {} of them ({} / {} nodes)",
                s.node_rank + 1,
                s.nodes,
                s.gpus,
                p.gpus,
                s.nodes
            );
        }
    }
    if let Some(problem) = &r.problem {
        let _ = writeln!(out, "problem: {problem}");
    }
    for d in &r.devices {
        let _ = writeln!(out);
        let _ = writeln!(out, "== {}", d.environment.requested_device);
        out.push_str(&render_body(&d.environment));
    }
    if !r.peers.is_empty() {
        let _ = writeln!(out);
        let how = if r.engine.is_some() {
            "torch.cuda.can_device_access_peer"
        } else {
            "cuDeviceCanAccessPeer"
        };
        let _ = writeln!(out, "peer access ({how}):");
        for p in &r.peers {
            let _ = writeln!(
                out,
                "  {} -> {}  {}",
                p.from,
                p.to,
                if p.can_access { "yes" } else { "NO" }
            );
        }
    }
    let _ = writeln!(out);
    out.push_str(&render_findings(&r.findings, &r.datasheet));
    out
}

/// The human report: a header, then the details as indented `key: value` lines.
fn render(env: &Environment, node: Option<&NodeIdentity>) -> String {
    let mut out = String::new();
    let commit = env.tool.commit.as_deref().unwrap_or("unknown commit");
    let _ = writeln!(out, "{} {} ({commit})", env.tool.name, env.tool.version);
    if !env.reference_device
        && let Some(line) = NOT_YET_ON_A_GPU
    {
        let _ = writeln!(out, "{line}");
    }
    if let Some(n) = node {
        let _ = writeln!(out, "node: {}", n.describe());
    }
    out.push_str(&render_body(env));
    out
}

/// The device line, usability and details of one report.
fn render_body(env: &Environment) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "device: {} (backend {})",
        env.requested_device, env.backend
    );
    if env.usable {
        let _ = writeln!(out, "usable: yes");
    } else {
        let _ = writeln!(out, "usable: no");
        if let Some(problem) = &env.problem {
            let _ = writeln!(out, "problem: {problem}");
        }
    }
    if let Value::Object(map) = &env.details {
        for (key, value) in map {
            render_value(&mut out, key, value, 0);
        }
    }
    out
}

fn render_value(out: &mut String, key: &str, value: &Value, depth: usize) {
    let indent = "  ".repeat(depth);
    let key = key.replace('_', " ");
    match value {
        Value::Null => {}
        Value::Object(map) => {
            if map.values().all(Value::is_null) {
                return;
            }
            let _ = writeln!(out, "{indent}{key}:");
            for (k, v) in map {
                render_value(out, k, v, depth + 1);
            }
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            let _ = writeln!(out, "{indent}{key}: {}", items.join(", "));
        }
        other => {
            let _ = writeln!(out, "{indent}{key}: {}", scalar(other));
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".to_string(),
        Value::Bool(false) => "no".to_string(),
        Value::Object(map) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{} {}", k.replace('_', " "), scalar(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use lab::lot::Finding;
    use lab::tool::ToolInfo;

    use super::*;

    #[test]
    fn render_shows_problem_and_nested_details() {
        let env = Environment {
            schema: "x".into(),
            tool: ToolInfo::new(Some("abc1234")),
            requested_device: "cuda:0".into(),
            backend: "cuda".into(),
            reference_device: false,
            usable: false,
            problem: Some("no NVIDIA driver was found".into()),
            details: serde_json::json!({"gpu": {"name": "H200", "sm_count": 132, "nvml": null}, "ecc": true}),
        };
        let text = render(&env, None);
        assert!(text.contains("(abc1234)"));
        if let Some(line) = NOT_YET_ON_A_GPU {
            assert!(text.contains(&format!("(abc1234)\n{line}\ndevice: cuda:0")));
        }
        assert!(text.contains("usable: no\nproblem: no NVIDIA driver was found\n"));
        assert!(text.contains("gpu:\n  name: H200\n  sm count: 132\n"));
        assert!(text.contains("ecc: yes"));
        assert!(!text.contains("nvml"));
    }

    #[test]
    fn findings_are_listed_with_their_level_and_code() {
        let f = [
            Finding::warning(
                "gpu_missing",
                None,
                "the package promises 2".into(),
                Value::Null,
            ),
            Finding::note("persistence_off", Some("cuda:0"), "off".into(), Value::Null),
        ];
        assert_eq!(
            render_findings(&f, "embedded"),
            "lot checks: 1 warning(s), 1 note(s) (datasheet table: embedded)\n  WARNING gpu_missing: the package promises 2\n  note persistence_off: off\n"
        );
    }
}
