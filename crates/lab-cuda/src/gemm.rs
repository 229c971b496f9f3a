//! The other path of torch 2.11's `addmm` on CUDA: the bias copied into the output, then one
//! `cublasGemmEx` with beta = 1.
//!
//! `addmm_out_cuda_impl` (aten/src/ATen/native/cuda/Blas.cpp) leaves the cuBLASLt path when
//! `isInputCompliesAddmmCudaLt` fails (for `F.linear`: a dimension of `mat1` or `mat2` is 1, see
//! `lab::workspaces`) or `DISABLE_ADDMM_CUDA_LT=1`. It then copies the bias, expanded to the
//! result's shape, into the result (`at::native::copy_(result, *self_maybe_expanded)`: our
//! `bias_rows_*` kernel), derives the arguments with `cublasCommonArgs` (cuBlasCommonArgs.h) and
//! calls `launchGemmCublas` -> `at::cuda::blas::gemm<scalar_t>(transa, transb, m, n, k, alpha,
//! mata, lda, matb, ldb, beta, result, result_ld)` with alpha = beta = 1 (CUDABlas.cpp):
//!
//! - `gemm_internal_cublas_half_helper` / `..._bfloat16_helper`: `getCurrentCUDABlasHandle()`,
//!   `_cublasAdjustLdLevel3`, `cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH)` (reduced-precision
//!   reductions are allowed by default), `cublasGemmEx(handle, opa, opb, m, n, k, &falpha, a,
//!   CUDA_R_16F|CUDA_R_16BF, lda, b, ..., ldb, &fbeta, c, ..., ldc, CUBLAS_COMPUTE_32F,
//!   CUBLAS_GEMM_DEFAULT_TENSOR_OP)`, then `cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH)`;
//! - `gemm_internal_cublas<float>`: `cublasSgemm` under the handle's math mode (TF32 tensor ops
//!   only when float32 matmuls may use TF32). We call the equivalent `cublasGemmEx` with
//!   `CUDA_R_32F` throughout, `CUBLAS_COMPUTE_32F` (`CUBLAS_COMPUTE_32F_FAST_TF32` with
//!   `--allow-tf32`, as the cuBLASLt path does) and `CUBLAS_GEMM_DEFAULT`.
//!
//! `getCurrentCUDABlasHandle()` is the only library call on this path that allocates: the cuBLAS
//! workspace on the first product through the handle. No cuBLASLt workspace is allocated.

use std::ffi::{c_int, c_void};

use lab::dtype::DType;
use lab::workspaces::TensorLayout;

use crate::blas::Handle;
use crate::blaslt::{OP_N, OP_T, compute_type, data_type};
use crate::error::{CudaError, cublas_status_name};

/// A `cublasStatus_t`, read as the integer it is.
type Status = c_int;

type GemmExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
) -> Status;

/// `CUBLAS_GEMM_DEFAULT` (`CUBLAS_GEMM_DFALT`), what `cublasSgemm` runs.
pub const GEMM_DEFAULT: c_int = -1;
/// `CUBLAS_GEMM_DEFAULT_TENSOR_OP`, what PyTorch passes for float16 and bfloat16.
pub const GEMM_DEFAULT_TENSOR_OP: c_int = 99;

/// The arguments of one `cublasGemmEx`: `C (m x n) = alpha · op(A) · op(B) + beta · C`,
/// column-major.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmArgs {
    /// `cublasOperation_t` of A.
    pub transa: c_int,
    /// `cublasOperation_t` of B.
    pub transb: c_int,
    /// Rows of op(A) and C.
    pub m: c_int,
    /// Columns of op(B) and C.
    pub n: c_int,
    /// The shared dimension.
    pub k: c_int,
    /// Leading dimension of A.
    pub lda: c_int,
    /// Leading dimension of B.
    pub ldb: c_int,
    /// Leading dimension of C.
    pub ldc: c_int,
    /// `cudaDataType` of A, B and C.
    pub data_type: c_int,
    /// `cublasComputeType_t`.
    pub compute: c_int,
    /// `cublasGemmAlgo_t`.
    pub algo: c_int,
    /// `alpha` (a host float).
    pub alpha: f32,
    /// `beta` (a host float): 1, so the bias already in C is added.
    pub beta: f32,
}

