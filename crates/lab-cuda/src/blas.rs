//! cuBLAS: the few functions the Linear layers need, resolved from the library the loader chose,
//! and the mapping of a row-major `x · Wᵀ` onto column-major cuBLAS.

use std::ffi::{c_int, c_void};

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::sys::CUstream;
use lab::dtype::DType;

use crate::error::{CudaError, cublas_status_name};
use crate::loader::BlasLibraries;
use crate::version::triple;

/// A `cublasStatus_t`, read as the integer it is.
type Status = c_int;
/// A `cublasHandle_t`.
pub type Handle = *mut c_void;

type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type DestroyFn = unsafe extern "C" fn(Handle) -> Status;
type SetStreamFn = unsafe extern "C" fn(Handle, CUstream) -> Status;
type SetWorkspaceFn = unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status;
type SetMathModeFn = unsafe extern "C" fn(Handle, c_int) -> Status;
type GetPropertyFn = unsafe extern "C" fn(c_int, *mut c_int) -> Status;
type GemmExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
) -> Status;

/// `CUBLAS_DEFAULT_MATH`: what PyTorch leaves set for float32 without TF32 and for half types.
const CUBLAS_DEFAULT_MATH: c_int = 0;

/// cuBLAS functions, valid while the [`BlasLibraries`] they came from stay loaded.
pub struct Blas {
    create: CreateFn,
    destroy: DestroyFn,
    set_stream: SetStreamFn,
    set_workspace: SetWorkspaceFn,
    set_math_mode: SetMathModeFn,
    gemm_ex: GemmExFn,
    /// cuBLAS version (`major.minor.patch`).
    pub version: String,
    /// cuBLASLt version.
    pub lt_version: String,
    /// The libraries (kept loaded as long as the functions may be called).
    pub libs: BlasLibraries,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas")
            .field("version", &self.version)
            .field("lt_version", &self.lt_version)
            .field("libs", &self.libs)
            .finish_non_exhaustive()
    }
}

/// Fetches a symbol from cuBLAS or cuBLASLt.
///
/// # Safety
/// `T` must be the function-pointer type of the C prototype of `name`.
unsafe fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, CudaError> {
    // SAFETY: the caller guarantees the prototype; the pointer lives as long as `Blas` keeps the
    // library loaded.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| CudaError::NoCublas {
            tried: format!("the cuBLAS found lacks {name} ({e})"),
        })
}

fn library_version(get: GetPropertyFn) -> String {
    let mut parts = [0 as c_int; 3];
    for (kind, slot) in parts.iter_mut().enumerate() {
        // SAFETY: MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2; valid out-pointer.
        if unsafe { get(kind as c_int, slot) } != 0 {
            return "unknown".to_string();
        }
    }
    triple(parts[0], parts[1], parts[2])
}

impl Blas {
    /// Resolves the functions from the loaded libraries and reads their versions.
    pub fn new(libs: BlasLibraries) -> Result<Blas, CudaError> {
        // SAFETY (all below): prototypes from cublas_api.h / cublasLt.h.
        let get_property: GetPropertyFn = unsafe { sym(&libs.blas, "cublasGetProperty") }?;
        // SAFETY: as above.
        let lt_get_property: GetPropertyFn = unsafe { sym(&libs.lt, "cublasLtGetProperty") }?;
        Ok(Blas {
            // SAFETY: as above.
            create: unsafe { sym(&libs.blas, "cublasCreate_v2") }?,
            // SAFETY: as above.
            destroy: unsafe { sym(&libs.blas, "cublasDestroy_v2") }?,
            // SAFETY: as above.
            set_stream: unsafe { sym(&libs.blas, "cublasSetStream_v2") }?,
            // SAFETY: as above.
            set_workspace: unsafe { sym(&libs.blas, "cublasSetWorkspace_v2") }?,
            // SAFETY: as above.
            set_math_mode: unsafe { sym(&libs.blas, "cublasSetMathMode") }?,
            // SAFETY: as above.
            gemm_ex: unsafe { sym(&libs.blas, "cublasGemmEx") }?,
            version: library_version(get_property),
            lt_version: library_version(lt_get_property),
            libs,
        })
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

    /// Creates a handle bound to `stream` (needs a current context).
    pub fn create_handle(&self, stream: CUstream) -> Result<Handle, CudaError> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        Self::check("cublasCreate_v2", unsafe { (self.create)(&mut h) })?;
        // SAFETY: live handle and stream.
        let rc = unsafe { (self.set_stream)(h, stream) };
        if let Err(e) = Self::check("cublasSetStream_v2", rc) {
            self.destroy_handle(h);
            return Err(e);
        }
        // SAFETY: live handle.
        let rc = unsafe { (self.set_math_mode)(h, CUBLAS_DEFAULT_MATH) };
        if let Err(e) = Self::check("cublasSetMathMode", rc) {
            self.destroy_handle(h);
            return Err(e);
        }
        Ok(h)
    }

