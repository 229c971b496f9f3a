//! The CPU reference device.

use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::{Array2, ArrayView2, linalg::general_mat_mul};

use crate::alloc::{Stats, TensorPool};
use crate::cpu::memory::{HostSegments, available_host_bytes};
use crate::device::{Device, DeviceError, DeviceMemory, Tensor};
use crate::dtype::DType;
use crate::environment::Environment;
use crate::measure::synthetic::input_value;
use crate::tool::ToolInfo;

/// Real arithmetic on the host under the GPU's allocator policy. Storage is in the requested
/// dtype; products convert to float32, accumulate in float32 and round the result back, as a GPU
/// with float32 accumulation does.
#[derive(Debug)]
pub struct CpuDevice {
    tensors: TensorPool<HostSegments>,
    tool: ToolInfo,
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

    fn workspace_bytes(&self) -> u64 {
        0
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
        let result = {
            let xs = self.read(x)?;
            let ws = self.read(weight)?;
            let bs = self.read(bias)?;
            let shape = |e: ndarray::ShapeError| DeviceError::Shape(e.to_string());
            let xa = ArrayView2::from_shape((m, k), &xs[..]).map_err(shape)?;
            let wa = ArrayView2::from_shape((n, k), &ws[..]).map_err(shape)?;
            let mut c = Array2::from_shape_fn((m, n), |(_, j)| bs[j]);
            general_mat_mul(1.0, &xa, &wa.t(), 1.0, &mut c);
            c.into_raw_vec_and_offset().0
        };
        self.write(out, &result)
    }

    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError> {
        if x.len() != out.len() {
            return Err(shape_error("gelu", x, out));
        }
        let values: Vec<f32> = self.read(x)?.iter().map(|&v| gelu32(v)).collect();
        self.write(out, &values)
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
