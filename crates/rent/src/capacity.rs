//! What one GPU of a layout holds, in exact bytes, and the largest context and batch that fit
//! on it, solved from the byte model rather than found by trying sizes.
//!
//! Per GPU of a pipeline stage, under tensor-parallel degree T:
//!
//! - **weights**: the stage's layers' share of the parameters, plus the embedding on the first
//!   stage and the output head on the last, all divided by T (vLLM splits the embedding and the
//!   head over the vocabulary), plus the KV projections a GPU holds whole when T exceeds the KV
//!   heads (each GPU then keeps one KV head's `k_proj` and `v_proj`, hidden x head size each per
//!   layer, instead of a T-th of all of them). Bytes follow the parameters: the model's bytes
//!   (weights, scales, training states) x the GPU's parameters / all parameters, rounded up.
//! - **KV cache per token of one sequence**: 2 (key and value) x head size x the KV heads one GPU
//!   caches x the stage's layers, at the KV width (with multi-head latent attention, the latent
//!   per layer, whole on every GPU of the stage); a sliding-window (or chunked) layer's cache
//!   stops growing at its window, a full-attention layer's grows with the context.
//! - the per-GPU **reserve**, not split.
//!
//! The need at context c and batch b is weights + reserve + b x (full x c + sliding x min(c, w));
//! it grows with c and b, so the largest c (or b) is the solution of need = usable memory, in
//! whole tokens (sequences), taken over the stage that needs most.

use serde::Serialize;

use crate::layout::{Heads, Layout};

/// The input embedding and the output head, when config.json gives their sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedding {
    /// Vocabulary rows.
    pub vocab: u64,
    /// Hidden width.
    pub hidden: u64,
    /// The output head is the embedding itself (`tie_word_embeddings`).
    pub tied: bool,
}

impl Embedding {
    /// Parameters of the embedding (vocab x hidden).
    pub fn parameters(&self) -> u128 {
        u128::from(self.vocab) * u128::from(self.hidden)
    }
}

/// The attention geometry and what bounds the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Layers, query heads, KV heads.
    pub heads: Heads,
    /// Width of one head.
    pub head_dim: u64,
    /// Sliding-window attention: (window in tokens, layers that use it).
    pub sliding: Option<(u64, u64)>,
    /// Multi-head latent attention: the elements one token caches per layer (one compressed
    /// latent for all heads, which every tensor-parallel GPU holds whole, as vLLM's MLA does).
    pub latent_kv: Option<u64>,
    /// Width of one cached key or value element, in bits.
    pub kv_bits: u32,
    /// The embedding's size, when known (else it is spread over the layers).
    pub embedding: Option<Embedding>,
    /// config.json's `max_position_embeddings`: the longest context the model is made for.
    pub max_positions: Option<u64>,
}

impl Geometry {
    /// Layers with a sliding window shorter than no context: (window, layers); `None` when every
    /// layer attends to the whole context.
    fn window(&self) -> Option<(u64, u64)> {
        self.sliding
            .filter(|&(w, n)| w > 0 && n > 0)
            .map(|(w, n)| (w, n.min(self.heads.layers)))
    }

    /// Layers that attend to the whole context.
    pub fn full_layers(&self) -> u64 {
        self.heads.layers - self.window().map_or(0, |(_, n)| n)
    }
}

/// What is placed on the GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Every parameter.
    pub parameters: u64,
    /// Parameters used per token.
    pub active_parameters: u64,
    /// Mixture of experts: (experts per layer, experts per token).
    pub experts: Option<(u64, u64)>,
    /// Bytes held as the parameters are (weights, quantisation scales, training states), split
    /// with them.
    pub parameter_bytes: u128,
    /// Of those, the weights and scales: what a decode step reads.
    pub weight_bytes: u128,
    /// The geometry (`None` for a bare parameter count: no layout, no KV cache).
    pub geometry: Option<Geometry>,
    /// Tokens per sequence (`--context`).
    pub context: Option<u64>,
    /// Sequences (`--batch`).
    pub batch: u64,
}