impl GemmArgs {
    /// `F.linear` for a row-major `x[rows, in_f]`, weight `[out_f, in_f]` and a bias already
    /// copied into the row-major `out[rows, out_f]`: `cublasCommonArgs(mat1 = x, mat2 = W.t(),
    /// result = out)` and `_cublasAdjustLdLevel3`, worked out on the tensors' sizes and strides as
    /// c10 gives them. A is the weight's buffer (`mata`, since the contiguous result is transposed),
    /// B the input's (`matb`), C the output's.
    pub fn linear(
        rows: usize,
        in_f: usize,
        out_f: usize,
        dtype: DType,
        allow_tf32: bool,
    ) -> Result<GemmArgs, String> {
        let fit = |v: usize, what: &str| -> Result<c_int, String> {
            match c_int::try_from(v) {
                Ok(x) if x > 0 => Ok(x),
                _ => Err(format!("{what} = {v} is outside 1..=2147483647")),
            }
        };
        fit(rows, "rows")?;
        fit(in_f, "in_features")?;
        fit(out_f, "out_features")?;
        let result = TensorLayout::contiguous(&[rows, out_f]);
        let mat1 = TensorLayout::contiguous(&[rows, in_f]);
        let mat2 = TensorLayout::contiguous(&[out_f, in_f]).t();
        // prepare_matrix_for_cublas: every tensor here is non-overlapping and dense, so
        // `transpose_tensor = tensor.is_contiguous()`.
        let transpose_result = result.is_contiguous();
        let (mata, matb) = if transpose_result {
            (&mat2, &mat1)
        } else {
            (&mat1, &mat2)
        };
        let (mut transpose_a, mut transpose_b) = (mata.is_contiguous(), matb.is_contiguous());
        if transpose_result {
            transpose_a = !transpose_a;
            transpose_b = !transpose_b;
        }
        let pick = |t: bool| usize::from(t);
        let m = mata.sizes[pick(transpose_result)];
        let k = mata.sizes[pick(!transpose_result)];
        let n = matb.sizes[pick(!transpose_result)];
        let mut lda = mata.strides[pick(transpose_a == transpose_result)];
        let mut ldb = matb.strides[pick(transpose_b == transpose_result)];
        let mut ldc = result.strides[pick(!transpose_result)];
        // _cublasAdjustLdLevel3: a leading dimension cuBLAS does not read is still checked, so a
        // degenerate one is raised to what the matrix would need.
        if n <= 1 {
            ldc = m.max(1);
        }
        if transpose_a {
            if m <= 1 {
                lda = k.max(1);
            }
        } else if k <= 1 {
            lda = m.max(1);
        }
        if transpose_b {
            if k <= 1 {
                ldb = n.max(1);
            }
        } else if n <= 1 {
            ldb = k.max(1);
        }
        let half = dtype != DType::Float32;
        Ok(GemmArgs {
            transa: if transpose_a { OP_T } else { OP_N },
            transb: if transpose_b { OP_T } else { OP_N },
            m: fit(m, "m")?,
            n: fit(n, "n")?,
            k: fit(k, "k")?,
            lda: fit(lda, "lda")?,
            ldb: fit(ldb, "ldb")?,
            ldc: fit(ldc, "ldc")?,
            data_type: data_type(dtype),
            compute: compute_type(dtype, allow_tf32),
            algo: if half {
                GEMM_DEFAULT_TENSOR_OP
            } else {
                GEMM_DEFAULT
            },
            alpha: 1.0,
            beta: 1.0,
        })
    }

    /// True for float16 and bfloat16, which PyTorch runs between two
    /// `cublasSetMathMode(CUBLAS_DEFAULT_MATH)` calls.
    pub fn sets_default_math(&self) -> bool {
        self.data_type != data_type(DType::Float32)
    }
}

