//! A hand-written float32 product, evaluated against the libraries (bench/README.md) and not
//! used by the product: `c += x wᵀ` with every matrix row-major, on x86-64 with AVX2 and FMA.
//!
//! The BLIS layout of the loops and BLIS's Zen block sizes: `w`'s columns are packed into panels
//! of [`NR`] that stay in L1 while a block of `x`, packed into panels of [`MR`] rows, streams
//! from L2; the kernel keeps a 6 x 16 tile of `c` in twelve registers, prefetches the tile of `c`
//! and the next panel of `w`, and `w` is packed by 8 x 8 transposes in registers. The question
//! it answers: does a kernel written for this machine beat faer's where PyTorch's (oneDNN/MKL)
//! does? In isolation, on packed data in L2, it ran at 92-97 % of the core's FMA peak (about
//! 98 GFLOP/s on one Zen 3 core); in the whole product it ties faer.

mod kernel;
mod pack;

use rayon::prelude::*;

/// Rows of `c` one kernel call computes.
pub const MR: usize = 6;
/// Columns of `c` one kernel call computes (two AVX registers).
pub const NR: usize = 16;
/// Depth of one packed block: a panel of `w` (`KC x NR` floats, 16 KiB) fits L1 with room for
/// the streaming `x` panel.
const KC: usize = 256;
/// Rows of `x` packed per block (`MC x KC` floats, 144 KiB): half a Zen 3 L2.
const MC: usize = 144;
/// Columns of `w` packed per block (`KC x NC` floats, 4 MiB, shared by the threads, in L3).
const NC: usize = 4080;

/// The packing buffers of one product at a time and the thread count they were sized for.
#[derive(Debug)]
pub struct Gemm {
    threads: usize,
    /// Depth and rows of a packed block: [`KC`] and [`MC`] unless a benchmark asks otherwise.
    blocks: (usize, usize),
    /// `KC x NC` floats of `w`, panel after panel (plus room to align to a cache line).
    packed_w: Vec<f32>,
    /// One `MC x KC` block of `x` per thread.
    packed_x: Vec<Vec<f32>>,
}

/// Packing memory could not be obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Bytes that were asked for.
    pub bytes: u64,
}

/// Floats of slack so that a buffer can start on a 64-byte line.
const ALIGN_FLOATS: usize = 16;

impl Gemm {
    /// Whether this machine runs the hand-written kernel: x86-64 with AVX2 and FMA and without
    /// AVX-512F (where faer's AVX-512 kernels are the better choice).
    pub fn available() -> bool {
        kernel::available()
    }

    /// Bytes [`Gemm::new`] allocates for `threads` threads: what a memory plan has to count.
    pub fn packing_bytes(threads: usize) -> u64 {
        let floats = (KC * NC + ALIGN_FLOATS) + threads.max(1) * (MC * KC + ALIGN_FLOATS);
        4 * floats as u64
    }

    /// Buffers for products on up to `threads` threads, allocated (and touched) now.
    pub fn new(threads: usize) -> Result<Gemm, OutOfMemory> {
        Gemm::with_blocks(threads, (KC, MC))
    }

    /// [`Gemm::new`] with other block sizes (depth, rows; rows a multiple of [`MR`]): for
    /// `bench/gemm-eval`, which compares them on the machine at hand.
    #[doc(hidden)]
    pub fn with_blocks(threads: usize, (kc_block, mc_block): (usize, usize)) -> Result<Gemm, OutOfMemory> {
        assert!(kc_block > 0 && mc_block > 0 && mc_block % MR == 0);
        let threads = threads.max(1);
        let buffer = |floats: usize| -> Result<Vec<f32>, OutOfMemory> {
            let mut v = Vec::new();
            v.try_reserve_exact(floats + ALIGN_FLOATS)
                .map_err(|_| OutOfMemory {
                    bytes: Gemm::packing_bytes(threads),
                })?;
            v.resize(floats + ALIGN_FLOATS, 0.0);
            Ok(v)
        };
        let packed_w = buffer(kc_block * NC)?;
        let packed_x = (0..threads)
            .map(|_| buffer(mc_block * kc_block))
            .collect::<Result<_, _>>()?;
        Ok(Gemm {
            threads,
            blocks: (kc_block, mc_block),
            packed_w,
            packed_x,
        })
    }

