//! Speed ceilings: how fast a package could at most decode and prefill, from memory bandwidth
//! and dense peak throughput alone. They are roofline bounds, never predictions: a real engine
//! adds kernel launches, communication between GPUs, scheduling and imperfect overlap, and runs
//! slower; no figure here says how much slower.
//!
//! - **Decode.** One step gives every sequence of the batch one token. A GPU reads, per step, its
//!   share of the weights once (of the input embedding, only one row per sequence; the output
//!   head whole) and the KV cache of every sequence at the full context (sliding
//!   layers up to their window), so tokens/s <= batch x bandwidth / bytes read. For a mixture of
//!   experts, a step at batch 1 reads the shared weights and the experts one token uses; as the
//!   batch grows, each sequence's token is taken to pick its experts independently and uniformly,
//!   so a layer reads E x (1 - (1 - k/E)^B) of its E experts (k per token). With P pipeline stages
//!   and M = min(batch, P) micro-batches, a stage reads its weights once per micro-batch; a round
//!   in which every sequence gains one token takes at least the busiest stage's
//!   M x weights + KV cache, and at least one micro-batch's pass through every stage.
//! - **Prefill.** 2 FLOP per active parameter per prompt token, plus attention: 4 x heads x
//!   head size FLOP per (query, key) pair, a causal prompt of C tokens having C(C+1)/2 pairs per
//!   full-attention layer (a sliding layer's pairs stop growing at its window); tokens/s <=
//!   GPUs x dense peak / FLOP per token.
//! - **Price per million tokens at the ceiling**: the package price / (days x 86400 s x the
//!   ceiling) x 10^6, a floor on what a token costs on that package, never an estimate of it.

use rust_decimal::Decimal;
use serde::Serialize;

use crate::capacity::{StageBytes, Workload};
use crate::datasheet::{Datasheet, GemmKind};

/// What every ceiling is, in the words documents carry.
pub const BOUND: &str = "roofline bound: an upper limit from memory bandwidth and dense peak \
     throughput, never a prediction; a real engine runs slower";

/// One GPU's figures and where they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpeed {
    /// Memory bandwidth, GB/s (10^9 bytes per second).
    pub memory_bandwidth_gb_s: f64,
    /// Where the bandwidth comes from.
    pub bandwidth_source: String,
    /// The products' data type.
    pub compute: GemmKind,
    /// Dense throughput of that type, TFLOP/s (`None`: the GPU has no such unit).
    pub dense_tflops: Option<f64>,
    /// Where the throughput comes from.
    pub compute_source: String,
}

/// The products a model of `bits`-bit weights runs: float32 for 32-bit weights, float16 or
/// bfloat16 (the stored dtype; bfloat16 when unknown) for 16-bit ones and for weights under 8
/// bits (dequantised to 16 bits before the product), FP8 for 8-bit weights on a GPU with FP8,
/// else 16-bit.
pub fn compute_kind(bits: u32, dtype: Option<&str>, has_fp8: bool) -> GemmKind {
    let sixteen = if dtype.is_some_and(|d| d == "float16" || d == "half") {
        GemmKind::Float16
    } else {
        GemmKind::Bfloat16
    };
    match bits {
        17.. => GemmKind::Float32,
        8 if has_fp8 => GemmKind::Float8E4m3,
        _ => sixteen,
    }
}

