//! A model as the `model` crate read it, turned into what the estimates take: the facts of
//! [`crate::memory`] (parameters, stored bytes, KV geometry, the packed layout of a quantised
//! checkpoint) and the sentences about its own structure (experts held but not all run, sliding
//! windows, a declared quantisation) that `estimate` and `fit` print as assumptions. Reading the
//! files stays in `model`; the binary only locates and reads them.

use std::collections::BTreeMap;

use crate::memory::{Grouping, Kept, KvKind, KvLayers, Layout, Matrix, ModelFacts, Scheme};

/// A model read for `estimate` or `fit`, with the facts the arithmetic needs.
#[derive(Debug)]
pub struct LoadedModel {
    /// What the model crate read.
    pub model: model::Model,
    /// The same, for `rent::memory`.
    pub facts: ModelFacts,
    /// Sentences about the model's own structure (experts, sliding windows).
    pub notes: Vec<String>,
}

impl LoadedModel {
    /// The facts and notes of `m`; `context` (the KV cache's tokens, when asked) decides whether
    /// a sliding window is worth a note.
    pub fn new(m: model::Model, context: Option<u64>) -> LoadedModel {
        let attention = m.architecture.as_ref().map(|a| a.attention.clone());
        let mut notes = Vec::new();
        if let Some(a) = &m.architecture
            && let Some((experts, per_token)) = a.experts
        {
            notes.push(format!(
                "mixture of experts: all {experts} experts of every layer are held in memory; \
                 {per_token} run per token ({} of {} parameters active), which saves compute, not \
                 memory",
                m.active_parameters, m.parameters
            ));
        }
        if let (Some(att), Some(c)) = (&attention, context)
            && let Some(w) = att.sliding_window
            && w.window < c
        {
            let (what, how) = if w.chunked {
                (
                    "chunked attention",
                    format!("attend within chunks of {} tokens", w.window),
                )
            } else {
                (
                    "sliding window",
                    format!("attend to the last {} tokens only", w.window),
                )
            };
            notes.push(format!(
                "{what}: {} of {} layers {how}; the KV figure caches at most {} tokens in each of \
                 them and all {c} tokens in the other {}",
                w.layers,
                att.layers,
                w.window,
                att.layers - w.layers
            ));
        }
        if let Some(a) = &m.architecture
            && a.quantized
        {
            let q = a.quantization.as_ref();
            let method = q.and_then(|q| q.method.as_deref()).unwrap_or("unnamed");
            notes.push(match q.and_then(|q| q.bits) {
                Some(bits) => format!(
                    "config.json declares a quantization_config ({method}, {bits}-bit): with \
                     safetensors the stored bytes are exact; from config alone the weights are \
                     counted at its {bits} bits unless --bits says otherwise"
                ),
                None => format!(
                    "config.json declares a quantization_config ({method}) whose width is not \
                     read here: with safetensors the stored bytes are exact; from config alone, pass \
                     --bits for the quantised width"
                ),
            });
        }
        if let Some(a) = &m.architecture {
            notes.extend(a.notes.iter().cloned());
            let split = a.quantised_split();
            if !split.not_applied.is_empty() {
                notes.push(format!(
                    "modules_to_not_convert entries not applied to the packed layout (they name a \
                     single layer or a module not counted here): {}",
                    split.not_applied.join(", ")
                ));
            }
        }
        let kv_layers = attention.as_ref().map(kv_layers).unwrap_or_default();
        let (layout, quantised_bits, scheme) = match &m.architecture {
            Some(a) => {
                let q = a.quantization.as_ref();
                (
                    Some(layout(a)),
                    q.and_then(|q| q.bits),
                    q.and_then(|q| q.scheme).map(scheme),
                )
            }
            None => (None, None, None),
        };
        let facts = ModelFacts {
            parameters: m.parameters,
            active_parameters: m.active_parameters,
            stored_weight_bytes: m.stored_weight_bytes(),
            native_bits: m.native_bits(),
            kv_elements_per_token: attention
                .as_ref()
                .map(model::Attention::kv_elements_per_token),
            kv_layers,
            layout,
            quantised_bits,
            scheme,
        };
        LoadedModel {
            model: m,
            facts,
            notes,
        }
    }
}

/// The KV cache's layers by kind, from the attention geometry.
fn kv_layers(a: &model::Attention) -> Vec<KvLayers> {
    let elements = a.kv_elements_per_layer();
    let full_kind = if a.latent_kv.is_some() {
        KvKind::Latent
    } else {
        KvKind::Full
    };
    let windowed = a.sliding_window.map_or(0, |w| w.layers.min(a.layers));
    let mut out = Vec::new();
    if let Some(w) = a.sliding_window
        && windowed > 0
    {
        out.push(KvLayers {
            kind: if w.chunked {
                KvKind::Chunked
            } else {
                KvKind::SlidingWindow
            },
            layers: windowed,
            elements_per_token_per_layer: elements,
            window: Some(w.window),
        });
    }
    if a.layers > windowed {
        out.push(KvLayers {
            kind: full_kind,
            layers: a.layers - windowed,
            elements_per_token_per_layer: elements,
            window: None,
        });
    }
    out
}

/// The packed layout of a quantised checkpoint of `a`, for `rent::memory`.
fn layout(a: &model::Architecture) -> Layout {
    let split = a.quantised_split();
    let quantised = split
        .quantised
        .iter()
        .map(|p| Matrix {
            rows: p.rows,
            columns: p.columns,
            count: p.count,
        })
        .collect();
    // Kept tensors summed by kind, in the order of model::Role.
    let mut kept: BTreeMap<model::Role, u128> = BTreeMap::new();
    for p in &split.kept {
        *kept.entry(p.role).or_default() += p.parameters();
    }
    Layout {
        quantised,
        kept: kept
            .into_iter()
            .map(|(role, parameters)| Kept {
                what: role.label().to_string(),
                parameters: u64::try_from(parameters).unwrap_or(u64::MAX),
            })
            .collect(),
        rule: split.rule,
    }
}

/// A config's scale layout, for `rent::memory`.
fn scheme(s: model::Scheme) -> Scheme {
    Scheme {
        grouping: match s.grouping {
            model::Grouping::Columns(g) => Grouping::Columns(g),
            model::Grouping::Blocks { rows, columns } => Grouping::Blocks { rows, columns },
            model::Grouping::Rows => Grouping::Rows,
        },
        scale_bits: s.scale_bits,
        zero_point_bits: s.zero_point_bits,
    }
}
