//! The policy against a fake segment source. Each sequence's expected counters are worked out by
//! hand in the comments, from the rules in the team notes (`shared/notes/pytorch-allocator.md`:
//! PyTorch's default configuration).

use super::*;
use proptest::prelude::*;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// A segment as the fake source hands it out: a made-up base address and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FakeSegment {
    base: u64,
    bytes: u64,
}

/// A source with a fixed capacity that hands out increasing addresses, and can be told to fail
/// the next few requests whatever its capacity.
#[derive(Debug)]
struct FakeSource {
    capacity: u64,
    used: u64,
    next_base: u64,
    fail_next: u32,
    obtained: Vec<u64>,
    released: Vec<u64>,
}

impl FakeSource {
    fn with_capacity(capacity: u64) -> Self {
        Self {
            capacity,
            used: 0,
            next_base: 0x7f00_0000_0000,
            fail_next: 0,
            obtained: Vec::new(),
            released: Vec::new(),
        }
    }

    fn unlimited() -> Self {
        Self::with_capacity(u64::MAX)
    }
}

impl SegmentSource for FakeSource {
    type Segment = FakeSegment;

    fn allocate(&mut self, bytes: u64) -> Result<FakeSegment, SegmentError> {
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Err(SegmentError::OutOfMemory { requested: bytes });
        }
        if self.capacity - self.used < bytes {
            return Err(SegmentError::OutOfMemory { requested: bytes });
        }
        self.used += bytes;
        let segment = FakeSegment {
            base: self.next_base,
            bytes,
        };
        self.next_base += bytes.next_multiple_of(MIB) + MIB;
        self.obtained.push(bytes);
        Ok(segment)
    }

    fn release(&mut self, segment: FakeSegment) {
        assert!(segment.bytes <= self.used, "released more than obtained");
        self.used -= segment.bytes;
        self.released.push(segment.bytes);
    }
}

fn allocator() -> CachingAllocator<FakeSource> {
    CachingAllocator::new(FakeSource::unlimited())
}

/// Expected current values of one pool's (or the total's) counters.
fn assert_pool(stats: &PoolStats, allocated: u64, reserved: u64, requested: u64, what: &str) {
    assert_eq!(stats.allocated.current, allocated, "{what} allocated");
    assert_eq!(stats.reserved.current, reserved, "{what} reserved");
    assert_eq!(stats.requested.current, requested, "{what} requested");
}

/// Sizes of the cached blocks of a pool, in best-fit order.
fn cached(alloc: &CachingAllocator<FakeSource>, pool: Pool) -> Vec<u64> {
    alloc.free_list(pool).iter().map(|key| key.size).collect()
}

impl<S: SegmentSource> CachingAllocator<S> {
    /// Checks every internal invariant against the counters; panics on the first broken one.
    fn check_invariants(&self) {
        let mut totals = [(0u64, 0u64, 0u64); 2];
        let mut segments = 0;
        for (id, segment) in self.segments.iter().enumerate() {
            let Some(segment) = segment else {
                assert!(self.vacant.contains(&id), "released slot {id} not vacant");
                continue;
            };
            segments += 1;
            let pool = segment.pool as usize;
            totals[pool].1 += segment.size;
            let mut expected_offset = 0;
            let mut previous_free = false;
            for (&offset, span) in &segment.blocks {
                assert_eq!(
                    offset, expected_offset,
                    "blocks of segment {id} do not tile it"
                );
                assert!(span.size >= MIN_BLOCK_SIZE && span.size % MIN_BLOCK_SIZE == 0);
                expected_offset += span.size;
                let key = FreeKey {
                    size: span.size,
                    segment: id,
                    offset,
                };
                match span.live {
                    Some(requested) => {
                        assert!(!self.free_list(segment.pool).contains(&key));
                        assert!(round_size(requested) <= span.size);
                        totals[pool].0 += span.size;
                        totals[pool].2 += requested;
                        previous_free = false;
                    }
                    None => {
                        assert!(self.free_list(segment.pool).contains(&key));
                        assert!(!previous_free, "two free neighbours in segment {id}");
                        previous_free = true;
                    }
                }
            }
            assert_eq!(
                expected_offset, segment.size,
                "blocks of segment {id} overrun"
            );
        }
        let listed = self.free_small.len() + self.free_large.len();
        let free_blocks = self
            .segments
            .iter()
            .flatten()
            .flat_map(|segment| segment.blocks.values())
            .filter(|span| span.live.is_none())
            .count();
        assert_eq!(listed, free_blocks, "free lists hold stale entries");
        assert_eq!(self.stats.segments, segments);
        let [small, large] = totals;
        assert_pool(&self.stats.small, small.0, small.1, small.2, "small");
        assert_pool(&self.stats.large, large.0, large.1, large.2, "large");
        assert_pool(
            &self.stats.all,
            small.0 + large.0,
            small.1 + large.1,
            small.2 + large.2,
            "all",
        );
    }
}

