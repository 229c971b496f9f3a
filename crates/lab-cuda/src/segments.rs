//! The allocator's segment source on a GPU: whole segments from `cuMemAlloc`, given back with
//! `cuMemFree` (the synchronous calls, not the driver's stream-ordered pools, so that `reserved`
//! means what PyTorch's does).

use std::rc::Rc;

use lab::alloc::{SegmentError, SegmentSource};

use crate::driver::{DevicePtr, Driver};
use crate::error::{CUDA_ERROR_OUT_OF_MEMORY, CudaError};

/// Segments from the driver of one context (current on the owning thread).
#[derive(Debug)]
pub struct DriverSegments {
    driver: Rc<Driver>,
}

impl DriverSegments {
    /// A source over `driver`.
    pub fn new(driver: Rc<Driver>) -> DriverSegments {
        DriverSegments { driver }
    }
}

impl SegmentSource for DriverSegments {
    type Segment = DevicePtr;

    fn allocate(&mut self, bytes: u64) -> Result<DevicePtr, SegmentError> {
        self.driver.mem_alloc(bytes).map_err(|e| match e {
            CudaError::Driver {
                code: CUDA_ERROR_OUT_OF_MEMORY,
                ..
            } => SegmentError::OutOfMemory { requested: bytes },
            other => SegmentError::Other(other.to_string()),
        })
    }

    fn release(&mut self, segment: DevicePtr) {
        // Work queued on any stream may still use the segment's blocks: wait for it first, as
        // PyTorch's cache release does.
        let _ = self.driver.ctx_synchronize();
        // SAFETY: the allocator releases only segments it obtained from `allocate`, once, with no
        // live block; the synchronisation above finished every queued use.
        let _ = unsafe { self.driver.mem_free(segment) };
    }
}
