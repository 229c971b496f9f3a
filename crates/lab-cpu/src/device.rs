//! The CPU reference device.

use std::collections::HashMap;

use crate::gelu;
use crate::memory::HostSegments;
use crate::{bf16, convert, gemm, threads};
use lab::alloc::{Stats, TensorPool};
use lab::device::{Device, DeviceError, DeviceMemory, Tensor};
use lab::dtype::DType;
use lab::environment::Environment;
use lab::host::available_host_bytes;
use lab::measure::synthetic::input_value;
use lab::tool::ToolInfo;
use lab::workspaces::{MemoryPolicy, Workspaces};
use lab_bf16::{Bf16Dot, PackedWeights, Scratch};

/// Real arithmetic on the host under the GPU's allocator policy. Storage is in the requested
/// dtype; products accumulate in float32 and round the result back, as a GPU with float32
/// accumulation does. bfloat16 products run on the CPU's bfloat16 dot-product instructions where
/// it has them (AVX512_BF16, the `bf16` module); every other half-precision product widens its
/// operands to float32 and runs faer's float32 product.
///
/// Host memory outside the allocator (never in its counters, always in the memory plan,
/// [`crate::HostMemoryPlan`]): for float16 and bfloat16, a float32 copy of every uploaded
/// tensor (the parameters, widened once at load instead of on every pass) and two float32
/// buffers for the operands and results of the products, kept across passes so that no pass
/// maps fresh pages; on AVX512_BF16, bfloat16 weights packed once at load instead and one
/// scratch per thread (packed activations, float32 sums for a long `k`); and the GEMM's packing
/// buffer (see the `gemm` module). float32 needs none of the buffers: products read and write the tensors' own
/// blocks.
pub struct CpuDevice {
    tensors: TensorPool<HostSegments>,
    tool: ToolInfo,
    threads: usize,
    /// float32 copies of uploaded half-precision tensors, by tensor id.
    widened: HashMap<u64, Vec<f32>>,
    /// A product's activations operand, widened to float32 (half precision only).
    operand: Vec<f32>,
    /// A product's float32 result before it is rounded into the output (half precision only).
    result: Vec<f32>,
    /// The bfloat16 instructions, where the CPU has them and the device uses them.
    bf16: Option<Bf16Dot>,
    /// Uploaded bfloat16 matrices packed for those instructions, by tensor id.
    packed: HashMap<u64, PackedWeights>,
    /// One scratch per thread for the bfloat16 instructions' Linears.
    scratch: Vec<Scratch>,
}

impl std::fmt::Debug for CpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuDevice")
            .field("tensors", &self.tensors)
            .field("tool", &self.tool)
            .field("threads", &self.threads)
            .field("widened_tensors", &self.widened.len())
            .field("operand_elements", &self.operand.capacity())
            .field("result_elements", &self.result.capacity())
            .field("bf16", &self.bf16)
            .field("packed_tensors", &self.packed.len())
            .finish()
    }
}

/// How to set the CPU reference device up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads for products and element-wise work; `None` means the physical cores.
    pub threads: Option<usize>,
    /// Most bytes the allocator may hold in segments (what `--max-memory` leaves once the rest
    /// of the plan is counted); `None` means what the OS grants.
    pub segment_limit: Option<u64>,
}

impl CpuDevice {
    /// A device with the default options. If the worker threads cannot be started it computes
    /// on the calling thread alone (and its environment says one thread).
    pub fn new(tool: ToolInfo) -> CpuDevice {
        CpuDevice::open(tool.clone(), CpuOptions::default())
            .unwrap_or_else(|_| CpuDevice::assemble(tool, HostSegments::new(), 1))
    }

    /// A device over a given segment source (a bounded one forces out-of-memory in tests).
    pub fn with_source(tool: ToolInfo, source: HostSegments) -> CpuDevice {
        let threads = threads::start_pool(threads::physical_cores()).unwrap_or(1);
        CpuDevice::assemble(tool, source, threads)
    }

