//! Parameter counts and attention geometry from a Hugging Face `config.json`.
//!
//! Each family's formula mirrors the modules its transformers modelling file builds, tensor by
//! tensor, with the defaults of its configuration class for fields a config leaves out. Counts
//! are exact integers (checked arithmetic, so a hostile config overflows into an error, never a
//! wrong figure). An architecture not listed in [`KNOWN`] is refused by name.

use serde_json::{Map, Value};

use crate::error::ModelError;

/// The architectures counted from config.json alone (the `architectures` entry, or `model_type`).
pub const KNOWN: [&str; 8] = [
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "MixtralForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Phi3ForCausalLM",
];

/// The largest size accepted for any one config field (2^24): real vocabularies, widths and
/// depths are far below it, and it keeps every product of five sizes inside u128.
pub const MAX_DIMENSION: u64 = 1 << 24;

/// The attention geometry that sizes the KV cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attention {
    /// Decoder layers.
    pub layers: u64,
    /// Query heads per layer.
    pub heads: u64,
    /// Key/value heads per layer (fewer than `heads` with grouped-query attention).
    pub kv_heads: u64,
    /// Width of one head.
    pub head_dim: u64,
    /// Sliding-window attention: the window in tokens and how many layers use it.
    pub sliding_window: Option<SlidingWindow>,
}

impl Attention {
    /// Key and value elements cached per token over all layers: 2 x layers x kv_heads x head_dim.
    pub fn kv_elements_per_token(&self) -> u128 {
        2 * u128::from(self.layers) * u128::from(self.kv_heads) * u128::from(self.head_dim)
    }
}

/// Layers that attend only to the last `window` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    /// Tokens in the window.
    pub window: u64,
    /// Layers that use it (the others attend to the whole context).
    pub layers: u64,
}

/// What a config.json says about a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    /// The architecture's class name (`LlamaForCausalLM`).
    pub name: String,
    /// Every parameter.
    pub parameters: u64,
    /// Parameters used for one token: fewer than `parameters` for a mixture of experts.
    pub active_parameters: u64,
    /// The experts of a mixture of experts: (experts per layer, experts used per token).
    pub experts: Option<(u64, u64)>,
    /// The language model's attention geometry.
    pub attention: Attention,
    /// The stored dtype the config names (`torch_dtype` or `dtype`), e.g. `bfloat16`.
    pub dtype: Option<String>,
    /// Whether the config describes a quantised checkpoint (`quantization_config`).
    pub quantized: bool,
}

/// Reads a config.json's text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Architecture, ModelError> {
    let value: Value = serde_json::from_str(text).map_err(|err| ModelError::Json {
        file: file.to_string(),
        message: err.to_string(),
        expected: "a Hugging Face config.json object",
    })?;
    let Value::Object(root) = value else {
        return Err(ModelError::Json {
            file: file.to_string(),
            message: "the top level is not an object".to_string(),
            expected: "a Hugging Face config.json object",
        });
    };
    let c = Config {
        file,
        map: &root,
        prefix: "",
    };
    let name = architecture_name(&c)?;
    let overflow = || ModelError::Overflow {
        file: file.to_string(),
    };
    let (counts, attention, experts) = match name.as_str() {
        "LlamaForCausalLM" => dense(&c, Family::LLAMA)?,
        "MistralForCausalLM" => dense(&c, Family::MISTRAL)?,
        "Qwen2ForCausalLM" => dense(&c, Family::QWEN2)?,
        "Phi3ForCausalLM" => dense(&c, Family::PHI3)?,
        "Gemma2ForCausalLM" => dense(&c, Family::GEMMA2)?,
        "Gemma3ForCausalLM" => dense(&c, Family::GEMMA3_TEXT)?,
        "MixtralForCausalLM" => dense(&c, Family::MIXTRAL)?,
        "Gemma3ForConditionalGeneration" => {
            let text = c.nested("text_config")?;
            let (text_counts, attention, _) = dense(&text, Family::GEMMA3_TEXT)?;
            let vision = c.nested("vision_config")?;
            let vision_params = siglip_vision(&vision).ok_or_else(overflow)?;
            let text_hidden = text.u64_or("hidden_size", 2304)?;
            let vision_hidden = vision.u64_or("hidden_size", 768)?;
            // modeling_gemma3.py, Gemma3MultiModalProjector: mm_input_projection_weight
            // [vision hidden, text hidden] and mm_soft_emb_norm (RMSNorm over the vision hidden).
            let projector = vision_hidden
                .checked_mul(text_hidden)
                .and_then(|p| p.checked_add(vision_hidden))
                .ok_or_else(overflow)?;
            let extra = vision_params.checked_add(projector).ok_or_else(overflow)?;
            let total = text_counts.0.checked_add(extra).ok_or_else(overflow)?;
            let active = text_counts.1.checked_add(extra).ok_or_else(overflow)?;
            ((total, active), attention, None)
        }
        _ => {
            return Err(ModelError::UnknownArchitecture {
                file: file.to_string(),
                name,
                known: KNOWN.to_vec(),
            });
        }
    };
    let dtype = ["torch_dtype", "dtype"]
        .iter()
        .find_map(|k| root.get(*k).and_then(Value::as_str))
        .or_else(|| {
            root.get("text_config")
                .and_then(|t| t.get("torch_dtype").or_else(|| t.get("dtype")))
                .and_then(Value::as_str)
        })
        .map(str::to_string);
    Ok(Architecture {
        name,
        parameters: counts.0,
        active_parameters: counts.1,
        experts,
        attention,
        dtype,
        quantized: root.contains_key("quantization_config"),
    })
}

