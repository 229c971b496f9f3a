//! usage: gemm-eval THREADS PASSES [small|large]     (LIBS=faer,handmade,... for a subset)
//!
//! Times the synthetic model's two products, `h = x W1^T` (rows x width . width x hidden) and
//! `y = g W2^T` (rows x hidden . hidden x width), in float32 with every matrix in PyTorch's
//! row-major layout, for each library in turn; the libraries alternate pass by pass so that
//! a busy machine slows them alike. Prints the median and the minimum of one pass (both
//! products) per library and shape. The matrixmultiply thread count is read from
//! MATMUL_NUM_THREADS, which the caller sets to THREADS.
//!
//! Besides the libraries: `faer-rows` (faer, one sequential product per thread on its own band
//! of rows), `faer-t` (faer with `w` transposed once, outside the timing) and `handmade` (the
//! hand-written AVX2 kernel of `handmade/`, or `handmade:KC:MC` with other block sizes; it
//! clears `c` inside the timing, as it only adds).

mod handmade;

use std::num::NonZeroUsize;
use std::time::Instant;

type Sgemm = unsafe extern "C" fn(
    i32, i32, i32, i32, i32, i32, f32, *const f32, i32, *const f32, i32, f32, *mut f32, i32,
);
type SetThreads = unsafe extern "C" fn(i32);

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
const TRANS: i32 = 112;

struct Blas {
    name: &'static str,
    _lib: libloading::Library,
    sgemm: Sgemm,
}

fn open_blas(name: &'static str, file: &str, set_threads: &str, threads: usize) -> Option<Blas> {
    // SAFETY: a system BLAS library; its initialisers have no preconditions.
    let lib = unsafe { libloading::Library::new(file) }.ok()?;
    // SAFETY: the symbols have the CBLAS / library signatures declared above.
    unsafe {
        let sgemm: Sgemm = *lib.get::<Sgemm>(b"cblas_sgemm\0").ok()?;
        let set: SetThreads = *lib.get::<SetThreads>(set_threads.as_bytes()).ok()?;
        set(threads as i32);
        Some(Blas { name, _lib: lib, sgemm })
    }
}

