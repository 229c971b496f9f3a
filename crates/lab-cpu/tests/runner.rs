//! The runner, driven through the CPU reference device and a scripted device that fails on cue.

use lab::alloc::{Action, PoolName, Stats};
use lab::device::{Device, DeviceError, DeviceMemory, Tensor};
use lab::dtype::DType;
use lab::environment::Environment;
use lab::measure::config::Plan;
use lab::measure::document::{MeasurementDocument, Phase, Preflight};
use lab::measure::preflight::{self, PlannedAllocation};
use lab::measure::runner::{Mode, RunInfo, Silent, run};
use lab::tool::ToolInfo;
use lab::workspaces::{CUBLAS_WORKSPACE, CUBLASLT_WORKSPACE, MemoryPolicy, WorkspaceOptions};
use lab_cpu::CpuDevice;

fn options(
    batch: usize,
    context: usize,
    width: usize,
    dtype: DType,
) -> lab::measure::config::MeasureOptions {
    lab::measure::config::MeasureOptions::with_defaults("cpu", batch, context, width, dtype)
}

fn info() -> RunInfo {
    RunInfo {
        tool: ToolInfo::new(None),
        started_utc: "2026-11-29T00:00:00Z".to_string(),
        device_init_seconds: 0.0,
        preflight: Preflight {
            estimated_peak_reserved_bytes: 0,
            device_free_bytes: None,
        },
    }
}

fn measure_cpu(batch: usize, context: usize, width: usize, dtype: DType) -> MeasurementDocument {
    let plan = Plan::new(options(batch, context, width, dtype)).unwrap();
    let mut device = CpuDevice::new(ToolInfo::new(None));
    run(&mut device, &plan, info(), Mode::Measure, &mut Silent)
}

fn assert_protocol_invariants(doc: &MeasurementDocument) {
    let order: Vec<(Phase, usize)> = doc.phases.iter().map(|r| (r.phase, r.index)).collect();
    let mut expected = vec![
        (Phase::ModelLoad, 0),
        (Phase::Inputs, 0),
        (Phase::ColdForward, 0),
        (Phase::Warmup, 0),
    ];
    expected.extend((0..doc.configuration.repeats).map(|i| (Phase::WarmForward, i)));
    assert_eq!(order, expected);
    for r in &doc.phases {
        let m = &r.memory;
        assert!(m.end_allocated_bytes <= m.end_reserved_bytes, "{r:?}");
        assert!(m.peak_allocated_bytes <= m.peak_reserved_bytes, "{r:?}");
        assert!(
            m.peak_allocated_bytes >= m.baseline_allocated_bytes,
            "{r:?}"
        );
        assert!(m.peak_allocated_bytes >= m.end_allocated_bytes, "{r:?}");
        assert!(m.peak_reserved_bytes >= m.end_reserved_bytes, "{r:?}");
        assert!(
            m.end_reserved_bytes >= m.baseline_reserved_bytes,
            "reserved never shrinks: {r:?}"
        );
        assert!(m.peak_requested_bytes <= m.peak_allocated_bytes, "{r:?}");
        assert!(r.wall_seconds >= 0.0 && r.device_seconds.is_none());
    }
}

fn round512(b: u64) -> u64 {
    b.div_ceil(512).max(1) * 512
}

#[test]
fn small_float32_run_matches_the_hand_computed_counters() {
    let doc = measure_cpu(1, 16, 64, DType::Float32);
    assert!(doc.complete, "{:?}", doc.error);
    assert_protocol_invariants(&doc);
    // w1 256x64, b1 256, w2 64x256, b2 64, float32, each rounded up to 512 bytes.
    let params = [256 * 64 * 4, 256 * 4, 64 * 256 * 4, 64 * 4].map(round512);
    assert_eq!(params.iter().sum::<u64>(), 132_608);
    let load = &doc.phases[0].memory;
    assert_eq!(load.end_allocated_bytes, 132_608);
    assert_eq!(load.end_requested_bytes, 132_352);
    assert_eq!(
        load.end_reserved_bytes,
        2 << 20,
        "all small: one 2 MiB segment"
    );
    // The input [16, 64] float32 = 4096 bytes.
    assert_eq!(doc.phases[1].memory.end_allocated_bytes, 132_608 + 4096);
    // A forward pass: linear1 out 16x256x4 = 16 KiB, gelu out 16 KiB, output 16x64x4 = 4 KiB.
    // Peak while gelu runs: base + 16 KiB + 16 KiB; at linear2: base + 16 KiB (gelu) + 4 KiB.
    let cold = &doc.phases[2].memory;
    assert_eq!(cold.baseline_allocated_bytes, 136_704);
    assert_eq!(cold.peak_allocated_bytes, 136_704 + 32_768);
    assert_eq!(
        cold.end_allocated_bytes,
        136_704 + 4096,
        "the output is alive at the end"
    );
    // The output was freed before the next phase.
    assert_eq!(doc.phases[3].memory.baseline_allocated_bytes, 136_704);
    let check = doc.check.unwrap();
    assert!(check.passed && check.relative_error < 1e-5, "{check:?}");
}