    /// Sets the device up: starts the worker threads and has the GEMM obtain its packing
    /// buffer, so that neither can fail later inside a phase.
    pub fn open(tool: ToolInfo, options: CpuOptions) -> Result<CpuDevice, DeviceError> {
        let threads = threads::start_pool(options.threads.unwrap_or_else(threads::physical_cores))
            .map_err(DeviceError::Backend)?;
        gemm::reserve_packing().map_err(|bytes| DeviceError::OutOfMemory {
            what: "the matrix product's packing buffer".to_string(),
            requested: bytes,
            allocated: 0,
            reserved: 0,
        })?;
        let source = match options.segment_limit {
            Some(limit) => HostSegments::with_limit(limit),
            None => HostSegments::new(),
        };
        Ok(CpuDevice::assemble(tool, source, threads))
    }

    fn assemble(tool: ToolInfo, source: HostSegments, threads: usize) -> CpuDevice {
        CpuDevice {
            tensors: TensorPool::new(source),
            tool,
            threads,
            widened: HashMap::new(),
            operand: Vec::new(),
            result: Vec::new(),
            bf16: bf16::instructions(),
            packed: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Threads the device computes with.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Bounds the bytes the allocator may hold in segments from now on (what `--max-memory`
    /// leaves for the tensors once the rest of the host memory plan is counted): a request past
    /// it fails as out of memory, as on a GPU of that size.
    pub fn limit_segments(&mut self, limit: Option<u64>) {
        self.tensors.allocator_mut().source_mut().set_limit(limit);
    }
}

/// The tensor's bytes inside its segment.
fn bytes<'a>(tensors: &'a TensorPool<HostSegments>, t: &Tensor) -> Result<&'a [u8], DeviceError> {
    let b = tensors.block(t)?;
    let seg: &[u8] = bytemuck::cast_slice(tensors.allocator().segment(b.segment));
    let start = b.offset as usize;
    Ok(&seg[start..start + t.bytes() as usize])
}

/// Runs `f` with the output tensor's bytes writable and the inputs' bytes readable, wherever
/// they lie: the output's segment is taken out of the allocator for the call (its other blocks
/// are read from the parts before and after the output), so nothing is copied.
fn with_output<const N: usize, R>(
    tensors: &mut TensorPool<HostSegments>,
    out: &Tensor,
    inputs: [&Tensor; N],
    f: impl FnOnce(&mut [u8], [&[u8]; N]) -> R,
) -> Result<R, DeviceError> {
    let (out_segment, out_start) = {
        let b = tensors.block(out)?;
        (b.segment, b.offset as usize)
    };
    let out_end = out_start + out.bytes() as usize;
    let mut places = [(out_segment, 0usize, 0usize); N];
    for (place, t) in places.iter_mut().zip(inputs) {
        let b = tensors.block(t)?;
        let (start, end) = (b.offset as usize, b.offset as usize + t.bytes() as usize);
        if b.segment == out_segment && start < out_end && out_start < end {
            return Err(DeviceError::Shape(format!(
                "tensor {} is both an input and the output",
                t.id
            )));
        }
        *place = (b.segment, start, end);
    }
    let mut segment = std::mem::take(tensors.allocator_mut().segment_mut(out_segment));
    let result = {
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut segment[..]);
        let (before, rest) = all.split_at_mut(out_start);
        let (output, after) = rest.split_at_mut(out_end - out_start);
        let (before, after): (&[u8], &[u8]) = (before, after);
        let allocator = tensors.allocator();
        let inputs = places.map(|(segment, start, end)| {
            if segment != out_segment {
                let s: &[u8] = bytemuck::cast_slice(allocator.segment(segment));
                &s[start..end]
            } else if end <= out_start {
                &before[start..end]
            } else {
                &after[start - out_end..end - out_end]
            }
        });
        f(output, inputs)
    };
    *tensors.allocator_mut().segment_mut(out_segment) = segment;
    Ok(result)
}

/// A host allocation outside the allocator that failed: out of memory, naming `what`, with the
/// allocator's counters at the time.
fn host_shortage(what: &str, requested: u64, stats: Stats) -> DeviceError {
    DeviceError::OutOfMemory {
        what: format!("{what} (host memory outside the allocator)"),
        requested,
        allocated: stats.all.allocated.current,
        reserved: stats.all.reserved.current,
    }
}

