//! The caching policy: how requests are rounded, which pool serves them, how big a new segment
//! is, which cached block is reused, when a block is split and how freed blocks merge.
//!
//! Every rule is PyTorch's (`c10/cuda/CUDACachingAllocator.cpp`, default configuration: no
//! `max_split_size`, no power-of-two rounding, no garbage-collection threshold), because the point
//! of the counters is that a figure we print means what `torch.cuda.memory_allocated()` and
//! friends would print for the same sequence of tensors. The free functions [`round_size`],
//! [`pool_of`] and [`segment_size`] are public so the pre-flight estimate applies the same rules.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::{PoolStats, SegmentError, SegmentSource, Stats};

/// Every block is a multiple of this many bytes, and no block is smaller (`kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest rounded request served by the small pool (`kSmallSize`); exactly 1 MiB is small.
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size for small requests (`kSmallBuffer`).
pub const SMALL_SEGMENT: u64 = 2 << 20;
/// Segment size for large requests under [`MIN_LARGE_ALLOC`] (`kLargeBuffer`).
pub const LARGE_SEGMENT: u64 = 20 << 20;
/// Requests of at least this size get a segment of their own size (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Such own-size segments are rounded up to a multiple of this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The two pools. A block never moves between them: small requests are only ever served from
/// small (2 MiB) segments and large requests only from large ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pool {
    /// Rounded requests of at most 1 MiB.
    Small,
    /// Everything larger.
    Large,
}

/// Rounds a request as PyTorch does: up to a multiple of 512 bytes, and at least 512 bytes.
///
/// (The allocator refuses 0 bytes before rounding; `round_size(0)` is 512 like PyTorch's.) For
/// absurd requests within 511 bytes of `u64::MAX` the result saturates at `u64::MAX`, which no
/// source can provide.
pub fn round_size(bytes: u64) -> u64 {
    if bytes < MIN_BLOCK_SIZE {
        MIN_BLOCK_SIZE
    } else {
        bytes
            .div_ceil(MIN_BLOCK_SIZE)
            .saturating_mul(MIN_BLOCK_SIZE)
    }
}

/// The pool that serves a rounded request: small up to and including 1 MiB, large above.
pub fn pool_of(rounded: u64) -> Pool {
    if rounded <= SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

/// The size of the segment obtained for a rounded request no cached block can serve:
/// 2 MiB for the small pool, 20 MiB for 1 MiB < size < 10 MiB, otherwise the size rounded up to
/// a multiple of 2 MiB (saturating at `u64::MAX`).
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_SEGMENT
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_SEGMENT
    } else {
        rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

/// Whether a block with `remaining` bytes left over after serving a request is split in two.
///
/// Small pool: whenever the rest can hold a minimum block. Large pool: only when the rest is over
/// 1 MiB; otherwise the whole block is handed out and counts as allocated (so 11.5 MiB takes a
/// 12 MiB segment whole).
fn should_split(pool: Pool, remaining: u64) -> bool {
    match pool {
        Pool::Small => remaining >= MIN_BLOCK_SIZE,
        Pool::Large => remaining > SMALL_SIZE,
    }
}

/// Identifies a segment held by a [`CachingAllocator`]. Ids of released segments are reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId(pub usize);

/// A live allocation. Not `Clone`: giving it back to [`CachingAllocator::free`] consumes it, so
/// it cannot be freed twice.
#[derive(Debug, PartialEq, Eq)]
pub struct Block {
    /// The segment holding the block.
    pub segment: SegmentId,
    /// Byte offset of the block in its segment.
    pub offset: u64,
    /// Bytes the block holds and counts as allocated: the rounded request, or a whole unsplit
    /// cached block when splitting was not allowed. Usable by the caller in full.
    pub size: u64,
    /// Bytes the caller asked for, before rounding.
    pub requested: u64,
}

/// Why the allocator could not serve a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A request for zero bytes; callers always need at least one byte.
    #[error("cannot allocate 0 bytes; a request must be at least 1 byte")]
    ZeroBytes,
    /// No cached block fits and the source refused a new segment, even after the allocator gave
    /// every fully free cached segment back and retried.
    #[error(
        "out of memory: {requested} bytes requested (rounded to {rounded}) needed a new segment of \
         {segment_bytes} bytes, which the source refused even after the cache was released \
         ({allocated} bytes allocated, {reserved} bytes reserved by the allocator)"
    )]
    OutOfMemory {
        /// Bytes the caller asked for.
        requested: u64,
        /// The request rounded as the allocator rounds it.
        rounded: u64,
        /// The size of the segment the source refused.
        segment_bytes: u64,
        /// Allocated bytes (all pools) when the request failed.
        allocated: u64,
        /// Reserved bytes (all pools) when the request failed, after the cache release.
        reserved: u64,
        /// The source's own failure on the retry.
        source: SegmentError,
    },
}