/// The architecture's name: the first of `architectures`, else a name from `model_type`.
fn architecture_name(c: &Config<'_>) -> Result<String, ModelError> {
    if let Some(list) = c.map.get("architectures") {
        let first = list
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_str);
        return first.map(str::to_string).ok_or_else(|| {
            c.field_error(
                "architectures",
                format!("is `{list}`; expected a list naming the model class, e.g. [\"LlamaForCausalLM\"]"),
            )
        });
    }
    let model_type = c
        .map
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            c.field_error(
                "architectures",
                "is missing, and so is `model_type`; expected one of them to name the architecture"
                    .to_string(),
            )
        })?;
    Ok(match model_type {
        "llama" => "LlamaForCausalLM",
        "mistral" => "MistralForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        "mixtral" => "MixtralForCausalLM",
        "gemma2" => "Gemma2ForCausalLM",
        "gemma3_text" => "Gemma3ForCausalLM",
        "gemma3" => "Gemma3ForConditionalGeneration",
        "phi3" => "Phi3ForCausalLM",
        other => other,
    }
    .to_string())
}

/// A config object (the root, or a nested `text_config`) and how its fields are named.
struct Config<'a> {
    file: &'a str,
    map: &'a Map<String, Value>,
    prefix: &'static str,
}

impl<'a> Config<'a> {
    fn field_error(&self, field: &str, problem: String) -> ModelError {
        ModelError::Field {
            file: self.file.to_string(),
            field: format!("{}{field}", self.prefix),
            problem,
        }
    }

    /// A nested object (`text_config`); absent means every default.
    fn nested(&self, key: &'static str) -> Result<Config<'a>, ModelError> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let prefix = match key {
            "text_config" => "text_config.",
            "vision_config" => "vision_config.",
            _ => "",
        };
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(Config {
                file: self.file,
                map: EMPTY.get_or_init(Map::new),
                prefix,
            }),
            Some(Value::Object(map)) => Ok(Config {
                file: self.file,
                map,
                prefix,
            }),
            Some(other) => Err(self.field_error(key, format!("is `{other}`; expected an object"))),
        }
    }

    /// A positive whole number up to [`MAX_DIMENSION`]; `None` when absent or null.
    fn u64_opt(&self, key: &str) -> Result<Option<u64>, ModelError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                match v.as_u64() {
                    Some(n) if n > MAX_DIMENSION => Err(self.field_error(
                        key,
                        format!(
                            "is {n}, larger than {MAX_DIMENSION}, beyond any real model's size; \
                         expected the model's real size"
                        ),
                    )),
                    Some(n) if n > 0 => Ok(Some(n)),
                    _ => Err(self
                        .field_error(key, format!("is `{v}`; expected a positive whole number"))),
                }
            }
        }
    }

    fn u64_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        Ok(self.u64_opt(key)?.unwrap_or(default))
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.field_error(key, format!("is `{v}`; expected true or false"))),
        }
    }
}

/// What distinguishes the decoder families: their configuration classes' defaults and the
/// tensors their modelling files add.
#[derive(Debug, Clone, Copy)]
struct Family {
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u64,
    heads: u64,
    /// `None`: as many KV heads as query heads.
    kv_heads: Option<u64>,
    /// `None`: hidden / heads.
    head_dim: Option<u64>,
    tie: bool,
    /// q, k and v projections carry a bias whatever the config says (Qwen2).
    qkv_bias_always: bool,
    /// RMSNorm weights per decoder layer.
    norms_per_layer: u64,
    /// Per-head RMSNorm on queries and keys (Gemma 3): 2 x head_dim per layer.
    qk_norm: bool,
    /// Mixture of experts defaults: (experts, experts per token).
    experts: Option<(u64, u64)>,
    /// Sliding-window layers: which layers slide, and the default window.
    sliding: Sliding,
}

