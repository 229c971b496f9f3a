//! cuBLASLt matmuls, made the way PyTorch 2.11 makes them for `F.linear`.
//!
//! `F.linear(x, W, b)` on CUDA is `addmm(b, x, W.t())`, and `addmm_out_cuda_impl`
//! (aten/src/ATen/native/cuda/Blas.cpp) sends a contiguous 1-D bias down the Lt path:
//! `launchGemmAndBiasCublasLt` -> `at::cuda::blas::gemm_and_bias` (aten/src/ATen/cuda/CUDABlas.cpp),
//! one `cublasLtMatmul` with `CUBLASLT_EPILOGUE_BIAS`. What this module follows, line by line, is
//! `gemm_and_bias` in pytorch/pytorch at bd53dc4f (the stored snapshot):
//!
//! - `CuBlasLtMatmulPreference preference;` is made first, then
//!   `CuBlasLtMatmulDescriptor computeDesc(computeType, scaleType)` with `scaleType = CUDA_R_32F`
//!   and `computeType = CUBLAS_COMPUTE_32F`, or `CUBLAS_COMPUTE_32F_FAST_TF32` for float only when
//!   the float32 matmul precision is TF32 (our `--allow-tf32`); half types keep `COMPUTE_32F`
//!   (`allowFP16AccumulationCuBLAS` is off by default, and the default reduction options set no
//!   `CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK`);
//! - `setAttribute(CUBLASLT_MATMUL_DESC_TRANSA, transa)`, `(..._TRANSB, transb)`, then
//!   `setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue)` (`bias ? CUBLASLT_EPILOGUE_BIAS :
//!   CUBLASLT_EPILOGUE_DEFAULT`) and, with a bias, `CUBLASLT_MATMUL_DESC_BIAS_POINTER`;
//! - `CuBlasLtMatrixLayout Adesc(abType, m, k, mat1_ld, transpose_mat1)`, `Bdesc(abType, k, n,
//!   mat2_ld, transpose_mat2)`, `Cdesc(cType, m, n, result_ld)`, where a transposed layout is
//!   created as `cols x rows` (`t ? cols : rows, t ? rows : cols, ld`);
//! - `auto ltworkspace = CublasLtWorkspace();` then
//!   `preference.setAttribute(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ltworkspace.size)` and the
//!   four `CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES` from `_getAlignment` of mat1, mat2,
//!   result and bias (the largest power of two up to 256 dividing the address);
//! - `cublasLtMatmulAlgoGetHeuristic(ltHandle, computeDesc, Adesc, Bdesc, Cdesc, Cdesc, preference,
//!   1, &heuristicResult, &returnedResult)`; no result is `CUBLAS_STATUS_NOT_SUPPORTED`;
//! - `cublasLtMatmul(ltHandle, computeDesc, alpha_ptr, mat1_ptr, Adesc, mat2_ptr, Bdesc, beta_ptr,
//!   result_ptr, Cdesc, result_ptr, Cdesc, &heuristicResult.algo, ltworkspace.ptr,
//!   ltworkspace.size, stream)` with `alpha = 1` and `beta_val = bias ? 0 : 1`, both float.
//!
//! The Lt handle is the cuBLAS handle cast (`getCurrentCUDABlasLtHandle` returns
//! `reinterpret_cast<cublasLtHandle_t>(getCurrentCUDABlasHandle())` on CUDA; cuBLAS documents
//! that a `cublasHandle_t` may be used as a `cublasLtHandle_t`).
//!
//! [`MatmulSpec`] and [`LtPlan`] are the reusable pieces: a Linear makes a plan per call, as
//! PyTorch does; a GEMM probe can make one plan and run it many times.

use std::ffi::{c_int, c_void};

use cudarc::driver::sys::CUstream;
use lab::dtype::DType;

use crate::blas::Handle;
use crate::error::{CudaError, cublas_status_name};

/// A `cublasStatus_t`, read as the integer it is.
type Status = c_int;
type Desc = *mut c_void;
type Layout = *mut c_void;
type Pref = *mut c_void;

