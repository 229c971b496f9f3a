//! The driver calls only the lot report and the probe make: peer access between GPUs, pinned host
//! memory, device-to-device and peer copies. They are resolved on first use, from the driver
//! [`Driver::load`] opened, so a measurement never depends on them; a driver that lacks one (every
//! R525 and newer has them all) is an error naming the symbol.

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::sys::{CUcontext, CUstream};

use crate::driver::{CuDevice, CuResult, DevicePtr, Driver, loaded_library};
use crate::error::CudaError;
use crate::version::cuda_version;

type CanAccessPeerFn = unsafe extern "C" fn(*mut c_int, CuDevice, CuDevice) -> CuResult;
type EnablePeerFn = unsafe extern "C" fn(CUcontext, c_uint) -> CuResult;
type AllocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> CuResult;
type FreeHostFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type DtoDFn = unsafe extern "C" fn(DevicePtr, DevicePtr, usize, CUstream) -> CuResult;
type PeerFn =
    unsafe extern "C" fn(DevicePtr, CUcontext, DevicePtr, CUcontext, usize, CUstream) -> CuResult;

/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`: not a failure.
const PEER_ACCESS_ALREADY_ENABLED: CuResult = 704;

/// The probe's driver functions.
#[derive(Clone, Copy)]
pub struct CopyApi {
    can_access_peer: CanAccessPeerFn,
    enable_peer: EnablePeerFn,
    alloc_host: AllocHostFn,
    free_host: FreeHostFn,
    dtod: DtoDFn,
    peer: PeerFn,
}

impl std::fmt::Debug for CopyApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyApi").finish_non_exhaustive()
    }
}

/// # Safety
/// `T` is the function-pointer type of the C prototype of `name`.
unsafe fn sym<T: Copy>(driver: &Driver, name: &'static str) -> Result<T, CudaError> {
    let missing = || CudaError::MissingSymbol {
        symbol: name.to_string(),
        driver: cuda_version(driver.version),
        path: driver.path.clone(),
    };
    let lib = loaded_library().ok_or_else(missing)?;
    // SAFETY: the caller guarantees the prototype; the library stays loaded for the process.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| missing())
}

impl CopyApi {
    /// Resolves the functions from the loaded driver.
    pub fn load(driver: &Driver) -> Result<CopyApi, CudaError> {
        // SAFETY (all below): each type is the prototype from cuda.h for that name.
        unsafe {
            Ok(CopyApi {
                can_access_peer: sym(driver, "cuDeviceCanAccessPeer")?,
                enable_peer: sym(driver, "cuCtxEnablePeerAccess")?,
                alloc_host: sym(driver, "cuMemAllocHost_v2")?,
                free_host: sym(driver, "cuMemFreeHost")?,
                dtod: sym(driver, "cuMemcpyDtoDAsync_v2")?,
                peer: sym(driver, "cuMemcpyPeerAsync")?,
            })
        }
    }

    /// Whether `dev` can read and write `peer`'s memory directly.
    pub fn can_access_peer(
        &self,
        driver: &Driver,
        dev: CuDevice,
        peer: CuDevice,
    ) -> Result<bool, CudaError> {
        let mut can: c_int = 0;
        // SAFETY: valid out-pointer and device handles.
        let rc = unsafe { (self.can_access_peer)(&mut can, dev, peer) };
        driver.check_call("cuDeviceCanAccessPeer", rc)?;
        Ok(can != 0)
    }

    /// Lets the current context reach `peer`'s memory (already enabled is fine).
    pub fn enable_peer_access(&self, driver: &Driver, peer: CUcontext) -> Result<(), CudaError> {
        // SAFETY: `peer` is a live context; flags must be 0.
        let rc = unsafe { (self.enable_peer)(peer, 0) };
        if rc == PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        driver.check_call("cuCtxEnablePeerAccess", rc)
    }

    /// `bytes` of page-locked host memory, freed when the returned buffer is dropped.
    pub fn pinned(&self, driver: &Driver, bytes: usize) -> Result<Pinned, CudaError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the driver checks the size.
        let rc = unsafe { (self.alloc_host)(&mut p, bytes) };
        driver.check_call("cuMemAllocHost_v2", rc)?;
        Ok(Pinned {
            ptr: p,
            len: bytes,
            free: self.free_host,
        })
    }

    /// Queues a copy within one GPU.
    ///
    /// # Safety
    /// Both ranges lie in live allocations of the current context and stay so until the copy has
    /// run on `stream`.
    pub unsafe fn queue_device_copy(
        &self,
        driver: &Driver,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.dtod)(dst, src, len, stream) };
        driver.check_call("cuMemcpyDtoDAsync_v2", rc)
    }

    /// Queues a copy from one GPU's memory to another's.
    ///
    /// # Safety
    /// `src` lies in a live allocation of `src_ctx`, `dst` in one of `dst_ctx`, both stay live
    /// until the copy has run on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn queue_peer_copy(
        &self,
        driver: &Driver,
        dst: DevicePtr,
        dst_ctx: CUcontext,
        src: DevicePtr,
        src_ctx: CUcontext,
        len: usize,
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller.
        let rc = unsafe { (self.peer)(dst, dst_ctx, src, src_ctx, len, stream) };
        driver.check_call("cuMemcpyPeerAsync", rc)
    }
}

/// Page-locked host memory from `cuMemAllocHost`.
pub struct Pinned {
    ptr: *mut c_void,
    len: usize,
    free: FreeHostFn,
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned").field("len", &self.len).finish()
    }
}

impl Pinned {
    /// The address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Its bytes, writable (to fill before a copy).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.ptr.is_null() || self.len == 0 {
            return &mut [];
        }
        // SAFETY: `cuMemAllocHost` returned `len` bytes at `ptr`, owned by this value alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by cuMemAllocHost, freed once; no queued copy uses it any more
            // (the probe waits for each copy's stop event before dropping its buffers).
            unsafe { (self.free)(self.ptr) };
        }
    }
}
