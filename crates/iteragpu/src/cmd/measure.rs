//! `iteragpu measure`: the bounded measurement of the synthetic model, written to a new file.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use anyhow::Context;
use lab::cpu::CpuDevice;
use lab::device::Device;
use lab::dtype::DType;
use lab::files;
use lab::measure::config::{MeasureOptions, Plan};
use lab::measure::document::{MeasurementDocument, PhaseRow, Preflight};
use lab::measure::preflight;
use lab::measure::runner::{self, Mode, Progress, RunInfo};
use lab::tool::ToolInfo;

use crate::exit::usage;
use crate::output;

/// Options of `measure`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu measure --device cuda:0 --batch 1 --context 16 --width 64 --dtype float32 \\
      --warmup 1 --repeats 2 --output small-run.json
  iteragpu measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype bfloat16 \\
      --warmup 3 --repeats 5 --output run.json
  iteragpu measure --device cpu --batch 1 --context 16 --width 64 --output cpu-reference.json

Raise one dimension at a time and watch the free memory. `allocated` is part of `reserved`:
never add them, and never subtract peaks to infer a cache. Exit codes: 0 complete run, 1 the run
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
    #[arg(long)]
    pub output: PathBuf,
    /// Print the document on stdout instead of the summary table.
    #[arg(long)]
    pub json: bool,
}

/// The options `measure` and `sweep` share besides the shape: storage type, passes, seed, math.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    /// Storage type of weights, inputs and activations (products accumulate in float32).
    #[arg(long, default_value = "float32", value_parser = ["float32", "float16", "bfloat16"])]
    pub dtype: String,
    /// Warm-up passes, timed together as one `warmup` row.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Timed warm passes, one `warm_forward` row each.
    #[arg(long, default_value_t = 2)]
    pub repeats: usize,
    /// Seed of the weights and inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Let float32 products use TF32 on GPUs that have it (recorded; no effect on the CPU).
    #[arg(long)]
    pub allow_tf32: bool,
}

impl RunOptions {
    /// The options as `measure` arguments, for a child process.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--dtype".to_string(),
            self.dtype.clone(),
            "--warmup".to_string(),
            self.warmup.to_string(),
            "--repeats".to_string(),
            self.repeats.to_string(),
            "--seed".to_string(),
            self.seed.to_string(),
        ];
        if self.allow_tf32 {
            a.push("--allow-tf32".to_string());
        }
        a
    }
}

/// Starts the stderr sentence of a pre-flight refusal, so that `sweep` can tell "would not fit"
/// from any other failure of its child process (the same binary: the two always agree).
pub const WOULD_NOT_FIT: &str = "would not fit: ";

/// `--max-memory-fraction`: a finite number in (0, 1].
pub fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "`{text}` is not a fraction of the free memory: expected a number above 0 and at \
             most 1, such as 0.9"
        )),
    }
}

/// `--max-memory`: a byte count with an optional binary suffix.
pub fn parse_max_memory(text: &str) -> Result<u64, String> {
    sweep::parse_bytes(text).map_err(|e| e.to_string())
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
    // Refused before any device work: an existing file is never touched.
    files::check_new(&args.output).map_err(|e| usage(e.to_string()))?;

    let tool = crate::cmd::environment::tool_info();
    let started_utc = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let init = Instant::now();
    let doc = if args.device == "cpu" {
        let mut device = CpuDevice::new(tool.clone());
        let device_init_seconds = init.elapsed().as_secs_f64();
        measure_on(
            &mut device,
            &plan,
            &args,
            tool,
            started_utc,
            device_init_seconds,
        )?
    } else if let Some(ordinal) = lab_cuda::parse_ordinal(&args.device) {
        let mut device = match lab_cuda::CudaDevice::open(ordinal, tool.clone()) {
            Ok(device) => device,
            // No driver, the toolkit's stub, no device, a wrong ordinal, no cuBLAS: exit 2 and
            // nothing written, never a fallback to the CPU.
            Err(e) if e.is_unavailable() => {
                return Err(usage(format!(
                    "--device {}: no usable GPU: {e}; nothing was written",
                    args.device
                )));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "could not set up {}; nothing was written",
                    args.device
                )));
            }
        };
        let device_init_seconds = init.elapsed().as_secs_f64();
        measure_on(
            &mut device,
            &plan,
            &args,
            tool,
            started_utc,
            device_init_seconds,
        )?
    } else {
        return Err(usage(format!(
            "--device {:?} is not a device: use cuda:N (for example cuda:0) or cpu",
            args.device
        )));
    };
    finish(&args, &doc)
}

/// Pre-flight, run, and nothing else: the device is already set up.
fn measure_on<D: Device>(
    device: &mut D,
    plan: &Plan,
    args: &Args,
    tool: ToolInfo,
    started_utc: String,
    device_init_seconds: f64,
) -> anyhow::Result<MeasurementDocument> {
    let needed = preflight::estimate_peak_reserved(plan, device.workspace_bytes());
    let available = device
        .available_bytes()
        .context("could not read the device's free memory for the pre-flight check")?;
    // Refused with a sentence `sweep` recognises (see WOULD_NOT_FIT); nothing is written.
    let refuse = |e: preflight::WouldNotFit| anyhow::anyhow!("{WOULD_NOT_FIT}{e}");
    preflight::check_fits(needed, available, args.max_memory_fraction).map_err(refuse)?;
    if let Some(cap) = args.max_memory {
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
fn finish(args: &Args, doc: &MeasurementDocument) -> anyhow::Result<ExitCode> {
    let mut json = serde_json::to_vec_pretty(doc)?;
    json.push(b'\n');
    files::write_new(&args.output, &json)?;
    if args.json {
        output::print_json(doc)?;
    } else {
        output::print_text(&crate::summary::measurement(doc, &args.output))?;
    }
    if let Some(err) = &doc.error {
        return Ok(crate::exit::fail(
            &format!(
                "the run is incomplete: {} ({} kept in {})",
                err.message,
                plural(doc.phases.len(), "finished phase row"),
                args.output.display()
            ),
            1,
        ));
    }
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
