//! `CudaDevice`: the measurement engine's [`Device`] on an NVIDIA GPU.
//!
//! One primary context and one non-blocking stream; every tensor is a block of the caching
//! allocator (PyTorch's policy) over `cuMemAlloc` segments; each Linear takes the path torch
//! 2.11's `addmm` takes for its shape (`lab::workspaces`): one cuBLASLt matmul with the bias
//! epilogue, made as `gemm_and_bias` makes it ([`crate::blaslt`]), or, when a dimension is 1, the
//! bias copied into the output by our kernel and one `cublasGemmEx` with beta = 1
//! ([`crate::gemm`]); GELU and the inputs are our kernels. The cuBLAS handle and its workspace are
//! created on the first product, the cuBLASLt workspace on the first cuBLASLt product, through the
//! allocator and after the output, as PyTorch does, so they show in the cold forward pass.
//!
//! Teardown (`Drop`) frees everything and releases the context; `measure` writes its document
//! before the device is dropped, and the libraries stay loaded for the process's life, so a
//! teardown that fails cannot lose a finished run.

use std::ffi::c_void;
use std::rc::Rc;

use cudarc::driver::sys::{CUcontext, CUevent, CUfunction, CUstream};
use lab::alloc::{AllocationEvent, Block, Stats, TensorPool};
use lab::device::{Device, DeviceError, DeviceMemory, Tensor};
use lab::dtype::DType;
use lab::environment::{ENVIRONMENT_SCHEMA, Environment};
use lab::tool::ToolInfo;
use lab::workspaces::{AddmmPath, MemoryPolicy, WorkspaceOptions};
use serde_json::{Map, Value, json};

use crate::blas::{self, Blas};
use crate::blaslt::{MatmulSpec, Operands, Workspace};
use crate::driver::{CuDevice, DevicePtr, Driver};
use crate::environment::{
    check_compute_capability, describe_blas, describe_driver, describe_gpu, describe_nvml,
    set_kernel_form,
};
use crate::error::CudaError;
use crate::gemm::{GemmArgs, GemmEx};
use crate::kernels::{KernelChoice, Kernels, launch_shape};
use crate::loader;
use crate::nvml::{self, NvmlHandle};
use crate::segments::DriverSegments;

/// How to set the device up: PyTorch's workspace knobs and the kernel form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaOptions {
    /// `--kernel-form`.
    pub kernel_form: KernelChoice,
    /// `--cublas-workspace`, `--cublaslt-workspace`, `--cublaslt-unified-workspace`, and
    /// PyTorch's `DISABLE_ADDMM_CUDA_LT`.
    pub workspaces: WorkspaceOptions,
}

/// The cuBLAS handle and the library workspaces, from the first product on.
#[derive(Debug)]
struct BlasState {
    handle: blas::Handle,
    /// Whether the cuBLAS workspace has been allocated (on the first product through the handle,
    /// kept for the process).
    handle_ready: bool,
    /// Whether the cuBLASLt workspace has been allocated (on the first cuBLASLt product, kept).
    lt_ready: bool,
    cublas_workspace: Option<Block>,
    cublaslt_workspace: Option<Block>,
}

/// An NVIDIA GPU ready to run the synthetic model.
pub struct CudaDevice {
    driver: Rc<Driver>,
    blas: Blas,
    gemm: GemmEx,
    nvml: Option<NvmlHandle>,
    dev: CuDevice,
    ctx: CUcontext,
    stream: CUstream,
    kernels: Kernels,
    tensors: TensorPool<DriverSegments>,
    blas_state: Option<BlasState>,
    events: (CUevent, CUevent),
    policy: MemoryPolicy,
    environment: Environment,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("device", &self.environment.requested_device)
            .field("driver", &self.driver)
            .field("kernels", &self.kernels.form)
            .finish_non_exhaustive()
    }
}

