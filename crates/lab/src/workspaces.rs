//! The library workspaces a GPU run allocates through its caching allocator, and the memory
//! policy a document's counters mirror.
//!
//! PyTorch's `F.linear` on CUDA runs one `cublasLtMatmul` (`gemm_and_bias`), whose first call on a
//! (handle, stream) allocates two workspaces through the caching allocator and keeps them for the
//! process: the cuBLAS workspace (`getCurrentCUDABlasHandle` -> `setWorkspaceForHandle`), then the
//! separate cuBLASLt workspace (`getCUDABlasLtWorkspace`). Their sizes and whether the second is a
//! separate allocation are PyTorch's knobs (`CUBLAS_WORKSPACE_CONFIG`, `CUBLASLT_WORKSPACE_SIZE`,
//! `TORCH_CUBLASLT_UNIFIED_WORKSPACE`); this module holds torch 2.11's defaults and the rules that
//! turn the knobs into allocations, so the pre-flight plan, the CUDA device and the document agree.
//!
//! Source followed: pytorch/pytorch `aten/src/ATen/cuda/CublasHandlePool.cpp` (stored snapshot
//! 26a39059), functions `parseChosenWorkspaceSize` (":4096:2:16:8 default, 32MiB for Hopper",
//! `sm90 = properties->major == 9 && properties->minor == 0`,
//! `default_size = sm90 ? 4096 * 8 * 1024 : 4096 * 1024 * 2 + 16 * 1024 * 8`),
//! `parseCUDABlasLtWorkspaceSize` (`size_t workspace_size = 1024; /* default size in KiB */`,
//! returned `* 1024`), `getCUDABlasLtWorkspaceSize` (a unified workspace larger than the cuBLAS one
//! is cut to the cuBLAS size) and `getCUDABlasLtWorkspace` (`check_env(...) == true` decides
//! unified; otherwise `getCurrentCUDABlasLtHandle()` first — which goes through
//! `getCurrentCUDABlasHandle()` and so allocates the cuBLAS workspace — then
//! `getNewCUDABlasLtWorkspace()`).

use serde::{Deserialize, Serialize};

/// The PyTorch release whose defaults and rules the counters mirror.
pub const MIRRORED_TORCH: &str = "torch 2.11";

/// What the allocator counters mirror, in words.
pub const ALLOCATOR_POLICY: &str = "PyTorch CUDA caching allocator, default configuration \
     (c10/cuda/CUDACachingAllocator.cpp: 512-byte rounding, 1 MiB small/large split, 2 MiB and \
     20 MiB segments, best fit, split and merge rules)";

/// The cuBLAS workspace torch 2.11 allocates on a GPU of compute capability `major.minor`:
/// 32 MiB on exactly 9.0 (Hopper H100/H200), `4096 * 1024 * 2 + 16 * 1024 * 8` = 8,519,680 bytes
/// on every other GPU, 10.x and 12.x included (the source tests `major == 9 && minor == 0`).
pub fn default_cublas_workspace(major: i32, minor: i32) -> u64 {
    if major == 9 && minor == 0 {
        4096 * 8 * 1024
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    }
}

/// torch 2.11's cuBLASLt workspace: 1024 KiB.
pub const DEFAULT_CUBLASLT_WORKSPACE: u64 = 1024 * 1024;

/// The workspaces a device allocates through its allocator on its first product, in this order:
/// the cuBLAS workspace, then (unless unified) the cuBLASLt workspace. A size of 0 allocates
/// nothing (PyTorch's allocator returns a null pointer for 0 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspaces {
    /// The cuBLAS workspace (`CUBLAS_WORKSPACE_CONFIG`).
    pub cublas_bytes: u64,
    /// The cuBLASLt workspace size the matmuls are told (`CUBLASLT_WORKSPACE_SIZE`, cut to
    /// `cublas_bytes` when unified).
    pub cublaslt_bytes: u64,
    /// `TORCH_CUBLASLT_UNIFIED_WORKSPACE`: cuBLASLt uses the cuBLAS workspace instead of its own.
    pub cublaslt_unified: bool,
}