/// `cublasGemmEx`, from the cuBLAS the loader chose (loaded for the process's life).
#[derive(Clone, Copy)]
pub struct GemmEx {
    gemm_ex: GemmExFn,
}

impl std::fmt::Debug for GemmEx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GemmEx").finish_non_exhaustive()
    }
}

impl GemmEx {
    /// Resolves `cublasGemmEx` from cuBLAS.
    pub fn new(lib: &'static libloading::Library) -> Result<GemmEx, CudaError> {
        // SAFETY: the type is the prototype of cublasGemmEx in cublas_api.h (cuBLAS 12 and 13:
        // `cublasComputeType_t` and `cublasGemmAlgo_t` are C enums, passed as int); the library
        // stays loaded for the process's life.
        Ok(GemmEx {
            gemm_ex: unsafe { crate::blas::sym(lib, "cublasGemmEx") }?,
        })
    }

    /// Queues the product on the handle's stream.
    ///
    /// # Safety
    /// `handle` is a live cuBLAS handle bound to a stream; `a`, `b` and `c` are device memory
    /// holding the matrices `g` describes, live until the product has run.
    pub unsafe fn run(
        &self,
        handle: Handle,
        g: &GemmArgs,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), CudaError> {
        // SAFETY: guaranteed by the caller; alpha and beta are host floats, as a float32 compute
        // type and the default (host) pointer mode require.
        let status = unsafe {
            (self.gemm_ex)(
                handle,
                g.transa,
                g.transb,
                g.m,
                g.n,
                g.k,
                (&g.alpha as *const f32).cast(),
                a as *const c_void,
                g.data_type,
                g.lda,
                b as *const c_void,
                g.data_type,
                g.ldb,
                (&g.beta as *const f32).cast(),
                c as *mut c_void,
                g.data_type,
                g.ldc,
                g.compute,
                g.algo,
            )
        };
        if status == 0 {
            Ok(())
        } else {
            Err(CudaError::Cublas {
                call: "cublasGemmEx",
                status,
                name: cublas_status_name(status),
            })
        }
    }
}