type DescCreateFn = unsafe extern "C" fn(*mut Desc, c_int, c_int) -> Status;
type DestroyFn = unsafe extern "C" fn(*mut c_void) -> Status;
type SetAttributeFn = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, usize) -> Status;
type LayoutCreateFn = unsafe extern "C" fn(*mut Layout, c_int, u64, u64, i64) -> Status;
type PrefCreateFn = unsafe extern "C" fn(*mut Pref) -> Status;
type HeuristicFn = unsafe extern "C" fn(
    Handle,
    Desc,
    Layout,
    Layout,
    Layout,
    Layout,
    Pref,
    c_int,
    *mut HeuristicResult,
    *mut c_int,
) -> Status;
type MatmulFn = unsafe extern "C" fn(
    Handle,
    Desc,
    *const c_void,
    *const c_void,
    Layout,
    *const c_void,
    Layout,
    *const c_void,
    *const c_void,
    Layout,
    *mut c_void,
    Layout,
    *const Algo,
    *mut c_void,
    usize,
    CUstream,
) -> Status;

/// `cublasLtMatmulAlgo_t`: 64 opaque bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Algo {
    /// Opaque.
    pub data: [u64; 8],
}

/// `cublasLtMatmulHeuristicResult_t` (cublasLt.h), with the status read as an integer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct HeuristicResult {
    algo: Algo,
    workspace_size: usize,
    state: c_int,
    waves_count: f32,
    reserved: [c_int; 4],
}

// cublasLt.h constants (checked against cudarc's 13.0 bindings in the tests).
/// `CUBLASLT_MATMUL_DESC_TRANSA` (int32 `cublasOperation_t`).
pub const DESC_TRANSA: c_int = 3;
/// `CUBLASLT_MATMUL_DESC_TRANSB`.
pub const DESC_TRANSB: c_int = 4;
/// `CUBLASLT_MATMUL_DESC_EPILOGUE` (uint32 `cublasLtEpilogue_t`).
pub const DESC_EPILOGUE: c_int = 7;
/// `CUBLASLT_MATMUL_DESC_BIAS_POINTER` (`const void*`).
pub const DESC_BIAS_POINTER: c_int = 8;
/// `CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES` (uint64).
pub const PREF_MAX_WORKSPACE_BYTES: c_int = 1;
/// `CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES` (uint32); B, C and D follow.
pub const PREF_MIN_ALIGNMENT_A_BYTES: c_int = 5;
/// `CUBLASLT_EPILOGUE_DEFAULT`.
pub const EPILOGUE_DEFAULT: u32 = 1;
/// `CUBLASLT_EPILOGUE_BIAS`: bias (one value per row of D) broadcast over the columns.
pub const EPILOGUE_BIAS: u32 = 4;
/// `CUBLAS_OP_N`.
pub const OP_N: i32 = 0;
/// `CUBLAS_OP_T`.
pub const OP_T: i32 = 1;
/// `CUBLAS_COMPUTE_32F`.
pub const COMPUTE_32F: c_int = 68;
/// `CUBLAS_COMPUTE_32F_FAST_TF32`.
pub const COMPUTE_32F_FAST_TF32: c_int = 77;
/// `CUDA_R_32F`, the scale type of every float matmul here.
pub const CUDA_R_32F: c_int = 0;
/// `CUBLAS_STATUS_NOT_SUPPORTED`, what PyTorch reports when the heuristic returns nothing.
const STATUS_NOT_SUPPORTED: c_int = 15;

/// The `cudaDataType` of a dtype.
pub fn data_type(d: DType) -> c_int {
    match d {
        DType::Float32 => 0,   // CUDA_R_32F
        DType::Float16 => 2,   // CUDA_R_16F
        DType::Bfloat16 => 14, // CUDA_R_16BF
    }
}

/// The compute type: float32 accumulation always; TF32 only for float32 when allowed.
pub fn compute_type(d: DType, allow_tf32: bool) -> c_int {
    if d == DType::Float32 && allow_tf32 {
        COMPUTE_32F_FAST_TF32
    } else {
        COMPUTE_32F
    }
}

/// What runs after the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// `D = alpha · op(A) · op(B) + beta · C`.
    Default,
    /// The same plus a bias vector (one value per row of D) broadcast over the columns.
    Bias,
}