#[derive(Debug, Clone, Copy)]
enum Sliding {
    /// Every layer uses `sliding_window` when the config sets it.
    AllWhenSet,
    /// Every layer, only when `use_sliding_window` is true.
    AllWhenEnabled,
    /// Even-indexed layers, window default 4096 (Gemma 2).
    Alternate,
    /// All layers but every sixth, window default 4096 (Gemma 3).
    FiveOfSix,
}

impl Family {
    /// modeling_llama.py (LlamaAttention, LlamaMLP, LlamaDecoderLayer, LlamaModel,
    /// LlamaForCausalLM) with configuration_llama.py's defaults: q/k/v/o projections with
    /// `attention_bias`, gate/up/down projections with `mlp_bias`, two RMSNorms per layer, a final
    /// norm, the embedding and an untied lm_head.
    const LLAMA: Family = Family {
        vocab: 32000,
        hidden: 4096,
        intermediate: 11008,
        layers: 32,
        heads: 32,
        kv_heads: None,
        head_dim: None,
        tie: false,
        qkv_bias_always: false,
        norms_per_layer: 2,
        qk_norm: false,
        experts: None,
        sliding: Sliding::AllWhenSet,
    };
    /// modeling_mistral.py: Llama's tensors without biases; configuration_mistral.py's defaults
    /// (14336 intermediate, 8 KV heads, sliding_window 4096 in v0.1 configs).
    const MISTRAL: Family = Family {
        intermediate: 14336,
        kv_heads: Some(8),
        ..Family::LLAMA
    };
    /// modeling_qwen2.py, Qwen2Attention: q_proj, k_proj and v_proj with bias=True, o_proj
    /// without; configuration_qwen2.py's defaults (vocab 151936, intermediate 22016); the
    /// sliding window only with `use_sliding_window`.
    const QWEN2: Family = Family {
        vocab: 151936,
        intermediate: 22016,
        qkv_bias_always: true,
        sliding: Sliding::AllWhenEnabled,
        ..Family::LLAMA
    };
    /// modeling_phi3.py: a fused qkv_proj [heads x head_dim + 2 x kv_heads x head_dim, hidden]
    /// and a fused gate_up_proj [2 x intermediate, hidden], no biases: the same count as Llama's
    /// separate projections; configuration_phi3.py's defaults (vocab 32064, hidden 3072,
    /// intermediate 8192).
    const PHI3: Family = Family {
        vocab: 32064,
        hidden: 3072,
        intermediate: 8192,
        ..Family::LLAMA
    };
    /// modeling_gemma2.py, Gemma2DecoderLayer: four RMSNorms per layer (input,
    /// post_attention, pre_feedforward, post_feedforward), head_dim 256, tied embeddings;
    /// configuration_gemma2.py's defaults; even-indexed layers use the sliding window.
    const GEMMA2: Family = Family {
        vocab: 256000,
        hidden: 2304,
        intermediate: 9216,
        layers: 26,
        heads: 8,
        kv_heads: Some(4),
        head_dim: Some(256),
        tie: true,
        norms_per_layer: 4,
        sliding: Sliding::Alternate,
        ..Family::LLAMA
    };
    /// modeling_gemma3.py, Gemma3Attention adds q_norm and k_norm (RMSNorm over head_dim) to
    /// Gemma 2's layer; configuration_gemma3.py's Gemma3TextConfig defaults (vocab 262208);
    /// five of every six layers slide.
    const GEMMA3_TEXT: Family = Family {
        vocab: 262208,
        qk_norm: true,
        sliding: Sliding::FiveOfSix,
        ..Family::GEMMA2
    };
    /// modeling_mixtral.py, MixtralSparseMoeBlock: a router `gate` Linear(hidden, experts,
    /// bias=False) and `num_local_experts` experts of w1, w2, w3 (each hidden x intermediate);
    /// `num_experts_per_tok` of them run per token. configuration_mixtral.py's defaults.
    const MIXTRAL: Family = Family {
        intermediate: 14336,
        kv_heads: Some(8),
        experts: Some((8, 2)),
        ..Family::LLAMA
    };
}

