//! What a config.json's `quantization_config` says about how a quantised checkpoint stores its
//! weights, and which tensors such a checkpoint packs.
//!
//! Real checkpoints quantise the linear layers of the decoder and keep the rest in 16 bits:
//! AutoAWQ and AutoGPTQ leave the embeddings, `lm_head`, norms, biases and routers as float16
//! tensors; gpt-oss's MXFP4 checkpoint keeps its attention, routers, embeddings and `lm_head` in
//! bfloat16 (its `modules_to_not_convert`); DeepSeek-V3's FP8 checkpoint keeps its embeddings,
//! `lm_head`, norms and router in bfloat16. Scales (and zero points, where the format has them)
//! come per group of a row, or per block.

use serde_json::Value;

use crate::config::{Config, Part, Role};
use crate::error::ModelError;

/// What a `quantization_config` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantization {
    /// `quant_method` (`awq`, `gptq`, `mxfp4`, `fp8`, `bitsandbytes`...).
    pub method: Option<String>,
    /// The quantised width in bits, when the config says it (or the method fixes it).
    pub bits: Option<u32>,
    /// How scales and zero points are laid out, when the config says it.
    pub scheme: Option<Scheme>,
    /// `modules_to_not_convert` (or `ignore`): module name patterns kept unquantised.
    pub not_converted: Vec<String>,
    /// `lm_head: true` (GPTQ): the output projection is quantised too.
    pub lm_head_quantised: bool,
}

/// Quantisation metadata: one scale (and zero point) per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// How the weights of one matrix are grouped.
    pub grouping: Grouping,
    /// Bits of one scale.
    pub scale_bits: u32,
    /// Bits of one zero point (0: none).
    pub zero_point_bits: u32,
}

/// How the elements of a [rows, columns] weight share scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Groups of this many consecutive columns within each row (AWQ, GPTQ `group_size`,
    /// MXFP4's 32).
    Columns(u64),
    /// Blocks of rows x columns (DeepSeek's FP8 `weight_block_size` [128, 128]).
    Blocks {
        /// Rows per block.
        rows: u64,
        /// Columns per block.
        columns: u64,
    },
    /// One scale per row (GPTQ `group_size` -1, per-channel formats).
    Rows,
}

/// Reads a `quantization_config` object.
pub(crate) fn parse(c: &Config<'_>) -> Result<Quantization, ModelError> {
    let method = c.str_opt("quant_method")?.map(str::to_ascii_lowercase);
    let bits_field = |key: &str| -> Result<Option<u32>, ModelError> {
        match c.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(b) if (1..=64).contains(&b) => Ok(Some(b as u32)),
                _ => Err(c.field_error(
                    key,
                    format!("is `{v}`; expected a whole number of bits from 1 to 64"),
                )),
            },
        }
    };
    let bits = match bits_field("bits")? {
        Some(b) => Some(b),
        None => bits_field("w_bit")?,
    };
    let group = |default: Option<u64>| -> Result<Option<Grouping>, ModelError> {
        for key in ["group_size", "q_group_size"] {
            match c.map.get(key) {
                None | Some(Value::Null) => continue,
                Some(v) if v.as_i64() == Some(-1) => return Ok(Some(Grouping::Rows)),
                Some(_) => return Ok(c.u64_opt(key)?.map(Grouping::Columns)),
            }
        }
        Ok(default.map(Grouping::Columns))
    };
    let flag = |key: &str| c.bool_or(key, false);
    let (bits, scheme) = match method.as_deref() {
        Some("awq") => {
            let bits = bits.unwrap_or(4);
            let zero = c.bool_or("zero_point", true)?;
            let grouping = group(Some(128))?.unwrap_or(Grouping::Columns(128));
            let scheme = Scheme {
                grouping,
                scale_bits: 16,
                zero_point_bits: if zero { bits } else { 0 },
            };
            (Some(bits), Some(scheme))
        }
        Some("gptq") => {
            // AutoGPTQ stores qzeros whether or not `sym` is set.
            let bits = bits.unwrap_or(4);
            let grouping = group(Some(128))?.unwrap_or(Grouping::Columns(128));
            let scheme = Scheme {
                grouping,
                scale_bits: 16,
                zero_point_bits: bits,
            };
            (Some(bits), Some(scheme))
        }
        Some("mxfp4") => (
            Some(4),
            Some(Scheme {
                grouping: Grouping::Columns(32),
                scale_bits: 8,
                zero_point_bits: 0,
            }),
        ),
        Some("fp8") => {
            let grouping = match c.map.get("weight_block_size") {
                None | Some(Value::Null) => Grouping::Rows,
                Some(v) => {
                    let pair = v.as_array().and_then(|a| match a.as_slice() {
                        [r, k] => Some((r.as_u64()?, k.as_u64()?)),
                        _ => None,
                    });
                    match pair {
                        Some((rows, columns)) if rows > 0 && columns > 0 => {
                            Grouping::Blocks { rows, columns }
                        }
                        _ => {
                            return Err(c.field_error(
                                "weight_block_size",
                                format!("is `{v}`; expected [rows, columns] such as [128, 128]"),
                            ));
                        }
                    }
                }
            };
            (
                Some(8),
                Some(Scheme {
                    grouping,
                    scale_bits: 32,
                    zero_point_bits: 0,
                }),
            )
        }
        Some("bitsandbytes") if flag("load_in_4bit")? => (
            Some(4),
            Some(Scheme {
                grouping: Grouping::Columns(64),
                scale_bits: 32,
                zero_point_bits: 0,
            }),
        ),
        Some("bitsandbytes") if flag("load_in_8bit")? => (
            Some(8),
            Some(Scheme {
                grouping: Grouping::Rows,
                scale_bits: 32,
                zero_point_bits: 0,
            }),
        ),
        _ => {
            let scheme = match (bits, group(None)?) {
                (Some(b), Some(grouping)) => Some(Scheme {
                    grouping,
                    scale_bits: 16,
                    zero_point_bits: b,
                }),
                _ => None,
            };
            (bits, scheme)
        }
    };
    let mut not_converted = Vec::new();
    for key in ["modules_to_not_convert", "ignore"] {
        match c.map.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for item in list {
                    let Some(s) = item.as_str() else {
                        return Err(c.field_error(
                            key,
                            format!("holds `{item}`; expected module names as strings"),
                        ));
                    };
                    not_converted.push(s.to_string());
                }
            }
            Some(v) => {
                return Err(
                    c.field_error(key, format!("is `{v}`; expected a list of module names"))
                );
            }
        }
    }
    Ok(Quantization {
        method,
        bits,
        scheme,
        not_converted,
        lm_head_quantised: c.bool_or("lm_head", false)?,
    })
}

