//! `iteragpu measure`: the bounded measurement of the synthetic model, written to a new file.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use anyhow::Context;
use lab::device::Device;
use lab::dtype::DType;
use lab::measure::config::{MeasureOptions, Plan};
use lab::measure::document::{MeasurementDocument, PhaseRow, Preflight};
use lab::measure::preflight::{self, PlanReport};
use lab::measure::runner::{self, Mode, Progress, RunInfo};
use lab::tool::ToolInfo;
use lab::workspaces::{MemoryPolicy, UnifiedWorkspace};
use lab_cpu::{CpuDevice, CpuOptions, HostMemoryPlan};
use lab_io::files;

use crate::exit::usage;
use crate::output;
use crate::run::{RunOptions, WOULD_NOT_FIT, default_timeout, parse_fraction, parse_max_memory};

/// Options of `measure`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu measure --device cuda:0 --batch 1 --context 16 --width 64 --dtype float32 \\
      --warmup 1 --repeats 2 --output small-run.json
  iteragpu measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype bfloat16 \\
      --warmup 3 --repeats 5 --output run.json
  iteragpu measure --device cpu --batch 1 --context 16 --width 64 --output cpu-reference.json
  iteragpu measure --device cpu --batch 2 --context 128 --width 1024 --threads 2 \\
      --max-memory 2GiB --output cpu-2-threads.json
  iteragpu measure --plan --device cuda --compute-capability 9.0 --batch 8 --context 4096 \\
      --width 8192 --dtype bfloat16

Raise one dimension at a time and watch the free memory. `allocated` is part of `reserved`:
never add them, and never subtract peaks to infer a cache. The counters mirror torch 2.11's
caching allocator, with the library workspaces torch allocates: the cuBLAS workspace on the first
product (32 MiB on compute capability 9.0, 8519680 bytes elsewhere), the 1 MiB cuBLASLt workspace
on the first Linear that takes the cuBLASLt path. Each Linear takes the path torch 2.11's addmm
takes: cublasLtMatmul with the bias epilogue, or, when batch x context or a width is 1, the bias
copied into the output and cublasGemmEx (no cuBLASLt workspace then). --plan prints them, phase
by phase, without opening any device. Exit codes: 0 complete run (or a plan), 1 the run
failed or its numerical check failed (the file is still written, with `complete: false`), 2 bad
options, an existing --output, or no usable GPU (nothing is written).")]
pub struct Args {
    /// `cuda:N` for an NVIDIA GPU, or `cpu` for the CPU reference device (never chosen for you).
    #[arg(long)]
    pub device: String,
    /// Batch size.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Positions per sequence: only the middle dimension of [batch, context, width] (no
    /// attention, no KV cache).
    #[arg(long, default_value_t = 16)]
    pub context: usize,
    /// Model width (input and output features).
    #[arg(long, default_value_t = 64)]
    pub width: usize,
    /// Hidden width of the first layer's output [default: 4 x width].
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Storage type, passes, seed and math mode (shared with `sweep`).
    #[command(flatten)]
    pub run: RunOptions,
    /// Refuse the run before any device work when the pre-flight estimate of its peak exceeds
    /// the device's free memory times this fraction (0 < F <= 1).
    #[arg(long, default_value_t = 1.0, value_parser = parse_fraction, value_name = "F")]
    pub max_memory_fraction: f64,
    /// Refuse the run when the pre-flight estimate exceeds this many bytes, whatever is free
    /// (a share of a GPU someone else uses too): 1073741824, 512MiB, 6GiB.
    #[arg(long, value_parser = parse_max_memory, value_name = "BYTES")]
    pub max_memory: Option<u64>,
    /// The JSON document to create; it must not exist yet.
    #[arg(long, short, required_unless_present = "plan", conflicts_with = "plan")]
    pub output: Option<PathBuf>,
    /// Open no device: print the run's allocation sequence and the counters every phase row
    /// would show (the pre-flight replay), for `--device cpu`, or `--device cuda` with
    /// `--compute-capability`.
    #[arg(long, conflicts_with_all = ["max_memory", "max_memory_fraction"])]
    pub plan: bool,
    /// With --plan --device cuda: the GPU's compute capability, MAJOR.MINOR (9.0 for an H100 or
    /// H200, 8.0 for an A100, 10.0 for a B200); it decides the default cuBLAS workspace.
    #[arg(long, value_parser = parse_compute_capability, value_name = "MAJOR.MINOR")]
    pub compute_capability: Option<(i32, i32)>,
    /// Name this node in the document (under Slurm or SkyPilot the scheduler's node name, rank,
    /// count and job id are recorded anyway; outside one, no node is recorded without it).
    #[arg(long, value_name = "NAME", value_parser = lab::node::parse_node_name)]
    pub node: Option<String>,
    /// Print the document (or the plan) on stdout as JSON instead of the summary table.
    #[arg(long)]
    pub json: bool,
}

