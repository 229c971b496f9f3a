//! Parameter counts, the tensors behind them and the attention geometry from a Hugging Face
//! `config.json`.
//!
//! Each family's formula mirrors the modules its transformers modelling file builds, tensor by
//! tensor, with the defaults of its configuration class for fields a config leaves out: the
//! count is the sum of a list of [`Part`]s (a tensor shape and how many of it the checkpoint
//! holds), so the quantised layout of `rent::memory` can tell the linear layers from the
//! embeddings, norms and routers. Counts are exact integers (checked arithmetic, so a hostile
//! config overflows into an error, never a wrong figure). An architecture not listed in
//! [`KNOWN`] is refused by name.

use serde_json::{Map, Value};

use crate::error::ModelError;
use crate::quant::{self, Quantization};

/// The architectures counted from config.json alone (the `architectures` entry, or `model_type`).
pub const KNOWN: [&str; 14] = [
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "MixtralForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Phi3ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Llama4ForConditionalGeneration",
    "Llama4ForCausalLM",
    "GptOssForCausalLM",
    "DeepseekV3ForCausalLM",
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
    /// Width of one head (for multi-head latent attention, the query/key head:
    /// qk_nope_head_dim + qk_rope_head_dim).
    pub head_dim: u64,
    /// Sliding-window (or chunked) attention: the window in tokens and how many layers use it.
    pub sliding_window: Option<SlidingWindow>,
    /// Multi-head latent attention (DeepSeek-V3): the elements one token caches per layer,
    /// kv_lora_rank + qk_rope_head_dim, one compressed latent instead of keys and values per head.
    pub latent_kv: Option<u64>,
}

impl Attention {
    /// Elements one token caches in one layer: the latent with multi-head latent attention, else
    /// 2 (key and value) x kv_heads x head_dim.
    pub fn kv_elements_per_layer(&self) -> u128 {
        match self.latent_kv {
            Some(latent) => u128::from(latent),
            None => 2 * u128::from(self.kv_heads) * u128::from(self.head_dim),
        }
    }

    /// Elements one token caches over all layers, as long as it is inside every window.
    pub fn kv_elements_per_token(&self) -> u128 {
        u128::from(self.layers) * self.kv_elements_per_layer()
    }
}

/// Layers that attend only to the last `window` tokens (or, chunked, to their own chunk of
/// `window` tokens): either way they cache at most `window` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    /// Tokens in the window.
    pub window: u64,
    /// Layers that use it (the others attend to the whole context).
    pub layers: u64,
    /// Chunked attention (Llama 4): a token attends within its chunk of `window` tokens.
    pub chunked: bool,
}

/// What a tensor does: it decides whether a quantised checkpoint packs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// The token embedding table.
    Embeddings,
    /// The output projection (absent when tied to the embeddings).
    LmHead,
    /// Linear weights of the attention blocks.
    Attention,
    /// Linear weights of dense MLPs.
    Mlp,
    /// Linear weights of shared experts (run for every token).
    SharedExperts,
    /// Linear weights of routed experts.
    Experts,
    /// The routers of a mixture of experts (and their biases).
    Router,
    /// Norm weights.
    Norm,
    /// Biases of linear layers.
    Bias,
    /// Other small tensors (attention sinks).
    Other,
    /// A vision tower and its projector.
    Vision,
}

impl Role {
    /// Linear weights of the decoder layers: what AWQ and GPTQ checkpoints quantise.
    pub fn is_linear(self) -> bool {
        matches!(
            self,
            Role::Attention | Role::Mlp | Role::SharedExperts | Role::Experts
        )
    }

    /// A few words for messages.
    pub fn label(self) -> &'static str {
        match self {
            Role::Embeddings => "embeddings",
            Role::LmHead => "lm_head",
            Role::Attention => "attention",
            Role::Mlp => "MLP",
            Role::SharedExperts => "shared experts",
            Role::Experts => "routed experts",
            Role::Router => "routers",
            Role::Norm => "norms",
            Role::Bias => "biases",
            Role::Other => "other small tensors",
            Role::Vision => "vision tower",
        }
    }
}

/// One kind of tensor of a checkpoint: its shape and how many of it there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The tensor's name in the modelling code, without the layer prefix (`self_attn.q_proj`).
    pub name: &'static str,
    /// What it does.
    pub role: Role,
    /// Rows: output features of a linear weight, 1 for a vector.
    pub rows: u64,
    /// Columns: input features of a linear weight, the length of a vector.
    pub columns: u64,
    /// How many such tensors (layers, or layers x experts).
    pub count: u64,
    /// How many of them one token uses (fewer than `count` for routed experts).
    pub active: u64,
}

impl Part {
    /// rows x columns x count.
    pub fn parameters(&self) -> u128 {
        u128::from(self.rows) * u128::from(self.columns) * u128::from(self.count)
    }
}

/// What a config.json says about a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    /// The architecture's class name (`LlamaForCausalLM`).
    pub name: String,
    /// Every parameter: the sum of `parts`.
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
    /// What the `quantization_config` says, when there is one.
    pub quantization: Option<Quantization>,
    /// The tensors the count is made of.
    pub parts: Vec<Part>,
    /// What the count leaves out or assumes, in sentences (a multi-token-prediction layer).
    pub notes: Vec<String>,
}

impl Architecture {
    /// The tensors a quantised checkpoint packs and the ones it keeps at 16 bits: by default
    /// (AWQ, GPTQ) the linear layers of the decoder are quantised and the embeddings, lm_head,
    /// routers, norms, biases and any vision tower kept; a `quantization_config` with
    /// `modules_to_not_convert` (or `lm_head: true`) changes that.
    pub fn quantised_split(&self) -> quant::Split<'_> {
        quant::split(&self.parts, self.quantization.as_ref())
    }
}