#[test]
fn rounding_pools_and_segment_sizes_follow_pytorch() {
    assert_eq!(round_size(0), 512);
    assert_eq!(round_size(1), 512);
    assert_eq!(round_size(512), 512);
    assert_eq!(round_size(513), 1024);
    assert_eq!(round_size(11 * MIB + MIB / 2), 11 * MIB + MIB / 2);
    assert_eq!(round_size(u64::MAX), u64::MAX);

    assert_eq!(pool_of(512), Pool::Small);
    assert_eq!(pool_of(MIB), Pool::Small);
    assert_eq!(pool_of(MIB + 512), Pool::Large);

    assert_eq!(segment_size(512), 2 * MIB);
    assert_eq!(segment_size(MIB), 2 * MIB);
    assert_eq!(segment_size(MIB + 512), 20 * MIB);
    assert_eq!(segment_size(10 * MIB - 512), 20 * MIB);
    assert_eq!(segment_size(10 * MIB), 10 * MIB);
    assert_eq!(segment_size(11 * MIB + MIB / 2), 12 * MIB);
    assert_eq!(segment_size(21 * MIB), 22 * MIB);
    assert_eq!(segment_size(u64::MAX), u64::MAX);
}

#[test]
fn eleven_and_a_half_mib_takes_a_whole_12_mib_segment() {
    let mut alloc = allocator();
    // 11.5 MiB is a multiple of 512: rounded = 11.5 MiB, large pool, >= 10 MiB so the segment is
    // 11.5 MiB rounded up to 2 MiB = 12 MiB. The rest, 0.5 MiB, is not > 1 MiB: no split, the
    // whole 12 MiB block is handed out and counts as allocated.
    let a = alloc.allocate(11 * MIB + MIB / 2).unwrap();
    assert_eq!(a.size, 12 * MIB);
    assert_eq!(a.requested, 11 * MIB + MIB / 2);
    assert_eq!(a.offset, 0);
    assert_eq!(alloc.segment(a.segment).bytes, 12 * MIB);
    let stats = alloc.stats();
    assert_pool(&stats.all, 12 * MIB, 12 * MIB, 11 * MIB + MIB / 2, "all");
    assert_pool(
        &stats.large,
        12 * MIB,
        12 * MIB,
        11 * MIB + MIB / 2,
        "large",
    );
    assert_pool(&stats.small, 0, 0, 0, "small");
    assert_eq!(stats.segments, 1);
    assert!(cached(&alloc, Pool::Large).is_empty());
    alloc.check_invariants();

    // Freed: allocated 0, the 12 MiB segment stays reserved as one cached block.
    alloc.free(a);
    assert_pool(&alloc.stats().all, 0, 12 * MIB, 0, "all");
    assert_eq!(cached(&alloc, Pool::Large), [12 * MIB]);

    // Reusing the cached block follows the same rule: 11 MiB leaves exactly 1 MiB, not > 1 MiB,
    // so the whole 12 MiB is handed out again; no new segment.
    let b = alloc.allocate(11 * MIB).unwrap();
    assert_eq!(b.size, 12 * MIB);
    assert_pool(&alloc.stats().all, 12 * MIB, 12 * MIB, 11 * MIB, "all");
    assert!(cached(&alloc, Pool::Large).is_empty());
    alloc.free(b);

    // 10.5 MiB leaves 1.5 MiB > 1 MiB: split into 10.5 MiB handed out and 1.5 MiB cached.
    let c = alloc.allocate(10 * MIB + MIB / 2).unwrap();
    assert_eq!(c.size, 10 * MIB + MIB / 2);
    assert_eq!(cached(&alloc, Pool::Large), [MIB + MIB / 2]);
    assert_pool(
        &alloc.stats().all,
        10 * MIB + MIB / 2,
        12 * MIB,
        10 * MIB + MIB / 2,
        "all",
    );
    assert_eq!(alloc.stats().segments, 1);
    assert_eq!(alloc.source().obtained, [12 * MIB]);
    alloc.check_invariants();
}