impl CudaDevice {
    /// Opens `cuda:ordinal`: driver, context, stream, kernels, cuBLAS (loaded, not yet a
    /// handle), NVML where present. An error with [`CudaError::is_unavailable`] means there is no
    /// usable GPU here.
    pub fn open(
        ordinal: usize,
        tool: ToolInfo,
        options: &CudaOptions,
    ) -> Result<CudaDevice, CudaError> {
        let mut details = Map::new();
        let mut nvml = nvml::open();
        describe_nvml(&nvml, &mut details);
        let driver = Rc::new(Driver::load()?);
        describe_driver(&driver, &mut details);
        let dev = driver.device(ordinal)?;
        details.insert("visible_devices".into(), json!(driver.device_count()?));
        let cc = describe_gpu(&driver, dev, nvml.as_mut().ok(), &mut details)?;
        check_compute_capability(ordinal, &driver, dev, cc)?;
        let blas = Blas::new(loader::load_blas(driver.version)?)?;
        let gemm = GemmEx::new(blas.libs.blas)?;
        describe_blas(Some(&blas), &mut details);

        let ctx = driver.retain_primary_context(dev)?;
        let rest = (|| {
            let (free, total) = driver.mem_get_info()?;
            if let Some(Value::Object(gpu)) = details.get_mut("gpu") {
                gpu.insert("free_memory_bytes".into(), json!(free));
                gpu.insert("total_memory_bytes".into(), json!(total));
            }
            let stream = driver.stream_create()?;
            let kernels = match Kernels::load(&driver, cc.0, cc.1, options.kernel_form) {
                Ok(k) => k,
                Err(e) => {
                    driver.stream_destroy(stream);
                    return Err(e);
                }
            };
            set_kernel_form(kernels.form, &mut details);
            details.insert(
                "kernel_form_requested".into(),
                json!(options.kernel_form.to_string()),
            );
            let events = match (driver.event_create(), driver.event_create()) {
                (Ok(a), Ok(b)) => (a, b),
                (a, b) => {
                    for e in [a.as_ref().ok(), b.as_ref().ok()].into_iter().flatten() {
                        driver.event_destroy(*e);
                    }
                    kernels.unload(&driver);
                    driver.stream_destroy(stream);
                    return Err(a.and(b).err().unwrap_or(CudaError::Kernels {
                        arch: String::new(),
                        reason: "event creation failed".into(),
                    }));
                }
            };
            Ok((stream, kernels, events))
        })();
        let (stream, kernels, events) = match rest {
            Ok(parts) => parts,
            Err(e) => {
                driver.release_primary_context(dev);
                return Err(e);
            }
        };
        let environment = Environment {
            schema: ENVIRONMENT_SCHEMA.to_string(),
            tool,
            requested_device: format!("cuda:{ordinal}"),
            backend: "cuda".to_string(),
            reference_device: false,
            usable: true,
            problem: None,
            details: Value::Object(details),
        };
        Ok(CudaDevice {
            tensors: TensorPool::new(DriverSegments::new(Rc::clone(&driver))),
            driver,
            blas,
            gemm,
            nvml: nvml.ok(),
            dev,
            ctx,
            stream,
            kernels,
            blas_state: None,
            events,
            policy: MemoryPolicy::for_gpu(&options.workspaces, cc.0, cc.1),
            environment,
        })
    }

    /// Starts recording the allocation sequence (for tests that compare it with the plan).
    pub fn enable_allocation_trace(&mut self) {
        self.tensors.enable_trace();
    }

    /// The allocation sequence recorded since [`CudaDevice::enable_allocation_trace`].
    pub fn allocation_trace(&self) -> &[AllocationEvent] {
        self.tensors.trace()
    }

    fn ptr(&self, t: &Tensor) -> Result<DevicePtr, DeviceError> {
        let block = self.tensors.block(t)?;
        Ok(self.tensors.allocator().segment(block.segment) + block.offset)
    }

    /// The handle, as PyTorch's `getCurrentCUDABlasHandle` leaves it on every use (created on the
    /// first; `cublasSetStream`; `setWorkspaceForHandle`, which allocates the cuBLAS workspace
    /// through the allocator the first time; `cublasSetMathMode`). Both paths of a Linear come
    /// through here. See `lab::workspaces` for the sources.
    fn blas_handle(&mut self, allow_tf32: bool) -> Result<blas::Handle, DeviceError> {
        if self.blas_state.is_none() {
            let handle = self.blas.create_handle().map_err(backend)?;
            self.blas_state = Some(BlasState {
                handle,
                handle_ready: false,
                lt_ready: false,
                cublas_workspace: None,
                cublaslt_workspace: None,
            });
        }
        let Some(state) = self.blas_state.as_mut() else {
            return Err(DeviceError::Backend("no cuBLAS handle".into()));
        };
        let h = state.handle;
        self.blas.set_stream(h, self.stream).map_err(backend)?;
        let w = self.policy.workspaces();
        if !state.handle_ready {
            if let Some((what, bytes)) = w.handle_allocation() {
                state.cublas_workspace = Some(self.tensors.allocate_bytes(bytes, what)?);
            }
            state.handle_ready = true;
        }
        let cublas_ptr = state.cublas_workspace.as_ref().map_or(0, |b| {
            self.tensors.allocator().segment(b.segment) + b.offset
        });
        // SAFETY: the block stays allocated until `Drop`, which destroys the handle first.
        unsafe { self.blas.set_workspace(h, cublas_ptr, w.cublas_bytes) }.map_err(backend)?;
        self.blas.set_math_mode(h, allow_tf32).map_err(backend)?;
        Ok(h)
    }