/// c (m x n) = a (m x k) . b^T, b being n x k, all row-major.
fn product(lib: &str, blas: &[Blas], threads: usize, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    match lib {
        "matrixmultiply" => unsafe {
            // c^T = b a^T, with b on the left (the side matrixmultiply packs in parallel).
            matrixmultiply::sgemm(
                n, k, m, 1.0, b.as_ptr(), k as isize, 1, a.as_ptr(), 1, k as isize, 0.0,
                c.as_mut_ptr(), 1, n as isize,
            )
        },
        "gemm" => unsafe {
            gemm::gemm(
                m, n, k, c.as_mut_ptr(), 1, n as isize, false, a.as_ptr(), 1, k as isize,
                b.as_ptr(), k as isize, 1, 0.0, 1.0, false, false, false,
                if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None },
            )
        },
        "faer" => {
            let a = faer::MatRef::from_row_major_slice(a, m, k);
            let b = faer::MatRef::from_row_major_slice(b, n, k);
            let c = faer::MatMut::from_row_major_slice_mut(c, m, n);
            let par = if threads > 1 {
                faer::Par::Rayon(NonZeroUsize::new(threads).unwrap())
            } else {
                faer::Par::Seq
            };
            faer::linalg::matmul::matmul(c, faer::Accum::Replace, a, b.transpose(), 1.0, par);
        }
        "prepacked" => {
            // The hand-written kernel with w packed once (first call, an untimed pass).
            thread_local! {
                static P: std::cell::RefCell<(Option<handmade::Gemm>, std::collections::HashMap<usize, handmade::PackedW>)> = Default::default();
            }
            P.with(|p| {
                let mut p = p.borrow_mut();
                let (g, packs) = &mut *p;
                let g = g.get_or_insert_with(|| handmade::Gemm::new(threads).unwrap());
                let packed = packs.entry(b.as_ptr() as usize).or_insert_with(|| handmade::PackedW::new(b, n, k));
                c.fill(0.0);
                g.add_product_prepacked(c, a, packed, m);
            });
        }
        lab if lab.starts_with("handmade") => {
            // handmade, or handmade:KC:MC for other block sizes.
            thread_local! { static G: std::cell::RefCell<std::collections::HashMap<String, handmade::Gemm>> = std::cell::RefCell::new(Default::default()); }
            G.with(|g| {
                let mut g = g.borrow_mut();
                let g = g.entry(lab.to_string()).or_insert_with(|| {
                    let parts: Vec<usize> = lab.split(':').skip(1).map(|p| p.parse().unwrap()).collect();
                    match parts[..] {
                        [kc, mc] => handmade::Gemm::with_blocks(threads, (kc, mc)).unwrap(),
                        _ => handmade::Gemm::new(threads).unwrap(),
                    }
                });
                c.fill(0.0);
                g.add_product(c, a, b, (m, k, n));
            });
        }
        "faer-t" => {
            // `b` holds w transposed (k x n, row-major), made once outside the timing.
            let a = faer::MatRef::from_row_major_slice(a, m, k);
            let b = faer::MatRef::from_row_major_slice(b, k, n);
            let c = faer::MatMut::from_row_major_slice_mut(c, m, n);
            let par = if threads > 1 { faer::Par::Rayon(NonZeroUsize::new(threads).unwrap()) } else { faer::Par::Seq };
            faer::linalg::matmul::matmul(c, faer::Accum::Replace, a, b, 1.0, par);
        }
        "faer-rows" => {
            // Each thread its own band of rows, one sequential product each: no
            // synchronisation inside the product, the weights packed once per thread.
            use rayon::prelude::*;
            let band = m.div_ceil(threads).max(1);
            c.par_chunks_mut(band * n).zip(a.par_chunks(band * k)).for_each(|(c, a)| {
                let rows = a.len() / k;
                let a = faer::MatRef::from_row_major_slice(a, rows, k);
                let b = faer::MatRef::from_row_major_slice(b, n, k);
                let c = faer::MatMut::from_row_major_slice_mut(c, rows, n);
                faer::linalg::matmul::matmul(c, faer::Accum::Replace, a, b.transpose(), 1.0, faer::Par::Seq);
            });
        }
        name => {
            let blas = blas.iter().find(|b| b.name == name).unwrap();
            unsafe {
                (blas.sgemm)(
                    ROW_MAJOR, NO_TRANS, TRANS, m as i32, n as i32, k as i32, 1.0, a.as_ptr(),
                    k as i32, b.as_ptr(), k as i32, 0.0, c.as_mut_ptr(), n as i32,
                )
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let passes: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().unwrap();
    let mut blas = Vec::new();
    blas.extend(open_blas("openblas", "libopenblas.so.0", "openblas_set_num_threads\0", threads));
    blas.extend(open_blas("blis", "libblis.so.4", "bli_thread_set_num_threads\0", threads));
    let mut libs: Vec<&str> = match std::env::var("LIBS") { Ok(l) => l.leak().split(',').collect(), Err(_) => vec!["matrixmultiply", "gemm", "faer", "faer-rows", "faer-t", "handmade"] };
    libs.extend(blas.iter().map(|b| b.name));
    let shapes: Vec<(usize, usize, usize)> = match args.get(3).map(String::as_str) { Some("large") => vec![(4, 512, 2048)], Some("small") => vec![(2, 128, 1024)], _ => vec![(2, 128, 1024), (4, 512, 2048)] };
    for &(batch, context, width) in &shapes {
        let (m, w, h) = (batch * context, width, 4 * width);
        let fill = |len: usize, salt: usize| -> Vec<f32> {
            (0..len).map(|i| ((i * 7 + salt * 13) % 23) as f32 / 11.0 - 1.0).collect()
        };
        let (x, w1, w2) = (fill(m * w, 1), fill(h * w, 2), fill(w * h, 3));
        let transpose = |a: &[f32], rows: usize, cols: usize| -> Vec<f32> {
            let mut t = vec![0f32; a.len()];
            for r in 0..rows { for c in 0..cols { t[c * rows + r] = a[r * cols + c]; } }
            t
        };
        let (w1t, w2t) = (transpose(&w1, h, w), transpose(&w2, w, h));
        let (mut hh, mut y) = (vec![0f32; m * h], vec![0f32; m * w]);
        let mut times = vec![Vec::new(); libs.len()];
        let mut reference: Option<Vec<f32>> = None;
        for pass in 0..passes + 2 {
            for (i, lib) in libs.iter().enumerate() {
                let (b1, b2) = if *lib == "faer-t" { (&w1t, &w2t) } else { (&w1, &w2) };
                let start = Instant::now();
                product(lib, &blas, threads, &x, b1, &mut hh, m, w, h);
                product(lib, &blas, threads, &hh, b2, &mut y, m, h, w);
                let t = start.elapsed().as_secs_f64();
                if pass >= 2 {
                    times[i].push(t);
                }
                match &reference {
                    None => reference = Some(y.clone()),
                    Some(r) => {
                        let err = r.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                        let scale = r.iter().map(|a| a.abs()).fold(0f32, f32::max);
                        assert!(err <= 1e-4 * scale, "{lib} disagrees: {err} vs scale {scale}");
                    }
                }
            }
        }
        let flops = 4.0 * (m * w * h) as f64;
        for (lib, t) in libs.iter().zip(&mut times) {
            t.sort_by(f64::total_cmp);
            let med = t[t.len() / 2];
            println!(
                "{batch},{context},{width}\t{threads}\t{lib:<15}\tmedian {:8.2} ms\tmin {:8.2} ms\t{:6.1} GFLOP/s",
                med * 1e3,
                t[0] * 1e3,
                flops / med / 1e9
            );
        }
    }
}
