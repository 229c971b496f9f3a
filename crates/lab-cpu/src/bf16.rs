//! bfloat16 Linears on the CPU's own bfloat16 instructions (AVX512_BF16, through `lab-bf16`),
//! split across the device's threads by bands of rows: each band packs its own activations and
//! reads all of the packed weights, so no two threads write the same output.
//!
//! Where the CPU lacks the instructions, bfloat16 takes the float16 path (both operands widened
//! to float32, faer's product); the environment and the document say which ran.

use lab_bf16::{Bf16Dot, PackedWeights, Scratch};
use rayon::prelude::*;

use crate::gemm::PARALLEL_MIN_PRODUCTS;

/// The instructions this device's bfloat16 products run on, where the CPU has them.
pub fn instructions() -> Option<Bf16Dot> {
    Bf16Dot::detect()
}

/// How a Linear of `m` rows with `n x k` weights is split on `threads` threads: the number of
/// bands and the rows of each (the last may have fewer), one band per thread, none empty; one
/// band when the product is too small to pay for waking the workers.
pub fn bands(m: usize, k: usize, n: usize, threads: usize) -> (usize, usize) {
    let threads = if m * k * n < PARALLEL_MIN_PRODUCTS {
        1
    } else {
        threads.clamp(1, m.max(1))
    };
    let rows = m.div_ceil(threads).max(1);
    (m.div_ceil(rows).max(1), rows)
}

/// Bytes the scratch holds over a run's two Linears (`width -> hidden -> width` on `rows`
/// rows, both split alike): each buffer of each band grows to the larger of its two needs.
pub fn scratch_bytes(rows: usize, width: usize, hidden: usize, threads: usize) -> u64 {
    let (count, band) = bands(rows, width, hidden, threads);
    let words = Scratch::x_words(band, width).max(Scratch::x_words(band, hidden));
    let sums =
        Scratch::sum_floats(band, hidden, width).max(Scratch::sum_floats(band, width, hidden));
    (words + sums) as u64 * 4 * count as u64
}

/// Bytes of the packed weights and float32 biases of the model's two Linears.
pub fn parameter_bytes(width: usize, hidden: usize) -> u64 {
    PackedWeights::bytes(hidden, width)
        + PackedWeights::bytes(width, hidden)
        + 4 * (width + hidden) as u64
}

/// `out = round(x wᵀ + bias)` for `m` rows (`x` `m x k`, `out` `m x n`, bfloat16 bits), band
/// by band ([`bands`] on `scratch.len()` threads), each band with its own scratch, reserved
/// for a band.
pub fn linear(
    dot: Bf16Dot,
    out: &mut [u16],
    bias: &[f32],
    x: &[u16],
    w: &PackedWeights,
    m: usize,
    scratch: &mut [Scratch],
) {
    let (n, k) = (w.n(), w.k());
    let (count, band) = bands(m, k, n, scratch.len());
    if count == 1 {
        dot.linear(out, bias, x, w, m, &mut scratch[0]);
        return;
    }
    out[..m * n]
        .par_chunks_mut(band * n)
        .zip(x[..m * k].par_chunks(band * k.max(1)))
        .zip(scratch.par_iter_mut())
        .for_each(|((o, x), s)| dot.linear(o, bias, x, w, o.len() / n, s));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_cover_every_row_once_and_small_products_take_one() {
        let large = PARALLEL_MIN_PRODUCTS;
        for (m, threads) in [(1, 2), (256, 2), (255, 3), (2048, 16), (5, 8), (7, 3)] {
            let (count, rows) = bands(m, large, 1, threads);
            assert!(count <= threads && count <= m, "{m} rows on {threads}");
            assert!(
                rows * count >= m && rows * (count - 1) < m,
                "{m} rows on {threads}"
            );
        }
        assert_eq!(bands(256, 64, 256, 2), (1, 256));
        assert_eq!(bands(256, 128, 512, 2), (2, 128));
    }

    #[test]
    fn scratch_counts_the_larger_need_of_each_buffer() {
        // 128 rows a thread: both k (1024 and 4096) fit one block, so no sums are kept; the
        // second Linear's activations block is the larger.
        assert_eq!(scratch_bytes(256, 1024, 4096, 2), 2 * 4 * 132 * 2048);
        // Width 2048: the second Linear's k (8192) spans two blocks and keeps its sums.
        assert_eq!(
            scratch_bytes(256, 2048, 8192, 2),
            2 * 4 * (132 * 2048 + 128 * 2048) as u64
        );
        // Width 64: one band of 256 rows, k 256 at most.
        assert_eq!(scratch_bytes(256, 64, 256, 2), 4 * 264 * 128);
    }

    #[test]
    fn threaded_bands_give_the_single_band_result() {
        let Some(dot) = instructions() else {
            eprintln!("skipped: no AVX512_BF16 on this CPU (lab-bf16 tests its blocking anywhere)");
            return;
        };
        // Products above the threshold, so that the bands are split; k over one block.
        for (m, k, n) in [(37, 4200, 60), (100, 300, 300)] {
            let x: Vec<u16> = (0..m * k).map(|i| 0x3f00 + (i % 97) as u16).collect();
            let w: Vec<u16> = (0..n * k).map(|i| 0xbe80 + (i % 89) as u16).collect();
            let bias = vec![0.25f32; n];
            let packed = PackedWeights::new(&w, n, k).unwrap();
            let run = |threads: usize| {
                let (count, rows) = bands(m, k, n, threads);
                assert_eq!(count, threads.min(m));
                let mut scratch = vec![Scratch::default(); count];
                for s in &mut scratch {
                    s.reserve(rows, n, k).unwrap();
                }
                let mut out = vec![0u16; m * n];
                linear(dot, &mut out, &bias, &x, &packed, m, &mut scratch);
                out
            };
            let one = run(1);
            for threads in [2, 3, 8] {
                assert_eq!(run(threads), one, "{m}x{k}x{n}, {threads} threads");
            }
        }
    }
}