#[test]
fn one_mib_is_small_and_shares_a_2_mib_segment() {
    let mut alloc = allocator();
    // Exactly 1 MiB is small: a 2 MiB segment, split (the 1 MiB rest >= 512 B).
    let a = alloc.allocate(MIB).unwrap();
    assert_eq!(a.size, MIB);
    let stats = alloc.stats();
    assert_pool(&stats.small, MIB, 2 * MIB, MIB, "small");
    assert_pool(&stats.large, 0, 0, 0, "large");
    assert_eq!(cached(&alloc, Pool::Small), [MIB]);

    // A second 1 MiB fits the rest exactly (rest 0 < 512 B: nothing to split); no new segment.
    let b = alloc.allocate(MIB).unwrap();
    assert_eq!((b.segment, b.offset, b.size), (a.segment, MIB, MIB));
    assert_pool(&alloc.stats().small, 2 * MIB, 2 * MIB, 2 * MIB, "small");
    assert!(cached(&alloc, Pool::Small).is_empty());

    // A third needs a second 2 MiB segment.
    let c = alloc.allocate(MIB).unwrap();
    assert_ne!(c.segment, a.segment);
    assert_pool(&alloc.stats().all, 3 * MIB, 4 * MIB, 3 * MIB, "all");
    assert_eq!(alloc.stats().segments, 2);
    alloc.check_invariants();
}

#[test]
fn one_mib_and_one_byte_is_large_and_splits_a_20_mib_segment() {
    let mut alloc = allocator();
    // 1 MiB + 1 rounds to 1 MiB + 512 > 1 MiB: large pool, under 10 MiB so a 20 MiB segment; the
    // rest, 20 MiB - 1 MiB - 512 B, is > 1 MiB so the block is split.
    let a = alloc.allocate(MIB + 1).unwrap();
    assert_eq!(a.size, MIB + 512);
    assert_eq!(a.requested, MIB + 1);
    let stats = alloc.stats();
    assert_pool(&stats.large, MIB + 512, 20 * MIB, MIB + 1, "large");
    assert_pool(&stats.small, 0, 0, 0, "small");
    assert_pool(&stats.all, MIB + 512, 20 * MIB, MIB + 1, "all");
    assert_eq!(cached(&alloc, Pool::Large), [19 * MIB - 512]);
    assert_eq!(alloc.source().obtained, [20 * MIB]);
    alloc.check_invariants();
}

#[test]
fn second_3_mib_request_fits_the_rest_of_the_first_segment() {
    let mut alloc = allocator();
    // 3 MiB: large, a 20 MiB segment split into 3 MiB live + 17 MiB cached.
    let a = alloc.allocate(3 * MIB).unwrap();
    assert_eq!((a.offset, a.size), (0, 3 * MIB));
    assert_eq!(cached(&alloc, Pool::Large), [17 * MIB]);
    // The second 3 MiB is served from the 17 MiB block: split again, 14 MiB cached; still one
    // segment.
    let b = alloc.allocate(3 * MIB).unwrap();
    assert_eq!((b.segment, b.offset, b.size), (a.segment, 3 * MIB, 3 * MIB));
    assert_eq!(cached(&alloc, Pool::Large), [14 * MIB]);
    let stats = alloc.stats();
    assert_pool(&stats.all, 6 * MIB, 20 * MIB, 6 * MIB, "all");
    assert_eq!(stats.segments, 1);
    assert_eq!(alloc.source().obtained, [20 * MIB]);
    alloc.check_invariants();
}