/// One workspace allocation, as the allocation sequence names it.
pub const CUBLAS_WORKSPACE: &str = "cuBLAS workspace";
/// The other one.
pub const CUBLASLT_WORKSPACE: &str = "cuBLASLt workspace";

impl Workspaces {
    /// No library workspace at all (the CPU reference device).
    pub const NONE: Workspaces = Workspaces {
        cublas_bytes: 0,
        cublaslt_bytes: 0,
        cublaslt_unified: false,
    };

    /// Resolves the options against torch 2.11's defaults for a GPU of compute capability
    /// `major.minor`.
    pub fn resolve(options: &WorkspaceOptions, major: i32, minor: i32) -> Workspaces {
        let cublas_bytes = options
            .cublas_bytes
            .unwrap_or_else(|| default_cublas_workspace(major, minor));
        let requested_lt = options.cublaslt_bytes.unwrap_or(DEFAULT_CUBLASLT_WORKSPACE);
        let cublaslt_bytes = if options.unified {
            requested_lt.min(cublas_bytes)
        } else {
            requested_lt
        };
        Workspaces {
            cublas_bytes,
            cublaslt_bytes,
            cublaslt_unified: options.unified,
        }
    }

    /// The allocations of the first product, in PyTorch's order, without zero-byte ones.
    pub fn allocations(&self) -> Vec<(&'static str, u64)> {
        let mut out = Vec::with_capacity(2);
        if self.cublas_bytes > 0 {
            out.push((CUBLAS_WORKSPACE, self.cublas_bytes));
        }
        if !self.cublaslt_unified && self.cublaslt_bytes > 0 {
            out.push((CUBLASLT_WORKSPACE, self.cublaslt_bytes));
        }
        out
    }
}

/// The workspace knobs as the user gave them (`None`: torch 2.11's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkspaceOptions {
    /// `--cublas-workspace`.
    pub cublas_bytes: Option<u64>,
    /// `--cublaslt-workspace`.
    pub cublaslt_bytes: Option<u64>,
    /// `--cublaslt-unified-workspace`.
    pub unified: bool,
}

impl WorkspaceOptions {
    /// True when every knob is at torch 2.11's default.
    pub fn is_default(&self) -> bool {
        *self == WorkspaceOptions::default()
    }
}

/// A workspace size as PyTorch's `CUBLAS_WORKSPACE_CONFIG` writes it: one or more `:SIZE:COUNT`
/// pairs, SIZE in KiB, the total being the sum of SIZE x COUNT (`:4096:8` is 32 MiB).
pub fn parse_cublas_workspace_config(text: &str) -> Option<u64> {
    let rest = text.strip_prefix(':')?;
    let parts: Vec<&str> = rest.split(':').collect();
    if parts.is_empty() || !parts.len().is_multiple_of(2) {
        return None;
    }
    let mut total: u64 = 0;
    for pair in parts.chunks(2) {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(pair[0]) || !digits(pair[1]) {
            return None;
        }
        let kib: u64 = pair[0].parse().ok()?;
        let count: u64 = pair[1].parse().ok()?;
        total = total.checked_add(kib.checked_mul(1024)?.checked_mul(count)?)?;
    }
    Some(total)
}

/// The memory policy a document's counters mirror: the allocator's rules and the library
/// workspaces, so that a comparison with a later PyTorch that changes either stays readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPolicy {
    /// The allocator policy, in words.
    pub allocator: String,
    /// The PyTorch release whose rules and defaults are mirrored.
    pub mirrors: String,
    /// Bytes of the cuBLAS workspace allocated on the first product (0: none).
    pub cublas_workspace_bytes: u64,
    /// Bytes of the cuBLASLt workspace (allocated separately unless unified; 0: none).
    pub cublaslt_workspace_bytes: u64,
    /// Whether cuBLASLt shares the cuBLAS workspace.
    pub cublaslt_workspace_unified: bool,
    /// Where the sizes come from: torch's defaults for a compute capability, options, or no
    /// library at all.
    pub workspaces_from: String,
}

impl Default for MemoryPolicy {
    /// The policy of documents written before it was recorded: the allocator, no workspace known.
    fn default() -> MemoryPolicy {
        MemoryPolicy::new(
            Workspaces::NONE,
            "not recorded (a document from before the policy was recorded)",
        )
    }
}