/// (total, active) parameters, the attention geometry and the experts of a decoder-only model.
#[allow(clippy::type_complexity)]
fn dense(
    c: &Config<'_>,
    f: Family,
) -> Result<((u64, u64), Attention, Option<(u64, u64)>), ModelError> {
    let vocab = c.u64_or("vocab_size", f.vocab)?;
    let hidden = c.u64_or("hidden_size", f.hidden)?;
    let intermediate = c.u64_or("intermediate_size", f.intermediate)?;
    let layers = c.u64_or("num_hidden_layers", f.layers)?;
    let heads = c.u64_or("num_attention_heads", f.heads)?;
    let kv_heads = c
        .u64_opt("num_key_value_heads")?
        .or(f.kv_heads)
        .unwrap_or(heads);
    let head_dim = match c.u64_opt("head_dim")?.or(f.head_dim) {
        Some(d) => d,
        None => {
            if hidden % heads != 0 {
                return Err(c.field_error(
                    "num_attention_heads",
                    format!(
                        "is {heads}, which does not divide hidden_size {hidden}, and no head_dim \
                         is given; expected a divisor of hidden_size or a head_dim field"
                    ),
                ));
            }
            hidden / heads
        }
    };
    if heads % kv_heads != 0 {
        return Err(c.field_error(
            "num_key_value_heads",
            format!(
                "is {kv_heads}, which does not divide num_attention_heads {heads}; expected a \
                 divisor of it (grouped-query attention)"
            ),
        ));
    }
    let tie = c.bool_or("tie_word_embeddings", f.tie)?;
    let attention_bias = c.bool_or("attention_bias", false)?;
    let mlp_bias = c.bool_or("mlp_bias", false)?;
    let experts = match f.experts {
        Some((e, k)) => {
            let e = c.u64_or("num_local_experts", e)?;
            let k = c.u64_or("num_experts_per_tok", k)?;
            if k > e {
                return Err(c.field_error(
                    "num_experts_per_tok",
                    format!("is {k}, more than num_local_experts {e}; expected at most {e}"),
                ));
            }
            Some((e, k))
        }
        None => None,
    };

    let n = |v: u64| u128::from(v);
    let (h, q, kv) = (n(hidden), n(heads) * n(head_dim), n(kv_heads) * n(head_dim));
    let mut attn = h * q + 2 * h * kv + q * h;
    if f.qkv_bias_always {
        attn += q + 2 * kv;
    } else if attention_bias {
        attn += q + 2 * kv + h;
    }
    if f.qk_norm {
        attn += 2 * n(head_dim);
    }
    let mut mlp = 3 * h * n(intermediate);
    if mlp_bias {
        mlp += 2 * n(intermediate) + h;
    }
    let norms = n(f.norms_per_layer) * h;
    let (layer_total, layer_active) = match experts {
        Some((e, k)) => {
            let router = h * n(e);
            (
                attn + norms + router + n(e) * mlp,
                attn + norms + router + n(k) * mlp,
            )
        }
        None => (attn + norms + mlp, attn + norms + mlp),
    };
    let embeddings = n(vocab) * h * if tie { 1 } else { 2 };
    let total = n(layers) * layer_total + h + embeddings;
    let active = n(layers) * layer_active + h + embeddings;
    let fit = |v: u128| {
        u64::try_from(v).map_err(|_| ModelError::Overflow {
            file: c.file.to_string(),
        })
    };
    let sliding_window = sliding(c, f, layers)?;
    Ok((
        (fit(total)?, fit(active)?),
        Attention {
            layers,
            heads,
            kv_heads,
            head_dim,
            sliding_window,
        },
        experts,
    ))
}

/// Which layers use a sliding window, per the family's modelling file.
fn sliding(c: &Config<'_>, f: Family, layers: u64) -> Result<Option<SlidingWindow>, ModelError> {
    let window = c.u64_opt("sliding_window")?;
    Ok(match f.sliding {
        Sliding::AllWhenSet => window.map(|window| SlidingWindow { window, layers }),
        Sliding::AllWhenEnabled => {
            if c.bool_or("use_sliding_window", false)? {
                window.map(|window| SlidingWindow { window, layers })
            } else {
                None
            }
        }
        Sliding::Alternate => Some(SlidingWindow {
            window: window.unwrap_or(4096),
            layers: layers.div_ceil(2),
        }),
        Sliding::FiveOfSix => {
            let pattern = c.u64_or("sliding_window_pattern", 6)?;
            Some(SlidingWindow {
                window: window.unwrap_or(4096),
                layers: layers - layers / pattern,
            })
        }
    })
}

