//! The model-aware estimate: the weights (stored, rounded per parameter, or packed), quantisation
//! metadata, the KV cache and, for fine-tuning, gradients and Adam states, all as exact bytes.
//!
//! The facts come from whatever read the model (safetensors headers or config.json, in the
//! `model` crate); this module only does the arithmetic, each assumption said in words.

use rust_decimal::Decimal;
use serde::Serialize;

use crate::estimate::{EXCLUDED, Estimate, EstimateError, GB, GIB, estimate};
use crate::units::ratio_half_even;

/// The default width of a quantisation scale, in bits (a float16 scale).
pub const DEFAULT_SCALE_BITS: u32 = 16;

/// What the estimate needs to know of a model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelFacts {
    /// Every parameter.
    pub parameters: u64,
    /// Parameters used per token (mixture of experts), else equal to `parameters`.
    pub active_parameters: u64,
    /// Exact stored bytes, from safetensors headers.
    pub stored_weight_bytes: Option<u128>,
    /// The stored width in bits (the dtype holding most bytes, or the config's `torch_dtype`).
    pub native_bits: Option<u32>,
    /// 2 x layers x KV heads x head_dim: key and value elements cached per token.
    pub kv_elements_per_token: Option<u128>,
}

/// The options of a model-aware estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// `--bits`: count the weights at this width instead of as stored.
    pub bits: Option<u32>,
    /// `--group-size`: one quantisation scale per this many parameters.
    pub group_size: Option<u64>,
    /// `--scale-bits`: the width of one scale.
    pub scale_bits: u32,
    /// `--context`: tokens per sequence in the KV cache.
    pub context: Option<u64>,
    /// `--batch`: sequences in the KV cache.
    pub batch: u64,
    /// `--kv-bits`: the width of one cached element (default: the model's stored width).
    pub kv_bits: Option<u32>,
    /// `--training adam`: add gradients and Adam states under mixed precision.
    pub training: bool,
    /// `--reserve-gib`.
    pub reserve_gib: Decimal,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            bits: None,
            group_size: None,
            scale_bits: DEFAULT_SCALE_BITS,
            context: None,
            batch: 1,
            kv_bits: None,
            training: false,
            reserve_gib: Decimal::ZERO,
        }
    }
}

/// Fine-tuning memory under mixed-precision Adam, each line labelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Training {
    /// The optimiser.
    pub optimizer: &'static str,
    /// The weights as counted above (16- or 32-bit).
    pub weights_bytes: u128,
    /// One gradient per parameter, at the weights' width.
    pub gradients_bytes: u128,
    /// A float32 master copy of 16-bit weights (0 when the weights are float32 already).
    pub master_weights_bytes: u128,
    /// Adam's first moment, float32.
    pub adam_first_moment_bytes: u128,
    /// Adam's second moment, float32.
    pub adam_second_moment_bytes: u128,
    /// The five lines together.
    pub total_bytes: u128,
}

/// The model-aware estimate: every key of [`Estimate`] and the ones it adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryEstimate {
    /// The weights, as `estimate --parameters` computes them (or the stored bytes).
    #[serde(flatten)]
    pub base: Estimate,
    /// Where `weight_bytes` comes from.
    pub weight_bytes_rule: &'static str,
    /// ceil(parameters x bits / 8), when bits is not a multiple of 8.
    pub packed_weight_bytes: Option<u128>,
    /// Scales of `--group-size` groups.
    pub quantisation_metadata_bytes: Option<u128>,
    /// Width of one cached K or V element.
    pub kv_bits: Option<u32>,
    /// KV cache bytes for one token of one sequence.
    pub kv_cache_bytes_per_token: Option<u128>,
    /// Tokens per sequence (`--context`).
    pub context: Option<u64>,
    /// Sequences (`--batch`).
    pub batch: u64,
    /// KV cache bytes for the whole context and batch.
    pub kv_cache_bytes: Option<u128>,
    /// Fine-tuning lines (`--training adam`).
    pub training: Option<Training>,
    /// Weights (packed when bits is not a multiple of 8) + metadata + KV cache + training
    /// states: the model's memory, the reserve excluded.
    pub total_bytes: u128,
    /// Every assumption behind the figures, in words.
    pub assumptions: Vec<String>,
}

/// Why a model-aware estimate cannot be made as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// A bad bits value, reserve or parameter count.
    #[error(transparent)]
    Estimate(#[from] EstimateError),
    /// `--context` for a model whose attention geometry is unknown.
    #[error(
        "--context needs the model's attention geometry (layers, KV heads, head size), which \
         only a config.json of a known architecture gives; pass the folder with its config.json"
    )]
    NoGeometry,
    /// `--group-size` without a quantised width.
    #[error("--group-size {0} needs --bits (the quantised width the scales belong to)")]
    GroupWithoutBits(u64),
    /// `--training adam` with weights that are not 16- or 32-bit.
    #[error(
        "--training adam counts mixed-precision training of 16-bit or float32 weights; the \
         weights here are {0}-bit: pass --bits 16 or --bits 32"
    )]
    TrainingBits(u32),
    /// A product beyond u128.
    #[error("the figures overflow 2^128 bytes; expected a real model's sizes")]
    Overflow,
}

