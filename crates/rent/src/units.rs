//! Reading counts from the command line and turning exact ratios into exact decimals.
//!
//! Everything here is integer arithmetic: a parameter count written `1.5B` is read digit by
//! digit, never through a binary float, so `1.00000000001B` is refused as not whole instead of
//! being silently rounded. Ratios (bytes per GiB, cents per result) are rounded once, half to
//! even, at [`PLACES`] decimal places.

use rust_decimal::Decimal;

/// Decimal places of every rounded figure the tool prints (GiB, GB, unit prices in cents).
pub const PLACES: u32 = 4;

/// `10^PLACES`, the scale factor of [`ratio_half_even`].
const SCALE: u128 = 10_000;

/// What `--parameters` accepts, quoted in every refusal.
pub const PARAMETERS_ACCEPTED: &str = "a positive whole number such as 7000000000, 7e9, \
    7_000_000_000, 7B, 70M, 1.5T or 1.5k (suffixes k, M, B, T; the result must be whole and fit \
    in 64 bits)";

/// A parameter count that cannot be used, with the text the user gave.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParametersError {
    /// Nothing was given.
    #[error("the parameter count is empty; expected {PARAMETERS_ACCEPTED}")]
    Empty,
    /// A minus sign.
    #[error("parameter count `{0}` is negative; expected {PARAMETERS_ACCEPTED}")]
    Negative(String),
    /// Not a number in any accepted notation.
    #[error("parameter count `{0}` is not a number; expected {PARAMETERS_ACCEPTED}")]
    NotANumber(String),
    /// A number with a fractional part left after the suffix or exponent is applied.
    #[error("parameter count `{0}` is not a whole number; expected {PARAMETERS_ACCEPTED}")]
    NotWhole(String),
    /// Zero parameters weigh nothing; almost certainly a typing mistake.
    #[error("parameter count `{0}` is zero; expected {PARAMETERS_ACCEPTED}")]
    Zero(String),
    /// More than `u64::MAX`.
    #[error(
        "parameter count `{0}` is larger than 18446744073709551615, the largest accepted; \
         expected {PARAMETERS_ACCEPTED}"
    )]
    TooLarge(String),
}

/// Reads a parameter count: plain digits (`7000000000`), digits with `_` separators
/// (`7_000_000_000`), an exponent (`7e9`, `1.5E10`) or a suffix (`k` = 10^3, `M` = 10^6,
/// `B` = 10^9, `T` = 10^12; either case), with an optional decimal point. The value must be a
/// whole number from 1 to `u64::MAX` *exactly*: `1.5B` is 1500000000, `1.00000000001B` is refused.
pub fn parse_parameters(text: &str) -> Result<u64, ParametersError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParametersError::Empty);
    }
    if let Some(rest) = t.strip_prefix('-') {
        // Say "negative" only when what follows is a number; `-abc` is simply not a number.
        return Err(match exact_count(rest) {
            Ok(_) | Err(Shape::NotWhole) | Err(Shape::TooLarge) => {
                ParametersError::Negative(text.to_string())
            }
            Err(Shape::Zero) => ParametersError::Zero(text.to_string()),
            Err(Shape::NotANumber) => ParametersError::NotANumber(text.to_string()),
        });
    }
    let unsigned = t.strip_prefix('+').unwrap_or(t);
    exact_count(unsigned).map_err(|shape| match shape {
        Shape::NotANumber => ParametersError::NotANumber(text.to_string()),
        Shape::NotWhole => ParametersError::NotWhole(text.to_string()),
        Shape::Zero => ParametersError::Zero(text.to_string()),
        Shape::TooLarge => ParametersError::TooLarge(text.to_string()),
    })
}

/// Why a text is not a usable count (the caller adds the text and the wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    NotANumber,
    NotWhole,
    Zero,
    TooLarge,
}

