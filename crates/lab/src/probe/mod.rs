//! `probe`: is every GPU of the lot the card that was paid for? Copy bandwidth and dense matrix
//! throughput, each the median of repeated timed runs, against the model's datasheet.
//!
//! This module holds what does not need a GPU: the document ([`ProbeDocument`]) both devices
//! write, the bounded sampling loop ([`timing`]), the comparison with the datasheet and the lot
//! ([`judge`]). The devices fill the same document: `lab_cpu::probe` with host copies,
//! `lab_cuda::probe` with CUDA-event timings.

pub mod judge;
pub mod timing;

use serde::{Deserialize, Serialize};

use crate::environment::Environment;
use crate::lot::{Expectation, Finding, GpuFacts, PeerAccess};
use crate::node::NodeIdentity;
use crate::stats::Summary;
use crate::tool::ToolInfo;
use lab_io::bytes::gib;
use rent::datasheet::{DatasheetRow, GemmKind};

/// Why a probe's copy buffers cannot be had on this host: refused before any buffer is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--copy-bytes {copy_bytes} needs {} of host memory for its two copy buffers (source and \
     destination on the CPU; pinned and pageable for a GPU) but {}; choose a smaller \
     --copy-bytes, such as the default 256MiB",
    needed.map_or_else(|| "more than 2^64 bytes".to_string(), |n| format!("{n} bytes ({} GiB)", gib(n, 2))),
    format!("the machine has {available} bytes ({} GiB) available (MemAvailable, within any cgroup memory limit)", gib(*available, 2))
)]
pub struct CopyBuffersWouldNotFit {
    /// The option's value.
    pub copy_bytes: u64,
    /// Twice that, where it fits in 64 bits.
    pub needed: Option<u64>,
    /// What the host can give a new allocation.
    pub available: u64,
}

/// Host bytes a probe holds for its copies: two buffers of `copy_bytes` (the CPU's source and
/// destination; a GPU's pinned and pageable buffers), compared with what the host has
/// (`available`, as [`crate::host::available_host_bytes`] reads it) before anything is allocated.
/// `None` for `available` (no `/proc`) checks only that the figure fits in 64 bits.
pub fn check_copy_buffers(
    copy_bytes: u64,
    available: Option<u64>,
) -> Result<(), CopyBuffersWouldNotFit> {
    let needed = copy_bytes.checked_mul(2);
    let room = available.unwrap_or(u64::MAX);
    match needed {
        Some(n) if n <= room && usize::try_from(copy_bytes).is_ok() => Ok(()),
        _ => Err(CopyBuffersWouldNotFit {
            copy_bytes,
            needed,
            available: room,
        }),
    }
}

/// Schema identifier of probe documents; bumped on any incompatible change.
pub const PROBE_SCHEMA: &str = "iteragpu.probe/1";

/// The default time budget per GPU, seconds.
pub const DEFAULT_SECONDS_PER_GPU: f64 = 60.0;
/// The default bytes of one timed copy (256 MiB: large enough that the per-copy overhead is a
/// small part, small enough for every GPU of the catalogue).
pub const DEFAULT_COPY_BYTES: u64 = 256 << 20;
/// At least this many timed samples per figure, time allowing.
pub const MIN_SAMPLES: usize = 3;
/// At most this many timed samples per figure.
pub const MAX_SAMPLES: usize = 50;
/// Copies below this share of the datasheet figure are warned.
pub const COPY_THRESHOLD_PERCENT: f64 = 70.0;
/// Products below this share of the dense datasheet peak are warned.
pub const GEMM_THRESHOLD_PERCENT: f64 = 50.0;
/// A GPU more than this far below the median of the rest of its lot, on any figure, is the
/// lot's outlier.
pub const LOT_OUTLIER_PERCENT: f64 = 10.0;

/// What a timed copy moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    /// Pinned host memory to the GPU.
    H2dPinned,
    /// Ordinary (pageable) host memory to the GPU: the driver stages it.
    H2dPageable,
    /// The GPU to pinned host memory.
    D2hPinned,
    /// The GPU to pageable host memory.
    D2hPageable,
    /// Within one GPU's memory.
    D2d,
    /// From one GPU to another.
    P2p,
    /// The CPU reference device: host memory to host memory (`memcpy`), not a GPU figure.
    HostMemcpy,
}

