//! bfloat16 Linears on the CPU's own bfloat16 instructions (AVX512_BF16, through `lab-bf16`),
//! split across the device's threads by bands of rows: each band packs its own activations and
//! reads all of the packed weights, so no two threads write the same output.
//!
//! Where the CPU lacks the instructions, bfloat16 takes the float16 path (both operands widened
//! to float32, faer's product); the environment and the document say which ran.

use lab_bf16::{Bf16Dot, PackedWeights, Scratch};
use rayon::prelude::*;

/// The instructions this device's bfloat16 products run on, where the CPU has them.
pub fn instructions() -> Option<Bf16Dot> {
    Bf16Dot::detect()
}

/// Rows per band for `m` rows on `threads` threads: one band per thread, none empty.
pub fn band_rows(m: usize, threads: usize) -> usize {
    m.div_ceil(threads.max(1)).max(1)
}

/// Bytes every thread's scratch holds over a run's two Linears (`width -> hidden -> width` on
/// `rows` rows): each buffer grows to the larger of its two needs.
pub fn scratch_bytes(rows: usize, width: usize, hidden: usize, threads: usize) -> u64 {
    let band = band_rows(rows, threads);
    let words = Scratch::x_words(band, width).max(Scratch::x_words(band, hidden));
    let sums =
        Scratch::sum_floats(band, hidden, width).max(Scratch::sum_floats(band, width, hidden));
    (words + sums) as u64 * 4 * threads.max(1) as u64
}

/// Bytes of the packed weights and float32 biases of the model's two Linears.
pub fn parameter_bytes(width: usize, hidden: usize) -> u64 {
    PackedWeights::bytes(hidden, width)
        + PackedWeights::bytes(width, hidden)
        + 4 * (width + hidden) as u64
}

/// `out = round(x wᵀ + bias)` for `m` rows (`x` `m x k`, `out` `m x n`, bfloat16 bits), one
/// band of rows per scratch, each reserved for a band ([`band_rows`]`(m, scratch.len())`).
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
    if scratch.len() < 2 || m < 2 {
        dot.linear(out, bias, x, w, m, &mut scratch[0]);
        return;
    }
    let band = band_rows(m, scratch.len());
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
    fn bands_cover_every_row_once() {
        for (m, threads) in [(1, 2), (256, 2), (255, 3), (2048, 16), (5, 8)] {
            let band = band_rows(m, threads);
            assert!(m.div_ceil(band) <= threads, "{m} rows on {threads}");
            assert!(band * threads >= m);
        }
    }

    #[test]
    fn scratch_counts_the_larger_need_of_each_buffer() {
        // 128 rows a thread: the first Linear's k (1024) fits one block, so only the second
        // (k 4096, n 1024) keeps sums; its activations block is the larger too.
        assert_eq!(
            scratch_bytes(256, 1024, 4096, 2),
            2 * 4 * (132 * 512 + 128 * 1024) as u64
        );
    }

    #[test]
    fn threaded_bands_give_the_single_band_result() {
        let Some(dot) = instructions() else {
            eprintln!("skipped: no AVX512_BF16 on this CPU (lab-bf16 tests its blocking anywhere)");
            return;
        };
        for (m, k, n) in [(37, 70, 45), (30, 1500, 20)] {
            let x: Vec<u16> = (0..m * k).map(|i| 0x3f00 + (i % 97) as u16).collect();
            let w: Vec<u16> = (0..n * k).map(|i| 0xbe80 + (i % 89) as u16).collect();
            let bias = vec![0.25f32; n];
            let packed = PackedWeights::new(&w, n, k).unwrap();
            let run = |threads: usize| {
                let mut scratch = vec![Scratch::default(); threads];
                for s in &mut scratch {
                    s.reserve(band_rows(m, threads), n, k).unwrap();
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