/// The exact value of an unsigned decimal with an optional exponent or suffix.
fn exact_count(t: &str) -> Result<u64, Shape> {
    let (body, suffix_exp) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 3),
        Some('m' | 'M') => (&t[..t.len() - 1], 6),
        Some('b' | 'B') => (&t[..t.len() - 1], 9),
        Some('t' | 'T') => (&t[..t.len() - 1], 12),
        _ => (t, 0),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) if suffix_exp == 0 => (&body[..at], Some(&body[at + 1..])),
        Some(_) => return Err(Shape::NotANumber), // `7e3M`: one scale at a time
        None => (body, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((i, f)) => (i, f),
        None => (mantissa, ""),
    };
    if !separated_digits(int_part) || !separated_digits(frac_part) {
        return Err(Shape::NotANumber);
    }
    let digits: String = int_part
        .chars()
        .chain(frac_part.chars())
        .filter(|c| *c != '_')
        .collect();
    if digits.is_empty() {
        return Err(Shape::NotANumber);
    }
    let frac_len = frac_part.chars().filter(|c| *c != '_').count() as i64;
    let significant = digits.trim_start_matches('0');

    // An exponent too long for i64 is still a valid number: it is only too large or too small.
    let written_exp = match exponent {
        None => Some(0),
        Some(e) => {
            let (negative, e_digits) = match e.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, e.strip_prefix('+').unwrap_or(e)),
            };
            if e_digits.is_empty() || !e_digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Shape::NotANumber);
            }
            match e_digits.parse::<i64>() {
                Ok(v) if v <= 1_000_000 => Some(if negative { -v } else { v }),
                _ if significant.is_empty() => Some(0),
                _ if negative => return Err(Shape::NotWhole),
                _ => return Err(Shape::TooLarge),
            }
        }
    };
    if significant.is_empty() {
        return Err(Shape::Zero);
    }
    let shift = written_exp.unwrap_or(0) + suffix_exp - frac_len;
    let whole: &str = if shift >= 0 {
        significant
    } else {
        let drop = usize::try_from(-shift).map_err(|_| Shape::NotWhole)?;
        if drop >= significant.len()
            || !significant[significant.len() - drop..]
                .bytes()
                .all(|b| b == b'0')
        {
            return Err(Shape::NotWhole);
        }
        &significant[..significant.len() - drop]
    };
    let zeros = usize::try_from(shift.max(0)).map_err(|_| Shape::TooLarge)?;
    if whole.len() + zeros > 20 {
        return Err(Shape::TooLarge);
    }
    let mut value: u128 = whole.parse().map_err(|_| Shape::NotANumber)?;
    for _ in 0..zeros {
        value = value.checked_mul(10).ok_or(Shape::TooLarge)?;
    }
    u64::try_from(value).map_err(|_| Shape::TooLarge)
}

/// Digits with optional single `_` separators between two digits (empty is fine here; the caller
/// checks that the number has at least one digit).
fn separated_digits(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
}

/// A count that must be a positive whole number written in digits (lots, accepted results).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountError {
    /// Nothing was given.
    #[error(
        "the {what} is empty; expected a positive whole number written in digits, such as 1 or 250"
    )]
    Empty {
        /// What was being counted.
        what: &'static str,
    },
    /// A minus sign.
    #[error(
        "the {what} `{value}` is negative; expected a positive whole number written in digits, such as 1 or 250"
    )]
    Negative {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// A decimal point.
    #[error(
        "the {what} `{value}` is not a whole number; expected a positive whole number written in digits, such as 1 or 250"
    )]
    NotWhole {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// An exponent (`1e3`): refused so a count is always written out, as the protocol records it.
    #[error(
        "the {what} `{value}` uses an exponent; expected a positive whole number written in digits only, such as 1000"
    )]
    Exponent {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// Zero.
    #[error("the {what} `{value}` is zero; expected a positive whole number (at least 1)")]
    Zero {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// Anything else.
    #[error(
        "the {what} `{value}` is not a number; expected a positive whole number written in digits, such as 1 or 250"
    )]
    NotANumber {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// Digits dressed up: a `+` sign, spaces, or a leading zero. Refused so that a count has one
    /// spelling, the one the grid and the JSON documents write back (`03` is not `3` to a
    /// spreadsheet, and a space or a sign usually means a mangled script variable).
    #[error(
        "the {what} `{value}` has {why}; expected a whole number written in plain digits, without \
         sign, spaces or leading zeros, such as 1 or 250"
    )]
    NotPlain {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
        /// What is in it besides the digits ("a `+` sign", "spaces", "a leading zero").
        why: &'static str,
    },
    /// More than `u64::MAX`.
    #[error("the {what} `{value}` is larger than 18446744073709551615, the largest accepted")]
    TooLarge {
        /// What was being counted.
        what: &'static str,
        /// The text given.
        value: String,
    },
}