/// One matmul in cuBLASLt's column-major terms, as `gemm_and_bias` describes it: `D (m x n) =
/// alpha · op(A) (m x k) · op(B) (k x n) [+ bias]`, with `C = D` in place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MatmulSpec {
    /// Storage type of A, B and C/D (and of the bias).
    pub dtype: DType,
    /// `cublasComputeType_t`.
    pub compute: c_int,
    /// A is stored transposed (`transpose_mat1`).
    pub transa: bool,
    /// B is stored transposed (`transpose_mat2`).
    pub transb: bool,
    /// Rows of op(A) and D.
    pub m: u64,
    /// Columns of op(B) and D.
    pub n: u64,
    /// The shared dimension.
    pub k: u64,
    /// Leading dimension of A as stored.
    pub lda: i64,
    /// Leading dimension of B as stored.
    pub ldb: i64,
    /// Leading dimension of C/D.
    pub ldc: i64,
    /// Bias or not.
    pub epilogue: Epilogue,
    /// `alpha` (float, as the scale type is CUDA_R_32F).
    pub alpha: f32,
    /// `beta`: PyTorch's `bias ? 0 : 1`; 0 for a plain product.
    pub beta: f32,
}

/// A matrix layout: `(rows, cols, ld)` as `cublasLtMatrixLayoutCreate` takes them.
pub type LayoutShape = (u64, u64, i64);

impl MatmulSpec {
    /// `F.linear` for a row-major `x[rows, in_f]`, weight `[out_f, in_f]` and a bias of `out_f`
    /// into a row-major `out[rows, out_f]`: the arguments `cublasCommonArgs` derives for
    /// `addmm(b, x, W.t())` with a contiguous result (`transpose_result`): mat1 is `W.t()`
    /// (transposed, `m = out_f`, `lda = in_f`), mat2 is `x` (not transposed, `n = rows`,
    /// `ldb = in_f`), `result_ld = out_f`, `k = in_f`.
    pub fn linear(
        rows: usize,
        in_f: usize,
        out_f: usize,
        dtype: DType,
        allow_tf32: bool,
    ) -> Result<MatmulSpec, String> {
        // cuBLASLt takes 64-bit sizes, but PyTorch's checks and the kernels' indexing keep every
        // dimension within int32; refuse what the run could not describe either.
        let fit = |v: usize, what: &str| -> Result<u64, String> {
            if v == 0 || v > i32::MAX as usize {
                Err(format!("{what} = {v} is outside 1..=2147483647"))
            } else {
                Ok(v as u64)
            }
        };
        let (m, n, k) = (
            fit(out_f, "out_features")?,
            fit(rows, "rows")?,
            fit(in_f, "in_features")?,
        );
        Ok(MatmulSpec {
            dtype,
            compute: compute_type(dtype, allow_tf32),
            transa: true,
            transb: false,
            m,
            n,
            k,
            lda: k as i64,
            ldb: k as i64,
            ldc: m as i64,
            epilogue: Epilogue::Bias,
            alpha: 1.0,
            beta: 0.0,
        })
    }

    /// A's layout: `m x k`, created `k x m` when stored transposed.
    pub fn a_layout(&self) -> LayoutShape {
        if self.transa {
            (self.k, self.m, self.lda)
        } else {
            (self.m, self.k, self.lda)
        }
    }

    /// B's layout: `k x n`, created `n x k` when stored transposed.
    pub fn b_layout(&self) -> LayoutShape {
        if self.transb {
            (self.n, self.k, self.ldb)
        } else {
            (self.k, self.n, self.ldb)
        }
    }

    /// C's (and D's) layout: `m x n`.
    pub fn c_layout(&self) -> LayoutShape {
        (self.m, self.n, self.ldc)
    }
}

/// `_getAlignment`: the largest power of two, at most 256, that divides `address`.
pub fn alignment(address: u64) -> u32 {
    let mut a: u32 = 256;
    while a > 1 && !address.is_multiple_of(u64::from(a)) {
        a /= 2;
    }
    a
}

/// Device addresses of a matmul's operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operands {
    /// A (for a Linear: the weight).
    pub a: u64,
    /// B (for a Linear: the input).
    pub b: u64,
    /// C = D, read when beta is not 0 and written.
    pub c: u64,
    /// The bias vector, with [`Epilogue::Bias`].
    pub bias: Option<u64>,
}

