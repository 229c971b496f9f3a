//! Live tensors over a caching allocator: the bookkeeping every device shares, so that the CPU
//! reference, the CUDA device and the pre-flight plan count bytes in exactly the same way.

use std::collections::HashMap;

use crate::alloc::{AllocError, Block, CachingAllocator, SegmentSource, Stats};
use crate::device::{DeviceError, Tensor};
use crate::dtype::DType;

/// Hands out [`Tensor`] handles backed by allocator blocks.
#[derive(Debug)]
pub struct TensorPool<S: SegmentSource> {
    allocator: CachingAllocator<S>,
    blocks: HashMap<u64, Block>,
    next_id: u64,
}

impl<S: SegmentSource> TensorPool<S> {
    /// A pool over a segment source.
    pub fn new(source: S) -> TensorPool<S> {
        TensorPool {
            allocator: CachingAllocator::new(source),
            blocks: HashMap::new(),
            next_id: 0,
        }
    }

    /// Allocates a `rows x cols` tensor of `dtype`; `what` names it in an out-of-memory error.
    pub fn allocate(
        &mut self,
        rows: usize,
        cols: usize,
        dtype: DType,
        what: &str,
    ) -> Result<Tensor, DeviceError> {
        let bytes = (rows as u64)
            .checked_mul(cols as u64)
            .and_then(|n| n.checked_mul(dtype.size_bytes()))
            .ok_or_else(|| {
                DeviceError::Shape(format!("{what}: {rows}x{cols} elements overflow"))
            })?;
        let block = self.allocate_bytes(bytes, what)?;
        let id = self.next_id;
        self.next_id += 1;
        self.blocks.insert(id, block);
        Ok(Tensor {
            id,
            rows,
            cols,
            dtype,
        })
    }

    /// Allocates raw bytes that no tensor owns (a library workspace, say).
    pub fn allocate_bytes(&mut self, bytes: u64, what: &str) -> Result<Block, DeviceError> {
        self.allocator.allocate(bytes).map_err(|e| match e {
            AllocError::OutOfMemory {
                allocated,
                reserved,
                ..
            } => DeviceError::OutOfMemory {
                what: what.to_string(),
                requested: bytes,
                allocated,
                reserved,
            },
            other => DeviceError::Backend(format!("{what}: {other}")),
        })
    }

    /// Returns a tensor's block to the cache. A tensor this pool does not know is ignored.
    pub fn free(&mut self, tensor: Tensor) {
        if let Some(block) = self.blocks.remove(&tensor.id) {
            self.allocator.free(block);
        }
    }

    /// Returns every live tensor's block to the cache (a device being torn down).
    pub fn free_all(&mut self) {
        for (_, block) in self.blocks.drain() {
            self.allocator.free(block);
        }
    }

    /// The block behind a live tensor.
    pub fn block(&self, tensor: &Tensor) -> Result<&Block, DeviceError> {
        self.blocks.get(&tensor.id).ok_or_else(|| {
            DeviceError::Backend(format!("tensor {} is not live on this device", tensor.id))
        })
    }

    /// The allocator's counters now.
    pub fn stats(&self) -> Stats {
        self.allocator.stats()
    }

    /// Sets every peak to its current value.
    pub fn reset_peaks(&mut self) {
        self.allocator.reset_peaks();
    }

    /// The allocator (for segment access).
    pub fn allocator(&self) -> &CachingAllocator<S> {
        &self.allocator
    }

    /// The allocator, mutably (for segment access and raw frees).
    pub fn allocator_mut(&mut self) -> &mut CachingAllocator<S> {
        &mut self.allocator
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::SegmentError;

    struct Limited(u64);

    impl SegmentSource for Limited {
        type Segment = ();
        fn allocate(&mut self, bytes: u64) -> Result<(), SegmentError> {
            if bytes > self.0 {
                return Err(SegmentError::OutOfMemory { requested: bytes });
            }
            self.0 -= bytes;
            Ok(())
        }
        fn release(&mut self, _: ()) {}
    }

    #[test]
    fn tensors_count_rounded_bytes_and_free_once() {
        let mut pool = TensorPool::new(Limited(4 << 20));
        let t = pool.allocate(3, 5, DType::Float16, "t").unwrap();
        assert_eq!(pool.stats().all.allocated.current, 512);
        assert_eq!(pool.stats().all.requested.current, 30);
        assert!(pool.block(&t).is_ok());
        let copy = Tensor {
            id: t.id,
            rows: 3,
            cols: 5,
            dtype: DType::Float16,
        };
        pool.free(t);
        assert!(pool.block(&copy).is_err());
        pool.free(copy); // unknown now: ignored, counters unchanged
        assert_eq!(pool.stats().all.allocated.current, 0);
    }

    #[test]
    fn out_of_memory_names_the_tensor_and_the_figures() {
        let mut pool = TensorPool::new(Limited(2 << 20));
        let err = pool
            .allocate(1024, 1024, DType::Float32, "linear1.weight")
            .unwrap_err();
        assert!(matches!(
            err,
            DeviceError::OutOfMemory {
                requested: 4_194_304,
                ..
            }
        ));
        assert!(err.to_string().contains("linear1.weight"));
        assert!(matches!(
            pool.allocate(usize::MAX, 2, DType::Float32, "x"),
            Err(DeviceError::Shape(_))
        ));
    }
}