/// One GPU of one pipeline stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageBytes {
    /// The stage's layers.
    pub layers: u64,
    /// Of which attend to the whole context.
    pub full_layers: u64,
    /// Bytes held as the parameters are (weights, scales, training states).
    pub parameter_bytes: u128,
    /// Of those, the weights and scales.
    pub weight_bytes: u128,
    /// KV bytes per token of one sequence in the stage's full-attention layers.
    pub full_kv_bytes_per_token: u128,
    /// KV bytes per token of one sequence in its sliding-window layers (up to the window).
    pub sliding_kv_bytes_per_token: u128,
    /// Of the weights, the input embedding's on this GPU when a decode step reads only one row
    /// of it per sequence (first stage, not also serving as the output head there).
    #[serde(default)]
    pub input_embedding_bytes: u128,
}

impl StageBytes {
    /// KV bytes of one sequence of `context` tokens (`window`: the sliding layers' window).
    pub fn kv_bytes_per_sequence(&self, context: u64, window: Option<u64>) -> Option<u128> {
        let c = u128::from(context);
        let w = u128::from(window.unwrap_or(context).min(context));
        self.full_kv_bytes_per_token
            .checked_mul(c)?
            .checked_add(self.sliding_kv_bytes_per_token.checked_mul(w)?)
    }
}

/// KV bytes per token of `layers` layers on one GPU that caches `kv_heads_per_gpu` KV heads.
fn kv_bytes(g: &Geometry, layers: u64, kv_heads_per_gpu: u64) -> u128 {
    let per_layer = match g.latent_kv {
        Some(latent) => u128::from(latent),
        None => 2 * u128::from(kv_heads_per_gpu) * u128::from(g.head_dim),
    };
    (u128::from(layers) * per_layer * u128::from(g.kv_bits)).div_ceil(8)
}

/// The bytes of every stage of `layout` (one GPU of each).
///
/// A stage's full-attention layers are its share of them rounded up (at most one more than the
/// pattern may give it), so the figure never counts too few; with one stage it is exact.
pub fn stages(workload: &Workload, layout: &Layout) -> Vec<StageBytes> {
    let Some(g) = &workload.geometry else {
        return Vec::new();
    };
    let layers = g.heads.layers.max(1);
    let p = u128::from(workload.parameters.max(1));
    let tp = layout.tensor_parallel.max(1);
    let full_total = g.full_layers();
    // The embedding and head are known only when they are smaller than the model.
    let embedding = g.embedding.filter(|e| {
        let two = e.parameters() * if e.tied { 1 } else { 2 };
        two < p
    });
    let e = embedding.map_or(0, |e| e.parameters());
    let head_in_p = embedding.map_or(0, |x| if x.tied { 0 } else { x.parameters() });
    let body = p - e - head_in_p;
    // Parameters one GPU holds beyond a T-th when the degree exceeds the KV heads, x T.
    let replicated_x_tp = match embedding {
        Some(x) if tp > g.heads.kv_heads => {
            2 * u128::from(x.hidden) * u128::from(g.head_dim) * u128::from(tp - g.heads.kv_heads)
        }
        _ => 0,
    };
    let count = layout.stage_layers.len();
    let denominator = p * u128::from(layers) * u128::from(tp);
    layout
        .stage_layers
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let first = i == 0;
            let last = i + 1 == count;
            let mut ends = 0u128;
            if first {
                ends += e;
            }
            if last {
                // A tied head is the embedding: a second copy only on a stage of its own.
                ends += match embedding {
                    Some(x) if x.tied && count > 1 => e,
                    Some(x) if x.tied => 0,
                    Some(_) => head_in_p,
                    None => 0,
                };
            }
            let n128 = u128::from(n);
            let numerator = body * n128
                + ends * u128::from(layers)
                + replicated_x_tp * n128 * u128::from(layers);
            let share = |bytes: u128| -> u128 {
                bytes
                    .checked_mul(numerator)
                    .map(|v| v.div_ceil(denominator))
                    .unwrap_or_else(|| {
                        (bytes as f64 * (numerator as f64 / denominator as f64)).ceil() as u128
                    })
            };
            let full = if count == 1 {
                full_total.min(n)
            } else {
                (n128 * u128::from(full_total))
                    .div_ceil(u128::from(layers))
                    .min(n128) as u64
            };
            // The input embedding, read one row a sequence per step, unless the same table is
            // this stage's output head too (tied, one stage), read whole.
            let input_embedding_bytes = match embedding {
                Some(x) if first && !(x.tied && count == 1) => workload
                    .weight_bytes
                    .checked_mul(e)
                    .map_or(0, |v| v / (p * u128::from(tp))),
                _ => 0,
            };
            StageBytes {
                input_embedding_bytes,
                layers: n,
                full_layers: full,
                parameter_bytes: share(workload.parameter_bytes),
                weight_bytes: share(workload.weight_bytes),
                full_kv_bytes_per_token: kv_bytes(g, full, layout.kv_heads_per_gpu),
                sliding_kv_bytes_per_token: kv_bytes(g, n - full, layout.kv_heads_per_gpu),
            }
        })
        .collect()
}

