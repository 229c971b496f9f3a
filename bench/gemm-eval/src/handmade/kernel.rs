//! The 6 x 16 tile kernel: AVX2 and FMA intrinsics, chosen at run time.
//!
//! Twelve accumulators (six rows times two 8-float registers) plus the two `w` values of a depth
//! step and one broadcast `x` value use 15 of the 16 AVX registers; each depth step issues 12
//! FMAs against 2 loads and 6 broadcasts, which Zen 3 and Intel cores sustain at two FMAs per
//! cycle.

use super::{MR, NR};

/// Whether the kernel runs here (and is the better choice: see [`super::Gemm::available`]).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && !std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `c[r * ldc + j] += Σ_p x[p * MR + r] · w[p * NR + j]` for `r < rows`, `j < cols`, where
/// `(rows, cols) = tile` is at most `(MR, NR)`.
///
/// # Panics
/// If a slice is too short for `kc`, `ldc` and `tile`, or the CPU lacks AVX2 or FMA.
pub fn tile(kc: usize, x: &[f32], w: &[f32], c: &mut [f32], ldc: usize, tile: (usize, usize), next_w: &[f32]) {
    let (rows, cols) = tile;
    assert!(rows <= MR && cols <= NR && rows > 0 && cols > 0);
    assert!(x.len() >= kc * MR && w.len() >= kc * NR && next_w.len() >= kc * NR);
    assert!(c.len() >= (rows - 1) * ldc + cols);
    #[cfg(target_arch = "x86_64")]
    {
        assert!(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"));
        // SAFETY: the CPU has AVX2 and FMA (checked above), and the asserts bound every read
        // of `x` and `w` (kc steps of MR and NR floats) and every write of `c` (`rows` rows of
        // `cols` floats, `ldc` apart).
        unsafe { avx2::tile(kc, x.as_ptr(), w.as_ptr(), c.as_mut_ptr(), ldc, rows, cols, next_w.as_ptr()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kc, x, w, c, ldc, next_w);
        unreachable!("the AVX2 kernel only exists on x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// # Safety
    /// The CPU has AVX2 and FMA; `x` holds `kc * MR` floats, `w` `kc * NR`, and `c` rows
    /// `0..rows` of `cols` floats each, `ldc` apart.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile(kc: usize, x: *const f32, w: *const f32, c: *mut f32, ldc: usize, rows: usize, cols: usize, next_w: *const f32) {
        // The tile of `c` is read only after the loop; start fetching its lines now (each row
        // spans at most two).
        for r in 0..rows {
            // SAFETY: prefetches do not fault; the addresses are inside `c` anyway.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc).cast());
                _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + cols - 1).cast());
            }
        }
        const NV: usize = NR / 8;
        let mut acc = [[_mm256_setzero_ps(); NV]; MR];
        for p in 0..kc {
            // SAFETY: a prefetch does not fault; the line is inside `next_w` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(next_w.add(p * NR).cast()) };
            let mut wv = [_mm256_setzero_ps(); NV];
            for (v, wv) in wv.iter_mut().enumerate() {
                // SAFETY: p < kc, so the read is inside the panel (caller's contract).
                *wv = unsafe { _mm256_loadu_ps(w.add(p * NR + v * 8)) };
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: r < MR, inside this step's MR values.
                let xr = unsafe { _mm256_broadcast_ss(&*x.add(p * MR + r)) };
                for (acc, wv) in acc.iter_mut().zip(&wv) {
                    *acc = _mm256_fmadd_ps(xr, *wv, *acc);
                }
            }
        }
        if cols == NR {
            for (r, acc) in acc.iter().enumerate().take(rows) {
                for (v, acc) in acc.iter().enumerate() {
                    // SAFETY: row r < rows of c, NR = cols floats.
                    unsafe {
                        let cr = c.add(r * ldc + v * 8);
                        _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), *acc));
                    }
                }
            }
        } else {
            let mut tile = [0f32; MR * NR];
            for (r, acc) in acc.iter().enumerate() {
                for (v, acc) in acc.iter().enumerate() {
                    // SAFETY: `tile` holds MR rows of NR floats.
                    unsafe { _mm256_storeu_ps(tile.as_mut_ptr().add(r * NR + v * 8), *acc) };
                }
            }
            for r in 0..rows {
                for j in 0..cols {
                    // SAFETY: r < rows and j < cols.
                    unsafe { *c.add(r * ldc + j) += tile[r * NR + j] };
                }
            }
        }
    }
}
