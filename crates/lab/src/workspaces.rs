//! The library workspaces a GPU run allocates through its caching allocator, the path each
//! Linear takes through cuBLAS, and the memory policy a document's counters mirror.
//!
//! PyTorch's `F.linear` on CUDA is `addmm(b, x, W.t())`, and torch 2.11's `addmm_out_cuda_impl`
//! (aten/src/ATen/native/cuda/Blas.cpp) runs it one of two ways ([`AddmmPath`]):
//!
//! - the cuBLASLt path, when `isGloballyDisabledAddmmCudaLt` is false and
//!   `isInputCompliesAddmmCudaLt` holds ([`AddmmCall::complies_with_lt`]): one `cublasLtMatmul`
//!   with the bias epilogue (`launchGemmAndBiasCublasLt` -> `gemm_and_bias`), whose first call on
//!   a (handle, stream) allocates the cuBLAS workspace (`getCurrentCUDABlasLtHandle` ->
//!   `getCurrentCUDABlasHandle` -> `setWorkspaceForHandle`) and then, unless unified, the separate
//!   cuBLASLt workspace (`getCUDABlasLtWorkspace` -> `getNewCUDABlasLtWorkspace`);
//! - otherwise the bias copied (broadcast) into the output (`at::native::copy_(result,
//!   expand_size(self, ...))`), then `launchGemmCublas` -> `at::cuda::blas::gemm` with beta = 1,
//!   which goes through `getCurrentCUDABlasHandle` only: the cuBLAS workspace is allocated on the
//!   first product through the handle, and **no** cuBLASLt workspace.
//!
//! Both workspaces are kept for the process. Their sizes and whether the second is a separate
//! allocation are PyTorch's knobs (`CUBLAS_WORKSPACE_CONFIG`, `CUBLASLT_WORKSPACE_SIZE`,
//! `TORCH_CUBLASLT_UNIFIED_WORKSPACE`, and `DISABLE_ADDMM_CUDA_LT` for the path); this module
//! holds torch 2.11's defaults and the rules that turn the knobs into allocations, so that the
//! pre-flight plan, the CUDA device and the document agree.
//!
//! Sources followed: pytorch/pytorch `aten/src/ATen/cuda/CublasHandlePool.cpp` (stored snapshot
//! 26a39059) and the torch 2.11.0+cu130 binary (`libtorch_cuda.so`, disassembled in
//! `notes/gpu-first-run-review.md`): `parseChosenWorkspaceSize` (":4096:2:16:8 default, 32MiB for
//! Hopper", `sm90 = properties->major == 9 && properties->minor == 0`,
//! `default_size = sm90 ? 4096 * 8 * 1024 : 4096 * 1024 * 2 + 16 * 1024 * 8`),
//! `parseCUDABlasLtWorkspaceSize` (`size_t workspace_size = 1024; /* default size in KiB */`,
//! returned `* 1024`), `getCUDABlasLtWorkspaceSize` (unified for *sizing* when
//! `check_env("TORCH_CUBLASLT_UNIFIED_WORKSPACE")` has no value or is true: the size is cut to the
//! cuBLAS size) and `getCUDABlasLtWorkspace` (unified for *allocation* only when it is true;
//! otherwise the cuBLAS workspace first, then a separate block). See [`UnifiedWorkspace`].
//! The path: Blas.cpp's `isGloballyDisabledAddmmCudaLt`, `isInputCompliesAddmmCudaLt` and
//! `addmm_out_cuda_impl` (the stored snapshot with `launchGemmAndBiasCublasLt` and
//! `launchGemmCublas`, CUDA >= 12.1, not ROCm), and Linear.cpp's `_flatten_nd_linear`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;

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

/// `TORCH_CUBLASLT_UNIFIED_WORKSPACE` as torch 2.11 reads it: `c10::utils::check_env` gives true
/// for `1`, false for `0`, and no value when the variable is unset (or holds anything else, which
/// it warns about and ignores). torch 2.11 reads that one value two ways:
///
/// | state | `getCUDABlasLtWorkspaceSize` (size) | `getCUDABlasLtWorkspace` (allocation) |
/// | --- | --- | --- |
/// | unset (the default) | `!has_value \|\| value`: capped at the cuBLAS size | `has_value && value`: a separate block |
/// | `1` | capped | the cuBLAS workspace itself (nothing allocated) |
/// | `0` | not capped | a separate block |
///
/// With the default sizes the cap changes nothing (1 MiB is below both cuBLAS sizes); it shows
/// when the cuBLAS workspace is made smaller than the cuBLASLt one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnifiedWorkspace {
    /// The variable is not set: capped and separate.
    #[default]
    #[serde(rename = "unset")]
    Unset,
    /// `TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`: capped and shared with cuBLAS.
    #[serde(rename = "1")]
    Unified,
    /// `TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`: not capped, separate.
    #[serde(rename = "0")]
    Separate,
}

