//! The model-aware estimate: the weights (stored, rounded per parameter, or packed), quantisation
//! metadata, the KV cache and, for fine-tuning, gradients and Adam states, all as exact bytes.
//!
//! Two figures, never mixed: the headline is the seed's rule, weight bytes = parameters x
//! ceil(bits / 8) (or the stored bytes of safetensors files), and its total adds the metadata,
//! the KV cache, the training states and the reserve to it, so a total is never smaller than its
//! weights. A width that packs below whole bytes (4 bits, or any quantised layout of a model)
//! gets a second, labelled figure: the packed weights as a quantised checkpoint stores them
//! (with a model: the linear layers packed, the embeddings, lm_head, norms, biases and routers
//! kept at 16 bits, as the `model` crate's split says), with its own total. Every total comes
//! with the list of what it adds, and every list sums to its total.
//!
//! The facts come from whatever read the model (safetensors headers or config.json, in the
//! `model` crate); this module only does the arithmetic, each assumption said in words.

use rust_decimal::Decimal;
use serde::Serialize;

use crate::estimate::{EXCLUDED, Estimate, EstimateError, GB, GIB, estimate};
use crate::units::ratio_half_even;

/// The default width of a quantisation scale, in bits (a float16 scale).
pub const DEFAULT_SCALE_BITS: u32 = 16;

/// The group assumed for a quantised layout when neither `--group-size` nor the config gives
/// one: AutoAWQ's and AutoGPTQ's default of 128 columns.
pub const DEFAULT_GROUP_SIZE: u64 = 128;

/// The width of the tensors a quantised checkpoint keeps unpacked (float16 or bfloat16).
pub const KEPT_BITS: u32 = 16;

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
    /// 2 x layers x KV heads x head_dim: key and value elements cached per token. Used when
    /// `kv_layers` is empty.
    pub kv_elements_per_token: Option<u128>,
    /// The KV cache layer by layer kind (full, sliding window, chunked, latent); when set it
    /// replaces `kv_elements_per_token`.
    pub kv_layers: Vec<KvLayers>,
    /// The tensors a quantised checkpoint of this model packs and keeps (`None` without the
    /// architecture's tensor list).
    pub layout: Option<Layout>,
    /// The quantised width the config's `quantization_config` states: the default width when
    /// there are no stored bytes and no `--bits`.
    pub quantised_bits: Option<u32>,
    /// The scales and zero points the config's `quantization_config` describes.
    pub scheme: Option<Scheme>,
}

/// Layers that cache alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvLayers {
    /// How they attend.
    pub kind: KvKind,
    /// How many layers.
    pub layers: u64,
    /// Elements one token caches in one of these layers.
    pub elements_per_token_per_layer: u128,
    /// The window (sliding) or chunk (chunked) in tokens: the most tokens these layers cache.
    pub window: Option<u64>,
}

/// How a group of layers attends, which decides what it caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvKind {
    /// Every token of the context, keys and values per KV head.
    Full,
    /// The last `window` tokens only.
    SlidingWindow,
    /// The tokens of the current chunk of `window` tokens (Llama 4).
    Chunked,
    /// Multi-head latent attention (DeepSeek-V3): one compressed latent per token, every token.
    Latent,
}

impl KvKind {
    fn label(self) -> &'static str {
        match self {
            KvKind::Full => "full-attention",
            KvKind::SlidingWindow => "sliding-window",
            KvKind::Chunked => "chunked-attention",
            KvKind::Latent => "latent-attention",
        }
    }
}

/// Weight matrices of one shape: `count` of [rows, columns].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matrix {
    /// Output features.
    pub rows: u64,
    /// Input features (groups run along them).
    pub columns: u64,
    /// How many.
    pub count: u64,
}

/// Tensors a quantised checkpoint keeps unpacked, by kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    /// What they are (`embeddings`, `lm_head`, `norms`...).
    pub what: String,
    /// Their parameters.
    pub parameters: u64,
}

/// How a quantised checkpoint of the model stores its weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The matrices packed at the quantised width.
    pub quantised: Vec<Matrix>,
    /// The tensors kept at [`KEPT_BITS`].
    pub kept: Vec<Kept>,
    /// Which rule decided, in words.
    pub rule: String,
}

