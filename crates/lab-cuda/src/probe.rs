//! `probe` on NVIDIA GPUs: copy bandwidth and dense matrix throughput, each figure the median of
//! repeated samples timed with CUDA events, within a time budget per GPU.
//!
//! Per GPU, one after the other or all at once (`concurrent`), each on its own context, stream
//! and thread: host-to-device and device-to-host copies from pinned and from pageable host
//! memory, a device-to-device copy, then square products per data type (float32 strict, TF32,
//! float16, bfloat16, and FP8 E4M3 on compute capability 8.9 and newer) through cuBLASLt, made
//! with [`crate::blaslt`]'s plan once and run many times. Then, with two GPUs or more, a copy
//! between every ordered pair. Each sample is one operation between two events on the stream
//! (host enqueue time is outside it); the sampling rule, the statistics and the comparison with
//! the datasheet are `lab::probe`'s.

use std::ffi::c_void;

use cudarc::driver::sys::{CUcontext, CUevent, CUstream};
use lab::lot::{GpuFacts, PeerAccess};
use lab::probe::timing::{Clock, Monotonic, SamplePlan, sample, slice};
use lab::probe::{CopyFigure, CopyKind, DeviceProbe, FigureStatus, GemmFigure, PcieLinkState};
use lab::tool::ToolInfo;
use rent::datasheet::{Datasheet, DatasheetRow, GemmKind};

use crate::blas::{Blas, Handle};
use crate::blaslt::{
    COMPUTE_32F, COMPUTE_32F_FAST_TF32, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_32F, LtPlan,
    MatmulSpec, Operands, Workspace,
};
use crate::copies::CopyApi;
use crate::driver::{CuDevice, DevicePtr, Driver};
use crate::environment::{MIN_COMPUTE_CAPABILITY, environment};
use crate::error::CudaError;
use crate::loader;
use crate::lot::gpu_facts;
use crate::nvml;

/// The cuBLASLt workspace of the products: 32 MiB, what PyTorch gives cuBLAS on Hopper.
pub const GEMM_WORKSPACE_BYTES: u64 = 32 << 20;
/// Host bytes generated once and copied as often as needed to fill a product's inputs.
const FILL_CHUNK_BYTES: usize = 16 << 20;
/// The products use at most this share of the GPU's free memory.
const GEMM_MEMORY_SHARE: f64 = 0.5;
/// The share of the budget the GPUs' own figures get when peer copies follow.
const DEVICE_SHARE_WITH_PEERS: f64 = 0.8;

/// How to probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// The time budget per GPU, seconds.
    pub seconds_per_gpu: f64,
    /// All GPUs at once.
    pub concurrent: bool,
    /// Bytes of one timed copy.
    pub copy_bytes: u64,
    /// The products' size, when given.
    pub gemm_size: Option<u64>,
    /// Samples per figure.
    pub plan: SamplePlan,
}

/// Told about each figure as it finishes (a progress line on a terminal).
pub trait ProbeProgress: Sync {
    /// `device` finished `figure`: `summary` is a few words with the result.
    fn figure(&self, device: &str, figure: &str, summary: &str);
}

/// What the GPU probe found; the caller puts it in a `lab::probe::ProbeDocument`.
#[derive(Debug)]
pub struct GpuProbe {
    /// GPUs the driver sees.
    pub visible: usize,
    /// One per GPU probed.
    pub devices: Vec<DeviceProbe>,
    /// Which pairs can reach each other's memory.
    pub peer_access: Vec<PeerAccess>,
    /// Peer copies, one per ordered pair.
    pub peers: Vec<CopyFigure>,
}

/// A context handle moved to the thread that probes its GPU (the driver's contexts may be made
/// current on any thread).
#[derive(Clone, Copy)]
struct Ctx(CUcontext);
// SAFETY: a CUcontext is a handle the driver lets any thread make current; each is used by one
// thread at a time here (one per GPU, joined before the next use).
unsafe impl Send for Ctx {}
// SAFETY: as above; shared references only read the handle value.
unsafe impl Sync for Ctx {}

struct Gpu {
    ordinal: usize,
    dev: CuDevice,
    ctx: Ctx,
    cc: (i32, i32),
    facts: Option<GpuFacts>,
    row: Option<DatasheetRow>,
}