/// Grows a reused buffer to `len` elements with a fallible allocation; a shortage is an
/// out-of-memory error naming `what`, with the allocator's counters at the time.
fn ensure_len(
    buffer: &mut Vec<f32>,
    len: usize,
    what: &str,
    stats: Stats,
) -> Result<(), DeviceError> {
    if buffer.len() < len {
        buffer
            .try_reserve_exact(len - buffer.len())
            .map_err(|_| host_shortage(what, len as u64 * 4, stats))?;
        buffer.resize(len, 0.0);
    }
    Ok(())
}

/// Every row of `c` (`n` columns) set to `bias`.
fn fill_rows(c: &mut [f32], bias: &[f32], n: usize) {
    for row in c.chunks_exact_mut(n) {
        row.copy_from_slice(&bias[..n]);
    }
}

fn shape_error(what: &str, a: &Tensor, b: &Tensor) -> DeviceError {
    DeviceError::Shape(format!(
        "{what}: {}x{} {} against {}x{} {}",
        a.rows, a.cols, a.dtype, b.rows, b.cols, b.dtype
    ))
}

impl CpuDevice {
    /// The float32 values of a half-precision tensor: its widened copy when it was uploaded,
    /// else converted into `spare`.
    fn widened_or<'a>(
        tensors: &TensorPool<HostSegments>,
        widened: &'a HashMap<u64, Vec<f32>>,
        threads: usize,
        t: &Tensor,
        spare: &'a mut Vec<f32>,
    ) -> Result<&'a [f32], DeviceError> {
        if let Some(w) = widened.get(&t.id) {
            return Ok(w);
        }
        spare.clear();
        ensure_len(
            spare,
            t.len(),
            "a float32 copy of an operand",
            tensors.stats(),
        )?;
        convert::to_f32(threads, t.dtype, bytes(tensors, t)?, &mut spare[..t.len()]);
        Ok(&spare[..t.len()])
    }

    fn linear_half(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
    ) -> Result<(), DeviceError> {
        let (threads, stats) = (self.threads, self.tensors.stats());
        ensure_len(
            &mut self.operand,
            m * k,
            "the float32 operand of a product",
            stats,
        )?;
        ensure_len(
            &mut self.result,
            m * n,
            "the float32 result of a product",
            stats,
        )?;
        let (mut spare_w, mut spare_b) = (Vec::new(), Vec::new());
        let ws = Self::widened_or(&self.tensors, &self.widened, threads, weight, &mut spare_w)?;
        let bs = Self::widened_or(&self.tensors, &self.widened, threads, bias, &mut spare_b)?;
        let operand = &mut self.operand[..m * k];
        convert::to_f32(threads, x.dtype, bytes(&self.tensors, x)?, operand);
        let result = &mut self.result[..m * n];
        fill_rows(result, bs, n);
        gemm::add_product(threads, result, operand, ws, (m, k, n));
        let result = &self.result[..m * n];
        with_output(&mut self.tensors, out, [], |o, []| {
            convert::from_f32(threads, out.dtype, result, o)
        })
    }
}