    /// The cuBLASLt workspace of `getCUDABlasLtWorkspace`, after [`CudaDevice::blas_handle`]:
    /// the cuBLAS workspace when unified, else a second block, allocated on the first cuBLASLt
    /// product and kept.
    fn lt_workspace(&mut self) -> Result<Workspace, DeviceError> {
        let Some(state) = self.blas_state.as_mut() else {
            return Err(DeviceError::Backend("no cuBLAS handle".into()));
        };
        let w = self.policy.workspaces();
        if !state.lt_ready {
            if let Some((what, bytes)) = w.lt_allocation() {
                state.cublaslt_workspace = Some(self.tensors.allocate_bytes(bytes, what)?);
            }
            state.lt_ready = true;
        }
        let block = if w.cublaslt_unified {
            &state.cublas_workspace
        } else {
            &state.cublaslt_workspace
        };
        Ok(Workspace {
            ptr: block.as_ref().map_or(0, |b| {
                self.tensors.allocator().segment(b.segment) + b.offset
            }),
            bytes: w.cublaslt_bytes,
        })
    }

    /// Launches a 1-D grid-stride kernel over `n` elements.
    ///
    /// # Safety
    /// `args` match the kernel's parameters, and its pointers cover `n` elements.
    unsafe fn launch(&self, f: CUfunction, n: u64, args: &mut [u64]) -> Result<(), DeviceError> {
        if n == 0 {
            return Ok(());
        }
        let (grid, block) = launch_shape(n);
        let mut params: Vec<*mut c_void> =
            args.iter_mut().map(|a| (a as *mut u64).cast()).collect();
        // SAFETY: guaranteed by the caller; every parameter of our kernels is 8 bytes (a pointer
        // or a u64), and `args` outlives the launch call, which copies the values.
        unsafe { self.driver.launch(f, grid, block, self.stream, &mut params) }.map_err(backend)
    }
}

fn backend(e: CudaError) -> DeviceError {
    DeviceError::Backend(e.to_string())
}

fn same_dtype(ts: &[&Tensor]) -> Result<DType, DeviceError> {
    let d = ts[0].dtype;
    if ts.iter().any(|t| t.dtype != d) {
        return Err(DeviceError::Shape(
            "tensors of different dtypes".to_string(),
        ));
    }
    Ok(d)
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::Float32 => 0,
        DType::Float16 => 1,
        DType::Bfloat16 => 2,
    }
}