/// The need of the busiest GPU at `context` x `batch` (no KV cache without a context), with
/// the per-GPU reserve.
pub fn need(
    stages: &[StageBytes],
    reserve: u128,
    context: Option<u64>,
    batch: u64,
    window: Option<u64>,
) -> u128 {
    stages
        .iter()
        .map(|s| {
            let kv = context
                .and_then(|c| s.kv_bytes_per_sequence(c, window))
                .and_then(|k| k.checked_mul(u128::from(batch)))
                .unwrap_or(if context.is_some() { u128::MAX } else { 0 });
            s.parameter_bytes.saturating_add(reserve).saturating_add(kv)
        })
        .max()
        .unwrap_or(0)
}

/// What stopped the largest context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextLimit {
    /// The memory: one token more does not fit.
    Memory,
    /// config.json's `max_position_embeddings`: the memory would hold more.
    MaxPositionEmbeddings,
    /// Nothing: every layer slides and config.json gives no `max_position_embeddings`.
    Unbounded,
}

/// The largest context and what bounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargestContext {
    /// Tokens per sequence (0: not one token fits beside the weights and reserve); `None` when
    /// unbounded.
    pub tokens: Option<u64>,
    /// What stopped it.
    pub limit: ContextLimit,
}

/// Free bytes per GPU of the stage: usable - parameters - reserve (`None`: negative).
fn free(stage: &StageBytes, reserve: u128, usable: u128) -> Option<u128> {
    usable.checked_sub(stage.parameter_bytes.checked_add(reserve)?)
}

/// The largest context per sequence, at `batch` sequences, that one stage holds.
fn stage_context(stage: &StageBytes, free: u128, batch: u64, window: Option<u64>) -> Option<u64> {
    // b x (f x c + s x min(c, w)) <= free  <=>  f x c + s x min(c, w) <= floor(free / b).
    let budget = free / u128::from(batch.max(1));
    let f = stage.full_kv_bytes_per_token;
    let s = stage.sliding_kv_bytes_per_token;
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    match window {
        Some(w) if s > 0 => {
            let w128 = u128::from(w);
            // Within the window every layer grows: (f + s) x c <= budget.
            let within = budget / (f + s);
            if within < w128 {
                return Some(clamp(within));
            }
            // Beyond it only the full layers grow: f x c + s x w <= budget.
            if f == 0 {
                return None;
            }
            Some(clamp((budget - s * w128) / f))
        }
        _ => {
            let per = f + s;
            if per == 0 {
                return None;
            }
            Some(clamp(budget / per))
        }
    }
}

/// The largest context at `batch`, over every stage, capped at `max_positions`.
pub fn largest_context(
    stages: &[StageBytes],
    reserve: u128,
    usable: u128,
    batch: u64,
    window: Option<u64>,
    max_positions: Option<u64>,
) -> LargestContext {
    let mut best: Option<u64> = None;
    let mut bounded = false;
    for s in stages {
        let Some(room) = free(s, reserve, usable) else {
            return LargestContext {
                tokens: Some(0),
                limit: ContextLimit::Memory,
            };
        };
        if let Some(c) = stage_context(s, room, batch, window) {
            bounded = true;
            best = Some(best.map_or(c, |b| b.min(c)));
        }
    }
    match (bounded, best, max_positions) {
        (true, Some(c), Some(m)) if c > m => LargestContext {
            tokens: Some(m),
            limit: ContextLimit::MaxPositionEmbeddings,
        },
        (true, Some(c), _) => LargestContext {
            tokens: Some(c),
            limit: ContextLimit::Memory,
        },
        (_, _, Some(m)) => LargestContext {
            tokens: Some(m),
            limit: ContextLimit::MaxPositionEmbeddings,
        },
        _ => LargestContext {
            tokens: None,
            limit: ContextLimit::Unbounded,
        },
    }
}