impl CpuDevice {
    /// The packed form of a bfloat16 matrix: its copy packed at upload, else packed into
    /// `spare`.
    fn packed_or<'a>(
        tensors: &TensorPool<HostSegments>,
        packed: &'a HashMap<u64, PackedWeights>,
        t: &Tensor,
        spare: &'a mut Option<PackedWeights>,
    ) -> Result<&'a PackedWeights, DeviceError> {
        if let Some(p) = packed.get(&t.id) {
            return Ok(p);
        }
        Ok(spare.insert(pack(tensors, t)?))
    }

    /// A bfloat16 Linear on the bfloat16 instructions: the sums start from the bias and are
    /// rounded into the output once, band by band across the threads.
    fn linear_bf16(
        &mut self,
        dot: Bf16Dot,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        out: &Tensor,
        (m, k, n): (usize, usize, usize),
    ) -> Result<(), DeviceError> {
        let (threads, stats) = (self.threads, self.tensors.stats());
        let (count, band) = bf16::bands(m, k, n, threads);
        if self.scratch.len() < count {
            self.scratch.resize_with(count, Scratch::default);
        }
        for s in &mut self.scratch[..count] {
            s.reserve(band, n, k).map_err(|_| {
                let words = Scratch::x_words(band, k) + Scratch::sum_floats(band, n, k);
                host_shortage("a thread's bfloat16 scratch", words as u64 * 4, stats)
            })?;
        }
        let (mut spare_w, mut spare_b) = (None, Vec::new());
        let w = Self::packed_or(&self.tensors, &self.packed, weight, &mut spare_w)?;
        let bs = Self::widened_or(&self.tensors, &self.widened, threads, bias, &mut spare_b)?;
        let scratch = &mut self.scratch[..count];
        with_output(&mut self.tensors, out, [x], |o, [xs]| {
            bf16::linear(
                dot,
                bytemuck::cast_slice_mut(o),
                bs,
                bytemuck::cast_slice(xs),
                w,
                m,
                scratch,
            )
        })
    }
}

/// A bfloat16 matrix tensor packed for the bfloat16 instructions (its rows are the output
/// columns of a Linear, as `nn.Linear` keeps its weight).
fn pack(tensors: &TensorPool<HostSegments>, t: &Tensor) -> Result<PackedWeights, DeviceError> {
    let values: &[u16] = bytemuck::cast_slice(bytes(tensors, t)?);
    PackedWeights::new(values, t.rows, t.cols).map_err(|_| {
        host_shortage(
            "the packed bfloat16 copy of a parameter",
            PackedWeights::bytes(t.rows, t.cols),
            tensors.stats(),
        )
    })
}

impl Device for CpuDevice {
    fn environment(&self) -> Environment {
        crate::environment::device_environment(self.tool.clone(), self.threads)
    }

