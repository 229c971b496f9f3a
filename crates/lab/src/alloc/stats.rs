//! The allocator's counters: current values and peaks since the last reset, per pool and in total.

use serde::{Deserialize, Serialize};

/// A current value and its maximum since the last peak reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Bytes now.
    pub current: u64,
    /// Highest `current` since the last reset.
    pub peak: u64,
}

impl Counter {
    /// Adds `bytes`, raising the peak if needed.
    pub fn increase(&mut self, bytes: u64) {
        self.current += bytes;
        self.peak = self.peak.max(self.current);
    }

    /// Removes `bytes`; the peak keeps its value.
    pub fn decrease(&mut self, bytes: u64) {
        debug_assert!(bytes <= self.current, "counter would go negative");
        self.current -= bytes;
    }

    /// Sets the peak to the current value, as `reset_peak_memory_stats` does.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

/// The three byte counters PyTorch keeps for one pool (or for all pools together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Bytes in live blocks, each rounded as the allocator rounds it (a whole unsplit block).
    pub allocated: Counter,
    /// Bytes held in segments obtained from the source.
    pub reserved: Counter,
    /// Bytes callers asked for, before rounding.
    pub requested: Counter,
}

impl PoolStats {
    fn reset_peaks(&mut self) {
        self.allocated.reset_peak();
        self.reserved.reset_peak();
        self.requested.reset_peak();
    }
}

/// A snapshot of every counter of the allocator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Both pools together (what `torch.cuda.memory_allocated()` and friends report).
    pub all: PoolStats,
    /// Requests of at most 1 MiB, served from 2 MiB segments.
    pub small: PoolStats,
    /// Larger requests.
    pub large: PoolStats,
    /// Segments now held.
    pub segments: u64,
    /// Times the allocator released cached segments and retried after the source failed.
    pub alloc_retries: u64,
    /// Requests that failed even after the retry.
    pub ooms: u64,
}

impl Stats {
    /// Sets every peak to its current value; nothing else changes.
    pub fn reset_peaks(&mut self) {
        self.all.reset_peaks();
        self.small.reset_peaks();
        self.large.reset_peaks();
    }
}
