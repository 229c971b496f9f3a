//! The synthetic model's values: a counter-based generator, so that every weight and input
//! depends only on the seed, a stream number and the element's index. The CUDA input kernels
//! (`kernels/lab.cu`; lab-cuda's `kernels_on_host` tests compile them for the host and compare)
//! compute the same integers and the same f32 values bit for bit, which is what lets the
//! numerical check rebuild any input row on the host.

/// Stream of the synthetic inputs.
pub const STREAM_INPUTS: u64 = 0;
/// Stream of `linear1.weight`.
pub const STREAM_W1: u64 = 1;
/// Stream of `linear1.bias`.
pub const STREAM_B1: u64 = 2;
/// Stream of `linear2.weight`.
pub const STREAM_W2: u64 = 3;
/// Stream of `linear2.bias`.
pub const STREAM_B2: u64 = 4;

/// SplitMix64's finaliser: a bijective 64-bit mix with good avalanche.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 64 random bits of element `index` of `stream` under `seed`.
pub fn bits(seed: u64, stream: u64, index: u64) -> u64 {
    let key = mix64(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    mix64(key ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A value uniform in `[-1, 1)` with 24 random bits. Every step is exact in f32, so a device
/// computing it in f32 gets the same value.
pub fn symmetric_unit(seed: u64, stream: u64, index: u64) -> f32 {
    let k = (bits(seed, stream, index) >> 40) as u32; // 24 bits
    (k as f32) * (2.0f32).powi(-23) - 1.0
}

/// Element `index` of the synthetic inputs, before rounding to the dtype.
pub fn input_value(seed: u64, index: u64) -> f32 {
    symmetric_unit(seed, STREAM_INPUTS, index)
}

/// The bound PyTorch's `nn.Linear` uses for both weight and bias: `1 / sqrt(fan_in)`.
pub fn linear_bound(fan_in: usize) -> f32 {
    1.0 / (fan_in as f32).sqrt()
}

/// Element `index` of a parameter of a layer with `fan_in` inputs, uniform in `±1/sqrt(fan_in)`,
/// before rounding to the dtype.
pub fn parameter_value(seed: u64, stream: u64, fan_in: usize, index: u64) -> f32 {
    linear_bound(fan_in) * symmetric_unit(seed, stream, index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_in_range_and_deterministic() {
        for i in 0..10_000 {
            let v = input_value(7, i);
            assert!((-1.0..1.0).contains(&v));
            assert_eq!(v, input_value(7, i));
        }
        assert_ne!(input_value(0, 0), input_value(1, 0));
        assert_ne!(
            symmetric_unit(0, STREAM_W1, 5),
            symmetric_unit(0, STREAM_W2, 5)
        );
    }

    #[test]
    fn known_values_pin_the_generator() {
        // The CUDA kernel's tests compare against these; changing the generator changes them.
        assert_eq!(mix64(0), 0);
        assert_eq!(bits(0, 0, 0), mix64(mix64(0)));
        let k = (bits(0, 0, 1) >> 40) as f32;
        assert_eq!(input_value(0, 1), k / 8_388_608.0 - 1.0);
    }

    #[test]
    fn mean_is_near_zero() {
        let n = 100_000u64;
        let sum: f64 = (0..n).map(|i| f64::from(input_value(3, i))).sum();
        assert!((sum / n as f64).abs() < 0.01);
    }

    #[test]
    fn parameters_respect_the_linear_bound() {
        let b = linear_bound(64);
        assert_eq!(b, 0.125);
        for i in 0..1000 {
            let v = parameter_value(0, STREAM_W1, 64, i);
            assert!(v >= -b && v < b);
        }
    }
}