/// The largest batch of `context`-token sequences, over every stage (0: not one fits).
pub fn largest_batch(
    stages: &[StageBytes],
    reserve: u128,
    usable: u128,
    context: u64,
    window: Option<u64>,
) -> u64 {
    let mut best = u64::MAX;
    for s in stages {
        let Some(room) = free(s, reserve, usable) else {
            return 0;
        };
        let per = s
            .kv_bytes_per_sequence(context, window)
            .unwrap_or(u128::MAX);
        let b = room
            .checked_div(per)
            .map_or(u64::MAX, |b| u64::try_from(b).unwrap_or(u64::MAX));
        best = best.min(b);
    }
    best
}

/// The window of a workload's sliding layers, when it has some.
pub fn window(workload: &Workload) -> Option<u64> {
    workload
        .geometry
        .as_ref()
        .and_then(Geometry::window)
        .map(|(w, _)| w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::layout;

    const GIB: u128 = 1 << 30;

    fn llama8b() -> Workload {
        Workload {
            parameters: 8_030_261_248,
            active_parameters: 8_030_261_248,
            experts: None,
            parameter_bytes: 16_060_522_496,
            weight_bytes: 16_060_522_496,
            geometry: Some(Geometry {
                heads: Heads {
                    layers: 32,
                    heads: 32,
                    kv_heads: 8,
                },
                head_dim: 128,
                sliding: None,
                latent_kv: None,
                kv_bits: 16,
                embedding: Some(Embedding {
                    vocab: 128_256,
                    hidden: 4096,
                    tied: false,
                }),
                max_positions: Some(131_072),
            }),
            context: Some(8192),
            batch: 1,
        }
    }

    #[test]
    fn one_gpu_holds_everything_and_the_context_is_solved() {
        let w = llama8b();
        let heads = w.geometry.as_ref().unwrap().heads;
        let l = layout(&heads, 1, 1).unwrap();
        let s = stages(&w, &l);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].parameter_bytes, 16_060_522_496);
        assert_eq!(s[0].full_kv_bytes_per_token, 131_072);
        let usable = 81_106u128 << 20;
        let free = usable - 16_060_522_496 - 2 * GIB;
        // By memory alone: floor(free / 131072) tokens, above 131072: capped.
        assert!(free / 131_072 > 131_072);
        let c = largest_context(&s, 2 * GIB, usable, 1, None, Some(131_072));
        assert_eq!(c.tokens, Some(131_072));
        assert_eq!(c.limit, ContextLimit::MaxPositionEmbeddings);
        let c = largest_context(&s, 2 * GIB, usable, 1, None, None);
        assert_eq!(c.tokens, Some((free / 131_072) as u64));
        assert_eq!(
            largest_batch(&s, 2 * GIB, usable, 8192, None),
            (free / (131_072 * 8192)) as u64
        );
        // The solution is tight: one token more does not fit.
        let t = c.tokens.unwrap();
        assert!(need(&s, 2 * GIB, Some(t), 1, None) <= usable);
        assert!(need(&s, 2 * GIB, Some(t + 1), 1, None) > usable);
    }

    #[test]
    fn sliding_layers_stop_growing_at_their_window() {
        // Gemma 2 9B's shape: 42 layers, 21 sliding over 4096 tokens, 8 KV heads of 256.
        let w = Workload {
            parameters: 9_241_705_984,
            active_parameters: 9_241_705_984,
            experts: None,
            parameter_bytes: 18_483_411_968,
            weight_bytes: 18_483_411_968,
            geometry: Some(Geometry {
                heads: Heads {
                    layers: 42,
                    heads: 16,
                    kv_heads: 8,
                },
                head_dim: 256,
                sliding: Some((4096, 21)),
                latent_kv: None,
                kv_bits: 16,
                embedding: None,
                max_positions: None,
            }),
            context: None,
            batch: 1,
        };
        let heads = w.geometry.as_ref().unwrap().heads;
        let s = stages(&w, &layout(&heads, 1, 1).unwrap());
        let per_layer = 2 * 8 * 256 * 2u128;
        assert_eq!(s[0].full_kv_bytes_per_token, 21 * per_layer);
        assert_eq!(s[0].sliding_kv_bytes_per_token, 21 * per_layer);
        assert_eq!(
            s[0].kv_bytes_per_sequence(10_000, Some(4096)),
            Some(21 * per_layer * 10_000 + 21 * per_layer * 4096)
        );
        let usable = 48_676u128 << 20;
        let free = usable - 18_483_411_968 - 2 * GIB;
        let c = largest_context(&s, 2 * GIB, usable, 4, Some(4096), None);
        // Beyond the window: 4 x (f x c + s x 4096) <= free.
        let want = ((free / 4) - 21 * per_layer * 4096) / (21 * per_layer);
        assert_eq!(c.tokens, Some(want as u64));
        // Every layer sliding: the context is unbounded by memory.
        let all = Workload {
            geometry: Some(Geometry {
                sliding: Some((4096, 42)),
                max_positions: None,
                ..w.geometry.clone().unwrap()
            }),
            ..w
        };
        let s = stages(&all, &layout(&heads, 1, 1).unwrap());
        let c = largest_context(&s, 2 * GIB, usable, 1, Some(4096), None);
        assert_eq!(c.limit, ContextLimit::Unbounded);
    }

    #[test]
    fn stages_hold_their_layers_and_the_ends() {
        let w = llama8b();
        let heads = w.geometry.as_ref().unwrap().heads;
        // 3 GPUs: TP1 x PP3, layers [11, 11, 10].
        let l = layout(&heads, 3, 1).unwrap();
        let s = stages(&w, &l);
        let e = 128_256u128 * 4096;
        let body = 8_030_261_248u128 - 2 * e;
        let bytes =
            |params_x32: u128| (16_060_522_496u128 * params_x32).div_ceil(8_030_261_248 * 32);
        assert_eq!(s[0].parameter_bytes, bytes(body * 11 + e * 32));
        assert_eq!(s[1].parameter_bytes, bytes(body * 11));
        assert_eq!(s[2].parameter_bytes, bytes(body * 10 + e * 32));
        assert_eq!(s[0].full_kv_bytes_per_token, 11 * 2 * 8 * 128 * 2);
        // The stages hold the whole model once, give or take the rounding.
        let sum: u128 = s.iter().map(|x| x.parameter_bytes).sum();
        assert!((16_060_522_496..=16_060_522_496 + 3).contains(&sum));
        // 16 GPUs of tensor parallel: each holds one of 8 KV heads twice, and its k/v
        // projections whole.
        let l = layout(&heads, 16, 16).unwrap();
        let s = stages(&w, &l);
        assert_eq!(s[0].full_kv_bytes_per_token, 32 * 2 * 128 * 2);
        let extra = 2 * 4096 * 128 * 8u128 * 32 * 32;
        assert_eq!(
            s[0].parameter_bytes,
            (16_060_522_496u128 * (8_030_261_248 * 32 + extra)).div_ceil(8_030_261_248 * 32 * 16)
        );
    }

    #[test]
    fn a_latent_cache_is_whole_on_every_tensor_parallel_gpu() {
        // DeepSeek-V3's attention: 61 layers, 128 heads, a 512 + 64 element latent per layer.
        let w = Workload {
            geometry: Some(Geometry {
                heads: Heads {
                    layers: 61,
                    heads: 128,
                    kv_heads: 128,
                },
                head_dim: 192,
                sliding: None,
                latent_kv: Some(576),
                kv_bits: 16,
                embedding: None,
                max_positions: None,
            }),
            ..llama8b()
        };
        let heads = w.geometry.as_ref().unwrap().heads;
        let s = stages(&w, &layout(&heads, 8, 8).unwrap());
        assert_eq!(s[0].full_kv_bytes_per_token, 61 * 576 * 2);
    }
}