/// How scales (and zero points) are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Groups of this many consecutive columns within each row.
    Columns(u64),
    /// Blocks of rows x columns.
    Blocks {
        /// Rows per block.
        rows: u64,
        /// Columns per block.
        columns: u64,
    },
    /// One scale per row.
    Rows,
}

impl Grouping {
    /// Groups in `m`.
    fn groups(self, m: &Matrix) -> u128 {
        let (r, c, n) = (
            u128::from(m.rows),
            u128::from(m.columns),
            u128::from(m.count),
        );
        match self {
            Grouping::Columns(g) => r * c.div_ceil(u128::from(g)) * n,
            Grouping::Blocks { rows, columns } => {
                r.div_ceil(u128::from(rows)) * c.div_ceil(u128::from(columns)) * n
            }
            Grouping::Rows => r * n,
        }
    }

    fn describe(self) -> String {
        match self {
            Grouping::Columns(g) => format!("per group of {g} columns of each row"),
            Grouping::Blocks { rows, columns } => format!("per block of {rows} x {columns}"),
            Grouping::Rows => "per row".to_string(),
        }
    }
}

/// Quantisation metadata: one scale and, where the format has one, one zero point per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// The groups.
    pub grouping: Grouping,
    /// Bits per scale.
    pub scale_bits: u32,
    /// Bits per zero point (0: none).
    pub zero_point_bits: u32,
}

/// The options of a model-aware estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// `--bits`: count the weights at this width instead of as stored.
    pub bits: Option<u32>,
    /// `--group-size`: one quantisation scale (and zero point) per this many parameters.
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

/// One line of a total.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// What it is.
    pub item: &'static str,
    /// Its bytes.
    pub bytes: u128,
}

/// The packed weights as a quantised checkpoint stores them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackedLayout {
    /// Which rule decided which tensors are packed.
    pub rule: String,
    /// Parameters packed at `bits`.
    pub quantised_parameters: u128,
    /// ceil(quantised_parameters x bits / 8).
    pub quantised_bytes: u128,
    /// The width of the kept tensors.
    pub kept_bits: u32,
    /// The kept tensors by kind, with their bytes.
    pub kept: Vec<KeptBytes>,
    /// The kept tensors' bytes together.
    pub kept_bytes: u128,
}

/// Kept tensors of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptBytes {
    /// What they are.
    pub what: String,
    /// Their parameters.
    pub parameters: u64,
    /// parameters x kept_bits / 8.
    pub bytes: u128,
}

/// Scales and zero points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Metadata {
    /// Where the layout comes from (`--group-size`, the config, or the assumed default).
    pub source: String,
    /// How the groups run, in words.
    pub grouping: String,
    /// Groups over the packed matrices.
    pub groups: u128,
    /// Bits per scale.
    pub scale_bits: u32,
    /// ceil(groups x scale_bits / 8).
    pub scale_bytes: u128,
    /// Bits per zero point (0: none).
    pub zero_point_bits: u32,
    /// ceil(groups x zero_point_bits / 8).
    pub zero_point_bytes: u128,
}

/// One kind of layer in the KV cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvCacheLayers {
    /// How they attend.
    pub kind: KvKind,
    /// How many layers.
    pub layers: u64,
    /// Elements one token caches in one of them.
    pub elements_per_token_per_layer: u128,
    /// Tokens each sequence keeps there: the context, or the window when shorter.
    pub cached_tokens: u64,
    /// ceil(layers x elements x kv_bits / 8) x cached_tokens x batch.
    pub bytes: u128,
}

