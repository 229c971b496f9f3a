//! The bfloat16 matrix product `c += x wᵀ` of the CPU reference device, on the CPU's own
//! bfloat16 instructions: AVX512_BF16's `vdpbf16ps` multiplies 32 pairs of bfloat16 and adds
//! them into 16 float32 lanes in one instruction, twice the multiply-adds of a float32 FMA and
//! half the bytes per operand. Widening both operands to float32 first (the device's path on
//! every other CPU) costs a conversion pass per product and runs at float32's rate; PyTorch's
//! oneDNN uses this instruction where it exists, so matching PyTorch there needs it too.
//!
//! The arithmetic is the one a GPU with float32 accumulation does: every product of two
//! bfloat16 values is exact in float32 and is added to a float32 sum. The instruction treats
//! subnormal bfloat16 inputs as zero and flushes a subnormal sum to zero (Intel's definition of
//! `VDPBF16PS`), below 2^-126 in magnitude, far under the measurement's check bound.
//!
//! The weights are packed once, when they are loaded ([`PackedWeights`]), into the order the
//! kernel reads them; the activations are packed per product into a buffer the caller keeps
//! ([`Scratch`]), so no product allocates.
//!
//! Only this crate of the CPU device uses `unsafe` (the intrinsics, and the raw pointers the
//! kernel walks); each block says why it is sound. A [`Bf16Dot`] exists only where the CPU has
//! the instructions, so the safe functions cannot reach them elsewhere.
//!
//! Beside `lab-cpu`, whose bfloat16 Linears call it. Not here: the device itself, its other
//! dtypes and its memory (`lab-cpu`).

use std::collections::TryReserveError;

/// Columns of a weight panel: two 16-lane registers of float32 sums per row.
pub const PANEL_COLUMNS: usize = 32;
/// Rows of the activations a tile takes at once: 12 rows x 2 registers = 24 accumulators, with
/// the two weight registers and a broadcast inside the 32 vector registers.
pub const TILE_ROWS: usize = 12;
/// Pairs of `k` a block covers: a band's packed activations and a panel's block stay in the
/// caches while every tile of the band passes over them, and a `k` of up to 4096 (the
/// measurement's hidden size at width 1024) needs no float32 sums outside the registers.
/// Measured on an AVX-512 EPYC, batch 2 x context 128 x width 1024 on 2 threads: a pass took
/// 11.1-11.8 ms with 2048, 11.8-12.1 ms with 1024 and 12.2-13.3 ms with 512.
const BLOCK_PAIRS: usize = 2048;

/// The bfloat16 dot-product instructions, known to be present: the only way to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bf16Dot {
    _present: (),
}

impl Bf16Dot {
    /// The instructions, where this CPU has them (AVX-512F and AVX512_BF16, checked at run time).
    pub fn detect() -> Option<Bf16Dot> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
        {
            return Some(Bf16Dot { _present: () });
        }
        None
    }

    /// The name of the instructions, for the environment and the document.
    pub fn name(self) -> &'static str {
        "AVX512_BF16 (vdpbf16ps)"
    }

    /// A Linear for `rows` rows: `out = round(x wᵀ + bias)`, `x` `rows x k` and `out` `rows x n`
    /// bfloat16 bits, both row-major, `w` the packed `n x k` weights, `bias` `n` float32 values.
    /// The sums start from the bias and stay float32 until the one rounding to bfloat16
    /// (nearest, ties to even, as `half::bf16::from_f32`). `scratch` was reserved for
    /// `(rows, n, k)` ([`Scratch::reserve`]).
    ///
    /// # Panics
    /// If a slice is shorter than its shape says, or `scratch` is too small.
    pub fn linear(
        self,
        out: &mut [u16],
        bias: &[f32],
        x: &[u16],
        w: &PackedWeights,
        rows: usize,
        scratch: &mut Scratch,
    ) {
        drive(out, bias, x, w, rows, scratch, |t| tile(self, t));
    }
}

/// What a thread's products need besides their operands, kept across products so that none
/// allocates: a block of its activations, packed, and float32 sums for a `k` longer than one
/// block.
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    x: Vec<u32>,
    sums: Vec<f32>,
}

impl Scratch {
    /// Words of packed activations a band of `rows` rows of `k` columns needs.
    pub fn x_words(rows: usize, k: usize) -> usize {
        rows.next_multiple_of(TILE_ROWS) * pairs(k).min(BLOCK_PAIRS)
    }

    /// float32 sums a band of `rows` rows needs for `n x k` weights: none when `k` fits one
    /// block, as the sums then never leave the registers.
    pub fn sum_floats(rows: usize, n: usize, k: usize) -> usize {
        if pairs(k) > BLOCK_PAIRS { rows * n } else { 0 }
    }