impl UnifiedWorkspace {
    /// The value as `check_env` reads it: `Some(true)` for `1`, `Some(false)` for `0`, `None`
    /// when unset.
    pub fn check_env(self) -> Option<bool> {
        match self {
            UnifiedWorkspace::Unset => None,
            UnifiedWorkspace::Unified => Some(true),
            UnifiedWorkspace::Separate => Some(false),
        }
    }

    /// `getCUDABlasLtWorkspaceSize`: the cuBLASLt size is cut to the cuBLAS size unless the
    /// variable is explicitly `0` (`!unified.has_value() || unified.value()`).
    pub fn caps_size(self) -> bool {
        self.check_env() != Some(false)
    }

    /// `getCUDABlasLtWorkspace`: cuBLASLt uses the cuBLAS workspace only when the variable is
    /// explicitly `1` (`check_env(...) == true`).
    pub fn shares_cublas_workspace(self) -> bool {
        self.check_env() == Some(true)
    }

    /// The value as the variable would hold it (`unset`, `1`, `0`).
    pub fn as_str(self) -> &'static str {
        match self {
            UnifiedWorkspace::Unset => "unset",
            UnifiedWorkspace::Unified => "1",
            UnifiedWorkspace::Separate => "0",
        }
    }
}

impl fmt::Display for UnifiedWorkspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for UnifiedWorkspace {
    type Err = String;

    /// `1` or `0`, the two values `check_env` accepts (`unset` for no value).
    fn from_str(s: &str) -> Result<UnifiedWorkspace, String> {
        match s {
            "1" => Ok(UnifiedWorkspace::Unified),
            "0" => Ok(UnifiedWorkspace::Separate),
            "unset" => Ok(UnifiedWorkspace::Unset),
            other => Err(format!(
                "`{other}` is not a TORCH_CUBLASLT_UNIFIED_WORKSPACE value: use 1 (unified) or 0 \
                 (separate and not capped), or leave the option out (torch 2.11's default: \
                 separate, capped at the cuBLAS workspace)"
            )),
        }
    }
}

// ---- The path of one `addmm` (Blas.cpp) ----

/// A strided tensor as c10 describes it: sizes and strides, in elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorLayout {
    /// Sizes, outermost first.
    pub sizes: Vec<usize>,
    /// Strides, in elements.
    pub strides: Vec<usize>,
}

impl TensorLayout {
    /// A new contiguous tensor (`at::empty`): the innermost stride 1, each outer one the product
    /// of the sizes inside it (`c10::contiguous_strides`, sizes of 0 counted as 1).
    pub fn contiguous(sizes: &[usize]) -> TensorLayout {
        let mut strides = vec![0; sizes.len()];
        let mut z = 1usize;
        for d in (0..sizes.len()).rev() {
            strides[d] = z;
            z = z.saturating_mul(sizes[d].max(1));
        }
        TensorLayout {
            sizes: sizes.to_vec(),
            strides,
        }
    }

    /// Dimensions.
    pub fn dim(&self) -> usize {
        self.sizes.len()
    }

    /// `Tensor::t()` of a 2-D tensor: sizes and strides swapped (a view).
    pub fn t(&self) -> TensorLayout {
        let mut out = self.clone();
        out.sizes.reverse();
        out.strides.reverse();
        out
    }

    /// `is_contiguous()` (c10 `compute_contiguous`): walking from the innermost dimension, every
    /// dimension whose size is not 1 has the stride of the elements inside it; an empty tensor is
    /// contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.sizes.contains(&0) {
            return true;
        }
        let mut z = 1usize;
        for d in (0..self.dim()).rev() {
            if self.sizes[d] != 1 {
                if self.strides[d] != z {
                    return false;
                }
                z = z.saturating_mul(self.sizes[d]);
            }
        }
        true
    }

    /// `squeeze().dim()`: the dimensions whose size is not 1.
    pub fn squeezed_dim(&self) -> usize {
        self.sizes.iter().filter(|&&s| s != 1).count()
    }
}

/// `at::is_expandable_to(shape, desired)`: every trailing size equals the target or is 1.
pub fn is_expandable_to(shape: &[usize], desired: &[usize]) -> bool {
    if shape.len() > desired.len() {
        return false;
    }
    shape
        .iter()
        .rev()
        .zip(desired.iter().rev())
        .all(|(&size, &target)| size == target || size == 1)
}

