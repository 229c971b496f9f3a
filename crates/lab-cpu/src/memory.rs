//! Host segments for the CPU reference device: real buffers, obtained and given back whole, so
//! the allocator's `reserved` is memory this process really holds.

use lab::alloc::{SegmentError, SegmentSource};

/// Hands out zeroed host buffers of whole 8-byte words (every segment size the policy asks for
/// is a multiple of 512 bytes). Any element type up to 8 bytes can be viewed inside them.
#[derive(Debug, Default)]
pub struct HostSegments {
    limit: Option<u64>,
    held: u64,
}

impl HostSegments {
    /// A source bounded only by what the OS grants.
    pub fn new() -> HostSegments {
        HostSegments::default()
    }

    /// A source that refuses to hold more than `limit` bytes in segments, as a GPU of that size
    /// would: used to exercise the out-of-memory path with real arithmetic.
    pub fn with_limit(limit: u64) -> HostSegments {
        HostSegments {
            limit: Some(limit),
            held: 0,
        }
    }
}

impl HostSegments {
    /// Bytes held in segments now.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Changes the limit (segments already held stay).
    pub fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
    }
}

impl SegmentSource for HostSegments {
    type Segment = Vec<u64>;

    fn allocate(&mut self, bytes: u64) -> Result<Vec<u64>, SegmentError> {
        let oom = SegmentError::OutOfMemory { requested: bytes };
        if self.limit.is_some_and(|limit| self.held + bytes > limit) {
            return Err(oom);
        }
        let words = usize::try_from(bytes.div_ceil(8)).map_err(|_| oom.clone())?;
        let mut segment = Vec::new();
        segment.try_reserve_exact(words).map_err(|_| oom)?;
        segment.resize(words, 0);
        self.held += bytes;
        Ok(segment)
    }

    fn release(&mut self, segment: Vec<u64>) {
        self.held -= segment.len() as u64 * 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_enforced_and_released() {
        let mut s = HostSegments::with_limit(4 << 20);
        let a = s.allocate(2 << 20).unwrap();
        assert_eq!(a.len() * 8, 2 << 20);
        let _b = s.allocate(2 << 20).unwrap();
        assert!(matches!(
            s.allocate(512),
            Err(SegmentError::OutOfMemory { requested: 512 })
        ));
        s.release(a);
        assert!(s.allocate(512).is_ok());
    }
}