#[test]
fn half_types_pass_their_bounds_and_halve_the_bytes() {
    for dtype in [DType::Float16, DType::Bfloat16] {
        let doc = measure_cpu(1, 16, 64, dtype);
        assert!(doc.complete, "{dtype}: {:?}", doc.error);
        assert_protocol_invariants(&doc);
        let params = [256 * 64 * 2, 256 * 2, 64 * 256 * 2, 64 * 2].map(round512);
        assert_eq!(
            doc.phases[0].memory.end_allocated_bytes,
            params.iter().sum::<u64>()
        );
        let check = doc.check.unwrap();
        assert!(
            check.relative_error > 1e-5,
            "{dtype} rounding must show: {check:?}"
        );
        assert!(check.passed, "{dtype}: {check:?}");
    }
}

#[test]
fn larger_case_uses_large_segments_and_passes() {
    let doc = measure_cpu(2, 128, 1024, DType::Float32);
    assert!(doc.complete, "{:?}", doc.error);
    assert_protocol_invariants(&doc);
    // w1 is 4096x1024x4 = 16 MiB: a large request in its own 16 MiB segment (>= 10 MiB: rounded
    // to 2 MiB); b1 16 KiB small; w2 16 MiB; b2 4 KiB small.
    let load = &doc.phases[0].memory;
    assert_eq!(load.end_allocated_bytes, (16 << 20) * 2 + 16_384 + 4096);
    assert_eq!(load.end_reserved_bytes, (16 << 20) * 2 + (2 << 20));
    let check = doc.check.unwrap();
    assert!(check.passed, "{check:?}");
}

#[test]
fn preflight_predicts_the_measured_peak() {
    for (b, c, w, dtype) in [(1, 16, 64, DType::Float32), (2, 128, 1024, DType::Bfloat16)] {
        let plan = Plan::new(options(b, c, w, dtype)).unwrap();
        let doc = measure_cpu(b, c, w, dtype);
        let measured = doc
            .phases
            .iter()
            .map(|r| r.memory.peak_reserved_bytes)
            .max()
            .unwrap();
        let cpu_policy = CpuDevice::new(ToolInfo::new(None)).memory_policy();
        assert_eq!(
            preflight::estimate_peak_reserved(&plan, &cpu_policy),
            measured
        );
        // The GPU's two workspaces add to the prediction.
        let gpu = gpu_policy();
        assert!(preflight::estimate_peak_reserved(&plan, &gpu) > measured);
    }
}

fn gpu_policy() -> MemoryPolicy {
    MemoryPolicy::for_gpu(&WorkspaceOptions::default(), 9, 0)
}

/// A device that records the allocation sequence the runner asks of it (what, bytes, in order),
/// in front of another device.
struct Recording<D: Device> {
    inner: D,
    names: std::collections::HashMap<u64, (String, u64)>,
    log: Vec<(Action, String, u64)>,
}