impl CopyKind {
    /// The name in documents.
    pub fn name(self) -> &'static str {
        match self {
            CopyKind::H2dPinned => "h2d_pinned",
            CopyKind::H2dPageable => "h2d_pageable",
            CopyKind::D2hPinned => "d2h_pinned",
            CopyKind::D2hPageable => "d2h_pageable",
            CopyKind::D2d => "d2d",
            CopyKind::P2p => "p2p",
            CopyKind::HostMemcpy => "host_memcpy",
        }
    }

    /// How it reads on screen.
    pub fn label(self) -> &'static str {
        match self {
            CopyKind::H2dPinned => "host->device pinned",
            CopyKind::H2dPageable => "host->device pageable",
            CopyKind::D2hPinned => "device->host pinned",
            CopyKind::D2hPageable => "device->host pageable",
            CopyKind::D2d => "device->device",
            CopyKind::P2p => "peer to peer",
            CopyKind::HostMemcpy => "host memcpy (CPU)",
        }
    }

    /// Whether the datasheet comparison judges it. Pageable copies depend on the host's memory
    /// and the driver's staging more than on the GPU: they are reported, not judged.
    pub fn judged(self) -> bool {
        matches!(
            self,
            CopyKind::H2dPinned | CopyKind::D2hPinned | CopyKind::D2d | CopyKind::P2p
        )
    }
}

/// Whether a figure was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureStatus {
    /// Measured: `seconds` holds its samples' summary.
    Measured,
    /// Not run (the time budget was spent, the GPU has no such unit, no memory for it); `note`
    /// says why.
    Skipped,
    /// It failed; `note` holds the error.
    Failed,
}

/// The datasheet figure a measured one is compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// The datasheet figure, in the measured figure's unit (GB/s or TFLOP/s).
    pub value: f64,
    /// Where it comes from and how the comparison is made, in a sentence.
    pub basis: String,
    /// The measured figure as a percentage of the reference.
    pub percent: f64,
    /// The threshold under which the figure is warned, percent.
    pub threshold_percent: f64,
    /// `percent < threshold_percent`.
    pub below_threshold: bool,
}

/// One copy figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyFigure {
    /// What was copied.
    pub kind: CopyKind,
    /// Where from (`host pinned`, `cuda:0`).
    pub from: String,
    /// Where to.
    pub to: String,
    /// Bytes of one copy.
    pub bytes: u64,
    /// Measured, skipped or failed.
    pub status: FigureStatus,
    /// The timing of one copy, seconds (absent unless measured).
    pub seconds: Option<Summary>,
    /// bytes / median seconds / 10^9 (a device-to-device copy also reads as much as it writes:
    /// its memory traffic is twice this).
    pub gb_per_s: Option<f64>,
    /// The datasheet comparison (absent for unjudged kinds or without a datasheet row).
    pub reference: Option<Reference>,
    /// Why it was skipped or failed, or a remark.
    pub note: Option<String>,
}

/// One dense matrix product figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmFigure {
    /// Data type and math.
    pub kind: GemmKind,
    /// Rows of the output.
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// The shared dimension.
    pub k: u64,
    /// 2 x m x n x k.
    pub flops: f64,
    /// How it ran (`cublasLtMatmul, A transposed, COMPUTE_32F, ...`).
    pub math: String,
    /// Measured, skipped or failed.
    pub status: FigureStatus,
    /// The timing of one product, seconds.
    pub seconds: Option<Summary>,
    /// flops / median seconds / 10^12.
    pub tflops: Option<f64>,
    /// The datasheet comparison.
    pub reference: Option<Reference>,
    /// Why it was skipped or failed.
    pub note: Option<String>,
}

impl GemmFigure {
    /// A square product of size `n` of `kind`, not yet run.
    pub fn square(kind: GemmKind, n: u64, math: String) -> GemmFigure {
        GemmFigure {
            kind,
            m: n,
            n,
            k: n,
            flops: 2.0 * (n as f64).powi(3),
            math,
            status: FigureStatus::Skipped,
            seconds: None,
            tflops: None,
            reference: None,
            note: None,
        }
    }

    /// Records samples of one product's seconds.
    pub fn record(&mut self, samples: &[f64]) {
        self.seconds = Summary::of(samples);
        self.tflops = self
            .seconds
            .filter(|s| s.median > 0.0)
            .map(|s| self.flops / s.median / 1e12);
        self.status = if self.seconds.is_some() {
            FigureStatus::Measured
        } else {
            FigureStatus::Skipped
        };
    }
}

impl CopyFigure {
    /// A copy of `bytes` from `from` to `to`, not yet run.
    pub fn new(kind: CopyKind, from: &str, to: &str, bytes: u64) -> CopyFigure {
        CopyFigure {
            kind,
            from: from.to_string(),
            to: to.to_string(),
            bytes,
            status: FigureStatus::Skipped,
            seconds: None,
            gb_per_s: None,
            reference: None,
            note: None,
        }
    }