/// The scalar types `isInputCompliesAddmmCudaLt` distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarType {
    /// `at::kDouble`.
    Double,
    /// `at::kFloat`.
    Float,
    /// `at::kHalf`.
    Half,
    /// `at::kBFloat16`.
    BFloat16,
    /// Anything else (integers, complex, FP8).
    Other,
}

impl From<DType> for ScalarType {
    fn from(d: DType) -> ScalarType {
        match d {
            DType::Float32 => ScalarType::Float,
            DType::Float16 => ScalarType::Half,
            DType::Bfloat16 => ScalarType::BFloat16,
        }
    }
}

/// One `addmm_out_cuda_impl(result, self, mat1, mat2, beta, alpha, activation)` call, as far as
/// the choice of path depends on it.
#[derive(Debug, Clone, PartialEq)]
pub struct AddmmCall {
    /// The output.
    pub result: TensorLayout,
    /// `self`: the bias (or the matrix) added.
    pub bias: TensorLayout,
    /// `result.is_same(self)` (an in-place `addmm_`).
    pub bias_is_result: bool,
    /// The left factor.
    pub mat1: TensorLayout,
    /// The right factor.
    pub mat2: TensorLayout,
    /// `beta`.
    pub beta: f64,
    /// `mat1.scalar_type()`.
    pub scalar_type: ScalarType,
    /// An activation is fused (`_addmm_activation`); never for `F.linear`.
    pub activation: bool,
}

/// Why `isInputCompliesAddmmCudaLt` (or `isGloballyDisabledAddmmCudaLt`) keeps a call off the
/// cuBLASLt path: the first clause, in the source's order, that fails.
#[derive(Debug, Clone, PartialEq)]
pub enum LtRefusal {
    /// `DISABLE_ADDMM_CUDA_LT=1`.
    Disabled,
    /// `result.is_same(self)`.
    InPlace,
    /// `beta != 1`.
    Beta(f64),
    /// The result is not 2-D contiguous.
    Result,
    /// `self` is neither a contiguous (squeezable to) 1-D bias of `mat2`'s columns nor, with an
    /// activation, a 2-D matrix expandable to the result.
    Bias,
    /// Not double, float, half or bfloat16.
    ScalarType,
    /// A dimension of `mat1` or `mat2` is 1 (or 0): "Strangely, if mat2 has only 1 row or
    /// column, we get CUBLAS_STATUS_INVALID_VALUE error from cublasLtMatmulAlgoGetHeuristic".
    UnitDimension {
        /// `mat1.sizes()`.
        mat1: [usize; 2],
        /// `mat2.sizes()`.
        mat2: [usize; 2],
    },
}

impl fmt::Display for LtRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LtRefusal::Disabled => f.write_str("DISABLE_ADDMM_CUDA_LT=1"),
            LtRefusal::InPlace => f.write_str("the result is the added matrix (in place)"),
            LtRefusal::Beta(b) => write!(f, "beta is {b}, not 1"),
            LtRefusal::Result => f.write_str("the result is not 2-D contiguous"),
            LtRefusal::Bias => {
                f.write_str("the added tensor is not a contiguous 1-D bias of mat2's columns")
            }
            LtRefusal::ScalarType => {
                f.write_str("the dtype is not float64, float32, float16 or bfloat16")
            }
            LtRefusal::UnitDimension { mat1, mat2 } => write!(
                f,
                "mat1 [{}, {}] or mat2 [{}, {}] has a dimension of 1, and the cuBLASLt path needs \
                 every dimension above 1",
                mat1[0], mat1[1], mat2[0], mat2[1]
            ),
        }
    }
}

impl AddmmCall {
    /// `F.linear(x, W, b)` for `x` with `rows` rows (a contiguous `[batch, context, in_f]` viewed
    /// as `[rows, in_f]` by `_flatten_nd_linear`), `W` `[out_f, in_f]` and a contiguous 1-D `b` of
    /// `out_f`: `addmm(b, x2d, W.t())` into a new contiguous `[rows, out_f]`, beta = alpha = 1.
    pub fn linear(rows: usize, in_f: usize, out_f: usize, dtype: DType) -> AddmmCall {
        AddmmCall {
            result: TensorLayout::contiguous(&[rows, out_f]),
            bias: TensorLayout::contiguous(&[out_f]),
            bias_is_result: false,
            mat1: TensorLayout::contiguous(&[rows, in_f]),
            mat2: TensorLayout::contiguous(&[out_f, in_f]).t(),
            beta: 1.0,
            scalar_type: dtype.into(),
            activation: false,
        }
    }

