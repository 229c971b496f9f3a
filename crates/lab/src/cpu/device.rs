//! The CPU reference device.

use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::{ArrayView2, ArrayViewMut2, linalg::general_mat_mul};

use crate::alloc::{Stats, TensorPool};
use crate::cpu::memory::{HostSegments, available_host_bytes};
use crate::device::{Device, DeviceError, DeviceMemory, Tensor};
use crate::dtype::DType;
use crate::environment::Environment;
use crate::measure::synthetic::input_value;
use crate::tool::ToolInfo;
use crate::workspaces::{MemoryPolicy, Workspaces};

/// Real arithmetic on the host under the GPU's allocator policy. Storage is in the requested
/// dtype; products convert to float32, accumulate in float32 and round the result back, as a GPU
/// with float32 accumulation does.
pub struct CpuDevice {
    tensors: TensorPool<HostSegments>,
    tool: ToolInfo,
    /// The float32 result of the last `linear` or `gelu`, kept between calls so that each pass
    /// reuses pages already mapped instead of faulting in fresh ones (host memory outside the
    /// allocator, like any temporary of the host arithmetic; it never shows in the counters).
    scratch: Vec<f32>,
    /// Threads for the element-wise GELU: the same number the GEMM uses.
    threads: usize,
}

impl std::fmt::Debug for CpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuDevice")
            .field("tensors", &self.tensors)
            .field("tool", &self.tool)
            .field("scratch_elements", &self.scratch.capacity())
            .field("threads", &self.threads)
            .finish()
    }
}

/// Below this many elements GELU runs on the calling thread: starting threads costs more.
const PARALLEL_GELU_MIN: usize = 1 << 16;

/// The GEMM's thread count, after matrixmultiply's rule: `MATMUL_NUM_THREADS` where set (1 when
/// it does not parse), else the CPUs this process may use (matrixmultiply counts physical cores:
/// the same on a machine without SMT), clamped to 1..=4. Element-wise work follows it, so
/// `MATMUL_NUM_THREADS=1` makes the whole device single-threaded.
fn gemm_threads() -> usize {
    let threads = match std::env::var("MATMUL_NUM_THREADS") {
        Ok(v) if !v.is_empty() => v.parse().unwrap_or(1),
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    threads.clamp(1, 4)
}

impl CpuDevice {
    /// A device over host memory bounded only by the OS.
    pub fn new(tool: ToolInfo) -> CpuDevice {
        CpuDevice::with_source(tool, HostSegments::new())
    }

    /// A device over a given segment source (a bounded one forces out-of-memory in tests).
    pub fn with_source(tool: ToolInfo, source: HostSegments) -> CpuDevice {
        CpuDevice {
            tensors: TensorPool::new(source),
            tool,
            scratch: Vec::new(),
            threads: gemm_threads(),
        }
    }

    /// The tensor's bytes inside its segment.
    fn bytes(&self, t: &Tensor) -> Result<&[u8], DeviceError> {
        let b = self.tensors.block(t)?;
        let seg: &[u8] = bytemuck::cast_slice(self.tensors.allocator().segment(b.segment));
        let start = b.offset as usize;
        Ok(&seg[start..start + t.bytes() as usize])
    }

    fn bytes_mut(&mut self, t: &Tensor) -> Result<&mut [u8], DeviceError> {
        let b = self.tensors.block(t)?;
        let (segment, start) = (b.segment, b.offset as usize);
        let seg: &mut [u8] =
            bytemuck::cast_slice_mut(self.tensors.allocator_mut().segment_mut(segment));
        Ok(&mut seg[start..start + t.bytes() as usize])
    }

    /// The tensor's values as f32 (borrowed when it already is f32).
    fn read(&self, t: &Tensor) -> Result<Cow<'_, [f32]>, DeviceError> {
        let bytes = self.bytes(t)?;
        Ok(match t.dtype {
            DType::Float32 => Cow::Borrowed(bytemuck::cast_slice(bytes)),
            DType::Float16 => Cow::Owned(
                bytemuck::cast_slice::<u8, f16>(bytes)
                    .iter()
                    .map(|v| v.to_f32())
                    .collect(),
            ),
            DType::Bfloat16 => Cow::Owned(
                bytemuck::cast_slice::<u8, bf16>(bytes)
                    .iter()
                    .map(|v| v.to_f32())
                    .collect(),
            ),
        })
    }

    /// Stores f32 values into the tensor, rounding to its dtype (nearest, ties to even).
    fn write(&mut self, t: &Tensor, values: &[f32]) -> Result<(), DeviceError> {
        if values.len() != t.len() {
            return Err(DeviceError::Shape(format!(
                "{} values for a tensor of {} elements",
                values.len(),
                t.len()
            )));
        }
        let dtype = t.dtype;
        let bytes = self.bytes_mut(t)?;
        match dtype {
            DType::Float32 => bytes.copy_from_slice(bytemuck::cast_slice(values)),
            DType::Float16 => {
                for (d, v) in bytemuck::cast_slice_mut::<u8, f16>(bytes)
                    .iter_mut()
                    .zip(values)
                {
                    *d = f16::from_f32(*v);
                }
            }
            DType::Bfloat16 => {
                for (d, v) in bytemuck::cast_slice_mut::<u8, bf16>(bytes)
                    .iter_mut()
                    .zip(values)
                {
                    *d = bf16::from_f32(*v);
                }
            }
        }
        Ok(())
    }
}