/// The datasheet's figures for catalogue slug `gpu`: when the table lists several form factors
/// of it, the fastest memory (the catalogue does not say which one is rented, and a bound must
/// hold for all). `None` without a row.
pub fn from_datasheet(
    datasheet: &Datasheet,
    gpu: &str,
    bits: u32,
    dtype: Option<&str>,
) -> Option<GpuSpeed> {
    let rows = datasheet.for_gpu(gpu);
    let row = rows.iter().copied().max_by(|a, b| {
        a.memory_bandwidth_gb_s
            .total_cmp(&b.memory_bandwidth_gb_s)
            .then(b.row.cmp(&a.row))
    })?;
    let kind = compute_kind(bits, dtype, row.fp8_tflops.is_some());
    let which = if rows.len() > 1 {
        format!(
            " (the faster of the {} form factors listed for {gpu}: the catalogue does not say \
             which one is rented)",
            rows.len()
        )
    } else {
        String::new()
    };
    let name = datasheet.name();
    Some(GpuSpeed {
        memory_bandwidth_gb_s: row.memory_bandwidth_gb_s,
        bandwidth_source: format!("datasheet ({name}): {} memory bandwidth{which}", row.model),
        compute: kind,
        dense_tflops: row.tflops(kind),
        compute_source: format!("datasheet ({name}): {} dense {kind} peak", row.model),
    })
}

/// The ceilings of one package.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceilings {
    /// Always [`BOUND`].
    pub bound: &'static str,
    /// Tokens per second the whole batch can at most gain while decoding.
    pub decode_tokens_per_s: f64,
    /// The same, per sequence.
    pub decode_tokens_per_s_per_sequence: f64,
    /// Bytes the busiest GPU reads per decode step (with pipeline stages: per round in which
    /// every sequence gains one token, including a stage's waiting when there are fewer
    /// micro-batches than stages).
    pub decode_bytes_per_step_per_gpu: f64,
    /// Experts read per layer per step (mixture of experts only).
    pub decode_experts_read_per_layer: Option<f64>,
    /// Prompt tokens per second at most (`None`: the GPU has no unit for the data type).
    pub prefill_tokens_per_s: Option<f64>,
    /// FLOP per prompt token, attention over the context included.
    pub prefill_flop_per_token: f64,
    /// Per GPU, GB/s.
    pub memory_bandwidth_gb_s: f64,
    /// Where it comes from.
    pub bandwidth_source: String,
    /// The products' data type.
    pub compute: GemmKind,
    /// Per GPU, TFLOP/s.
    pub dense_tflops: Option<f64>,
    /// Where it comes from.
    pub compute_source: String,
    /// Package price per million decoded tokens at the ceiling, cents: a floor on the cost.
    pub decode_price_per_mtok_cents: Option<Decimal>,
    /// Package price per million prompt tokens at the ceiling, cents: a floor on the cost.
    pub prefill_price_per_mtok_cents: Option<Decimal>,
}

/// Experts a layer reads for `tokens` tokens, each picking `per_token` of `experts`
/// independently and uniformly: E x (1 - (1 - k/E)^tokens).
pub fn experts_read(experts: u64, per_token: u64, tokens: f64) -> f64 {
    let e = experts as f64;
    let k = (per_token as f64).min(e);
    e * (1.0 - (1.0 - k / e).powf(tokens))
}

/// The share of the weights a decode step reads for `tokens` tokens (1 for a dense model).
fn read_fraction(w: &Workload, tokens: f64) -> (f64, Option<f64>) {
    match w.experts {
        Some((e, k)) if e > k && w.parameters > w.active_parameters => {
            let p = w.parameters as f64;
            let per_expert = (w.parameters - w.active_parameters) as f64 / (e - k) as f64;
            let read = experts_read(e, k, tokens);
            ((p - per_expert * (e as f64 - read)) / p, Some(read))
        }
        _ => (1.0, None),
    }
}

/// Causal (query, key) pairs of a `c`-token prompt in a layer that sees at most `window` keys.
fn pairs(c: f64, window: Option<f64>) -> f64 {
    match window {
        Some(w) if w < c => w * (w + 1.0) / 2.0 + (c - w) * w,
        _ => c * (c + 1.0) / 2.0,
    }
}

/// FLOP per prompt token: 2 x active parameters, plus attention at the workload's context.
pub fn prefill_flop_per_token(w: &Workload) -> f64 {
    let mut flop = 2.0 * w.active_parameters as f64;
    if let (Some(g), Some(c)) = (&w.geometry, w.context) {
        let c = c as f64;
        let per_pair = 4.0 * g.heads.heads as f64 * g.head_dim as f64;
        let full = g.full_layers() as f64;
        let sliding = (g.heads.layers - g.full_layers()) as f64;
        let window = g.sliding.map(|(win, _)| win as f64);
        flop += per_pair * (full * pairs(c, None) + sliding * pairs(c, window)) / c;
    }
    flop
}