#[test]
fn freed_blocks_merge_back_and_are_reused_by_best_fit() {
    let mut alloc = allocator();
    // Segment 0 (20 MiB): a = 3 MiB @0, b = 3 MiB @3 MiB, 14 MiB cached @6 MiB.
    let a = alloc.allocate(3 * MIB).unwrap();
    let b = alloc.allocate(3 * MIB).unwrap();
    // Freeing a: no free neighbour before, b live after: cached {3 MiB, 14 MiB}.
    alloc.free(a);
    assert_eq!(cached(&alloc, Pool::Large), [3 * MIB, 14 * MIB]);
    // Freeing b merges with a before and the 14 MiB after: one 20 MiB block again.
    alloc.free(b);
    assert_eq!(cached(&alloc, Pool::Large), [20 * MIB]);
    assert_pool(&alloc.stats().all, 0, 20 * MIB, 0, "all");
    alloc.check_invariants();

    // Reuse: 4 MiB comes from the merged block at offset 0; no new segment.
    let c = alloc.allocate(4 * MIB).unwrap();
    assert_eq!((c.segment, c.offset, c.size), (SegmentId(0), 0, 4 * MIB));
    assert_eq!(cached(&alloc, Pool::Large), [16 * MIB]);

    // 12 MiB: the 16 MiB block fits (rest 4 MiB > 1 MiB, split): @4 MiB, cached 4 MiB @16 MiB.
    // A 12 MiB request into a new 12 MiB segment would also fit, but a cached block comes first.
    let d = alloc.allocate(12 * MIB).unwrap();
    assert_eq!((d.segment, d.offset), (SegmentId(0), 4 * MIB));
    // 12 MiB again: nothing cached fits (4 MiB), so a new 12 MiB segment (1), unsplit.
    let e = alloc.allocate(12 * MIB).unwrap();
    assert_eq!((e.segment, e.offset, e.size), (SegmentId(1), 0, 12 * MIB));
    // Free e: cached {4 MiB (seg 0 @16 MiB), 12 MiB (seg 1)}. Free c: cached 4 MiB @0 in seg 0
    // too (d still separates it from the 4 MiB @16 MiB).
    alloc.free(e);
    alloc.free(c);
    assert_eq!(cached(&alloc, Pool::Large), [4 * MIB, 4 * MIB, 12 * MIB]);
    // Best fit for 3.5 MiB: the smallest block that fits, lowest address first: seg 0 @0. Its
    // rest, 0.5 MiB, is not > 1 MiB, so the whole 4 MiB block is handed out.
    let f = alloc.allocate(3 * MIB + MIB / 2).unwrap();
    assert_eq!((f.segment, f.offset, f.size), (SegmentId(0), 0, 4 * MIB));
    // 5 MiB: only the 12 MiB block of segment 1 fits (rest 7 MiB, split).
    let g = alloc.allocate(5 * MIB).unwrap();
    assert_eq!((g.segment, g.offset, g.size), (SegmentId(1), 0, 5 * MIB));
    // 7 MiB: exactly the 7 MiB left in segment 1, not the 20 MiB segment's 4 MiB blocks.
    let h = alloc.allocate(7 * MIB).unwrap();
    assert_eq!(
        (h.segment, h.offset, h.size),
        (SegmentId(1), 5 * MIB, 7 * MIB)
    );
    // Live: f 4 + d 12 + g 5 + h 7 = 28 MiB allocated (27.5 MiB requested) in 32 MiB reserved;
    // never a third segment.
    let stats = alloc.stats();
    assert_pool(&stats.all, 28 * MIB, 32 * MIB, 27 * MIB + MIB / 2, "all");
    assert_eq!(stats.segments, 2);
    alloc.check_invariants();
    for block in [f, d, g, h] {
        alloc.free(block);
    }
    assert_eq!(cached(&alloc, Pool::Large), [12 * MIB, 20 * MIB]);
    alloc.check_invariants();
}

#[test]
fn block_freed_in_the_middle_merges_with_both_neighbours() {
    let mut alloc = allocator();
    // Four 512 KiB blocks fill one 2 MiB small segment: @0, @512K, @1M, @1.5M (the last takes
    // the 512 KiB rest exactly, nothing left to split).
    let a = alloc.allocate(512 * KIB).unwrap();
    let b = alloc.allocate(512 * KIB).unwrap();
    let c = alloc.allocate(512 * KIB).unwrap();
    let d = alloc.allocate(512 * KIB).unwrap();
    assert_eq!(
        [a.offset, b.offset, c.offset, d.offset],
        [0, 512 * KIB, MIB, MIB + 512 * KIB]
    );
    assert_eq!(alloc.stats().segments, 1);
    assert!(cached(&alloc, Pool::Small).is_empty());
    // Free a and c: two separate 512 KiB cached blocks (b lies between them).
    alloc.free(a);
    alloc.free(c);
    assert_eq!(cached(&alloc, Pool::Small), [512 * KIB, 512 * KIB]);
    // Free b, in the middle: merges with a before and c after into 1.5 MiB @0.
    alloc.free(b);
    assert_eq!(cached(&alloc, Pool::Small), [MIB + 512 * KIB]);
    assert_eq!(
        alloc.segments[0]
            .as_ref()
            .unwrap()
            .blocks
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [0, MIB + 512 * KIB]
    );
    assert_pool(&alloc.stats().small, 512 * KIB, 2 * MIB, 512 * KIB, "small");
    alloc.check_invariants();
    alloc.free(d);
    assert_eq!(cached(&alloc, Pool::Small), [2 * MIB]);
    alloc.check_invariants();
}