impl CpuDevice {
    /// `c = x w^T + b` in float32 into `c` (resized to `m x n`, row-major).
    ///
    /// Computed as `c^T = w x^T`: matrixmultiply packs its right-hand operand on one thread and
    /// its left-hand one in parallel, and in PyTorch's layout both operands are strided for its
    /// packing; so the big weight goes on the left, where its packing is shared by the threads,
    /// and only the activations are packed on one thread. The products and their float32 sums are
    /// the same; only the order of the work changes.
    fn linear_into(
        &self,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        (m, k, n): (usize, usize, usize),
        c: &mut Vec<f32>,
    ) -> Result<(), DeviceError> {
        let xs = self.read(x)?;
        let ws = self.read(weight)?;
        let bs = self.read(bias)?;
        let shape = |e: ndarray::ShapeError| DeviceError::Shape(e.to_string());
        let xa = ArrayView2::from_shape((m, k), &xs[..]).map_err(shape)?;
        let wa = ArrayView2::from_shape((n, k), &ws[..]).map_err(shape)?;
        c.clear();
        for _ in 0..m {
            c.extend_from_slice(&bs[..n]);
        }
        let mut ca = ArrayViewMut2::from_shape((m, n), &mut c[..]).map_err(shape)?;
        general_mat_mul(1.0, &wa, &xa.t(), 1.0, &mut ca.view_mut().reversed_axes());
        Ok(())
    }

    /// The exact GELU of every element of `x`, in float32, into `values`; split across the
    /// GEMM's thread count when the tensor is large enough to pay for the threads.
    fn gelu_into(&self, x: &Tensor, values: &mut Vec<f32>) -> Result<(), DeviceError> {
        let xs = self.read(x)?;
        values.clear();
        values.resize(xs.len(), 0.0);
        if self.threads < 2 || xs.len() < PARALLEL_GELU_MIN {
            for (d, &v) in values.iter_mut().zip(xs.iter()) {
                *d = gelu32(v);
            }
            return Ok(());
        }
        let chunk = xs.len().div_ceil(self.threads);
        std::thread::scope(|scope| {
            for (dst, src) in values.chunks_mut(chunk).zip(xs.chunks(chunk)) {
                scope.spawn(move || {
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = gelu32(v);
                    }
                });
            }
        });
        Ok(())
    }
}

fn shape_error(what: &str, a: &Tensor, b: &Tensor) -> DeviceError {
    DeviceError::Shape(format!(
        "{what}: {}x{} {} against {}x{} {}",
        a.rows, a.cols, a.dtype, b.rows, b.cols, b.dtype
    ))
}

