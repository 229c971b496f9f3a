use half::bf16;
use proptest::prelude::*;

use super::*;

fn bits(v: f32) -> u16 {
    bf16::from_f32(v).to_bits()
}

fn value(b: u16) -> f32 {
    bf16::from_bits(b).to_f32()
}

/// A pattern of bfloat16 values in [-1, 1] that a transposed or shifted operand would not
/// reproduce.
fn pattern(len: usize, salt: usize) -> Vec<u16> {
    (0..len)
        .map(|i| bits(((i * 7 + salt * 13) % 29) as f32 / 14.0 - 1.0))
        .collect()
}

/// The tile in plain float32, pair by pair as `vdpbf16ps` is defined (each product exact),
/// rounded by `half`.
fn scalar_tile(t: Tile<'_>) {
    let Tile {
        rows,
        block,
        x,
        w,
        columns,
        ld,
        bias,
        mut sums,
        mut out,
    } = t;
    for i in 0..rows {
        for j in 0..columns {
            let mut sum = match (bias, &sums) {
                (Some(b), _) => b[j],
                (None, Some(s)) => s[i * ld + j],
                (None, None) => unreachable!(),
            };
            for p in 0..block {
                let (x, w) = (x[p * rows + i], w[p * PANEL_COLUMNS + j]);
                sum += value((x >> 16) as u16) * value((w >> 16) as u16);
                sum += value(x as u16) * value(w as u16);
            }
            match (&mut out, &mut sums) {
                (Some(o), _) => o[i * ld + j] = bits(sum),
                (None, Some(s)) => s[i * ld + j] = sum,
                (None, None) => unreachable!(),
            }
        }
    }
}

struct Case {
    shape: (usize, usize, usize),
    x: Vec<u16>,
    w: Vec<u16>,
    bias: Vec<f32>,
}

impl Case {
    fn new((m, k, n): (usize, usize, usize), x: Vec<u16>, w: Vec<u16>) -> Case {
        let bias = (0..n).map(|j| value(bits((j % 5) as f32 - 2.0))).collect();
        Case {
            shape: (m, k, n),
            x,
            w,
            bias,
        }
    }

    fn pattern(shape: (usize, usize, usize)) -> Case {
        let (m, k, n) = shape;
        Case::new(shape, pattern(m * k, 1), pattern(n * k, 2))
    }

    /// The Linear through `drive` with `tile`, from a scratch reserved as the device does.
    fn run(&self, tile: impl FnMut(Tile<'_>)) -> Vec<u16> {
        let (m, k, n) = self.shape;
        let packed = PackedWeights::new(&self.w, n, k).unwrap();
        let mut scratch = Scratch::default();
        scratch.reserve(m, n, k).unwrap();
        let mut out = vec![0u16; m * n];
        drive(
            &mut out,
            &self.bias,
            &self.x,
            &packed,
            m,
            &mut scratch,
            tile,
        );
        out
    }

    /// `out` against the bias plus `x wᵀ` in float64: within float32 accumulation over `k`
    /// terms and one rounding to bfloat16.
    fn check(&self, out: &[u16]) {
        let (m, k, n) = self.shape;
        for i in 0..m {
            for j in 0..n {
                let (mut want, mut magnitude) =
                    (f64::from(self.bias[j]), f64::from(self.bias[j].abs()));
                for p in 0..k {
                    let term =
                        f64::from(value(self.x[i * k + p])) * f64::from(value(self.w[j * k + p]));
                    want += term;
                    magnitude += term.abs();
                }
                let got = f64::from(value(out[i * n + j]));
                let bound = (k as f64 + 2.0) * f64::from(f32::EPSILON) * magnitude
                    + want.abs() * 2f64.powi(-8)
                    + 1e-30;
                assert!(
                    (got - want).abs() <= bound,
                    "{m}x{k}x{n} ({i},{j}): {got} vs {want} (bound {bound:e})"
                );
            }
        }
    }
}

/// Odd and even k, none, a k longer than two blocks, columns short of a panel and of a
/// register, rows short of a tile and of several.
const SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (3, 5, 7),
    (4, 0, 3),
    (12, 64, 32),
    (13, 33, 17),
    (25, 2 * 2 * BLOCK_PAIRS + 3, 40),
    (7, 1024, 65),
    (40, 128, 16),
    (2, 2, 33),
    (128, 2048, 96),
];

#[test]
fn the_blocking_and_packing_compute_the_linear_on_any_cpu() {
    for shape in SHAPES {
        let case = Case::pattern(shape);
        case.check(&case.run(scalar_tile));
    }
}