/// Host f32 values to the bytes of `dtype` (round to nearest even).
pub fn encode(values: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::Float32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::Float16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::Bfloat16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

/// Bytes of `dtype` back to f32.
pub fn decode(bytes: &[u8], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::Float32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::Float16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::Bfloat16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

/// Checks `out[m,n] = x[m,k] · w[n,k]ᵀ + b[1,n]` shapes.
pub fn check_linear_shapes(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    out: &Tensor,
) -> Result<(), DeviceError> {
    if x.cols != w.cols || w.rows != out.cols || b.len() != w.rows || out.rows != x.rows {
        return Err(DeviceError::Shape(format!(
            "linear: x {}x{}, weight {}x{}, bias {}x{}, out {}x{}",
            x.rows, x.cols, w.rows, w.cols, b.rows, b.cols, out.rows, out.cols
        )));
    }
    Ok(())
}

impl Device for CudaDevice {
    fn environment(&self) -> Environment {
        self.environment.clone()
    }

    fn memory_policy(&self) -> MemoryPolicy {
        self.policy.clone()
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        // The context is current on this thread since `open` (the device is not `Send`);
        // setting it again is cheap and keeps a library that changed it from breaking us.
        self.driver.set_current(self.ctx).map_err(backend)?;
        self.driver.ctx_synchronize().map_err(backend)
    }

    fn stats(&self) -> Stats {
        self.tensors.stats()
    }

    fn reset_peaks(&mut self) {
        self.tensors.reset_peaks();
    }

    fn device_memory(&mut self) -> Result<Option<DeviceMemory>, DeviceError> {
        let (free_bytes, total_bytes) = self.driver.mem_get_info().map_err(backend)?;
        Ok(Some(DeviceMemory {
            free_bytes,
            total_bytes,
            process_used_bytes: self.nvml.as_ref().and_then(NvmlHandle::process_used_bytes),
        }))
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
        if values.len() != tensor.len() {
            return Err(DeviceError::Shape(format!(
                "upload of {} values into a tensor of {}",
                values.len(),
                tensor.len()
            )));
        }
        let bytes = encode(values, tensor.dtype);
        let dst = self.ptr(tensor)?;
        // SAFETY: the tensor's block holds at least `tensor.bytes()` = `bytes.len()` bytes.
        unsafe { self.driver.copy_to_device(dst, &bytes, self.stream) }.map_err(backend)
    }

    fn fill_inputs(&mut self, tensor: &Tensor, seed: u64) -> Result<(), DeviceError> {
        let f = self.kernels.inputs[dtype_index(tensor.dtype)];
        let n = tensor.len() as u64;
        let mut args = [self.ptr(tensor)?, n, seed];
        // SAFETY: inputs_*(out, n, seed); `out` holds n elements of the tensor's dtype.
        unsafe { self.launch(f, n, &mut args) }
    }

    fn linear(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
        out: &Tensor,
        allow_tf32: bool,
    ) -> Result<(), DeviceError> {
        check_linear_shapes(x, weight, bias, out)?;
        let dtype = same_dtype(&[x, weight, bias, out])?;
        let path = self
            .policy
            .linear_path(x.rows, x.cols, weight.rows, dtype)
            .unwrap_or(AddmmPath::CublasLt);
        let (a, b, c, bias_ptr) = (
            self.ptr(weight)?,
            self.ptr(x)?,
            self.ptr(out)?,
            self.ptr(bias)?,
        );
        match path {
            AddmmPath::CublasLt => {
                let spec = MatmulSpec::linear(x.rows, x.cols, weight.rows, dtype, allow_tf32)
                    .map_err(DeviceError::Shape)?;
                let ops = Operands {
                    a,
                    b,
                    c,
                    bias: Some(bias_ptr),
                };
                let h = self.blas_handle(allow_tf32)?;
                let workspace = self.lt_workspace()?;
                // SAFETY: the operands are live blocks holding the matrices `spec` describes
                // (shapes and dtype checked above); the workspace block is kept until `Drop`.
                unsafe { self.blas.lt.matmul(h, &spec, &ops, workspace, self.stream) }
                    .map_err(backend)
            }
            AddmmPath::Cublas => {
                let g = GemmArgs::linear(x.rows, x.cols, weight.rows, dtype, allow_tf32)
                    .map_err(DeviceError::Shape)?;
                // The bias expanded into the output (torch's copy_), then the GEMM adds to it.
                let f = self.kernels.bias_rows_for(dtype);
                let n = out.len() as u64;
                let mut args = [bias_ptr, c, n, out.cols as u64];
                // SAFETY: bias_rows_b{32,16}(bias, out, n, cols): `out` holds n = rows x cols
                // elements and `bias` cols elements of the kernel's width.
                unsafe { self.launch(f, n, &mut args) }?;
                let h = self.blas_handle(allow_tf32)?;
                if g.sets_default_math() {
                    self.blas.set_math_mode(h, false).map_err(backend)?;
                }
                // SAFETY: the operands are live blocks holding the matrices `g` describes (shapes
                // and dtype checked above); the handle is bound to the device's stream.
                unsafe { self.gemm.run(h, &g, a, b, c) }.map_err(backend)?;
                if g.sets_default_math() {
                    self.blas.set_math_mode(h, false).map_err(backend)?;
                }
                Ok(())
            }
        }
    }

    fn gelu(&mut self, x: &Tensor, out: &Tensor) -> Result<(), DeviceError> {
        let dtype = same_dtype(&[x, out])?;
        if x.len() != out.len() {
            return Err(DeviceError::Shape(
                "gelu: input and output sizes differ".into(),
            ));
        }
        let f = self.kernels.gelu[dtype_index(dtype)];
        let n = x.len() as u64;
        let mut args = [self.ptr(x)?, self.ptr(out)?, n];
        // SAFETY: gelu_*(x, y, n): both hold n elements of the dtype.
        unsafe { self.launch(f, n, &mut args) }
    }

    fn read_rows(&mut self, tensor: &Tensor, rows: &[usize]) -> Result<Vec<f32>, DeviceError> {
        let row_bytes = tensor.cols as u64 * tensor.dtype.size_bytes();
        let base = self.ptr(tensor)?;
        let mut out = Vec::with_capacity(rows.len() * tensor.cols);
        let mut buf = vec![0u8; row_bytes as usize];
        for &r in rows {
            if r >= tensor.rows {
                return Err(DeviceError::Shape(format!(
                    "row {r} of a tensor with {} rows",
                    tensor.rows
                )));
            }
            // SAFETY: row r < rows lies inside the tensor's block.
            unsafe {
                self.driver
                    .copy_to_host(&mut buf, base + r as u64 * row_bytes, self.stream)
            }
            .map_err(backend)?;
            out.extend(decode(&buf, tensor.dtype));
        }
        Ok(out)
    }

    fn start_clock(&mut self) -> Result<(), DeviceError> {
        self.driver
            .event_record(self.events.0, self.stream)
            .map_err(backend)
    }

    fn stop_clock(&mut self) -> Result<Option<f64>, DeviceError> {
        self.driver
            .event_record(self.events.1, self.stream)
            .map_err(backend)?;
        let ms = self
            .driver
            .elapsed_ms(self.events.0, self.events.1)
            .map_err(backend)?;
        Ok(Some(f64::from(ms) / 1000.0))
    }
}

impl Drop for CudaDevice {
    /// Frees everything and releases the context. `measure` drops the device only after its
    /// document is written; an error here is ignored (there is nothing left to save).
    fn drop(&mut self) {
        let _ = self.driver.ctx_synchronize();
        if let Some(state) = self.blas_state.take() {
            let _ = self.blas.destroy_handle(state.handle);
            for block in [state.cublas_workspace, state.cublaslt_workspace]
                .into_iter()
                .flatten()
            {
                self.tensors.allocator_mut().free(block);
            }
        }
        self.tensors.free_all();
        self.tensors.allocator_mut().empty_cache();
        self.kernels.unload(&self.driver);
        self.driver.event_destroy(self.events.0);
        self.driver.event_destroy(self.events.1);
        self.driver.stream_destroy(self.stream);
        self.driver.release_primary_context(self.dev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: usize, cols: usize) -> Tensor {
        Tensor {
            id: 0,
            rows,
            cols,
            dtype: DType::Float16,
        }
    }

    #[test]
    fn encoding_rounds_like_the_host_reference() {
        let values = [0.1f32, -1.0 + 2f32.powi(-23), 1.0 + 2f32.powi(-11), 3.0e-8];
        for d in DType::ALL {
            let back = decode(&encode(&values, d), d);
            let want: Vec<f32> = values.iter().map(|v| d.round(*v)).collect();
            assert_eq!(back, want, "{d}");
            assert_eq!(encode(&values, d).len() as u64, 4 * d.size_bytes());
        }
    }

    #[test]
    fn linear_shapes_are_checked() {
        assert!(check_linear_shapes(&t(6, 4), &t(8, 4), &t(1, 8), &t(6, 8)).is_ok());
        assert!(check_linear_shapes(&t(6, 4), &t(8, 5), &t(1, 8), &t(6, 8)).is_err());
        assert!(check_linear_shapes(&t(6, 4), &t(8, 4), &t(1, 7), &t(6, 8)).is_err());
        assert!(check_linear_shapes(&t(6, 4), &t(8, 4), &t(1, 8), &t(5, 8)).is_err());
    }

    #[test]
    fn opening_without_a_gpu_is_an_unavailable_error() {
        match CudaDevice::open(0, ToolInfo::new(None), &CudaOptions::default()) {
            Ok(d) => assert!(d.environment().usable),
            Err(e) => assert!(e.is_unavailable(), "{e}"),
        }
    }
}