#[test]
fn pools_never_share_blocks() {
    let mut alloc = allocator();
    // A cached 20 MiB large block does not serve a 1 KiB request: a new 2 MiB small segment.
    let a = alloc.allocate(3 * MIB).unwrap();
    alloc.free(a);
    let s = alloc.allocate(KIB).unwrap();
    assert_eq!(s.segment, SegmentId(1));
    assert_eq!(s.size, KIB);
    // A cached small block (2 MiB - 1 KiB) does not serve a 1.5 MiB (large) request either; the
    // large pool's cached 20 MiB block does.
    let l = alloc.allocate(MIB + MIB / 2).unwrap();
    assert_eq!(l.segment, SegmentId(0));
    let stats = alloc.stats();
    assert_pool(&stats.small, KIB, 2 * MIB, KIB, "small");
    assert_pool(
        &stats.large,
        MIB + MIB / 2,
        20 * MIB,
        MIB + MIB / 2,
        "large",
    );
    assert_eq!(stats.segments, 2);
    alloc.check_invariants();
}

#[test]
fn peaks_track_maxima_and_reset_to_current() {
    let mut alloc = allocator();
    // a = 3 MiB, b = 5 MiB, both in one 20 MiB segment: allocated 8 MiB (peak 8), reserved 20.
    let a = alloc.allocate(3 * MIB).unwrap();
    let b = alloc.allocate(5 * MIB + 100).unwrap();
    // b rounds to 5 MiB + 512.
    let stats = alloc.stats();
    assert_eq!(stats.all.allocated.peak, 8 * MIB + 512);
    assert_eq!(stats.all.requested.peak, 8 * MIB + 100);
    // Free b: allocated 3 MiB, the peak stays at 8 MiB + 512.
    alloc.free(b);
    let stats = alloc.stats();
    assert_eq!(stats.all.allocated.current, 3 * MIB);
    assert_eq!(stats.all.allocated.peak, 8 * MIB + 512);
    assert_eq!(stats.large.allocated.peak, 8 * MIB + 512);
    assert_eq!(stats.all.reserved.peak, 20 * MIB);

    // Reset: every peak becomes its current value, nothing else changes.
    alloc.reset_peaks();
    let after = alloc.stats();
    for (name, pool) in [
        ("all", after.all),
        ("small", after.small),
        ("large", after.large),
    ] {
        for counter in [pool.allocated, pool.reserved, pool.requested] {
            assert_eq!(counter.peak, counter.current, "{name}");
        }
    }
    assert_eq!(after.all.allocated.current, stats.all.allocated.current);
    assert_eq!(after.all.reserved.current, stats.all.reserved.current);
    assert_eq!(after.segments, stats.segments);
    assert_eq!(after.all.allocated.peak, 3 * MIB);

    // 1 KiB more, small: a 2 MiB segment. Allocated 3 MiB + 1 KiB (the new peak), reserved
    // 22 MiB (peak 22); the large pool's peak stays at its reset value, 3 MiB.
    let s = alloc.allocate(KIB).unwrap();
    let stats = alloc.stats();
    assert_eq!(stats.all.allocated.peak, 3 * MIB + KIB);
    assert_eq!(stats.all.reserved.peak, 22 * MIB);
    assert_eq!(stats.small.allocated.peak, KIB);
    assert_eq!(stats.small.reserved.peak, 2 * MIB);
    assert_eq!(stats.large.allocated.peak, 3 * MIB);
    alloc.free(s);
    alloc.free(a);
    let stats = alloc.stats();
    assert_eq!(stats.all.allocated.current, 0);
    assert_eq!(stats.all.allocated.peak, 3 * MIB + KIB);
}