    /// Grows the buffers (fallibly) to what a band of `rows` rows needs for `n x k` weights.
    pub fn reserve(&mut self, rows: usize, n: usize, k: usize) -> Result<(), TryReserveError> {
        fn grow<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> Result<(), TryReserveError> {
            if v.len() < len {
                v.try_reserve_exact(len - v.len())?;
                v.resize(len, T::default());
            }
            Ok(())
        }
        grow(&mut self.x, Scratch::x_words(rows, k))?;
        grow(&mut self.sums, Scratch::sum_floats(rows, n, k))
    }
}

/// One tile's work over `block` pairs, for `rows` rows and `columns` columns (at most a panel):
/// the sums start from `bias` (the tile's columns) or else from `sums`, take
/// `Σ_p x[i][p] · w[p][j]`, and end rounded in `out` or else in `sums`; `sums` and `out` have
/// rows `ld` apart. `x` is the tile's packed activations (pair `p` of row `i` at `p * rows +
/// i`), `w` the panel's block.
struct Tile<'a> {
    rows: usize,
    block: usize,
    x: &'a [u32],
    w: &'a [u32],
    columns: usize,
    ld: usize,
    bias: Option<&'a [f32]>,
    sums: Option<&'a mut [f32]>,
    out: Option<&'a mut [u16]>,
}

/// The blocking of [`Bf16Dot::linear`], with the tile's arithmetic left to `tile` (the tests
/// run it with a scalar tile on any CPU).
fn drive(
    out: &mut [u16],
    bias: &[f32],
    x: &[u16],
    w: &PackedWeights,
    rows: usize,
    scratch: &mut Scratch,
    mut tile: impl FnMut(Tile<'_>),
) {
    let (n, k) = (w.n, w.k);
    assert!(out.len() >= rows * n, "out: {} < {rows} x {n}", out.len());
    assert!(x.len() >= rows * k, "x: {} < {rows} x {k}", x.len());
    assert!(bias.len() >= n, "bias: {} < {n}", bias.len());
    assert!(
        scratch.x.len() >= Scratch::x_words(rows, k)
            && scratch.sums.len() >= Scratch::sum_floats(rows, n, k),
        "scratch not reserved for {rows} rows of {n} x {k}"
    );
    if rows == 0 || n == 0 {
        return;
    }
    // k = 0: no pair, one empty block, so the bias still reaches the output.
    let total_pairs = pairs(k);
    let Scratch { x: packed_x, sums } = scratch;
    let mut first_pair = 0;
    loop {
        let block = BLOCK_PAIRS.min(total_pairs - first_pair);
        let (first, last) = (first_pair == 0, first_pair + block == total_pairs);
        pack_x(x, k, rows, first_pair, block, packed_x);
        for panel in 0..w.panels() {
            let first_column = panel * PANEL_COLUMNS;
            let w_block = &w.words[(panel * total_pairs + first_pair) * PANEL_COLUMNS..]
                [..block * PANEL_COLUMNS];
            for first_row in (0..rows).step_by(TILE_ROWS) {
                let tile_rows = TILE_ROWS.min(rows - first_row);
                let at = first_row * n + first_column;
                tile(Tile {
                    rows: tile_rows,
                    block,
                    x: &packed_x[first_row * block..][..tile_rows * block],
                    w: w_block,
                    columns: PANEL_COLUMNS.min(n - first_column),
                    ld: n,
                    bias: first.then(|| &bias[first_column..]),
                    sums: (!(first && last)).then(|| &mut sums[at..]),
                    out: last.then(|| &mut out[at..]),
                });
            }
        }
        if last {
            return;
        }
        first_pair += block;
    }
}

/// Pairs of `k` (the last one half zero when `k` is odd).
fn pairs(k: usize) -> usize {
    k.div_ceil(2)
}

/// Two bfloat16 values in one word, the even-indexed one in the low half: the order in which
/// `vdpbf16ps` pairs them (it pairs the same halves of both operands, so any fixed order works).
fn pair(lo: u16, hi: u16) -> u32 {
    u32::from(lo) | (u32::from(hi) << 16)
}

/// Pair `p` of row `row` of a row-major `? x k` matrix; the missing half of the last pair of an
/// odd `k` is zero.
fn pair_at(m: &[u16], k: usize, row: usize, p: usize) -> u32 {
    let at = row * k + 2 * p;
    let hi = if 2 * p + 1 < k { m[at + 1] } else { 0 };
    pair(m[at], hi)
}

/// The weights of a Linear, `n x k` bfloat16 in `nn.Linear`'s layout, packed once for the
/// kernel: panels of [`PANEL_COLUMNS`] columns, each pair of `k` a row of the panel (the
/// panel's columns padded with zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedWeights {
    words: Vec<u32>,
    n: usize,
    k: usize,
}

