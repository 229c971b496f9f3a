//! What `measure` and `sweep` share of a run: the options beside the shape (`RunOptions`, which
//! `sweep` hands to each point's `measure` process), the deadline a run gets without
//! `--timeout`, the memory bounds' parsers, and the sentence that tells "would not fit" from any
//! other failure. A sweep's point is a `measure` child process, so the two commands must agree
//! on all of these; they live here, outside `cmd/`, so that neither command imports the other.

use std::path::PathBuf;
use std::time::Duration;

use lab::measure::config::Plan;
use lab::workspaces::{UnifiedWorkspace, WorkspaceOptions, parse_cublas_workspace_config};
use lab_cuda::{CudaOptions, KernelChoice};

use crate::exit::usage;

/// The options `measure` and `sweep` share besides the shape: storage type, passes, seed, math.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    /// Storage type of weights, inputs and activations (products accumulate in float32).
    #[arg(long, default_value = "float32", value_parser = ["float32", "float16", "bfloat16"])]
    pub dtype: String,
    /// Warm-up passes, timed together as one `warmup` row (0 to 10000).
    #[arg(long, short = 'w', default_value_t = 1)]
    pub warmup: usize,
    /// Timed warm passes, one `warm_forward` row each (1 to 10000).
    #[arg(long, short = 'r', default_value_t = 2)]
    pub repeats: usize,
    /// Seed of the weights and inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Let float32 products use TF32 on GPUs that have it (recorded; no effect on the CPU).
    #[arg(long)]
    pub allow_tf32: bool,
    /// CPU reference device only: threads for the products and element-wise work (1 to 1024)
    /// [default: the physical cores]. Recorded in the document's environment.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// GPU: the cuBLAS workspace, as PyTorch's CUBLAS_WORKSPACE_CONFIG (`:4096:8`) or in bytes
    /// (`32MiB`, `0`) [default: torch 2.11's: 32 MiB on compute capability 9.0, 8519680 bytes
    /// elsewhere].
    #[arg(long, value_parser = parse_cublas_workspace, value_name = "BYTES|:KIB:COUNT")]
    pub cublas_workspace: Option<u64>,
    /// GPU: the cuBLASLt workspace, as PyTorch's CUBLASLT_WORKSPACE_SIZE but in bytes (`1MiB`,
    /// `0`) [default: torch 2.11's 1 MiB].
    #[arg(long, value_parser = parse_workspace_bytes, value_name = "BYTES")]
    pub cublaslt_workspace: Option<u64>,
    /// GPU: PyTorch's TORCH_CUBLASLT_UNIFIED_WORKSPACE, in its three states. Left out (unset,
    /// torch 2.11's default): a separate cuBLASLt workspace, its size capped at the cuBLAS
    /// workspace's. `--cublaslt-unified-workspace` (or `=1`): cuBLASLt uses the cuBLAS workspace
    /// (capped, nothing more allocated). `=0`: a separate cuBLASLt workspace, not capped.
    #[arg(
        long,
        value_name = "1|0",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1",
        value_parser = parse_unified_workspace
    )]
    pub cublaslt_unified_workspace: Option<UnifiedWorkspace>,
    /// Who runs the protocol: `native` (iteragpu's own CUDA engine, or the CPU reference device)
    /// or `torch` (the machine's PyTorch, on CUDA or ROCm: its own counters, clocks and BLAS, with
    /// the same phases, check and document; for AMD GPUs and for comparing with torch).
    #[arg(long, default_value = "native", value_parser = ["native", "torch"], value_name = "ENGINE")]
    pub engine: String,
    /// With --engine torch: the Python that has PyTorch [default: the first python3 on the PATH
    /// with a torch package].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// GPU: how the kernels reach the device: `auto` (the cubin for the GPU, else the PTX),
    /// `cubin` (never the JIT), `ptx` (always the driver's JIT, to check that path).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cubin", "ptx"], value_name = "FORM")]
    pub kernel_form: String,
    /// How long a run in a process of its own may take: `measure --engine torch`'s Python, and
    /// each point of a sweep. Past it, the process and every process it started are ended
    /// (SIGTERM, 2 s, then SIGKILL; as on Ctrl-C and when iteragpu itself dies) and the run
    /// fails, exit 1: 90s, 10m, 1h30m [default: 5 minutes to start, plus 1 second per 10^10
    /// floating-point operations of the run's passes (warm-up, repeats, one cold and one check,
    /// each 4 x batch x context x width x hidden), 10^8 per second on --device cpu; a sweep's
    /// point has 1 minute more than its Python].
    #[arg(long, value_parser = parse_timeout, value_name = "DURATION")]
    pub timeout: Option<Duration>,
}

