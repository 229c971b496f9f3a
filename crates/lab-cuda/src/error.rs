//! Everything that can go wrong on the CUDA side, each with a sentence a user can act on.

use std::path::PathBuf;

/// `CUDA_ERROR_STUB_LIBRARY`: the toolkit's link-time stub `libcuda.so` was loaded instead of the
/// driver.
pub const CUDA_ERROR_STUB_LIBRARY: i32 = 34;
/// `CUDA_ERROR_NO_DEVICE`: the driver sees no GPU.
pub const CUDA_ERROR_NO_DEVICE: i32 = 100;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

/// A `libloading` error with the loader's own words (its `Display` alone says only
/// "dlopen failed").
pub fn load_error(e: &libloading::Error) -> String {
    use std::error::Error as _;
    match e.source() {
        Some(src) => src.to_string(),
        None => e.to_string(),
    }
}

/// A failure of the CUDA device or of loading its libraries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// No `libcuda.so.1` could be opened.
    #[error(
        "no NVIDIA driver was found ({reason}); libcuda.so.1 is opened by name, so the dynamic \
         loader looked in LD_LIBRARY_PATH, its cache (`ldconfig -p`) and its default folders \
         (/lib, /usr/lib): install the NVIDIA driver, start the container with the GPU exposed \
         (e.g. `docker run --gpus all`), or put the driver's folder (e.g. /usr/local/nvidia/lib64) \
         on LD_LIBRARY_PATH"
    )]
    NoDriver {
        /// The loader's own message.
        reason: String,
    },
    /// The library found is the toolkit's stub, not a driver.
    #[error(
        "the libcuda.so found{} is the CUDA toolkit's stub library, not the NVIDIA driver \
         (CUDA_ERROR_STUB_LIBRARY); remove the `stubs` folder from LD_LIBRARY_PATH or install the NVIDIA driver",
        path_suffix(.path)
    )]
    StubDriver {
        /// Where the stub was loaded from, when known.
        path: Option<PathBuf>,
    },
    /// The driver loaded but sees no GPU.
    #[error(
        "the NVIDIA driver{} sees no GPU (CUDA_ERROR_NO_DEVICE); check `nvidia-smi`, \
         CUDA_VISIBLE_DEVICES, and that the container was started with the GPU",
        path_suffix(.path)
    )]
    NoDevice {
        /// Where the driver was loaded from, when known.
        path: Option<PathBuf>,
    },
    /// `cuInit` failed for another reason.
    #[error(
        "the NVIDIA driver failed to initialise ({name}, code {code}); check `nvidia-smi` \
         and that the driver and its kernel module are the same version"
    )]
    DriverInit {
        /// The CUresult.
        code: i32,
        /// Its name.
        name: String,
    },
    /// The driver is older than the oldest we support.
    #[error(
        "the NVIDIA driver supports CUDA {found}, but IteraGPU needs CUDA 12.0 or newer \
         (driver R525 or newer); update the driver"
    )]
    DriverTooOld {
        /// The driver's CUDA version, decoded.
        found: String,
    },
    /// A function the tool needs is missing from the driver.
    #[error(
        "the NVIDIA driver{} (CUDA {driver}) lacks {symbol}; IteraGPU needs driver R525 \
         (CUDA 12.0) or newer: update the driver",
        path_suffix(.path)
    )]
    MissingSymbol {
        /// The symbol.
        symbol: String,
        /// The driver's CUDA version, decoded (or `unknown`).
        driver: String,
        /// Where the driver was loaded from.
        path: Option<PathBuf>,
    },
    /// `cuda:N` with N not below the device count.
    #[error(
        "cuda:{ordinal} does not exist: the driver sees {count} GPU(s){}; pick one of them \
         or check CUDA_VISIBLE_DEVICES",
        ordinal_range(*.count)
    )]
    BadOrdinal {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices visible.
        count: usize,
    },
    /// The GPU is older than the kernels and cuBLAS paths support.
    #[error(
        "cuda:{ordinal} ({name}) has compute capability {major}.{minor}; IteraGPU needs 8.0 or newer (A100, RTX 30xx or later)"
    )]
    UnsupportedGpu {
        /// The ordinal.
        ordinal: usize,
        /// The GPU's name.
        name: String,
        /// Compute capability major.
        major: i32,
        /// Compute capability minor.
        minor: i32,
    },
    /// The cuBLAS pair that was opened lacks something the tool needs.
    #[error(
        "cuBLAS is not usable: {tried}; install a complete cuBLAS (the CUDA toolkit's, \
         or `pip install nvidia-cublas` for a CUDA 13 driver, `pip install nvidia-cublas-cu12` \
         for CUDA 12) and put its folder first on LD_LIBRARY_PATH"
    )]
    NoCublas {
        /// What was tried, in a few words.
        tried: String,
    },
    /// No folder holds a cuBLASLt/cuBLAS pair that opens: every place searched, each with why it
    /// failed, and the install command for the driver's CUDA major version.
    #[error(
        "cuBLAS was not found: no folder holds {} that opens; searched, in order: {searched}; {}",
        wanted_pair(*.driver_version),
        install_hint(*.driver_version)
    )]
    CublasNotFound {
        /// Every place searched, in order, with why it failed (`folder (origin): reason; ...`).
        searched: String,
        /// The driver's CUDA version, as CUDA encodes it (13000 for 13.0).
        driver_version: i32,
    },
    /// The driver claims more GPUs than any host holds: its answer is not trusted, and no
    /// per-GPU work (whose cost grows with the count, and with its square for peer pairs) starts.
    #[error(
        "the NVIDIA driver claims {count} visible GPUs; no host holds more than {max}, so the \
         answer is not trusted and no GPU was queried; check `nvidia-smi` and CUDA_VISIBLE_DEVICES"
    )]
    ImplausibleDeviceCount {
        /// What cuDeviceGetCount said.
        count: i64,
        /// The bound, `MAX_DEVICES` in the driver module.
        max: usize,
    },
    /// A driver call failed at run time.
    #[error("{call} failed: {name} (code {code}){}", memory_hint(*.code))]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The CUresult.
        code: i32,
        /// Its name (and description, when the driver gives one).
        name: String,
    },
    /// A cuBLAS call failed.
    #[error("{call} failed: {name} (status {status})")]
    Cublas {
        /// The cuBLAS function.
        call: &'static str,
        /// The cublasStatus_t.
        status: i32,
        /// Its name.
        name: &'static str,
    },
    /// Neither the cubin nor the PTX of the kernels could be loaded.
    #[error("the kernels could not be loaded for compute capability {arch}: {reason}")]
    Kernels {
        /// `sm_90`, ...
        arch: String,
        /// What the driver said.
        reason: String,
    },
}