/// `0.5 x (1 + erf(x / sqrt 2))` in float32, as PyTorch's exact GELU computes it.
pub fn gelu32(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

impl Device for CpuDevice {
    fn environment(&self) -> Environment {
        crate::cpu::environment(self.tool.clone())
    }

    fn math_mode(&self, dtype: DType, allow_tf32: bool) -> String {
        let base = match dtype {
            DType::Float32 => "float32 products in strict float32".to_string(),
            d => format!("{d} storage, float32 accumulation"),
        };
        if allow_tf32 {
            format!("{base} (--allow-tf32 recorded; the CPU has no TF32)")
        } else {
            base
        }
    }

    fn available_bytes(&mut self) -> Result<Option<u64>, DeviceError> {
        Ok(available_host_bytes())
    }

    fn memory_policy(&self) -> MemoryPolicy {
        MemoryPolicy::new(
            Workspaces::NONE,
            "none: the CPU reference device calls no BLAS library, so it allocates no workspace",
        )
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

    fn upload(&mut self, tensor: &Tensor, values: &[f32]) -> Result<(), DeviceError> {
        self.write(tensor, values)
    }

    fn fill_inputs(&mut self, tensor: &Tensor, seed: u64) -> Result<(), DeviceError> {
        let values: Vec<f32> = (0..tensor.len() as u64)
            .map(|i| input_value(seed, i))
            .collect();
        self.write(tensor, &values)
    }

    fn linear(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        out: &Tensor,
        _allow_tf32: bool,
    ) -> Result<(), DeviceError> {
        let (m, k, n) = (x.rows, x.cols, weight.rows);
        if weight.cols != k || x.dtype != weight.dtype {
            return Err(shape_error("linear weight", x, weight));
        }
        if bias.len() != n || out.rows != m || out.cols != n {
            return Err(shape_error("linear output", weight, out));
        }
        let mut c = std::mem::take(&mut self.scratch);
        let computed = self.linear_into(x, weight, bias, (m, k, n), &mut c);
        let written = computed.and_then(|()| self.write(out, &c));
        self.scratch = c;
        written
    }

    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError> {
        if x.len() != out.len() {
            return Err(shape_error("gelu", x, out));
        }
        let mut values = std::mem::take(&mut self.scratch);
        let computed = self.gelu_into(x, &mut values);
        let written = computed.and_then(|()| self.write(out, &values));
        self.scratch = values;
        written
    }

    fn read_rows(&mut self, tensor: &Tensor, rows: &[usize]) -> Result<Vec<f32>, DeviceError> {
        let values = self.read(tensor)?;
        let c = tensor.cols;
        let mut out = Vec::with_capacity(rows.len() * c);
        for &r in rows {
            let row = values.get(r * c..(r + 1) * c).ok_or_else(|| {
                DeviceError::Shape(format!("row {r} of a tensor with {} rows", tensor.rows))
            })?;
            out.extend_from_slice(row);
        }
        Ok(out)
    }

    fn start_clock(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn stop_clock(&mut self) -> Result<Option<f64>, DeviceError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(threads: usize) -> CpuDevice {
        let mut d = CpuDevice::new(ToolInfo::new(None));
        d.threads = threads;
        d
    }

    fn tensor(d: &mut CpuDevice, rows: usize, cols: usize, values: &[f32]) -> Tensor {
        let t = d.allocate(rows, cols, DType::Float32, "test").unwrap();
        d.upload(&t, values).unwrap();
        t
    }

    /// Small values with a pattern that a transposed or shifted operand would not reproduce.
    fn pattern(len: usize, salt: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + salt * 13) % 23) as f32 / 11.0 - 1.0)
            .collect()
    }

    #[test]
    fn linear_is_x_times_w_transposed_plus_bias() {
        let (m, k, n) = (3, 5, 7);
        let (xs, ws, bs) = (pattern(m * k, 1), pattern(n * k, 2), pattern(n, 3));
        let mut d = device(1);
        let x = tensor(&mut d, m, k, &xs);
        let w = tensor(&mut d, n, k, &ws);
        let b = tensor(&mut d, 1, n, &bs);
        let y = d.allocate(m, n, DType::Float32, "y").unwrap();
        d.linear(&x, &w, &b, &y, false).unwrap();
        let got = d.read_rows(&y, &[0, 1, 2]).unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = f64::from(bs[j])
                    + (0..k)
                        .map(|p| f64::from(xs[i * k + p]) * f64::from(ws[j * k + p]))
                        .sum::<f64>();
                let g = f64::from(got[i * n + j]);
                assert!(
                    (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "({i},{j}): {g} vs {want}"
                );
            }
        }
    }

    #[test]
    fn linear_refuses_mismatched_shapes() {
        let mut d = device(1);
        let x = tensor(&mut d, 2, 3, &pattern(6, 0));
        let w = tensor(&mut d, 4, 2, &pattern(8, 0));
        let b = tensor(&mut d, 1, 4, &pattern(4, 0));
        let y = d.allocate(2, 4, DType::Float32, "y").unwrap();
        assert!(matches!(
            d.linear(&x, &w, &b, &y, false),
            Err(DeviceError::Shape(_))
        ));
    }

    #[test]
    fn threaded_gelu_equals_gelu32_on_every_element() {
        // Above the threshold and not a multiple of the thread count, so the chunks are uneven.
        let len = PARALLEL_GELU_MIN + 3;
        let xs: Vec<f32> = (0..len)
            .map(|i| (i as f32 / len as f32) * 12.0 - 6.0)
            .collect();
        for threads in [1, 2, 3] {
            let mut d = device(threads);
            let x = tensor(&mut d, 1, len, &xs);
            let g = d.allocate(1, len, DType::Float32, "g").unwrap();
            d.gelu(&x, &g).unwrap();
            let got = d.read_rows(&g, &[0]).unwrap();
            for (i, (&v, &r)) in xs.iter().zip(&got).enumerate() {
                assert_eq!(
                    r.to_bits(),
                    gelu32(v).to_bits(),
                    "element {i} with {threads} threads"
                );
            }
        }
    }

    #[test]
    fn scratch_reuse_across_shapes_keeps_results_right() {
        // A large GELU leaves a large scratch buffer; a smaller linear after it must not see
        // stale values.
        let mut d = device(2);
        let big = PARALLEL_GELU_MIN * 2;
        let x = tensor(&mut d, 1, big, &vec![3.0; big]);
        let g = d.allocate(1, big, DType::Float32, "g").unwrap();
        d.gelu(&x, &g).unwrap();
        let x = tensor(&mut d, 1, 2, &[1.0, 2.0]);
        let w = tensor(&mut d, 1, 2, &[3.0, 4.0]);
        let b = tensor(&mut d, 1, 1, &[0.5]);
        let y = d.allocate(1, 1, DType::Float32, "y").unwrap();
        d.linear(&x, &w, &b, &y, false).unwrap();
        assert_eq!(d.read_rows(&y, &[0]).unwrap(), vec![11.5]);
    }
}
