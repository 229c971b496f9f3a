//! The exact (erf) GELU in float32, vectorised and threaded.
//!
//! `gelu(x) = 0.5 x (1 + erf(x / sqrt 2))`, PyTorch's default (`approximate='none'`). `erf` is
//! computed as PyTorch's vectorised CPU kernel computes it (`Vectorized<float>::erf`,
//! Abramowitz & Stegun 7.1.26: `1 - (a1 t + ... + a5 t^5) exp(-z^2)` with `t = 1 / (1 + p z)`,
//! absolute error below 1.5e-7), with an `exp` accurate to a few ulp. Every operation is a plain
//! float32 or integer operation on one element, with no branch, so the compiler turns the loop
//! into AVX2 or AVX-512 code (selected at run time by `pulp`, with a scalar fallback); the tail of
//! a slice goes through the same function one element at a time.
//!
//! The polynomials are written with `mul_add`: a fused multiply-add is one instruction where
//! `pulp` selects AVX2+FMA or AVX-512 (a third fewer operations than multiply then add, which is
//! what the width-64 pass is bound by), and because it is correctly rounded everywhere, the
//! scalar fallback (where it becomes the C library's `fmaf`, slower but exact) gives the same
//! bits as every vector unit.

use pulp::{Arch, Simd, WithSimd};

/// `0.5 x (1 + erf(x / sqrt 2))` in float32, one element: the same arithmetic as the
/// vectorised slice form, bit for bit.
#[inline(always)]
pub fn gelu32(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    0.5 * x * (1.0 + erf(z))
}

/// Abramowitz & Stegun 7.1.26, as PyTorch's `Vectorized<float>::erf`. The constants are
/// written as published (and as PyTorch writes them); the compiler rounds them to float32.
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn erf(z: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_592;
    const A2: f32 = -0.284_496_736;
    const A3: f32 = 1.421_413_741;
    const A4: f32 = -1.453_152_027;
    const A5: f32 = 1.061_405_429;
    let sign = z.to_bits() & 0x8000_0000;
    let a = f32::from_bits(z.to_bits() & 0x7fff_ffff);
    let t = 1.0 / P.mul_add(a, 1.0);
    let r = A5
        .mul_add(t, A4)
        .mul_add(t, A3)
        .mul_add(t, A2)
        .mul_add(t, A1);
    let e = exp_non_positive(-(a * a));
    let v = 1.0 - r * t * e;
    f32::from_bits(v.to_bits() | sign)
}

/// `exp(y)` for `y <= 0` (NaN stays NaN): `2^n exp(r)` with `n = round(y / ln 2)` (round to
/// nearest even by the 1.5 x 2^23 trick), `r = y - n ln 2` in two parts (Cody and Waite), and
/// `exp(r)` by its Taylor polynomial of degree 7 (relative error below 6e-9 on |r| <= ln 2 / 2).
/// Arguments below -87 are clamped there: the result, about 1.6e-38, is what a product with it
/// needs (zero to float32 precision against 1).
#[allow(clippy::excessive_precision)] // ln 2's high part, 0x3f318000, exactly
#[inline(always)]
fn exp_non_positive(y: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_375;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const SHIFTER: f32 = 12_582_912.0; // 1.5 x 2^23
    let y = if y < -87.0 { -87.0 } else { y };
    let shifted = y * LOG2E + SHIFTER;
    let n = shifted - SHIFTER;
    let r = (y - n * LN2_HI) - n * LN2_LO;
    let p = (1.0f32 / 5040.0)
        .mul_add(r, 1.0 / 720.0)
        .mul_add(r, 1.0 / 120.0)
        .mul_add(r, 1.0 / 24.0)
        .mul_add(r, 1.0 / 6.0)
        .mul_add(r, 0.5)
        .mul_add(r, 1.0)
        .mul_add(r, 1.0);
    // The low bits of `shifted` hold n (two's complement, |n| < 2^22): 2^n is (n + 127) << 23.
    let n_bits = shifted.to_bits().wrapping_sub(SHIFTER.to_bits());
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23);
    p * scale
}

/// Elements per block of the vectorised loop: a whole number of AVX-512 registers.
const LANES: usize = 16;

struct GeluSlice<'a> {
    src: &'a [f32],
    dst: &'a mut [f32],
}

impl WithSimd for GeluSlice<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let mut src = self.src.chunks_exact(LANES);
        let mut dst = self.dst.chunks_exact_mut(LANES);
        for (d, s) in (&mut dst).zip(&mut src) {
            let s: &[f32; LANES] = s.try_into().expect("chunks_exact gives whole blocks");
            let d: &mut [f32; LANES] = d.try_into().expect("chunks_exact gives whole blocks");
            for (d, &s) in d.iter_mut().zip(s) {
                *d = gelu32(s);
            }
        }
        for (d, &s) in dst.into_remainder().iter_mut().zip(src.remainder()) {
            *d = gelu32(s);
        }
    }
}

/// `dst[i] = gelu32(src[i])` on the calling thread, with the widest vector unit the CPU has.
pub fn gelu_slice(src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "gelu: source and destination lengths");
    Arch::new().dispatch(GeluSlice { src, dst });
}