impl<D: Device> Device for Recording<D> {
    fn environment(&self) -> Environment {
        self.inner.environment()
    }
    fn memory_policy(&self) -> MemoryPolicy {
        self.inner.memory_policy()
    }
    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
    fn reset_peaks(&mut self) {
        self.inner.reset_peaks();
    }
    fn device_memory(&mut self) -> Result<Option<DeviceMemory>, DeviceError> {
        self.inner.device_memory()
    }
    fn allocate(
        &mut self,
        rows: usize,
        cols: usize,
        dtype: DType,
        what: &str,
    ) -> Result<Tensor, DeviceError> {
        let t = self.inner.allocate(rows, cols, dtype, what)?;
        self.log
            .push((Action::Allocate, what.to_string(), t.bytes()));
        self.names.insert(t.id, (what.to_string(), t.bytes()));
        Ok(t)
    }
    fn free(&mut self, tensor: Tensor) {
        if let Some((what, bytes)) = self.names.remove(&tensor.id) {
            self.log.push((Action::Free, what, bytes));
        }
        self.inner.free(tensor)
    }
    fn upload(&mut self, tensor: &Tensor, values: &[f32]) -> Result<(), DeviceError> {
        self.inner.upload(tensor, values)
    }
    fn fill_inputs(&mut self, tensor: &Tensor, seed: u64) -> Result<(), DeviceError> {
        self.inner.fill_inputs(tensor, seed)
    }
    fn linear(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        out: &Tensor,
        tf32: bool,
    ) -> Result<(), DeviceError> {
        self.inner.linear(x, w, b, out, tf32)
    }
    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError> {
        self.inner.gelu(x, out)
    }
    fn read_rows(&mut self, tensor: &Tensor, rows: &[usize]) -> Result<Vec<f32>, DeviceError> {
        self.inner.read_rows(tensor, rows)
    }
    fn start_clock(&mut self) -> Result<(), DeviceError> {
        self.inner.start_clock()
    }
    fn stop_clock(&mut self) -> Result<Option<f64>, DeviceError> {
        self.inner.stop_clock()
    }
}

#[test]
fn the_cpu_run_and_the_gpu_plan_share_one_allocation_sequence() {
    for (b, c, w, dtype, warmup) in [
        (1, 16, 64, DType::Float32, 1),
        (2, 8, 96, DType::Bfloat16, 3),
    ] {
        let mut o = options(b, c, w, dtype);
        o.warmup = warmup;
        let plan = Plan::new(o).unwrap();
        let mut cpu = Recording {
            inner: CpuDevice::new(ToolInfo::new(None)),
            names: Default::default(),
            log: Vec::new(),
        };
        let doc = run(&mut cpu, &plan, info(), Mode::Measure, &mut Silent);
        assert!(doc.complete, "{:?}", doc.error);
        let planned = preflight::plan_run(&plan, &gpu_policy());
        let workspaces = [CUBLAS_WORKSPACE, CUBLASLT_WORKSPACE];
        let shared: Vec<(Action, String, u64)> = planned
            .allocations
            .iter()
            .filter(|a| !workspaces.contains(&a.event.what.as_str()))
            .map(|a| {
                (
                    a.event.action,
                    a.event.what.clone(),
                    a.event.requested_bytes,
                )
            })
            .collect();
        // Up to the last free after the check, outside any phase.
        assert_eq!(shared, cpu.log, "{b}x{c}x{w} {dtype}");
        assert!(
            planned.allocations[planned.allocations.len() - 6..]
                .iter()
                .all(|a| a.phase.is_none() && a.event.action == Action::Free),
            "the last output, the inputs and the four weights are freed after the last phase"
        );
        // The workspaces come right after the first output, cuBLAS's first, then cuBLASLt's.
        let first_output = planned
            .allocations
            .iter()
            .position(|a| a.event.what == "linear1 output")
            .unwrap();
        let names: Vec<(&str, Option<Phase>, u64)> = planned.allocations
            [first_output + 1..first_output + 3]
            .iter()
            .map(|a| (a.event.what.as_str(), a.phase, a.event.requested_bytes))
            .collect();
        assert_eq!(
            names,
            [
                (CUBLAS_WORKSPACE, Some(Phase::ColdForward), 33_554_432),
                (CUBLASLT_WORKSPACE, Some(Phase::ColdForward), 1 << 20)
            ]
        );
        assert_eq!(
            planned
                .allocations
                .iter()
                .filter(|a| workspaces.contains(&a.event.what.as_str()))
                .count(),
            2,
            "the workspaces are allocated once and kept"
        );
    }
}

