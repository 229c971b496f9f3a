//! The measurement document (`measure --output FILE`), as it is written and read back.

use serde::{Deserialize, Serialize};

use crate::device::DeviceMemory;
use crate::dtype::DType;
use crate::environment::Environment;
use crate::node::NodeIdentity;
use crate::tool::ToolInfo;
use crate::workspaces::MemoryPolicy;

/// Schema identifier of measurement documents; bumped on any incompatible change.
pub const MEASUREMENT_SCHEMA: &str = "iteragpu.measurement/1";

/// The largest measurement document any command reads (`record`, `report`, `sweep`): a real one
/// is a few KiB plus about 1 KiB per timed pass, so this leaves room for thousands of repeats
/// while a hostile or corrupt file is refused before it fills memory.
pub const MEASUREMENT_LIMIT: u64 = 16 << 20;

/// How [`MEASUREMENT_LIMIT`] names the file it refuses.
pub const MEASUREMENT_KIND: &str = "a measurement document";

/// One measurement run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasurementDocument {
    /// Always [`MEASUREMENT_SCHEMA`].
    pub schema: String,
    /// The build that measured.
    pub tool: ToolInfo,
    /// When the run started, RFC 3339 in UTC.
    pub started_utc: String,
    /// Seconds spent setting the device up (driver, context, stream, modules) before the first
    /// phase; never hidden inside `model_load`.
    pub device_init_seconds: f64,
    /// The machine and software.
    pub environment: Environment,
    /// Which node of a multi-node job this is (absent outside a scheduler unless named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeIdentity>,
    /// The engine that ran the protocol, when it is not iteragpu's own (`measure --engine
    /// torch`): absent for the native engine, as in every document written before engines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    /// Every option, resolved.
    pub configuration: Configuration,
    /// What was measured.
    pub synthetic_model: SyntheticModel,
    /// The peak the pre-flight check expected, and what the device had free.
    pub preflight: Preflight,
    /// One row per phase, in order; rows of finished phases are kept when a later one fails.
    pub phases: Vec<PhaseRow>,
    /// The numerical check of the last forward pass (absent when no forward pass finished).
    pub check: Option<Check>,
    /// True only when every phase ran and the check passed.
    pub complete: bool,
    /// Why the run is incomplete.
    pub error: Option<RunError>,
}

impl MeasurementDocument {
    /// Medians of the warm forward passes: `(wall, device)` seconds, each `None` when there is
    /// no such figure (no finished pass, or no device clock).
    pub fn warm_forward_medians(&self) -> (Option<f64>, Option<f64>) {
        let warm = || self.phases.iter().filter(|r| r.phase == Phase::WarmForward);
        let wall = median(&mut warm().map(|r| r.wall_seconds).collect::<Vec<_>>());
        let device = median(&mut warm().filter_map(|r| r.device_seconds).collect::<Vec<_>>());
        (wall, device)
    }

    /// Forward FLOPs over the median warm pass: device time where the device has a clock, else
    /// wall time.
    pub fn achieved_flops_per_second(&self) -> Option<f64> {
        let (wall, device) = self.warm_forward_medians();
        device
            .or(wall)
            .filter(|t| *t > 0.0)
            .map(|t| self.synthetic_model.forward_flops as f64 / t)
    }
}

/// The median (the mean of the middle two for an even count); `None` for no values.
pub fn median(values: &mut [f64]) -> Option<f64> {
    crate::stats::median(values)
}

/// Which engine ran the protocol, and what it ran with: for `measure --engine torch`, the
/// machine's PyTorch, whose own counters, clocks and BLAS libraries the rows then hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    /// `torch`.
    pub name: String,
    /// The engine's own version (`torch.__version__`).
    pub version: String,
    /// How it was built: `CUDA 13.0`, `ROCm, HIP 6.4.x`.
    pub build: String,
    /// The interpreter that ran it.
    pub python: String,
    /// The BLAS library files the process had mapped after its first product, in mapping order.
    pub blas_libraries: Vec<String>,
    /// Every environment variable that changes the engine's counters, workspaces or path, as the
    /// process ran with it (`null`: unset).
    pub allocator_knobs: std::collections::BTreeMap<String, Option<String>>,
    /// The matmul settings the products ran with, read back from the engine after the run
    /// (`allow_tf32`, the float32 matmul precision): the judge of the GPU check holds a TF32 case
    /// to them, not to the options asked for. Absent in documents written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul: Option<serde_json::Value>,
    /// The torch release whose rules iteragpu's native engine mirrors.
    #[serde(default)]
    pub mirrored_torch: Option<String>,
    /// Where the allocator counters come from (`torch.cuda.memory_stats`).
    #[serde(default)]
    pub counters: Option<String>,
    /// The library workspaces observed in the allocator after the cold pass (`null`: not
    /// observed, see `observation_error`).
    #[serde(default)]
    pub observed_workspaces: Option<serde_json::Value>,
    /// Why the workspaces were not observed.
    #[serde(default)]
    pub observation_error: Option<String>,
    /// What torch's rules give for this GPU, beside the observation, for reading only.
    #[serde(default)]
    pub computed_policy: Option<serde_json::Value>,
}