/// A GPU asked for: its ordinal, handle and compute capability.
type Opened = (usize, CuDevice, (i32, i32));

/// Checks every GPU asked for: an error here means no usable GPU (nothing has been measured yet).
fn open(driver: &Driver, ordinals: &[usize]) -> Result<Vec<Opened>, CudaError> {
    let mut out = Vec::new();
    for &ordinal in ordinals {
        let dev = driver.device(ordinal)?;
        let f = driver.facts(dev)?;
        if (f.major, f.minor) < MIN_COMPUTE_CAPABILITY {
            return Err(CudaError::UnsupportedGpu {
                ordinal,
                name: f.name,
                major: f.major,
                minor: f.minor,
            });
        }
        out.push((ordinal, dev, (f.major, f.minor)));
    }
    Ok(out)
}

/// Probes the GPUs `ordinals` (all, in order, when empty). Errors before any figure is taken
/// mean no usable GPU: no driver, a wrong ordinal, a GPU older than compute capability 8.0, no
/// cuBLAS.
pub fn probe_gpus(
    ordinals: &[usize],
    tool: &ToolInfo,
    datasheet: &Datasheet,
    options: &ProbeOptions,
    progress: &dyn ProbeProgress,
) -> Result<GpuProbe, CudaError> {
    let driver = Driver::load()?;
    let visible = driver.device_count()?;
    if visible == 0 {
        return Err(CudaError::NoDevice {
            path: driver.path.clone(),
        });
    }
    let ordinals: Vec<usize> = if ordinals.is_empty() {
        (0..visible).collect()
    } else {
        ordinals.to_vec()
    };
    let opened = open(&driver, &ordinals)?;
    let blas = Blas::new(loader::load_blas(driver.version)?)?;
    let api = CopyApi::load(&driver)?;
    let nvml = nvml::open().ok();
    let mut gpus = Vec::new();
    for (ordinal, dev, cc) in opened {
        let facts = gpu_facts(&driver, nvml.as_ref(), ordinal).ok();
        let row = facts
            .as_ref()
            .and_then(|f| datasheet.for_cuda_name(&f.name))
            .cloned();
        let ctx = driver.retain_primary_context(dev)?;
        gpus.push(Gpu {
            ordinal,
            dev,
            ctx: Ctx(ctx),
            cc,
            facts,
            row,
        });
    }
    let share = if gpus.len() > 1 {
        DEVICE_SHARE_WITH_PEERS
    } else {
        1.0
    };
    let device_seconds = options.seconds_per_gpu * share;
    let environments: Vec<_> = gpus
        .iter()
        .map(|g| environment(g.ordinal, tool.clone()))
        .collect();
    let mut devices: Vec<DeviceProbe> = if options.concurrent && gpus.len() > 1 {
        std::thread::scope(|scope| {
            let handles: Vec<_> = gpus
                .iter()
                .map(|g| {
                    let (driver, blas, api) = (&driver, &blas, &api);
                    scope.spawn(move || {
                        probe_device(driver, blas, api, g, device_seconds, options, progress)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Measured::failed("the probe thread panicked"))
                })
                .collect::<Vec<Measured>>()
        })
        .into_iter()
        .zip(environments)
        .zip(&gpus)
        .map(|((m, env), g)| m.into_device(g, env))
        .collect()
    } else {
        gpus.iter()
            .zip(environments)
            .map(|(g, env)| {
                probe_device(&driver, &blas, &api, g, device_seconds, options, progress)
                    .into_device(g, env)
            })
            .collect()
    };
    // The link right after the copies: an idle GPU may have lowered it again since.
    if let Some(h) = &nvml {
        for (d, g) in devices.iter_mut().zip(&gpus) {
            if let Some(uuid) = g
                .facts
                .as_ref()
                .filter(|f| f.nvml_matched)
                .map(|f| f.uuid.clone())
            {
                let mut now = GpuFacts::default();
                h.fill_facts(&uuid, &mut now);
                if let (Some(generation), Some(width)) = (now.pcie_generation, now.pcie_width) {
                    d.pcie_after_copies = Some(PcieLinkState { generation, width });
                }
            }
        }
    }
    let mut peer_access = Vec::new();
    let mut peers = Vec::new();
    if gpus.len() > 1 {
        let pairs = gpus.len() * (gpus.len() - 1);
        let clock = Monotonic::start();
        let deadline = options.seconds_per_gpu * (1.0 - share) * gpus.len() as f64;
        let mut left = pairs;
        for a in &gpus {
            for b in &gpus {
                if a.ordinal == b.ordinal {
                    continue;
                }
                let can = api.can_access_peer(&driver, a.dev, b.dev).unwrap_or(false);
                peer_access.push(PeerAccess {
                    from: format!("cuda:{}", a.ordinal),
                    to: format!("cuda:{}", b.ordinal),
                    can_access: can,
                });
                let budget = slice(deadline - clock.now(), left);
                left -= 1;
                let mut fig =
                    peer_copy(&driver, &api, a, b, can, options, &clock, deadline, budget);
                if !can {
                    fig.note = Some(
                        "the driver reports no peer access: the copy is staged through host memory"
                            .to_string(),
                    );
                }
                progress.figure(
                    &fig.from,
                    &format!("p2p -> {}", fig.to),
                    &copy_summary(&fig),
                );
                peers.push(fig);
            }
        }
    }
    for g in &gpus {
        let _ = driver.set_current(g.ctx.0);
        let _ = driver.ctx_synchronize();
        driver.release_primary_context(g.dev);
    }
    Ok(GpuProbe {
        visible,
        devices,
        peer_access,
        peers,
    })
}

/// What one GPU's thread measured.
struct Measured {
    copies: Vec<CopyFigure>,
    gemms: Vec<GemmFigure>,
    seconds: f64,
    error: Option<String>,
}

impl Measured {
    fn failed(why: &str) -> Measured {
        Measured {
            copies: Vec::new(),
            gemms: Vec::new(),
            seconds: 0.0,
            error: Some(why.to_string()),
        }
    }

    fn into_device(self, g: &Gpu, environment: lab::environment::Environment) -> DeviceProbe {
        DeviceProbe {
            device: format!("cuda:{}", g.ordinal),
            environment,
            facts: g.facts.clone(),
            datasheet: None,
            copies: self.copies,
            gemms: self.gemms,
            pcie_after_copies: None,
            elapsed_seconds: self.seconds,
            error: self.error,
        }
    }
}

/// Device memory freed (with its context current, after waiting for it) when dropped.
struct DeviceBuffer<'d> {
    driver: &'d Driver,
    ctx: CUcontext,
    ptr: DevicePtr,
}

