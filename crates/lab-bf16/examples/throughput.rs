//! The kernel's single-thread rate on the measurement's two products, in GFLOP/s, after the
//! rate of the instruction alone (independent `vdpbf16ps` on registers): figures for
//! bench/README.md, not a test. `cargo run --release -p lab-bf16 --example throughput [ROWS]`
//! (ROWS defaults to 128, the band one of 2 threads takes at batch 2 x context 128).

use std::time::Instant;

use lab_bf16::{Bf16Dot, PackedWeights, Scratch};

fn main() {
    let Some(dot) = Bf16Dot::detect() else {
        eprintln!("this CPU has no AVX512_BF16");
        std::process::exit(1);
    };
    peak();
    let rows: usize = std::env::args()
        .nth(1)
        .map_or(128, |a| a.parse().expect("ROWS is a count of rows"));
    for (k, n) in [(1024, 4096), (4096, 1024), (2048, 8192), (8192, 2048)] {
        let x: Vec<u16> = (0..rows * k).map(|i| 0x3f80 + (i % 61) as u16).collect();
        let w: Vec<u16> = (0..n * k).map(|i| 0xbf00 + (i % 53) as u16).collect();
        let packed = PackedWeights::new(&w, n, k).expect("memory for the weights");
        let mut scratch = Scratch::default();
        scratch.reserve(rows, n, k).expect("memory for the scratch");
        let (bias, mut out) = (vec![0.5f32; n], vec![0u16; rows * n]);
        let mut best = f64::INFINITY;
        for _ in 0..20 {
            let t = Instant::now();
            dot.linear(&mut out, &bias, &x, &packed, rows, &mut scratch);
            best = best.min(t.elapsed().as_secs_f64());
        }
        let flop = 2.0 * (rows * k * n) as f64;
        println!(
            "rows {rows} k {k} n {n}: best {:.3} ms, {:.1} GFLOP/s",
            best * 1e3,
            flop / best / 1e9
        );
    }
}

/// 12 independent accumulators, nothing loaded: what one core's `vdpbf16ps` can do.
#[cfg(target_arch = "x86_64")]
fn peak() {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bf16")]
    fn run(rounds: usize) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 12];
        let ones = _mm512_set1_epi32(0x3f80_3f80);
        let tiny = _mm512_set1_epi32(0x0001_0001);
        // SAFETY: 512 bits reinterpreted as 32 bfloat16, their layout.
        let a = unsafe { std::mem::transmute::<__m512i, __m512bh>(ones) };
        // SAFETY: as above.
        let b = unsafe { std::mem::transmute::<__m512i, __m512bh>(tiny) };
        for _ in 0..rounds {
            for x in &mut acc {
                *x = _mm512_dpbf16_ps(*x, a, b);
            }
        }
        _mm512_reduce_add_ps(
            acc.into_iter()
                .fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, x)),
        )
    }

    let rounds = 20_000_000;
    let t = Instant::now();
    // SAFETY: main returned early unless the CPU has AVX-512F and AVX512_BF16.
    let sink = unsafe { run(rounds) };
    let seconds = t.elapsed().as_secs_f64();
    println!(
        "vdpbf16ps alone: {:.1} GFLOP/s (sum {sink})",
        (rounds * 12 * 64) as f64 / seconds / 1e9
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn peak() {}
