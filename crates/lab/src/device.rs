//! The seam between the phase runner and a device.
//!
//! The runner decides *when* tensors live and die and what each phase times; a device decides
//! *how* memory is obtained and how the three operations of the forward pass run. Keeping the
//! runner ignorant of CUDA lets the CPU reference device, the CUDA device and the tests' scripted
//! device share one runner, so their documents mean the same thing.

use crate::alloc::Stats;
use crate::dtype::DType;
use crate::environment::Environment;
use crate::measure::document::Phase;
use crate::workspaces::MemoryPolicy;

/// A live tensor on a device: a row-major matrix of `rows x cols` elements of `dtype`.
///
/// A 3-D activation `[batch, context, width]` is viewed as `[batch * context, width]`, as
/// `F.linear` does; a bias is `1 x out_features`. The handle is not `Clone`, so it cannot be freed
/// twice.
#[derive(Debug, PartialEq, Eq)]
pub struct Tensor {
    /// The device's own identifier for the storage.
    pub id: u64,
    /// Rows.
    pub rows: usize,
    /// Columns (the contiguous dimension).
    pub cols: usize,
    /// Element type.
    pub dtype: DType,
}

impl Tensor {
    /// Elements held.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// True when the tensor holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the caller asked for (before the allocator rounds them).
    pub fn bytes(&self) -> u64 {
        self.len() as u64 * self.dtype.size_bytes()
    }
}

/// Memory of the whole device, as the driver (and NVML, where present) reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceMemory {
    /// Free bytes on the device (all processes), e.g. from `cuMemGetInfo`.
    pub free_bytes: u64,
    /// Total bytes on the device.
    pub total_bytes: u64,
    /// Bytes this process uses on the device according to NVML, where NVML is present.
    pub process_used_bytes: Option<u64>,
}

/// A device operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The allocator could not serve a request even after releasing its cache.
    #[error(
        "out of memory allocating {requested} bytes for {what} \
         ({allocated} bytes allocated, {reserved} bytes reserved by the allocator)"
    )]
    OutOfMemory {
        /// What the bytes were for (`linear1 output`, `cuBLAS workspace`, ...).
        what: String,
        /// Bytes asked for.
        requested: u64,
        /// Allocator's allocated bytes when the request failed.
        allocated: u64,
        /// Allocator's reserved bytes when the request failed.
        reserved: u64,
    },
    /// Shapes or dtypes that do not fit together (a bug in the caller).
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// Anything the backend reports (a driver or library error), in its words.
    #[error("{0}")]
    Backend(String),
}

/// The math of a GPU's products, in words: float32 accumulation; TF32 only when allowed.
pub fn gpu_math_mode(dtype: DType, allow_tf32: bool) -> String {
    match (dtype, allow_tf32) {
        (DType::Float32, false) => "float32 products in strict float32 (no TF32)".to_string(),
        (DType::Float32, true) => "float32 products may use TF32 (--allow-tf32)".to_string(),
        (d, _) => format!("{d} storage, float32 accumulation"),
    }
}

/// A device the phase runner can drive.
///
/// Operations may be asynchronous; the runner calls [`Device::synchronize`] where the protocol
/// says so. Every method that touches the device returns a `Result`: a device never panics on a
/// runtime failure.
pub trait Device {
    /// Describes the device and its software for the document's `environment`.
    fn environment(&self) -> Environment;

    /// The arithmetic products use, in words, for the document's `configuration.math_mode`.
    fn math_mode(&self, dtype: DType, allow_tf32: bool) -> String {
        gpu_math_mode(dtype, allow_tf32)
    }

    /// Bytes the pre-flight check may plan for: what the device says is free. The default
    /// takes [`Device::device_memory`]; the CPU reference reports the host's available memory.
    fn available_bytes(&mut self) -> Result<Option<u64>, DeviceError> {
        Ok(self.device_memory()?.map(|m| m.free_bytes))
    }

    /// The allocator policy and the library workspaces the device allocates through its
    /// allocator on the first product (none for a device without a BLAS library), recorded in the
    /// document and replayed by the pre-flight estimate.
    fn memory_policy(&self) -> MemoryPolicy;

    /// Called by the runner as each phase starts, before its peaks are reset; a device that
    /// labels its allocation sequence by phase (the pre-flight plan) takes note. Nothing else
    /// needs it.
    fn phase_started(&mut self, _phase: Phase, _index: usize) {}

    /// Called by the runner once a phase's end counters are read (not for a phase that fails).
    fn phase_finished(&mut self) {}

    /// Waits until all queued work has finished.
    fn synchronize(&mut self) -> Result<(), DeviceError>;

    /// The allocator's counters now.
    fn stats(&self) -> Stats;

    /// Sets every allocator peak to its current value.
    fn reset_peaks(&mut self);

    /// Device-wide memory, where the device can say (`None` for the CPU reference).
    fn device_memory(&mut self) -> Result<Option<DeviceMemory>, DeviceError>;

    /// Allocates an uninitialised `rows x cols` tensor through the caching allocator.
    /// `what` names the tensor in an out-of-memory error.
    fn allocate(
        &mut self,
        rows: usize,
        cols: usize,
        dtype: DType,
        what: &str,
    ) -> Result<Tensor, DeviceError>;

    /// Returns a tensor's block to the allocator's cache.
    fn free(&mut self, tensor: Tensor);

    /// Copies host values into a tensor, converting each f32 to the tensor's dtype (round to
    /// nearest even). `values.len()` equals `tensor.len()`.
    fn upload(&mut self, tensor: &Tensor, values: &[f32]) -> Result<(), DeviceError>;

    /// Fills a tensor with the seeded synthetic inputs: element `i` is
    /// `dtype.round(crate::measure::synthetic::input_value(seed, i))`, so inputs depend only on the
    /// seed and the shape.
    fn fill_inputs(&mut self, tensor: &Tensor, seed: u64) -> Result<(), DeviceError>;

    /// `out = x · weightᵀ + bias`, accumulating in float32 (`x`: `m x k`, `weight`: `n x k`,
    /// `bias`: `1 x n`, `out`: `m x n`). `allow_tf32` lets float32 products use TF32.
    fn linear(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        out: &Tensor,
        allow_tf32: bool,
    ) -> Result<(), DeviceError>;

    /// `out = gelu(x)` with the exact erf form, computed in float32.
    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError>;

    /// Reads the given rows of a tensor back to the host as f32 (for the numerical check; never
    /// inside a timed region).
    fn read_rows(&mut self, tensor: &Tensor, rows: &[usize]) -> Result<Vec<f32>, DeviceError>;

    /// Starts the device clock (records a start event on the stream). A device without a clock
    /// of its own does nothing.
    fn start_clock(&mut self) -> Result<(), DeviceError>;

    /// Stops the device clock and returns the seconds between start and stop as the device
    /// measured them, or `None` for a device without a clock. It may synchronize.
    fn stop_clock(&mut self) -> Result<Option<f64>, DeviceError>;
}
