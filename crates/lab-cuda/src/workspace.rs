//! The cuBLAS workspace PyTorch allocates through its caching allocator on the first product,
//! so our counters show it where and as PyTorch's do.

/// 32 MiB on Hopper (compute capability 9.x), PyTorch's `4096 * 1024 * 2 + 16 * 1024 * 8` bytes
/// (8,519,680) elsewhere.
pub fn workspace_bytes(cc_major: i32) -> u64 {
    if cc_major == 9 {
        32 * 1024 * 1024
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_default_sizes() {
        assert_eq!(workspace_bytes(9), 33_554_432);
        assert_eq!(workspace_bytes(8), 8_519_680);
        assert_eq!(workspace_bytes(10), 8_519_680);
        assert_eq!(workspace_bytes(12), 8_519_680);
    }
}