    /// Destroys a handle.
    pub fn destroy_handle(&self, h: Handle) {
        // SAFETY: live handle, destroyed once.
        unsafe { (self.destroy)(h) };
    }

    /// Hands cuBLAS a workspace.
    ///
    /// # Safety
    /// `ptr .. ptr + bytes` is device memory that stays allocated while the handle may use it.
    pub unsafe fn set_workspace(&self, h: Handle, ptr: u64, bytes: u64) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.set_workspace)(h, ptr as *mut c_void, bytes as usize) };
        Self::check("cublasSetWorkspace_v2", rc)
    }

    /// Runs one GEMM as described by `g`, with float32 `alpha = 1` and `beta`.
    ///
    /// # Safety
    /// `a`, `b`, `c` point to device buffers holding the matrices `g` describes.
    pub unsafe fn gemm(
        &self,
        h: Handle,
        g: &Gemm,
        a: u64,
        b: u64,
        c: u64,
        beta: f32,
    ) -> Result<(), CudaError> {
        let alpha = 1.0f32;
        let ty = data_type(g.dtype) as c_int;
        // SAFETY: guaranteed by the caller; alpha and beta are host f32 as COMPUTE_32F requires
        // (the default pointer mode is host).
        let rc = unsafe {
            (self.gemm_ex)(
                h,
                g.transa as c_int,
                g.transb as c_int,
                g.m,
                g.n,
                g.k,
                (&alpha as *const f32).cast(),
                a as *const c_void,
                ty,
                g.lda,
                b as *const c_void,
                ty,
                g.ldb,
                (&beta as *const f32).cast(),
                c as *mut c_void,
                ty,
                g.ldc,
                g.compute as c_int,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT as c_int,
            )
        };
        Self::check("cublasGemmEx", rc)
    }
}

/// The cuBLAS data type of a dtype.
pub fn data_type(d: DType) -> cudaDataType {
    match d {
        DType::Float32 => cudaDataType::CUDA_R_32F,
        DType::Float16 => cudaDataType::CUDA_R_16F,
        DType::Bfloat16 => cudaDataType::CUDA_R_16BF,
    }
}

/// The compute type: float32 accumulation always; TF32 only for float32 when allowed.
pub fn compute_type(d: DType, allow_tf32: bool) -> cublasComputeType_t {
    if d == DType::Float32 && allow_tf32 {
        cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
    } else {
        cublasComputeType_t::CUBLAS_COMPUTE_32F
    }
}

/// The arguments of one `cublasGemmEx` call (column-major), with `A`, `B` and `C` standing for
/// the weight, the input and the output buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemm {
    /// op(A).
    pub transa: cublasOperation_t,
    /// op(B).
    pub transb: cublasOperation_t,
    /// Rows of op(A) and C.
    pub m: c_int,
    /// Columns of op(B) and C.
    pub n: c_int,
    /// The shared dimension.
    pub k: c_int,
    /// Leading dimension of A.
    pub lda: c_int,
    /// Leading dimension of B.
    pub ldb: c_int,
    /// Leading dimension of C.
    pub ldc: c_int,
    /// Storage type of A, B and C.
    pub dtype: DType,
    /// Compute type.
    pub compute: cublasComputeType_t,
}

