//! The pre-flight estimate: the run's allocation sequence replayed through the real allocator
//! policy over an unbounded, memory-less source, so the peak it predicts is the peak the policy
//! will reach (segment rounding, caching and the library workspace included), not a guess.

use crate::alloc::{Block, SegmentError, SegmentSource, Stats, TensorPool};
use crate::device::{Device, DeviceError, DeviceMemory, Tensor};
use crate::dtype::DType;
use crate::environment::{ENVIRONMENT_SCHEMA, Environment};
use crate::measure::config::Plan;
use crate::measure::document::Preflight;
use crate::measure::runner::{self, Mode, RunInfo, Silent};
use crate::tool::ToolInfo;

/// Predicts the highest `reserved` the run will reach on a device whose library workspace is
/// `workspace_bytes` (allocated on the first product, as the real devices do).
pub fn estimate_peak_reserved(plan: &Plan, workspace_bytes: u64) -> u64 {
    let mut device = PlanDevice::new(workspace_bytes);
    let info = RunInfo {
        tool: ToolInfo::new(None),
        started_utc: String::new(),
        device_init_seconds: 0.0,
        preflight: Preflight {
            estimated_peak_reserved_bytes: 0,
            device_free_bytes: None,
        },
    };
    let doc = runner::run(&mut device, plan, info, Mode::Plan, &mut Silent);
    doc.phases
        .iter()
        .map(|r| r.memory.peak_reserved_bytes)
        .max()
        .unwrap_or(0)
}

/// A run that cannot fit: the figures, for the refusal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "this run needs an estimated {needed} bytes ({needed_gib:.2} GiB) of allocator segments at its \
     peak but the device has {limit} bytes ({limit_gib:.2} GiB) available{fraction}; \
     reduce --batch, --context, --width or --hidden"
)]
pub struct WouldNotFit {
    /// Predicted peak reserved bytes.
    pub needed: u64,
    /// What the run may use.
    pub limit: u64,
    /// `needed` in GiB, for the sentence.
    pub needed_gib: f64,
    /// `limit` in GiB, for the sentence.
    pub limit_gib: f64,
    /// Describes a fraction applied to the free memory, if any.
    pub fraction: String,
}

/// Compares the estimate with what the device has free (times `fraction`, 1.0 for `measure`).
pub fn check_fits(needed: u64, available: Option<u64>, fraction: f64) -> Result<(), WouldNotFit> {
    let Some(free) = available else {
        return Ok(());
    };
    let limit = (free as f64 * fraction).floor() as u64;
    if needed <= limit {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    Err(WouldNotFit {
        needed,
        limit,
        needed_gib: gib(needed),
        limit_gib: gib(limit),
        fraction: if fraction < 1.0 {
            format!(" (free memory x {fraction})")
        } else {
            String::new()
        },
    })
}

#[derive(Debug, Default)]
struct Unbounded;

impl SegmentSource for Unbounded {
    type Segment = ();

    fn allocate(&mut self, _bytes: u64) -> Result<(), SegmentError> {
        Ok(())
    }

    fn release(&mut self, _segment: ()) {}
}

/// A device that only counts: allocations go through the policy, operations do nothing.
#[derive(Debug)]
struct PlanDevice {
    tensors: TensorPool<Unbounded>,
    workspace_bytes: u64,
    workspace: Option<Block>,
}

impl PlanDevice {
    fn new(workspace_bytes: u64) -> PlanDevice {
        PlanDevice {
            tensors: TensorPool::new(Unbounded),
            workspace_bytes,
            workspace: None,
        }
    }
}

impl Device for PlanDevice {
    fn environment(&self) -> Environment {
        Environment {
            schema: ENVIRONMENT_SCHEMA.to_string(),
            tool: ToolInfo::new(None),
            requested_device: "plan".to_string(),
            backend: "plan".to_string(),
            reference_device: true,
            usable: true,
            problem: None,
            details: serde_json::Value::Null,
        }
    }

    fn workspace_bytes(&self) -> u64 {
        self.workspace_bytes
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn stats(&self) -> Stats {
        self.tensors.stats()
    }

    fn reset_peaks(&mut self) {
        self.tensors.reset_peaks();
    }

    fn device_memory(&mut self) -> Result<Option<DeviceMemory>, DeviceError> {
        Ok(None)
    }

    fn allocate(
        &mut self,
        rows: usize,
        cols: usize,
        dtype: DType,
        what: &str,
    ) -> Result<Tensor, DeviceError> {
        self.tensors.allocate(rows, cols, dtype, what)
    }

    fn free(&mut self, tensor: Tensor) {
        self.tensors.free(tensor);
    }

    fn upload(&mut self, _tensor: &Tensor, _values: &[f32]) -> Result<(), DeviceError> {
        Ok(())
    }

    fn fill_inputs(&mut self, _tensor: &Tensor, _seed: u64) -> Result<(), DeviceError> {
        Ok(())
    }

    fn linear(
        &mut self,
        _x: &Tensor,
        _w: &Tensor,
        _b: &Tensor,
        _out: &Tensor,
        _tf32: bool,
    ) -> Result<(), DeviceError> {
        if self.workspace.is_none() && self.workspace_bytes > 0 {
            self.workspace = Some(
                self.tensors
                    .allocate_bytes(self.workspace_bytes, "workspace")?,
            );
        }
        Ok(())
    }

    fn gelu(&mut self, _x: &Tensor, _out: &Tensor) -> Result<(), DeviceError> {
        Ok(())
    }

    fn read_rows(&mut self, _tensor: &Tensor, _rows: &[usize]) -> Result<Vec<f32>, DeviceError> {
        Ok(Vec::new())
    }

    fn start_clock(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn stop_clock(&mut self) -> Result<Option<f64>, DeviceError> {
        Ok(None)
    }
}