/// The tensors, geometry and notes one family's formula gives.
struct Built {
    parts: Parts,
    attention: Attention,
    experts: Option<(u64, u64)>,
    notes: Vec<String>,
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
    let built = match name.as_str() {
        "LlamaForCausalLM" => dense(&c, Family::LLAMA)?,
        "MistralForCausalLM" => dense(&c, Family::MISTRAL)?,
        "Qwen2ForCausalLM" => dense(&c, Family::QWEN2)?,
        "Phi3ForCausalLM" => dense(&c, Family::PHI3)?,
        "Gemma2ForCausalLM" => dense(&c, Family::GEMMA2)?,
        "Gemma3ForCausalLM" => dense(&c, Family::GEMMA3_TEXT)?,
        "MixtralForCausalLM" => dense(&c, Family::MIXTRAL)?,
        "Qwen3ForCausalLM" => dense(&c, Family::QWEN3)?,
        "Qwen3MoeForCausalLM" => qwen3_moe(&c)?,
        "GptOssForCausalLM" => gpt_oss(&c)?,
        "DeepseekV3ForCausalLM" => deepseek_v3(&c)?,
        "Llama4ForCausalLM" => {
            let tie = c.bool_or("tie_word_embeddings", false)?;
            llama4_text(&c, tie)?
        }
        "Llama4ForConditionalGeneration" => {
            let text = c.nested("text_config")?;
            // Llama4Config keeps tie_word_embeddings at the top level (false).
            let tie = c.bool_or("tie_word_embeddings", false)?;
            let mut built = llama4_text(&text, tie)?;
            let vision = c.nested("vision_config")?;
            let tower = llama4_vision(&vision)?.ok_or_else(|| c.overflow())?;
            let text_hidden = text.u64_or("hidden_size", 5120)?;
            // modeling_llama4.py, Llama4MultiModalProjector: linear_1 [vision_output_dim ->
            // text hidden], with a bias only if multi_modal_projector_bias.
            let out = vision.u64_or("vision_output_dim", 7680)?;
            let bias = vision.bool_or("multi_modal_projector_bias", false)?;
            let projector = u128::from(out) * u128::from(text_hidden)
                + if bias { u128::from(text_hidden) } else { 0 };
            let extra = u64::try_from(u128::from(tower) + projector).map_err(|_| c.overflow())?;
            built
                .parts
                .push("vision tower and projector", Role::Vision, 1, extra, 1);
            built
        }
        "Gemma3ForConditionalGeneration" => {
            let text = c.nested("text_config")?;
            let mut built = dense(&text, Family::GEMMA3_TEXT)?;
            let vision = c.nested("vision_config")?;
            let vision_params = siglip_vision(&vision).ok_or_else(|| c.overflow())?;
            let text_hidden = text.u64_or("hidden_size", 2304)?;
            let vision_hidden = vision.u64_or("hidden_size", 768)?;
            // modeling_gemma3.py, Gemma3MultiModalProjector: mm_input_projection_weight
            // [vision hidden, text hidden] and mm_soft_emb_norm (RMSNorm over the vision hidden).
            let projector = vision_hidden
                .checked_mul(text_hidden)
                .and_then(|p| p.checked_add(vision_hidden))
                .ok_or_else(|| c.overflow())?;
            let extra = vision_params
                .checked_add(projector)
                .ok_or_else(|| c.overflow())?;
            built
                .parts
                .push("vision tower and projector", Role::Vision, 1, extra, 1);
            built
        }
        _ => {
            return Err(ModelError::UnknownArchitecture {
                file: file.to_string(),
                name,
                known: KNOWN.to_vec(),
            });
        }
    };
    let (total, active) = built.parts.totals().ok_or_else(|| c.overflow())?;
    let fit = |v: u128| u64::try_from(v).map_err(|_| c.overflow());
    let dtype = ["torch_dtype", "dtype"]
        .iter()
        .find_map(|k| root.get(*k).and_then(Value::as_str))
        .or_else(|| {
            root.get("text_config")
                .and_then(|t| t.get("torch_dtype").or_else(|| t.get("dtype")))
                .and_then(Value::as_str)
        })
        .map(str::to_string);
    let quantization = match root.get("quantization_config") {
        None | Some(Value::Null) => None,
        Some(_) => Some(quant::parse(&c.nested("quantization_config")?)?),
    };
    Ok(Architecture {
        name,
        parameters: fit(total)?,
        active_parameters: fit(active)?,
        experts: built.experts,
        attention: built.attention,
        dtype,
        quantized: root.contains_key("quantization_config"),
        quantization,
        parts: built.parts.0,
        notes: built.notes,
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
        "qwen3" => "Qwen3ForCausalLM",
        "qwen3_moe" => "Qwen3MoeForCausalLM",
        "llama4" => "Llama4ForConditionalGeneration",
        "llama4_text" => "Llama4ForCausalLM",
        "gpt_oss" => "GptOssForCausalLM",
        "deepseek_v3" => "DeepseekV3ForCausalLM",
        other => other,
    }
    .to_string())
}

/// A config object (the root, or a nested `text_config`) and how its fields are named.
pub(crate) struct Config<'a> {
    pub(crate) file: &'a str,
    pub(crate) map: &'a Map<String, Value>,
    pub(crate) prefix: &'static str,
}

impl<'a> Config<'a> {
    pub(crate) fn field_error(&self, field: &str, problem: String) -> ModelError {
        ModelError::Field {
            file: self.file.to_string(),
            field: format!("{}{field}", self.prefix),
            problem,
        }
    }

    fn overflow(&self) -> ModelError {
        ModelError::Overflow {
            file: self.file.to_string(),
        }
    }

