//! Bulk conversions between the storage types and float32, split across the device's threads.
//!
//! float16 goes through `half`'s slice conversions, which use the F16C instructions
//! (`vcvtph2ps`/`vcvtps2ph`) when the CPU has them and an exact software path otherwise.
//! bfloat16 is the upper half of a float32, so its conversions are a few integer operations per
//! element, written branch-free so that the compiler vectorises them (AVX2 or AVX-512, selected
//! at run time by `pulp`). Both round to nearest, ties to even, and give exactly what
//! `half::f16::from_f32` / `half::bf16::from_f32` give one element at a time.

use half::f16;
use half::slice::HalfFloatSliceExt;
use pulp::{Arch, Simd, WithSimd};

use crate::threads::for_each_part;
use lab::dtype::DType;

/// `dst[i] = src[i]` widened to float32, `src` holding `dtype` elements as raw bytes.
pub fn to_f32(threads: usize, dtype: DType, src: &[u8], dst: &mut [f32]) {
    match dtype {
        DType::Float32 => for_each_part(
            threads,
            bytemuck::cast_slice::<u8, f32>(src),
            dst,
            |s, d| d.copy_from_slice(s),
        ),
        DType::Float16 => {
            let src: &[f16] = bytemuck::cast_slice(src);
            for_each_part(threads, src, dst, |s, d| s.convert_to_f32_slice(d));
        }
        DType::Bfloat16 => {
            let src: &[u16] = bytemuck::cast_slice(src);
            for_each_part(threads, src, dst, |s, d| {
                Arch::new().dispatch(Bf16ToF32 { src: s, dst: d })
            });
        }
    }
}

/// `dst[i] = src[i]` rounded to `dtype` (nearest, ties to even), `dst` holding raw bytes.
pub fn from_f32(threads: usize, dtype: DType, src: &[f32], dst: &mut [u8]) {
    match dtype {
        DType::Float32 => for_each_part(
            threads,
            src,
            bytemuck::cast_slice_mut::<u8, f32>(dst),
            |s, d| d.copy_from_slice(s),
        ),
        DType::Float16 => {
            let dst: &mut [f16] = bytemuck::cast_slice_mut(dst);
            for_each_part(threads, src, dst, |s, d| d.convert_from_f32_slice(s));
        }
        DType::Bfloat16 => {
            let dst: &mut [u16] = bytemuck::cast_slice_mut(dst);
            for_each_part(threads, src, dst, |s, d| {
                Arch::new().dispatch(F32ToBf16 { src: s, dst: d })
            });
        }
    }
}

/// bfloat16 bits to float32, as `half::bf16::to_f32` (a NaN keeps its payload, made quiet).
#[inline(always)]
fn bf16_bits_to_f32(b: u16) -> f32 {
    let quiet = if b & 0x7fff > 0x7f80 { 0x0040 } else { 0 };
    f32::from_bits(u32::from(b | quiet) << 16)
}

/// float32 to bfloat16 bits, rounding to nearest even, as `half::bf16::from_f32` (a NaN keeps
/// the upper half of its payload, made quiet).
#[inline(always)]
fn f32_to_bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = (x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16) as u16;
    let nan = ((x >> 16) | 0x0040) as u16;
    if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }
}

struct Bf16ToF32<'a> {
    src: &'a [u16],
    dst: &'a mut [f32],
}

impl WithSimd for Bf16ToF32<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        for (d, &s) in self.dst.iter_mut().zip(self.src) {
            *d = bf16_bits_to_f32(s);
        }
    }
}

struct F32ToBf16<'a> {
    src: &'a [f32],
    dst: &'a mut [u16],
}

impl WithSimd for F32ToBf16<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        for (d, &s) in self.dst.iter_mut().zip(self.src) {
            *d = f32_to_bf16_bits(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn bfloat16_widening_equals_half_for_every_value() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut got = vec![0f32; all.len()];
        to_f32(2, DType::Bfloat16, bytemuck::cast_slice(&all), &mut got);
        for (&b, &g) in all.iter().zip(&got) {
            assert_eq!(
                g.to_bits(),
                bf16::from_bits(b).to_f32().to_bits(),
                "{b:#06x}"
            );
        }
    }

    #[test]
    fn float16_widening_equals_half_for_every_value() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut got = vec![0f32; all.len()];
        to_f32(2, DType::Float16, bytemuck::cast_slice(&all), &mut got);
        for (&b, &g) in all.iter().zip(&got) {
            let want = f16::from_bits(b).to_f32();
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{b:#06x}"
            );
        }
    }

    fn narrowing_matches_half(values: &[f32]) {
        for dtype in [DType::Float16, DType::Bfloat16] {
            let mut got = vec![0u16; values.len()];
            from_f32(2, dtype, values, bytemuck::cast_slice_mut(&mut got));
            for (&v, &g) in values.iter().zip(&got) {
                let want = match dtype {
                    DType::Float16 => f16::from_f32(v).to_bits(),
                    _ => bf16::from_f32(v).to_bits(),
                };
                let nan = |bits: u16| match dtype {
                    DType::Float16 => f16::from_bits(bits).is_nan(),
                    _ => bf16::from_bits(bits).is_nan(),
                };
                assert!(
                    g == want || (nan(g) && nan(want)),
                    "{dtype} {v:e}: {g:#06x} vs {want:#06x}"
                );
            }
        }
    }

    #[test]
    fn narrowing_rounds_ties_to_even_and_keeps_specials() {
        narrowing_matches_half(&[
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            1.0 + 2f32.powi(-11),
            -1.0 - 3.0 * 2f32.powi(-11),
            f32::MAX,
            -f32::MAX,
            f32::MIN_POSITIVE,
            1e-40,
            65520.0,
            65504.0,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffc1_2345),
        ]);
    }

    proptest::proptest! {
        #[test]
        fn narrowing_matches_half_on_any_bits(bits in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..300)) {
            let values: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
            narrowing_matches_half(&values);
        }
    }

    #[test]
    fn threaded_and_single_threaded_agree_on_a_large_slice() {
        let values: Vec<f32> = (0..200_000)
            .map(|i| (i as f32 * 0.37).sin() * 1e3)
            .collect();
        for dtype in DType::ALL {
            let mut one = vec![0u8; values.len() * dtype.size_bytes() as usize];
            let mut two = one.clone();
            from_f32(1, dtype, &values, &mut one);
            from_f32(3, dtype, &values, &mut two);
            assert_eq!(one, two);
            let (mut back1, mut back2) = (vec![0f32; values.len()], vec![0f32; values.len()]);
            to_f32(1, dtype, &one, &mut back1);
            to_f32(3, dtype, &two, &mut back2);
            assert_eq!(back1, back2);
            for (&v, &b) in values.iter().zip(&back1) {
                assert_eq!(b, dtype.round(v));
            }
        }
    }
}
