//! The weight estimate: how many bytes the parameters of a model occupy at a storage width.
//!
//! This is deliberately only the weights. Bytes are exact integers; the GiB (2^30 bytes) and GB
//! (10^9 bytes) figures are exact decimals rounded once, half to even, to 4 decimal places
//! (see [`crate::units::ratio_half_even`]), so `14000000000` bytes is `13.0385` GiB on every
//! machine. The reserve is not measured: it is the user's stated assumption, added to the
//! rounded weight GiB exactly (it has at most 4 decimal places itself), so the printed total is
//! always the printed weight plus the printed reserve.

use rust_decimal::Decimal;
use serde::Serialize;

use crate::units::{PLACES, ratio_half_even};

/// Bytes in a GiB.
pub const GIB: u128 = 1 << 30;
/// Bytes in a (decimal) GB.
pub const GB: u128 = 1_000_000_000;

/// The widest storage accepted, in bits per parameter (float64).
pub const MAX_BITS: u32 = 64;

/// The largest reserve accepted, in GiB: far beyond any GPU, small enough that every sum is exact.
pub const MAX_RESERVE_GIB: u64 = 1_000_000_000_000;

/// What the weight figure leaves out, in the order it is printed.
pub const EXCLUDED: [&str; 6] = [
    "activations",
    "KV cache",
    "quantisation metadata (scales, zero points)",
    "gradients",
    "optimizer state",
    "runtime libraries and CUDA context",
];

/// A bits-per-parameter value or reserve that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EstimateError {
    /// Not a whole number of bits from 1 to 64.
    #[error(
        "bits per parameter `{0}` is not accepted; expected a whole number from 1 to {MAX_BITS} \
         (for example 16 for float16/bfloat16, 8 for int8, 4 for int4)"
    )]
    Bits(String),
    /// Zero parameters.
    #[error("a parameter count of 0 is not accepted; expected at least 1")]
    ZeroParameters,
    /// A reserve that is negative.
    #[error(
        "reserve `{0}` GiB is negative; expected a non-negative decimal number of GiB such as 0, \
         4 or 2.5"
    )]
    NegativeReserve(String),
    /// NaN or an infinity.
    #[error(
        "reserve `{0}` is not a finite number; expected a non-negative decimal number of GiB \
         such as 0, 4 or 2.5"
    )]
    NonFiniteReserve(String),
    /// Not a plain decimal.
    #[error(
        "reserve `{0}` is not a decimal number; expected a non-negative decimal number of GiB \
         written with digits and at most one point, such as 0, 4 or 2.5"
    )]
    ReserveNotANumber(String),
    /// More than 4 decimal places: the total could not be exact at 4 places.
    #[error(
        "reserve `{0}` GiB has more than {PLACES} decimal places; expected a non-negative \
         decimal number of GiB with at most {PLACES} decimal places, such as 2.5"
    )]
    ReservePrecision(String),
    /// Beyond [`MAX_RESERVE_GIB`].
    #[error("reserve `{0}` GiB is larger than {MAX_RESERVE_GIB} GiB, the largest accepted")]
    ReserveTooLarge(String),
}

/// Reads `--bits`: a whole number from 1 to 64.
pub fn parse_bits(text: &str) -> Result<u32, EstimateError> {
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    match t.parse::<u32>() {
        Ok(bits) if (1..=MAX_BITS).contains(&bits) && t.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(bits)
        }
        _ => Err(EstimateError::Bits(text.to_string())),
    }
}

/// Reads `--reserve-gib`: a non-negative decimal written with digits (`4`, `2.5`, `0.25`), at
/// most 4 decimal places. `NaN`, infinities, exponents and negative values are refused.
pub fn parse_reserve_gib(text: &str) -> Result<Decimal, EstimateError> {
    let t = text.trim();
    let lowered = t.to_ascii_lowercase();
    let unsigned = lowered.trim_start_matches(['+', '-']);
    if matches!(unsigned, "nan" | "inf" | "infinity") {
        return Err(EstimateError::NonFiniteReserve(text.to_string()));
    }
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let plain = !body.is_empty()
        && body.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && body.bytes().filter(|b| *b == b'.').count() <= 1
        && body.bytes().any(|b| b.is_ascii_digit());
    if !plain {
        return Err(EstimateError::ReserveNotANumber(text.to_string()));
    }
    if t.starts_with('-') && body.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return Err(EstimateError::NegativeReserve(text.to_string()));
    }
    let (int_part, frac_part) = body.split_once('.').unwrap_or((body, ""));
    let frac_part = frac_part.trim_end_matches('0');
    if frac_part.len() > PLACES as usize {
        return Err(EstimateError::ReservePrecision(text.to_string()));
    }
    let int_part = int_part.trim_start_matches('0');
    if int_part.len() > 13 {
        return Err(EstimateError::ReserveTooLarge(text.to_string()));
    }
    let int_value: i128 = if int_part.is_empty() {
        0
    } else {
        int_part
            .parse()
            .map_err(|_| EstimateError::ReserveNotANumber(text.to_string()))?
    };
    let frac_value: i128 = format!("{frac_part:0<4}")
        .parse()
        .map_err(|_| EstimateError::ReserveNotANumber(text.to_string()))?;
    let scaled = int_value * 10_000 + frac_value;
    if scaled > i128::from(MAX_RESERVE_GIB) * 10_000 {
        return Err(EstimateError::ReserveTooLarge(text.to_string()));
    }
    Decimal::try_from_i128_with_scale(scaled, PLACES)
        .map_err(|_| EstimateError::ReserveTooLarge(text.to_string()))
}

