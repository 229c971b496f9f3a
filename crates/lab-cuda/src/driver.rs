//! The CUDA driver API, resolved symbol by symbol from the `libcuda.so.1` we opened.
//!
//! cudarc's own `sys` functions panic on a missing library or symbol and resolve names fixed by
//! the binding version (13.x bindings call `cuEventElapsedTime_v2`, which R525–R560 drivers lack).
//! So the driver is opened here, every symbol is fetched with a `Result`, and the few names that
//! differ between driver generations fall back to the older one. Return codes are read as plain
//! integers, never as a Rust enum, so a code this build does not know cannot be undefined
//! behaviour. cudarc provides the handle types and the attribute constants.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::driver::sys::{CUcontext, CUevent, CUfunction, CUmodule, CUstream};
use libloading::Library;

use crate::error::{CUDA_ERROR_NO_DEVICE, CUDA_ERROR_STUB_LIBRARY, CudaError, cu_result_name};
use crate::maps;
use crate::version::{MIN_DRIVER_VERSION, cuda_version};

/// A `CUresult`, read as the integer it is.
pub type CuResult = c_int;
/// A `CUdevice`.
pub type CuDevice = c_int;
/// A `CUdeviceptr`.
pub type DevicePtr = u64;

pub use cudarc::driver::sys::CUdevice_attribute as Attribute;