    /// `c += x wᵀ`: `c` is `m x n`, `x` is `m x k`, `w` is `n x k`, all row-major.
    ///
    /// # Panics
    /// If this machine lacks the kernel ([`Gemm::available`]) or a slice is shorter than its
    /// dimensions say.
    pub fn add_product(&mut self, c: &mut [f32], x: &[f32], w: &[f32], (m, k, n): (usize, usize, usize)) {
        assert!(Gemm::available(), "the AVX2+FMA kernel does not run on this CPU");
        assert!(c.len() >= m * n && x.len() >= m * k && w.len() >= n * k, "slices shorter than {m}x{k}x{n}");
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        let c = &mut c[..m * n];
        let (kc_block, mc_block) = self.blocks;
        let packed_w = aligned(&mut self.packed_w);
        // Bands of whole kernel tiles, one per thread.
        let band = m.div_ceil(self.threads).next_multiple_of(MR);
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(kc_block) {
                let kc = kc_block.min(k - pc);
                let panel = kc * NR;
                let packed_w = &mut packed_w[..nc.div_ceil(NR) * panel];
                packed_w
                    .par_chunks_mut(panel)
                    .enumerate()
                    .with_min_len(8)
                    .for_each(|(q, out)| pack::w_panel(w, k, jc + q * NR, (jc + nc).min(n), pc, kc, out));
                let packed_w = &*packed_w;
                c.par_chunks_mut(band * n)
                    .zip(self.packed_x.par_iter_mut())
                    .enumerate()
                    .for_each(|(t, (c_band, packed_x))| {
                        let first_row = t * band;
                        let rows = c_band.len() / n;
                        let packed_x = aligned(packed_x);
                        for ic in (0..rows).step_by(mc_block) {
                            let mc = mc_block.min(rows - ic);
                            for (q, out) in packed_x[..mc.div_ceil(MR) * kc * MR].chunks_mut(kc * MR).enumerate() {
                                pack::x_panel(x, k, first_row + ic + q * MR, first_row + ic + mc, pc, kc, out);
                            }
                            for jr in (0..nc).step_by(NR) {
                                let w_panel = &packed_w[(jr / NR) * panel..][..panel];
                                // The last tile of this panel fetches the next one into L1.
                                let next = if jr + NR < nc { jr / NR + 1 } else { 0 };
                                let next_w = &packed_w[next * panel..][..panel];
                                let last = (mc - 1) / MR * MR;
                                for ir in (0..mc).step_by(MR) {
                                    let next_w = if ir == last { next_w } else { w_panel };
                                    let x_panel = &packed_x[(ir / MR) * kc * MR..][..kc * MR];
                                    let tile = (MR.min(mc - ir), NR.min(nc - jr));
                                    let at = (ic + ir) * n + jc + jr;
                                    kernel::tile(kc, x_panel, w_panel, &mut c_band[at..], n, tile, next_w);
                                }
                            }
                        }
                    });
            }
        }
    }
}

/// `w` packed once, every block in the order the product reads them: for the benchmark's
/// question whether packing the weights once (at load) instead of per product pays.
#[derive(Debug)]
pub struct PackedW {
    blocks: Vec<Vec<f32>>,
    kc_block: usize,
    n: usize,
    k: usize,
}

impl PackedW {
    pub fn new(w: &[f32], n: usize, k: usize) -> PackedW {
        let mut blocks = Vec::new();
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                let panel = kc * NR;
                let mut buf = vec![0f32; nc.div_ceil(NR) * panel + ALIGN_FLOATS];
                let out = aligned(&mut buf);
                for (q, o) in out[..nc.div_ceil(NR) * panel].chunks_mut(panel).enumerate() {
                    pack::w_panel(w, k, jc + q * NR, (jc + nc).min(n), pc, kc, o);
                }
                blocks.push(buf);
            }
        }
        PackedW { blocks, kc_block: KC, n, k }
    }
}

impl Gemm {
    /// `c += x wᵀ` with `w` packed beforehand.
    pub fn add_product_prepacked(&mut self, c: &mut [f32], x: &[f32], w: &mut PackedW, m: usize) {
        let (n, k) = (w.n, w.k);
        let c = &mut c[..m * n];
        let (kc_block, mc_block) = (w.kc_block, self.blocks.1);
        let band = m.div_ceil(self.threads).next_multiple_of(MR);
        let mut block_index = 0;
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(kc_block) {
                let kc = kc_block.min(k - pc);
                let panel = kc * NR;
                let packed_w = &*aligned(&mut w.blocks[block_index]);
                block_index += 1;
                c.par_chunks_mut(band * n)
                    .zip(self.packed_x.par_iter_mut())
                    .enumerate()
                    .for_each(|(t, (c_band, packed_x))| {
                        let first_row = t * band;
                        let rows = c_band.len() / n;
                        let packed_x = aligned(packed_x);
                        for ic in (0..rows).step_by(mc_block) {
                            let mc = mc_block.min(rows - ic);
                            for (q, out) in packed_x[..mc.div_ceil(MR) * kc * MR].chunks_mut(kc * MR).enumerate() {
                                pack::x_panel(x, k, first_row + ic + q * MR, first_row + ic + mc, pc, kc, out);
                            }
                            for jr in (0..nc).step_by(NR) {
                                let w_panel = &packed_w[(jr / NR) * panel..][..panel];
                                let next = if jr + NR < nc { jr / NR + 1 } else { 0 };
                                let next_w = &packed_w[next * panel..][..panel];
                                let last = (mc - 1) / MR * MR;
                                for ir in (0..mc).step_by(MR) {
                                    let next_w = if ir == last { next_w } else { w_panel };
                                    let x_panel = &packed_x[(ir / MR) * kc * MR..][..kc * MR];
                                    let tile = (MR.min(mc - ir), NR.min(nc - jr));
                                    let at = (ic + ir) * n + jc + jr;
                                    kernel::tile(kc, x_panel, w_panel, &mut c_band[at..], n, tile, next_w);
                                }
                            }
                        }
                    });
            }
        }
    }
}

/// The part of `buffer` that starts on a 64-byte line.
fn aligned(buffer: &mut [f32]) -> &mut [f32] {
    let skip = buffer.as_ptr().align_offset(64).min(ALIGN_FLOATS);
    &mut buffer[skip..]
}
