//! The pre-flight estimate: the run's allocation sequence replayed through the real allocator
//! policy over an unbounded, memory-less source, so the peak it predicts is the peak the policy
//! will reach (segment rounding, caching and the library workspace included), not a guess.

use serde::{Deserialize, Serialize};

use crate::alloc::{AllocationEvent, Block, SegmentError, SegmentSource, Stats, TensorPool};
use crate::device::{Device, DeviceError, DeviceMemory, Tensor};
use crate::dtype::DType;
use crate::environment::{ENVIRONMENT_SCHEMA, Environment};
use crate::measure::config::Plan;
use crate::measure::document::{Configuration, Phase, PhaseRow, Preflight, SyntheticModel};
use crate::measure::runner::{self, Mode, RunInfo, Silent};
use crate::tool::ToolInfo;
use crate::workspaces::{AddmmPath, MemoryPolicy};

/// One step of the planned allocation sequence, with the phase it happens in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedAllocation {
    /// The phase; `null` for what happens between phases or after the last one (the last
    /// output, the inputs and the weights freed at the end of the run).
    pub phase: Option<Phase>,
    /// The phase's index (the repeat, for `warm_forward`; 0 outside phases).
    pub index: usize,
    /// What the allocator did.
    #[serde(flatten)]
    pub event: AllocationEvent,
}

/// The whole run replayed through the allocator policy: its phase rows (counters only) and its
/// allocation sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    /// One row per phase, as the run would record them (no clocks, no device memory).
    pub phases: Vec<PhaseRow>,
    /// Every allocation and free, in order.
    pub allocations: Vec<PlannedAllocation>,
}

impl PlannedRun {
    /// The highest `reserved` of any phase.
    pub fn peak_reserved(&self) -> u64 {
        self.phases
            .iter()
            .map(|r| r.memory.peak_reserved_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// Replays the run's allocation sequence on a device with `policy`'s library workspaces
/// (allocated on the first product, as the real devices do).
pub fn plan_run(plan: &Plan, policy: &MemoryPolicy) -> PlannedRun {
    let mut device = PlanDevice::new(policy.clone());
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
    PlannedRun {
        phases: doc.phases,
        allocations: device.allocations(),
    }
}

/// Schema identifier of `measure --plan --json`.
pub const PLAN_SCHEMA: &str = "iteragpu.plan/1";

/// What `measure --plan` prints: a run's footprint, predicted without opening a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// Always [`PLAN_SCHEMA`].
    pub schema: String,
    /// The device kind planned for (`cpu`, `cuda`).
    pub device: String,
    /// For a GPU, the compute capability the workspaces were sized for (`9.0`).
    pub compute_capability: Option<String>,
    /// Every option, resolved, with the memory policy, as the measurement document has it.
    pub configuration: Configuration,
    /// What would be measured.
    pub synthetic_model: SyntheticModel,
    /// The highest `reserved` of any phase: what the pre-flight check compares with free memory.
    pub peak_reserved_bytes: u64,
    /// Every allocation and free of the run, in order.
    pub allocations: Vec<PlannedAllocation>,
    /// The counters of every phase row, with the measurement document's field names.
    pub phases: Vec<PlannedPhase>,
}

/// One predicted phase row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedPhase {
    /// The phase.
    pub phase: Phase,
    /// Its index (the repeat, for `warm_forward`).
    pub index: usize,
    /// The counters, named as in the measurement document.
    pub memory: PlannedMemory,
}

/// The allocator counters of a phase row (the measurement document's names; no device memory,
/// since no device is opened).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMemory {
    /// Allocated bytes at the phase's start.
    pub baseline_allocated_bytes: u64,
    /// Reserved bytes at the phase's start.
    pub baseline_reserved_bytes: u64,
    /// Allocated bytes at its end.
    pub end_allocated_bytes: u64,
    /// Reserved bytes at its end.
    pub end_reserved_bytes: u64,
    /// Highest allocated bytes during it.
    pub peak_allocated_bytes: u64,
    /// Highest reserved bytes during it.
    pub peak_reserved_bytes: u64,
    /// Requested (unrounded) bytes at its start.
    pub baseline_requested_bytes: u64,
    /// Requested bytes at its end.
    pub end_requested_bytes: u64,
    /// Highest requested bytes during it.
    pub peak_requested_bytes: u64,
}

