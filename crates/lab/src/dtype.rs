//! The storage types a measurement can use.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Element type shared by weights, inputs and activations. Products always accumulate in float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary32.
    Float32,
    /// IEEE binary16.
    Float16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    Bfloat16,
}

impl DType {
    /// Every supported type, in the order `--help` lists them.
    pub const ALL: [DType; 3] = [DType::Float32, DType::Float16, DType::Bfloat16];

    /// Bytes one element occupies.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::Float32 => 4,
            DType::Float16 | DType::Bfloat16 => 2,
        }
    }

    /// The name used on the command line and in documents.
    pub fn name(self) -> &'static str {
        match self {
            DType::Float32 => "float32",
            DType::Float16 => "float16",
            DType::Bfloat16 => "bfloat16",
        }
    }

    /// Rounds an f32 to the nearest value this type can hold (round to nearest, ties to even),
    /// returned as f32, so that host-side references use exactly the values the device stores.
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::Float32 => x,
            DType::Float16 => half::f16::from_f32(x).to_f32(),
            DType::Bfloat16 => half::bf16::from_f32(x).to_f32(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype name that is not one of `float32`, `float16`, `bfloat16`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype {0:?}: expected float32, float16 or bfloat16")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    fn from_str(s: &str) -> Result<DType, UnknownDType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| UnknownDType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert!("fp16".parse::<DType>().is_err());
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2^-11 lies exactly between two float16 values; ties go to the even one (1.0).
        assert_eq!(DType::Float16.round(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(DType::Bfloat16.round(1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(DType::Float32.round(0.1), 0.1);
    }
}