#[test]
fn the_plan_labels_every_step_with_its_phase_in_order() {
    let plan = Plan::new(options(1, 16, 64, DType::Float16)).unwrap();
    let planned = preflight::plan_run(&plan, &gpu_policy());
    let phases: Vec<(Phase, usize)> = planned.phases.iter().map(|r| (r.phase, r.index)).collect();
    let mut seen: Vec<(Phase, usize)> = Vec::new();
    for a in &planned.allocations {
        if let Some(phase) = a.phase
            && seen.last() != Some(&(phase, a.index))
        {
            seen.push((phase, a.index));
        }
    }
    assert_eq!(seen, phases);
    // model_load: four parameters, all small, the first one opening a 2 MiB segment.
    let load: Vec<&PlannedAllocation> = planned
        .allocations
        .iter()
        .filter(|a| a.phase == Some(Phase::ModelLoad))
        .collect();
    assert_eq!(load.len(), 4);
    assert_eq!(load[0].event.new_segment_bytes, 2 << 20);
    assert!(load[1..].iter().all(|a| a.event.new_segment_bytes == 0));
    assert!(load.iter().all(|a| a.event.pool == PoolName::Small));
    // The 32 MiB cuBLAS workspace gets a segment of its own in the large pool.
    let ws = planned
        .allocations
        .iter()
        .find(|a| a.event.what == CUBLAS_WORKSPACE)
        .unwrap();
    assert_eq!(
        (ws.event.pool, ws.event.new_segment_bytes),
        (PoolName::Large, 32 << 20)
    );
}

#[test]
fn preflight_refuses_with_the_figures() {
    assert!(preflight::check_fits(100, Some(100), 1.0).is_ok());
    assert!(preflight::check_fits(100, None, 1.0).is_ok());
    let err = preflight::check_fits(2 << 30, Some(1 << 30), 0.9).unwrap_err();
    assert_eq!(err.limit, 966_367_641);
    let text = err.to_string();
    assert!(
        text.contains("2147483648 bytes") && text.contains("x 0.9"),
        "{text}"
    );
}

/// A CPU device that fails every allocation from a chosen phase on (phases are counted by the
/// runner's one `reset_peaks` call per phase). Test-only: never a device a user can choose.
struct Scripted {
    inner: CpuDevice,
    phase: usize,
    fail_in: usize,
    fail_with: DeviceError,
}