    fn math_mode(&self, dtype: DType, allow_tf32: bool) -> String {
        let base = match dtype {
            DType::Float32 => "float32 products in strict float32".to_string(),
            DType::Bfloat16 if let Some(dot) = self.bf16 => {
                format!("bfloat16 storage, float32 accumulation on {}", dot.name())
            }
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
        self.widened.remove(&tensor.id);
        self.packed.remove(&tensor.id);
        self.tensors.free(tensor);
    }

    fn upload(&mut self, tensor: &Tensor, values: &[f32]) -> Result<(), DeviceError> {
        if values.len() != tensor.len() {
            return Err(DeviceError::Shape(format!(
                "{} values for a tensor of {} elements",
                values.len(),
                tensor.len()
            )));
        }
        let threads = self.threads;
        with_output(&mut self.tensors, tensor, [], |o, []| {
            convert::from_f32(threads, tensor.dtype, values, o)
        })?;
        if tensor.dtype == DType::Bfloat16 && self.bf16.is_some() && tensor.rows > 1 {
            // A matrix: packed once here for the bfloat16 instructions (a one-row tensor, a
            // bias, is widened below for the products' first rows).
            let p = pack(&self.tensors, tensor)?;
            self.packed.insert(tensor.id, p);
        } else if tensor.dtype != DType::Float32 {
            // Widened once here, from the rounded values, for every later product.
            let mut w = Vec::new();
            let stats = self.tensors.stats();
            ensure_len(
                &mut w,
                tensor.len(),
                "the float32 copy of a parameter",
                stats,
            )?;
            convert::to_f32(threads, tensor.dtype, bytes(&self.tensors, tensor)?, &mut w);
            self.widened.insert(tensor.id, w);
        }
        Ok(())
    }

    fn fill_inputs(&mut self, tensor: &Tensor, seed: u64) -> Result<(), DeviceError> {
        self.widened.remove(&tensor.id);
        self.packed.remove(&tensor.id);
        let dtype = tensor.dtype;
        let size = dtype.size_bytes() as usize;
        with_output(&mut self.tensors, tensor, [], |o, []| {
            // In blocks through a small buffer: no copy of the whole input is ever held.
            let mut values = [0f32; 1024];
            for (b, chunk) in o.chunks_mut(values.len() * size).enumerate() {
                let n = chunk.len() / size;
                let first = (b * values.len()) as u64;
                for (i, v) in values[..n].iter_mut().enumerate() {
                    *v = input_value(seed, first + i as u64);
                }
                convert::from_f32(1, dtype, &values[..n], chunk);
            }
        })
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
        if bias.len() != n || out.rows != m || out.cols != n || bias.dtype != x.dtype {
            return Err(shape_error("linear output", weight, out));
        }
        if out.dtype != x.dtype {
            return Err(shape_error("linear output", x, out));
        }
        self.widened.remove(&out.id);
        self.packed.remove(&out.id);
        match (x.dtype, self.bf16) {
            (DType::Float32, _) => {}
            (DType::Bfloat16, Some(dot)) => {
                return self.linear_bf16(dot, x, weight, bias, out, (m, k, n));
            }
            _ => return self.linear_half(x, weight, bias, out, (m, k, n)),
        }
        let threads = self.threads;
        with_output(
            &mut self.tensors,
            out,
            [x, weight, bias],
            |o, [xs, ws, bs]| {
                let c: &mut [f32] = bytemuck::cast_slice_mut(o);
                fill_rows(c, bytemuck::cast_slice(bs), n);
                gemm::add_product(
                    threads,
                    c,
                    bytemuck::cast_slice(xs),
                    bytemuck::cast_slice(ws),
                    (m, k, n),
                );
            },
        )
    }

    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError> {
        if x.len() != out.len() || x.dtype != out.dtype {
            return Err(shape_error("gelu", x, out));
        }
        self.widened.remove(&out.id);
        self.packed.remove(&out.id);
        let (threads, dtype) = (self.threads, x.dtype);
        with_output(&mut self.tensors, out, [x], |o, [xs]| match dtype {
            DType::Float32 => threads::for_each_part(
                threads,
                bytemuck::cast_slice::<u8, f32>(xs),
                bytemuck::cast_slice_mut::<u8, f32>(o),
                gelu::gelu_slice,
            ),
            _ => threads::for_each_part(
                threads,
                bytemuck::cast_slice::<u8, u16>(xs),
                bytemuck::cast_slice_mut::<u8, u16>(o),
                |s, d| {
                    // Widen, GELU and round in blocks that stay in the L1 cache.
                    let mut block = [0f32; 2048];
                    for (s, d) in s.chunks(block.len()).zip(d.chunks_mut(block.len())) {
                        let b = &mut block[..s.len()];
                        convert::to_f32(1, dtype, bytemuck::cast_slice(s), b);
                        gelu::gelu_in_place(b);
                        convert::from_f32(1, dtype, b, bytemuck::cast_slice_mut(d));
                    }
                },
            ),
        })
    }

    fn read_rows(&mut self, tensor: &Tensor, rows: &[usize]) -> Result<Vec<f32>, DeviceError> {
        let all = bytes(&self.tensors, tensor)?;
        let (c, size) = (tensor.cols, tensor.dtype.size_bytes() as usize);
        let mut out = vec![0f32; rows.len() * c];
        for (&r, dst) in rows.iter().zip(out.chunks_mut(c.max(1))) {
            let row = all.get(r * c * size..(r + 1) * c * size).ok_or_else(|| {
                DeviceError::Shape(format!("row {r} of a tensor with {} rows", tensor.rows))
            })?;
            convert::to_f32(1, tensor.dtype, row, &mut dst[..c]);
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
    use crate::gelu32;

    fn device(threads: usize) -> CpuDevice {
        let mut d = CpuDevice::new(ToolInfo::new(None));
        d.threads = threads;
        d
    }

    fn tensor_of(
        d: &mut CpuDevice,
        rows: usize,
        cols: usize,
        dtype: DType,
        values: &[f32],
    ) -> Tensor {
        let t = d.allocate(rows, cols, dtype, "test").unwrap();
        d.upload(&t, values).unwrap();
        t
    }

    #[test]
    fn half_precision_linear_rounds_the_float32_result_of_the_rounded_operands() {
        // bfloat16 on its own instructions where the CPU has them, and widened; a one-row
        // weight is not packed at upload (it could be a bias), so it is packed per product.
        let paths = [bf16::instructions(), None];
        for ((m, k, n), dtype, native) in [(4, 9, 6), (3, 5, 1)].into_iter().flat_map(|shape| {
            [DType::Float16, DType::Bfloat16]
                .into_iter()
                .flat_map(move |d| paths.map(move |p| (shape, d, p)))
        }) {
            let (xs, ws, bs) = (pattern(m * k, 1), pattern(n * k, 2), pattern(n, 3));
            for threads in [1, 2] {
                let mut d = device(threads);
                d.bf16 = native;
                // The input is written by fill-like code paths, not uploaded: it is widened per
                // pass; the parameters come from their copies widened at upload.
                let x = d.allocate(m, k, dtype, "x").unwrap();
                with_output(&mut d.tensors, &x, [], |o, []| {
                    convert::from_f32(1, dtype, &xs, o)
                })
                .unwrap();
                let w = tensor_of(&mut d, n, k, dtype, &ws);
                let b = tensor_of(&mut d, 1, n, dtype, &bs);
                let y = d.allocate(m, n, dtype, "y").unwrap();
                d.linear(&x, &w, &b, &y, false).unwrap();
                let got = d.read_rows(&y, &(0..m).collect::<Vec<_>>()).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = dtype.round(bs[j]);
                        for p in 0..k {
                            acc += dtype.round(xs[i * k + p]) * dtype.round(ws[j * k + p]);
                        }
                        let (want, g) = (dtype.round(acc), got[i * n + j]);
                        // Summation order may differ: within one unit in the last place of the
                        // storage type.
                        let ulp = match dtype {
                            DType::Float16 => 2f32.powi(-10),
                            _ => 2f32.powi(-7),
                        };
                        assert!(
                            (g - want).abs() <= ulp * want.abs().max(1.0),
                            "{dtype} ({i},{j}): {g} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_output_overlapping_an_input_is_refused() {
        let mut d = device(1);
        let x = tensor(&mut d, 2, 2, &[1.0, 2.0, 3.0, 4.0]);
        let same = Tensor {
            id: x.id,
            rows: 2,
            cols: 2,
            dtype: DType::Float32,
        };
        assert!(matches!(d.gelu(&x, &same), Err(DeviceError::Shape(_))));
    }

    #[test]
    fn half_precision_gelu_is_the_rounded_float32_gelu() {
        let len = threads::PARALLEL_MIN_ELEMENTS + 4099;
        let xs: Vec<f32> = (0..len)
            .map(|i| (i as f32 / len as f32) * 16.0 - 8.0)
            .collect();
        for dtype in [DType::Float16, DType::Bfloat16] {
            for threads in [1, 2] {
                let mut d = device(threads);
                let x = tensor_of(&mut d, 1, len, dtype, &xs);
                let g = d.allocate(1, len, dtype, "g").unwrap();
                d.gelu(&x, &g).unwrap();
                let got = d.read_rows(&g, &[0]).unwrap();
                for (i, (&v, &r)) in xs.iter().zip(&got).enumerate() {
                    let want = dtype.round(gelu32(dtype.round(v)));
                    assert_eq!(r.to_bits(), want.to_bits(), "{dtype} element {i}");
                }
            }
        }
    }

    #[test]
    fn inputs_are_the_seeded_values_rounded_to_the_dtype() {
        for dtype in DType::ALL {
            let mut d = device(1);
            let x = d.allocate(3, 1500, dtype, "x").unwrap();
            d.fill_inputs(&x, 7).unwrap();
            let got = d.read_rows(&x, &[0, 1, 2]).unwrap();
            for (i, &g) in got.iter().enumerate() {
                assert_eq!(g, dtype.round(input_value(7, i as u64)), "{dtype} {i}");
            }
        }
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
        let len = threads::PARALLEL_MIN_ELEMENTS + 3;
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
        let big = threads::PARALLEL_MIN_ELEMENTS * 2;
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
