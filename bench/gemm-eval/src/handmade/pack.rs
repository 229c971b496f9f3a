//! Copies of blocks of `x` and `w` into the order the kernel reads them: for each step `p` of the
//! depth, the [`MR`] values of a panel of `x` rows, or the [`NR`] values of a panel of `w` rows
//! (columns of `wᵀ`), next to each other. Rows past the end of the matrix are packed as zeros,
//! so the kernel never branches on a short edge.

use super::{MR, NR};

/// Packs rows `first..first + MR` (those below `end`) of `x` (row length `k`), depth
/// `pc..pc + kc`, into `out` (`kc * MR` floats).
pub fn x_panel(x: &[f32], k: usize, first: usize, end: usize, pc: usize, kc: usize, out: &mut [f32]) {
    panel::<MR>(x, k, first, end, pc, kc, out);
}

/// Packs rows `first..first + NR` (those below `end`) of `w` (row length `k`), depth
/// `pc..pc + kc`, into `out` (`kc * NR` floats).
pub fn w_panel(w: &[f32], k: usize, first: usize, end: usize, pc: usize, kc: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if end >= first + NR && super::kernel::available() {
        let out = &mut out[..kc * NR];
        let src = &w[first * k..(first + NR - 1) * k + pc + kc];
        let whole = kc - kc % 8;
        // SAFETY: the CPU has AVX2 (checked); the asserts inside bound every access.
        unsafe { avx2::transpose_16_rows(src, k, pc, whole, out) };
        for r in 0..NR {
            for p in whole..kc {
                out[p * NR + r] = src[r * k + pc + p];
            }
        }
        return;
    }
    panel::<NR>(w, k, first, end, pc, kc, out);
}

/// `out[p * R + r] = a[(first + r) * k + pc + p]`: a transpose of an `R x kc` block. Each source
/// row is read once, front to back; the writes stay inside `out`, small enough for L1.
fn panel<const R: usize>(a: &[f32], k: usize, first: usize, end: usize, pc: usize, kc: usize, out: &mut [f32]) {
    let out = &mut out[..kc * R];
    let rows = end.saturating_sub(first).min(R);
    for r in 0..rows {
        let src = &a[(first + r) * k + pc..][..kc];
        for (p, &v) in src.iter().enumerate() {
            out[p * R + r] = v;
        }
    }
    if rows < R {
        for p in 0..kc {
            out[p * R + rows..(p + 1) * R].fill(0.0);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::super::NR;

    /// `out[p * NR + r] = src[r * k + pc + p]` for `r < NR`, `p < whole` (a multiple of 8), by
    /// 8 x 8 transposes in registers: the scalar copy cost as much as a fifth of a product
    /// whose `x` has few rows.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn transpose_16_rows(src: &[f32], k: usize, pc: usize, whole: usize, out: &mut [f32]) {
        assert!(whole % 8 == 0 && out.len() >= whole * NR);
        assert!(whole == 0 || src.len() >= (NR - 1) * k + pc + whole);
        for p in (0..whole).step_by(8) {
            for half in 0..NR / 8 {
                let mut rows = [_mm256_setzero_ps(); 8];
                for (r, row) in rows.iter_mut().enumerate() {
                    // SAFETY: row half * 8 + r < NR, columns pc + p .. + 8 <= pc + whole
                    // (asserted above).
                    *row = unsafe { _mm256_loadu_ps(src.as_ptr().add((half * 8 + r) * k + pc + p)) };
                }
                let cols = transpose8(rows);
                for (q, col) in cols.iter().enumerate() {
                    // SAFETY: (p + q) * NR + half * 8 + 8 <= whole * NR (asserted above).
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr().add((p + q) * NR + half * 8), *col) };
                }
            }
        }
    }

    /// The columns of an 8 x 8 block given as its rows.
    #[target_feature(enable = "avx2")]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panel_is_the_transposed_block_with_zero_rows_past_the_end() {
        let k = 5;
        let a: Vec<f32> = (0..4 * k).map(|i| i as f32 + 1.0).collect();
        let mut out = vec![f32::NAN; 3 * MR];
        x_panel(&a, k, 2, 4, 1, 3, &mut out);
        for p in 0..3 {
            for r in 0..MR {
                let want = if r < 2 { a[(2 + r) * k + 1 + p] } else { 0.0 };
                assert_eq!(out[p * MR + r], want, "p {p} r {r}");
            }
        }
    }

    #[test]
    fn the_vector_transpose_packs_what_the_scalar_copy_packs() {
        // Depths with and without a tail past the last 8, blocks not at the start.
        for (k, pc, kc) in [(40, 0, 40), (45, 3, 37), (300, 256, 44), (9, 1, 8), (7, 0, 7)] {
            let rows = 20;
            let w: Vec<f32> = (0..rows * k).map(|i| (i as f32).sin()).collect();
            for first in [0, 4] {
                let mut fast = vec![f32::NAN; kc * NR];
                let mut slow = vec![f32::NAN; kc * NR];
                w_panel(&w, k, first, rows, pc, kc, &mut fast);
                panel::<NR>(&w, k, first, rows, pc, kc, &mut slow);
                assert_eq!(fast, slow, "k {k} pc {pc} kc {kc} first {first}");
            }
        }
    }
}