/// The model-aware estimate: every key of [`Estimate`] and the ones it adds. Each key means the
/// same at every width; a figure that does not apply is null.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryEstimate {
    /// The headline weights, as `estimate --parameters` computes them (or the stored bytes):
    /// `weight_bytes` = parameters x `bytes_per_parameter`; `total_gib` = `model_gib` +
    /// `reserve_gib`.
    #[serde(flatten)]
    pub base: Estimate,
    /// Where `weight_bytes` comes from.
    pub weight_bytes_rule: &'static str,
    /// Scales and zero points (`quantisation_metadata`'s two lines together), when counted.
    pub quantisation_metadata_bytes: Option<u128>,
    /// How the metadata is counted.
    pub quantisation_metadata: Option<Metadata>,
    /// Width of one cached K or V element.
    pub kv_bits: Option<u32>,
    /// KV cache bytes for one token of one sequence while it is inside every window.
    pub kv_cache_bytes_per_token: Option<u128>,
    /// Tokens per sequence (`--context`).
    pub context: Option<u64>,
    /// Sequences (`--batch`).
    pub batch: u64,
    /// KV cache bytes for the whole context and batch: the sum of `kv_cache_layers`.
    pub kv_cache_bytes: Option<u128>,
    /// The KV cache by kind of layer (full, sliding window, chunked, latent).
    pub kv_cache_layers: Option<Vec<KvCacheLayers>>,
    /// Fine-tuning lines (`--training adam`).
    pub training: Option<Training>,
    /// Everything but the reserve: weight_bytes + metadata + KV cache + training states.
    pub model_bytes: u128,
    /// model_bytes / 2^30, half-even to 4 places.
    pub model_gib: Decimal,
    /// The reserve in bytes: ceil(reserve_gib x 2^30).
    pub reserve_bytes: u128,
    /// model_bytes + reserve_bytes: the headline total, never below weight_bytes.
    pub total_bytes: u128,
    /// What total_bytes adds, line by line; the lines sum to total_bytes.
    pub total_breakdown: Vec<Item>,
    /// The packed weights: with a model's layout, its quantised tensors packed at `bits` and
    /// the kept ones at 16 bits (`packed_layout`); without one, ceil(parameters x bits / 8).
    /// Null when nothing packs below whole bytes (bits a multiple of 8 without a model layout,
    /// 16 bits or more, stored bytes).
    pub packed_weight_bytes: Option<u128>,
    /// packed_weight_bytes / 2^30, half-even to 4 places.
    pub packed_weight_gib: Option<Decimal>,
    /// The packed layout, when the model's tensors are known.
    pub packed_layout: Option<PackedLayout>,
    /// packed_weight_bytes + metadata + KV cache.
    pub packed_model_bytes: Option<u128>,
    /// packed_model_bytes / 2^30, half-even to 4 places.
    pub packed_model_gib: Option<Decimal>,
    /// packed_model_bytes + reserve_bytes: the packed figure's own total.
    pub packed_total_bytes: Option<u128>,
    /// packed_model_gib + reserve_gib.
    pub packed_total_gib: Option<Decimal>,
    /// What packed_total_bytes adds, line by line; the lines sum to it.
    pub packed_total_breakdown: Option<Vec<Item>>,
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

/// ceil(reserve GiB x 2^30): the reserve has at most 4 decimal places.
fn reserve_bytes(reserve_gib: Decimal) -> u128 {
    let scale = 10u128.pow(reserve_gib.scale());
    (reserve_gib.mantissa().unsigned_abs() << 30).div_ceil(scale)
}

/// The packed layout of `layout` at `bits`.
fn pack(layout: &Layout, bits: u32) -> PackedLayout {
    let quantised_parameters: u128 = layout
        .quantised
        .iter()
        .map(|m| u128::from(m.rows) * u128::from(m.columns) * u128::from(m.count))
        .sum();
    let kept: Vec<KeptBytes> = layout
        .kept
        .iter()
        .map(|k| KeptBytes {
            what: k.what.clone(),
            parameters: k.parameters,
            bytes: (u128::from(k.parameters) * u128::from(KEPT_BITS)).div_ceil(8),
        })
        .collect();
    PackedLayout {
        rule: layout.rule.clone(),
        quantised_parameters,
        quantised_bytes: (quantised_parameters * u128::from(bits)).div_ceil(8),
        kept_bits: KEPT_BITS,
        kept_bytes: kept.iter().map(|k| k.bytes).sum(),
        kept,
    }
}