#[test]
fn reserved_never_decreases_in_a_normal_run() {
    let mut alloc = allocator();
    let mut live = Vec::new();
    let mut last_reserved = 0;
    // A forward-pass-like pattern, repeated: activations allocated and freed out of order.
    for round in 0..5u64 {
        for bytes in [4 * MIB, 16 * MIB + round, 700 * KIB, 33 * MIB, 3] {
            live.push(alloc.allocate(bytes).unwrap());
            let reserved = alloc.stats().all.reserved.current;
            assert!(reserved >= last_reserved);
            last_reserved = reserved;
        }
        for index in [3, 0, 1] {
            alloc.free(live.remove(index.min(live.len() - 1)));
            assert_eq!(alloc.stats().all.reserved.current, last_reserved);
        }
    }
    for block in live.drain(..) {
        alloc.free(block);
    }
    let stats = alloc.stats();
    assert_eq!(stats.all.allocated.current, 0);
    assert_eq!(stats.all.reserved.current, last_reserved);
    assert!(alloc.source().released.is_empty());
    assert_eq!(stats.alloc_retries, 0);
    alloc.check_invariants();
}

#[test]
fn out_of_memory_retry_releases_cached_segments_then_succeeds() {
    let mut alloc = CachingAllocator::new(FakeSource::with_capacity(48 * MIB));
    // b = 11.5 MiB: segment 0, 12 MiB, unsplit.
    let b = alloc.allocate(11 * MIB + MIB / 2).unwrap();
    // a = 3 MiB: segment 1, 20 MiB, split; keep = 5 MiB from its 17 MiB rest (@3 MiB).
    let a = alloc.allocate(3 * MIB).unwrap();
    let keep = alloc.allocate(5 * MIB).unwrap();
    assert_eq!(keep.segment, SegmentId(1));
    // s = 1 KiB: segment 2, 2 MiB small. The source now holds 12 + 20 + 2 = 34 MiB of 48.
    let s = alloc.allocate(KIB).unwrap();
    alloc.free(b);
    alloc.free(a);
    alloc.free(s);
    // Cached: segment 0 whole (12 MiB), segment 2 whole (2 MiB), and 3 MiB + 12 MiB in
    // segment 1 around the live `keep`. Allocated 5 MiB, reserved 34 MiB.
    assert_pool(&alloc.stats().all, 5 * MIB, 34 * MIB, 5 * MIB, "all");

    // 24 MiB: no cached large block fits, so a 24 MiB segment; the source has 14 MiB left and
    // refuses. Retry: segments 0 and 2 are fully free and go back (14 MiB), segment 1 stays
    // (keep is live). The source then holds 20 MiB, has 28 MiB left, and the retry succeeds.
    let c = alloc.allocate(24 * MIB).unwrap();
    assert_eq!(c.size, 24 * MIB);
    assert_eq!(alloc.source().released, [12 * MIB, 2 * MIB]);
    let stats = alloc.stats();
    assert_eq!(stats.alloc_retries, 1);
    assert_eq!(stats.ooms, 0);
    // Allocated 5 + 24 = 29 MiB; reserved 20 + 24 = 44 MiB in 2 segments, all large.
    assert_pool(&stats.all, 29 * MIB, 44 * MIB, 29 * MIB, "all");
    assert_pool(&stats.large, 29 * MIB, 44 * MIB, 29 * MIB, "large");
    assert_pool(&stats.small, 0, 0, 0, "small");
    assert_eq!(stats.segments, 2);
    // The small pool's reserved peak remembers its 2 MiB; the total peak is now 44 MiB.
    assert_eq!(stats.small.reserved.peak, 2 * MIB);
    assert_eq!(stats.all.reserved.peak, 44 * MIB);
    // The new segment reuses a released id.
    assert!(c.segment == SegmentId(0) || c.segment == SegmentId(2));
    assert_eq!(alloc.segment(c.segment).bytes, 24 * MIB);
    alloc.check_invariants();
}

#[test]
fn transient_source_failure_is_retried_even_with_nothing_cached() {
    let mut alloc = allocator();
    alloc.source_mut().fail_next = 1;
    // 3 MiB: the source refuses once; nothing is cached to release; the retry gets 20 MiB.
    let a = alloc.allocate(3 * MIB).unwrap();
    let stats = alloc.stats();
    assert_eq!((stats.alloc_retries, stats.ooms), (1, 0));
    assert_pool(&stats.all, 3 * MIB, 20 * MIB, 3 * MIB, "all");
    alloc.free(a);
}

