//! A caching allocator whose policy and counters mirror PyTorch's CUDA caching allocator in its
//! default configuration, so that our `allocated`/`reserved` figures mean what PyTorch's mean.
//!
//! The policy is pure bookkeeping over a [`SegmentSource`]: the CUDA device plugs in
//! `cuMemAlloc`/`cuMemFree`, the CPU reference device plugs in host buffers, and the tests plug in
//! a fake source that fails when told to.

mod policy;
mod stats;
mod tensors;

pub use policy::{
    AllocError, Block, CachingAllocator, LARGE_SEGMENT, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, Pool,
    ROUND_LARGE, SMALL_SEGMENT, SMALL_SIZE, SegmentId, pool_of, round_size, segment_size,
};
pub use stats::{Counter, PoolStats, Stats};
pub use tensors::{Action, AllocationEvent, PoolName, TensorPool};

/// Where segments come from. A segment is obtained whole and given back whole.
pub trait SegmentSource {
    /// What the source hands out for one segment (a device pointer, a host buffer, ...).
    type Segment;

    /// Obtains a segment of exactly `bytes` bytes.
    fn allocate(&mut self, bytes: u64) -> Result<Self::Segment, SegmentError>;

    /// Gives a segment back. Called only for segments with no live block.
    fn release(&mut self, segment: Self::Segment);
}

/// Why a segment source could not provide a segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// The source has no room for a segment of this size.
    #[error("out of memory obtaining a segment of {requested} bytes")]
    OutOfMemory {
        /// The segment size asked for.
        requested: u64,
    },
    /// Any other failure of the source, in its own words.
    #[error("{0}")]
    Other(String),
}