/// Computes the model-aware estimate.
pub fn memory(facts: &ModelFacts, options: &MemoryOptions) -> Result<MemoryEstimate, MemoryError> {
    let n = u128::from(facts.parameters);
    let native = facts.native_bits.unwrap_or(16);
    let bits = options.bits.unwrap_or(native);
    let mut base = estimate(facts.parameters, bits, options.reserve_gib)?;
    let mut assumptions = Vec::new();
    let mut excluded: Vec<&'static str> = EXCLUDED.to_vec();
    let (rule, weights_for_total, packed) = match (options.bits, facts.stored_weight_bytes) {
        (None, Some(stored)) => {
            base.weight_bytes = stored;
            base.weight_gib = ratio_half_even(stored, GIB).ok_or(MemoryError::Overflow)?;
            base.weight_gb = ratio_half_even(stored, GB).ok_or(MemoryError::Overflow)?;
            (
                "stored: the sum of the safetensors tensors' bytes",
                stored,
                None,
            )
        }
        (Some(b), _) if b % 8 != 0 => {
            let packed = (n * u128::from(b)).div_ceil(8);
            assumptions.push(format!(
                "{b}-bit weights: weight_bytes keeps the whole-byte rule (ceil({b} / 8) = {} \
                 byte(s) per parameter); packed_weight_bytes = ceil(parameters x {b} / 8) is what \
                 packed {b}-bit storage holds, and it is the figure in total_bytes",
                b.div_ceil(8)
            ));
            ("parameters x ceil(bits / 8)", packed, Some(packed))
        }
        _ => ("parameters x ceil(bits / 8)", base.weight_bytes, None),
    };
    let metadata = match options.group_size {
        Some(g) => {
            if options.bits.is_none() {
                return Err(MemoryError::GroupWithoutBits(g));
            }
            let groups = n.div_ceil(u128::from(g));
            let bytes = (groups * u128::from(options.scale_bits)).div_ceil(8);
            assumptions.push(format!(
                "quantisation metadata (your assumption): one {}-bit scale per group of {g} \
                 parameters, over all parameters, no zero points: {bytes} bytes",
                options.scale_bits
            ));
            excluded.retain(|e| !e.starts_with("quantisation metadata"));
            Some(bytes)
        }
        None => None,
    };
    let kv_bits = options.kv_bits.unwrap_or(native);
    let (per_token, kv_total) = match (options.context, facts.kv_elements_per_token) {
        (Some(_), None) => return Err(MemoryError::NoGeometry),
        (context, Some(elements)) => {
            let per_token = (elements * u128::from(kv_bits)).div_ceil(8);
            let total = match context {
                Some(c) => Some(
                    per_token
                        .checked_mul(u128::from(c))
                        .and_then(|v| v.checked_mul(u128::from(options.batch)))
                        .ok_or(MemoryError::Overflow)?,
                ),
                None => None,
            };
            if let Some(c) = context {
                assumptions.push(format!(
                    "KV cache: 2 (key and value) x layers x KV heads x head size = {elements} \
                     elements per token at {kv_bits} bits, for all {c} tokens of each of {} \
                     sequence(s)",
                    options.batch
                ));
                excluded.retain(|e| *e != "KV cache");
            }
            (Some(per_token), total)
        }
        (None, None) => (None, None),
    };
    let training = if options.training {
        let width = options.bits.unwrap_or(native);
        let (weight_b, master_b) = match width {
            16 => (2u128, 4u128),
            32 => (4, 0),
            other => return Err(MemoryError::TrainingBits(other)),
        };
        let weights = n * weight_b;
        let t = Training {
            optimizer: "adam",
            weights_bytes: weights,
            gradients_bytes: weights,
            master_weights_bytes: n * master_b,
            adam_first_moment_bytes: n * 4,
            adam_second_moment_bytes: n * 4,
            total_bytes: weights * 2 + n * master_b + n * 8,
        };
        assumptions.push(format!(
            "training (mixed-precision Adam): {width}-bit weights and gradients, {}two float32 \
             Adam moments: {} bytes per parameter; activations are not included",
            if master_b > 0 {
                "a float32 master copy of the weights, "
            } else {
                ""
            },
            2 * weight_b + master_b + 8
        ));
        excluded.retain(|e| *e != "gradients" && *e != "optimizer state");
        Some(t)
    } else {
        None
    };
    // The training lines include the weights, which are counted once.
    let training_extra = training
        .as_ref()
        .map_or(0, |t| t.total_bytes - t.weights_bytes);
    let total_bytes = weights_for_total
        .checked_add(metadata.unwrap_or(0))
        .and_then(|v| v.checked_add(kv_total.unwrap_or(0)))
        .and_then(|v| v.checked_add(training_extra))
        .ok_or(MemoryError::Overflow)?;
    base.total_gib =
        ratio_half_even(total_bytes, GIB).ok_or(MemoryError::Overflow)? + base.reserve_gib;
    base.excluded = excluded;
    Ok(MemoryEstimate {
        base,
        weight_bytes_rule: rule,
        packed_weight_bytes: packed,
        quantisation_metadata_bytes: metadata,
        kv_bits: per_token.map(|_| kv_bits),
        kv_cache_bytes_per_token: per_token,
        context: options.context,
        batch: options.batch,
        kv_cache_bytes: kv_total,
        training,
        total_bytes,
        assumptions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1 8B's facts as config.json gives them.
    fn llama8b() -> ModelFacts {
        ModelFacts {
            parameters: 8_030_261_248,
            active_parameters: 8_030_261_248,
            stored_weight_bytes: None,
            native_bits: Some(16),
            kv_elements_per_token: Some(2 * 32 * 8 * 128),
        }
    }

    #[test]
    fn kv_cache_per_token_and_in_total() {
        let e = memory(
            &llama8b(),
            &MemoryOptions {
                context: Some(8192),
                batch: 2,
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        // 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131072 bytes per token.
        assert_eq!(e.kv_cache_bytes_per_token, Some(131_072));
        assert_eq!(e.kv_cache_bytes, Some(131_072 * 8192 * 2));
        assert_eq!(e.base.weight_bytes, 16_060_522_496);
        assert_eq!(e.total_bytes, 16_060_522_496 + 131_072 * 8192 * 2);
        assert!(!e.base.excluded.contains(&"KV cache"));
        // 8-bit KV halves it.
        let e8 = memory(
            &llama8b(),
            &MemoryOptions {
                context: Some(8192),
                kv_bits: Some(8),
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(e8.kv_cache_bytes_per_token, Some(65_536));
    }

    #[test]
    fn four_bits_are_packed_beside_the_whole_byte_rule() {
        let e = memory(
            &llama8b(),
            &MemoryOptions {
                bits: Some(4),
                group_size: Some(128),
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(e.base.bytes_per_parameter, 1);
        assert_eq!(e.base.weight_bytes, 8_030_261_248);
        assert_eq!(e.packed_weight_bytes, Some(4_015_130_624));
        // One 16-bit scale per 128 parameters: 8030261248 / 128 = 62736416 groups x 2 bytes.
        assert_eq!(e.quantisation_metadata_bytes, Some(125_472_832));
        assert_eq!(e.total_bytes, 4_015_130_624 + 125_472_832);
        // An odd count rounds the last byte up.
        let odd = ModelFacts {
            parameters: 3,
            active_parameters: 3,
            ..ModelFacts::default()
        };
        let e = memory(
            &odd,
            &MemoryOptions {
                bits: Some(3),
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(e.packed_weight_bytes, Some(2));
        assert_eq!(e.base.weight_bytes, 3);
        // A multiple of 8 has no packed figure.
        let e = memory(
            &llama8b(),
            &MemoryOptions {
                bits: Some(8),
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(e.packed_weight_bytes, None);
    }

    #[test]
    fn adam_training_is_sixteen_bytes_per_parameter_in_mixed_precision() {
        let e = memory(
            &llama8b(),
            &MemoryOptions {
                training: true,
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        let n = 8_030_261_248u128;
        let t = e.training.unwrap();
        assert_eq!(
            (
                t.weights_bytes,
                t.gradients_bytes,
                t.master_weights_bytes,
                t.adam_first_moment_bytes,
                t.adam_second_moment_bytes
            ),
            (2 * n, 2 * n, 4 * n, 4 * n, 4 * n)
        );
        assert_eq!(t.total_bytes, 16 * n);
        assert_eq!(e.total_bytes, 16 * n);
        assert_eq!(
            memory(
                &llama8b(),
                &MemoryOptions {
                    training: true,
                    bits: Some(4),
                    ..MemoryOptions::default()
                }
            ),
            Err(MemoryError::TrainingBits(4))
        );
    }

    #[test]
    fn stored_bytes_replace_the_rule_without_bits() {
        let facts = ModelFacts {
            stored_weight_bytes: Some(16_060_522_498),
            ..llama8b()
        };
        let e = memory(&facts, &MemoryOptions::default()).unwrap();
        assert_eq!(e.base.weight_bytes, 16_060_522_498);
        assert_eq!(e.total_bytes, 16_060_522_498);
        assert!(e.weight_bytes_rule.starts_with("stored"));
    }

    #[test]
    fn context_without_geometry_is_refused() {
        let facts = ModelFacts {
            kv_elements_per_token: None,
            ..llama8b()
        };
        let options = MemoryOptions {
            context: Some(1),
            ..MemoryOptions::default()
        };
        assert_eq!(memory(&facts, &options), Err(MemoryError::NoGeometry));
    }
}