/// The tensors a quantised checkpoint packs and the ones it keeps at 16 bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split<'a> {
    /// Packed at the quantised width.
    pub quantised: Vec<&'a Part>,
    /// Kept at 16 bits.
    pub kept: Vec<&'a Part>,
    /// Which rule decided, in words.
    pub rule: String,
    /// `modules_to_not_convert` entries that name no kind of tensor counted here (a single
    /// layer, an unknown module): not applied.
    pub not_applied: Vec<String>,
}

/// The kinds of tensor a `modules_to_not_convert` pattern names; `None` when it names a single
/// layer or a module not known here.
fn roles_named(pattern: &str) -> Option<&'static [Role]> {
    let p = pattern.trim().to_ascii_lowercase();
    let p = p.trim_end_matches(".weight").trim_end_matches(".*");
    // `model.layers.3.mlp` names one layer, not every layer's MLP.
    if p.split('.')
        .any(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let last = p.rsplit('.').next().unwrap_or(p);
    Some(if p.contains("lm_head") {
        &[Role::LmHead]
    } else if p.contains("embed") {
        &[Role::Embeddings]
    } else if p.contains("vision") || p.contains("visual") || p.contains("multi_modal_projector") {
        &[Role::Vision]
    } else if p.contains("router") || last == "gate" {
        &[Role::Router]
    } else if p.contains("shared_expert") {
        &[Role::SharedExperts]
    } else if p.contains("experts") {
        &[Role::Experts]
    } else if p.contains("attn") || p.contains("attention") {
        &[Role::Attention]
    } else if matches!(last, "mlp" | "feed_forward" | "block_sparse_moe") {
        &[Role::Mlp, Role::SharedExperts, Role::Experts, Role::Router]
    } else {
        return None;
    })
}

/// Splits `parts` as a quantised checkpoint stores them.
pub fn split<'a>(parts: &'a [Part], q: Option<&Quantization>) -> Split<'a> {
    let mut kept_roles: Vec<Role> = Vec::new();
    let mut not_applied = Vec::new();
    let patterns = q.map(|q| q.not_converted.as_slice()).unwrap_or_default();
    for pattern in patterns {
        match roles_named(pattern) {
            Some(roles) => kept_roles.extend_from_slice(roles),
            None => not_applied.push(pattern.clone()),
        }
    }
    let lm_head = q.is_some_and(|q| q.lm_head_quantised);
    let (mut quantised, mut kept) = (Vec::new(), Vec::new());
    for part in parts {
        let packable = part.role.is_linear() || (lm_head && part.role == Role::LmHead);
        if packable && !kept_roles.contains(&part.role) {
            quantised.push(part);
        } else {
            kept.push(part);
        }
    }
    let rule = if patterns.is_empty() {
        format!(
            "as AWQ, GPTQ and FP8 checkpoints store them: the linear layers of the decoder packed, \
             the embeddings{}, norms, biases, routers and any vision tower kept at 16 bits",
            if lm_head { "" } else { ", lm_head" }
        )
    } else {
        format!(
            "as the config's quantization_config says: the linear layers of the decoder packed \
             except `{}` (modules_to_not_convert), which stay at 16 bits with the embeddings{}, \
             norms, biases and routers",
            patterns.join("`, `"),
            if lm_head { "" } else { ", lm_head" }
        )
    };
    Split {
        quantised,
        kept,
        rule,
        not_applied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_name_kinds_of_tensor() {
        assert_eq!(
            roles_named("model.layers.*.self_attn"),
            Some(&[Role::Attention][..])
        );
        assert_eq!(
            roles_named("model.layers.*.mlp.router"),
            Some(&[Role::Router][..])
        );
        assert_eq!(
            roles_named("model.embed_tokens"),
            Some(&[Role::Embeddings][..])
        );
        assert_eq!(roles_named("lm_head"), Some(&[Role::LmHead][..]));
        assert_eq!(roles_named("visual"), Some(&[Role::Vision][..]));
        assert_eq!(
            roles_named("model.layers.*.mlp.gate"),
            Some(&[Role::Router][..])
        );
        assert_eq!(roles_named("model.layers.3.mlp"), None);
        assert_eq!(roles_named("something_else"), None);
    }
}