/// Maps the row-major `out[rows, out_f] = x[rows, in_f] · W[out_f, in_f]ᵀ` onto cuBLAS.
///
/// A row-major `r × c` buffer is the column-major `c × r` matrix (its transpose), so
/// `out` is the column-major `outᵀ` (`out_f × rows`, ld `out_f`), and `outᵀ = W · xᵀ`. The weight
/// buffer read column-major is `Wᵀ` (`in_f × out_f`, ld `in_f`): transposing it gives `W`
/// (`transa = T`). The input buffer read column-major is already `xᵀ` (`in_f × rows`, ld `in_f`,
/// `transb = N`). This is the call PyTorch makes for `F.linear`.
pub fn linear_gemm(
    rows: usize,
    in_f: usize,
    out_f: usize,
    dtype: DType,
    allow_tf32: bool,
) -> Result<Gemm, String> {
    let fit = |v: usize, what: &str| {
        c_int::try_from(v).map_err(|_| format!("{what} = {v} exceeds cuBLAS's 32-bit limit"))
    };
    Ok(Gemm {
        transa: cublasOperation_t::CUBLAS_OP_T,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: fit(out_f, "out_features")?,
        n: fit(rows, "rows")?,
        k: fit(in_f, "in_features")?,
        lda: fit(in_f, "in_features")?,
        ldb: fit(in_f, "in_features")?,
        ldc: fit(out_f, "out_features")?,
        dtype,
        compute: compute_type(dtype, allow_tf32),
    })
}

/// A host model of `cublasGemmEx` on column-major buffers (float64), used by the tests to check
/// the mapping: `C = op(A) · op(B) + beta · C`.
#[cfg(test)]
fn host_gemm(g: &Gemm, a: &[f64], b: &[f64], c: &mut [f64], beta: f64) {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
    let at = |i: usize, p: usize| match g.transa {
        cublasOperation_t::CUBLAS_OP_N => a[i + p * lda],
        _ => a[p + i * lda],
    };
    let bt = |p: usize, j: usize| match g.transb {
        cublasOperation_t::CUBLAS_OP_N => b[p + j * ldb],
        _ => b[j + p * ldb],
    };
    for j in 0..n {
        for i in 0..m {
            let s: f64 = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
            c[i + j * ldc] = s + beta * c[i + j * ldc];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_mapping(rows: usize, in_f: usize, out_f: usize) {
        let x: Vec<f64> = (0..rows * in_f).map(|i| (i as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..out_f * in_f).map(|i| (i as f64 * 0.11).cos()).collect();
        let bias: Vec<f64> = (0..out_f).map(|i| i as f64 - 1.5).collect();
        // The broadcast bias copy the device writes before the GEMM (beta = 1).
        let mut out: Vec<f64> = (0..rows * out_f).map(|i| bias[i % out_f]).collect();
        let g = linear_gemm(rows, in_f, out_f, DType::Float32, false).unwrap();
        host_gemm(&g, &w, &x, &mut out, 1.0);
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
    fn row_major_linear_maps_onto_column_major_cublas() {
        check_mapping(3, 5, 7);
        check_mapping(1, 1, 1);
        check_mapping(4, 2, 8);
    }

    proptest! {
        #[test]
        fn mapping_holds_for_any_small_shape(rows in 1usize..6, in_f in 1usize..6, out_f in 1usize..6) {
            check_mapping(rows, in_f, out_f);
        }
    }

    #[test]
    fn tf32_only_for_float32_when_allowed() {
        use cublasComputeType_t::*;
        assert_eq!(compute_type(DType::Float32, false), CUBLAS_COMPUTE_32F);
        assert_eq!(
            compute_type(DType::Float32, true),
            CUBLAS_COMPUTE_32F_FAST_TF32
        );
        assert_eq!(compute_type(DType::Bfloat16, true), CUBLAS_COMPUTE_32F);
        assert_eq!(compute_type(DType::Float16, false), CUBLAS_COMPUTE_32F);
    }

    #[test]
    fn huge_dimensions_are_refused() {
        assert!(linear_gemm(1 << 31, 4, 4, DType::Float16, false).is_err());
    }
}