#[test]
fn out_of_memory_after_the_retry_reports_the_figures() {
    let mut alloc = CachingAllocator::new(FakeSource::with_capacity(40 * MIB));
    // a = 30 MiB: its own 30 MiB segment (>= 10 MiB, already a multiple of 2 MiB), live.
    let _a = alloc.allocate(30 * MIB).unwrap();
    let before = alloc.stats();
    // 12 MiB - 100 B rounds up to 12 MiB (a multiple of 512): large, >= 10 MiB, so a 12 MiB
    // segment; 30 + 12 > 40 so the source refuses; nothing is fully free to release; the retry
    // is refused too.
    let err = alloc.allocate(12 * MIB - 100).unwrap_err();
    assert_eq!(
        err,
        AllocError::OutOfMemory {
            requested: 12 * MIB - 100,
            rounded: 12 * MIB,
            segment_bytes: 12 * MIB,
            allocated: 30 * MIB,
            reserved: 30 * MIB,
            source: SegmentError::OutOfMemory {
                requested: 12 * MIB
            },
        }
    );
    let message = err.to_string();
    assert!(message.contains("12582812 bytes requested"), "{message}");
    assert!(message.contains("31457280 bytes reserved"), "{message}");
    let after = alloc.stats();
    assert_eq!((after.alloc_retries, after.ooms), (1, 1));
    // Every byte counter and peak is as before the failed request.
    assert_eq!(
        Stats {
            alloc_retries: before.alloc_retries,
            ooms: before.ooms,
            ..after
        },
        before
    );
    assert!(alloc.source().released.is_empty());
    alloc.check_invariants();
}

#[test]
fn zero_bytes_are_refused_without_touching_anything() {
    let mut alloc = allocator();
    assert_eq!(alloc.allocate(0), Err(AllocError::ZeroBytes));
    assert_eq!(alloc.stats(), Stats::default());
    assert!(alloc.source().obtained.is_empty());
    assert!(
        AllocError::ZeroBytes
            .to_string()
            .contains("at least 1 byte")
    );
}

#[test]
fn empty_cache_releases_only_fully_free_segments() {
    let mut alloc = allocator();
    let a = alloc.allocate(3 * MIB).unwrap(); // segment 0, 20 MiB
    let b = alloc.allocate(KIB).unwrap(); // segment 1, 2 MiB small
    // 12 MiB fits the 17 MiB cached in segment 0 (split, 5 MiB cached @15 MiB), so no segment
    // of its own; 16 MiB fits nothing cached: segment 2, 16 MiB. Reserved 38 MiB.
    let c = alloc.allocate(12 * MIB).unwrap();
    assert_eq!((c.segment, c.offset), (SegmentId(0), 3 * MIB));
    let d = alloc.allocate(16 * MIB).unwrap();
    assert_eq!(d.segment, SegmentId(2));
    alloc.free(a);
    alloc.free(b);
    alloc.free(d);
    // Segment 0 holds the live c; segments 1 (2 MiB) and 2 (16 MiB) are fully free.
    assert_eq!(alloc.empty_cache(), 18 * MIB);
    let stats = alloc.stats();
    assert_pool(&stats.all, 12 * MIB, 20 * MIB, 12 * MIB, "all");
    assert_pool(&stats.small, 0, 0, 0, "small");
    assert_eq!(stats.segments, 1);
    // Peaks are untouched by the release.
    assert_eq!(stats.all.reserved.peak, 38 * MIB);
    assert_eq!(alloc.source().released, [2 * MIB, 16 * MIB]);
    alloc.check_invariants();
    // Nothing more to release while c lives; after it, segment 0 goes.
    assert_eq!(alloc.empty_cache(), 0);
    alloc.free(c);
    assert_eq!(alloc.empty_cache(), 20 * MIB);
    assert_eq!(alloc.stats().segments, 0);
    assert_eq!(alloc.source().used, 0);
    alloc.check_invariants();
    // Released ids are reused.
    let e = alloc.allocate(KIB).unwrap();
    assert!(e.segment.0 <= 2);
    alloc.check_invariants();
}

#[test]
#[should_panic(expected = "did not hand out")]
fn freeing_a_forged_block_is_a_bug() {
    let mut alloc = allocator();
    let a = alloc.allocate(3 * MIB).unwrap();
    alloc.free(Block {
        segment: a.segment,
        offset: a.offset,
        size: a.size + 512,
        requested: a.requested,
    });
}