/// One block inside a segment: its size, and the caller's unrounded request while it is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    size: u64,
    /// `Some(requested)` while handed out, `None` while cached.
    live: Option<u64>,
}

/// A segment the allocator holds: the source's handle and a tiling of it into blocks.
struct Segment<T> {
    handle: T,
    size: u64,
    pool: Pool,
    /// Blocks by offset; together they tile `0..size` exactly, and no two free blocks are
    /// neighbours (they are merged on free).
    blocks: BTreeMap<u64, Span>,
}

impl<T> Segment<T> {
    /// True when the whole segment is one cached block.
    fn is_free(&self) -> bool {
        self.blocks.len() == 1
            && self
                .blocks
                .get(&0)
                .is_some_and(|span| span.live.is_none() && span.size == self.size)
    }
}

/// A cached block in a free list, ordered by size and then address, so the first entry at or
/// above a size is PyTorch's best fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FreeKey {
    size: u64,
    segment: usize,
    offset: u64,
}

/// A caching allocator over a [`SegmentSource`], with PyTorch's policy and counters.
///
/// It models a single stream: PyTorch keys its free lists by stream as well, and we only ever use
/// one stream, so a block freed here may be reused at once by the next request. A device that
/// used several streams would need per-stream pools and stream-ordered reuse.
///
/// Segments are never given back to the source in a normal run (so `reserved` never goes down);
/// only [`CachingAllocator::empty_cache`] and the out-of-memory retry release them.
pub struct CachingAllocator<S: SegmentSource> {
    source: S,
    /// Indexed by [`SegmentId`]; `None` for a released segment whose id may be reused.
    segments: Vec<Option<Segment<S::Segment>>>,
    /// Ids of released segments, for reuse.
    vacant: Vec<usize>,
    free_small: BTreeSet<FreeKey>,
    free_large: BTreeSet<FreeKey>,
    stats: Stats,
}