/// `gelu_slice` in place.
pub fn gelu_in_place(values: &mut [f32]) {
    struct InPlace<'a>(&'a mut [f32]);
    impl WithSimd for InPlace<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) {
            let mut chunks = self.0.chunks_exact_mut(LANES);
            for c in &mut chunks {
                let c: &mut [f32; LANES] = c.try_into().expect("chunks_exact gives whole blocks");
                for v in c.iter_mut() {
                    *v = gelu32(*v);
                }
            }
            for v in chunks.into_remainder() {
                *v = gelu32(*v);
            }
        }
    }
    Arch::new().dispatch(InPlace(values));
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::measure::check::gelu64;

    /// The bound the CUDA kernels are held to (lab-cuda's host kernel test): float32 arithmetic
    /// of a few ulp, `1 + erf` cancelling for negative x as in PyTorch's float32 GELU; plus one
    /// step of float32's subnormal grid, because halving an odd subnormal x cannot be exact
    /// (proptest found x = -2^-149, whose GELU rounds to -0).
    fn tolerance(x: f64, exact: f64) -> f64 {
        8.0 * f64::from(f32::EPSILON) * exact.abs()
            + 2.0 * f64::from(f32::EPSILON) * x.abs()
            + f64::from(f32::from_bits(1))
    }

    fn check(xs: &[f32]) {
        let mut got = vec![0f32; xs.len()];
        gelu_slice(xs, &mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            let exact = gelu64(f64::from(x));
            assert!(
                (f64::from(g) - exact).abs() <= tolerance(f64::from(x), exact),
                "gelu({x}) = {g}, exact {exact}"
            );
            assert_eq!(g.to_bits(), gelu32(x).to_bits(), "vector and scalar at {x}");
        }
    }

    #[test]
    fn matches_float64_on_a_dense_grid() {
        // Every 1/4096 over [-12, 12]: the polynomial's whole range, both signs, the tails.
        let xs: Vec<f32> = (-49_152..=49_152).map(|i| i as f32 / 4096.0).collect();
        check(&xs);
    }

    #[test]
    fn erf_is_within_abramowitz_and_stegun_s_bound_of_float64_erf() {
        // A&S 7.1.26 promises |error| <= 1.5e-7 in exact arithmetic; the float32 evaluation of
        // `1 - r t exp(-z^2)` adds roundings of r, t, exp and their product, a few ulp of 1 (the
        // same 8 ulp the GELU's relative term allows). Every 1/8192 over [-8, 8] (erf is +-1 in
        // float32 beyond about 3.9), then the GELU there: its largest error as a share of the
        // bound, beside libm's correctly rounded `erff` (the CPU device's erf before issue 12).
        let mut worst_erf = 0f64;
        let mut worst_share = 0f64;
        let mut libm_share = 0f64;
        for i in -65_536..=65_536 {
            let z = i as f32 / 8192.0;
            let err = (f64::from(erf(z)) - libm::erf(f64::from(z))).abs();
            worst_erf = worst_erf.max(err);
            let x = z * std::f32::consts::SQRT_2;
            let exact = gelu64(f64::from(x));
            let bound = tolerance(f64::from(x), exact);
            worst_share = worst_share.max((f64::from(gelu32(x)) - exact).abs() / bound);
            let with_libm = 0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2));
            libm_share = libm_share.max((f64::from(with_libm) - exact).abs() / bound);
        }
        eprintln!(
            "largest |erf32 - erf64| {worst_erf:.3e}; largest GELU error / bound {worst_share:.3} \
             (with libm's erff {libm_share:.3})"
        );
        assert!(
            worst_erf <= 1.5e-7 + 8.0 * f64::from(f32::EPSILON),
            "{worst_erf:e}"
        );
        assert!(worst_share <= 1.0, "{worst_share}");
    }

    #[test]
    fn matches_float64_at_the_edges() {
        let xs = [
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-30,
            -1e-30,
            1e-7,
            -1e-7,
            13.0,
            -13.0,
            50.0,
            -50.0,
            1e4,
            -1e4,
            f32::MAX,
        ];
        check(&xs);
        let mut out = [0f32; 3];
        gelu_slice(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN], &mut out);
        assert_eq!(out[0], f32::INFINITY);
        assert!(out[1] == 0.0 || out[1].is_nan(), "{}", out[1]);
        assert!(out[2].is_nan());
    }

    proptest::proptest! {
        #[test]
        fn any_finite_float_is_within_the_bound(bits in proptest::prelude::any::<u32>()) {
            let x = f32::from_bits(bits);
            proptest::prop_assume!(x.is_finite() && x.abs() < 1e30);
            check(&[x]);
        }
    }

    #[test]
    fn in_place_equals_out_of_place() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) / 37.0).collect();
        let mut out = vec![0f32; xs.len()];
        gelu_slice(&xs, &mut out);
        let mut inplace = xs.clone();
        gelu_in_place(&mut inplace);
        assert_eq!(out, inplace);
    }
}