/// A whole number written the one way this tool writes it: ASCII digits only, no sign, no
/// space, and no leading zero (`0` itself is fine). `None` for anything else, or above
/// `u64::MAX`. The grid's counts are read with this, so a row says each count one way.
pub fn plain_decimal(text: &str) -> Option<u64> {
    let plain = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    plain.then(|| text.parse::<u64>().ok()).flatten()
}

/// Reads a positive whole number written in plain digits ([`plain_decimal`]: no sign, spaces or
/// leading zeros). `what` names the count in the refusal ("number of lots").
pub fn parse_count(what: &'static str, text: &str) -> Result<u64, CountError> {
    match parse_whole(what, text)? {
        0 => Err(CountError::Zero {
            what,
            value: text.to_string(),
        }),
        n => Ok(n),
    }
}

/// Reads a whole number that may be zero (units a judge accepted), written in plain digits as
/// [`parse_count`] reads them; each refusal says what is wrong with the text.
pub fn parse_whole(what: &'static str, text: &str) -> Result<u64, CountError> {
    let value = text.to_string();
    if let Some(n) = plain_decimal(text) {
        return Ok(n);
    }
    if text.is_empty() {
        return Err(CountError::Empty { what });
    }
    let t = text.trim();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(text) {
        // Only digits, yet not plain: a leading zero (`007`, `00`), or more than u64::MAX.
        return Err(if text.starts_with('0') {
            CountError::NotPlain {
                what,
                value,
                why: "a leading zero",
            }
        } else {
            CountError::TooLarge { what, value }
        });
    }
    if t != text && (digits(t) || digits(t.strip_prefix('+').unwrap_or(t))) {
        return Err(CountError::NotPlain {
            what,
            value,
            why: "spaces around the digits",
        });
    }
    if let Some(rest) = t.strip_prefix('+')
        && digits(rest)
    {
        return Err(CountError::NotPlain {
            what,
            value,
            why: "a `+` sign",
        });
    }
    // Say as precisely as we can why the text is not a count.
    let unsigned = t.strip_prefix('+').unwrap_or(t);
    let numeric = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
            && s.bytes().any(|b| b.is_ascii_digit())
    };
    Err(if t.starts_with('-') && numeric(&t[1..]) {
        CountError::Negative { what, value }
    } else if numeric(unsigned) && unsigned.contains(['e', 'E']) {
        CountError::Exponent { what, value }
    } else if numeric(unsigned) && unsigned.contains('.') {
        CountError::NotWhole { what, value }
    } else {
        CountError::NotANumber { what, value }
    })
}