    /// `isInputCompliesAddmmCudaLt` on CUDA 12.1 and newer (not ROCm): `Ok` when the call may take
    /// the cuBLASLt path, else the first clause that fails.
    pub fn complies_with_lt(&self) -> Result<(), LtRefusal> {
        if self.bias_is_result {
            return Err(LtRefusal::InPlace);
        }
        let (m1, m2) = (&self.mat1.sizes, &self.mat2.sizes);
        if self.beta != 1.0 {
            return Err(LtRefusal::Beta(self.beta));
        }
        if !(self.result.dim() == 2 && self.result.is_contiguous()) {
            return Err(LtRefusal::Result);
        }
        let b = &self.bias;
        // Conditions for the bias to be fusable ("fine to have 1-len dims to the left from the
        // right-most one"), or a 2-D bias with a fused activation.
        let fusable = b.is_contiguous()
            && (b.dim() == 1 || b.squeezed_dim() == 1)
            && b.sizes.last() == m2.get(1);
        let two_d = self.activation
            && b.dim() == 2
            && is_expandable_to(
                &b.sizes,
                &[
                    m1.first().copied().unwrap_or(0),
                    m2.get(1).copied().unwrap_or(0),
                ],
            );
        if !(fusable || two_d) {
            return Err(LtRefusal::Bias);
        }
        if self.scalar_type == ScalarType::Other {
            return Err(LtRefusal::ScalarType);
        }
        let dims = |s: &[usize]| {
            [
                s.first().copied().unwrap_or(0),
                s.get(1).copied().unwrap_or(0),
            ]
        };
        let (d1, d2) = (dims(m1), dims(m2));
        if !(d1[0] > 1 && d1[1] > 1 && d2[0] > 1 && d2[1] > 1) {
            return Err(LtRefusal::UnitDimension { mat1: d1, mat2: d2 });
        }
        Ok(())
    }

    /// The path `addmm_out_cuda_impl` takes: the cuBLASLt one unless `DISABLE_ADDMM_CUDA_LT=1`
    /// (`lt_disabled`, `isGloballyDisabledAddmmCudaLt`) or the call does not comply.
    pub fn path(&self, lt_disabled: bool) -> Result<AddmmPath, LtRefusal> {
        if lt_disabled {
            return Err(LtRefusal::Disabled);
        }
        self.complies_with_lt().map(|()| AddmmPath::CublasLt)
    }
}

/// `isGloballyDisabledAddmmCudaLt` on CUDA: `DISABLE_ADDMM_CUDA_LT` holds exactly `1`.
pub fn addmm_cuda_lt_disabled(value: Option<&str>) -> bool {
    value == Some("1")
}

/// The two ways torch 2.11's `addmm_out_cuda_impl` runs a product with a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AddmmPath {
    /// One `cublasLtMatmul` with `CUBLASLT_EPILOGUE_BIAS` (`gemm_and_bias`); uses the cuBLASLt
    /// workspace.
    #[serde(rename = "cublaslt_bias_epilogue")]
    CublasLt,
    /// The bias copied (broadcast) into the output, then `cublasGemmEx` with beta = 1
    /// (`at::cuda::blas::gemm`); no cuBLASLt workspace.
    #[serde(rename = "bias_copy_then_cublas_gemm")]
    Cublas,
}

impl AddmmPath {
    /// The path in words.
    pub fn describe(self) -> &'static str {
        match self {
            AddmmPath::CublasLt => "cublasLtMatmul with the bias epilogue",
            AddmmPath::Cublas => "bias copied into the output, then cublasGemmEx with beta = 1",
        }
    }
}

/// Which path one Linear of the model takes, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinearPath {
    /// The layer (`linear1`, `linear2`).
    pub layer: String,
    /// The path.
    pub path: AddmmPath,
    /// Why, in words: the predicate that held, or the clause that failed.
    pub reason: String,
}

impl LinearPath {
    /// The path `F.linear` takes for `x[rows, in_f] · W[out_f, in_f]ᵀ + b` in `dtype`.
    pub fn of(
        layer: &str,
        rows: usize,
        in_f: usize,
        out_f: usize,
        dtype: DType,
        lt_disabled: bool,
    ) -> LinearPath {
        let (path, reason) = match AddmmCall::linear(rows, in_f, out_f, dtype).path(lt_disabled) {
            Ok(p) => (
                p,
                format!(
                    "isInputCompliesAddmmCudaLt holds (beta 1, result 2-D contiguous, 1-D \
                     contiguous bias of {out_f}, {dtype}, mat1 [{rows}, {in_f}] and mat2 \
                     [{in_f}, {out_f}] above 1 in every dimension) and DISABLE_ADDMM_CUDA_LT is \
                     unset"
                ),
            ),
            Err(why) => (AddmmPath::Cublas, why.to_string()),
        };
        LinearPath {
            layer: layer.to_string(),
            path,
            reason,
        }
    }
}