/// A host model of `cublasGemmEx` on column-major buffers (float64), written from the cuBLAS
/// documentation: `C = alpha · op(A) · op(B) + beta · C`, element (r, c) of a matrix with leading
/// dimension ld at r + c · ld.
#[cfg(test)]
pub fn host_gemm(g: &GemmArgs, a: &[f64], b: &[f64], c: &mut [f64]) {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
    let op_a = |i: usize, p: usize| {
        if g.transa == OP_T {
            a[p + i * lda]
        } else {
            a[i + p * lda]
        }
    };
    let op_b = |p: usize, j: usize| {
        if g.transb == OP_T {
            b[j + p * ldb]
        } else {
            b[p + j * ldb]
        }
    };
    for j in 0..n {
        for i in 0..m {
            let dot: f64 = (0..k).map(|p| op_a(i, p) * op_b(p, j)).sum();
            c[i + j * ldc] = f64::from(g.alpha) * dot + f64::from(g.beta) * c[i + j * ldc];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blaslt::{COMPUTE_32F, COMPUTE_32F_FAST_TF32};
    use proptest::prelude::*;

    /// The bias broadcast into the output (the `bias_rows_*` kernel), then the GEMM: the row-major
    /// `x · Wᵀ + b`, whatever the shape.
    fn check_linear(rows: usize, in_f: usize, out_f: usize) {
        let x: Vec<f64> = (0..rows * in_f).map(|i| (i as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..out_f * in_f).map(|i| (i as f64 * 0.11).cos()).collect();
        let bias: Vec<f64> = (0..out_f).map(|i| i as f64 - 1.5).collect();
        let mut out: Vec<f64> = (0..rows * out_f).map(|i| bias[i % out_f]).collect();
        let g = GemmArgs::linear(rows, in_f, out_f, DType::Float32, false).unwrap();
        host_gemm(&g, &w, &x, &mut out);
        for r in 0..rows {
            for o in 0..out_f {
                let want: f64 = (0..in_f)
                    .map(|i| x[r * in_f + i] * w[o * in_f + i])
                    .sum::<f64>()
                    + bias[o];
                let got = out[r * out_f + o];
                assert!(
                    (want - got).abs() < 1e-9,
                    "{rows}x{in_f}x{out_f} [{r},{o}] {want} vs {got}"
                );
            }
        }
        // cuBLAS's own argument checks (cublas_api documentation of cublasGemmEx).
        let rows_a = if g.transa == OP_N { g.m } else { g.k };
        let rows_b = if g.transb == OP_N { g.k } else { g.n };
        assert!(g.lda >= rows_a.max(1) && g.ldb >= rows_b.max(1) && g.ldc >= g.m.max(1));
    }

    #[test]
    fn row_major_linear_maps_onto_column_major_cublas() {
        check_linear(1, 64, 256);
        check_linear(1, 256, 64);
        check_linear(16, 1, 4);
        check_linear(16, 4, 1);
        check_linear(1, 1, 1);
        check_linear(3, 5, 7);
    }

    proptest! {
        #[test]
        fn the_mapping_holds_for_any_small_shape(rows in 1usize..6, in_f in 1usize..6, out_f in 1usize..6) {
            check_linear(rows, in_f, out_f);
        }
    }

    /// One row: what torch 2.11 passes for `F.linear` on a [1, 1, 64] input (mat1 [1, 64]).
    #[test]
    fn the_arguments_are_pytorchs() {
        let g = GemmArgs::linear(1, 64, 256, DType::Bfloat16, false).unwrap();
        assert_eq!((g.transa, g.transb), (OP_T, OP_N));
        assert_eq!((g.m, g.n, g.k), (256, 1, 64));
        assert_eq!((g.lda, g.ldb, g.ldc), (64, 64, 256));
        assert_eq!((g.alpha, g.beta), (1.0, 1.0));
        assert_eq!(
            (g.data_type, g.compute, g.algo),
            (14, COMPUTE_32F, GEMM_DEFAULT_TENSOR_OP)
        );
        assert!(g.sets_default_math());
        // A transposed weight with one column (in_features 1) or one row (out_features 1) is
        // contiguous, so cublasCommonArgs does not transpose it.
        let g = GemmArgs::linear(16, 1, 4, DType::Float32, false).unwrap();
        assert_eq!((g.transa, g.transb, g.m, g.n, g.k), (OP_N, OP_N, 4, 16, 1));
        assert_eq!((g.lda, g.ldb, g.ldc), (4, 1, 4));
        let g = GemmArgs::linear(16, 4, 1, DType::Float32, true).unwrap();
        assert_eq!((g.transa, g.m, g.k, g.lda), (OP_N, 1, 4, 1));
        assert_eq!((g.compute, g.algo), (COMPUTE_32F_FAST_TF32, GEMM_DEFAULT));
        assert!(!g.sets_default_math());
        assert!(GemmArgs::linear(1 << 31, 4, 4, DType::Float16, false).is_err());
        assert!(GemmArgs::linear(0, 4, 4, DType::Float16, false).is_err());
    }

    #[test]
    fn constants_are_the_headers() {
        use cudarc::cublas::sys::cublasGemmAlgo_t as A;
        assert_eq!(A::CUBLAS_GEMM_DFALT as c_int, GEMM_DEFAULT);
        assert_eq!(
            A::CUBLAS_GEMM_DEFAULT_TENSOR_OP as c_int,
            GEMM_DEFAULT_TENSOR_OP
        );
        use cudarc::cublas::sys::cublasOperation_t as O;
        assert_eq!(O::CUBLAS_OP_N as c_int, OP_N);
        assert_eq!(O::CUBLAS_OP_T as c_int, OP_T);
    }
}