/// `numerator / denominator` rounded half to even at [`PLACES`] decimal places, exactly: the
/// quotient is computed on integers scaled by 10^4, and the remainder decides the last digit (a
/// remainder of exactly half goes to the even digit). `None` when the denominator is zero or the
/// result does not fit a [`Decimal`].
pub fn ratio_half_even(numerator: u128, denominator: u128) -> Option<Decimal> {
    if denominator == 0 {
        return None;
    }
    let scaled = numerator.checked_mul(SCALE)?;
    let mut quotient = scaled / denominator;
    let remainder = scaled % denominator;
    // Compare 2 x remainder with the denominator without overflowing.
    let twice = remainder.checked_mul(2);
    let round_up = match twice {
        None => true, // remainder > u128::MAX / 2 >= denominator / 2
        Some(t) if t > denominator => true,
        Some(t) if t == denominator => quotient % 2 == 1,
        Some(_) => false,
    };
    if round_up {
        quotient += 1;
    }
    let quotient = i128::try_from(quotient).ok()?;
    Decimal::try_from_i128_with_scale(quotient, PLACES).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepted_notations() {
        for (text, want) in [
            ("7000000000", 7_000_000_000u64),
            ("7e9", 7_000_000_000),
            ("7E9", 7_000_000_000),
            ("7_000_000_000", 7_000_000_000),
            ("7B", 7_000_000_000),
            ("7b", 7_000_000_000),
            ("70M", 70_000_000),
            ("1.5T", 1_500_000_000_000),
            ("1.5k", 1_500),
            ("1.5e3", 1_500),
            ("70e-1", 7),
            ("7.0", 7),
            ("+7", 7),
            (" 42 ", 42),
            ("18446744073709551615", u64::MAX),
            ("1_0.5_0k", 10_500),
        ] {
            assert_eq!(parse_parameters(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refused_notations_name_the_value() {
        use ParametersError::*;
        for (text, want) in [
            ("0", Zero("0".into())),
            (
                "0e99999999999999999999",
                Zero("0e99999999999999999999".into()),
            ),
            ("0.0B", Zero("0.0B".into())),
            ("-5", Negative("-5".into())),
            ("-7B", Negative("-7B".into())),
            ("abc", NotANumber("abc".into())),
            ("-abc", NotANumber("-abc".into())),
            ("1.5", NotWhole("1.5".into())),
            ("1.00000000001B", NotWhole("1.00000000001B".into())),
            ("7e-1", NotWhole("7e-1".into())),
            (
                "1e-99999999999999999999",
                NotWhole("1e-99999999999999999999".into()),
            ),
            (
                "18446744073709551616",
                TooLarge("18446744073709551616".into()),
            ),
            ("1e20", TooLarge("1e20".into())),
        ] {
            let err = parse_parameters(text).unwrap_err();
            assert_eq!(err, want, "{text}");
            assert!(err.to_string().contains(&format!("`{text}`")), "{err}");
            assert!(err.to_string().contains("expected"), "{err}");
        }
        for text in [
            "", "e9", "7e", "7e9M", "_7", "7_", "7__0", "7.5.5", "7 000", "1e+", "7G", "0x10",
            "NaN", "inf",
        ] {
            assert!(parse_parameters(text).is_err(), "{text:?} was accepted");
        }
        assert_eq!(
            parse_parameters("99999999999999999999999999999999T"),
            Err(TooLarge("99999999999999999999999999999999T".into()))
        );
        assert_eq!(
            parse_parameters("1e99999999999999999999"),
            Err(TooLarge("1e99999999999999999999".into()))
        );
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("number of lots", "2"), Ok(2));
        assert_eq!(parse_count("number of lots", "10"), Ok(10));
        assert_eq!(parse_whole("number of units", "0"), Ok(0));
        let cases = [
            ("0", "is zero"),
            ("00", "has a leading zero"),
            ("03", "has a leading zero"),
            ("+3", "has a `+` sign"),
            (" 3", "has spaces around the digits"),
            ("3 ", "has spaces around the digits"),
            (" +3", "has spaces around the digits"),
            ("\t3", "has spaces around the digits"),
            ("3 4", "is not a number"),
            ("   ", "is not a number"),
            ("\u{661}", "is not a number"),
            ("-3", "is negative"),
            ("-1", "is negative"),
            ("2.5", "is not a whole number"),
            ("1e3", "uses an exponent"),
            ("abc", "is not a number"),
            ("", "is empty"),
            ("18446744073709551616", "larger than"),
        ];
        for (text, says) in cases {
            let err = parse_count("number of lots", text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(err.contains("number of lots"), "{err}");
            if !text.is_empty() {
                assert!(err.contains(&format!("`{text}`")), "{err}");
            }
        }
    }

    #[test]
    fn rounding_is_half_even() {
        let d = |n, den| ratio_half_even(n, den).unwrap().to_string();
        assert_eq!(d(14_000_000_000, 1 << 30), "13.0385");
        assert_eq!(d(14_000_000_000, 1_000_000_000), "14.0000");
        // 1/20000 = 0.00005 exactly: a tie, goes to the even digit 0.
        assert_eq!(d(1, 20_000), "0.0000");
        // 3/20000 = 0.00015: a tie, goes to the even digit 2.
        assert_eq!(d(3, 20_000), "0.0002");
        assert_eq!(d(2, 3), "0.6667");
        assert_eq!(ratio_half_even(1, 0), None);
    }

    /// `n x 5^k` as decimal digits, by schoolbook multiplication on a digit string: an
    /// independent way to get `n / 2^k` exactly (it equals `n x 5^k / 10^k`).
    fn times_five_pow(n: u128, k: u32) -> Vec<u8> {
        let mut digits: Vec<u8> = n.to_string().bytes().map(|b| b - b'0').collect();
        for _ in 0..k {
            let mut carry = 0u8;
            for d in digits.iter_mut().rev() {
                let v = *d * 5 + carry;
                *d = v % 10;
                carry = v / 10;
            }
            if carry > 0 {
                digits.insert(0, carry);
            }
        }
        digits
    }

    /// Rounds the exact decimal `digits / 10^k` half-even to 4 places, working on the digits.
    fn round_digits(digits: &[u8], k: usize) -> String {
        let mut all = vec![0u8; (k + 1).saturating_sub(digits.len())];
        all.extend_from_slice(digits);
        let split = all.len() - k;
        let kept_len = split + 4;
        let mut kept: Vec<u8> = all[..kept_len].to_vec();
        let rest = &all[kept_len..];
        let first = rest.first().copied().unwrap_or(0);
        let beyond = rest.iter().skip(1).any(|d| *d != 0);
        let last_odd = kept.last().is_some_and(|d| d % 2 == 1);
        if first > 5 || (first == 5 && (beyond || last_odd)) {
            let mut i = kept.len();
            loop {
                i -= 1;
                if kept[i] == 9 {
                    kept[i] = 0;
                    if i == 0 {
                        kept.insert(0, 1);
                        break;
                    }
                } else {
                    kept[i] += 1;
                    break;
                }
            }
        }
        let s: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
        let (i, f) = s.split_at(s.len() - 4);
        let i = i.trim_start_matches('0');
        format!("{}.{}", if i.is_empty() { "0" } else { i }, f)
    }

    #[test]
    fn digit_helpers_agree_with_known_values() {
        assert_eq!(
            round_digits(&times_five_pow(14_000_000_000, 30), 30),
            "13.0385"
        );
        assert_eq!(round_digits(&times_five_pow(1, 30), 30), "0.0000");
        assert_eq!(round_digits(&[1, 5], 5), "0.0002"); // 0.00015 -> even
        assert_eq!(round_digits(&[2, 5], 5), "0.0002"); // 0.00025 -> even
    }

    proptest! {
        /// A count has one spelling: whatever text is accepted is the number's own decimal
        /// form, so `+3`, ` 3`, `03` and `3\n` never pass, and every refusal quotes the text.
        #[test]
        fn a_count_is_accepted_only_as_written_back(text in "[ +0-9\\-\t.eE_]{0,24}|\\PC{0,8}") {
            match parse_whole("number of units", &text) {
                Ok(n) => prop_assert_eq!(n.to_string(), text.as_str()),
                Err(CountError::Empty { .. }) => prop_assert!(text.trim().is_empty()),
                Err(e) => {
                    let shown = format!("`{text}`");
                    prop_assert!(e.to_string().contains(&shown), "{}", e);
                }
            }
            if let Ok(n) = parse_count("number of units", &text) {
                prop_assert!(n >= 1);
                prop_assert_eq!(n.to_string(), text.as_str());
            }
        }

        #[test]
        fn every_number_reads_back_and_every_dressing_is_refused(n in 0u64.., zeros in 1usize..4, spaces in 1usize..3) {
            let plain = n.to_string();
            prop_assert_eq!(parse_whole("n", &plain), Ok(n));
            prop_assert_eq!(parse_count("n", &plain).ok(), (n > 0).then_some(n));
            prop_assert_eq!(plain_decimal(&plain), Some(n));
            let pad = " ".repeat(spaces);
            for dressed in [
                format!("+{plain}"),
                format!("{}{plain}", "0".repeat(zeros)),
                format!("{pad}{plain}"),
                format!("{plain}{pad}"),
            ] {
                let refused = matches!(
                    parse_whole("n", &dressed),
                    Err(CountError::NotPlain { .. })
                );
                prop_assert!(refused, "{:?}", dressed);
                prop_assert_eq!(plain_decimal(&dressed), None);
            }
        }

        #[test]
        fn gib_matches_digit_arithmetic(bytes in 0u128..=(u64::MAX as u128) * 8) {
            let ours = ratio_half_even(bytes, 1 << 30).unwrap().to_string();
            prop_assert_eq!(ours, round_digits(&times_five_pow(bytes, 30), 30));
        }

        #[test]
        fn gb_matches_digit_arithmetic(bytes in 0u128..=(u64::MAX as u128) * 8) {
            // bytes / 10^9 is the digit string shifted by 9 places.
            let digits: Vec<u8> = bytes.to_string().bytes().map(|b| b - b'0').collect();
            prop_assert_eq!(ratio_half_even(bytes, 1_000_000_000).unwrap().to_string(), round_digits(&digits, 9));
        }

        #[test]
        fn ratio_matches_decimal_bounds(num in 0u64.., den in 1u64..) {
            // The rounded quotient q satisfies |q - num/den| <= 1/2 of the last place:
            // |q x 10^4 x den - num x 10^4| <= den / 2, checked on u128/i128 integers.
            let q = ratio_half_even(num as u128, den as u128).unwrap();
            let q_scaled = q.mantissa();
            prop_assert_eq!(q.scale(), 4);
            let diff = q_scaled * den as i128 - num as i128 * 10_000;
            prop_assert!(2 * diff.abs() <= den as i128);
        }

        #[test]
        fn plain_digits_round_trip(n in 1u64..) {
            prop_assert_eq!(parse_parameters(&n.to_string()), Ok(n));
            let mut grouped = String::new();
            let s = n.to_string();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    grouped.push('_');
                }
                grouped.push(c);
            }
            prop_assert_eq!(parse_parameters(&grouped), Ok(n));
            prop_assert_eq!(parse_count("count", &s), Ok(n));
        }

        #[test]
        fn suffixes_and_exponents_round_trip(m in 1u64..1_000_000, frac in 0u32..1000, suffix in 0usize..4) {
            let (letter, exp) = [("k", 3u32), ("M", 6), ("B", 9), ("T", 12)][suffix];
            let text = format!("{m}.{frac:03}{letter}");
            let want = (m as u128 * 1000 + frac as u128) * 10u128.pow(exp - 3);
            prop_assert_eq!(parse_parameters(&text), Ok(want as u64));
            let text = format!("{m}.{frac:03}e{exp}");
            prop_assert_eq!(parse_parameters(&text), Ok(want as u64));
        }

        #[test]
        fn fractions_below_one_unit_are_refused(m in 1u64..1_000_000, tail in 1u32..10) {
            // m.000000000001..9 B has a fraction of a parameter.
            let text = format!("{m}.{:012}B", tail);
            prop_assert_eq!(parse_parameters(&text), Err(ParametersError::NotWhole(text.clone())));
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse_parameters(&s);
            let _ = parse_count("count", &s);
        }
    }
}