    /// Records samples of one copy's seconds.
    pub fn record(&mut self, samples: &[f64]) {
        self.seconds = Summary::of(samples);
        self.gb_per_s = self
            .seconds
            .filter(|s| s.median > 0.0)
            .map(|s| self.bytes as f64 / s.median / 1e9);
        self.status = if self.seconds.is_some() {
            FigureStatus::Measured
        } else {
            FigureStatus::Skipped
        };
    }

    /// Marks it skipped or failed with a reason.
    pub fn give_up(&mut self, status: FigureStatus, note: String) {
        self.status = status;
        self.note = Some(note);
    }
}

impl GemmFigure {
    /// Marks it skipped or failed with a reason.
    pub fn give_up(&mut self, status: FigureStatus, note: String) {
        self.status = status;
        self.note = Some(note);
    }
}

/// Everything probed on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProbe {
    /// `cuda:N` or `cpu`.
    pub device: String,
    /// Its environment report.
    pub environment: Environment,
    /// The facts the lot checks read (GPUs only).
    pub facts: Option<GpuFacts>,
    /// The datasheet row of its model, when the table has one.
    pub datasheet: Option<DatasheetRow>,
    /// Copy figures, in the order run.
    pub copies: Vec<CopyFigure>,
    /// Product figures, in the order run.
    pub gemms: Vec<GemmFigure>,
    /// The PCIe link NVML reports right after the copies (an idle link may be slower).
    pub pcie_after_copies: Option<PcieLinkState>,
    /// Seconds this device's probe took, set-up included.
    pub elapsed_seconds: f64,
    /// What stopped this device's probe early, if anything.
    pub error: Option<String>,
}

/// A PCIe link as NVML reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLinkState {
    /// Generation.
    pub generation: u32,
    /// Lanes.
    pub width: u32,
}

/// The options of a run, resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeConfiguration {
    /// The time budget of each GPU's copies and products, seconds.
    pub seconds_per_gpu: f64,
    /// GPUs probed at the same time instead of one after the other.
    pub concurrent: bool,
    /// Bytes of one timed copy.
    pub copy_bytes: u64,
    /// The size of the square products, when given (else chosen per data type).
    pub gemm_size: Option<u64>,
    /// Timed samples per figure: at least (time allowing) and at most.
    pub min_samples: usize,
    /// See `min_samples`.
    pub max_samples: usize,
    /// Below which percentage of its datasheet figure a copy is warned.
    pub copy_threshold_percent: f64,
    /// Below which percentage of its dense datasheet peak a product is warned.
    pub gemm_threshold_percent: f64,
    /// How far below the rest of its lot a GPU's figure makes it the lot's outlier, percent.
    pub lot_outlier_percent: f64,
    /// How the samples are timed.
    pub timing: String,
}

/// A GPU whose figure is below the rest of its lot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LotOutlierFigure {
    /// `cuda:N`.
    pub device: String,
    /// Which figure (`d2d`, `bfloat16`, ...).
    pub figure: String,
    /// Its value (GB/s or TFLOP/s).
    pub value: f64,
    /// The median of the other GPUs' values.
    pub median_of_others: f64,
    /// How far below, percent.
    pub percent_below: f64,
}

/// One probe run: `probe --output FILE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeDocument {
    /// Always [`PROBE_SCHEMA`].
    pub schema: String,
    /// The build.
    pub tool: ToolInfo,
    /// When the run started, RFC 3339 UTC.
    pub started_utc: String,
    /// `all`, `cuda:0,1`, `cuda:0` or `cpu`.
    pub requested_device: String,
    /// True for the CPU reference device: host figures only, never a GPU's.
    pub reference_device: bool,
    /// The options, resolved.
    pub configuration: ProbeConfiguration,
    /// The datasheet table the figures are compared with (`embedded` or a path).
    pub datasheet: String,
    /// What `--package` promises (with this node's share on one node of several).
    pub package: Option<Expectation>,
    /// Which node of a multi-node job this is (absent outside a scheduler unless named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeIdentity>,
    /// GPUs the driver sees (absent for the CPU).
    pub visible_devices: Option<usize>,
    /// One entry per device probed.
    pub devices: Vec<DeviceProbe>,
    /// Which pairs can reach each other's memory.
    pub peer_access: Vec<PeerAccess>,
    /// Peer-to-peer copy figures, one per ordered pair.
    pub peers: Vec<CopyFigure>,
    /// GPUs below the rest of their lot.
    pub lot_outliers: Vec<LotOutlierFigure>,
    /// Every finding: the lot checks of `environment --device all`, then the probe's own.
    pub findings: Vec<Finding>,
    /// How many findings are warnings.
    pub warnings: usize,
    /// Seconds the whole run took.
    pub elapsed_seconds: f64,
    /// True when every planned figure was measured or skipped for a stated reason, and nothing
    /// failed.
    pub complete: bool,
    /// What failed, when something did.
    pub error: Option<String>,
}