// ---- The workspaces ----

/// The library workspaces as resolved: what the first product through the cuBLAS handle allocates
/// (the cuBLAS workspace, on either path), and what the first cuBLASLt product allocates after it
/// (the cuBLASLt workspace, unless unified). A size of 0 allocates nothing (PyTorch's allocator
/// returns a null pointer for 0 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspaces {
    /// The cuBLAS workspace (`CUBLAS_WORKSPACE_CONFIG`).
    pub cublas_bytes: u64,
    /// The cuBLASLt workspace size the matmuls are told (`CUBLASLT_WORKSPACE_SIZE`, cut to
    /// `cublas_bytes` unless `TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`).
    pub cublaslt_bytes: u64,
    /// `TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`: cuBLASLt uses the cuBLAS workspace instead of its own.
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
    /// `major.minor`, with the capping rule of `getCUDABlasLtWorkspaceSize` and the sharing rule
    /// of `getCUDABlasLtWorkspace` ([`UnifiedWorkspace`]).
    pub fn resolve(options: &WorkspaceOptions, major: i32, minor: i32) -> Workspaces {
        let cublas_bytes = options
            .cublas_bytes
            .unwrap_or_else(|| default_cublas_workspace(major, minor));
        let requested_lt = options.cublaslt_bytes.unwrap_or(DEFAULT_CUBLASLT_WORKSPACE);
        let cublaslt_bytes = if options.unified.caps_size() {
            requested_lt.min(cublas_bytes)
        } else {
            requested_lt
        };
        Workspaces {
            cublas_bytes,
            cublaslt_bytes,
            cublaslt_unified: options.unified.shares_cublas_workspace(),
        }
    }

    /// What the first product through the cuBLAS handle allocates, on either path
    /// (`setWorkspaceForHandle`): the cuBLAS workspace, unless it is 0 bytes.
    pub fn handle_allocation(&self) -> Option<(&'static str, u64)> {
        (self.cublas_bytes > 0).then_some((CUBLAS_WORKSPACE, self.cublas_bytes))
    }

    /// What the first cuBLASLt product allocates after the handle's workspace
    /// (`getNewCUDABlasLtWorkspace`): the cuBLASLt workspace, unless unified or 0 bytes.
    pub fn lt_allocation(&self) -> Option<(&'static str, u64)> {
        (!self.cublaslt_unified && self.cublaslt_bytes > 0)
            .then_some((CUBLASLT_WORKSPACE, self.cublaslt_bytes))
    }

    /// The allocations of a first product on the cuBLASLt path, in PyTorch's order, without
    /// zero-byte ones: [`Workspaces::handle_allocation`], then [`Workspaces::lt_allocation`].
    pub fn allocations(&self) -> Vec<(&'static str, u64)> {
        self.handle_allocation()
            .into_iter()
            .chain(self.lt_allocation())
            .collect()
    }
}

/// The workspace and path knobs as the user gave them (`None` or unset: torch 2.11's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkspaceOptions {
    /// `--cublas-workspace` (`CUBLAS_WORKSPACE_CONFIG`).
    pub cublas_bytes: Option<u64>,
    /// `--cublaslt-workspace` (`CUBLASLT_WORKSPACE_SIZE`, in bytes).
    pub cublaslt_bytes: Option<u64>,
    /// `--cublaslt-unified-workspace[=1|0]` (`TORCH_CUBLASLT_UNIFIED_WORKSPACE`).
    pub unified: UnifiedWorkspace,
    /// `DISABLE_ADDMM_CUDA_LT=1`: every Linear off the cuBLASLt path.
    pub addmm_cuda_lt_disabled: bool,
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

// ---- The policy a document records ----