impl<S: SegmentSource> fmt::Debug for CachingAllocator<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("segments", &self.stats.segments)
            .field("cached_small_blocks", &self.free_small.len())
            .field("cached_large_blocks", &self.free_large.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<S: SegmentSource> CachingAllocator<S> {
    /// An allocator holding no segment yet.
    pub fn new(source: S) -> Self {
        Self {
            source,
            segments: Vec::new(),
            vacant: Vec::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
            stats: Stats::default(),
        }
    }

    /// Serves a request of `bytes` bytes: the best-fitting cached block of the request's pool,
    /// else a new segment; on a source failure, releases the cache and retries once.
    pub fn allocate(&mut self, bytes: u64) -> Result<Block, AllocError> {
        if bytes == 0 {
            return Err(AllocError::ZeroBytes);
        }
        let rounded = round_size(bytes);
        let pool = pool_of(rounded);
        let probe = FreeKey {
            size: rounded,
            segment: 0,
            offset: 0,
        };
        let cached = self.free_list(pool).range(probe..).next().copied();
        let found = match cached {
            Some(key) => {
                self.free_list_mut(pool).remove(&key);
                key
            }
            None => self.new_segment(bytes, rounded, pool)?,
        };
        Ok(self.take(found, rounded, bytes, pool))
    }

    /// Returns a block to the cache, merging it with free neighbours in its segment. The segment
    /// stays reserved.
    ///
    /// # Panics
    /// If `block` was not handed out by this allocator (a forged or stale `Block`): that is a bug
    /// in the caller, and going on would corrupt every counter.
    pub fn free(&mut self, block: Block) {
        let Some(segment) = self
            .segments
            .get_mut(block.segment.0)
            .and_then(Option::as_mut)
        else {
            panic!("freeing a block of a segment this allocator does not hold: {block:?}");
        };
        let requested = match segment.blocks.get(&block.offset) {
            Some(&Span {
                size,
                live: Some(requested),
            }) if size == block.size => requested,
            _ => panic!("freeing a block this allocator did not hand out: {block:?}"),
        };
        let pool = segment.pool;
        let free_list = match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        };
        let id = block.segment.0;
        let mut start = block.offset;
        let mut size = block.size;
        let previous = segment
            .blocks
            .range(..block.offset)
            .next_back()
            .map(|(&offset, &span)| (offset, span));
        if let Some((offset, span)) = previous.filter(|(_, span)| span.live.is_none()) {
            free_list.remove(&FreeKey {
                size: span.size,
                segment: id,
                offset,
            });
            segment.blocks.remove(&block.offset);
            start = offset;
            size += span.size;
        }
        let next_offset = block.offset + block.size;
        if let Some(&span) = segment
            .blocks
            .get(&next_offset)
            .filter(|span| span.live.is_none())
        {
            free_list.remove(&FreeKey {
                size: span.size,
                segment: id,
                offset: next_offset,
            });
            segment.blocks.remove(&next_offset);
            size += span.size;
        }
        segment.blocks.insert(start, Span { size, live: None });
        free_list.insert(FreeKey {
            size,
            segment: id,
            offset: start,
        });

        for stats in pool_and_all(&mut self.stats, pool) {
            stats.allocated.decrease(block.size);
            stats.requested.decrease(requested);
        }
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Sets every peak to its current value, as `torch.cuda.reset_peak_memory_stats` does.
    pub fn reset_peaks(&mut self) {
        self.stats.reset_peaks();
    }

    /// Gives every fully free segment (both pools) back to the source, as
    /// `torch.cuda.empty_cache` does, and returns the bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        let mut released = 0;
        for id in 0..self.segments.len() {
            if !self.segments[id].as_ref().is_some_and(Segment::is_free) {
                continue;
            }
            let Some(segment) = self.segments[id].take() else {
                continue;
            };
            self.free_list_mut(segment.pool).remove(&FreeKey {
                size: segment.size,
                segment: id,
                offset: 0,
            });
            self.vacant.push(id);
            for stats in pool_and_all(&mut self.stats, segment.pool) {
                stats.reserved.decrease(segment.size);
            }
            self.stats.segments -= 1;
            released += segment.size;
            self.source.release(segment.handle);
        }
        released
    }

    /// The source's handle for a held segment (a device pointer, a host buffer, ...); a block's
    /// memory is `offset..offset + size` within it.
    ///
    /// # Panics
    /// If the segment has been released (no live block can refer to it).
    pub fn segment(&self, id: SegmentId) -> &S::Segment {
        match self.segments.get(id.0).and_then(Option::as_ref) {
            Some(segment) => &segment.handle,
            None => panic!("segment {} is not held by this allocator", id.0),
        }
    }

    /// The source's handle for a held segment, mutably (to write a host buffer).
    ///
    /// # Panics
    /// If the segment has been released (no live block can refer to it).
    pub fn segment_mut(&mut self, id: SegmentId) -> &mut S::Segment {
        match self.segments.get_mut(id.0).and_then(Option::as_mut) {
            Some(segment) => &mut segment.handle,
            None => panic!("segment {} is not held by this allocator", id.0),
        }
    }

    /// The segment source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The segment source, mutably.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    fn free_list(&self, pool: Pool) -> &BTreeSet<FreeKey> {
        match pool {
            Pool::Small => &self.free_small,
            Pool::Large => &self.free_large,
        }
    }

    fn free_list_mut(&mut self, pool: Pool) -> &mut BTreeSet<FreeKey> {
        match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        }
    }

    /// Obtains a segment for a request no cached block fits, with PyTorch's out-of-memory path:
    /// on failure release every fully free segment and try once more. Returns the segment's one
    /// (free, not listed) block.
    fn new_segment(
        &mut self,
        requested: u64,
        rounded: u64,
        pool: Pool,
    ) -> Result<FreeKey, AllocError> {
        let size = segment_size(rounded);
        let handle = match self.source.allocate(size) {
            Ok(handle) => handle,
            Err(_) => {
                self.stats.alloc_retries += 1;
                self.empty_cache();
                match self.source.allocate(size) {
                    Ok(handle) => handle,
                    Err(source) => {
                        self.stats.ooms += 1;
                        return Err(AllocError::OutOfMemory {
                            requested,
                            rounded,
                            segment_bytes: size,
                            allocated: self.stats.all.allocated.current,
                            reserved: self.stats.all.reserved.current,
                            source,
                        });
                    }
                }
            }
        };
        let segment = Segment {
            handle,
            size,
            pool,
            blocks: BTreeMap::from([(0, Span { size, live: None })]),
        };
        let id = match self.vacant.pop() {
            Some(id) => {
                self.segments[id] = Some(segment);
                id
            }
            None => {
                self.segments.push(Some(segment));
                self.segments.len() - 1
            }
        };
        for stats in pool_and_all(&mut self.stats, pool) {
            stats.reserved.increase(size);
        }
        self.stats.segments += 1;
        Ok(FreeKey {
            size,
            segment: id,
            offset: 0,
        })
    }

    /// Hands out the free block `found` (already off the free list) for a request, splitting
    /// off the rest when the pool's rule allows.
    fn take(&mut self, found: FreeKey, rounded: u64, requested: u64, pool: Pool) -> Block {
        let remaining = found.size - rounded;
        let size = if should_split(pool, remaining) {
            let rest = FreeKey {
                size: remaining,
                segment: found.segment,
                offset: found.offset + rounded,
            };
            self.free_list_mut(pool).insert(rest);
            self.held_segment_mut(found.segment).blocks.insert(
                rest.offset,
                Span {
                    size: remaining,
                    live: None,
                },
            );
            rounded
        } else {
            found.size
        };
        self.held_segment_mut(found.segment).blocks.insert(
            found.offset,
            Span {
                size,
                live: Some(requested),
            },
        );
        for stats in pool_and_all(&mut self.stats, pool) {
            stats.allocated.increase(size);
            stats.requested.increase(requested);
        }
        Block {
            segment: SegmentId(found.segment),
            offset: found.offset,
            size,
            requested,
        }
    }

    /// A segment the free lists point into; they only ever point into held segments.
    fn held_segment_mut(&mut self, id: usize) -> &mut Segment<S::Segment> {
        match self.segments.get_mut(id).and_then(Option::as_mut) {
            Some(segment) => segment,
            None => unreachable!("a free list points into released segment {id}"),
        }
    }
}

/// The counters a change in `pool` touches: the pool's own and the totals.
fn pool_and_all(stats: &mut Stats, pool: Pool) -> [&mut PoolStats; 2] {
    let Stats {
        all, small, large, ..
    } = stats;
    match pool {
        Pool::Small => [small, all],
        Pool::Large => [large, all],
    }
}

#[cfg(test)]
mod tests;