/// The estimate, with the JSON keys `estimate --json` prints. Decimals serialise as strings with
/// exactly 4 decimal places.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Estimate {
    /// Number of parameters.
    pub parameters: u64,
    /// Storage width asked for, in bits.
    pub bits: u32,
    /// ceil(bits / 8): a 4-bit or 12-bit parameter still occupies whole bytes here (the seed's
    /// rule, the headline; `rent::memory` gives the packed size beside it).
    pub bytes_per_parameter: u32,
    /// parameters x bytes_per_parameter, exact (up to 8 x u64::MAX, hence u128).
    pub weight_bytes: u128,
    /// weight_bytes / 2^30, half-even to 4 places.
    pub weight_gib: Decimal,
    /// weight_bytes / 10^9, half-even to 4 places.
    pub weight_gb: Decimal,
    /// The user's assumed reserve in GiB (0 when not given), 4 places.
    pub reserve_gib: Decimal,
    /// weight_gib + reserve_gib: the weights plus the reserve, never less than the weights (in a
    /// model-aware estimate, `rent::memory`, model_gib + reserve_gib).
    pub total_gib: Decimal,
    /// What is not included.
    pub excluded: Vec<&'static str>,
}

/// Computes the estimate. `reserve_gib` is what [`parse_reserve_gib`] returns (or zero).
pub fn estimate(
    parameters: u64,
    bits: u32,
    reserve_gib: Decimal,
) -> Result<Estimate, EstimateError> {
    if parameters == 0 {
        return Err(EstimateError::ZeroParameters);
    }
    if !(1..=MAX_BITS).contains(&bits) {
        return Err(EstimateError::Bits(bits.to_string()));
    }
    // The checks of parse_reserve_gib, for callers that build the Decimal themselves.
    let reserve_text = reserve_gib.to_string();
    if reserve_gib.is_sign_negative() && !reserve_gib.is_zero() {
        return Err(EstimateError::NegativeReserve(reserve_text));
    }
    if reserve_gib.normalize().scale() > PLACES {
        return Err(EstimateError::ReservePrecision(reserve_text));
    }
    if reserve_gib > Decimal::from(MAX_RESERVE_GIB) {
        return Err(EstimateError::ReserveTooLarge(reserve_text));
    }
    let mut reserve = reserve_gib.abs();
    reserve.rescale(PLACES);

    let bytes_per_parameter = bits.div_ceil(8);
    let weight_bytes = u128::from(parameters) * u128::from(bytes_per_parameter);
    // Neither can fail: weight_bytes <= 8 x u64::MAX, so x 10^4 fits u128 and /2^30 fits Decimal.
    let weight_gib = ratio_half_even(weight_bytes, GIB).unwrap_or_default();
    let weight_gb = ratio_half_even(weight_bytes, GB).unwrap_or_default();
    // <= 1.4e15 + 1e12, far inside Decimal's range.
    let total_gib = weight_gib + reserve;
    Ok(Estimate {
        parameters,
        bits,
        bytes_per_parameter,
        weight_bytes,
        weight_gib,
        weight_gb,
        reserve_gib: reserve,
        total_gib,
        excluded: EXCLUDED.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_issue_example() {
        let e = estimate(7_000_000_000, 16, parse_reserve_gib("4").unwrap()).unwrap();
        assert_eq!(e.bytes_per_parameter, 2);
        assert_eq!(e.weight_bytes, 14_000_000_000);
        assert_eq!(e.weight_gib.to_string(), "13.0385");
        assert_eq!(e.weight_gb.to_string(), "14.0000");
        assert_eq!(e.reserve_gib.to_string(), "4.0000");
        assert_eq!(e.total_gib.to_string(), "17.0385");
        let json = serde_json::to_value(&e).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = vec![
            "parameters",
            "bits",
            "bytes_per_parameter",
            "weight_bytes",
            "weight_gib",
            "weight_gb",
            "reserve_gib",
            "total_gib",
            "excluded",
        ];
        let mut got = keys.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(json["weight_gib"], "13.0385");
        assert_eq!(json["total_gib"], "17.0385");
        assert_eq!(json["weight_bytes"], 14_000_000_000u64);
        assert_eq!(json["excluded"].as_array().unwrap().len(), 6);
    }

    #[test]
    fn bits_round_up_to_whole_bytes() {
        for (bits, bytes) in [
            (1, 1),
            (4, 1),
            (8, 1),
            (9, 2),
            (12, 2),
            (16, 2),
            (32, 4),
            (64, 8),
        ] {
            assert_eq!(
                estimate(10, bits, Decimal::ZERO)
                    .unwrap()
                    .bytes_per_parameter,
                bytes
            );
        }
    }

    #[test]
    fn largest_inputs_do_not_overflow() {
        let e = estimate(u64::MAX, 64, parse_reserve_gib("1000000000000").unwrap()).unwrap();
        assert_eq!(e.weight_bytes, u128::from(u64::MAX) * 8);
        assert_eq!(e.weight_gib.to_string(), "137438953472.0000");
    }

    #[test]
    fn bad_bits_are_refused() {
        for text in ["0", "65", "-1", "abc", "16.5", "1e1", ""] {
            let err = parse_bits(text).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{text}`")) && err.contains("1 to 64"),
                "{err}"
            );
        }
        assert_eq!(parse_bits("64"), Ok(64));
        assert_eq!(parse_bits("1"), Ok(1));
        assert!(estimate(1, 0, Decimal::ZERO).is_err());
        assert!(estimate(1, 65, Decimal::ZERO).is_err());
        assert_eq!(
            estimate(0, 16, Decimal::ZERO),
            Err(EstimateError::ZeroParameters)
        );
    }

    #[test]
    fn reserves() {
        for (text, want) in [
            ("4", "4.0000"),
            ("2.5", "2.5000"),
            ("0", "0.0000"),
            ("-0", "0.0000"),
            ("0.0001", "0.0001"),
            ("1.50000", "1.5000"),
            (".5", "0.5000"),
            ("+3", "3.0000"),
        ] {
            assert_eq!(parse_reserve_gib(text).unwrap().to_string(), want, "{text}");
        }
        for (text, says) in [
            ("-1", "is negative"),
            ("-0.5", "is negative"),
            ("NaN", "not a finite number"),
            ("nan", "not a finite number"),
            ("inf", "not a finite number"),
            ("-inf", "not a finite number"),
            ("Infinity", "not a finite number"),
            ("abc", "not a decimal number"),
            ("1e3", "not a decimal number"),
            ("", "not a decimal number"),
            ("1.2.3", "not a decimal number"),
            ("0.00001", "more than 4 decimal places"),
            ("1000000000001", "larger than"),
            ("99999999999999999999999999999999999", "larger than"),
        ] {
            let err = parse_reserve_gib(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(err.contains(&format!("`{text}`")), "{err}");
        }
        // Decimals built by a caller get the same checks.
        assert!(estimate(1, 8, Decimal::new(-1, 0)).is_err());
        assert!(estimate(1, 8, Decimal::new(1, 5)).is_err());
    }

    proptest! {
        /// Against an independent computation: bytes from u128 multiplication of the decimal
        /// strings' values, GiB compared by cross-multiplication (|gib x 2^30 - bytes| <= 2^30 / 2
        /// in units of 10^-4).
        #[test]
        fn estimate_is_exact(parameters in 1u64.., bits in 1u32..=64, reserve in 0u64..10_000_000) {
            let r = Decimal::new(reserve as i64, 4);
            let e = estimate(parameters, bits, r).unwrap();
            let per = (bits as u128).div_ceil(8);
            prop_assert_eq!(e.weight_bytes, parameters as u128 * per);
            let gib_scaled = e.weight_gib.mantissa();
            let diff = gib_scaled * (1i128 << 30) - e.weight_bytes as i128 * 10_000;
            prop_assert!(2 * diff.abs() <= 1i128 << 30);
            let gb_scaled = e.weight_gb.mantissa();
            let diff = gb_scaled * 1_000_000_000 - e.weight_bytes as i128 * 10_000;
            prop_assert!(2 * diff.abs() <= 1_000_000_000);
            prop_assert_eq!(e.total_gib.mantissa(), gib_scaled + reserve as i128);
            prop_assert_eq!(e.total_gib.scale(), 4);
        }

        #[test]
        fn reserve_round_trips(int in 0u64..1_000_000_000_000u64, frac in 0u32..10_000) {
            let text = format!("{int}.{frac:04}");
            let parsed = parse_reserve_gib(&text).unwrap();
            prop_assert_eq!(parsed.to_string(), text);
        }
    }
}