impl Device for Scripted {
    fn environment(&self) -> Environment {
        self.inner.environment()
    }
    fn memory_policy(&self) -> MemoryPolicy {
        self.inner.memory_policy()
    }
    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
    fn reset_peaks(&mut self) {
        self.phase += 1;
        self.inner.reset_peaks();
    }
    fn device_memory(&mut self) -> Result<Option<DeviceMemory>, DeviceError> {
        self.inner.device_memory()
    }
    fn allocate(
        &mut self,
        rows: usize,
        cols: usize,
        dtype: DType,
        what: &str,
    ) -> Result<Tensor, DeviceError> {
        if self.phase == self.fail_in {
            let mut e = self.fail_with.clone();
            if let DeviceError::OutOfMemory {
                what: w,
                requested,
                allocated,
                reserved,
            } = &mut e
            {
                *w = what.to_string();
                *requested = (rows * cols) as u64 * dtype.size_bytes();
                let s = self.inner.stats().all;
                *allocated = s.allocated.current;
                *reserved = s.reserved.current;
            }
            return Err(e);
        }
        self.inner.allocate(rows, cols, dtype, what)
    }
    fn free(&mut self, tensor: Tensor) {
        self.inner.free(tensor)
    }
    fn upload(&mut self, tensor: &Tensor, values: &[f32]) -> Result<(), DeviceError> {
        self.inner.upload(tensor, values)
    }
    fn fill_inputs(&mut self, tensor: &Tensor, seed: u64) -> Result<(), DeviceError> {
        self.inner.fill_inputs(tensor, seed)
    }
    fn linear(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        out: &Tensor,
        tf32: bool,
    ) -> Result<(), DeviceError> {
        self.inner.linear(x, w, b, out, tf32)
    }
    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError> {
        self.inner.gelu(x, out)
    }
    fn read_rows(&mut self, tensor: &Tensor, rows: &[usize]) -> Result<Vec<f32>, DeviceError> {
        self.inner.read_rows(tensor, rows)
    }
    fn start_clock(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn stop_clock(&mut self) -> Result<Option<f64>, DeviceError> {
        Ok(None)
    }
}

fn oom() -> DeviceError {
    DeviceError::OutOfMemory {
        what: String::new(),
        requested: 0,
        allocated: 0,
        reserved: 0,
    }
}

#[test]
fn a_failure_in_any_phase_keeps_the_finished_rows_and_names_the_phase() {
    let phases = [
        Phase::ModelLoad,
        Phase::Inputs,
        Phase::ColdForward,
        Phase::Warmup,
        Phase::WarmForward,
    ];
    for (i, phase) in phases.into_iter().enumerate() {
        let plan = Plan::new(options(1, 16, 64, DType::Float32)).unwrap();
        let mut device = Scripted {
            inner: CpuDevice::new(ToolInfo::new(None)),
            phase: 0,
            fail_in: i + 1,
            fail_with: oom(),
        };
        let doc = run(&mut device, &plan, info(), Mode::Measure, &mut Silent);
        assert!(!doc.complete);
        assert_eq!(
            doc.phases.len(),
            i,
            "rows of the {i} finished phases are kept"
        );
        let err = doc.error.expect("an error");
        assert_eq!(err.phase, Some(phase));
        assert_eq!(err.kind, "out_of_memory");
        assert!(err.message.contains(phase.name()), "{}", err.message);
        assert!(err.message.contains("bytes"), "{}", err.message);
        assert!(doc.check.is_none());
        // Everything the run allocated was given back, even on the failure path.
        assert_eq!(device.stats().all.allocated.current, 0);
    }
    let plan = Plan::new(options(1, 16, 64, DType::Float32)).unwrap();
    let mut device = Scripted {
        inner: CpuDevice::new(ToolInfo::new(None)),
        phase: 0,
        fail_in: 3,
        fail_with: DeviceError::Backend("CUBLAS_STATUS_EXECUTION_FAILED".into()),
    };
    let doc = run(&mut device, &plan, info(), Mode::Measure, &mut Silent);
    let err = doc.error.unwrap();
    assert_eq!(
        (err.kind.as_str(), err.phase),
        ("device", Some(Phase::ColdForward))
    );
}

#[test]
fn a_bounded_cpu_device_runs_out_of_memory_for_real() {
    // 2 MiB of segments hold the small model's parameters but not the 16 MiB weights of a
    // width-1024 model: the real allocator and source fail inside model_load.
    let plan = Plan::new(options(1, 16, 1024, DType::Float32)).unwrap();
    let mut device = CpuDevice::with_source(
        ToolInfo::new(None),
        lab_cpu::HostSegments::with_limit(4 << 20),
    );
    let doc = run(&mut device, &plan, info(), Mode::Measure, &mut Silent);
    let err = doc.error.unwrap();
    assert_eq!(
        (err.kind.as_str(), err.phase),
        ("out_of_memory", Some(Phase::ModelLoad))
    );
    assert!(err.message.contains("linear1.weight"), "{}", err.message);
    assert_eq!(device.stats().ooms, 1);
}

#[test]
fn warmup_of_zero_still_has_its_row_and_several_overlap_outputs() {
    let mut o = options(1, 16, 64, DType::Float32);
    o.warmup = 0;
    let plan = Plan::new(o).unwrap();
    let mut device = CpuDevice::new(ToolInfo::new(None));
    let doc = run(&mut device, &plan, info(), Mode::Measure, &mut Silent);
    assert!(doc.complete);
    assert_protocol_invariants(&doc);
    let warmup = &doc.phases[3].memory;
    assert_eq!(warmup.peak_allocated_bytes, warmup.baseline_allocated_bytes);

    let mut o = options(1, 16, 64, DType::Float32);
    o.warmup = 3;
    let plan = Plan::new(o).unwrap();
    let mut device = CpuDevice::new(ToolInfo::new(None));
    let doc = run(&mut device, &plan, info(), Mode::Measure, &mut Silent);
    // While pass 2 runs, pass 1's 4 KiB output is still alive (as `y = model(x)` in a loop).
    let w = &doc.phases[3].memory;
    assert_eq!(
        w.peak_allocated_bytes,
        w.baseline_allocated_bytes + 4096 + 32_768
    );
}

#[test]
fn the_same_seed_gives_the_same_outputs_and_another_seed_does_not() {
    let plan = Plan::new(options(1, 4, 32, DType::Float32)).unwrap();
    let a = run(
        &mut CpuDevice::new(ToolInfo::new(None)),
        &plan,
        info(),
        Mode::Measure,
        &mut Silent,
    );
    let b = run(
        &mut CpuDevice::new(ToolInfo::new(None)),
        &plan,
        info(),
        Mode::Measure,
        &mut Silent,
    );
    assert_eq!(
        a.check.as_ref().unwrap().max_abs_error,
        b.check.as_ref().unwrap().max_abs_error
    );
    let mut o = options(1, 4, 32, DType::Float32);
    o.seed = 1;
    let plan1 = Plan::new(o).unwrap();
    let c = run(
        &mut CpuDevice::new(ToolInfo::new(None)),
        &plan1,
        info(),
        Mode::Measure,
        &mut Silent,
    );
    assert!(c.complete);
}
