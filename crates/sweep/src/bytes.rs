//! A byte count on the command line (`--max-memory 6GiB`), read exactly.

/// What a byte count accepts, quoted in every refusal.
pub const BYTES_ACCEPTED: &str = "a whole number of bytes, optionally with a binary suffix: \
    1073741824, 512MiB, 6GiB (suffixes B, KiB, MiB, GiB, TiB)";

/// Why a byte count is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    /// Not a whole number with a known suffix.
    #[error("`{0}` is not a byte count; expected {BYTES_ACCEPTED}")]
    Invalid(String),
    /// Zero bytes: no run fits.
    #[error("`{0}` is zero bytes; no run fits in that (expected {BYTES_ACCEPTED})")]
    Zero(String),
    /// More than 2^64 - 1 bytes.
    #[error("`{0}` is more than 2^64 - 1 bytes")]
    TooLarge(String),
}

/// Parses `1073741824`, `512MiB`, `6GiB` (binary suffixes only: a GPU's memory is sold in GiB).
pub fn parse_bytes(text: &str) -> Result<u64, ByteSizeError> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = t.split_at(digits);
    let shift = match suffix.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return Err(ByteSizeError::Invalid(text.to_string())),
    };
    if number.is_empty() {
        return Err(ByteSizeError::Invalid(text.to_string()));
    }
    let value: u64 = number
        .parse()
        .map_err(|_| ByteSizeError::TooLarge(text.to_string()))?;
    let bytes = value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| ByteSizeError::TooLarge(text.to_string()))?;
    if bytes == 0 {
        return Err(ByteSizeError::Zero(text.to_string()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn suffixes() {
        assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("6 GiB"), Ok(6 << 30));
        assert_eq!(parse_bytes("3KiB"), Ok(3072));
        assert_eq!(parse_bytes("7B"), Ok(7));
        assert_eq!(parse_bytes("1TiB"), Ok(1 << 40));
    }

    #[test]
    fn refusals() {
        for text in ["", "GiB", "1.5GiB", "6GB", "-1", "6gib", "1e9"] {
            assert_eq!(
                parse_bytes(text),
                Err(ByteSizeError::Invalid(text.to_string())),
                "{text}"
            );
        }
        assert_eq!(parse_bytes("0MiB"), Err(ByteSizeError::Zero("0MiB".into())));
        assert!(matches!(
            parse_bytes("20000000TiB"),
            Err(ByteSizeError::TooLarge(_))
        ));
        assert!(matches!(
            parse_bytes("99999999999999999999"),
            Err(ByteSizeError::TooLarge(_))
        ));
    }

    proptest! {
        #[test]
        fn every_unit_round_trips(v in 1u64..1_000_000, unit in 0usize..5) {
            let (name, shift) = [("B", 0), ("KiB", 10), ("MiB", 20), ("GiB", 30), ("TiB", 40)][unit];
            prop_assert_eq!(parse_bytes(&format!("{v}{name}")), Ok(v << shift));
        }

        #[test]
        fn arbitrary_text_never_panics(text in ".{0,24}") {
            let _ = parse_bytes(&text);
        }
    }
}