/// The memory policy a document's counters mirror: the allocator's rules, the library
/// workspaces and the path of each Linear, so that a comparison with a later PyTorch that changes
/// any of them stays readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPolicy {
    /// The allocator policy, in words.
    pub allocator: String,
    /// The PyTorch release whose rules and defaults are mirrored.
    pub mirrors: String,
    /// Bytes of the cuBLAS workspace, allocated on the first product through the cuBLAS handle
    /// (either path; 0: none).
    pub cublas_workspace_bytes: u64,
    /// Bytes of the cuBLASLt workspace the matmuls are told, allocated separately on the first
    /// cuBLASLt product unless unified (0: none; never allocated when no Linear takes the
    /// cuBLASLt path).
    pub cublaslt_workspace_bytes: u64,
    /// Whether cuBLASLt shares the cuBLAS workspace (`TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`).
    pub cublaslt_workspace_unified: bool,
    /// Where the sizes come from: torch's defaults for a compute capability, options, or no
    /// library at all.
    pub workspaces_from: String,
    /// `TORCH_CUBLASLT_UNIFIED_WORKSPACE` as mirrored: `unset` (capped, separate), `1` (capped,
    /// shared) or `0` (not capped, separate).
    #[serde(default)]
    pub torch_cublaslt_unified_workspace: UnifiedWorkspace,
    /// `DISABLE_ADDMM_CUDA_LT=1` mirrored (every Linear off the cuBLASLt path); `None` for a
    /// device without cuBLAS.
    #[serde(default)]
    pub disable_addmm_cuda_lt: Option<bool>,
    /// The path each Linear of the model takes, in model order (empty for a device without
    /// cuBLAS, and in [`crate::device::Device::memory_policy`], which knows no shape: the
    /// document's configuration fills it in with [`MemoryPolicy::with_linear_paths`]).
    #[serde(default)]
    pub linear_paths: Vec<LinearPath>,
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
    /// The policy of a device without cuBLAS and these workspaces, `from` saying where their
    /// sizes come from.
    pub fn new(w: Workspaces, from: &str) -> MemoryPolicy {
        MemoryPolicy {
            allocator: ALLOCATOR_POLICY.to_string(),
            mirrors: MIRRORED_TORCH.to_string(),
            cublas_workspace_bytes: w.cublas_bytes,
            cublaslt_workspace_bytes: w.cublaslt_bytes,
            cublaslt_workspace_unified: w.cublaslt_unified,
            workspaces_from: from.to_string(),
            torch_cublaslt_unified_workspace: UnifiedWorkspace::Unset,
            disable_addmm_cuda_lt: None,
            linear_paths: Vec::new(),
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
        MemoryPolicy {
            torch_cublaslt_unified_workspace: options.unified,
            disable_addmm_cuda_lt: Some(options.addmm_cuda_lt_disabled),
            ..MemoryPolicy::new(Workspaces::resolve(options, major, minor), &from)
        }
    }

    /// The workspaces this policy describes.
    pub fn workspaces(&self) -> Workspaces {
        Workspaces {
            cublas_bytes: self.cublas_workspace_bytes,
            cublaslt_bytes: self.cublaslt_workspace_bytes,
            cublaslt_unified: self.cublaslt_workspace_unified,
        }
    }

    /// The path a product `x[rows, in_f] · W[out_f, in_f]ᵀ + b` takes on this device, or `None`
    /// for a device without cuBLAS.
    pub fn linear_path(
        &self,
        rows: usize,
        in_f: usize,
        out_f: usize,
        dtype: DType,
    ) -> Option<AddmmPath> {
        let disabled = self.disable_addmm_cuda_lt?;
        Some(
            AddmmCall::linear(rows, in_f, out_f, dtype)
                .path(disabled)
                .unwrap_or(AddmmPath::Cublas),
        )
    }

    /// This policy with [`MemoryPolicy::linear_paths`] filled in for `layers` (name, rows,
    /// in_features, out_features) in `dtype`; unchanged for a device without cuBLAS.
    pub fn with_linear_paths(
        mut self,
        layers: &[(&str, usize, usize, usize)],
        dtype: DType,
    ) -> MemoryPolicy {
        self.linear_paths = match self.disable_addmm_cuda_lt {
            None => Vec::new(),
            Some(disabled) => layers
                .iter()
                .map(|&(name, rows, i, o)| LinearPath::of(name, rows, i, o, dtype, disabled))
                .collect(),
        };
        self
    }

    /// Whether some Linear of [`MemoryPolicy::linear_paths`] takes the cuBLASLt path, so that the
    /// run allocates the cuBLASLt workspace (when it is separate).
    pub fn uses_cublaslt(&self) -> bool {
        self.linear_paths
            .iter()
            .any(|l| l.path == AddmmPath::CublasLt)
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
        assert_eq!(w.handle_allocation(), Some((CUBLAS_WORKSPACE, 33_554_432)));
        assert_eq!(w.lt_allocation(), Some((CUBLASLT_WORKSPACE, 1 << 20)));
        assert!(Workspaces::NONE.allocations().is_empty());
    }

    fn with(cublas: u64, lt: u64, unified: UnifiedWorkspace) -> Workspaces {
        Workspaces::resolve(
            &WorkspaceOptions {
                cublas_bytes: Some(cublas),
                cublaslt_bytes: Some(lt),
                unified,
                addmm_cuda_lt_disabled: false,
            },
            8,
            0,
        )
    }

    /// torch 2.11.0: unset caps the size (getCUDABlasLtWorkspaceSize) but allocates separately
    /// (getCUDABlasLtWorkspace); 1 caps and shares; 0 neither caps nor shares.
    #[test]
    fn the_three_states_of_torch_cublaslt_unified_workspace() {
        let (small, big) = (512 * 1024, 4 << 20);
        let unset = with(small, big, UnifiedWorkspace::Unset);
        assert_eq!(unset.cublaslt_bytes, small, "unset: capped");
        assert_eq!(
            unset.allocations(),
            [(CUBLAS_WORKSPACE, small), (CUBLASLT_WORKSPACE, small)],
            "unset: a separate block"
        );
        let unified = with(small, big, UnifiedWorkspace::Unified);
        assert_eq!(unified.cublaslt_bytes, small, "1: capped");
        assert_eq!(
            unified.allocations(),
            [(CUBLAS_WORKSPACE, small)],
            "1: shared"
        );
        let separate = with(small, big, UnifiedWorkspace::Separate);
        assert_eq!(separate.cublaslt_bytes, big, "0: not capped");
        assert_eq!(
            separate.allocations(),
            [(CUBLAS_WORKSPACE, small), (CUBLASLT_WORKSPACE, big)]
        );
        // A cuBLAS workspace of 0 caps the unset cuBLASLt one to nothing.
        assert!(
            with(0, big, UnifiedWorkspace::Unset)
                .allocations()
                .is_empty()
        );
        assert_eq!(
            with(0, big, UnifiedWorkspace::Separate).allocations(),
            [(CUBLASLT_WORKSPACE, big)]
        );
        // Below the cuBLAS size nothing is capped, whatever the state.
        for u in [
            UnifiedWorkspace::Unset,
            UnifiedWorkspace::Unified,
            UnifiedWorkspace::Separate,
        ] {
            assert_eq!(with(big, small, u).cublaslt_bytes, small, "{u}");
            assert_eq!(u.as_str().parse::<UnifiedWorkspace>(), Ok(u));
        }
        assert!("true".parse::<UnifiedWorkspace>().is_err());
        assert_eq!(
            serde_json::to_value(UnifiedWorkspace::Separate).unwrap(),
            "0"
        );
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
        assert_eq!(p.disable_addmm_cuda_lt, Some(false));
        assert_eq!(MemoryPolicy::default().disable_addmm_cuda_lt, None);
    }

    #[test]
    fn layouts_are_c10s() {
        let x = TensorLayout::contiguous(&[16, 64]);
        assert_eq!(x.strides, [64, 1]);
        assert!(x.is_contiguous());
        let wt = TensorLayout::contiguous(&[256, 64]).t();
        assert_eq!(
            (wt.sizes.as_slice(), wt.strides.as_slice()),
            (&[64, 256][..], &[1, 64][..])
        );
        assert!(!wt.is_contiguous());
        // A transposed weight with one row or one column is contiguous: size-1 dimensions do not
        // count.
        assert!(TensorLayout::contiguous(&[1, 64]).t().is_contiguous());
        assert!(TensorLayout::contiguous(&[4, 1]).t().is_contiguous());
        assert_eq!(TensorLayout::contiguous(&[1, 1, 8]).squeezed_dim(), 1);
        assert!(is_expandable_to(&[1, 8], &[4, 8]));
        assert!(!is_expandable_to(&[2, 8], &[4, 8]));
        assert!(!is_expandable_to(&[1, 1, 8], &[4, 8]));
    }

    #[test]
    fn every_dimension_of_the_factors_must_exceed_1_for_cublaslt() {
        let path = |rows, i, o| AddmmCall::linear(rows, i, o, DType::Float32).path(false);
        assert_eq!(path(16, 64, 256), Ok(AddmmPath::CublasLt));
        assert_eq!(path(2, 2, 2), Ok(AddmmPath::CublasLt));
        for (rows, i, o) in [(1, 64, 256), (16, 1, 4), (16, 4, 1), (1, 1, 1)] {
            match path(rows, i, o) {
                Err(LtRefusal::UnitDimension { mat1, mat2 }) => {
                    assert_eq!((mat1, mat2), ([rows, i], [i, o]));
                }
                other => panic!("{rows}x{i}x{o}: {other:?}"),
            }
        }
        assert_eq!(
            AddmmCall::linear(16, 64, 256, DType::Bfloat16).path(true),
            Err(LtRefusal::Disabled)
        );
        assert!(addmm_cuda_lt_disabled(Some("1")));
        for v in [None, Some("0"), Some("true"), Some("")] {
            assert!(!addmm_cuda_lt_disabled(v), "{v:?}");
        }
    }

    #[test]
    fn each_clause_of_the_predicate_refuses() {
        let ok = AddmmCall::linear(8, 8, 8, DType::Float16);
        assert_eq!(ok.complies_with_lt(), Ok(()));
        let mut c = ok.clone();
        c.beta = 0.0;
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::Beta(0.0)));
        let mut c = ok.clone();
        c.bias_is_result = true;
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::InPlace));
        let mut c = ok.clone();
        c.result = c.result.t();
        c.result.sizes = vec![8, 8];
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::Result));
        let mut c = ok.clone();
        c.bias = TensorLayout::contiguous(&[4]);
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::Bias));
        // A [1, 8] bias squeezes to 1-D and is fusable; a 2-D [8, 8] one only with an activation.
        let mut c = ok.clone();
        c.bias = TensorLayout::contiguous(&[1, 8]);
        assert_eq!(c.complies_with_lt(), Ok(()));
        c.bias = TensorLayout::contiguous(&[8, 8]);
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::Bias));
        c.activation = true;
        assert_eq!(c.complies_with_lt(), Ok(()));
        let mut c = ok.clone();
        c.bias.strides = vec![2];
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::Bias));
        let mut c = ok;
        c.scalar_type = ScalarType::Other;
        assert_eq!(c.complies_with_lt(), Err(LtRefusal::ScalarType));
    }

    #[test]
    fn the_policy_says_which_path_each_linear_takes() {
        let layers = |rows, w: usize| [("linear1", rows, w, 4 * w), ("linear2", rows, 4 * w, w)];
        let gpu = MemoryPolicy::for_gpu(&WorkspaceOptions::default(), 9, 0);
        let p = gpu
            .clone()
            .with_linear_paths(&layers(16, 64), DType::Float32);
        assert_eq!(p.linear_paths.len(), 2);
        assert!(p.linear_paths.iter().all(|l| l.path == AddmmPath::CublasLt));
        assert!(p.uses_cublaslt());
        let one = gpu
            .clone()
            .with_linear_paths(&layers(1, 64), DType::Float32);
        assert!(!one.uses_cublaslt());
        assert_eq!(one.linear_paths[0].layer, "linear1");
        assert!(
            one.linear_paths[1].reason.contains("mat1 [1, 256]"),
            "{:?}",
            one.linear_paths[1]
        );
        assert_eq!(
            gpu.linear_path(1, 64, 256, DType::Bfloat16),
            Some(AddmmPath::Cublas)
        );
        assert_eq!(
            gpu.linear_path(2, 64, 256, DType::Bfloat16),
            Some(AddmmPath::CublasLt)
        );
        let disabled = MemoryPolicy::for_gpu(
            &WorkspaceOptions {
                addmm_cuda_lt_disabled: true,
                ..Default::default()
            },
            9,
            0,
        );
        assert_eq!(
            disabled.linear_path(16, 64, 256, DType::Float32),
            Some(AddmmPath::Cublas)
        );
        let cpu = MemoryPolicy::new(Workspaces::NONE, "cpu");
        assert_eq!(cpu.linear_path(16, 64, 256, DType::Float32), None);
        assert!(
            cpu.with_linear_paths(&layers(16, 64), DType::Float32)
                .linear_paths
                .is_empty()
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["linear_paths"][0]["path"], "cublaslt_bias_epilogue");
        assert_eq!(v["torch_cublaslt_unified_workspace"], "unset");
        assert_eq!(
            serde_json::to_value(&one).unwrap()["linear_paths"][1]["path"],
            "bias_copy_then_cublas_gemm"
        );
        // A document from before these fields reads back with their defaults.
        let mut old = v.as_object().unwrap().clone();
        for k in [
            "linear_paths",
            "torch_cublaslt_unified_workspace",
            "disable_addmm_cuda_lt",
        ] {
            old.remove(k);
        }
        let back: MemoryPolicy = serde_json::from_value(old.into()).unwrap();
        assert!(back.linear_paths.is_empty());
        assert_eq!(
            back.torch_cublaslt_unified_workspace,
            UnifiedWorkspace::Unset
        );
    }
}