/// The time a run may take before the process running it is ended, when `--timeout` is not
/// given: [`STARTUP_ALLOWANCE`] for Python, torch, the driver and the first BLAS handle, plus
/// the run's floating-point work at a rate no device that can run it falls below
/// ([`GPU_FLOOR_FLOPS`], [`CPU_FLOOR_FLOPS`]). It bounds a hang; it is no estimate of the
/// run's time, which is far shorter.
pub fn default_timeout(plan: &Plan) -> Duration {
    let o = &plan.options;
    let pass = 4.0 * plan.rows as f64 * o.width as f64 * plan.hidden as f64;
    let passes = (o.warmup + o.repeats + 2) as f64;
    let rate = if o.device == "cpu" {
        CPU_FLOOR_FLOPS
    } else {
        GPU_FLOOR_FLOPS
    };
    // At most a year: a bound, never an overflow.
    let work = (pass * passes / rate).min(365.0 * 86_400.0);
    STARTUP_ALLOWANCE + Duration::from_secs_f64(work)
}

/// What [`default_timeout`] allows before any work: starting Python and importing torch on a
/// cold file cache, creating the device context, loading the BLAS libraries.
pub const STARTUP_ALLOWANCE: Duration = Duration::from_secs(300);

/// Floating-point operations per second [`default_timeout`] assumes of a GPU (any GPU torch or
/// iteragpu drives does a thousand times more).
pub const GPU_FLOOR_FLOPS: f64 = 1e10;

/// Floating-point operations per second [`default_timeout`] assumes of the CPU reference
/// device (one slow core does ten times more).
pub const CPU_FLOOR_FLOPS: f64 = 1e8;

/// The time a sweep's point may take beyond its measurement's own deadline: the measure
/// process starts, reports the timeout and writes its summary within it.
pub const POINT_MARGIN: Duration = Duration::from_secs(60);

/// `--timeout`: a humantime duration above zero.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!(
            "`{text}` is no time to run: expected a duration above zero, such as 90s, 10m or 1h30m"
        )),
        Err(e) => Err(format!(
            "`{text}` is not a duration ({e}): expected such as 90s, 10m or 1h30m"
        )),
    }
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
        if let Some(t) = self.threads {
            a.extend(["--threads".to_string(), t.to_string()]);
        }
        if let Some(b) = self.cublas_workspace {
            a.extend(["--cublas-workspace".to_string(), b.to_string()]);
        }
        if let Some(b) = self.cublaslt_workspace {
            a.extend(["--cublaslt-workspace".to_string(), b.to_string()]);
        }
        match self.cublaslt_unified_workspace {
            Some(UnifiedWorkspace::Unified) => a.push("--cublaslt-unified-workspace".to_string()),
            Some(UnifiedWorkspace::Separate) => {
                a.push("--cublaslt-unified-workspace=0".to_string());
            }
            Some(UnifiedWorkspace::Unset) | None => {}
        }
        if self.kernel_form != "auto" {
            a.extend(["--kernel-form".to_string(), self.kernel_form.clone()]);
        }
        if self.engine != "native" {
            a.extend(["--engine".to_string(), self.engine.clone()]);
        }
        if let Some(p) = &self.python {
            a.extend(["--python".to_string(), p.display().to_string()]);
        }
        if let (Some(t), "torch") = (self.timeout, self.engine.as_str()) {
            a.extend([
                "--timeout".to_string(),
                humantime::format_duration(t).to_string(),
            ]);
        }
        a
    }

    /// PyTorch's workspace knobs as given.
    pub fn workspace_options(&self) -> WorkspaceOptions {
        WorkspaceOptions {
            cublas_bytes: self.cublas_workspace,
            cublaslt_bytes: self.cublaslt_workspace,
            unified: self.cublaslt_unified_workspace.unwrap_or_default(),
            addmm_cuda_lt_disabled: false,
        }
    }

    /// The CUDA device's options.
    pub fn cuda_options(&self) -> anyhow::Result<CudaOptions> {
        Ok(CudaOptions {
            kernel_form: self
                .kernel_form
                .parse::<KernelChoice>()
                .map_err(|e| usage(format!("--kernel-form: {e}")))?,
            workspaces: self.workspace_options(),
        })
    }

    /// Refuses the GPU-only options for the CPU reference device, which has no BLAS library
    /// and no kernels to load.
    pub fn check_cpu(&self) -> anyhow::Result<()> {
        if !self.workspace_options().is_default() || self.kernel_form != "auto" {
            return Err(usage(
                "--cublas-workspace, --cublaslt-workspace, --cublaslt-unified-workspace and \
                 --kernel-form apply to cuda devices; --device cpu has no BLAS library and no \
                 kernels to load"
                    .to_string(),
            ));
        }
        Ok(())
    }
}

