//! `iteragpu probe`: copy bandwidth and dense matrix throughput of every GPU of the lot against
//! the datasheet, bounded in time, written to one new JSON document.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use lab::lot::{Expectation, GpuFacts, Severity, check_lot};
use lab::node::NodeIdentity;
use lab::probe::timing::SamplePlan;
use lab::probe::{
    COPY_THRESHOLD_PERCENT, CopyFigure, DEFAULT_SECONDS_PER_GPU, DeviceProbe, FigureStatus,
    GEMM_THRESHOLD_PERCENT, LOT_OUTLIER_PERCENT, MAX_SAMPLES, MIN_SAMPLES, PROBE_SCHEMA,
    ProbeConfiguration, ProbeDocument, judge,
};
use lab_cuda::lot::{Selection, parse_selection};
use lab_cuda::probe::{ProbeOptions, ProbeProgress};
use lab_io::bytes::binary as bytes;
use lab_io::files;
use ledger::Package;
use rent::datasheet::Datasheet;

use crate::exit::usage;
use crate::lot::{expectation, node_expectation, parse_package, render_findings};
use crate::output::{self, Progress};

/// Options of `probe`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu probe --device all --output probe.json
  iteragpu probe --device all --package b200:7:1 --seconds 30 --output lot.json
  iteragpu probe --device cuda:0,1 --concurrent --output pair.json
  iteragpu probe --device cpu --seconds 2 --output host.json

Per GPU: copies host->device and device->host from pinned and from pageable memory, a copy within
the GPU, and square products in float32 (strict), TF32, float16, bfloat16 and FP8 (compute
capability 8.9 and newer) through cuBLASLt; with two GPUs or more, a copy between every pair.
Each figure is the median of repeated samples timed with CUDA events, compared with the model's
datasheet (data/gpu-datasheet.csv: dense peaks, memory bandwidth, PCIe and NVLink): pinned copies
against one direction of the PCIe link, the device copy's traffic against the memory bandwidth,
peer copies against NVLink (or PCIe), products against the dense peak. A copy under 70% or a
product under 50% of its datasheet figure is a warning, as is a GPU more than 10% below the rest
of its lot. Pageable copies are reported, not judged. --device cpu times host memcpy only: a
labelled host figure that lets the document and the report be checked without a GPU.
The run takes at most --seconds per GPU (one GPU after the other; with --concurrent all at
once), plus the set-up, which the budget does not include: loading the driver, and writing every
page of the two --copy-bytes buffers before any copy is timed (--copy-bytes 4GiB took 23 s on a
2-core virtual machine, whatever --seconds said); with two GPUs or more
a fifth of it goes to the peer copies. The two host buffers (2 x --copy-bytes) must fit in the
host's available memory, within any cgroup limit, or the probe is refused before it starts. The
output file must not exist; it is written whole or not at all. Exit codes: 0 every figure
measured (or skipped for a stated reason) and at least one measured per device, 1 a figure
failed or a device measured nothing (the file is still written), or copy buffers that would not
fit in host memory (nothing is written), 2 bad options, an existing --output, or no usable GPU
(nothing is written).")]
pub struct Args {
    /// `all` (every GPU), a list such as `cuda:0,1`, one `cuda:N`, or `cpu` (host memcpy only).
    #[arg(long, default_value = "all")]
    pub device: String,
    /// Seconds each GPU may take (at least 0.1, at most 3600).
    #[arg(long, default_value_t = DEFAULT_SECONDS_PER_GPU, value_parser = parse_seconds, value_name = "S")]
    pub seconds: f64,
    /// Probe every GPU at the same time instead of one after the other.
    #[arg(long)]
    pub concurrent: bool,
    /// Bytes of one timed copy: 268435456, 64MiB, 1GiB.
    #[arg(long, default_value = "256MiB", value_parser = parse_copy_bytes, value_name = "BYTES")]
    pub copy_bytes: u64,
    /// The square products' size N (N x N times N x N; a multiple of 16) [default: chosen per
    /// data type so one product lasts at least 2 ms at the datasheet's peak, 4096 to 16384,
    /// within half the free memory].
    #[arg(long, value_parser = parse_gemm_size, value_name = "N")]
    pub gemm_size: Option<u64>,
    /// Timed samples per figure at most (at least 3 are taken, time allowing).
    #[arg(long, default_value_t = MAX_SAMPLES, value_parser = parse_max_samples, value_name = "N")]
    pub max_samples: usize,
    /// The rented package, GPU:DAYS:LOTS: the lot checks expect its GPU count and model.
    #[arg(long, value_parser = parse_package, value_name = "GPU:DAYS:LOTS")]
    pub package: Option<Package>,
    /// A tariff CSV to read the package from instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,
    /// A datasheet table instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub datasheet: Option<PathBuf>,
    /// Name this node in the document (under Slurm or SkyPilot the scheduler's node name, rank,
    /// count and job id are recorded anyway; outside one, no node is recorded without it).
    #[arg(long, value_name = "NAME", value_parser = lab::node::parse_node_name)]
    pub node: Option<String>,
    /// The JSON document to create; it must not exist yet.
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// Print the document on stdout as JSON instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// A line per device and figure on stderr even when stderr is not a terminal (on a terminal
    /// they always show).
    #[arg(long)]
    pub progress: bool,
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.1..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{text}` is not a time budget: expected seconds from 0.1 to 3600, such as 60"
        )),
    }
}

fn parse_copy_bytes(text: &str) -> Result<u64, String> {
    let bytes = sweep::parse_bytes(text).map_err(|e| e.to_string())?;
    if bytes < 4096 {
        return Err(format!(
            "`{text}` is too small to time a copy: expected at least 4096 bytes, such as 256MiB"
        ));
    }
    Ok(bytes)
}

fn parse_gemm_size(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if (16..=65536).contains(&n) && n % 16 == 0 => Ok(n),
        _ => Err(format!(
            "`{text}` is not a product size: expected a multiple of 16 from 16 to 65536, such as 8192"
        )),
    }
}

fn parse_max_samples(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (MIN_SAMPLES..=10_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{text}` is not a sample count: expected a whole number from {MIN_SAMPLES} to 10000"
        )),
    }
}