impl PackedWeights {
    /// Bytes the packed form of `n x k` weights takes (what a memory plan counts); it
    /// saturates rather than wraps, so that an absurd shape reads as too large to plan.
    pub fn bytes(n: usize, k: usize) -> u64 {
        (n.div_ceil(PANEL_COLUMNS) as u64 * PANEL_COLUMNS as u64)
            .saturating_mul(pairs(k) as u64)
            .saturating_mul(4)
    }

    /// Packs `w` (`n x k` bfloat16 bits, row-major), allocating with a fallible reservation.
    ///
    /// # Panics
    /// If `w` holds fewer than `n * k` values.
    pub fn new(w: &[u16], n: usize, k: usize) -> Result<PackedWeights, TryReserveError> {
        assert!(w.len() >= n * k, "w: {} < {n} x {k}", w.len());
        let len = usize::try_from(PackedWeights::bytes(n, k) / 4).unwrap_or(usize::MAX);
        let mut words = Vec::new();
        words.try_reserve_exact(len)?;
        let total_pairs = pairs(k);
        for panel in 0..n.div_ceil(PANEL_COLUMNS) {
            for p in 0..total_pairs {
                words.extend((0..PANEL_COLUMNS).map(|j| {
                    let column = panel * PANEL_COLUMNS + j;
                    if column < n {
                        pair_at(w, k, column, p)
                    } else {
                        0
                    }
                }));
            }
        }
        Ok(PackedWeights { words, n, k })
    }

    /// Output columns (the weights' rows).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(PANEL_COLUMNS)
    }
}

/// Packs pairs `first_pair..first_pair + block` of every row of `x` into `out`, tile by tile:
/// within a tile of `r` rows, pair `p` of row `i` is word `p * r + i`, the order in which the
/// kernel broadcasts them.
fn pack_x(x: &[u16], k: usize, rows: usize, first_pair: usize, block: usize, out: &mut [u32]) {
    for first_row in (0..rows).step_by(TILE_ROWS) {
        let r = TILE_ROWS.min(rows - first_row);
        let tile = &mut out[first_row * block..][..r * block];
        for i in 0..r {
            let row = &x[(first_row + i) * k..][..k][2 * first_pair..];
            let whole = block.min(row.len() / 2);
            for (p, two) in row[..2 * whole].chunks_exact(2).enumerate() {
                tile[p * r + i] = pair(two[0], two[1]);
            }
            if whole < block {
                // The last pair of an odd k: its missing half is zero.
                tile[whole * r + i] = pair(row[2 * whole], 0);
            }
        }
    }
}

