//! Live tensors over a caching allocator: the bookkeeping every device shares, so that the CPU
//! reference, the CUDA device and the pre-flight plan count bytes in exactly the same way.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::alloc::{
    AllocError, Block, CachingAllocator, Pool, SegmentSource, Stats, pool_of, round_size,
};
use crate::device::{DeviceError, Tensor};
use crate::dtype::DType;

/// Whether an event of the allocation sequence took or gave back a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A block handed out.
    Allocate,
    /// A block returned to the cache.
    Free,
}

/// One step of a run's allocation sequence, as the allocator served it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationEvent {
    /// Allocate or free.
    pub action: Action,
    /// What the bytes are for (`linear1.weight`, `gelu output`, `cuBLAS workspace`, ...).
    pub what: String,
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Bytes of the block (what counts as allocated).
    pub block_bytes: u64,
    /// The pool that served it (`small`: at most 1 MiB after rounding).
    pub pool: PoolName,
    /// Bytes of the segment obtained from the source for this request (0: served from the cache;
    /// always 0 for a free).
    pub new_segment_bytes: u64,
}

/// A pool's name in the allocation sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolName {
    /// Requests of at most 1 MiB.
    Small,
    /// Larger requests.
    Large,
}

impl From<Pool> for PoolName {
    fn from(p: Pool) -> PoolName {
        match p {
            Pool::Small => PoolName::Small,
            Pool::Large => PoolName::Large,
        }
    }
}

/// Hands out [`Tensor`] handles backed by allocator blocks.
#[derive(Debug)]
pub struct TensorPool<S: SegmentSource> {
    allocator: CachingAllocator<S>,
    blocks: HashMap<u64, Block>,
    next_id: u64,
    /// The allocation sequence and the names of live tensors, once tracing is on.
    trace: Option<(Vec<AllocationEvent>, HashMap<u64, String>)>,
}

impl<S: SegmentSource> TensorPool<S> {
    /// A pool over a segment source.
    pub fn new(source: S) -> TensorPool<S> {
        TensorPool {
            allocator: CachingAllocator::new(source),
            blocks: HashMap::new(),
            next_id: 0,
            trace: None,
        }
    }

    /// Starts recording the allocation sequence (every allocation and free from now on).
    pub fn enable_trace(&mut self) {
        if self.trace.is_none() {
            self.trace = Some((Vec::new(), HashMap::new()));
        }
    }

    /// The allocation sequence recorded so far (empty when tracing is off).
    pub fn trace(&self) -> &[AllocationEvent] {
        self.trace.as_ref().map_or(&[], |(events, _)| events)
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
        if let Some((_, names)) = &mut self.trace {
            names.insert(id, what.to_string());
        }
        Ok(Tensor {
            id,
            rows,
            cols,
            dtype,
        })
    }

    /// Allocates raw bytes that no tensor owns (a library workspace, say).
    pub fn allocate_bytes(&mut self, bytes: u64, what: &str) -> Result<Block, DeviceError> {
        let reserved_before = self.allocator.stats().all.reserved.current;
        let block = self.allocator.allocate(bytes).map_err(|e| match e {
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
        })?;
        if let Some((events, _)) = &mut self.trace {
            let reserved_after = self.allocator.stats().all.reserved.current;
            events.push(AllocationEvent {
                action: Action::Allocate,
                what: what.to_string(),
                requested_bytes: bytes,
                block_bytes: block.size,
                pool: pool_of(round_size(block.requested)).into(),
                new_segment_bytes: reserved_after.saturating_sub(reserved_before),
            });
        }
        Ok(block)
    }

    /// Returns a tensor's block to the cache. A tensor this pool does not know is ignored.
    pub fn free(&mut self, tensor: Tensor) {
        if let Some(block) = self.blocks.remove(&tensor.id) {
            if let Some((events, names)) = &mut self.trace {
                events.push(AllocationEvent {
                    action: Action::Free,
                    what: names.remove(&tensor.id).unwrap_or_default(),
                    requested_bytes: block.requested,
                    block_bytes: block.size,
                    pool: pool_of(round_size(block.requested)).into(),
                    new_segment_bytes: 0,
                });
            }
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