/// `--cublaslt-unified-workspace[=1|0]`: the two values torch's `check_env` accepts (leaving the
/// option out is the third state, unset).
pub fn parse_unified_workspace(text: &str) -> Result<UnifiedWorkspace, String> {
    match text.trim() {
        "1" => Ok(UnifiedWorkspace::Unified),
        "0" => Ok(UnifiedWorkspace::Separate),
        other => Err(format!(
            "`{other}` is not a TORCH_CUBLASLT_UNIFIED_WORKSPACE value: use \
             --cublaslt-unified-workspace (or =1) to share the cuBLAS workspace, =0 for a separate \
             cuBLASLt workspace that is not capped, or leave the option out for torch 2.11's \
             default (separate, capped at the cuBLAS workspace)"
        )),
    }
}

/// `--cublas-workspace`: PyTorch's `:SIZE:COUNT` syntax (SIZE in KiB) or a byte count.
pub fn parse_cublas_workspace(text: &str) -> Result<u64, String> {
    if text.trim_start().starts_with(':') {
        return parse_cublas_workspace_config(text.trim()).ok_or_else(|| {
            format!(
                "`{text}` is not a CUBLAS_WORKSPACE_CONFIG value: expected :SIZE:COUNT pairs with \
                 SIZE in KiB (:4096:8 is 32 MiB), or a byte count such as 32MiB or 0"
            )
        });
    }
    parse_workspace_bytes(text)
}

/// A workspace size in bytes: `0`, or a byte count with an optional binary suffix.
pub fn parse_workspace_bytes(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    sweep::parse_bytes(text).map_err(|e| match e {
        sweep::ByteSizeError::Invalid(_) => format!(
            "`{text}` is not a workspace size: expected 0 or a byte count such as 1048576, 1MiB, \
             32MiB"
        ),
        other => other.to_string(),
    })
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

#[cfg(test)]
mod tests {
    use lab::dtype::DType;
    use lab::measure::config::MeasureOptions;

    use super::*;

    fn plan(device: &str, batch: usize, width: usize) -> Plan {
        Plan::new(MeasureOptions {
            device: device.to_string(),
            batch,
            context: 16,
            width,
            hidden: None,
            dtype: DType::Float32,
            warmup: 1,
            repeats: 2,
            seed: 0,
            allow_tf32: false,
        })
        .unwrap()
    }

    #[test]
    fn the_default_timeout_is_the_allowance_plus_the_work_at_the_floor_rate() {
        // 4 x 16 rows x 64 x 256 = 1048576 operations a pass, 5 passes.
        let work = 5.0 * 1_048_576.0;
        assert_eq!(
            default_timeout(&plan("cuda:0", 1, 64)),
            STARTUP_ALLOWANCE + Duration::from_secs_f64(work / GPU_FLOOR_FLOPS)
        );
        assert_eq!(
            default_timeout(&plan("cpu", 1, 64)),
            STARTUP_ALLOWANCE + Duration::from_secs_f64(work / CPU_FLOOR_FLOPS)
        );
        // A large run gets proportionally more: 8 x 16 rows x 8192 x 32768, 5 passes.
        let big = default_timeout(&plan("cuda:0", 8, 8192));
        let want = 5.0 * 4.0 * 128.0 * 8192.0 * 32768.0 / GPU_FLOOR_FLOPS;
        assert!(
            ((big - STARTUP_ALLOWANCE).as_secs_f64() - want).abs() < 1e-3,
            "{big:?}"
        );
    }

    #[test]
    fn timeouts_parse_as_durations_above_zero() {
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["0s", "0", "", "10", "soon", "-1s", "1 fortnight"] {
            assert!(parse_timeout(bad).is_err(), "{bad:?}");
        }
    }
}