/// A workspace for cuBLASLt: an address and its size (a null address for 0 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workspace {
    /// Device address (0 when `bytes` is 0).
    pub ptr: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The cuBLASLt functions, from the library the loader chose (loaded for the process's life).
#[derive(Clone, Copy)]
pub struct Lt {
    desc_create: DescCreateFn,
    desc_destroy: DestroyFn,
    desc_set: SetAttributeFn,
    layout_create: LayoutCreateFn,
    layout_destroy: DestroyFn,
    pref_create: PrefCreateFn,
    pref_destroy: DestroyFn,
    pref_set: SetAttributeFn,
    heuristic: HeuristicFn,
    matmul: MatmulFn,
}

impl std::fmt::Debug for Lt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lt").finish_non_exhaustive()
    }
}

fn check(call: &'static str, status: Status) -> Result<(), CudaError> {
    if status == 0 {
        Ok(())
    } else {
        Err(CudaError::Cublas {
            call,
            status,
            name: cublas_status_name(status),
        })
    }
}

impl Lt {
    /// Resolves the functions from cuBLASLt.
    pub fn new(lib: &'static libloading::Library) -> Result<Lt, CudaError> {
        // SAFETY (all below): each type is the prototype from cublasLt.h for that name; the
        // library stays loaded for the process's life.
        unsafe {
            Ok(Lt {
                desc_create: crate::blas::sym(lib, "cublasLtMatmulDescCreate")?,
                desc_destroy: crate::blas::sym(lib, "cublasLtMatmulDescDestroy")?,
                desc_set: crate::blas::sym(lib, "cublasLtMatmulDescSetAttribute")?,
                layout_create: crate::blas::sym(lib, "cublasLtMatrixLayoutCreate")?,
                layout_destroy: crate::blas::sym(lib, "cublasLtMatrixLayoutDestroy")?,
                pref_create: crate::blas::sym(lib, "cublasLtMatmulPreferenceCreate")?,
                pref_destroy: crate::blas::sym(lib, "cublasLtMatmulPreferenceDestroy")?,
                pref_set: crate::blas::sym(lib, "cublasLtMatmulPreferenceSetAttribute")?,
                heuristic: crate::blas::sym(lib, "cublasLtMatmulAlgoGetHeuristic")?,
                matmul: crate::blas::sym(lib, "cublasLtMatmul")?,
            })
        }
    }

    /// Makes the plan and runs it once: `gemm_and_bias` from descriptor creation to
    /// `cublasLtMatmul`.
    ///
    /// # Safety
    /// `handle` is a live cuBLAS handle; the operands and the workspace are device memory of the
    /// sizes `spec` describes, live until the queued matmul has run on `stream`.
    pub unsafe fn matmul(
        &self,
        handle: Handle,
        spec: &MatmulSpec,
        ops: &Operands,
        workspace: Workspace,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let plan = unsafe { LtPlan::new(self, handle, spec, ops, workspace.bytes) }?;
        // SAFETY: as above; the plan was made for these operands.
        unsafe { plan.run(ops, workspace, stream) }
    }
}

/// The descriptors and the algorithm of one matmul, destroyed when dropped.
#[derive(Debug)]
pub struct LtPlan<'l> {
    lt: &'l Lt,
    handle: Handle,
    spec: MatmulSpec,
    pref: Pref,
    desc: Desc,
    /// A, B, C (null until created).
    layouts: [Layout; 3],
    /// The algorithm the heuristic chose.
    pub algo: Algo,
    /// The workspace the chosen algorithm needs (at most the preference's maximum).
    pub algo_workspace_bytes: u64,
}