impl CudaError {
    /// True when the error means "no usable GPU here" (the CLI exits 2): no driver, a stub, no
    /// device, a bad ordinal, an old driver or GPU, missing cuBLAS. False for failures while
    /// working on a device that is there.
    pub fn is_unavailable(&self) -> bool {
        !matches!(
            self,
            CudaError::Driver { .. }
                | CudaError::Cublas { .. }
                | CudaError::Kernels { .. }
                | CudaError::ImplausibleDeviceCount { .. }
        )
    }
}

/// The pair the loader looks for with a driver of this CUDA version (the majors of
/// [`crate::loader::majors_for_driver`]).
fn wanted_pair(driver_version: i32) -> &'static str {
    if driver_version >= 13000 {
        "libcublasLt.so.13 with libcublas.so.13 (or the .so.12 pair)"
    } else {
        "libcublasLt.so.12 with libcublas.so.12"
    }
}

/// What to install for this driver: the wheel of its CUDA major and where it puts the files.
fn install_hint(driver_version: i32) -> String {
    let (wheel, files) = if driver_version >= 13000 {
        ("nvidia-cublas", "nvidia/cu13/lib/libcublas{,Lt}.so.13")
    } else {
        (
            "nvidia-cublas-cu12",
            "nvidia/cublas/lib/libcublas{,Lt}.so.12",
        )
    };
    format!(
        "for this CUDA {} driver, `pip install {wheel}` into the Python environment whose \
         python3 is on PATH (it installs site-packages/{files}), or install the CUDA toolkit's \
         cuBLAS, or put the folder that holds both files first on LD_LIBRARY_PATH",
        crate::version::cuda_version(driver_version)
    )
}