impl<'d> DeviceBuffer<'d> {
    fn new(driver: &'d Driver, ctx: CUcontext, bytes: u64) -> Result<DeviceBuffer<'d>, CudaError> {
        driver.set_current(ctx)?;
        let ptr = driver.mem_alloc(bytes.max(1))?;
        Ok(DeviceBuffer { driver, ctx, ptr })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        let _ = self.driver.set_current(self.ctx);
        let _ = self.driver.ctx_synchronize();
        // SAFETY: allocated by `new`, freed once, and nothing queued uses it after the
        // synchronisation above.
        let _ = unsafe { self.driver.mem_free(self.ptr) };
    }
}

/// A stream and two timing events on the current context, destroyed when dropped.
struct Timer<'d> {
    driver: &'d Driver,
    stream: CUstream,
    start: CUevent,
    stop: CUevent,
}

impl<'d> Timer<'d> {
    fn new(driver: &'d Driver) -> Result<Timer<'d>, CudaError> {
        let stream = driver.stream_create()?;
        let start = driver.event_create();
        let stop = driver.event_create();
        match (start, stop) {
            (Ok(start), Ok(stop)) => Ok(Timer {
                driver,
                stream,
                start,
                stop,
            }),
            (a, b) => {
                for e in [a.as_ref().ok(), b.as_ref().ok()].into_iter().flatten() {
                    driver.event_destroy(*e);
                }
                driver.stream_destroy(stream);
                Err(a.and(b).err().unwrap_or(CudaError::Kernels {
                    arch: String::new(),
                    reason: "event creation failed".into(),
                }))
            }
        }
    }

    /// Seconds `op` takes on the stream, between two events (waits for the second).
    fn time(&self, op: impl FnOnce(CUstream) -> Result<(), CudaError>) -> Result<f64, CudaError> {
        self.driver.event_record(self.start, self.stream)?;
        op(self.stream)?;
        self.driver.event_record(self.stop, self.stream)?;
        Ok(f64::from(self.driver.elapsed_ms(self.start, self.stop)?) / 1000.0)
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let _ = self.driver.stream_synchronize(self.stream);
        self.driver.event_destroy(self.start);
        self.driver.event_destroy(self.stop);
        self.driver.stream_destroy(self.stream);
    }
}

fn copy_summary(c: &CopyFigure) -> String {
    match (c.status, c.gb_per_s) {
        (FigureStatus::Measured, Some(r)) => format!("{r:.1} GB/s"),
        _ => format!(
            "{}: {}",
            match c.status {
                FigureStatus::Failed => "failed",
                _ => "skipped",
            },
            c.note.as_deref().unwrap_or("")
        ),
    }
}

fn gemm_summary(g: &GemmFigure) -> String {
    match (g.status, g.tflops) {
        (FigureStatus::Measured, Some(t)) => format!("{t:.1} TFLOP/s at {}^3", g.n),
        _ => format!(
            "{}: {}",
            match g.status {
                FigureStatus::Failed => "failed",
                _ => "skipped",
            },
            g.note.as_deref().unwrap_or("")
        ),
    }
}

/// The products a GPU of compute capability `cc` runs.
pub fn gemm_kinds(cc: (i32, i32)) -> Vec<GemmKind> {
    GemmKind::ALL
        .into_iter()
        .filter(|k| *k != GemmKind::Float8E4m3 || cc >= (8, 9))
        .collect()
}

/// (`cudaDataType` of A and B, of C/D, compute type, bytes per element of A/B, of C/D).
fn gemm_types(kind: GemmKind) -> (i32, i32, i32, u64, u64) {
    match kind {
        GemmKind::Float32 => (CUDA_R_32F, CUDA_R_32F, COMPUTE_32F, 4, 4),
        GemmKind::Tf32 => (CUDA_R_32F, CUDA_R_32F, COMPUTE_32F_FAST_TF32, 4, 4),
        GemmKind::Float16 => (2, 2, COMPUTE_32F, 2, 2),
        GemmKind::Bfloat16 => (CUDA_R_16BF, CUDA_R_16BF, COMPUTE_32F, 2, 2),
        GemmKind::Float8E4m3 => (CUDA_R_8F_E4M3, CUDA_R_16BF, COMPUTE_32F, 1, 2),
    }
}

/// How a product kind runs, for the document.
fn gemm_math(kind: GemmKind) -> String {
    let what = match kind {
        GemmKind::Float32 => "float32 inputs and output, CUBLAS_COMPUTE_32F (strict float32)",
        GemmKind::Tf32 => "float32 inputs and output, CUBLAS_COMPUTE_32F_FAST_TF32",
        GemmKind::Float16 => "float16 inputs and output, CUBLAS_COMPUTE_32F",
        GemmKind::Bfloat16 => "bfloat16 inputs and output, CUBLAS_COMPUTE_32F",
        GemmKind::Float8E4m3 => {
            "FP8 E4M3 inputs, bfloat16 output, CUBLAS_COMPUTE_32F, CUBLASLT_MATMUL_DESC_FAST_ACCUM, unit scales"
        }
    };
    format!(
        "one cublasLtMatmul per sample (A transposed, as a Linear's weight), {what}, the heuristic's first algorithm, a {} MiB workspace",
        GEMM_WORKSPACE_BYTES >> 20
    )
}

/// The square size of a product: `--gemm-size` when given; else the smallest power of two from
/// 4096 to 16384 that keeps one product at least 2 ms at the datasheet's peak (8192 without a
/// datasheet row); halved until its three matrices fit in half the free memory.
pub fn gemm_size(
    kind: GemmKind,
    row: Option<&DatasheetRow>,
    requested: Option<u64>,
    free_bytes: u64,
) -> u64 {
    let (_, _, _, ab, cd) = gemm_types(kind);
    let mut n = match (requested, row.and_then(|r| r.tflops(kind))) {
        (Some(n), _) => return n,
        (None, Some(peak)) => {
            let side = (peak * 1e12 * 2e-3 / 2.0).cbrt();
            (side.ceil() as u64).next_power_of_two().clamp(4096, 16384)
        }
        (None, None) => 8192,
    };
    let need = |n: u64| n * n * (2 * ab + cd);
    while n > 256 && need(n) as f64 > free_bytes as f64 * GEMM_MEMORY_SHARE {
        n /= 2;
    }
    n
}

/// Host values in [-1, 1) encoded for `kind`'s inputs, from a fixed-seed generator (the products
/// must not run on zeros, which some GPUs multiply faster).
fn fill_chunk(kind: GemmKind, bytes: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        let r = next();
        let v = (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        match kind {
            GemmKind::Float32 | GemmKind::Tf32 => out.extend_from_slice(&v.to_le_bytes()),
            GemmKind::Float16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            GemmKind::Bfloat16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            // E4M3 (bias 7): exponent fields 0 to 6 keep |x| below 1, never NaN.
            GemmKind::Float8E4m3 => {
                out.push(((r & 0x80) | (((r >> 8) % 7) << 3) | ((r >> 16) & 7)) as u8)
            }
        }
    }
    out.truncate(bytes);
    out
}

/// Copies `chunk` over `bytes` of device memory at `dst`, as often as it takes.
fn fill(
    driver: &Driver,
    stream: CUstream,
    dst: DevicePtr,
    bytes: u64,
    chunk: &[u8],
) -> Result<(), CudaError> {
    let mut done = 0u64;
    while done < bytes {
        let n = (bytes - done).min(chunk.len() as u64) as usize;
        // SAFETY: `dst + done .. + n` lies inside the allocation of `bytes`; `chunk` outlives
        // the synchronisation below.
        unsafe { driver.queue_copy_to_device(dst + done, chunk.as_ptr().cast(), n, stream) }?;
        done += n as u64;
    }
    driver.stream_synchronize(stream)
}

/// One GPU's copies and products, within `seconds`.
fn probe_device(
    driver: &Driver,
    blas: &Blas,
    api: &CopyApi,
    g: &Gpu,
    seconds: f64,
    options: &ProbeOptions,
    progress: &dyn ProbeProgress,
) -> Measured {
    let clock = Monotonic::start();
    let device = format!("cuda:{}", g.ordinal);
    let kinds = [
        CopyKind::H2dPinned,
        CopyKind::H2dPageable,
        CopyKind::D2hPinned,
        CopyKind::D2hPageable,
        CopyKind::D2d,
    ];
    let host = |k: CopyKind| match k {
        CopyKind::H2dPinned | CopyKind::D2hPinned => "host pinned",
        _ => "host pageable",
    };
    let mut copies: Vec<CopyFigure> = kinds
        .iter()
        .map(|&k| match k {
            CopyKind::H2dPinned | CopyKind::H2dPageable => {
                CopyFigure::new(k, host(k), &device, options.copy_bytes)
            }
            CopyKind::D2d => CopyFigure::new(k, &device, &device, options.copy_bytes),
            _ => CopyFigure::new(k, &device, host(k), options.copy_bytes),
        })
        .collect();
    let mut gemms: Vec<GemmFigure> = GemmKind::ALL
        .iter()
        .map(|&k| GemmFigure::square(k, options.gemm_size.unwrap_or(0), gemm_math(k)))
        .collect();
    let result = (|| -> Result<(), CudaError> {
        driver.set_current(g.ctx.0)?;
        let timer = Timer::new(driver)?;
        let figures_total = copies.len() + gemm_kinds(g.cc).len();
        let mut left = figures_total;
        copy_figures(
            driver,
            api,
            g,
            &timer,
            options,
            &clock,
            seconds,
            &mut left,
            &mut copies,
            progress,
            &device,
        );
        let (free, _) = driver.mem_get_info()?;
        gemm_figures(
            driver, blas, g, &timer, options, &clock, seconds, &mut left, free, &mut gemms,
            progress, &device,
        );
        Ok(())
    })();
    Measured {
        copies,
        gemms,
        seconds: clock.now(),
        error: result.err().map(|e| e.to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_figures(
    driver: &Driver,
    api: &CopyApi,
    g: &Gpu,
    timer: &Timer<'_>,
    options: &ProbeOptions,
    clock: &Monotonic,
    deadline: f64,
    left: &mut usize,
    copies: &mut [CopyFigure],
    progress: &dyn ProbeProgress,
    device: &str,
) {
    let bytes = options.copy_bytes;
    let skip_all =
        |copies: &mut [CopyFigure], status: FigureStatus, why: String, left: &mut usize| {
            for c in copies.iter_mut() {
                c.give_up(status, why.clone());
            }
            *left = left.saturating_sub(copies.len());
        };
    let Ok(len) = usize::try_from(bytes) else {
        skip_all(
            copies,
            FigureStatus::Skipped,
            format!("{bytes} bytes do not fit in host memory"),
            left,
        );
        return;
    };
    let buffers = DeviceBuffer::new(driver, g.ctx.0, bytes)
        .and_then(|a| Ok((a, DeviceBuffer::new(driver, g.ctx.0, bytes)?)))
        .and_then(|ab| Ok((ab, api.pinned(driver, len)?)));
    let ((a, b), mut pinned) = match buffers {
        Ok(x) => x,
        Err(e) => {
            skip_all(
                copies,
                FigureStatus::Skipped,
                format!("no room for the copy buffers ({e})"),
                left,
            );
            return;
        }
    };
    // Every page written before timing, so no copy pays for page faults.
    pinned.bytes_mut().fill(0xa5);
    let Some(mut pageable) = lab::host::filled_buffer(len, 0x5a) else {
        skip_all(
            copies,
            FigureStatus::Skipped,
            format!("no room in host memory for a pageable buffer of {bytes} bytes"),
            left,
        );
        return;
    };
    for copy in copies.iter_mut() {
        let budget = slice(deadline - clock.now(), *left);
        *left = left.saturating_sub(1);
        let pinned_ptr = pinned.as_ptr();
        let pageable_ptr = pageable.as_mut_ptr().cast::<c_void>();
        let (pinned_src, pageable_src) = (pinned_ptr.cast_const(), pageable_ptr.cast_const());
        let kind = copy.kind;
        let result = sample(clock, deadline, budget, &options.plan, || {
            timer.time(|stream| {
                // SAFETY (all arms): the device buffers hold `len` bytes each, the host buffers
                // `len` bytes, and all outlive the stop event this sample waits for.
                unsafe {
                    match kind {
                        CopyKind::H2dPinned => {
                            driver.queue_copy_to_device(a.ptr, pinned_src, len, stream)
                        }
                        CopyKind::H2dPageable => {
                            driver.queue_copy_to_device(a.ptr, pageable_src, len, stream)
                        }
                        CopyKind::D2hPinned => {
                            driver.queue_copy_to_host(pinned_ptr, a.ptr, len, stream)
                        }
                        CopyKind::D2hPageable => {
                            driver.queue_copy_to_host(pageable_ptr, a.ptr, len, stream)
                        }
                        _ => api.queue_device_copy(driver, b.ptr, a.ptr, len, stream),
                    }
                }
            })
        });
        match result {
            Ok(s) if s.samples.is_empty() => copy.give_up(
                FigureStatus::Skipped,
                "the time budget was spent before this figure".to_string(),
            ),
            Ok(s) => copy.record(&s.samples),
            Err(e) => copy.give_up(FigureStatus::Failed, e.to_string()),
        }
        progress.figure(device, kind.name(), &copy_summary(copy));
    }
}

#[allow(clippy::too_many_arguments)]
fn gemm_figures(
    driver: &Driver,
    blas: &Blas,
    g: &Gpu,
    timer: &Timer<'_>,
    options: &ProbeOptions,
    clock: &Monotonic,
    deadline: f64,
    left: &mut usize,
    free: u64,
    gemms: &mut [GemmFigure],
    progress: &dyn ProbeProgress,
    device: &str,
) {
    let runnable = gemm_kinds(g.cc);
    let (handle, workspace) = match gemm_setup(driver, blas, g, timer.stream) {
        Ok(x) => x,
        Err(e) => {
            for f in gemms.iter_mut() {
                f.give_up(FigureStatus::Failed, e.to_string());
            }
            return;
        }
    };
    for fig in gemms.iter_mut() {
        let kind = fig.kind;
        if !runnable.contains(&kind) {
            fig.give_up(
                FigureStatus::Skipped,
                format!(
                    "compute capability {}.{} has no FP8 tensor cores (8.9 and newer do)",
                    g.cc.0, g.cc.1
                ),
            );
            progress.figure(device, kind.name(), &gemm_summary(fig));
            continue;
        }
        let budget = slice(deadline - clock.now(), *left);
        *left = left.saturating_sub(1);
        if clock.now() >= deadline {
            fig.give_up(
                FigureStatus::Skipped,
                "the time budget was spent before this figure".to_string(),
            );
            progress.figure(device, kind.name(), &gemm_summary(fig));
            continue;
        }
        let n = gemm_size(kind, g.row.as_ref(), options.gemm_size, free);
        *fig = GemmFigure::square(kind, n, fig.math.clone());
        let outcome = run_gemm(
            driver,
            blas,
            handle,
            &workspace,
            g,
            timer,
            n,
            kind,
            clock,
            deadline,
            budget,
            &options.plan,
        );
        match outcome {
            Ok(s) if s.is_empty() => fig.give_up(
                FigureStatus::Skipped,
                "the time budget was spent before this figure".to_string(),
            ),
            Ok(s) => fig.record(&s),
            Err(e) => fig.give_up(FigureStatus::Failed, e.to_string()),
        }
        progress.figure(device, kind.name(), &gemm_summary(fig));
    }
    let _ = driver.stream_synchronize(timer.stream);
    let _ = blas.destroy_handle(handle);
    drop(workspace);
}

/// A cuBLAS handle on `stream` and the products' workspace.
fn gemm_setup<'d>(
    driver: &'d Driver,
    blas: &Blas,
    g: &Gpu,
    stream: CUstream,
) -> Result<(Handle, DeviceBuffer<'d>), CudaError> {
    let h = blas.create_handle()?;
    let rest = blas
        .set_stream(h, stream)
        .and_then(|()| DeviceBuffer::new(driver, g.ctx.0, GEMM_WORKSPACE_BYTES));
    match rest {
        Ok(ws) => Ok((h, ws)),
        Err(e) => {
            let _ = blas.destroy_handle(h);
            Err(e)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_gemm(
    driver: &Driver,
    blas: &Blas,
    handle: Handle,
    workspace: &DeviceBuffer<'_>,
    g: &Gpu,
    timer: &Timer<'_>,
    n: u64,
    kind: GemmKind,
    clock: &Monotonic,
    deadline: f64,
    budget: f64,
    plan: &SamplePlan,
) -> Result<Vec<f64>, CudaError> {
    let (ab_type, cd_type, compute, ab, cd) = gemm_types(kind);
    let a = DeviceBuffer::new(driver, g.ctx.0, n * n * ab)?;
    let b = DeviceBuffer::new(driver, g.ctx.0, n * n * ab)?;
    let d = DeviceBuffer::new(driver, g.ctx.0, n * n * cd)?;
    let chunk = fill_chunk(kind, FILL_CHUNK_BYTES.min((n * n * ab) as usize));
    fill(driver, timer.stream, a.ptr, n * n * ab, &chunk)?;
    fill(driver, timer.stream, b.ptr, n * n * ab, &chunk)?;
    let mut spec = MatmulSpec::product(n, n, n, ab_type, cd_type, compute);
    spec.fast_accum = kind == GemmKind::Float8E4m3;
    let ops = Operands {
        a: a.ptr,
        b: b.ptr,
        c: d.ptr,
        bias: None,
    };
    let ws = Workspace {
        ptr: workspace.ptr,
        bytes: GEMM_WORKSPACE_BYTES,
    };
    // SAFETY: the handle is live and bound to the timer's stream; the operands hold the
    // matrices `spec` describes; the workspace holds GEMM_WORKSPACE_BYTES; all outlive the plan.
    let lt_plan = unsafe { LtPlan::new(&blas.lt, handle, &spec, &ops, ws.bytes) }?;
    let sampled = sample(clock, deadline, budget, plan, || {
        // SAFETY: as above; each sample waits for its stop event.
        timer.time(|stream| unsafe { lt_plan.run(&ops, ws, stream) })
    })?;
    drop(lt_plan);
    Ok(sampled.samples)
}

#[allow(clippy::too_many_arguments)]
fn peer_copy(
    driver: &Driver,
    api: &CopyApi,
    from: &Gpu,
    to: &Gpu,
    can_access: bool,
    options: &ProbeOptions,
    clock: &Monotonic,
    deadline: f64,
    budget: f64,
) -> CopyFigure {
    let bytes = options.copy_bytes;
    let mut fig = CopyFigure::new(
        CopyKind::P2p,
        &format!("cuda:{}", from.ordinal),
        &format!("cuda:{}", to.ordinal),
        bytes,
    );
    let Ok(len) = usize::try_from(bytes) else {
        fig.give_up(
            FigureStatus::Skipped,
            format!("{bytes} bytes do not fit in this address space"),
        );
        return fig;
    };
    let run = (|| -> Result<Vec<f64>, CudaError> {
        let dst = DeviceBuffer::new(driver, to.ctx.0, bytes)?;
        let src = DeviceBuffer::new(driver, from.ctx.0, bytes)?;
        driver.set_current(from.ctx.0)?;
        if can_access {
            api.enable_peer_access(driver, to.ctx.0)?;
        }
        let timer = Timer::new(driver)?;
        let s = sample(clock, deadline, budget, &options.plan, || {
            timer.time(|stream| {
                // SAFETY: both buffers hold `len` bytes in their own contexts and outlive the
                // stop event each sample waits for.
                unsafe {
                    api.queue_peer_copy(driver, dst.ptr, to.ctx.0, src.ptr, from.ctx.0, len, stream)
                }
            })
        })?;
        drop(timer);
        Ok(s.samples)
    })();
    match run {
        Ok(s) if s.is_empty() => fig.give_up(
            FigureStatus::Skipped,
            "the time budget was spent before this figure".to_string(),
        ),
        Ok(s) => fig.record(&s),
        Err(e) => fig.give_up(FigureStatus::Failed, e.to_string()),
    }
    fig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_peak_and_the_free_memory() {
        let d = Datasheet::embedded();
        let h200 = d.for_cuda_name("NVIDIA H200");
        let plenty = 140u64 << 30;
        // 989 TFLOP/s for 2 ms needs about 9966^3: 16384.
        assert_eq!(gemm_size(GemmKind::Bfloat16, h200, None, plenty), 16384);
        // 67 TFLOP/s for 2 ms needs about 4062^3: 4096.
        assert_eq!(gemm_size(GemmKind::Float32, h200, None, plenty), 4096);
        assert_eq!(gemm_size(GemmKind::Bfloat16, None, None, plenty), 8192);
        // Three 16384^2 bfloat16 matrices take 1.5 GiB: with 2 GiB free, 8192.
        assert_eq!(gemm_size(GemmKind::Bfloat16, h200, None, 2 << 30), 8192);
        assert_eq!(gemm_size(GemmKind::Float8E4m3, h200, Some(64), 0), 64);
    }

    #[test]
    fn fp8_only_from_compute_capability_8_9() {
        assert!(!gemm_kinds((8, 0)).contains(&GemmKind::Float8E4m3));
        assert!(gemm_kinds((8, 9)).contains(&GemmKind::Float8E4m3));
        assert!(gemm_kinds((9, 0)).contains(&GemmKind::Float8E4m3));
        assert_eq!(gemm_kinds((8, 6)).len(), 4);
    }

    #[test]
    fn inputs_are_finite_values_below_one() {
        for kind in GemmKind::ALL {
            let c = fill_chunk(kind, 4096);
            assert_eq!(c.len(), 4096);
            let values: Vec<f32> = match kind {
                GemmKind::Float32 | GemmKind::Tf32 => c
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                GemmKind::Float16 => c
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                GemmKind::Bfloat16 => c
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                GemmKind::Float8E4m3 => c
                    .iter()
                    .map(|b| {
                        let e = i32::from((b >> 3) & 0xf);
                        let m = f32::from(b & 7);
                        let v = if e == 0 {
                            m / 8.0 * 2f32.powi(-6)
                        } else {
                            (1.0 + m / 8.0) * 2f32.powi(e - 7)
                        };
                        if b & 0x80 != 0 { -v } else { v }
                    })
                    .collect(),
            };
            assert!(
                values.iter().all(|v| v.is_finite() && v.abs() <= 1.0),
                "{kind}"
            );
            assert!(values.iter().any(|v| *v != 0.0), "{kind}");
        }
    }
}