    /// A nested object (`text_config`); absent means every default.
    fn nested(&self, key: &'static str) -> Result<Config<'a>, ModelError> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let prefix = match key {
            "text_config" => "text_config.",
            "vision_config" => "vision_config.",
            "quantization_config" => "quantization_config.",
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
    pub(crate) fn u64_opt(&self, key: &str) -> Result<Option<u64>, ModelError> {
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

    pub(crate) fn u64_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        Ok(self.u64_opt(key)?.unwrap_or(default))
    }

    /// A whole number that may be 0 (counts of layers or experts that can be absent).
    fn count_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v.as_u64() {
                Some(n) if n <= MAX_DIMENSION => Ok(n),
                _ => Err(self.field_error(
                    key,
                    format!("is `{v}`; expected a whole number from 0 to {MAX_DIMENSION}"),
                )),
            },
        }
    }

    pub(crate) fn bool_or(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.field_error(key, format!("is `{v}`; expected true or false"))),
        }
    }

    pub(crate) fn str_opt(&self, key: &str) -> Result<Option<&'a str>, ModelError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.field_error(key, format!("is `{v}`; expected a string"))),
        }
    }

    /// A list of layer indices below `layers` (`moe_layers`, `mlp_only_layers`).
    fn layer_list(&self, key: &str, layers: u64) -> Result<Option<Vec<u64>>, ModelError> {
        let Some(v) = self.map.get(key) else {
            return Ok(None);
        };
        if v.is_null() {
            return Ok(None);
        }
        let bad = || {
            self.field_error(
                key,
                format!(
                    "is `{v}`; expected a list of layer indices from 0 to {}",
                    layers.saturating_sub(1)
                ),
            )
        };
        let list = v.as_array().ok_or_else(bad)?;
        let mut out = Vec::with_capacity(list.len());
        for item in list {
            match item.as_u64() {
                Some(i) if i < layers => {
                    if !out.contains(&i) {
                        out.push(i);
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(Some(out))
    }

    /// `layer_types` (transformers' per-layer attention kinds): how many layers are sliding and
    /// how many chunked; `None` when absent.
    fn layer_types(&self, layers: u64) -> Result<Option<(u64, u64)>, ModelError> {
        let Some(v) = self.map.get("layer_types") else {
            return Ok(None);
        };
        if v.is_null() {
            return Ok(None);
        }
        let bad = || {
            self.field_error(
                "layer_types",
                format!(
                    "is not a list of {layers} attention kinds (\"full_attention\", \
                     \"sliding_attention\", \"chunked_attention\"); expected one per layer"
                ),
            )
        };
        let list = v.as_array().ok_or_else(bad)?;
        if list.len() as u64 != layers {
            return Err(bad());
        }
        let (mut sliding, mut chunked) = (0, 0);
        for item in list {
            match item.as_str() {
                Some("sliding_attention") => sliding += 1,
                Some("chunked_attention") => chunked += 1,
                Some("full_attention") => {}
                _ => return Err(bad()),
            }
        }
        Ok(Some((sliding, chunked)))
    }
}

/// The tensors of a model as they are added.
#[derive(Debug, Default)]
struct Parts(Vec<Part>);

impl Parts {
    fn push(&mut self, name: &'static str, role: Role, rows: u64, columns: u64, count: u64) {
        self.push_active(name, role, rows, columns, count, count);
    }

    /// `active` of the `count` tensors run for one token (routed experts).
    fn push_active(
        &mut self,
        name: &'static str,
        role: Role,
        rows: u64,
        columns: u64,
        count: u64,
        active: u64,
    ) {
        if rows > 0 && columns > 0 && count > 0 {
            self.0.push(Part {
                name,
                role,
                rows,
                columns,
                count,
                active,
            });
        }
    }

    /// (total, active) parameters; `None` past u128.
    fn totals(&self) -> Option<(u128, u128)> {
        let (mut total, mut active) = (0u128, 0u128);
        for p in &self.0 {
            let shape = u128::from(p.rows).checked_mul(u128::from(p.columns))?;
            total = total.checked_add(shape.checked_mul(u128::from(p.count))?)?;
            active = active.checked_add(shape.checked_mul(u128::from(p.active))?)?;
        }
        Some((total, active))
    }

    /// The embedding table, the final norm and an untied lm_head.
    fn ends(&mut self, vocab: u64, hidden: u64, tie: bool) {
        self.push("embed_tokens", Role::Embeddings, vocab, hidden, 1);
        self.push("norm", Role::Norm, 1, hidden, 1);
        if !tie {
            self.push("lm_head", Role::LmHead, vocab, hidden, 1);
        }
    }

    /// q/k/v/o projections of grouped-query attention over `layers` layers.
    fn gqa(&mut self, layers: u64, g: &Geometry, bias: AttentionBias, qk_norm: bool) {
        let (h, q, kv) = (g.hidden, g.heads * g.head_dim, g.kv_heads * g.head_dim);
        self.push("self_attn.q_proj", Role::Attention, q, h, layers);
        self.push("self_attn.k_proj", Role::Attention, kv, h, layers);
        self.push("self_attn.v_proj", Role::Attention, kv, h, layers);
        self.push("self_attn.o_proj", Role::Attention, h, q, layers);
        if matches!(bias, AttentionBias::Qkv | AttentionBias::All) {
            self.push("self_attn.q_proj.bias", Role::Bias, 1, q, layers);
            self.push("self_attn.k_proj.bias", Role::Bias, 1, kv, layers);
            self.push("self_attn.v_proj.bias", Role::Bias, 1, kv, layers);
        }
        if matches!(bias, AttentionBias::All) {
            self.push("self_attn.o_proj.bias", Role::Bias, 1, h, layers);
        }
        if qk_norm {
            self.push("self_attn.q_norm", Role::Norm, 1, g.head_dim, layers);
            self.push("self_attn.k_norm", Role::Norm, 1, g.head_dim, layers);
        }
    }

    /// A gated MLP (gate, up, down) of width `intermediate`, `count` of them, `active` per token.
    #[allow(clippy::too_many_arguments)]
    fn swiglu(
        &mut self,
        names: [&'static str; 3],
        role: Role,
        hidden: u64,
        intermediate: u64,
        count: u64,
        active: u64,
        bias: bool,
    ) {
        let [gate, up, down] = names;
        self.push_active(gate, role, intermediate, hidden, count, active);
        self.push_active(up, role, intermediate, hidden, count, active);
        self.push_active(down, role, hidden, intermediate, count, active);
        if bias {
            self.push_active(
                "mlp.bias",
                Role::Bias,
                1,
                2 * intermediate + hidden,
                count,
                active,
            );
        }
    }
}

/// Which attention projections carry a bias.
#[derive(Debug, Clone, Copy)]
enum AttentionBias {
    None,
    /// q, k and v (Qwen2).
    Qkv,
    /// q, k, v and o (`attention_bias`).
    All,
}

/// The sizes every decoder shares.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    vocab: u64,
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
}

/// Reads the shared sizes with a family's defaults, checking that the heads divide.
fn geometry(
    c: &Config<'_>,
    vocab: u64,
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: Option<u64>,
    head_dim: Option<u64>,
) -> Result<Geometry, ModelError> {
    let vocab = c.u64_or("vocab_size", vocab)?;
    let hidden = c.u64_or("hidden_size", hidden)?;
    let layers = c.u64_or("num_hidden_layers", layers)?;
    let heads = c.u64_or("num_attention_heads", heads)?;
    let kv_heads = c
        .u64_opt("num_key_value_heads")?
        .or(kv_heads)
        .unwrap_or(heads);
    let head_dim = match c.u64_opt("head_dim")?.or(head_dim) {
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
    Ok(Geometry {
        vocab,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
    })
}

/// Experts per layer and per token, checked.
fn experts(c: &Config<'_>, e_key: &str, e: u64, k: u64) -> Result<(u64, u64), ModelError> {
    let e = c.u64_or(e_key, e)?;
    let k = c.u64_or("num_experts_per_tok", k)?;
    if k > e {
        return Err(c.field_error(
            "num_experts_per_tok",
            format!("is {k}, more than {e_key} {e}; expected at most {e}"),
        ));
    }
    Ok((e, k))
}

/// What distinguishes the dense decoder families (and Mixtral): their configuration classes'
/// defaults and the tensors their modelling files add.
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
    /// Per-head RMSNorm on queries and keys (Gemma 3, Qwen3): 2 x head_dim per layer.
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
    /// With `use_sliding_window`, the layers from `max_window_layers` on (Qwen2, Qwen3).
    FromMaxWindowLayers,
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
    /// sliding window only with `use_sliding_window`, on the layers from `max_window_layers` on.
    const QWEN2: Family = Family {
        vocab: 151936,
        intermediate: 22016,
        qkv_bias_always: true,
        sliding: Sliding::FromMaxWindowLayers,
        ..Family::LLAMA
    };
    /// modeling_qwen3.py, Qwen3Attention: Llama's projections (bias only with
    /// `attention_bias`) plus q_norm and k_norm (RMSNorm over head_dim); configuration_qwen3.py's
    /// defaults (vocab 151936, intermediate 22016, head_dim 128).
    const QWEN3: Family = Family {
        vocab: 151936,
        intermediate: 22016,
        head_dim: Some(128),
        qk_norm: true,
        sliding: Sliding::FromMaxWindowLayers,
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

/// The dense decoder families and Mixtral.
fn dense(c: &Config<'_>, f: Family) -> Result<Built, ModelError> {
    let g = geometry(
        c, f.vocab, f.hidden, f.layers, f.heads, f.kv_heads, f.head_dim,
    )?;
    let intermediate = c.u64_or("intermediate_size", f.intermediate)?;
    let tie = c.bool_or("tie_word_embeddings", f.tie)?;
    let attention_bias = c.bool_or("attention_bias", false)?;
    let mlp_bias = c.bool_or("mlp_bias", false)?;
    let experts = match f.experts {
        Some((e, k)) => Some(experts(c, "num_local_experts", e, k)?),
        None => None,
    };
    let mut p = Parts::default();
    let l = g.layers;
    let bias = if f.qkv_bias_always {
        AttentionBias::Qkv
    } else if attention_bias {
        AttentionBias::All
    } else {
        AttentionBias::None
    };
    p.gqa(l, &g, bias, f.qk_norm);
    match experts {
        Some((e, k)) => {
            p.push("block_sparse_moe.gate", Role::Router, e, g.hidden, l);
            p.swiglu(
                [
                    "block_sparse_moe.experts.w1",
                    "block_sparse_moe.experts.w3",
                    "block_sparse_moe.experts.w2",
                ],
                Role::Experts,
                g.hidden,
                intermediate,
                l * e,
                l * k,
                mlp_bias,
            );
        }
        None => p.swiglu(
            ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
            Role::Mlp,
            g.hidden,
            intermediate,
            l,
            l,
            mlp_bias,
        ),
    }
    p.push("layernorms", Role::Norm, 1, g.hidden, l * f.norms_per_layer);
    p.ends(g.vocab, g.hidden, tie);
    let sliding_window = sliding(c, f.sliding, l)?;
    Ok(Built {
        parts: p,
        attention: Attention {
            layers: l,
            heads: g.heads,
            kv_heads: g.kv_heads,
            head_dim: g.head_dim,
            sliding_window,
            latent_kv: None,
        },
        experts,
        notes: Vec::new(),
    })
}

/// Which layers use a sliding window: `layer_types` when the config lists them, else the
/// family's modelling file.
fn sliding(
    c: &Config<'_>,
    rule: Sliding,
    layers: u64,
) -> Result<Option<SlidingWindow>, ModelError> {
    let window = c.u64_opt("sliding_window")?;
    if let Some((sliding, _)) = c.layer_types(layers)? {
        return windowed(
            c,
            sliding,
            window.or(match rule {
                Sliding::Alternate | Sliding::FiveOfSix => Some(4096),
                _ => None,
            }),
            false,
        );
    }
    Ok(match rule {
        Sliding::AllWhenSet => window.map(|window| SlidingWindow {
            window,
            layers,
            chunked: false,
        }),
        Sliding::FromMaxWindowLayers => {
            if c.bool_or("use_sliding_window", false)? {
                let full = c.count_or("max_window_layers", 28)?.min(layers);
                let window = window.unwrap_or(4096);
                (layers > full).then_some(SlidingWindow {
                    window,
                    layers: layers - full,
                    chunked: false,
                })
            } else {
                None
            }
        }
        Sliding::Alternate => Some(SlidingWindow {
            window: window.unwrap_or(4096),
            layers: layers.div_ceil(2),
            chunked: false,
        }),
        Sliding::FiveOfSix => {
            let pattern = c.u64_or("sliding_window_pattern", 6)?;
            Some(SlidingWindow {
                window: window.unwrap_or(4096),
                layers: layers - layers / pattern,
                chunked: false,
            })
        }
    })
}

/// `layers` windowed layers of `window` tokens (none when `layers` is 0).
fn windowed(
    c: &Config<'_>,
    layers: u64,
    window: Option<u64>,
    chunked: bool,
) -> Result<Option<SlidingWindow>, ModelError> {
    if layers == 0 {
        return Ok(None);
    }
    let field = if chunked {
        "attention_chunk_size"
    } else {
        "sliding_window"
    };
    let window = window.ok_or_else(|| {
        c.field_error(
            field,
            format!("is missing, yet {layers} layer(s) use it; expected the window in tokens"),
        )
    })?;
    Ok(Some(SlidingWindow {
        window,
        layers,
        chunked,
    }))
}

/// modeling_qwen3_moe.py: Qwen3's attention (q_norm, k_norm); on every layer `i` with
/// (i + 1) % decoder_sparse_step == 0 and not in `mlp_only_layers`, Qwen3MoeSparseMoeBlock (a
/// router `gate` Linear(hidden, num_experts, bias=False) and `num_experts` experts of
/// gate/up/down at moe_intermediate_size, no shared expert), else a dense MLP at
/// intermediate_size. configuration_qwen3_moe.py's defaults.
fn qwen3_moe(c: &Config<'_>) -> Result<Built, ModelError> {
    let g = geometry(c, 151936, 2048, 24, 32, Some(4), None)?;
    let intermediate = c.u64_or("intermediate_size", 6144)?;
    let moe_intermediate = c.u64_or("moe_intermediate_size", 768)?;
    let (e, k) = experts(c, "num_experts", 128, 8)?;
    let step = c.u64_or("decoder_sparse_step", 1)?;
    let mlp_only = c
        .layer_list("mlp_only_layers", g.layers)?
        .unwrap_or_default();
    let moe_layers = (0..g.layers)
        .filter(|i| !mlp_only.contains(i) && (i + 1).is_multiple_of(step))
        .count() as u64;
    let dense_layers = g.layers - moe_layers;
    let tie = c.bool_or("tie_word_embeddings", false)?;
    let bias = if c.bool_or("attention_bias", false)? {
        AttentionBias::All
    } else {
        AttentionBias::None
    };
    let mut p = Parts::default();
    p.gqa(g.layers, &g, bias, true);
    p.push("mlp.gate", Role::Router, e, g.hidden, moe_layers);
    p.swiglu(
        [
            "mlp.experts.gate_proj",
            "mlp.experts.up_proj",
            "mlp.experts.down_proj",
        ],
        Role::Experts,
        g.hidden,
        moe_intermediate,
        moe_layers * e,
        moe_layers * k,
        false,
    );
    p.swiglu(
        ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
        Role::Mlp,
        g.hidden,
        intermediate,
        dense_layers,
        dense_layers,
        false,
    );
    p.push("layernorms", Role::Norm, 1, g.hidden, 2 * g.layers);
    p.ends(g.vocab, g.hidden, tie);
    let sliding_window = sliding(c, Sliding::FromMaxWindowLayers, g.layers)?;
    Ok(Built {
        parts: p,
        attention: Attention {
            layers: g.layers,
            heads: g.heads,
            kv_heads: g.kv_heads,
            head_dim: g.head_dim,
            sliding_window,
            latent_kv: None,
        },
        experts: (moe_layers > 0).then_some((e, k)),
        notes: Vec::new(),
    })
}

/// modeling_gpt_oss.py: GptOssAttention (q/k/v/o with bias = attention_bias, default true, and
/// `sinks`, one learned logit per head), GptOssMLP (a router Linear(hidden, experts) with bias
/// and GptOssExperts: gate_up_proj [experts, hidden, 2 x intermediate] with a bias per expert,
/// down_proj [experts, intermediate, hidden] with a bias per expert), two RMSNorms per layer,
/// untied lm_head. `layer_types` alternate sliding (window 128) and full attention, even layers
/// sliding. configuration_gpt_oss.py's defaults (gpt-oss-120b's sizes).
fn gpt_oss(c: &Config<'_>) -> Result<Built, ModelError> {
    let g = geometry(c, 201088, 2880, 36, 64, Some(8), Some(64))?;
    let intermediate = c.u64_or("intermediate_size", 2880)?;
    let (e, k) = experts(c, "num_local_experts", 128, 4)?;
    let tie = c.bool_or("tie_word_embeddings", false)?;
    let bias = if c.bool_or("attention_bias", true)? {
        AttentionBias::All
    } else {
        AttentionBias::None
    };
    let l = g.layers;
    let mut p = Parts::default();
    p.gqa(l, &g, bias, false);
    p.push("self_attn.sinks", Role::Other, 1, g.heads, l);
    p.push("mlp.router", Role::Router, e, g.hidden, l);
    p.push("mlp.router.bias", Role::Router, 1, e, l);
    let (count, active) = (l * e, l * k);
    p.push_active(
        "mlp.experts.gate_up_proj",
        Role::Experts,
        2 * intermediate,
        g.hidden,
        count,
        active,
    );
    p.push_active(
        "mlp.experts.gate_up_proj_bias",
        Role::Bias,
        1,
        2 * intermediate,
        count,
        active,
    );
    p.push_active(
        "mlp.experts.down_proj",
        Role::Experts,
        g.hidden,
        intermediate,
        count,
        active,
    );
    p.push_active(
        "mlp.experts.down_proj_bias",
        Role::Bias,
        1,
        g.hidden,
        count,
        active,
    );
    p.push("layernorms", Role::Norm, 1, g.hidden, 2 * l);
    p.ends(g.vocab, g.hidden, tie);
    let window = c.u64_opt("sliding_window")?.or(Some(128));
    let sliding_layers = match c.layer_types(l)? {
        Some((sliding, _)) => sliding,
        // GptOssConfig: "sliding_attention" if bool((i + 1) % 2) else "full_attention".
        None => l.div_ceil(2),
    };
    let sliding_window = windowed(c, sliding_layers, window, false)?;
    Ok(Built {
        parts: p,
        attention: Attention {
            layers: l,
            heads: g.heads,
            kv_heads: g.kv_heads,
            head_dim: g.head_dim,
            sliding_window,
            latent_kv: None,
        },
        experts: Some((e, k)),
        notes: Vec::new(),
    })
}

/// modeling_llama4.py, Llama4TextModel: Llama4TextAttention (q/k/v/o with `attention_bias`;
/// use_qk_norm is an L2 norm without weights), on the layers of `moe_layers` (default every
/// `interleave_moe_layer_step`-th) Llama4TextMoe (a router Linear(hidden, experts, bias=False),
/// experts gate_up_proj [experts, hidden, 2 x intermediate_size] and down_proj, and one shared
/// expert, a gated MLP at intermediate_size, run for every token), else a gated MLP at
/// intermediate_size_mlp; two RMSNorms per layer. Layers whose `no_rope_layers` entry is 1
/// (default: all but every fourth) use chunked attention over attention_chunk_size tokens.
/// configuration_llama4.py's Llama4TextConfig defaults (Scout's sizes).
fn llama4_text(c: &Config<'_>, tie: bool) -> Result<Built, ModelError> {
    let g = geometry(c, 202048, 5120, 48, 40, Some(8), Some(128))?;
    let intermediate = c.u64_or("intermediate_size", 8192)?;
    let intermediate_mlp = c.u64_or("intermediate_size_mlp", 16384)?;
    let (e, k) = experts(c, "num_local_experts", 16, 1)?;
    let step = c.u64_or("interleave_moe_layer_step", 1)?;
    let l = g.layers;
    let moe_layers = match c.layer_list("moe_layers", l)? {
        Some(list) => list.len() as u64,
        None => (step - 1..l).step_by(step as usize).count() as u64,
    };
    let dense_layers = l - moe_layers;
    let bias = if c.bool_or("attention_bias", false)? {
        AttentionBias::All
    } else {
        AttentionBias::None
    };
    let mut p = Parts::default();
    p.gqa(l, &g, bias, false);
    p.push("feed_forward.router", Role::Router, e, g.hidden, moe_layers);
    p.swiglu(
        [
            "feed_forward.experts.gate_proj",
            "feed_forward.experts.up_proj",
            "feed_forward.experts.down_proj",
        ],
        Role::Experts,
        g.hidden,
        intermediate,
        moe_layers * e,
        moe_layers * k,
        false,
    );
    p.swiglu(
        [
            "feed_forward.shared_expert.gate_proj",
            "feed_forward.shared_expert.up_proj",
            "feed_forward.shared_expert.down_proj",
        ],
        Role::SharedExperts,
        g.hidden,
        intermediate,
        moe_layers,
        moe_layers,
        false,
    );
    p.swiglu(
        [
            "feed_forward.gate_proj",
            "feed_forward.up_proj",
            "feed_forward.down_proj",
        ],
        Role::Mlp,
        g.hidden,
        intermediate_mlp,
        dense_layers,
        dense_layers,
        false,
    );
    p.push("layernorms", Role::Norm, 1, g.hidden, 2 * l);
    p.ends(g.vocab, g.hidden, tie);
    let chunk = c.u64_opt("attention_chunk_size")?;
    let chunked_layers = if let Some((_, chunked)) = c.layer_types(l)? {
        chunked
    } else {
        match c.map.get("no_rope_layers") {
            Some(Value::Array(list)) if !list.is_empty() => {
                if list.len() as u64 != l || list.iter().any(|v| v.as_u64().is_none_or(|x| x > 1)) {
                    return Err(c.field_error(
                        "no_rope_layers",
                        format!("is not a list of {l} entries of 0 or 1; expected one per layer"),
                    ));
                }
                list.iter().filter(|v| v.as_u64() == Some(1)).count() as u64
            }
            None | Some(Value::Null) | Some(Value::Array(_)) => l - l / 4,
            Some(other) => {
                return Err(c.field_error(
                    "no_rope_layers",
                    format!("is `{other}`; expected a list of 0 or 1 per layer"),
                ));
            }
        }
    };
    let sliding_window = match chunk {
        Some(_) => windowed(c, chunked_layers, chunk, true)?,
        None => None,
    };
    Ok(Built {
        parts: p,
        attention: Attention {
            layers: l,
            heads: g.heads,
            kv_heads: g.kv_heads,
            head_dim: g.head_dim,
            sliding_window,
            latent_kv: None,
        },
        experts: (moe_layers > 0).then_some((e, k)),
        notes: Vec::new(),
    })
}

/// modeling_llama4.py, Llama4VisionModel: the patch embedding (an unfolded Linear(channels x
/// patch^2, hidden, bias=False)), class_embedding, positional_embedding_vlm (one more position
/// than (image / patch)^2), layernorm_pre and layernorm_post (weight and bias), per layer q/k/v/o with
/// bias, fc1/fc2 with bias and two LayerNorms, then the pixel-shuffle adapter's fc1
/// [intermediate -> projector_input_dim] and fc2 [projector_output_dim -> projector_output_dim]
/// without bias. configuration_llama4.py's Llama4VisionConfig defaults.
fn llama4_vision(c: &Config<'_>) -> Result<Option<u64>, ModelError> {
    let hidden = u128::from(c.u64_or("hidden_size", 768)?);
    let intermediate = u128::from(c.u64_or("intermediate_size", 5632)?);
    let layers = u128::from(c.u64_or("num_hidden_layers", 34)?);
    let channels = u128::from(c.u64_or("num_channels", 3)?);
    let image = u128::from(c.u64_or("image_size", 448)?);
    let patch = u128::from(c.u64_or("patch_size", 14)?);
    let proj_in = u128::from(c.u64_or("projector_input_dim", 4096)?);
    let proj_out = u128::from(c.u64_or("projector_output_dim", 4096)?);
    let positions = (image / patch).pow(2) + 1;
    let embeddings = channels * patch * patch * hidden + hidden + positions * hidden;
    let layer = 4 * (hidden * hidden + hidden)
        + (hidden * intermediate + intermediate)
        + (intermediate * hidden + hidden)
        + 2 * 2 * hidden;
    let adapter = intermediate * proj_in + proj_out * proj_out;
    Ok(u64::try_from(embeddings + 2 * 2 * hidden + layers * layer + adapter).ok())
}

/// modeling_deepseek_v3.py: multi-head latent attention (q_a_proj [q_lora_rank, hidden],
/// q_a_layernorm, q_b_proj [heads x (qk_nope + qk_rope), q_lora_rank]; kv_a_proj_with_mqa
/// [kv_lora_rank + qk_rope, hidden], kv_a_layernorm, kv_b_proj [heads x (qk_nope + v_head),
/// kv_lora_rank]; o_proj [hidden, heads x v_head]); the first `first_k_dense_replace` layers a
/// dense MLP at intermediate_size, the others (every `moe_layer_freq`-th) DeepseekV3MoE: a
/// router (weight [n_routed_experts, hidden] and e_score_correction_bias), n_routed_experts
/// experts at moe_intermediate_size, num_experts_per_tok of them per token, and
/// n_shared_experts shared experts (one MLP at n_shared x moe_intermediate_size). The
/// multi-token-prediction layer(s) (`num_nextn_predict_layers`), stored after the last layer,
/// are not counted: transformers does not build them. configuration_deepseek_v3.py's defaults.
fn deepseek_v3(c: &Config<'_>) -> Result<Built, ModelError> {
    let g = geometry(c, 129280, 7168, 61, 128, Some(128), Some(1))?;
    let (h, heads, l) = (g.hidden, g.heads, g.layers);
    let intermediate = c.u64_or("intermediate_size", 18432)?;
    let moe_intermediate = c.u64_or("moe_intermediate_size", 2048)?;
    let (e, k) = experts(c, "n_routed_experts", 256, 8)?;
    let shared = c.count_or("n_shared_experts", 1)?;
    let kv_lora = c.u64_or("kv_lora_rank", 512)?;
    // null means no low-rank query projection (DeepSeek-V2-Lite); absent means the default.
    let q_lora = match c.map.get("q_lora_rank") {
        Some(Value::Null) => None,
        _ => Some(c.u64_or("q_lora_rank", 1536)?),
    };
    let rope = c.u64_or("qk_rope_head_dim", 64)?;
    let nope = c.u64_or("qk_nope_head_dim", 128)?;
    let v_head = c.u64_or("v_head_dim", 128)?;
    let first_dense = c.count_or("first_k_dense_replace", 3)?.min(l);
    let freq = c.u64_or("moe_layer_freq", 1)?;
    let tie = c.bool_or("tie_word_embeddings", false)?;
    let bias = c.bool_or("attention_bias", false)?;
    let noaux = c.str_opt("topk_method")?.is_none_or(|m| m == "noaux_tc");
    let moe_layers = (first_dense..l).filter(|i| i.is_multiple_of(freq)).count() as u64;
    let dense_layers = l - moe_layers;
    let qk_head = nope + rope;
    let mut p = Parts::default();
    match q_lora {
        Some(r) => {
            p.push("self_attn.q_a_proj", Role::Attention, r, h, l);
            p.push("self_attn.q_a_layernorm", Role::Norm, 1, r, l);
            p.push("self_attn.q_b_proj", Role::Attention, heads * qk_head, r, l);
            if bias {
                p.push("self_attn.q_a_proj.bias", Role::Bias, 1, r, l);
            }
        }
        None => p.push("self_attn.q_proj", Role::Attention, heads * qk_head, h, l),
    }
    p.push(
        "self_attn.kv_a_proj_with_mqa",
        Role::Attention,
        kv_lora + rope,
        h,
        l,
    );
    p.push("self_attn.kv_a_layernorm", Role::Norm, 1, kv_lora, l);
    p.push(
        "self_attn.kv_b_proj",
        Role::Attention,
        heads * (nope + v_head),
        kv_lora,
        l,
    );
    p.push("self_attn.o_proj", Role::Attention, h, heads * v_head, l);
    if bias {
        p.push(
            "self_attn.kv_a_proj_with_mqa.bias",
            Role::Bias,
            1,
            kv_lora + rope,
            l,
        );
        p.push("self_attn.o_proj.bias", Role::Bias, 1, h, l);
    }
    p.swiglu(
        ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
        Role::Mlp,
        h,
        intermediate,
        dense_layers,
        dense_layers,
        false,
    );
    p.push("mlp.gate", Role::Router, e, h, moe_layers);
    if noaux {
        p.push(
            "mlp.gate.e_score_correction_bias",
            Role::Router,
            1,
            e,
            moe_layers,
        );
    }
    p.swiglu(
        [
            "mlp.experts.gate_proj",
            "mlp.experts.up_proj",
            "mlp.experts.down_proj",
        ],
        Role::Experts,
        h,
        moe_intermediate,
        moe_layers * e,
        moe_layers * k,
        false,
    );
    p.swiglu(
        [
            "mlp.shared_experts.gate_proj",
            "mlp.shared_experts.up_proj",
            "mlp.shared_experts.down_proj",
        ],
        Role::SharedExperts,
        h,
        moe_intermediate * shared,
        moe_layers,
        moe_layers,
        false,
    );
    p.push("layernorms", Role::Norm, 1, h, 2 * l);
    p.ends(g.vocab, h, tie);
    let mut notes = Vec::new();
    let mtp = c.count_or("num_nextn_predict_layers", 0)?;
    if mtp > 0 {
        notes.push(format!(
            "num_nextn_predict_layers is {mtp}: the multi-token-prediction layer(s) that the \
             checkpoint stores after the {l} decoder layers are not counted (transformers does \
             not build them; only speculative decoding uses them)"
        ));
    }
    Ok(Built {
        parts: p,
        attention: Attention {
            layers: l,
            heads,
            kv_heads: g.kv_heads,
            head_dim: qk_head,
            sliding_window: None,
            latent_kv: Some(kv_lora + rope),
        },
        experts: (moe_layers > 0).then_some((e, k)),
        notes,
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
            (
                r#"{"model_type":"gpt_oss","layer_types":["full_attention"]}"#,
                "`layer_types` is not a list of 36 attention kinds",
            ),
            (
                r#"{"model_type":"llama4_text","no_rope_layers":[2]}"#,
                "`no_rope_layers` is not a list of 48 entries of 0 or 1",
            ),
            (
                r#"{"model_type":"llama4","text_config":{"moe_layers":"all"}}"#,
                "`text_config.moe_layers` is `\"all\"`; expected a list of layer indices",
            ),
            (
                r#"{"model_type":"qwen3_moe","mlp_only_layers":[99]}"#,
                "`mlp_only_layers` is `[99]`; expected a list of layer indices from 0 to 23",
            ),
            (
                r#"{"model_type":"gpt_oss","num_experts_per_tok":200}"#,
                "more than num_local_experts 128",
            ),
            (
                r#"{"model_type":"qwen3","quantization_config":{"quant_method":"awq","bits":"four"}}"#,
                "`quantization_config.bits` is `\"four\"`; expected a whole number of bits",
            ),
            (
                r#"{"model_type":"deepseek_v3","quantization_config":{"quant_method":"fp8","weight_block_size":[128]}}"#,
                "`quantization_config.weight_block_size` is `[128]`; expected [rows, columns]",
            ),
            (
                r#"{"model_type":"qwen3","quantization_config":{"modules_to_not_convert":"lm_head"}}"#,
                "`quantization_config.modules_to_not_convert` is `\"lm_head\"`",
            ),
        ] {
            let err = parse(json, "config.json").unwrap_err().to_string();
            assert!(err.starts_with("config.json"), "{err}");
            assert!(err.contains(says), "wanted {says:?} in {err}");
        }
    }

    /// Issue 24: the architectures renters ask about are counted, from `model_type` too.
    #[test]
    fn qwen3_llama4_gpt_oss_and_deepseek_are_known() {
        for (model_type, name) in [
            ("qwen3", "Qwen3ForCausalLM"),
            ("qwen3_moe", "Qwen3MoeForCausalLM"),
            ("llama4", "Llama4ForConditionalGeneration"),
            ("llama4_text", "Llama4ForCausalLM"),
            ("gpt_oss", "GptOssForCausalLM"),
            ("deepseek_v3", "DeepseekV3ForCausalLM"),
        ] {
            let a = parse(&format!(r#"{{"model_type":"{model_type}"}}"#), "c").unwrap();
            assert_eq!(a.name, name);
            assert!(KNOWN.contains(&name));
            let sum: u128 = a.parts.iter().map(Part::parameters).sum();
            assert_eq!(sum, u128::from(a.parameters), "{name}");
        }
        // DeepSeek's defaults are DeepSeek-V3's sizes; without q_lora_rank the query is one
        // projection.
        let v3 = parse(r#"{"model_type":"deepseek_v3"}"#, "c").unwrap();
        assert_eq!(v3.parameters, 671_026_419_200);
        let lite = parse(r#"{"model_type":"deepseek_v3","q_lora_rank":null}"#, "c").unwrap();
        assert!(lite.parts.iter().any(|p| p.name == "self_attn.q_proj"));
        // A config's own layer_types decide the sliding layers (Qwen3 with every layer full).
        let full = format!(
            r#"{{"model_type":"qwen3","num_hidden_layers":2,"layer_types":{}}}"#,
            r#"["full_attention","sliding_attention"]"#
        );
        let err = parse(&full, "c").unwrap_err().to_string();
        assert!(
            err.contains("`sliding_window` is missing, yet 1 layer(s) use it"),
            "{err}"
        );
    }

    #[test]
    fn model_type_names_the_architecture_when_architectures_is_absent() {
        let a = parse(r#"{"model_type":"mistral"}"#, "c").unwrap();
        assert_eq!(a.name, "MistralForCausalLM");
        // configuration_mistral.py's defaults are Mistral 7B's sizes.
        assert_eq!(a.parameters, 7_241_732_096);
    }
}