impl<'l> LtPlan<'l> {
    /// Creates the preference, the descriptor and the layouts, and asks the heuristic for one
    /// algorithm under a workspace of `workspace_bytes`, exactly in `gemm_and_bias`'s order.
    ///
    /// # Safety
    /// `handle` is a live cuBLAS handle. The operand addresses are only read for their
    /// alignment and, for the bias, stored in the descriptor: a later [`LtPlan::run`] must pass
    /// the same bias.
    pub unsafe fn new(
        lt: &'l Lt,
        handle: Handle,
        spec: &MatmulSpec,
        ops: &Operands,
        workspace_bytes: u64,
    ) -> Result<LtPlan<'l>, CudaError> {
        let mut plan = LtPlan {
            lt,
            handle,
            spec: *spec,
            pref: std::ptr::null_mut(),
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            algo: Algo::default(),
            algo_workspace_bytes: 0,
        };
        // On any error `plan` is dropped, destroying what was created.
        // SAFETY: valid out-pointers; every attribute value below is the type cublasLt.h gives
        // for its attribute, passed with its size.
        unsafe {
            check(
                "cublasLtMatmulPreferenceCreate",
                (lt.pref_create)(&mut plan.pref),
            )?;
            check(
                "cublasLtMatmulDescCreate",
                (lt.desc_create)(&mut plan.desc, spec.compute, CUDA_R_32F),
            )?;
            let op = |t: bool| if t { OP_T } else { OP_N };
            plan.set_desc(DESC_TRANSA, &op(spec.transa))?;
            plan.set_desc(DESC_TRANSB, &op(spec.transb))?;
            let bias = match (spec.epilogue, ops.bias) {
                (Epilogue::Bias, Some(b)) => Some(b),
                (Epilogue::Bias, None) => {
                    return Err(CudaError::Cublas {
                        call: "cublasLtMatmulDescSetAttribute",
                        status: 7,
                        name: "CUBLAS_STATUS_INVALID_VALUE (a bias epilogue without a bias)",
                    });
                }
                (Epilogue::Default, _) => None,
            };
            let epilogue = if bias.is_some() {
                EPILOGUE_BIAS
            } else {
                EPILOGUE_DEFAULT
            };
            plan.set_desc(DESC_EPILOGUE, &epilogue)?;
            if let Some(b) = bias {
                let pointer = b as *const c_void;
                plan.set_desc(DESC_BIAS_POINTER, &pointer)?;
            }
            let ty = data_type(spec.dtype);
            for (slot, (rows, cols, ld)) in [spec.a_layout(), spec.b_layout(), spec.c_layout()]
                .into_iter()
                .enumerate()
            {
                check(
                    "cublasLtMatrixLayoutCreate",
                    (lt.layout_create)(&mut plan.layouts[slot], ty, rows, cols, ld),
                )?;
            }
            plan.set_pref(PREF_MAX_WORKSPACE_BYTES, &workspace_bytes)?;
            let aligns = [
                alignment(ops.a),
                alignment(ops.b),
                alignment(ops.c),
                alignment(bias.unwrap_or(0)),
            ];
            for (i, a) in aligns.iter().enumerate() {
                plan.set_pref(PREF_MIN_ALIGNMENT_A_BYTES + i as c_int, a)?;
            }
            let mut result = HeuristicResult::default();
            let mut returned: c_int = 0;
            let [a, b, c] = plan.layouts;
            check(
                "cublasLtMatmulAlgoGetHeuristic",
                (lt.heuristic)(
                    handle,
                    plan.desc,
                    a,
                    b,
                    c,
                    c,
                    plan.pref,
                    1,
                    &mut result,
                    &mut returned,
                ),
            )?;
            if returned == 0 {
                return Err(CudaError::Cublas {
                    call: "cublasLtMatmulAlgoGetHeuristic",
                    status: STATUS_NOT_SUPPORTED,
                    name: "CUBLAS_STATUS_NOT_SUPPORTED (no algorithm for this matmul)",
                });
            }
            plan.algo = result.algo;
            plan.algo_workspace_bytes = result.workspace_size as u64;
        }
        Ok(plan)
    }

    /// Queues the matmul on `stream`.
    ///
    /// # Safety
    /// The operands are device memory of the sizes the plan's spec describes, with the plan's
    /// bias; the workspace holds at least the bytes the plan was made for; all stay live until
    /// the matmul has run.
    pub unsafe fn run(
        &self,
        ops: &Operands,
        workspace: Workspace,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        let [a, b, c] = self.layouts;
        let ws = if workspace.bytes == 0 {
            std::ptr::null_mut()
        } else {
            workspace.ptr as *mut c_void
        };
        // SAFETY: guaranteed by the caller; alpha and beta are host floats as the CUDA_R_32F
        // scale type and the default (host) pointer mode require; C and D are the same buffer
        // with the same layout, as in PyTorch.
        let status = unsafe {
            (self.lt.matmul)(
                self.handle,
                self.desc,
                (&self.spec.alpha as *const f32).cast(),
                ops.a as *const c_void,
                a,
                ops.b as *const c_void,
                b,
                (&self.spec.beta as *const f32).cast(),
                ops.c as *const c_void,
                c,
                ops.c as *mut c_void,
                c,
                &self.algo,
                ws,
                workspace.bytes as usize,
                stream,
            )
        };
        check("cublasLtMatmul", status)
    }

    /// # Safety
    /// `value` is the type cublasLt.h gives for `attr`.
    unsafe fn set_desc<T>(&self, attr: c_int, value: &T) -> Result<(), CudaError> {
        // SAFETY: live descriptor; the value's size is passed with it.
        let status = unsafe {
            (self.lt.desc_set)(
                self.desc,
                attr,
                (value as *const T).cast(),
                std::mem::size_of::<T>(),
            )
        };
        check("cublasLtMatmulDescSetAttribute", status)
    }

    /// # Safety
    /// `value` is the type cublasLt.h gives for `attr`.
    unsafe fn set_pref<T>(&self, attr: c_int, value: &T) -> Result<(), CudaError> {
        // SAFETY: live preference; the value's size is passed with it.
        let status = unsafe {
            (self.lt.pref_set)(
                self.pref,
                attr,
                (value as *const T).cast(),
                std::mem::size_of::<T>(),
            )
        };
        check("cublasLtMatmulPreferenceSetAttribute", status)
    }
}

