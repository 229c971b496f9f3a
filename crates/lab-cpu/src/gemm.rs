//! The float32 matrix product of the CPU reference device: faer's `matmul`, chosen by
//! measurement against matrixmultiply, the `gemm` crate, OpenBLAS and BLIS (bench/README.md).
//! faer is pure Rust (nothing to install), picks AVX-512 or AVX2+FMA kernels at run time, and
//! runs on rayon's pool, the one the device sizes with `--threads`.
//!
//! faer packs its operands into one buffer per calling thread that it allocates on its first
//! product and keeps for the life of the thread (about twice the last-level cache, of which only
//! the part a product packs is ever touched). It allocates that buffer without a way to report
//! failure, so [`reserve_packing`] obtains it at device set-up, after checking that the memory
//! is there, and never inside a timed phase.

use std::num::NonZeroUsize;

use faer::{Accum, MatMut, MatRef, Par};

/// `c += x w^T`: `c` is `m x n`, `x` is `m x k`, `w` is `n x k`, all row-major float32 (the
/// layout of `nn.Linear`: the caller puts the bias in `c` first).
pub fn add_product(
    threads: usize,
    c: &mut [f32],
    x: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
) {
    let x = MatRef::from_row_major_slice(x, m, k);
    let w = MatRef::from_row_major_slice(w, n, k);
    let c = MatMut::from_row_major_slice_mut(c, m, n);
    let threads = if m * k * n < PARALLEL_MIN_PRODUCTS {
        1
    } else {
        threads
    };
    faer::linalg::matmul::matmul(c, Accum::Add, x, w.transpose(), 1.0f32, par(threads));
}

/// Below this many multiply-adds a product runs on the calling thread: waking and joining the
/// workers costs more than they save. Measured on 2 cores of an AVX-512 EPYC (bench/README.md):
/// at width 64 (4.2 M a product) the pass took 0.19-0.21 ms on one thread and 0.25 ms on two;
/// at width 128 (16.8 M) 0.69 ms on one and 0.51 ms on two.
pub const PARALLEL_MIN_PRODUCTS: usize = 1 << 23;

fn par(threads: usize) -> Par {
    match NonZeroUsize::new(threads) {
        Some(n) if n.get() > 1 => Par::Rayon(n),
        _ => Par::Seq,
    }
}

/// Bytes of the last-level cache, as the OS reports it (`/sys`), else 32 MiB: the GEMM's
/// packing buffer is sized from it.
pub fn last_level_cache_bytes() -> u64 {
    let parse = |text: &str| -> Option<u64> {
        let t = text.trim();
        let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
        let n: u64 = digits.parse().ok()?;
        match unit {
            "K" => Some(n << 10),
            "M" => Some(n << 20),
            "G" => Some(n << 30),
            "" => Some(n),
            _ => None,
        }
    };
    (0..8)
        .rev()
        .find_map(|i| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let level = std::fs::read_to_string(format!("{dir}/level")).ok()?;
            (level.trim() == "3").then_some(())?;
            parse(&std::fs::read_to_string(format!("{dir}/size")).ok()?)
        })
        .unwrap_or(32 << 20)
}

/// Makes faer obtain its packing buffer now, on this thread: first checks that twice the
/// last-level cache (what it asks for) can be allocated, so that a shortage is an error here
/// rather than an abort inside a product.
pub fn reserve_packing() -> Result<(), u64> {
    let bytes = 2 * last_level_cache_bytes() + (1 << 20);
    let mut probe: Vec<u8> = Vec::new();
    probe.try_reserve_exact(bytes as usize).map_err(|_| bytes)?;
    drop(probe);
    // Above faer's small-matrix threshold (16^3), so the packing path runs.
    let (m, k, n) = (32, 32, 32);
    let (x, w) = (vec![0f32; m * k], vec![0f32; n * k]);
    let mut c = vec![0f32; m * n];
    add_product(1, &mut c, &x, &w, (m, k, n));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, salt: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + salt * 13) % 23) as f32 / 11.0 - 1.0)
            .collect()
    }

    #[test]
    fn adds_x_times_w_transposed_for_every_thread_count_and_shape() {
        // Tiny (faer's small-matrix path), odd, and large enough to be split across threads.
        for (m, k, n) in [(3, 5, 7), (17, 33, 65), (256, 300, 130)] {
            let (x, w) = (pattern(m * k, 1), pattern(n * k, 2));
            let c0 = pattern(m * n, 3);
            for threads in [1, 2, 3] {
                let mut c = c0.clone();
                add_product(threads, &mut c, &x, &w, (m, k, n));
                for i in 0..m {
                    for j in 0..n {
                        let want = f64::from(c0[i * n + j])
                            + (0..k)
                                .map(|p| f64::from(x[i * k + p]) * f64::from(w[j * k + p]))
                                .sum::<f64>();
                        let got = f64::from(c[i * n + j]);
                        assert!(
                            (got - want).abs() <= 1e-5 * want.abs().max(1.0) * (k as f64).sqrt(),
                            "{m}x{k}x{n}, {threads} threads, ({i},{j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn packing_can_be_reserved_and_the_cache_size_is_plausible() {
        let l3 = last_level_cache_bytes();
        assert!((1 << 18..=1 << 32).contains(&l3), "{l3}");
        assert!(reserve_packing().is_ok());
    }
}
