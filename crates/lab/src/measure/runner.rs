//! The phase runner: the protocol of the original kit, applied to any [`Device`].
//!
//! Every phase: synchronize, read the baseline counters, reset the peaks, start the clocks, run,
//! stop the clocks (synchronizing), read the end counters and peaks. The output of a forward pass
//! is alive when the end counters are read and is freed before the next phase; weights and inputs
//! live across phases; the allocator keeps its cache.

use std::time::Instant;

use crate::device::{Device, DeviceError, Tensor};
use crate::measure::check::{self, HostModel};
use crate::measure::config::Plan;
use crate::measure::document::{
    MEASUREMENT_SCHEMA, MeasurementDocument, Phase, PhaseMemory, PhaseRow, Preflight, RunError,
};
use crate::tool::ToolInfo;

/// Facts about the run that the runner does not measure itself.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The build.
    pub tool: ToolInfo,
    /// RFC 3339 UTC start time.
    pub started_utc: String,
    /// Seconds the device took to set up, before the first phase.
    pub device_init_seconds: f64,
    /// What the pre-flight check found.
    pub preflight: Preflight,
}

/// Whether the runner computes for real or only walks the allocation sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Build weights on the host, upload them, run and check.
    Measure,
    /// No host values, no uploads, no check: for a device that only counts (the pre-flight plan).
    Plan,
}

/// Something a phase reports as it finishes, for progress output.
pub trait Progress {
    /// Called after each phase row is recorded.
    fn phase_done(&mut self, row: &PhaseRow);
}

/// No progress output.
#[derive(Debug, Default)]
pub struct Silent;

impl Progress for Silent {
    fn phase_done(&mut self, _row: &PhaseRow) {}
}

/// Runs every phase on `device` and returns the document. A failing phase ends the run with
/// `complete: false`; the rows of the finished phases are kept.
pub fn run<D: Device>(
    device: &mut D,
    plan: &Plan,
    info: RunInfo,
    mode: Mode,
    progress: &mut dyn Progress,
) -> MeasurementDocument {
    let o = &plan.options;
    let mut doc = MeasurementDocument {
        schema: MEASUREMENT_SCHEMA.to_string(),
        tool: info.tool,
        started_utc: info.started_utc,
        device_init_seconds: info.device_init_seconds,
        environment: device.environment(),
        node: None,
        engine: None,
        configuration: plan.configuration(
            &device.math_mode(o.dtype, o.allow_tf32),
            device.memory_policy(),
        ),
        synthetic_model: plan.synthetic_model(),
        preflight: info.preflight,
        phases: Vec::new(),
        check: None,
        complete: false,
        error: None,
    };
    let mut runner = Runner {
        device,
        plan,
        mode,
        rows: Vec::new(),
        progress,
    };
    let outcome = runner.all_phases();
    doc.phases = runner.rows;
    match outcome {
        Ok(check) => {
            doc.complete = check.as_ref().is_none_or(|c| c.passed);
            if let Some(c) = &check
                && !c.passed
            {
                doc.error = Some(RunError {
                    phase: None,
                    kind: "check_failed".to_string(),
                    message: format!(
                        "the numerical check failed: relative error {:.3e} exceeds the bound {:.1e} for {}",
                        c.relative_error, c.bound, o.dtype
                    ),
                    allocated_bytes: None,
                    reserved_bytes: None,
                });
            }
            doc.check = check;
        }
        Err(failure) => doc.error = Some(failure),
    }
    doc
}

struct Runner<'a, D: Device> {
    device: &'a mut D,
    plan: &'a Plan,
    mode: Mode,
    rows: Vec<PhaseRow>,
    progress: &'a mut dyn Progress,
}

/// The parameters on the device, in load order.
struct Weights {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl<D: Device> Runner<'_, D> {
    fn all_phases(&mut self) -> Result<Option<crate::measure::document::Check>, RunError> {
        let o = &self.plan.options;
        let (host, weights) = self.phase(Phase::ModelLoad, 0, |r| r.load_model())?;
        let x = self.phase(Phase::Inputs, 0, |r| {
            let x = r.device.allocate(r.plan.rows, o.width, o.dtype, "inputs")?;
            if let Err(e) = r.device.fill_inputs(&x, o.seed) {
                r.device.free(x);
                return Err(e);
            }
            Ok(x)
        });
        let x = match x {
            Ok(x) => x,
            Err(e) => {
                self.free_weights(weights);
                return Err(e);
            }
        };
        let result = self.forward_phases(&x, &weights, host);
        self.device.free(x);
        self.free_weights(weights);
        result
    }