/// One line per finished figure on stderr, when a person is watching ([`Progress`]).
struct Lines {
    enabled: bool,
}

impl Lines {
    /// A line of its own (a device starting, the set-up it does first).
    fn say(&self, text: &str) {
        if self.enabled {
            output::eprint_line(text);
        }
    }
}

impl ProbeProgress for Lines {
    fn figure(&self, device: &str, figure: &str, summary: &str) {
        if self.enabled {
            output::eprint_line(&format!("  {device:<8} {figure:<14} {summary}"));
        }
    }
}

/// Runs `probe`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Refused before anything else: an existing file is never touched.
    files::check_new(&args.output).map_err(|e| usage(e.to_string()))?;
    // The two host buffers, against the host's memory (and any cgroup limit), as `measure`'s
    // pre-flight does: refused with a sentence, never allocated to be killed for.
    lab::probe::check_copy_buffers(args.copy_bytes, lab::host::available_host_bytes())
        .map_err(|e| anyhow::anyhow!("would not fit: {e}; nothing was written"))?;
    let datasheet = Datasheet::load(args.datasheet.as_deref())?;
    let started = Instant::now();
    let started_utc = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let configuration = ProbeConfiguration {
        seconds_per_gpu: args.seconds,
        concurrent: args.concurrent,
        copy_bytes: args.copy_bytes,
        gemm_size: args.gemm_size,
        min_samples: MIN_SAMPLES,
        max_samples: args.max_samples,
        copy_threshold_percent: COPY_THRESHOLD_PERCENT,
        gemm_threshold_percent: GEMM_THRESHOLD_PERCENT,
        lot_outlier_percent: LOT_OUTLIER_PERCENT,
        timing: String::new(),
    };
    let plan = SamplePlan::new(MIN_SAMPLES, args.max_samples);
    let tool = crate::tool_info();
    let progress = Lines {
        enabled: Progress::detect(args.progress).shown(),
    };
    let node = NodeIdentity::detect(args.node.as_deref());
    let mut doc = if args.device == "cpu" {
        if args.concurrent || args.gemm_size.is_some() || args.package.is_some() {
            return Err(usage(
                "--concurrent, --gemm-size and --package apply to GPUs; --device cpu times host \
                 memcpy only"
                    .to_string(),
            ));
        }
        progress.say(&format!(
            "  cpu      host memcpy    writing two {} buffers, then at most {} s of timed copies",
            bytes(args.copy_bytes),
            args.seconds
        ));
        let device = lab_cpu::probe::probe(
            lab_cpu::environment(tool.clone()),
            args.copy_bytes,
            args.seconds,
            &plan,
        );
        for c in &device.copies {
            let summary = match (&c.seconds, c.gb_per_s) {
                (Some(s), Some(rate)) => format!(
                    "{rate:.1} GB/s (median of {} samples, {:.1} s)",
                    s.samples, device.elapsed_seconds
                ),
                _ => status_text(c.status, c.note.as_deref()),
            };
            progress.figure("cpu", "host memcpy", &summary);
        }
        let mut doc = ProbeDocument {
            schema: PROBE_SCHEMA.to_string(),
            tool,
            started_utc,
            requested_device: "cpu".to_string(),
            reference_device: true,
            configuration: ProbeConfiguration {
                timing: "host monotonic clock around each memcpy; each figure is the median of its samples"
                    .to_string(),
                ..configuration
            },
            datasheet: datasheet.name().to_string(),
            package: None,
            node: node.clone(),
            visible_devices: None,
            devices: vec![device],
            peer_access: Vec::new(),
            peers: Vec::new(),
            lot_outliers: Vec::new(),
            findings: Vec::new(),
            warnings: 0,
            elapsed_seconds: 0.0,
            complete: false,
            error: None,
        };
        judge::judge(&mut doc, &datasheet, Vec::new());
        doc
    } else {
        let ordinals = match (
            parse_selection(&args.device),
            lab_cuda::parse_ordinal(&args.device),
        ) {
            (Some(Selection::All), _) => Vec::new(),
            (Some(Selection::Ordinals(o)), _) => o,
            (None, Some(n)) => vec![n],
            (None, None) => {
                return Err(usage(format!(
                    "--device {:?} is not a device: use all, cuda:N, a list such as cuda:0,1, or cpu",
                    args.device
                )));
            }
        };
        let expectation = node_expectation(
            expectation(args.package.as_ref(), args.catalogue.as_deref())?,
            node.as_ref(),
        )?;
        let options = ProbeOptions {
            seconds_per_gpu: args.seconds,
            concurrent: args.concurrent,
            copy_bytes: args.copy_bytes,
            gemm_size: args.gemm_size,
            plan,
        };
        progress.say(&format!(
            "probe {}: loading the driver, then at most {} s per GPU{}; a line per figure",
            args.device,
            args.seconds,
            if args.concurrent { ", all at once" } else { "" }
        ));
        let gpu = lab_cuda::probe::probe_gpus(&ordinals, &tool, &datasheet, &options, &progress)
            .map_err(|e| {
                crate::exit::gpu_setup(&args.device, &format!("the probe on {}", args.device), e)
            })?;
        let facts: Vec<GpuFacts> = gpu.devices.iter().filter_map(|d| d.facts.clone()).collect();
        let lot_findings = check_lot(
            &facts,
            gpu.visible,
            &gpu.peer_access,
            expectation.as_ref(),
            &datasheet,
        );
        let mut doc = gpu_document(
            &args,
            tool,
            started_utc,
            configuration,
            &datasheet,
            expectation,
            gpu,
        );
        doc.node = node;
        judge::judge(&mut doc, &datasheet, lot_findings);
        doc
    };
    doc.elapsed_seconds = started.elapsed().as_secs_f64();
    let mut json = serde_json::to_vec_pretty(&doc)?;
    json.push(b'\n');
    let written = files::write_new(&args.output, &json)?;
    if let Some(warning) = written.warning(&args.output) {
        output::warn(&warning);
    }
    if args.json {
        output::print_json(&doc)?;
    } else {
        output::print_text(&render(&doc, &args.output))?;
    }
    if let Some(e) = &doc.error {
        output::eprint_line(&format!(
            "iteragpu: error: the probe is incomplete: {e} (what was measured is kept in {})",
            args.output.display()
        ));
    } else if !doc.complete {
        output::eprint_line(&format!(
            "iteragpu: error: the probe is incomplete: some figures failed (each says why in {}, what was measured is kept)",
            args.output.display()
        ));
    }
    Ok(if doc.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn gpu_document(
    args: &Args,
    tool: lab::tool::ToolInfo,
    started_utc: String,
    configuration: ProbeConfiguration,
    datasheet: &Datasheet,
    package: Option<Expectation>,
    gpu: lab_cuda::probe::GpuProbe,
) -> ProbeDocument {
    ProbeDocument {
        schema: PROBE_SCHEMA.to_string(),
        tool,
        started_utc,
        requested_device: args.device.clone(),
        reference_device: false,
        configuration: ProbeConfiguration {
            timing: "CUDA events on the probe's stream around each copy or product (host enqueue time outside); each figure is the median of its samples".to_string(),
            ..configuration
        },
        datasheet: datasheet.name().to_string(),
        package,
        node: None,
        visible_devices: Some(gpu.visible),
        devices: gpu.devices,
        peer_access: gpu.peer_access,
        peers: gpu.peers,
        lot_outliers: Vec::new(),
        findings: Vec::new(),
        warnings: 0,
        elapsed_seconds: 0.0,
        complete: false,
        error: None,
    }
}

fn ms(seconds: f64) -> String {
    format!("{:.3}", seconds * 1e3)
}

fn status_text(status: FigureStatus, note: Option<&str>) -> String {
    let word = match status {
        FigureStatus::Measured => "measured",
        FigureStatus::Skipped => "skipped",
        FigureStatus::Failed => "FAILED",
    };
    match note {
        Some(n) => format!("{word}: {n}"),
        None => word.to_string(),
    }
}

/// One figure's line: its measured rate against the datasheet, or why there is none. Copies
/// and products share it so that their columns cannot drift apart.
fn figure_line(
    out: &mut String,
    (label, size): (&str, String),
    measured: Option<(&lab::stats::Summary, f64)>,
    reference: Option<&lab::probe::Reference>,
    (status, note): (FigureStatus, Option<&str>),
) {
    match measured {
        Some((s, rate)) => {
            let reference = reference.map_or("-".to_string(), |r| {
                format!(
                    "{:.1}%{}",
                    r.percent,
                    if r.below_threshold { " LOW" } else { "" }
                )
            });
            let _ = writeln!(
                out,
                "  {:<24} {:>11} {:>10} {:>7.1}% {:>10.1} {:>9}",
                label,
                size,
                ms(s.median),
                s.relative_spread * 100.0,
                rate,
                reference
            );
        }
        None => {
            let _ = writeln!(out, "  {:<24} {}", label, status_text(status, note));
        }
    }
}

fn copy_line(out: &mut String, c: &CopyFigure) {
    figure_line(
        out,
        (c.kind.label(), bytes(c.bytes)),
        c.seconds.as_ref().zip(c.gb_per_s),
        c.reference.as_ref(),
        (c.status, c.note.as_deref()),
    );
}

fn device_block(out: &mut String, d: &DeviceProbe) {
    let name = d
        .facts
        .as_ref()
        .map(|f| f.name.clone())
        .or_else(|| {
            d.environment
                .details
                .get("cpu_model")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    let sheet = d
        .datasheet
        .as_ref()
        .map_or("no datasheet row".to_string(), |r| {
            format!("datasheet: {}", r.model)
        });
    let _ = writeln!(
        out,
        "{} ({name})  |  {sheet}  |  {:.1} s",
        d.device, d.elapsed_seconds
    );
    let _ = writeln!(
        out,
        "  {:<24} {:>11} {:>10} {:>8} {:>10} {:>9}",
        "copy", "bytes", "median ms", "spread", "GB/s", "datasheet"
    );
    for c in &d.copies {
        copy_line(out, c);
    }
    if !d.gemms.is_empty() {
        let _ = writeln!(
            out,
            "  {:<24} {:>11} {:>10} {:>8} {:>10} {:>9}",
            "product", "size", "median ms", "spread", "TFLOP/s", "datasheet"
        );
    }
    for g in &d.gemms {
        figure_line(
            out,
            (g.kind.name(), format!("{}^3", g.n)),
            g.seconds.as_ref().zip(g.tflops),
            g.reference.as_ref(),
            (g.status, g.note.as_deref()),
        );
    }
    if let Some(l) = d.pcie_after_copies {
        let _ = writeln!(
            out,
            "  PCIe link after the copies: Gen{} x{}",
            l.generation, l.width
        );
    }
    if let Some(e) = &d.error {
        let _ = writeln!(out, "  stopped: {e}");
    }
}

/// The human summary.
fn render(doc: &ProbeDocument, output: &Path) -> String {
    let mut out = String::new();
    if doc.reference_device {
        let _ = writeln!(
            out,
            "CPU REFERENCE DEVICE: host memcpy bandwidth only, not a GPU figure and not compared with any datasheet"
        );
    }
    let c = &doc.configuration;
    if let Some(n) = &doc.node {
        let _ = writeln!(out, "node: {}", n.describe());
    }
    let _ = writeln!(
        out,
        "probe {}  |  at most {} s per {}{}  |  copies of {}  |  median of {} to {} samples",
        doc.requested_device,
        c.seconds_per_gpu,
        if doc.reference_device {
            "device"
        } else {
            "GPU"
        },
        if c.concurrent { ", concurrently" } else { "" },
        bytes(c.copy_bytes),
        c.min_samples,
        c.max_samples
    );
    for d in &doc.devices {
        let _ = writeln!(out);
        device_block(&mut out, d);
    }
    if !doc.peers.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<24} {:>11} {:>10} {:>8} {:>10} {:>9}",
            "peer copy", "bytes", "median ms", "spread", "GB/s", "datasheet"
        );
        for p in &doc.peers {
            let mut line = String::new();
            copy_line(&mut line, p);
            let _ = write!(
                out,
                "{}",
                line.replacen("peer to peer", &format!("{} -> {}", p.from, p.to), 1)
            );
        }
    }
    if !doc.reference_device {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "thresholds: copies {}% of the datasheet figure, products {}% of the dense peak, lot outlier {}% below the others",
            c.copy_threshold_percent, c.gemm_threshold_percent, c.lot_outlier_percent
        );
        out.push_str(&render_findings(&doc.findings, &doc.datasheet));
    }
    let warnings = doc
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let _ = writeln!(
        out,
        "{}: {} ({:.1} s{})",
        if doc.complete {
            "complete"
        } else {
            "INCOMPLETE"
        },
        output.display(),
        doc.elapsed_seconds,
        if warnings > 0 {
            format!(", {warnings} warning(s)")
        } else {
            String::new()
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values_are_checked() {
        assert_eq!(parse_seconds("60"), Ok(60.0));
        assert!(parse_seconds("0").is_err() && parse_seconds("nan").is_err());
        assert!(parse_seconds("3601").unwrap_err().contains("0.1 to 3600"));
        assert_eq!(parse_copy_bytes("64MiB"), Ok(64 << 20));
        // The documented default is lab's.
        assert_eq!(
            parse_copy_bytes("256MiB"),
            Ok(lab::probe::DEFAULT_COPY_BYTES)
        );
        assert!(
            parse_copy_bytes("100")
                .unwrap_err()
                .contains("at least 4096")
        );
        assert_eq!(parse_gemm_size("8192"), Ok(8192));
        assert!(
            parse_gemm_size("100")
                .unwrap_err()
                .contains("multiple of 16")
        );
        assert!(parse_max_samples("2").is_err());
    }
}