/// `CU_STREAM_NON_BLOCKING`.
const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DEFAULT`: an event that records timing.
const CU_EVENT_DEFAULT: c_uint = 0;

/// Fetches a symbol as a function pointer of type `T`, or `None` when the library lacks it.
///
/// # Safety
/// `T` must be the function-pointer type of the C prototype of `name`.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller guarantees `T` matches the symbol's prototype; the pointer is copied out
    // and only used while `lib` stays loaded, which it does for the process's life.
    unsafe { lib.get::<T>(name.as_bytes()).ok().map(|s| *s) }
}

macro_rules! api {
    ($( $field:ident = $name:literal : fn($($arg:ty),*); )*) => {
        /// The driver functions every supported driver (R525 and newer) exports under these names.
        #[allow(non_snake_case)]
        struct Api {
            $( $field: unsafe extern "C" fn($($arg),*) -> CuResult, )*
        }

        impl Api {
            /// Resolves every function, or names the first one missing.
            fn resolve(lib: &Library) -> Result<Api, &'static str> {
                Ok(Api {
                    // SAFETY: each type is the prototype from cuda.h for that name.
                    $( $field: unsafe { sym(lib, $name) }.ok_or($name)?, )*
                })
            }
        }
    };
}

api! {
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get = "cuDeviceGet": fn(*mut CuDevice, c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CuDevice);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CuDevice);
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CuDevice);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CuDevice);
    primary_ctx_release = "cuDevicePrimaryCtxRelease_v2": fn(CuDevice);
    ctx_set_current = "cuCtxSetCurrent": fn(CUcontext);
    ctx_synchronize = "cuCtxSynchronize": fn();
    stream_create = "cuStreamCreate": fn(*mut CUstream, c_uint);
    stream_destroy = "cuStreamDestroy_v2": fn(CUstream);
    stream_synchronize = "cuStreamSynchronize": fn(CUstream);
    mem_alloc = "cuMemAlloc_v2": fn(*mut DevicePtr, usize);
    mem_free = "cuMemFree_v2": fn(DevicePtr);
    mem_get_info = "cuMemGetInfo_v2": fn(*mut usize, *mut usize);
    memcpy_htod_async = "cuMemcpyHtoDAsync_v2": fn(DevicePtr, *const c_void, usize, CUstream);
    memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, DevicePtr, usize, CUstream);
    module_load_data = "cuModuleLoadData": fn(*mut CUmodule, *const c_void);
    module_get_function = "cuModuleGetFunction": fn(*mut CUfunction, CUmodule, *const c_char);
    module_unload = "cuModuleUnload": fn(CUmodule);
    launch_kernel = "cuLaunchKernel": fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    event_create = "cuEventCreate": fn(*mut CUevent, c_uint);
    event_record = "cuEventRecord": fn(CUevent, CUstream);
    event_synchronize = "cuEventSynchronize": fn(CUevent);
    event_destroy = "cuEventDestroy_v2": fn(CUevent);
}

type ElapsedFn = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CuResult;
type UuidFn = unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult;
type ErrorNameFn = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;

/// The most GPUs on one host that this tool believes a driver about. Rented hosts hold 8 (HGX,
/// MI300X platforms) and the largest PCIe servers 16 or 20; a count far beyond that is a broken
/// or hostile driver, and every per-GPU step (and the per-pair peer checks, which grow with the
/// count's square) would multiply its cost.
pub const MAX_DEVICES: usize = 64;

/// An opened, initialised driver with every function this tool calls.
pub struct Driver {
    api: Api,
    elapsed: (ElapsedFn, &'static str),
    uuid: (UuidFn, &'static str),
    error_name: Option<ErrorNameFn>,
    /// `cuDriverGetVersion`: 1000 × major + 10 × minor.
    pub version: i32,
    /// The file the loader picked.
    pub path: Option<PathBuf>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("version", &self.version)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Facts about one device, read through the driver.
#[derive(Debug, Clone)]
pub struct DeviceFacts {
    /// Marketing name.
    pub name: String,
    /// Compute capability.
    pub major: i32,
    /// Compute capability.
    pub minor: i32,
    /// 16 UUID bytes.
    pub uuid: [u8; 16],
    /// Which symbol gave the UUID.
    pub uuid_symbol: &'static str,
    /// Total memory.
    pub total_bytes: u64,
}

impl Driver {
    /// Opens `libcuda.so.1`, initialises it and resolves every function.
    pub fn load() -> Result<Driver, CudaError> {
        let lib = open_driver()?;
        let path = maps::loaded_path("libcuda.so");
        let missing = |symbol: &str, version: Option<i32>| CudaError::MissingSymbol {
            symbol: symbol.to_string(),
            driver: version.map_or_else(|| "unknown".to_string(), cuda_version),
            path: path.clone(),
        };
        // SAFETY: prototypes from cuda.h.
        let init: unsafe extern "C" fn(c_uint) -> CuResult =
            unsafe { sym(lib, "cuInit") }.ok_or_else(|| missing("cuInit", None))?;
        // SAFETY: as above.
        let get_version: unsafe extern "C" fn(*mut c_int) -> CuResult =
            unsafe { sym(lib, "cuDriverGetVersion") }
                .ok_or_else(|| missing("cuDriverGetVersion", None))?;
        // SAFETY: as above.
        let error_name: Option<ErrorNameFn> = unsafe { sym(lib, "cuGetErrorName") };

        let mut version: c_int = 0;
        // SAFETY: `version` is a valid out-pointer; the call needs no initialisation.
        let got_version = unsafe { get_version(&mut version) } == 0;
        let version = got_version.then_some(version);
        // SAFETY: cuInit takes flags that must be 0.
        let rc = unsafe { init(0) };
        match rc {
            0 => {}
            CUDA_ERROR_STUB_LIBRARY => return Err(CudaError::StubDriver { path }),
            CUDA_ERROR_NO_DEVICE => return Err(CudaError::NoDevice { path }),
            code => {
                return Err(CudaError::DriverInit {
                    code,
                    name: name_of(error_name, code),
                });
            }
        }
        let version = version.unwrap_or(0);
        if version < MIN_DRIVER_VERSION {
            return Err(CudaError::DriverTooOld {
                found: cuda_version(version),
            });
        }
        let api = Api::resolve(lib).map_err(|name| missing(name, Some(version)))?;
        // SAFETY: both names share the prototype `CUresult (float*, CUevent, CUevent)`.
        let elapsed = unsafe { sym::<ElapsedFn>(lib, "cuEventElapsedTime_v2") }
            .map(|f| (f, "cuEventElapsedTime_v2"))
            .or_else(|| {
                // SAFETY: as above.
                unsafe { sym::<ElapsedFn>(lib, "cuEventElapsedTime") }
                    .map(|f| (f, "cuEventElapsedTime"))
            })
            .ok_or_else(|| missing("cuEventElapsedTime", Some(version)))?;
        // SAFETY: both names share the prototype `CUresult (CUuuid*, CUdevice)`; CUuuid is
        // 16 bytes.
        let uuid = unsafe { sym::<UuidFn>(lib, "cuDeviceGetUuid_v2") }
            .map(|f| (f, "cuDeviceGetUuid_v2"))
            .or_else(|| {
                // SAFETY: as above.
                unsafe { sym::<UuidFn>(lib, "cuDeviceGetUuid") }.map(|f| (f, "cuDeviceGetUuid"))
            })
            .ok_or_else(|| missing("cuDeviceGetUuid", Some(version)))?;
        Ok(Driver {
            api,
            elapsed,
            uuid,
            error_name,
            version,
            path,
        })
    }

    /// Checks a return code of a call made through another symbol table of this driver (the
    /// probe's, see `crate::copies`), naming the call and the error as every driver error does.
    pub(crate) fn check_call(&self, call: &'static str, rc: CuResult) -> Result<(), CudaError> {
        self.check(call, rc)
    }

    /// `cuMemcpyHtoDAsync`, queued only (the caller times it with events and waits for them).
    ///
    /// # Safety
    /// `dst .. dst + len` lies in one live allocation, `src .. src + len` is readable host memory,
    /// and both stay so until the copy has run on `stream`.
    pub unsafe fn queue_copy_to_device(
        &self,
        dst: DevicePtr,
        src: *const c_void,
        len: usize,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.api.memcpy_htod_async)(dst, src, len, stream) };
        self.check("cuMemcpyHtoDAsync_v2", rc)
    }

    /// `cuMemcpyDtoHAsync`, queued only.
    ///
    /// # Safety
    /// `src .. src + len` lies in one live allocation, `dst .. dst + len` is writable host memory,
    /// and both stay so until the copy has run on `stream`.
    pub unsafe fn queue_copy_to_host(
        &self,
        dst: *mut c_void,
        src: DevicePtr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.api.memcpy_dtoh_async)(dst, src, len, stream) };
        self.check("cuMemcpyDtoHAsync_v2", rc)
    }

    /// The event-timing symbol in use (`cuEventElapsedTime_v2` on R570+, else the older name).
    pub fn elapsed_symbol(&self) -> &'static str {
        self.elapsed.1
    }

    fn check(&self, call: &'static str, rc: CuResult) -> Result<(), CudaError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(CudaError::Driver {
                call,
                code: rc,
                name: name_of(self.error_name, rc),
            })
        }
    }

    /// Devices visible to this process, at most [`MAX_DEVICES`]: a larger (or negative) count is
    /// refused before any caller loops over it.
    pub fn device_count(&self) -> Result<usize, CudaError> {
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer; the driver is initialised.
        let rc = unsafe { (self.api.device_get_count)(&mut n) };
        self.check("cuDeviceGetCount", rc)?;
        match usize::try_from(n) {
            Ok(count) if count <= MAX_DEVICES => Ok(count),
            _ => Err(CudaError::ImplausibleDeviceCount {
                count: i64::from(n),
                max: MAX_DEVICES,
            }),
        }
    }

    /// The device handle of `ordinal`, after checking it exists.
    pub fn device(&self, ordinal: usize) -> Result<CuDevice, CudaError> {
        let count = self.device_count()?;
        if count == 0 {
            return Err(CudaError::NoDevice {
                path: self.path.clone(),
            });
        }
        if ordinal >= count {
            return Err(CudaError::BadOrdinal { ordinal, count });
        }
        let mut dev: CuDevice = 0;
        // SAFETY: valid out-pointer; `ordinal < count` fits in c_int since count came from one.
        let rc = unsafe { (self.api.device_get)(&mut dev, ordinal as c_int) };
        self.check("cuDeviceGet", rc)?;
        Ok(dev)
    }

    /// An integer attribute of a device.
    pub fn attribute(&self, dev: CuDevice, attr: Attribute) -> Result<i32, CudaError> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer; `attr` is a cuda.h attribute constant.
        let rc = unsafe { (self.api.device_get_attribute)(&mut v, attr as c_int, dev) };
        self.check("cuDeviceGetAttribute", rc)?;
        Ok(v)
    }

    /// Name, compute capability, UUID and total memory of a device.
    pub fn facts(&self, dev: CuDevice) -> Result<DeviceFacts, CudaError> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within it.
        let rc = unsafe { (self.api.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        self.check("cuDeviceGetName", rc)?;
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let name = String::from_utf8_lossy(&bytes).into_owned();
        let major = self.attribute(dev, Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = self.attribute(dev, Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let mut uuid = [0u8; 16];
        // SAFETY: a 16-byte out buffer, the size of CUuuid.
        let rc = unsafe { (self.uuid.0)(&mut uuid, dev) };
        self.check(self.uuid.1, rc)?;
        let mut total: usize = 0;
        // SAFETY: valid out-pointer.
        let rc = unsafe { (self.api.device_total_mem)(&mut total, dev) };
        self.check("cuDeviceTotalMem_v2", rc)?;
        Ok(DeviceFacts {
            name,
            major,
            minor,
            uuid,
            uuid_symbol: self.uuid.1,
            total_bytes: total as u64,
        })
    }

    /// Retains the device's primary context and makes it current on this thread.
    pub fn retain_primary_context(&self, dev: CuDevice) -> Result<CUcontext, CudaError> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device handle.
        let rc = unsafe { (self.api.primary_ctx_retain)(&mut ctx, dev) };
        self.check("cuDevicePrimaryCtxRetain", rc)?;
        // SAFETY: `ctx` was just returned by the driver.
        let rc = unsafe { (self.api.ctx_set_current)(ctx) };
        if let Err(e) = self.check("cuCtxSetCurrent", rc) {
            self.release_primary_context(dev);
            return Err(e);
        }
        Ok(ctx)
    }

    /// Releases a primary context retained by [`Driver::retain_primary_context`].
    pub fn release_primary_context(&self, dev: CuDevice) {
        // SAFETY: called once per successful retain; an error here leaves nothing to undo.
        unsafe { (self.api.primary_ctx_release)(dev) };
    }

    /// Makes `ctx` current on this thread (the phase runner may run on any thread).
    pub fn set_current(&self, ctx: CUcontext) -> Result<(), CudaError> {
        // SAFETY: `ctx` is a live context owned by the caller.
        let rc = unsafe { (self.api.ctx_set_current)(ctx) };
        self.check("cuCtxSetCurrent", rc)
    }

    /// Waits for all work of the current context.
    pub fn ctx_synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: no arguments; requires a current context, else returns an error code.
        let rc = unsafe { (self.api.ctx_synchronize)() };
        self.check("cuCtxSynchronize", rc)
    }

    /// Free and total device memory (`cuMemGetInfo`), with a current context.
    pub fn mem_get_info(&self) -> Result<(u64, u64), CudaError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let rc = unsafe { (self.api.mem_get_info)(&mut free, &mut total) };
        self.check("cuMemGetInfo_v2", rc)?;
        Ok((free as u64, total as u64))
    }

    /// A new non-blocking stream in the current context.
    pub fn stream_create(&self) -> Result<CUstream, CudaError> {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { (self.api.stream_create)(&mut s, CU_STREAM_NON_BLOCKING) };
        self.check("cuStreamCreate", rc)?;
        Ok(s)
    }

    /// Destroys a stream created by [`Driver::stream_create`].
    pub fn stream_destroy(&self, s: CUstream) {
        // SAFETY: `s` is a live stream, destroyed once.
        unsafe { (self.api.stream_destroy)(s) };
    }

    /// Waits for a stream.
    pub fn stream_synchronize(&self, s: CUstream) -> Result<(), CudaError> {
        // SAFETY: `s` is a live stream.
        let rc = unsafe { (self.api.stream_synchronize)(s) };
        self.check("cuStreamSynchronize", rc)
    }

    /// `cuMemAlloc`: `bytes` of device memory. The caller must free it with [`Driver::mem_free`].
    pub fn mem_alloc(&self, bytes: u64) -> Result<DevicePtr, CudaError> {
        let mut p: DevicePtr = 0;
        let len = usize::try_from(bytes).map_err(|_| CudaError::Driver {
            call: "cuMemAlloc_v2",
            code: crate::error::CUDA_ERROR_OUT_OF_MEMORY,
            name: "size does not fit in this platform's address space".to_string(),
        })?;
        // SAFETY: valid out-pointer; the driver checks the size.
        let rc = unsafe { (self.api.mem_alloc)(&mut p, len) };
        self.check("cuMemAlloc_v2", rc)?;
        Ok(p)
    }

    /// `cuMemFree`.
    ///
    /// # Safety
    /// `p` came from [`Driver::mem_alloc`], is freed once, and no queued work still uses it.
    pub unsafe fn mem_free(&self, p: DevicePtr) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.api.mem_free)(p) };
        self.check("cuMemFree_v2", rc)
    }

    /// Queues a host-to-device copy and waits for it (the host buffer is borrowed).
    ///
    /// # Safety
    /// `dst .. dst + src.len()` lies inside one live allocation.
    pub unsafe fn copy_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: the caller guarantees the destination; `src` stays borrowed until the stream
        // synchronisation below has completed the copy.
        let rc =
            unsafe { (self.api.memcpy_htod_async)(dst, src.as_ptr().cast(), src.len(), stream) };
        self.check("cuMemcpyHtoDAsync_v2", rc)?;
        self.stream_synchronize(stream)
    }

    /// Queues a device-to-host copy and waits for it.
    ///
    /// # Safety
    /// `src .. src + dst.len()` lies inside one live allocation.
    pub unsafe fn copy_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: the caller guarantees the source; `dst` stays borrowed until the
        // synchronisation below has completed the copy.
        let rc = unsafe {
            (self.api.memcpy_dtoh_async)(dst.as_mut_ptr().cast(), src, dst.len(), stream)
        };
        self.check("cuMemcpyDtoHAsync_v2", rc)?;
        self.stream_synchronize(stream)
    }

    /// Loads a module from a cubin or a NUL-terminated PTX image.
    pub fn module_load(&self, image: &[u8]) -> Result<CUmodule, CudaError> {
        let mut m: CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is a complete cubin (ELF) or NUL-terminated PTX, checked by the caller
        // (kernels.rs); the driver copies what it needs before returning.
        let rc = unsafe { (self.api.module_load_data)(&mut m, image.as_ptr().cast()) };
        self.check("cuModuleLoadData", rc)?;
        Ok(m)
    }

    /// Unloads a module.
    pub fn module_unload(&self, m: CUmodule) {
        // SAFETY: `m` is a live module, unloaded once.
        unsafe { (self.api.module_unload)(m) };
    }

    /// A kernel of a module by its (extern "C") name.
    pub fn function(&self, m: CUmodule, name: &std::ffi::CStr) -> Result<CUfunction, CudaError> {
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: valid out-pointer, live module, NUL-terminated name.
        let rc = unsafe { (self.api.module_get_function)(&mut f, m, name.as_ptr()) };
        self.check("cuModuleGetFunction", rc)?;
        Ok(f)
    }

    /// Launches a kernel on a 1-D grid.
    ///
    /// # Safety
    /// `params` points to one pointer per kernel parameter, each to a value of the parameter's
    /// type, and every device pointer among them is live for the kernel's duration.
    pub unsafe fn launch(
        &self,
        f: CUfunction,
        grid: u32,
        block: u32,
        stream: CUstream,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller; the driver copies the parameter values at launch.
        let rc = unsafe {
            (self.api.launch_kernel)(
                f,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", rc)
    }

    /// An event that records timing.
    pub fn event_create(&self) -> Result<CUevent, CudaError> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; CU_EVENT_DEFAULT keeps timing enabled.
        let rc = unsafe { (self.api.event_create)(&mut e, CU_EVENT_DEFAULT) };
        self.check("cuEventCreate", rc)?;
        Ok(e)
    }

    /// Records an event on a stream.
    pub fn event_record(&self, e: CUevent, s: CUstream) -> Result<(), CudaError> {
        // SAFETY: live event and stream.
        let rc = unsafe { (self.api.event_record)(e, s) };
        self.check("cuEventRecord", rc)
    }

    /// Milliseconds between two recorded events, after waiting for the second.
    pub fn elapsed_ms(&self, start: CUevent, stop: CUevent) -> Result<f32, CudaError> {
        // SAFETY: live event.
        let rc = unsafe { (self.api.event_synchronize)(stop) };
        self.check("cuEventSynchronize", rc)?;
        let mut ms = 0f32;
        // SAFETY: valid out-pointer; both events were recorded with timing enabled.
        let rc = unsafe { (self.elapsed.0)(&mut ms, start, stop) };
        self.check(self.elapsed.1, rc)?;
        Ok(ms)
    }

    /// Destroys an event.
    pub fn event_destroy(&self, e: CUevent) {
        // SAFETY: live event, destroyed once.
        unsafe { (self.api.event_destroy)(e) };
    }
}

/// The driver library, once opened: never closed, so the driver's code stays mapped for the
/// process's life (the R535 `libcuda` is not NODELETE; a teardown after `dlclose` would crash).
static DRIVER_LIBRARY: OnceLock<Library> = OnceLock::new();

/// The driver library opened by [`Driver::load`], for symbols only some commands need.
pub(crate) fn loaded_library() -> Option<&'static Library> {
    DRIVER_LIBRARY.get()
}

/// Opens the driver library: the driver's SONAME first, then the development name. The first
/// library opened is kept for the process's life and returned by every later call.
fn open_driver() -> Result<&'static Library, CudaError> {
    if let Some(lib) = DRIVER_LIBRARY.get() {
        return Ok(lib);
    }
    let mut last = String::new();
    for name in ["libcuda.so.1", "libcuda.so"] {
        // SAFETY: loading libcuda runs its initialisers, which have no preconditions.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok(DRIVER_LIBRARY.get_or_init(|| lib)),
            Err(e) => {
                if last.is_empty() {
                    last = crate::error::load_error(&e);
                }
            }
        }
    }
    Err(CudaError::NoDriver { reason: last })
}

fn name_of(error_name: Option<ErrorNameFn>, code: CuResult) -> String {
    if let Some(f) = error_name {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; on success the driver returns a static NUL-terminated string.
        if unsafe { f(code, &mut p) } == 0 && !p.is_null() {
            // SAFETY: non-null, NUL-terminated, static storage per the driver's documentation.
            let s = unsafe { std::ffi::CStr::from_ptr(p) };
            return s.to_string_lossy().into_owned();
        }
    }
    cu_result_name(code).to_string()
}

/// A UUID as NVML and `nvidia-smi` print it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(prefix: &str, b: &[u8; 16]) -> String {
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_formatted_like_nvidia_smi() {
        let b = [
            0x6f, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6,
            0xe7, 0xf8,
        ];
        assert_eq!(
            format_uuid("GPU", &b),
            "GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
        );
    }

    #[test]
    fn no_driver_here_is_an_error_value() {
        // On a machine with a driver this opens it; either way it must not panic.
        match Driver::load() {
            Ok(d) => assert!(d.version >= MIN_DRIVER_VERSION),
            Err(e) => assert!(e.is_unavailable(), "{e}"),
        }
    }
}