    fn free_weights(&mut self, w: Weights) {
        for t in [w.w1, w.b1, w.w2, w.b2] {
            self.device.free(t);
        }
    }

    /// The forward phases and the check; the caller frees weights and inputs.
    fn forward_phases(
        &mut self,
        x: &Tensor,
        weights: &Weights,
        host: Option<HostModel>,
    ) -> Result<Option<crate::measure::document::Check>, RunError> {
        let o = &self.plan.options;
        let y = self.phase(Phase::ColdForward, 0, |r| r.forward(x, weights))?;
        self.device.free(y);
        let y = self.phase(Phase::Warmup, 0, |r| {
            let mut last: Option<Tensor> = None;
            for _ in 0..o.warmup {
                let y = r.forward(x, weights);
                // As `y = model(x)` in a loop: the previous output is released only once the new
                // one exists.
                if let Some(previous) = last.take() {
                    r.device.free(previous);
                }
                last = Some(y?);
            }
            Ok(last)
        })?;
        if let Some(y) = y {
            self.device.free(y);
        }
        let mut last_output = None;
        for index in 0..o.repeats {
            let y = self.phase(Phase::WarmForward, index, |r| r.forward(x, weights))?;
            if index + 1 == o.repeats {
                last_output = Some(y);
            } else {
                self.device.free(y);
            }
        }
        let mut check = None;
        if let Some(y) = last_output {
            match host {
                Some(host) => {
                    let rows = check::sample_rows(self.plan);
                    let device_rows = self.device.read_rows(&y, &rows);
                    self.device.free(y);
                    let device_rows =
                        device_rows.map_err(|e| failure(None, &e, self.device.stats()))?;
                    check = Some(check::compare(self.plan, &host, &rows, &device_rows));
                }
                None => self.device.free(y),
            }
        }
        Ok(check)
    }

    /// Runs one phase under the protocol and records its row.
    fn phase<T>(
        &mut self,
        phase: Phase,
        index: usize,
        body: impl FnOnce(&mut Self) -> Result<T, DeviceError>,
    ) -> Result<T, RunError> {
        let fail = |r: &mut Self, e: DeviceError| failure(Some(phase), &e, r.device.stats());
        self.device.phase_started(phase, index);
        self.device.synchronize().map_err(|e| fail(self, e))?;
        let device_before = self.device.device_memory().map_err(|e| fail(self, e))?;
        let baseline = self.device.stats().all;
        self.device.reset_peaks();
        let start = Instant::now();
        self.device.start_clock().map_err(|e| fail(self, e))?;
        let value = body(self).map_err(|e| fail(self, e))?;
        let device_seconds = self.device.stop_clock().map_err(|e| fail(self, e))?;
        self.device.synchronize().map_err(|e| fail(self, e))?;
        let wall_seconds = start.elapsed().as_secs_f64();
        let end = self.device.stats().all;
        let device_after = self.device.device_memory().map_err(|e| fail(self, e))?;
        self.device.phase_finished();
        let row = PhaseRow {
            phase,
            index,
            wall_seconds,
            device_seconds,
            memory: PhaseMemory {
                baseline_allocated_bytes: baseline.allocated.current,
                baseline_reserved_bytes: baseline.reserved.current,
                end_allocated_bytes: end.allocated.current,
                end_reserved_bytes: end.reserved.current,
                peak_allocated_bytes: end.allocated.peak,
                peak_reserved_bytes: end.reserved.peak,
                baseline_requested_bytes: baseline.requested.current,
                end_requested_bytes: end.requested.current,
                peak_requested_bytes: end.requested.peak,
                device_before,
                device_after,
            },
        };
        self.progress.phase_done(&row);
        self.rows.push(row);
        Ok(value)
    }