/// `--compute-capability 9.0`.
pub fn parse_compute_capability(text: &str) -> Result<(i32, i32), String> {
    let bad = || {
        format!(
            "`{text}` is not a compute capability: expected MAJOR.MINOR, such as 9.0 (H100, H200), \
             8.0 (A100) or 10.0 (B200)"
        )
    };
    let (major, minor) = text.trim().split_once('.').ok_or_else(bad)?;
    let number = |s: &str| -> Result<i32, String> {
        if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    Ok((number(major)?, number(minor)?))
}

/// Runs `measure`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dtype: DType = args
        .run
        .dtype
        .parse()
        .map_err(|e| usage(format!("--dtype: {e}")))?;
    let plan = Plan::new(MeasureOptions {
        device: args.device.clone(),
        batch: args.batch,
        context: args.context,
        width: args.width,
        hidden: args.hidden,
        dtype,
        warmup: args.run.warmup,
        repeats: args.run.repeats,
        seed: args.run.seed,
        allow_tf32: args.run.allow_tf32,
    })
    .map_err(|e| usage(e.to_string()))?;
    if args.plan {
        return print_plan(&args, &plan);
    }
    if args.compute_capability.is_some() {
        return Err(usage(
            "--compute-capability only applies to --plan: a device reports its own".to_string(),
        ));
    }
    let Some(output) = args.output.as_deref() else {
        return Err(usage("--output FILE is required (or --plan)".to_string()));
    };
    // Refused before any device work: an existing file is never touched.
    files::check_new(output).map_err(|e| usage(e.to_string()))?;

    if args.run.engine == "torch" {
        return measure_torch(&args, &plan, output);
    }
    if args.run.python.is_some() {
        return Err(usage(
            "--python applies to --engine torch; the native engine runs no Python".to_string(),
        ));
    }
    if let Some(t) = args.run.timeout {
        return Err(usage(format!(
            "--timeout {}: measure bounds only --engine torch's Python; the native engine runs \
             in this process (Ctrl-C ends it; a sweep bounds each point's process)",
            humantime::format_duration(t)
        )));
    }
    let tool = crate::tool_info();
    let started_utc = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let init = Instant::now();
    if args.device == "cpu" {
        args.run.check_cpu()?;
        let doc = measure_cpu(&plan, &args, tool, started_utc, init)?;
        finish(&args, output, &doc)
    } else if let Some(ordinal) = lab_cuda::parse_ordinal(&args.device) {
        let options = args.run.cuda_options()?;
        let mut device = lab_cuda::CudaDevice::open(ordinal, tool.clone(), &options)
            .map_err(|e| crate::exit::gpu_setup(&args.device, &args.device, e))?;
        if args.run.threads.is_some() {
            eprintln!(
                "iteragpu: note: --threads applies to the CPU reference device only; ignored"
            );
        }
        let device_init_seconds = init.elapsed().as_secs_f64();
        let doc = measure_on(
            &mut device,
            &plan,
            &args,
            tool,
            started_utc,
            device_init_seconds,
            false,
        )?;
        // The document is on disk (and the summary printed) before the device, its context and
        // its libraries' handles are torn down: a teardown that fails or crashes cannot lose it.
        let code = finish(&args, output, &doc);
        drop(device);
        code
    } else {
        Err(usage(format!(
            "--device {:?} is not a device: use cuda:N (for example cuda:0) or cpu",
            args.device
        )))
    }
}