/// A tile on the bfloat16 instructions.
fn tile(dot: Bf16Dot, t: Tile<'_>) {
    let Tile {
        rows,
        block,
        x,
        w,
        columns,
        ld,
        bias,
        sums,
        out,
    } = t;
    assert!((1..=TILE_ROWS).contains(&rows) && (1..=PANEL_COLUMNS).contains(&columns));
    assert!(x.len() >= rows * block && w.len() >= block * PANEL_COLUMNS);
    let span = (rows - 1) * ld + columns;
    assert!(bias.is_none_or(|b| b.len() >= columns));
    assert!(sums.as_ref().is_none_or(|s| s.len() >= span));
    assert!(out.as_ref().is_none_or(|o| o.len() >= span));
    assert!((bias.is_some() || sums.is_some()) && (out.is_some() || sums.is_some()));
    #[cfg(target_arch = "x86_64")]
    {
        let _ = dot;
        let sums = sums.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
        // SAFETY: `dot` exists only where the CPU has AVX-512F and AVX512_BF16 (`detect`); the
        // asserts above bound every address the kernel touches: `rows * block` words of `x`,
        // `block` panel rows of `w`, `columns` values of the bias and of each of `rows` rows
        // of `sums` and `out`, and a pointer is null only where the kernel does not use it.
        unsafe {
            avx512::tile(avx512::Operands {
                rows,
                block,
                x: x.as_ptr(),
                w: w.as_ptr(),
                columns,
                ld,
                bias: bias.map_or(std::ptr::null(), |b| b.as_ptr()),
                sums,
                out: out.map_or(std::ptr::null_mut(), |o| o.as_mut_ptr()),
            })
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dot, rows, block, x, w, columns, ld, bias, sums, out);
        unreachable!("a Bf16Dot exists only on x86_64");
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{PANEL_COLUMNS, TILE_ROWS};

    /// A tile's operands as the kernel walks them (see `Tile`): `bias` null means start from
    /// `sums`, `out` null means end in `sums`.
    pub(super) struct Operands {
        pub rows: usize,
        pub block: usize,
        pub x: *const u32,
        pub w: *const u32,
        pub columns: usize,
        pub ld: usize,
        pub bias: *const f32,
        pub sums: *mut f32,
        pub out: *mut u16,
    }

    /// Dispatches to the kernel for exactly `rows` rows, so that each has its accumulators in
    /// registers.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512_BF16; `x` has `rows * block` words, `w` has
    /// `block * PANEL_COLUMNS` words, `bias` (unless null) has `columns` floats, `sums` and
    /// `out` (unless null) have `columns` values at each of `rows` rows `ld` apart, and `sums`
    /// is not null where `bias` or `out` is.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn tile(o: Operands) {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe {
            match o.rows {
                1 => kernel::<1>(o),
                2 => kernel::<2>(o),
                3 => kernel::<3>(o),
                4 => kernel::<4>(o),
                5 => kernel::<5>(o),
                6 => kernel::<6>(o),
                7 => kernel::<7>(o),
                8 => kernel::<8>(o),
                9 => kernel::<9>(o),
                10 => kernel::<10>(o),
                11 => kernel::<11>(o),
                TILE_ROWS => kernel::<TILE_ROWS>(o),
                _ => unreachable!("a tile has 1 to {TILE_ROWS} rows"),
            }
        }
    }

    /// The first `n` lanes of a register.
    fn lanes(n: usize) -> __mmask16 {
        if n >= 16 { 0xffff } else { (1u16 << n) - 1 }
    }

    /// float32 lanes rounded to bfloat16 bits (nearest, ties to even; a NaN made quiet,
    /// keeping the upper half of its payload), in the low half of each 32-bit lane: the integer
    /// form of `half::bf16::from_f32`.
    #[target_feature(enable = "avx512f")]
    fn round(v: __m512) -> __m512i {
        let x = _mm512_castps_si512(v);
        let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(1));
        let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd);
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, bias));
        let magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f80_0000));
        let quiet = _mm512_or_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(0x40));
        _mm512_mask_blend_epi32(nan, rounded, quiet)
    }

    /// `R` rows by one panel. The lanes past `columns` are neither read nor written (the
    /// masks; a masked-off lane is never accessed, so the second half's address may lie past
    /// a row when `columns <= 16`: it is made with `wrapping_add`).
    ///
    /// # Safety
    /// As [`tile`], with `rows == R`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn kernel<const R: usize>(o: Operands) {
        let (m0, m1) = (lanes(o.columns), lanes(o.columns.saturating_sub(16)));
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        // Every row starts from the bias (a stride of 0) or from its own row of sums.
        let (start, stride) = if o.bias.is_null() {
            (o.sums.cast_const(), o.ld)
        } else {
            (o.bias, 0)
        };
        // SAFETY: `bias` has `columns` floats, or else row `i` of `sums` has `columns` floats
        // at `sums + i * ld`; the masks keep the loads to them.
        unsafe {
            for (i, a) in acc.iter_mut().enumerate() {
                let row = start.add(i * stride);
                a[0] = _mm512_maskz_loadu_ps(m0, row);
                a[1] = _mm512_maskz_loadu_ps(m1, row.wrapping_add(16));
            }
        }
        for p in 0..o.block {
            // SAFETY: `w` has `block` panel rows of PANEL_COLUMNS words and `x` has `R` words
            // per pair; p < block. The casts reinterpret 512 bits as 32 bfloat16, their layout.
            unsafe {
                let wp = o.w.add(p * PANEL_COLUMNS);
                let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.cast()));
                let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.add(16).cast()));
                let xp = o.x.add(p * R);
                for (i, a) in acc.iter_mut().enumerate() {
                    let xi: __m512bh = std::mem::transmute(_mm512_set1_epi32(*xp.add(i) as i32));
                    a[0] = _mm512_dpbf16_ps(a[0], xi, w0);
                    a[1] = _mm512_dpbf16_ps(a[1], xi, w1);
                }
            }
        }
        // SAFETY: row `i` of `out`, or else of `sums`, has `columns` values at `+ i * ld`; the
        // masks keep the stores to them (a rounded lane's low 16 bits go to one u16).
        // One loop per case, the branch outside: a branch inside the loop keeps the
        // accumulators in memory as well as in registers, halving the kernel's rate.
        unsafe {
            if o.out.is_null() {
                for (i, a) in acc.iter().enumerate() {
                    let row = o.sums.add(i * o.ld);
                    _mm512_mask_storeu_ps(row, m0, a[0]);
                    _mm512_mask_storeu_ps(row.wrapping_add(16), m1, a[1]);
                }
            } else {
                for (i, a) in acc.iter().enumerate() {
                    let row = o.out.add(i * o.ld);
                    _mm512_mask_cvtepi32_storeu_epi16(row.cast(), m0, round(a[0]));
                    _mm512_mask_cvtepi32_storeu_epi16(row.wrapping_add(16).cast(), m1, round(a[1]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