impl Drop for LtPlan<'_> {
    /// Destroys in the reverse order of creation, as PyTorch's descriptors go out of scope
    /// (C, B, A, the descriptor, the preference). A failure here leaves nothing to undo.
    fn drop(&mut self) {
        for layout in self.layouts.iter().rev() {
            if !layout.is_null() {
                // SAFETY: created by this plan, destroyed once.
                unsafe { (self.lt.layout_destroy)(*layout) };
            }
        }
        if !self.desc.is_null() {
            // SAFETY: as above.
            unsafe { (self.lt.desc_destroy)(self.desc) };
        }
        if !self.pref.is_null() {
            // SAFETY: as above.
            unsafe { (self.lt.pref_destroy)(self.pref) };
        }
    }
}

/// A host model of a cuBLASLt matmul on column-major buffers (float64), written from the
/// cuBLASLt documentation, used by the tests to check [`MatmulSpec::linear`]:
/// `D = alpha · op(A) · op(B) + beta · C + bias[i]` for every row `i` of D.
#[cfg(test)]
pub fn host_matmul(s: &MatmulSpec, a: &[f64], b: &[f64], bias: Option<&[f64]>, d: &mut [f64]) {
    let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
    let (lda, ldb, ldc) = (s.lda as usize, s.ldb as usize, s.ldc as usize);
    // Element (r, c) of a column-major matrix with leading dimension ld is at r + c·ld.
    let op_a = |i: usize, p: usize| {
        if s.transa {
            a[p + i * lda]
        } else {
            a[i + p * lda]
        }
    };
    let op_b = |p: usize, j: usize| {
        if s.transb {
            b[j + p * ldb]
        } else {
            b[p + j * ldb]
        }
    };
    for j in 0..n {
        for i in 0..m {
            let dot: f64 = (0..k).map(|p| op_a(i, p) * op_b(p, j)).sum();
            let c = d[i + j * ldc];
            d[i + j * ldc] =
                f64::from(s.alpha) * dot + f64::from(s.beta) * c + bias.map_or(0.0, |bv| bv[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::cublaslt::sys as lt_sys;
    use proptest::prelude::*;

    fn check_linear(rows: usize, in_f: usize, out_f: usize) {
        let x: Vec<f64> = (0..rows * in_f).map(|i| (i as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..out_f * in_f).map(|i| (i as f64 * 0.11).cos()).collect();
        let bias: Vec<f64> = (0..out_f).map(|i| i as f64 - 1.5).collect();
        // Garbage in the output: with beta = 0 it must not matter.
        let mut out: Vec<f64> = vec![1e6; rows * out_f];
        let s = MatmulSpec::linear(rows, in_f, out_f, DType::Float32, false).unwrap();
        // The row-major buffers as they lie in memory: A is the weight, B the input.
        host_matmul(&s, &w, &x, Some(&bias), &mut out);
        for r in 0..rows {
            for o in 0..out_f {
                let want: f64 = (0..in_f)
                    .map(|i| x[r * in_f + i] * w[o * in_f + i])
                    .sum::<f64>()
                    + bias[o];
                let got = out[r * out_f + o];
                assert!((want - got).abs() < 1e-9, "[{r},{o}] {want} vs {got}");
            }
        }
    }

    #[test]
    fn row_major_linear_maps_onto_column_major_cublaslt() {
        check_linear(3, 5, 7);
        check_linear(1, 1, 1);
        check_linear(4, 2, 8);
    }

    proptest! {
        #[test]
        fn the_mapping_holds_for_any_small_shape(rows in 1usize..6, in_f in 1usize..6, out_f in 1usize..6) {
            check_linear(rows, in_f, out_f);
        }
    }

    #[test]
    fn layouts_are_pytorchs() {
        // x [6, 4] · W[8, 4]ᵀ: m = 8, n = 6, k = 4; A (the weight) created 4 x 8, ld 4.
        let s = MatmulSpec::linear(6, 4, 8, DType::Bfloat16, false).unwrap();
        assert_eq!((s.m, s.n, s.k), (8, 6, 4));
        assert_eq!(s.a_layout(), (4, 8, 4));
        assert_eq!(s.b_layout(), (4, 6, 4));
        assert_eq!(s.c_layout(), (8, 6, 8));
        assert_eq!((s.alpha, s.beta), (1.0, 0.0));
        assert!(MatmulSpec::linear(1 << 31, 4, 4, DType::Float16, false).is_err());
    }

    #[test]
    fn tf32_only_for_float32_when_allowed() {
        assert_eq!(compute_type(DType::Float32, false), COMPUTE_32F);
        assert_eq!(compute_type(DType::Float32, true), COMPUTE_32F_FAST_TF32);
        assert_eq!(compute_type(DType::Bfloat16, true), COMPUTE_32F);
        assert_eq!(compute_type(DType::Float16, false), COMPUTE_32F);
    }

    #[test]
    fn alignments_are_getalignment() {
        assert_eq!(alignment(0), 256);
        assert_eq!(alignment(0x7f00_0000_0200), 256);
        assert_eq!(alignment(0x7f00_0000_0080), 128);
        assert_eq!(alignment(0x7f00_0000_0002), 2);
        assert_eq!(alignment(0x7f00_0000_0001), 1);
    }

    #[test]
    fn constants_are_the_headers() {
        use lt_sys::cublasLtMatmulDescAttributes_t as D;
        use lt_sys::cublasLtMatmulPreferenceAttributes_t as P;
        assert_eq!(D::CUBLASLT_MATMUL_DESC_TRANSA as c_int, DESC_TRANSA);
        assert_eq!(D::CUBLASLT_MATMUL_DESC_TRANSB as c_int, DESC_TRANSB);
        assert_eq!(D::CUBLASLT_MATMUL_DESC_EPILOGUE as c_int, DESC_EPILOGUE);
        assert_eq!(
            D::CUBLASLT_MATMUL_DESC_BIAS_POINTER as c_int,
            DESC_BIAS_POINTER
        );
        assert_eq!(
            P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES as c_int,
            PREF_MAX_WORKSPACE_BYTES
        );
        assert_eq!(
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES as c_int,
            PREF_MIN_ALIGNMENT_A_BYTES
        );
        assert_eq!(
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES as c_int,
            PREF_MIN_ALIGNMENT_A_BYTES + 3
        );
        assert_eq!(
            lt_sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as u32,
            EPILOGUE_BIAS
        );
        assert_eq!(
            lt_sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT as u32,
            EPILOGUE_DEFAULT
        );
        assert_eq!(
            std::mem::size_of::<HeuristicResult>(),
            std::mem::size_of::<lt_sys::cublasLtMatmulHeuristicResult_t>()
        );
        assert_eq!(std::mem::size_of::<Algo>(), 64);
        use lt_sys::cudaDataType as T;
        assert_eq!(data_type(DType::Float32), T::CUDA_R_32F as c_int);
        assert_eq!(data_type(DType::Float16), T::CUDA_R_16F as c_int);
        assert_eq!(data_type(DType::Bfloat16), T::CUDA_R_16BF as c_int);
        use lt_sys::cublasComputeType_t as C;
        assert_eq!(C::CUBLAS_COMPUTE_32F as c_int, COMPUTE_32F);
        assert_eq!(
            C::CUBLAS_COMPUTE_32F_FAST_TF32 as c_int,
            COMPUTE_32F_FAST_TF32
        );
    }
}