#[derive(Debug, Clone)]
enum Op {
    Allocate(u64),
    /// Frees the live block at this index (modulo the number of live blocks).
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..=4 * KIB).prop_map(Op::Allocate),
        3 => (1u64..=MIB + 4 * KIB).prop_map(Op::Allocate),
        2 => (MIB..=12 * MIB).prop_map(Op::Allocate),
        1 => (1u64..=40 * MIB).prop_map(Op::Allocate),
        5 => any::<usize>().prop_map(Op::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_sequences_keep_the_invariants(
        ops in prop::collection::vec(op(), 1..120),
        capacity_mib in prop_oneof![Just(u64::MAX / MIB), 30u64..200],
    ) {
        let mut alloc = CachingAllocator::new(FakeSource::with_capacity(capacity_mib * MIB));
        let mut live: Vec<Block> = Vec::new();
        let mut last = alloc.stats();
        for op in ops {
            match op {
                Op::Allocate(bytes) => match alloc.allocate(bytes) {
                    Ok(block) => {
                        let rounded = round_size(bytes);
                        prop_assert_eq!(block.requested, bytes);
                        prop_assert!(block.size >= rounded);
                        // Only an unsplit large block is bigger than the rounded request, by at
                        // most 1 MiB.
                        match pool_of(rounded) {
                            Pool::Small => prop_assert_eq!(block.size, rounded),
                            Pool::Large => prop_assert!(block.size - rounded <= MIB),
                        }
                        live.push(block);
                    }
                    Err(AllocError::OutOfMemory { allocated, reserved, .. }) => {
                        let stats = alloc.stats();
                        prop_assert_eq!(allocated, stats.all.allocated.current);
                        prop_assert_eq!(reserved, stats.all.reserved.current);
                        prop_assert_eq!(stats.ooms, last.ooms + 1);
                    }
                    Err(AllocError::ZeroBytes) => prop_assert!(false, "0 bytes never asked"),
                },
                Op::Free(index) => {
                    if !live.is_empty() {
                        let index = index % live.len();
                        alloc.free(live.swap_remove(index));
                    }
                }
            }
            alloc.check_invariants();
            let stats = alloc.stats();
            for pool in [stats.all, stats.small, stats.large] {
                prop_assert!(pool.allocated.current <= pool.reserved.current);
                prop_assert!(pool.requested.current <= pool.allocated.current);
                for counter in [pool.allocated, pool.reserved, pool.requested] {
                    prop_assert!(counter.peak >= counter.current);
                }
            }
            // Reserved only goes down on the out-of-memory path.
            if stats.alloc_retries == last.alloc_retries {
                prop_assert!(stats.all.reserved.current >= last.all.reserved.current);
            }
            prop_assert_eq!(
                live.iter().map(|block| block.size).sum::<u64>(),
                stats.all.allocated.current
            );
            prop_assert_eq!(
                live.iter().map(|block| block.requested).sum::<u64>(),
                stats.all.requested.current
            );
            // Live blocks never overlap and stay inside their segments.
            let mut spans: Vec<_> = live
                .iter()
                .map(|block| (block.segment, block.offset, block.offset + block.size))
                .collect();
            spans.sort_unstable();
            for pair in spans.windows(2) {
                if pair[0].0 == pair[1].0 {
                    prop_assert!(pair[0].2 <= pair[1].1, "overlap: {:?}", pair);
                }
            }
            for &(segment, _, end) in &spans {
                prop_assert!(end <= alloc.segment(segment).bytes);
            }
            last = stats;
        }

        // Freeing everything: nothing allocated, nothing given back.
        let reserved = alloc.stats().all.reserved.current;
        for block in live.drain(..) {
            alloc.free(block);
        }
        let stats = alloc.stats();
        prop_assert_eq!(stats.all.allocated.current, 0);
        prop_assert_eq!(stats.small.allocated.current, 0);
        prop_assert_eq!(stats.large.allocated.current, 0);
        prop_assert_eq!(stats.all.requested.current, 0);
        prop_assert_eq!(stats.all.reserved.current, reserved);
        // Every segment is now one free block, so the cache release gives all of it back.
        prop_assert_eq!(
            (alloc.free_small.len() + alloc.free_large.len()) as u64,
            stats.segments
        );
        prop_assert_eq!(alloc.empty_cache(), reserved);
        prop_assert_eq!(alloc.stats().segments, 0);
        prop_assert_eq!(alloc.source().used, 0);
        alloc.check_invariants();
    }
}