#[test]
fn the_bf16_instructions_compute_the_linear_where_the_cpu_has_them() {
    let Some(dot) = Bf16Dot::detect() else {
        eprintln!("skipped: this CPU has no AVX512_BF16; the scalar test checks the blocking");
        return;
    };
    for shape in SHAPES {
        let case = Case::pattern(shape);
        let native = case.run(|t| tile(dot, t));
        case.check(&native);
        // The same sums in the same order: the same bits as the scalar tile.
        let scalar = case.run(scalar_tile);
        let differ = native.iter().zip(&scalar).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ,
            0,
            "{shape:?}: {differ} of {} outputs differ",
            native.len()
        );
    }
}

#[test]
fn rounding_in_the_kernel_is_halfs_on_ties_specials_and_overflow() {
    let Some(dot) = Bf16Dot::detect() else {
        eprintln!("skipped: this CPU has no AVX512_BF16");
        return;
    };
    // k = 0: the output is the rounded bias, so every float32 reaches the rounding as it is.
    let bias = [
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        -1.0 - 2f32.powi(-8),
        f32::MAX,
        -f32::MAX,
        1e-40,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc1_2345),
        3.399_999_6e38,
        f32::MIN_POSITIVE,
        65504.0,
        1.0 + 2f32.powi(-9),
    ];
    let n = bias.len();
    let packed = PackedWeights::new(&[], n, 0).unwrap();
    let mut scratch = Scratch::default();
    scratch.reserve(2, n, 0).unwrap();
    let mut out = vec![0u16; 2 * n];
    dot.linear(&mut out, &bias, &[], &packed, 2, &mut scratch);
    for (j, &b) in bias.iter().enumerate() {
        let want = bf16::from_f32(b);
        for row in 0..2 {
            let got = bf16::from_bits(out[row * n + j]);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:e}: {:#06x} vs {:#06x}",
                got.to_bits(),
                want.to_bits()
            );
        }
    }
}

#[test]
fn the_packed_weights_hold_every_pair_once_and_zeros_elsewhere() {
    let (n, k) = (35, 7);
    let w: Vec<u16> = (1..=(n * k) as u16).collect();
    let packed = PackedWeights::new(&w, n, k).unwrap();
    assert_eq!(packed.words.len() as u64 * 4, PackedWeights::bytes(n, k));
    let mut seen: Vec<u16> = packed
        .words
        .iter()
        .flat_map(|&p| [p as u16, (p >> 16) as u16])
        .filter(|&v| v != 0)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, w);
    assert_eq!(packed.words.len(), 2 * PANEL_COLUMNS * 4);
}

#[test]
fn sums_are_kept_only_for_a_k_longer_than_a_block() {
    assert_eq!(Scratch::sum_floats(128, 4096, 2 * BLOCK_PAIRS), 0);
    assert_eq!(
        Scratch::sum_floats(128, 1024, 2 * BLOCK_PAIRS + 1),
        128 * 1024
    );
    assert_eq!(Scratch::x_words(128, 1024), 132 * 512);
    assert_eq!(Scratch::x_words(1, 3), 12 * 2);
}

#[test]
#[should_panic(expected = "scratch not reserved")]
fn a_scratch_reserved_for_less_is_refused() {
    let packed = PackedWeights::new(&[0; 8], 2, 4).unwrap();
    let mut scratch = Scratch::default();
    scratch.reserve(1, 2, 4).unwrap();
    // 13 rows need two tiles of packed activations, the scratch holds one.
    let mut out = [0u16; 26];
    drive(
        &mut out,
        &[0.0; 2],
        &[0; 52],
        &packed,
        13,
        &mut scratch,
        scalar_tile,
    );
}

proptest! {
    #[test]
    fn any_shape_and_values_match_float64(
        m in 1usize..30, k in 0usize..80, n in 1usize..70,
        seed in any::<u32>(),
    ) {
        let value_at = |i: usize| {
            let h = (i as u32 ^ seed).wrapping_mul(0x9e37_79b9).rotate_left(13);
            bits((h >> 8) as f32 / (1u32 << 23) as f32 - 1.0)
        };
        let case = Case::new(
            (m, k, n),
            (0..m * k).map(value_at).collect(),
            (0..n * k).map(|i| value_at(i + 1_000_000)).collect(),
        );
        let scalar = case.run(scalar_tile);
        case.check(&scalar);
        if let Some(dot) = Bf16Dot::detect() {
            prop_assert_eq!(case.run(|t| tile(dot, t)), scalar);
        }
    }
}