fn path_suffix(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" at {}", p.display()))
        .unwrap_or_default()
}

fn ordinal_range(count: usize) -> String {
    match count {
        0 => String::new(),
        1 => " (cuda:0)".to_string(),
        n => format!(" (cuda:0 to cuda:{})", n - 1),
    }
}

fn memory_hint(code: i32) -> &'static str {
    if code == CUDA_ERROR_OUT_OF_MEMORY {
        "; the GPU has no room left: use a smaller batch, context or width, or free the GPU"
    } else {
        ""
    }
}

/// The name of a CUresult this tool may meet, for when the driver cannot name it itself (codes
/// from cuda.h's `cudaError_enum`; 35 is the runtime API's `cudaErrorInsufficientDriver` and has
/// no driver-API name, so it is not listed).
pub fn cu_result_name(code: i32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        36 => "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
        46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        218 => "CUDA_ERROR_INVALID_PTX",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        500 => "CUDA_ERROR_NOT_FOUND",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        802 => "CUDA_ERROR_SYSTEM_NOT_READY",
        803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUDA error",
    }
}

/// The name of a cublasStatus_t.
pub fn cublas_status_name(status: i32) -> &'static str {
    match status {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "cuBLAS error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cuda_h_driver_codes() {
        use cudarc::driver::sys::cudaError_enum as E;
        for (code, name) in [
            (E::CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY"),
            (
                E::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,
                "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
            ),
            (
                E::CUDA_ERROR_DEVICE_UNAVAILABLE,
                "CUDA_ERROR_DEVICE_UNAVAILABLE",
            ),
            (
                E::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            ),
            (
                E::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
                "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            ),
        ] {
            assert_eq!(cu_result_name(code as i32), name);
        }
        // No driver-API result has code 35 (that is the runtime's cudaErrorInsufficientDriver).
        assert_eq!(cu_result_name(35), "CUDA error");
    }

    #[test]
    fn unavailable_errors_are_the_environment_ones() {
        assert!(CudaError::NoDevice { path: None }.is_unavailable());
        assert!(
            CudaError::BadOrdinal {
                ordinal: 3,
                count: 1
            }
            .is_unavailable()
        );
        assert!(
            !CudaError::Driver {
                call: "cuMemAlloc_v2",
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into()
            }
            .is_unavailable()
        );
    }

    #[test]
    fn messages_name_the_values() {
        let e = CudaError::BadOrdinal {
            ordinal: 3,
            count: 2,
        };
        assert_eq!(
            e.to_string(),
            "cuda:3 does not exist: the driver sees 2 GPU(s) (cuda:0 to cuda:1); pick one of them or check CUDA_VISIBLE_DEVICES"
        );
        let e = CudaError::StubDriver {
            path: Some("/usr/local/cuda/lib64/stubs/libcuda.so".into()),
        };
        assert!(
            e.to_string()
                .contains("/usr/local/cuda/lib64/stubs/libcuda.so")
        );
        assert_eq!(cu_result_name(100), "CUDA_ERROR_NO_DEVICE");
        assert_eq!(cu_result_name(36), "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER");
        assert_eq!(cublas_status_name(15), "CUBLAS_STATUS_NOT_SUPPORTED");
    }
}