impl PlanReport {
    /// Plans `plan` on a `device` kind with `policy`; `math_mode` as the device would word it.
    pub fn new(
        plan: &Plan,
        device: &str,
        compute_capability: Option<(i32, i32)>,
        math_mode: &str,
        policy: MemoryPolicy,
    ) -> PlanReport {
        let run = plan_run(plan, &policy);
        PlanReport {
            schema: PLAN_SCHEMA.to_string(),
            device: device.to_string(),
            compute_capability: compute_capability.map(|(ma, mi)| format!("{ma}.{mi}")),
            configuration: plan.configuration(math_mode, policy),
            synthetic_model: plan.synthetic_model(),
            peak_reserved_bytes: run.peak_reserved(),
            phases: run
                .phases
                .iter()
                .map(|r| {
                    let m = &r.memory;
                    PlannedPhase {
                        phase: r.phase,
                        index: r.index,
                        memory: PlannedMemory {
                            baseline_allocated_bytes: m.baseline_allocated_bytes,
                            baseline_reserved_bytes: m.baseline_reserved_bytes,
                            end_allocated_bytes: m.end_allocated_bytes,
                            end_reserved_bytes: m.end_reserved_bytes,
                            peak_allocated_bytes: m.peak_allocated_bytes,
                            peak_reserved_bytes: m.peak_reserved_bytes,
                            baseline_requested_bytes: m.baseline_requested_bytes,
                            end_requested_bytes: m.end_requested_bytes,
                            peak_requested_bytes: m.peak_requested_bytes,
                        },
                    }
                })
                .collect(),
            allocations: run.allocations,
        }
    }
}

/// Predicts the highest `reserved` the run will reach on a device with `policy`.
pub fn estimate_peak_reserved(plan: &Plan, policy: &MemoryPolicy) -> u64 {
    plan_run(plan, policy).peak_reserved()
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
    policy: MemoryPolicy,
    /// The library workspaces allocated so far (kept for the run, as the devices keep them).
    workspaces: Vec<Block>,
    /// Whether a product went through the cuBLAS handle (its workspace is allocated).
    handle_ready: bool,
    /// Whether a product took the cuBLASLt path (its workspace is allocated, when separate).
    lt_ready: bool,
    /// Where each phase (or the time between phases) starts in the pool's trace.
    marks: Vec<(usize, Option<Phase>, usize)>,
}

impl PlanDevice {
    fn new(policy: MemoryPolicy) -> PlanDevice {
        let mut tensors = TensorPool::new(Unbounded);
        tensors.enable_trace();
        PlanDevice {
            tensors,
            policy,
            workspaces: Vec::new(),
            handle_ready: false,
            lt_ready: false,
            marks: Vec::new(),
        }
    }

    fn allocations(&self) -> Vec<PlannedAllocation> {
        let trace = self.tensors.trace();
        let mut out = Vec::with_capacity(trace.len());
        let first = self.marks.first().map_or(trace.len(), |m| m.0);
        out.extend(trace[..first].iter().map(|event| PlannedAllocation {
            phase: None,
            index: 0,
            event: event.clone(),
        }));
        for (i, (start, phase, index)) in self.marks.iter().enumerate() {
            let end = self.marks.get(i + 1).map_or(trace.len(), |m| m.0);
            out.extend(trace[*start..end].iter().map(|event| PlannedAllocation {
                phase: *phase,
                index: *index,
                event: event.clone(),
            }));
        }
        out
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

    fn memory_policy(&self) -> MemoryPolicy {
        self.policy.clone()
    }

    fn phase_started(&mut self, phase: Phase, index: usize) {
        self.marks
            .push((self.tensors.trace().len(), Some(phase), index));
    }

    fn phase_finished(&mut self) {
        self.marks.push((self.tensors.trace().len(), None, 0));
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
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _out: &Tensor,
        _tf32: bool,
    ) -> Result<(), DeviceError> {
        // After the output exists, in PyTorch's order (see crate::workspaces): the first product
        // through the handle allocates the cuBLAS workspace, whichever path it takes; the first
        // one on the cuBLASLt path then allocates the cuBLASLt workspace (when separate). A
        // device without cuBLAS has neither.
        let Some(path) = self.policy.linear_path(x.rows, x.cols, w.rows, x.dtype) else {
            return Ok(());
        };
        let w = self.policy.workspaces();
        if !self.handle_ready {
            if let Some((what, bytes)) = w.handle_allocation() {
                let block = self.tensors.allocate_bytes(bytes, what)?;
                self.workspaces.push(block);
            }
            self.handle_ready = true;
        }
        if path == AddmmPath::CublasLt && !self.lt_ready {
            if let Some((what, bytes)) = w.lt_allocation() {
                let block = self.tensors.allocate_bytes(bytes, what)?;
                self.workspaces.push(block);
            }
            self.lt_ready = true;
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