impl MemoryPolicy {
    /// The policy for these workspaces, `from` saying where their sizes come from.
    pub fn new(w: Workspaces, from: &str) -> MemoryPolicy {
        MemoryPolicy {
            allocator: ALLOCATOR_POLICY.to_string(),
            mirrors: MIRRORED_TORCH.to_string(),
            cublas_workspace_bytes: w.cublas_bytes,
            cublaslt_workspace_bytes: w.cublaslt_bytes,
            cublaslt_workspace_unified: w.cublaslt_unified,
            workspaces_from: from.to_string(),
        }
    }

    /// The policy of a GPU of compute capability `major.minor` under `options`.
    pub fn for_gpu(options: &WorkspaceOptions, major: i32, minor: i32) -> MemoryPolicy {
        let from = if options.is_default() {
            format!("{MIRRORED_TORCH} defaults for compute capability {major}.{minor}")
        } else {
            format!(
                "--cublas-workspace/--cublaslt-workspace/--cublaslt-unified-workspace over \
                 {MIRRORED_TORCH} defaults for compute capability {major}.{minor}"
            )
        };
        MemoryPolicy::new(Workspaces::resolve(options, major, minor), &from)
    }

    /// The workspaces this policy describes.
    pub fn workspaces(&self) -> Workspaces {
        Workspaces {
            cublas_bytes: self.cublas_workspace_bytes,
            cublaslt_bytes: self.cublaslt_workspace_bytes,
            cublaslt_unified: self.cublaslt_workspace_unified,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_32_mib_rule_is_compute_capability_9_0_exactly() {
        assert_eq!(default_cublas_workspace(9, 0), 33_554_432);
        for (major, minor) in [(8, 0), (8, 6), (8, 9), (9, 1), (10, 0), (10, 3), (12, 0)] {
            assert_eq!(
                default_cublas_workspace(major, minor),
                8_519_680,
                "{major}.{minor}"
            );
        }
    }

    #[test]
    fn defaults_are_two_separate_workspaces_in_pytorch_order() {
        let w = Workspaces::resolve(&WorkspaceOptions::default(), 9, 0);
        assert_eq!(
            w.allocations(),
            [
                (CUBLAS_WORKSPACE, 33_554_432),
                (CUBLASLT_WORKSPACE, 1 << 20)
            ]
        );
        assert!(Workspaces::NONE.allocations().is_empty());
    }

    #[test]
    fn unified_uses_the_cublas_workspace_and_caps_the_lt_size() {
        let o = WorkspaceOptions {
            cublas_bytes: Some(512 * 1024),
            cublaslt_bytes: Some(4 << 20),
            unified: true,
        };
        let w = Workspaces::resolve(&o, 8, 0);
        assert_eq!(w.cublaslt_bytes, 512 * 1024);
        assert_eq!(w.allocations(), [(CUBLAS_WORKSPACE, 512 * 1024)]);
        let zero = Workspaces::resolve(
            &WorkspaceOptions {
                cublas_bytes: Some(0),
                cublaslt_bytes: Some(0),
                unified: false,
            },
            9,
            0,
        );
        assert!(zero.allocations().is_empty());
    }

    #[test]
    fn cublas_workspace_config_syntax() {
        assert_eq!(parse_cublas_workspace_config(":4096:8"), Some(33_554_432));
        assert_eq!(
            parse_cublas_workspace_config(":4096:2:16:8"),
            Some(8_519_680)
        );
        for bad in ["4096:8", ":4096", ":a:8", ":4096:8:", "", ":"] {
            assert_eq!(parse_cublas_workspace_config(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_policy_names_its_source() {
        let p = MemoryPolicy::for_gpu(&WorkspaceOptions::default(), 9, 0);
        assert_eq!(p.cublas_workspace_bytes, 33_554_432);
        assert!(
            p.workspaces_from
                .contains("defaults for compute capability 9.0")
        );
        assert_eq!(
            p.workspaces(),
            Workspaces::resolve(&Default::default(), 9, 0)
        );
    }
}