/// `measure --engine torch`: the machine's PyTorch runs the protocol (lab_torch's program); the
/// document it prints is read back, its configuration completed as the native engine's is, and
/// written here like any other. No GPU for torch, no torch, or no Python: exit 2, nothing
/// written, never a CPU fallback.
fn measure_torch(args: &Args, plan: &Plan, output: &Path) -> anyhow::Result<ExitCode> {
    let run = &args.run;
    if lab_cuda::parse_ordinal(&args.device).is_none() {
        return Err(usage(format!(
            "--device {:?}: the torch engine measures a GPU, cuda:N (on ROCm too, where torch \
             calls AMD GPUs cuda:N); the CPU reference device is the native engine's \
             (--device cpu without --engine torch)",
            args.device
        )));
    }
    if run.kernel_form != "auto" || run.threads.is_some() {
        return Err(usage(
            "--kernel-form and --threads apply to the native engine; torch loads its own kernels \
             and threads"
                .to_string(),
        ));
    }
    let mut env = Vec::new();
    let workspaces = run.workspace_options();
    if let Some(b) = workspaces.cublas_bytes {
        if b % 1024 != 0 {
            return Err(usage(format!(
                "--cublas-workspace {b}: torch's CUBLAS_WORKSPACE_CONFIG counts KiB, so the torch \
                 engine needs a multiple of 1024 bytes"
            )));
        }
        env.push((
            "CUBLAS_WORKSPACE_CONFIG".to_string(),
            format!(":{}:1", b / 1024),
        ));
    }
    if let Some(b) = workspaces.cublaslt_bytes {
        if b % 1024 != 0 {
            return Err(usage(format!(
                "--cublaslt-workspace {b}: torch's CUBLASLT_WORKSPACE_SIZE counts KiB, so the \
                 torch engine needs a multiple of 1024 bytes"
            )));
        }
        env.push((
            "CUBLASLT_WORKSPACE_SIZE".to_string(),
            (b / 1024).to_string(),
        ));
    }
    match run.cublaslt_unified_workspace {
        Some(UnifiedWorkspace::Unified) => {
            env.push((
                "TORCH_CUBLASLT_UNIFIED_WORKSPACE".to_string(),
                "1".to_string(),
            ));
        }
        Some(UnifiedWorkspace::Separate) => {
            env.push((
                "TORCH_CUBLASLT_UNIFIED_WORKSPACE".to_string(),
                "0".to_string(),
            ));
        }
        Some(UnifiedWorkspace::Unset) | None => {}
    }
    let o = &plan.options;
    // The compute capability is torch's to find; the estimate takes the largest default cuBLAS
    // workspace (compute capability 9.0's 32 MiB), so it never says a run fits that does not.
    let estimate =
        preflight::estimate_peak_reserved(plan, &MemoryPolicy::for_gpu(&workspaces, 9, 0));
    let tool = crate::tool_info();
    let mut program = vec![
        "--device".to_string(),
        args.device.clone(),
        "--batch".to_string(),
        o.batch.to_string(),
        "--context".to_string(),
        o.context.to_string(),
        "--width".to_string(),
        o.width.to_string(),
        "--dtype".to_string(),
        o.dtype.name().to_string(),
        "--warmup".to_string(),
        o.warmup.to_string(),
        "--repeats".to_string(),
        o.repeats.to_string(),
        "--seed".to_string(),
        o.seed.to_string(),
        "--estimate".to_string(),
        estimate.to_string(),
        "--max-memory-fraction".to_string(),
        args.max_memory_fraction.to_string(),
        "--tool-version".to_string(),
        tool.version.clone(),
    ];
    if let Some(h) = o.hidden {
        program.extend(["--hidden".to_string(), h.to_string()]);
    }
    if o.allow_tf32 {
        program.push("--allow-tf32".to_string());
    }
    if let Some(m) = args.max_memory {
        program.extend(["--max-memory".to_string(), m.to_string()]);
    }
    if let Some(c) = &tool.commit {
        program.extend(["--tool-commit".to_string(), c.clone()]);
    }
    // Ctrl-C, SIGTERM and SIGHUP end the Python and everything it started (lab_child), and the
    // run then fails with a sentence; a sweep's Ctrl-C reaches only the sweep.
    let _ = ctrlc::set_handler(lab_child::stop_all);
    let path = std::env::var("PATH").ok();
    let python = lab_torch::find_python(run.python.as_deref(), path.as_deref())
        .map_err(|e| usage(e.to_string()))?;
    let bounds = lab_child::Bounds::within(run.timeout.unwrap_or_else(|| default_timeout(plan)));
    let finished = lab_torch::run(
        &python,
        &program,
        &env,
        std::io::stderr().is_terminal(),
        bounds,
    )
    .map_err(|e| match e {
        lab_torch::TorchError::WouldNotFit(why) => anyhow::anyhow!("{WOULD_NOT_FIT}{why}"),
        lab_torch::TorchError::Refused(why) => usage(why),
        lab_torch::TorchError::NoPython { .. }
        | lab_torch::TorchError::Spawn { .. }
        | lab_torch::TorchError::NoTorch { .. } => usage(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    for note in &finished.notes {
        output::warn(note);
    }
    let mut doc = finished.document;
    if doc.synthetic_model != plan.synthetic_model() {
        anyhow::bail!(
            "the torch engine measured another model than the one asked for (its synthetic_model \
             section differs); nothing was written"
        );
    }
    // The paths each Linear takes, by torch 2.11's predicate, as in every native document.
    doc.configuration = plan.configuration(
        &doc.configuration.math_mode,
        doc.configuration.memory_policy.clone(),
    );
    finish(args, output, &doc)
}

/// `measure --plan`: the allocation sequence and every phase's counters, no device opened.
fn print_plan(args: &Args, plan: &Plan) -> anyhow::Result<ExitCode> {
    let o = &plan.options;
    if args.run.engine == "torch" {
        return Err(usage(
            "--plan replays the native engine's allocator model; torch's own is observed when it \
             runs (measure --engine torch without --plan)"
                .to_string(),
        ));
    }
    let report = if args.device == "cpu" {
        args.run.check_cpu()?;
        if args.compute_capability.is_some() {
            return Err(usage(
                "--compute-capability applies to --device cuda; the CPU reference device has no \
                 library workspace"
                    .to_string(),
            ));
        }
        let device = CpuDevice::new(crate::tool_info());
        PlanReport::new(
            plan,
            "cpu",
            None,
            &device.math_mode(o.dtype, o.allow_tf32),
            device.memory_policy(),
        )
    } else if lab_cuda::parse_ordinal(&args.device).is_some() {
        args.run.cuda_options()?;
        let Some((major, minor)) = args.compute_capability else {
            return Err(usage(format!(
                "--plan --device {} needs --compute-capability MAJOR.MINOR (9.0 for an H100 or \
                 H200): the cuBLAS workspace, and so the counters, depend on it",
                args.device
            )));
        };
        PlanReport::new(
            plan,
            "cuda",
            Some((major, minor)),
            &lab::device::gpu_math_mode(o.dtype, o.allow_tf32),
            MemoryPolicy::for_gpu(&args.run.workspace_options(), major, minor),
        )
    } else {
        return Err(usage(format!(
            "--device {:?} is not a device kind to plan for: use cuda (with --compute-capability) \
             or cpu",
            args.device
        )));
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&crate::summary::plan(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The CPU reference device: every byte the process will hold is planned (the tensors, the
/// host copy of the parameters, widened parameters, product buffers, GEMM packing, threads) and
/// compared with the machine's available memory and `--max-memory` before anything runs;
/// `--max-memory` then also bounds the allocator at run time. The plan and the measured peak
/// resident memory go into the document's environment (`details.host_memory`).
fn measure_cpu(
    plan: &Plan,
    args: &Args,
    tool: ToolInfo,
    started_utc: String,
    init: Instant,
) -> anyhow::Result<MeasurementDocument> {
    let options = CpuOptions {
        threads: args.run.threads.map(usize::from),
        segment_limit: None,
    };
    let mut device = CpuDevice::open(tool.clone(), options)
        .context("could not set up the CPU reference device")?;
    let device_init_seconds = init.elapsed().as_secs_f64();
    let segments = preflight::estimate_peak_reserved(plan, &device.memory_policy());
    let resident = lab::host::resident_bytes().unwrap_or(0);
    let host = HostMemoryPlan::new(plan, segments, device.threads(), resident);
    let available = device
        .available_bytes()
        .context("could not read the host's available memory for the pre-flight check")?;
    host.check(available, args.max_memory_fraction, args.max_memory)
        .map_err(|e| anyhow::anyhow!("{WOULD_NOT_FIT}{e}"))?;
    if let Some(cap) = args.max_memory {
        device.limit_segments(Some(cap.saturating_sub(host.outside_segments_bytes())));
    }
    let mut doc = measure_on(
        &mut device,
        plan,
        args,
        tool,
        started_utc,
        device_init_seconds,
        true,
    )?;
    if let Some(details) = doc.environment.details.as_object_mut() {
        let mut memory = serde_json::to_value(host)?;
        memory["peak_resident_bytes"] = serde_json::json!(lab::host::peak_resident_bytes());
        details.insert("host_memory".to_string(), memory);
    }
    Ok(doc)
}

/// Pre-flight, run, and nothing else: the device is already set up. `checked` says the caller
/// already compared its own, fuller plan with the memory available.
fn measure_on<D: Device>(
    device: &mut D,
    plan: &Plan,
    args: &Args,
    tool: ToolInfo,
    started_utc: String,
    device_init_seconds: f64,
    checked: bool,
) -> anyhow::Result<MeasurementDocument> {
    let needed = preflight::estimate_peak_reserved(plan, &device.memory_policy());
    let available = device
        .available_bytes()
        .context("could not read the device's free memory for the pre-flight check")?;
    // Refused with a sentence `sweep` recognises (see WOULD_NOT_FIT); nothing is written.
    let refuse = |e: preflight::WouldNotFit| anyhow::anyhow!("{WOULD_NOT_FIT}{e}");
    if !checked {
        preflight::check_fits(needed, available, args.max_memory_fraction).map_err(refuse)?;
    }
    if let Some(cap) = args.max_memory.filter(|_| !checked) {
        preflight::check_fits(needed, Some(cap), 1.0).map_err(|mut e| {
            e.fraction = format!(" under --max-memory {cap}");
            refuse(e)
        })?;
    }
    let info = RunInfo {
        tool,
        started_utc,
        device_init_seconds,
        preflight: Preflight {
            estimated_peak_reserved_bytes: needed,
            device_free_bytes: available,
        },
    };
    let mut progress = PhaseLines {
        enabled: std::io::stderr().is_terminal(),
    };
    Ok(runner::run(
        device,
        plan,
        info,
        Mode::Measure,
        &mut progress,
    ))
}

/// Writes the document, prints the summary, and turns completeness into the exit code.
fn finish(args: &Args, output: &Path, doc: &MeasurementDocument) -> anyhow::Result<ExitCode> {
    let doc = &MeasurementDocument {
        node: lab::node::NodeIdentity::detect(args.node.as_deref()),
        ..doc.clone()
    };
    let mut json = serde_json::to_vec_pretty(doc)?;
    json.push(b'\n');
    let written = files::write_new(output, &json)?;
    if let Some(warning) = written.warning(output) {
        output::warn(&warning);
    }
    if args.json {
        output::print_json(doc)?;
    } else {
        output::print_text(&crate::summary::measurement(doc, output))?;
    }
    if let Some(err) = &doc.error {
        // One line on stderr, or the JSON error object under --json; the exit code follows.
        let _ = crate::exit::fail(
            &format!(
                "the run is incomplete: {} ({} kept in {})",
                err.message,
                plural(doc.phases.len(), "finished phase row"),
                output.display()
            ),
            1,
        );
    }
    // Everything said before any teardown runs.
    let _ = std::io::stdout().flush();
    Ok(if doc.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// One line per finished phase on stderr, when a person is watching.
struct PhaseLines {
    enabled: bool,
}

impl Progress for PhaseLines {
    fn phase_done(&mut self, row: &PhaseRow) {
        if self.enabled {
            eprintln!(
                "  {:<13} #{:<3} {:>10.3} ms",
                row.phase.name(),
                row.index,
                row.wall_seconds * 1e3
            );
        }
    }
}