/// The options of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configuration {
    /// The device asked for (`cuda:0`, `cpu`).
    pub device: String,
    /// Batch size.
    pub batch: usize,
    /// Positions per sequence (the middle dimension only: no attention).
    pub context: usize,
    /// Model width.
    pub width: usize,
    /// Hidden width of the first layer's output.
    pub hidden: usize,
    /// Whether `hidden` came from `--hidden` or is the default `4 x width`.
    pub hidden_source: String,
    /// Storage type of weights, inputs and activations.
    pub dtype: DType,
    /// Warm-up passes (one `warmup` row).
    pub warmup: usize,
    /// Timed warm passes (one `warm_forward` row each).
    pub repeats: usize,
    /// Seed of weights and inputs.
    pub seed: u64,
    /// Whether float32 products may use TF32.
    pub allow_tf32: bool,
    /// The math actually used for products, in words (`float32 accumulate, strict float32`).
    pub math_mode: String,
    /// The allocator policy and library workspaces the counters mirror (absent from documents
    /// written before it was recorded; read back as "not recorded").
    #[serde(default)]
    pub memory_policy: MemoryPolicy,
}

/// One layer of the synthetic model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    /// `linear1`, `gelu`, `linear2`.
    pub name: String,
    /// `linear` or `gelu`.
    pub kind: String,
    /// Input features.
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Parameters of the layer (weight and bias).
    pub parameters: u64,
}

/// The model and its tensors' shapes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticModel {
    /// `Linear -> GELU -> Linear`, in words.
    pub description: String,
    /// The layers, in order.
    pub layers: Vec<Layer>,
    /// Parameters of the whole model.
    pub parameter_count: u64,
    /// Bytes of all parameters in the dtype (unrounded).
    pub parameter_bytes: u64,
    /// `[batch, context, width]`.
    pub input_shape: Vec<usize>,
    /// `[batch, context, hidden]`.
    pub hidden_shape: Vec<usize>,
    /// `[batch, context, width]`.
    pub output_shape: Vec<usize>,
    /// Storage type.
    pub dtype: DType,
    /// Floating-point operations of one forward pass (2·m·n·k per product; bias and GELU not
    /// counted), used for achieved FLOP/s.
    pub forward_flops: u64,
}

/// What the run expected to need before it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preflight {
    /// Peak reserved bytes the allocator policy predicts for the whole run.
    pub estimated_peak_reserved_bytes: u64,
    /// Free bytes the device reported before the run (absent for the CPU reference).
    pub device_free_bytes: Option<u64>,
}

/// The phases, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Build weights on the CPU and copy them to the device.
    ModelLoad,
    /// Generate the inputs on the device.
    Inputs,
    /// The first forward pass (lazy library handles and workspaces appear here).
    ColdForward,
    /// All warm-up passes together.
    Warmup,
    /// One timed warm pass.
    WarmForward,
}

impl Phase {
    /// The name used in documents and tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::ModelLoad => "model_load",
            Phase::Inputs => "inputs",
            Phase::ColdForward => "cold_forward",
            Phase::Warmup => "warmup",
            Phase::WarmForward => "warm_forward",
        }
    }
}

/// One row of `phases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRow {
    /// Which phase.
    pub phase: Phase,
    /// 0 except for `warm_forward`, where it counts the repeats from 0.
    pub index: usize,
    /// Host clock around the synchronized region.
    pub wall_seconds: f64,
    /// The device's own clock (CUDA events); `null` where the device has none.
    pub device_seconds: Option<f64>,
    /// Counters before, after and at the peak.
    pub memory: PhaseMemory,
}

/// Memory figures of one phase. `allocated` is part of `reserved`: never add them, and never
/// subtract peaks to infer a cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseMemory {
    /// Allocated bytes after the opening synchronize.
    pub baseline_allocated_bytes: u64,
    /// Reserved bytes after the opening synchronize.
    pub baseline_reserved_bytes: u64,
    /// Allocated bytes at the end (the forward output still alive).
    pub end_allocated_bytes: u64,
    /// Reserved bytes at the end.
    pub end_reserved_bytes: u64,
    /// Highest allocated bytes during the phase.
    pub peak_allocated_bytes: u64,
    /// Highest reserved bytes during the phase.
    pub peak_reserved_bytes: u64,
    /// Unrounded requested bytes at the baseline.
    pub baseline_requested_bytes: u64,
    /// Unrounded requested bytes at the end.
    pub end_requested_bytes: u64,
    /// Highest unrounded requested bytes during the phase.
    pub peak_requested_bytes: u64,
    /// Device-wide memory before the phase, where the device reports it.
    pub device_before: Option<DeviceMemory>,
    /// Device-wide memory after the phase, where the device reports it.
    pub device_after: Option<DeviceMemory>,
}

/// The numerical check of the last forward pass against a float64 CPU reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// How the reference is computed, in words.
    pub method: String,
    /// Output rows recomputed (indices into `[batch * context]`).
    pub rows: Vec<usize>,
    /// Largest absolute difference over the checked elements (`null` in JSON when not finite).
    #[serde(deserialize_with = "nan_if_null")]
    pub max_abs_error: f64,
    /// Normwise relative error: `max |device - reference| / max |reference|` (`null` in JSON
    /// when not finite).
    #[serde(deserialize_with = "nan_if_null")]
    pub relative_error: f64,
    /// The bound for the dtype and math mode.
    pub bound: f64,
    /// `relative_error <= bound` (and every value finite).
    pub passed: bool,
}

/// Why a run stopped or failed its check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// The phase that failed (`null` when the failure is the check).
    pub phase: Option<Phase>,
    /// `out_of_memory`, `device`, `check_failed`.
    pub kind: String,
    /// A sentence for the user, with the figures.
    pub message: String,
    /// Allocator allocated bytes when it failed, where known.
    pub allocated_bytes: Option<u64>,
    /// Allocator reserved bytes when it failed, where known.
    pub reserved_bytes: Option<u64>,
}

/// JSON has no NaN or infinity (serde_json writes them as `null`); read `null` back as NaN so a
/// document with a non-finite error still loads.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
