//! cuBLAS and cuBLASLt: the handle, its stream, workspace and math mode (what PyTorch's
//! `getCurrentCUDABlasHandle` sets on every use), and the cuBLASLt functions the Linear layers run
//! through ([`crate::blaslt`]).

use std::ffi::{c_int, c_void};

use cudarc::driver::sys::CUstream;

use crate::blaslt::Lt;
use crate::error::{CudaError, cublas_status_name};
use crate::loader::BlasLibraries;
use crate::version::triple;

/// A `cublasStatus_t`, read as the integer it is.
type Status = c_int;
/// A `cublasHandle_t` (also used as the `cublasLtHandle_t`, as PyTorch does on CUDA).
pub type Handle = *mut c_void;

type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type DestroyFn = unsafe extern "C" fn(Handle) -> Status;
type SetStreamFn = unsafe extern "C" fn(Handle, CUstream) -> Status;
type SetWorkspaceFn = unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status;
type SetMathModeFn = unsafe extern "C" fn(Handle, c_int) -> Status;
type GetPropertyFn = unsafe extern "C" fn(c_int, *mut c_int) -> Status;

/// `CUBLAS_DEFAULT_MATH`: what PyTorch sets unless float32 matmuls may use TF32.
pub const CUBLAS_DEFAULT_MATH: c_int = 0;
/// `CUBLAS_TF32_TENSOR_OP_MATH`: what PyTorch sets when they may.
pub const CUBLAS_TF32_TENSOR_OP_MATH: c_int = 3;

/// cuBLAS and cuBLASLt functions, from libraries loaded for the process's life.
pub struct Blas {
    create: CreateFn,
    destroy: DestroyFn,
    set_stream: SetStreamFn,
    set_workspace: SetWorkspaceFn,
    set_math_mode: SetMathModeFn,
    /// The cuBLASLt functions.
    pub lt: Lt,
    /// cuBLAS version (`major.minor.patch`).
    pub version: String,
    /// cuBLASLt version.
    pub lt_version: String,
    /// Where the libraries came from.
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
pub(crate) unsafe fn sym<T: Copy>(
    lib: &'static libloading::Library,
    name: &str,
) -> Result<T, CudaError> {
    // SAFETY: the caller guarantees the prototype; the library is never unloaded.
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

impl Blas {
    /// Resolves the functions from the loaded libraries and reads their versions.
    pub fn new(libs: BlasLibraries) -> Result<Blas, CudaError> {
        // SAFETY (all below): prototypes from cublas_api.h / cublasLt.h.
        let get_property: GetPropertyFn = unsafe { sym(libs.blas, "cublasGetProperty") }?;
        // SAFETY: as above.
        let lt_get_property: GetPropertyFn = unsafe { sym(libs.lt, "cublasLtGetProperty") }?;
        Ok(Blas {
            // SAFETY: as above.
            create: unsafe { sym(libs.blas, "cublasCreate_v2") }?,
            // SAFETY: as above.
            destroy: unsafe { sym(libs.blas, "cublasDestroy_v2") }?,
            // SAFETY: as above.
            set_stream: unsafe { sym(libs.blas, "cublasSetStream_v2") }?,
            // SAFETY: as above.
            set_workspace: unsafe { sym(libs.blas, "cublasSetWorkspace_v2") }?,
            // SAFETY: as above.
            set_math_mode: unsafe { sym(libs.blas, "cublasSetMathMode") }?,
            lt: Lt::new(libs.lt)?,
            version: library_version(get_property),
            lt_version: library_version(lt_get_property),
            libs,
        })
    }

    /// Creates a handle (needs a current context); PyTorch's handle pool does this once per
    /// device and thread.
    pub fn create_handle(&self) -> Result<Handle, CudaError> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cublasCreate_v2", unsafe { (self.create)(&mut h) })?;
        Ok(h)
    }

    /// Destroys a handle; a failure is returned, for the caller to ignore or report.
    pub fn destroy_handle(&self, h: Handle) -> Result<(), CudaError> {
        // SAFETY: live handle, destroyed once.
        check("cublasDestroy_v2", unsafe { (self.destroy)(h) })
    }

    /// Binds the handle to a stream (`cublasSetStream`).
    pub fn set_stream(&self, h: Handle, stream: CUstream) -> Result<(), CudaError> {
        // SAFETY: live handle and stream.
        check("cublasSetStream_v2", unsafe {
            (self.set_stream)(h, stream)
        })
    }

    /// `cublasSetMathMode`: TF32 tensor ops when float32 matmuls may use TF32, else the default.
    pub fn set_math_mode(&self, h: Handle, allow_tf32: bool) -> Result<(), CudaError> {
        let mode = if allow_tf32 {
            CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            CUBLAS_DEFAULT_MATH
        };
        // SAFETY: live handle.
        check("cublasSetMathMode", unsafe {
            (self.set_math_mode)(h, mode)
        })
    }

    /// Hands cuBLAS a workspace (a null pointer for 0 bytes, as PyTorch's allocator gives).
    ///
    /// # Safety
    /// `ptr .. ptr + bytes` is device memory that stays allocated while the handle may use it.
    pub unsafe fn set_workspace(&self, h: Handle, ptr: u64, bytes: u64) -> Result<(), CudaError> {
        let p = if bytes == 0 {
            std::ptr::null_mut()
        } else {
            ptr as *mut c_void
        };
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.set_workspace)(h, p, bytes as usize) };
        check("cublasSetWorkspace_v2", rc)
    }
}