    /// Builds the parameters on the host (inside the timed region, as the original does) and
    /// copies each to the device in `nn.Module.to()` order: w1, b1, w2, b2.
    fn load_model(&mut self) -> Result<(Option<HostModel>, Weights), DeviceError> {
        let dtype = self.plan.options.dtype;
        let host =
            match self.mode {
                Mode::Measure => Some(HostModel::build(self.plan).map_err(|requested| {
                    DeviceError::OutOfMemory {
                        what: "the host's float32 copy of the parameters (for the check)"
                            .to_string(),
                        requested,
                        allocated: 0,
                        reserved: 0,
                    }
                })?),
                Mode::Plan => None,
            };
        let names = [
            "linear1.weight",
            "linear1.bias",
            "linear2.weight",
            "linear2.bias",
        ];
        let mut tensors: Vec<Tensor> = Vec::with_capacity(4);
        for (i, (rows, cols)) in self.plan.parameter_shapes().into_iter().enumerate() {
            let uploaded = self
                .device
                .allocate(rows, cols, dtype, names[i])
                .and_then(|t| match &host {
                    Some(h) => match self.device.upload(&t, h.parameter(i)) {
                        Ok(()) => Ok(t),
                        Err(e) => {
                            self.device.free(t);
                            Err(e)
                        }
                    },
                    None => Ok(t),
                });
            match uploaded {
                Ok(t) => tensors.push(t),
                Err(e) => {
                    for t in tensors {
                        self.device.free(t);
                    }
                    return Err(e);
                }
            }
        }
        let mut it = tensors.into_iter();
        let weights = match (it.next(), it.next(), it.next(), it.next()) {
            (Some(w1), Some(b1), Some(w2), Some(b2)) => Weights { w1, b1, w2, b2 },
            _ => return Err(DeviceError::Shape("expected four parameter tensors".into())),
        };
        Ok((host, weights))
    }

    /// One forward pass, allocating as PyTorch eager does: linear1's output, GELU's output,
    /// linear1's output freed, linear2's output, GELU's output freed. On failure every
    /// intermediate is freed; the returned output is the caller's to free.
    fn forward(&mut self, x: &Tensor, w: &Weights) -> Result<Tensor, DeviceError> {
        let o = &self.plan.options;
        let (rows, hidden, width, dtype) = (self.plan.rows, self.plan.hidden, o.width, o.dtype);
        let tf32 = o.allow_tf32;
        let d = &mut *self.device;
        let h = d.allocate(rows, hidden, dtype, "linear1 output")?;
        if let Err(e) = d.linear(x, &w.w1, &w.b1, &h, tf32) {
            d.free(h);
            return Err(e);
        }
        let g = match d.allocate(rows, hidden, dtype, "gelu output") {
            Ok(g) => g,
            Err(e) => {
                d.free(h);
                return Err(e);
            }
        };
        let gelu = d.gelu(&h, &g);
        d.free(h);
        if let Err(e) = gelu {
            d.free(g);
            return Err(e);
        }
        let y = match d.allocate(rows, width, dtype, "linear2 output") {
            Ok(y) => y,
            Err(e) => {
                d.free(g);
                return Err(e);
            }
        };
        let out = d.linear(&g, &w.w2, &w.b2, &y, tf32);
        d.free(g);
        match out {
            Ok(()) => Ok(y),
            Err(e) => {
                d.free(y);
                Err(e)
            }
        }
    }
}

/// The document's `error` for a device failure in `phase`.
fn failure(phase: Option<Phase>, e: &DeviceError, stats: crate::alloc::Stats) -> RunError {
    let where_ = phase.map_or("after the last phase".to_string(), |p| {
        format!("in phase {}", p.name())
    });
    let (kind, allocated, reserved) = match e {
        DeviceError::OutOfMemory {
            allocated,
            reserved,
            ..
        } => ("out_of_memory", *allocated, *reserved),
        _ => (
            "device",
            stats.all.allocated.current,
            stats.all.reserved.current,
        ),
    };
    RunError {
        phase,
        kind: kind.to_string(),
        message: format!("{where_}: {e}"),
        allocated_bytes: Some(allocated),
        reserved_bytes: Some(reserved),
    }
}