/// Computes the model-aware estimate.
pub fn memory(facts: &ModelFacts, options: &MemoryOptions) -> Result<MemoryEstimate, MemoryError> {
    let n = u128::from(facts.parameters);
    let native = facts.native_bits.unwrap_or(16);
    let stored = if options.bits.is_none() {
        facts.stored_weight_bytes
    } else {
        None
    };
    let config_bits = if options.bits.is_none() && stored.is_none() {
        facts.quantised_bits
    } else {
        None
    };
    let bits = options.bits.or(config_bits).unwrap_or(native);
    let mut base = estimate(facts.parameters, bits, options.reserve_gib)?;
    let mut assumptions = Vec::new();
    let mut excluded: Vec<&'static str> = EXCLUDED.to_vec();
    let rule = match (stored, config_bits) {
        (Some(stored), _) => {
            base.weight_bytes = stored;
            base.weight_gib = ratio_half_even(stored, GIB).ok_or(MemoryError::Overflow)?;
            base.weight_gb = ratio_half_even(stored, GB).ok_or(MemoryError::Overflow)?;
            "stored: the sum of the safetensors tensors' bytes"
        }
        (None, Some(b)) => {
            assumptions.push(format!(
                "weights at {b} bits, the width the config's quantization_config states \
                 (--bits counts them at another)"
            ));
            "parameters x ceil(bits / 8), bits from the config's quantization_config"
        }
        _ => "parameters x ceil(bits / 8)",
    };

    // The second figure: packed storage.
    let layout = match (stored, &facts.layout) {
        (None, Some(l)) if bits < KEPT_BITS => Some(l),
        _ => None,
    };
    let packed_layout = layout.map(|l| pack(l, bits));
    let packed = match (&packed_layout, stored) {
        (Some(p), _) => Some(p.quantised_bytes + p.kept_bytes),
        (None, None) if !bits.is_multiple_of(8) => Some((n * u128::from(bits)).div_ceil(8)),
        _ => None,
    };
    if let Some(p) = packed {
        let per = bits.div_ceil(8);
        let what = match &packed_layout {
            Some(l) => format!(
                "the checkpoint layout, {}: {} parameters packed at {bits} bits ({} bytes) and {} \
                 kept at {KEPT_BITS} bits ({} bytes)",
                l.rule,
                l.quantised_parameters,
                l.quantised_bytes,
                l.kept
                    .iter()
                    .map(|k| u128::from(k.parameters))
                    .sum::<u128>(),
                l.kept_bytes
            ),
            None => format!(
                "ceil(parameters x {bits} / 8) = {p} bytes, every parameter packed (no model \
                 layout is known)"
            ),
        };
        assumptions.push(format!(
            "{bits}-bit weights: weight_bytes keeps the whole-byte rule (ceil({bits} / 8) = {per} \
             byte(s) per parameter) and is the headline with its total (total_bytes, total_gib); \
             packed_weight_bytes is {what}, a second figure with its own total \
             (packed_total_bytes, packed_total_gib)"
        ));
    }

    // Scales and zero points.
    let scheme = if let Some(g) = options.group_size {
        if options.bits.is_none() && config_bits.is_none() {
            return Err(MemoryError::GroupWithoutBits(g));
        }
        Some((
            Scheme {
                grouping: Grouping::Columns(g),
                scale_bits: options.scale_bits,
                zero_point_bits: bits,
            },
            "your --group-size and --scale-bits",
        ))
    } else if let (Some(s), true) = (
        facts.scheme,
        stored.is_none() && facts.quantised_bits == Some(bits),
    ) {
        Some((s, "the config's quantization_config"))
    } else if layout.is_some() {
        Some((
            Scheme {
                grouping: Grouping::Columns(DEFAULT_GROUP_SIZE),
                scale_bits: DEFAULT_SCALE_BITS,
                zero_point_bits: bits,
            },
            "AutoAWQ's and AutoGPTQ's default layout, assumed; --group-size changes it",
        ))
    } else {
        None
    };
    let metadata = match scheme {
        Some((s, source)) => {
            let groups = match &facts.layout {
                Some(l) if stored.is_none() => Some(
                    l.quantised
                        .iter()
                        .map(|m| s.grouping.groups(m))
                        .sum::<u128>(),
                ),
                _ => match s.grouping {
                    Grouping::Columns(g) => Some(n.div_ceil(u128::from(g))),
                    Grouping::Blocks { rows, columns } => {
                        Some(n.div_ceil(u128::from(rows) * u128::from(columns)))
                    }
                    Grouping::Rows => None,
                },
            };
            let by_layout = facts.layout.is_some() && stored.is_none();
            let grouping = match s.grouping {
                Grouping::Columns(g) if !by_layout => format!("per group of {g} parameters"),
                other => other.describe(),
            };
            groups.map(|groups| Metadata {
                source: source.to_string(),
                grouping,
                groups,
                scale_bits: s.scale_bits,
                scale_bytes: (groups * u128::from(s.scale_bits)).div_ceil(8),
                zero_point_bits: s.zero_point_bits,
                zero_point_bytes: (groups * u128::from(s.zero_point_bits)).div_ceil(8),
            })
        }
        None => None,
    };
    let metadata_bytes = metadata
        .as_ref()
        .map(|m| m.scale_bytes + m.zero_point_bytes);
    if let (Some(m), Some(bytes)) = (&metadata, metadata_bytes) {
        let over = if facts.layout.is_some() && stored.is_none() {
            "over the packed matrices"
        } else {
            "over all parameters"
        };
        assumptions.push(format!(
            "quantisation metadata ({}): one {}-bit scale{} {}, {over}: {} groups, {bytes} bytes, \
             counted in every total",
            m.source,
            m.scale_bits,
            if m.zero_point_bits > 0 {
                format!(" and one {}-bit zero point", m.zero_point_bits)
            } else {
                String::new()
            },
            m.grouping,
            m.groups
        ));
        excluded.retain(|e| !e.starts_with("quantisation metadata"));
    }

    // The KV cache.
    let kv_bits = options.kv_bits.unwrap_or(native);
    let kv_groups: Vec<KvLayers> = if !facts.kv_layers.is_empty() {
        facts.kv_layers.clone()
    } else if let Some(elements) = facts.kv_elements_per_token {
        vec![KvLayers {
            kind: KvKind::Full,
            layers: 1,
            elements_per_token_per_layer: elements,
            window: None,
        }]
    } else {
        Vec::new()
    };
    if options.context.is_some() && kv_groups.is_empty() {
        return Err(MemoryError::NoGeometry);
    }
    let token_bits = |g: &KvLayers| -> Option<u128> {
        u128::from(g.layers)
            .checked_mul(g.elements_per_token_per_layer)?
            .checked_mul(u128::from(kv_bits))
    };
    let per_token = if kv_groups.is_empty() {
        None
    } else {
        let mut bits_sum = 0u128;
        for g in &kv_groups {
            bits_sum = bits_sum
                .checked_add(token_bits(g).ok_or(MemoryError::Overflow)?)
                .ok_or(MemoryError::Overflow)?;
        }
        Some(bits_sum.div_ceil(8))
    };
    let kv_layers = match options.context {
        Some(c) => {
            let mut out = Vec::new();
            for g in &kv_groups {
                let cached = g.window.map_or(c, |w| w.min(c));
                let bytes = token_bits(g)
                    .ok_or(MemoryError::Overflow)?
                    .div_ceil(8)
                    .checked_mul(u128::from(cached))
                    .and_then(|v| v.checked_mul(u128::from(options.batch)))
                    .ok_or(MemoryError::Overflow)?;
                out.push(KvCacheLayers {
                    kind: g.kind,
                    layers: g.layers,
                    elements_per_token_per_layer: g.elements_per_token_per_layer,
                    cached_tokens: cached,
                    bytes,
                });
            }
            assumptions.push(kv_sentence(&kv_groups, &out, kv_bits, c, options.batch));
            excluded.retain(|e| *e != "KV cache");
            Some(out)
        }
        None => None,
    };
    let kv_total = match &kv_layers {
        Some(layers) => {
            let mut sum = 0u128;
            for l in layers {
                sum = sum.checked_add(l.bytes).ok_or(MemoryError::Overflow)?;
            }
            Some(sum)
        }
        None => None,
    };

    // Fine-tuning.
    let training = if options.training {
        let (weight_b, master_b) = match bits {
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
            "training (mixed-precision Adam): {bits}-bit weights and gradients, {}two float32 \
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
    let training_extra = training.as_ref().map(|t| t.total_bytes - t.weights_bytes);

    // The totals: each a list of lines that sums to it.
    let reserve = reserve_bytes(base.reserve_gib);
    let lines = |weights: (&'static str, u128)| -> Result<(Vec<Item>, u128, u128), MemoryError> {
        let mut items = vec![Item {
            item: weights.0,
            bytes: weights.1,
        }];
        if let Some(m) = metadata_bytes {
            items.push(Item {
                item: "quantisation metadata (scales, zero points)",
                bytes: m,
            });
        }
        if let Some(kv) = kv_total {
            items.push(Item {
                item: "KV cache",
                bytes: kv,
            });
        }
        if let Some(t) = training_extra {
            items.push(Item {
                item: "training states (gradients, float32 master copy, Adam moments)",
                bytes: t,
            });
        }
        let mut model = 0u128;
        for i in &items {
            model = model.checked_add(i.bytes).ok_or(MemoryError::Overflow)?;
        }
        items.push(Item {
            item: "reserve",
            bytes: reserve,
        });
        let total = model.checked_add(reserve).ok_or(MemoryError::Overflow)?;
        Ok((items, model, total))
    };
    let (total_breakdown, model_bytes, total_bytes) = lines(("weights", base.weight_bytes))?;
    let model_gib = ratio_half_even(model_bytes, GIB).ok_or(MemoryError::Overflow)?;
    base.total_gib = model_gib + base.reserve_gib;
    base.excluded = excluded;
    let (packed_weight_gib, packed_model_bytes, packed_model_gib, packed_total, packed_breakdown) =
        match packed {
            Some(p) => {
                let (items, model, total) = lines(("packed weights", p))?;
                let model_gib = ratio_half_even(model, GIB).ok_or(MemoryError::Overflow)?;
                (
                    Some(ratio_half_even(p, GIB).ok_or(MemoryError::Overflow)?),
                    Some(model),
                    Some(model_gib),
                    Some(total),
                    Some(items),
                )
            }
            None => (None, None, None, None, None),
        };
    Ok(MemoryEstimate {
        packed_total_gib: packed_model_gib.map(|g| g + base.reserve_gib),
        base,
        weight_bytes_rule: rule,
        quantisation_metadata_bytes: metadata_bytes,
        quantisation_metadata: metadata,
        kv_bits: per_token.map(|_| kv_bits),
        kv_cache_bytes_per_token: per_token,
        context: options.context,
        batch: options.batch,
        kv_cache_bytes: kv_total,
        kv_cache_layers: kv_layers,
        training,
        model_bytes,
        model_gib,
        reserve_bytes: reserve,
        total_bytes,
        total_breakdown,
        packed_weight_bytes: packed,
        packed_weight_gib,
        packed_layout,
        packed_model_bytes,
        packed_model_gib,
        packed_total_bytes: packed_total,
        packed_total_breakdown: packed_breakdown,
        assumptions,
    })
}

/// The KV cache's assumption, in words: the classic sentence for one group of full layers.
fn kv_sentence(
    groups: &[KvLayers],
    cached: &[KvCacheLayers],
    kv_bits: u32,
    context: u64,
    batch: u64,
) -> String {
    if let [g] = groups
        && g.kind == KvKind::Full
        && g.window.is_none()
    {
        return format!(
            "KV cache: 2 (key and value) x layers x KV heads x head size = {} elements per token \
             at {kv_bits} bits, for all {context} tokens of each of {batch} sequence(s)",
            u128::from(g.layers) * g.elements_per_token_per_layer
        );
    }
    let what = match groups.first() {
        Some(g) if g.kind == KvKind::Latent => format!(
            "one latent of kv_lora_rank + qk_rope_head_dim = {} elements per token per layer \
             (multi-head latent attention caches it instead of keys and values per head)",
            g.elements_per_token_per_layer
        ),
        Some(g) => format!(
            "2 (key and value) x KV heads x head size = {} elements per token per layer",
            g.elements_per_token_per_layer
        ),
        None => String::new(),
    };
    let parts: Vec<String> = groups
        .iter()
        .zip(cached)
        .map(|(g, c)| match g.window {
            Some(w) if w < context => format!(
                "{} {} layer(s) cache at most {w} of the {context} tokens",
                g.layers,
                g.kind.label()
            ),
            Some(w) => format!(
                "{} {} layer(s) cache all {} tokens (their window of {w} is not shorter)",
                g.layers,
                g.kind.label(),
                c.cached_tokens
            ),
            None => format!(
                "{} {} layer(s) cache all {} tokens",
                g.layers,
                g.kind.label(),
                c.cached_tokens
            ),
        })
        .collect();
    format!(
        "KV cache: {what} at {kv_bits} bits; {}, for each of {batch} sequence(s)",
        parts.join(", ")
    )
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
            ..ModelFacts::default()
        }
    }

    /// Every breakdown sums to its total, and no total is below its weights.
    fn check_sums(e: &MemoryEstimate) {
        let sum: u128 = e.total_breakdown.iter().map(|i| i.bytes).sum();
        assert_eq!(sum, e.total_bytes);
        assert_eq!(e.total_bytes, e.model_bytes + e.reserve_bytes);
        assert!(e.total_bytes >= e.base.weight_bytes);
        assert!(e.base.total_gib >= e.base.weight_gib);
        assert_eq!(e.base.total_gib, e.model_gib + e.base.reserve_gib);
        if let Some(kv) = &e.kv_cache_layers {
            assert_eq!(
                kv.iter().map(|l| l.bytes).sum::<u128>(),
                e.kv_cache_bytes.unwrap()
            );
        }
        if let Some(m) = &e.quantisation_metadata {
            assert_eq!(
                m.scale_bytes + m.zero_point_bytes,
                e.quantisation_metadata_bytes.unwrap()
            );
        }
        match e.packed_weight_bytes {
            Some(p) => {
                let items = e.packed_total_breakdown.as_ref().unwrap();
                assert_eq!(
                    items.iter().map(|i| i.bytes).sum::<u128>(),
                    e.packed_total_bytes.unwrap()
                );
                assert_eq!(items[0].bytes, p);
                assert_eq!(
                    e.packed_total_gib.unwrap(),
                    e.packed_model_gib.unwrap() + e.base.reserve_gib
                );
                if let Some(l) = &e.packed_layout {
                    assert_eq!(l.quantised_bytes + l.kept_bytes, p);
                    assert_eq!(l.kept.iter().map(|k| k.bytes).sum::<u128>(), l.kept_bytes);
                }
            }
            None => {
                assert!(e.packed_total_bytes.is_none() && e.packed_layout.is_none());
            }
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
        check_sums(&e);
        // The classic sentence stays for one kind of layer.
        assert!(e.assumptions[0].starts_with(
            "KV cache: 2 (key and value) x layers x KV heads x head size = 65536 elements"
        ));
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
        // Without a layout, one 16-bit scale and one 4-bit zero point per 128 parameters:
        // 8030261248 / 128 = 62736416 groups x 2.5 bytes.
        assert_eq!(
            e.quantisation_metadata_bytes,
            Some(125_472_832 + 31_368_208)
        );
        // The headline keeps the whole-byte weights; the packed figure has its own total.
        assert_eq!(e.total_bytes, 8_030_261_248 + 156_841_040);
        assert_eq!(e.packed_total_bytes, Some(4_015_130_624 + 156_841_040));
        check_sums(&e);
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
        check_sums(&e);
    }

    /// Issue 24: 70B at 4 bits with a 4 GiB reserve. The total is the weights plus the reserve
    /// (69.1926 GiB, never below the weights' 65.1926); the packed 35 GB are a second figure
    /// with their own total, 36.5963 GiB.
    #[test]
    fn the_issue_example_adds_up() {
        let facts = ModelFacts {
            parameters: 70_000_000_000,
            active_parameters: 70_000_000_000,
            ..ModelFacts::default()
        };
        let reserve = crate::estimate::parse_reserve_gib("4").unwrap();
        let e = memory(
            &facts,
            &MemoryOptions {
                bits: Some(4),
                reserve_gib: reserve,
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(e.base.weight_bytes, 70_000_000_000);
        assert_eq!(e.base.weight_gib.to_string(), "65.1926");
        assert_eq!(e.base.total_gib.to_string(), "69.1926");
        assert_eq!(e.reserve_bytes, 4 << 30);
        assert_eq!(e.total_bytes, 70_000_000_000 + (4 << 30));
        assert_eq!(e.packed_weight_bytes, Some(35_000_000_000));
        assert_eq!(e.packed_weight_gib.unwrap().to_string(), "32.5963");
        assert_eq!(e.packed_total_gib.unwrap().to_string(), "36.5963");
        assert_eq!(e.packed_total_bytes, Some(35_000_000_000 + (4 << 30)));
        assert_eq!(e.quantisation_metadata_bytes, None);
        check_sums(&e);
        // At 16 bits every key is there, the packed ones null.
        let e16 = memory(
            &facts,
            &MemoryOptions {
                bits: Some(16),
                reserve_gib: reserve,
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(e16.total_bytes, 140_000_000_000 + (4 << 30));
        assert_eq!(e16.packed_weight_bytes, None);
        let keys = |e: &MemoryEstimate| -> Vec<String> {
            let mut k: Vec<String> = serde_json::to_value(e)
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            k.sort();
            k
        };
        assert_eq!(keys(&e), keys(&e16));
        check_sums(&e16);
    }

    /// A model's layout: linear layers packed, the rest kept at 16 bits, with the default
    /// scales and zero points of groups of 128 columns.
    #[test]
    fn a_layout_packs_the_linear_layers_and_keeps_the_rest() {
        let facts = ModelFacts {
            parameters: 1000 + 256 * 512,
            active_parameters: 1000 + 256 * 512,
            native_bits: Some(16),
            layout: Some(Layout {
                quantised: vec![Matrix {
                    rows: 256,
                    columns: 512,
                    count: 1,
                }],
                kept: vec![Kept {
                    what: "embeddings".into(),
                    parameters: 1000,
                }],
                rule: "test".into(),
            }),
            ..ModelFacts::default()
        };
        let e = memory(
            &facts,
            &MemoryOptions {
                bits: Some(4),
                ..MemoryOptions::default()
            },
        )
        .unwrap();
        let l = e.packed_layout.clone().unwrap();
        assert_eq!(l.quantised_bytes, 256 * 512 / 2);
        assert_eq!(l.kept_bytes, 2000);
        assert_eq!(e.packed_weight_bytes, Some(256 * 512 / 2 + 2000));
        // 256 rows x 512 / 128 groups, a 16-bit scale and a 4-bit zero point each.
        let m = e.quantisation_metadata.clone().unwrap();
        assert_eq!(
            (m.groups, m.scale_bytes, m.zero_point_bytes),
            (1024, 2048, 512)
        );
        assert!(m.source.ends_with("assumed; --group-size changes it"));
        check_sums(&e);
        // A config's block scheme (FP8 128 x 128, float32 scales) at its own width.
        let fp8 = ModelFacts {
            quantised_bits: Some(8),
            scheme: Some(Scheme {
                grouping: Grouping::Blocks {
                    rows: 128,
                    columns: 128,
                },
                scale_bits: 32,
                zero_point_bits: 0,
            }),
            ..facts.clone()
        };
        let e = memory(&fp8, &MemoryOptions::default()).unwrap();
        assert_eq!(e.base.bits, 8);
        assert_eq!(e.packed_weight_bytes, Some(256 * 512 + 2000));
        assert_eq!(e.quantisation_metadata_bytes, Some(2 * 4 * 4));
        assert!(
            e.assumptions[0].contains("quantization_config"),
            "{:?}",
            e.assumptions
        );
        check_sums(&e);
    }

    /// Sliding-window layers cache at most their window; a latent layer caches its latent.
    #[test]
    fn windows_and_latents_in_the_kv_cache() {
        // Gemma 2 9B: 21 sliding (4096) and 21 full layers, 2 x 8 x 256 elements each.
        let gemma = ModelFacts {
            parameters: 1,
            active_parameters: 1,
            native_bits: Some(16),
            kv_layers: vec![
                KvLayers {
                    kind: KvKind::SlidingWindow,
                    layers: 21,
                    elements_per_token_per_layer: 4096,
                    window: Some(4096),
                },
                KvLayers {
                    kind: KvKind::Full,
                    layers: 21,
                    elements_per_token_per_layer: 4096,
                    window: None,
                },
            ],
            ..ModelFacts::default()
        };
        let options = MemoryOptions {
            context: Some(8192),
            ..MemoryOptions::default()
        };
        let e = memory(&gemma, &options).unwrap();
        let per_layer_token = 4096 * 2;
        assert_eq!(e.kv_cache_bytes_per_token, Some(42 * per_layer_token));
        assert_eq!(
            e.kv_cache_bytes,
            Some(21 * per_layer_token * 4096 + 21 * per_layer_token * 8192)
        );
        let sentence = e.assumptions.last().unwrap();
        assert!(
            sentence.contains("21 sliding-window layer(s) cache at most 4096 of the 8192 tokens"),
            "{sentence}"
        );
        check_sums(&e);
        // DeepSeek-V3: 61 layers of a 576-element latent, 70272 bytes per token in bfloat16.
        let v3 = ModelFacts {
            parameters: 1,
            active_parameters: 1,
            native_bits: Some(16),
            kv_layers: vec![KvLayers {
                kind: KvKind::Latent,
                layers: 61,
                elements_per_token_per_layer: 576,
                window: None,
            }],
            ..ModelFacts::default()
        };
        let e = memory(&v3, &options).unwrap();
        assert_eq!(e.kv_cache_bytes_per_token, Some(70_272));
        assert_eq!(e.kv_cache_bytes, Some(70_272 * 8192));
        assert!(e.assumptions[0].contains("multi-head latent attention"));
        check_sums(&e);
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