/// modeling_siglip.py, SiglipVisionTransformer without its pooling head (Gemma 3 sets
/// `vision_use_head` false): the patch embedding Conv2d (channels x patch^2 x hidden + bias),
/// position embeddings ((image / patch)^2 x hidden), per layer two LayerNorms (weight and bias),
/// q/k/v/out projections with bias and fc1/fc2 with bias, then post_layernorm.
/// configuration_siglip.py's SiglipVisionConfig defaults.
fn siglip_vision(c: &Config<'_>) -> Option<u64> {
    let get = |k: &str, d: u64| c.u64_or(k, d).ok();
    let hidden = u128::from(get("hidden_size", 768)?);
    let intermediate = u128::from(get("intermediate_size", 3072)?);
    let layers = u128::from(get("num_hidden_layers", 12)?);
    let channels = u128::from(get("num_channels", 3)?);
    let image = u128::from(get("image_size", 224)?);
    let patch = u128::from(get("patch_size", 16)?);
    let positions = (image / patch).pow(2);
    let embeddings = channels * patch * patch * hidden + hidden + positions * hidden;
    let layer = 2 * 2 * hidden
        + 4 * (hidden * hidden + hidden)
        + (hidden * intermediate + intermediate)
        + (intermediate * hidden + hidden);
    u64::try_from(embeddings + layers * layer + 2 * hidden).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_architectures_are_refused_by_name_with_the_list() {
        let err = parse(r#"{"architectures":["FalconForCausalLM"]}"#, "config.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("architecture `FalconForCausalLM`"), "{err}");
        assert!(
            err.contains("LlamaForCausalLM, MistralForCausalLM"),
            "{err}"
        );
        assert!(
            err.contains("pass the model folder with its *.safetensors files"),
            "{err}"
        );
    }

    #[test]
    fn hostile_configs_are_refused_with_a_sentence() {
        for (json, says) in [
            ("[]", "the top level is not an object"),
            ("{", "is not valid JSON"),
            (
                r#"{"model_type":"llama","hidden_size":-1}"#,
                "`hidden_size` is `-1`; expected a positive whole number",
            ),
            (
                r#"{"model_type":"llama","hidden_size":4096.5}"#,
                "`hidden_size` is `4096.5`",
            ),
            (
                r#"{"model_type":"llama","hidden_size":"4096"}"#,
                "`hidden_size` is `\"4096\"`",
            ),
            (
                r#"{"model_type":"llama","num_attention_heads":5}"#,
                "does not divide hidden_size 4096",
            ),
            (
                r#"{"model_type":"llama","num_key_value_heads":5}"#,
                "does not divide num_attention_heads 32",
            ),
            (
                r#"{"model_type":"llama","vocab_size":16777216,"hidden_size":16777216,"intermediate_size":16777216,"num_hidden_layers":16777216,"num_attention_heads":1}"#,
                "more than 2^64 parameters",
            ),
            (
                r#"{"model_type":"llama","vocab_size":16777217}"#,
                "is 16777217, larger than 16777216, beyond any real model's size",
            ),
            (
                r#"{"model_type":"mixtral","num_experts_per_tok":9}"#,
                "more than num_local_experts 8",
            ),
            (
                r#"{"architectures":"LlamaForCausalLM"}"#,
                "`architectures` is",
            ),
            (
                r#"{}"#,
                "`architectures` is missing, and so is `model_type`",
            ),
            (
                r#"{"model_type":"gemma3","text_config":7}"#,
                "`text_config` is `7`; expected an object",
            ),
            (
                r#"{"model_type":"gemma3","text_config":{"hidden_size":0}}"#,
                "`text_config.hidden_size` is `0`",
            ),
            (
                r#"{"model_type":"llama","tie_word_embeddings":"yes"}"#,
                "expected true or false",
            ),
        ] {
            let err = parse(json, "config.json").unwrap_err().to_string();
            assert!(err.starts_with("config.json"), "{err}");
            assert!(err.contains(says), "wanted {says:?} in {err}");
        }
    }

    #[test]
    fn model_type_names_the_architecture_when_architectures_is_absent() {
        let a = parse(r#"{"model_type":"mistral"}"#, "c").unwrap();
        assert_eq!(a.name, "MistralForCausalLM");
        // configuration_mistral.py's defaults are Mistral 7B's sizes.
        assert_eq!(a.parameters, 7_241_732_096);
    }
}