fn per_mtok(price_cents: u64, days: u32, tokens_per_s: f64) -> Option<Decimal> {
    if !(tokens_per_s.is_finite() && tokens_per_s > 0.0) {
        return None;
    }
    let seconds = f64::from(days) * 86_400.0;
    let cents = price_cents as f64 * 1e6 / (seconds * tokens_per_s);
    Decimal::try_from(cents).ok().map(|d| d.round_dp(4))
}

/// The ceilings of a package of `gpus` GPUs whose stages are `stages` (one GPU of each; a
/// single entry without pipeline stages), priced `price_cents` for `days`.
pub fn ceilings(
    w: &Workload,
    stages: &[StageBytes],
    window: Option<u64>,
    gpus: u64,
    speed: &GpuSpeed,
    price_cents: u64,
    days: u32,
) -> Ceilings {
    let batch = w.batch.max(1) as f64;
    let p = stages.len().max(1) as f64;
    let micro = batch.min(p);
    let (fraction, experts) = read_fraction(w, batch / micro);
    let mut busiest = 0.0f64;
    let mut pass = 0.0f64;
    // One embedding row per sequence of the micro-batch, instead of the whole table.
    let vocab = w
        .geometry
        .as_ref()
        .and_then(|g| g.embedding)
        .map_or(1.0, |e| e.vocab.max(1) as f64);
    let rows = (batch / micro).min(vocab);
    for s in stages {
        let table = s.input_embedding_bytes as f64;
        let weights = (s.weight_bytes as f64 - table) * fraction + table * rows / vocab;
        let kv = w
            .context
            .and_then(|c| s.kv_bytes_per_sequence(c, window))
            .map_or(0.0, |k| k as f64 * batch);
        busiest = busiest.max(micro * weights + kv);
        pass += weights + kv / micro;
    }
    let round = busiest.max(pass);
    let bandwidth = speed.memory_bandwidth_gb_s * 1e9;
    let decode = if round > 0.0 {
        batch * bandwidth / round
    } else {
        f64::INFINITY
    };
    let flop = prefill_flop_per_token(w);
    let prefill = speed
        .dense_tflops
        .filter(|t| *t > 0.0 && flop > 0.0)
        .map(|t| gpus as f64 * t * 1e12 / flop);
    Ceilings {
        bound: BOUND,
        decode_tokens_per_s: decode,
        decode_tokens_per_s_per_sequence: decode / batch,
        decode_bytes_per_step_per_gpu: round,
        decode_experts_read_per_layer: experts,
        prefill_tokens_per_s: prefill,
        prefill_flop_per_token: flop,
        memory_bandwidth_gb_s: speed.memory_bandwidth_gb_s,
        bandwidth_source: speed.bandwidth_source.clone(),
        compute: speed.compute,
        dense_tflops: speed.dense_tflops,
        compute_source: speed.compute_source.clone(),
        decode_price_per_mtok_cents: per_mtok(price_cents, days, decode),
        prefill_price_per_mtok_cents: prefill.and_then(|t| per_mtok(price_cents, days, t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{Geometry, stages};
    use crate::layout::{Heads, layout};

    fn speed(bandwidth: f64, tflops: f64) -> GpuSpeed {
        GpuSpeed {
            memory_bandwidth_gb_s: bandwidth,
            bandwidth_source: "test".to_string(),
            compute: GemmKind::Bfloat16,
            dense_tflops: Some(tflops),
            compute_source: "test".to_string(),
        }
    }

    fn dense(batch: u64, context: Option<u64>) -> Workload {
        Workload {
            parameters: 1_000_000_000,
            active_parameters: 1_000_000_000,
            experts: None,
            parameter_bytes: 2_000_000_000,
            weight_bytes: 2_000_000_000,
            geometry: Some(Geometry {
                heads: Heads {
                    layers: 16,
                    heads: 16,
                    kv_heads: 4,
                },
                head_dim: 64,
                sliding: None,
                latent_kv: None,
                kv_bits: 16,
                embedding: None,
                max_positions: None,
            }),
            context,
            batch,
        }
    }

    #[test]
    fn decode_reads_the_weights_once_and_every_sequences_cache() {
        let w = dense(4, Some(1000));
        let heads = w.geometry.as_ref().unwrap().heads;
        let s = stages(&w, &layout(&heads, 1, 1).unwrap());
        let c = ceilings(&w, &s, None, 1, &speed(1000.0, 100.0), 10_000, 1);
        // 16 layers x 4 KV heads x 64 x 2 x 2 bytes = 16384 bytes per token.
        let bytes = 2e9 + 4.0 * 1000.0 * 16384.0;
        assert_eq!(c.decode_bytes_per_step_per_gpu, bytes);
        assert!((c.decode_tokens_per_s - 4.0 * 1e12 / bytes).abs() < 1e-9);
        // Prefill: 2 x 1e9 + 4 x 16 x 64 x 16 layers x (1001 / 2).
        let flop = 2e9 + 4.0 * 16.0 * 64.0 * 16.0 * 1001.0 / 2.0;
        assert!((c.prefill_flop_per_token - flop).abs() < 1e-3);
        assert!((c.prefill_tokens_per_s.unwrap() - 100e12 / flop).abs() < 1e-6);
        // 100 dollars for a day at the decode ceiling.
        let want = 10_000.0 * 1e6 / (86_400.0 * c.decode_tokens_per_s);
        let got: f64 = c.decode_price_per_mtok_cents.unwrap().try_into().unwrap();
        assert!((got - want).abs() < 1e-4);
    }

    #[test]
    fn experts_read_grow_with_the_batch() {
        assert!((experts_read(8, 2, 1.0) - 2.0).abs() < 1e-12);
        assert!((experts_read(8, 2, 8.0) - 8.0 * (1.0 - 0.75f64.powi(8))).abs() < 1e-12);
        let mut w = dense(1, None);
        w.parameters = 46_702_792_704;
        w.active_parameters = 12_879_925_248;
        w.experts = Some((8, 2));
        let (f, _) = read_fraction(&w, 1.0);
        assert!((f - 12_879_925_248.0 / 46_702_792_704.0).abs() < 1e-12);
    }

    #[test]
    fn a_pipeline_reads_its_stage_once_per_micro_batch() {
        let w = dense(1, None);
        let heads = w.geometry.as_ref().unwrap().heads;
        let s = stages(&w, &layout(&heads, 2, 1).unwrap());
        let c = ceilings(&w, &s, None, 2, &speed(1000.0, 100.0), 1, 1);
        // One sequence passes both stages in turn: the whole model's bytes per token.
        assert!((c.decode_bytes_per_step_per_gpu - 2e9).abs() <= 2.0);
    }

    #[test]
    fn the_compute_type_follows_the_weights() {
        assert_eq!(compute_kind(16, Some("bfloat16"), true), GemmKind::Bfloat16);
        assert_eq!(compute_kind(16, Some("float16"), true), GemmKind::Float16);
        assert_eq!(compute_kind(32, None, true), GemmKind::Float32);
        assert_eq!(compute_kind(8, None, true), GemmKind::Float8E4m3);
        assert_eq!(compute_kind(8, None, false), GemmKind::Bfloat16);
        assert_eq!(compute_kind(4, None, true), GemmKind::Bfloat16);
        let d = Datasheet::embedded();
        let a100 = from_datasheet(&d, "a100-80gb", 16, None).unwrap();
        assert_eq!(a100.memory_bandwidth_gb_s, 2039.0);
        assert!(a100.bandwidth_source.contains("faster of the 2"));
        assert!(from_datasheet(&d, "no-such-gpu", 16, None).is_none());
    }
}
