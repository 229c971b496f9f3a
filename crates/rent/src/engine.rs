//! The serving engine's memory budget on one GPU, term by term, as the engine itself computes it
//! at start-up, so that `fit` says "fits" only where the engine starts.
//!
//! - **vLLM** (`vllm/v1/worker/gpu_worker.py`, `determine_available_memory`): the instance may
//!   use `total x --gpu-memory-utilization` (0.9); from that it takes the weights as loaded,
//!   the peak of its profiling forward pass (a dummy batch of `--max-num-batched-tokens`
//!   tokens, then a dummy sampler run over `min(--max-num-seqs, tokens)` rows of logits), and
//!   the memory allocated outside PyTorch (cuBLAS workspaces, NCCL and custom all-reduce
//!   buffers); what is left is the KV cache, cut into blocks of 16 tokens
//!   (`vllm/v1/core/kv_cache_utils.py`). CUDA graphs are captured after the KV cache is
//!   allocated, so they come out of the `1 - utilization` margin, not out of the budget.
//! - **SGLang** (`python/sglang/srt/model_executor/model_runner.py`, `profile_max_num_token`):
//!   weights and KV pool together take `total x --mem-fraction-static`; the rest is left to
//!   activations and CUDA graphs; tokens are pages of one.
//! - **none**: the raw figure, the whole usable memory minus a flat per-GPU reserve.
//!
//! The weights and the KV bytes per token are exact; the activation peak, the non-torch memory
//! and the CUDA graphs are estimates from the model's shape, each with the range it may be off
//! by, said in words.

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;

const GIB: u128 = 1 << 30;

/// vLLM's KV cache block, in tokens (`--block-size` 16 on CUDA).
pub const VLLM_BLOCK_TOKENS: u64 = 16;

/// Bytes the profiling sampler run holds per element of its logits (rows x vocabulary), as
/// vLLM's V1 engine (the only one since 0.11) runs it: `gpu_model_runner.py`'s
/// `_dummy_sampler_run` asks for top-k and top-p over `min(max_num_seqs, tokens)` rows, and
/// `vllm/v1/sample/ops/topk_topp_sampler.py` (`apply_top_k_top_p`) sorts the float32 logits:
/// the float32 copy (4 bytes), the sort's float32 values (4) and its int64 indices (8) are alive
/// at once. No log-probabilities are computed (V0's `vllm/model_executor/layers/sampler.py`
/// computed both probabilities and log-probabilities in float32, about 40 bytes a logit).
/// Published vLLM 0.19 start-up logs on an H100 print a peak of 1.89 GiB (128256-token
/// vocabulary), 2.21 GiB (151936 and 152064), 2.87 GiB (201088) and 3.65 GiB (256000) at 1024
/// rows: 14.9 to 15.5 bytes a logit, the 16-bit logits the caller holds not adding to it. Older
/// V0 engines held more; see the fixture data/engine-logs for how far.
pub const SAMPLER_BYTES_PER_LOGIT: u128 = 16;

/// Which engine's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Serve {
    /// vLLM (`vllm serve`), the default.
    #[default]
    Vllm,
    /// SGLang (`python -m sglang.launch_server`).
    Sglang,
    /// No engine: the usable memory minus a flat reserve.
    None,
}

impl Serve {
    /// The names `--serve` takes.
    pub const NAMES: [&'static str; 3] = ["vllm", "sglang", "none"];

    /// Reads a `--serve` value.
    pub fn parse(text: &str) -> Option<Serve> {
        match text.trim() {
            "vllm" => Some(Serve::Vllm),
            "sglang" => Some(Serve::Sglang),
            "none" => Some(Serve::None),
            _ => None,
        }
    }

    /// The engine's name in sentences.
    pub fn label(self) -> &'static str {
        match self {
            Serve::Vllm => "vLLM",
            Serve::Sglang => "SGLang",
            Serve::None => "no engine",
        }
    }
}

/// The engine's options, named as the engine names them; `None` takes the engine's default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineOptions {
    /// Which engine.
    pub serve: Serve,
    /// vLLM `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: Option<Decimal>,
    /// vLLM `--max-num-batched-tokens` (default 8192 on a GPU of 70 GiB or more other than an
    /// A100, else 2048: `vllm serve`'s defaults).
    pub max_num_batched_tokens: Option<u64>,
    /// vLLM `--max-num-seqs` (default 1024 on such a GPU, else 256).
    pub max_num_seqs: Option<u64>,
    /// vLLM `--enforce-eager`: no CUDA graphs.
    pub enforce_eager: bool,
    /// SGLang `--mem-fraction-static` (default by tensor-parallel degree: 0.88 at 1, 0.87 at 2,
    /// 0.85 at 4, 0.81 at 8, 0.79 beyond).
    pub mem_fraction_static: Option<Decimal>,
}

/// What the activation estimate needs of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// Hidden width.
    pub hidden: u64,
    /// Width of the dense MLP one token runs (its intermediate size); for a mixture of experts,
    /// one expert's.
    pub intermediate: u64,
    /// Mixture of experts: (experts, experts per token).
    pub experts: Option<(u64, u64)>,
    /// A shared expert's (or dense layers') intermediate size beside the routed experts.
    pub shared_intermediate: u64,
    /// Vocabulary rows of the logits.
    pub vocab: u64,
    /// Query heads, KV heads, head width.
    pub heads: u64,
    /// KV heads.
    pub kv_heads: u64,
    /// Width of one head.
    pub head_dim: u64,
    /// Bytes of one activation element (2 at 16 bits).
    pub activation_bytes: u64,
}

/// One estimated term: the figure used and the range it may be off by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Estimated {
    /// The bytes used in the budget.
    pub bytes: u128,
    /// The least it could be.
    pub low_bytes: u128,
    /// The most it could be.
    pub high_bytes: u128,
    /// How it is estimated, in words.
    pub rule: String,
}

/// The engine's budget on the busiest GPU of a package, term by term.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// Which engine.
    pub serve: Serve,
    /// The memory a CUDA/ROCm process sees on the GPU (the engine's `total_gpu_memory`).
    pub total_bytes: u128,
    /// `--gpu-memory-utilization` (vLLM) or `--mem-fraction-static` (SGLang); 1 with none.
    pub fraction: Decimal,
    /// floor(total x fraction): what the engine lets itself use.
    pub budget_bytes: u128,
    /// The weights on this GPU, as loaded.
    pub weights_bytes: u128,
    /// The profiling pass's activation peak (vLLM subtracts it; SGLang leaves it to the margin).
    pub activation_peak: Estimated,
    /// Memory allocated outside PyTorch (vLLM subtracts it; SGLang's is the CUDA context).
    pub non_torch: Estimated,
    /// CUDA graphs (0 with `--enforce-eager`): captured after the KV cache, out of the margin.
    pub cuda_graphs: Estimated,
    /// With none: the flat reserve.
    pub reserve_bytes: u128,
    /// total - budget: what the engine leaves unused (and where CUDA graphs go).
    pub margin_bytes: u128,
    /// budget - weights - the subtracted terms: the KV cache pool (negative: the engine does
    /// not start).
    pub kv_pool_bytes: i128,
    /// Tokens per KV block (16 in vLLM, 1 in SGLang).
    pub block_tokens: u64,
    /// KV bytes of one token on this GPU (every layer it holds).
    pub kv_bytes_per_token: u128,
    /// Whole blocks in the pool.
    pub kv_blocks: u64,
    /// kv_blocks x block_tokens: the engine's "GPU KV cache size" on this GPU.
    pub kv_tokens: u64,
    /// The batched-token budget of the profile run.
    pub max_num_batched_tokens: Option<u64>,
    /// The most sequences the engine runs at once.
    pub max_num_seqs: Option<u64>,
    /// Whether CUDA graphs are captured.
    pub cuda_graphs_captured: bool,
    /// vLLM's sampler warm-up after the KV cache and the CUDA graphs
    /// (`compile_or_warm_up_model` runs `_dummy_sampler_run` over `--max-num-seqs` rows of
    /// logits, at [`SAMPLER_BYTES_PER_LOGIT`]): the space the profile run freed may be too
    /// fragmented to hold it, so the margin above the budget must (0 off the last stage and
    /// outside vLLM).
    pub sampler_warmup_bytes: u128,
}

impl Budget {
    /// The bytes taken from the budget before the KV cache: weights and the subtracted terms.
    pub fn before_kv(&self) -> u128 {
        match self.serve {
            Serve::Vllm => self.weights_bytes + self.activation_peak.bytes + self.non_torch.bytes,
            Serve::Sglang => self.weights_bytes + self.non_torch.bytes,
            Serve::None => self.weights_bytes + self.reserve_bytes,
        }
    }

    /// Whole blocks of `per_sequence_tokens` tokens `batch` sequences take.
    pub fn blocks_for(&self, context: u64, batch: u64) -> u128 {
        u128::from(context.div_ceil(self.block_tokens.max(1))) * u128::from(batch)
    }
}

/// `vllm serve`'s defaults for a GPU of `total` bytes (`vllm/engine/arg_utils.py`): 8192
/// batched tokens and 1024 sequences on a GPU of 70 GiB or more other than an A100, else 2048
/// and 256.
pub fn vllm_defaults(total: u128, a100: bool) -> (u64, u64) {
    if total >= 70 * GIB && !a100 {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

/// SGLang's default `--mem-fraction-static` by tensor-parallel degree.
pub fn sglang_default_fraction(tp: u64) -> Decimal {
    match tp {
        0 | 1 => Decimal::new(88, 2),
        2..=3 => Decimal::new(87, 2),
        4..=7 => Decimal::new(85, 2),
        8..=15 => Decimal::new(81, 2),
        _ => Decimal::new(79, 2),
    }
}

fn scaled(bytes: u128, num: u128, den: u128) -> u128 {
    bytes.saturating_mul(num) / den.max(1)
}

/// floor(total x fraction), the fraction having at most 28 decimals.
pub fn fraction_of(total: u128, fraction: Decimal) -> u128 {
    let scale = 10u128.pow(fraction.scale());
    total.saturating_mul(fraction.mantissa().unsigned_abs()) / scale
}

/// The forward pass's activation bytes for `tokens` tokens on one GPU of tensor-parallel degree
/// `tp`: what is alive at once at the larger of the two moments of a decoder layer, since each
/// layer frees what the one before held.
///
/// - **Attention**: the residual stream, the normalised input the caller still holds, the
///   query/key/value projection (a T-th of the heads), the attention output and the output
///   projection's result: `3 h + (q + 2 kv) d / T + q d / T`.
/// - **MLP**: the residual stream, the normalised input, the gate/up projection (`2 I / T`, still
///   referenced while the activation runs), its activation (`I / T`) and the down projection's
///   result: `3 h + 3 I / T`. For a mixture of experts, every token's routed experts as the
///   fused kernel's caches hold them, plus the router logits and any shared expert.
///
/// Derived from vLLM's model code (`LlamaMLP.forward` keeps `gate_up` referenced until it
/// returns; the decoder layer keeps the normalised input) and checked against published
/// start-up logs: Llama-3.1-8B on an RTX 3090 printed a peak of 2.07 GiB at 20000 batched
/// tokens and 2.99 GiB at 29000 (vllm-project/vllm#10517), 109,760 bytes a token between the
/// two, where this rule gives 110,592 (`(3 x 4096 + 3 x 14336) x 2`), and 2.06 and 2.99 GiB.
pub fn forward_bytes(shape: &Shape, tokens: u64, tp: u64) -> u128 {
    let t = u128::from(tp.max(1));
    let a = u128::from(shape.activation_bytes.max(1));
    let hidden = u128::from(shape.hidden);
    let qkv = u128::from(shape.heads + 2 * shape.kv_heads) * u128::from(shape.head_dim) / t;
    let attn = u128::from(shape.heads) * u128::from(shape.head_dim) / t;
    let attention = 3 * hidden + qkv + attn;
    let mlp = 3 * hidden
        + match shape.experts {
            Some((e, k)) => {
                3 * u128::from(k) * u128::from(shape.intermediate) / t
                    + u128::from(k) * hidden
                    + 2 * u128::from(e)
                    + 3 * u128::from(shape.shared_intermediate) / t
            }
            None => 3 * u128::from(shape.intermediate) / t,
        };
    u128::from(tokens) * a * attention.max(mlp)
}

/// The profile run's activation peak on one GPU: the larger of the forward pass over
/// `tokens` batched tokens and the sampler run over `rows` rows of logits (on the last pipeline
/// stage; the logits are gathered whole on every tensor-parallel GPU).
pub fn activation_peak(
    shape: &Shape,
    tokens: u64,
    rows: u64,
    tp: u64,
    last_stage: bool,
) -> Estimated {
    let forward = forward_bytes(shape, tokens, tp);
    let sampler = if last_stage {
        u128::from(rows) * u128::from(shape.vocab) * SAMPLER_BYTES_PER_LOGIT
            + u128::from(tokens) * u128::from(shape.hidden) * u128::from(shape.activation_bytes)
    } else {
        0
    };
    let bytes = forward.max(sampler);
    // The high end also covers the samplers of vLLM before V1's (`SAMPLER_BYTES_PER_LOGIT`):
    // about 40 bytes a logit, since they computed log-probabilities too.
    let older = if last_stage {
        u128::from(rows) * u128::from(shape.vocab) * 40
            + u128::from(tokens) * u128::from(shape.hidden) * u128::from(shape.activation_bytes)
    } else {
        0
    };
    Estimated {
        bytes,
        low_bytes: scaled(bytes, 3, 4),
        high_bytes: scaled(bytes, 3, 2).max(older),
        rule: format!(
            "the larger of the forward pass over {tokens} batched tokens ({:.2} GiB: residual \
             stream, attention projections and MLP activations on this GPU) and the sampler run \
             over {rows} rows of {} logits ({:.2} GiB at {SAMPLER_BYTES_PER_LOGIT} bytes a \
             logit); an estimate that may be off by -25 % to +50 % (torch.compile fusion, \
             attention kernels, FlashInfer sampling; up to 40 bytes a logit in vLLM before V1)",
            forward as f64 / GIB as f64,
            shape.vocab,
            sampler as f64 / GIB as f64,
        ),
    }
}

/// Memory allocated outside PyTorch during the profile run: what vLLM's
/// `vllm/v1/worker/gpu_worker.py` (`determine_available_memory`, measured by
/// `vllm/utils/mem_utils.py` `memory_profiling` as the "non-torch forward increase") takes from
/// the budget besides the weights and the activation peak.
///
/// - One GPU: cuBLAS and attention-backend workspaces, 0.25 GiB (published vLLM 0.19 logs on
///   an H100 print 0.24 to 0.27 GiB for five models).
/// - Tensor parallel: the NCCL communicators the TP group opens
///   (`vllm/distributed/parallel_state.py` `GroupCoordinator`: torch's ProcessGroupNCCL and
///   `device_communicators/pynccl.py` `PyNcclCommunicator`) allocate their channel buffers on
///   the first all-reduce, inside the profile run, besides the custom all-reduce's IPC buffers
///   (`device_communicators/custom_all_reduce.py`). Their size is NCCL's, not vLLM's: the
///   published logs print 2.06 to 2.07 GiB at TP 2 and 2.13 to 2.17 GiB at TP 4 (vLLM 0.19,
///   four models, H100 NVLink) and 1.79 GiB more at TP 2 than at TP 1 (vLLM 0.6.5), so 2 GiB
///   is used, with a range of 1.5 to 4 GiB (vLLM 0.6.5 printed 3.58 GiB at TP 2, the CUDA
///   context then counted in; more peers, another NCCL_BUFFSIZE or other links).
pub fn non_torch(serve: Serve, tp: u64) -> Estimated {
    match serve {
        Serve::Vllm => {
            let bytes = if tp > 1 { 2 * GIB } else { GIB / 4 };
            Estimated {
                bytes,
                low_bytes: if tp > 1 { 3 * GIB / 2 } else { GIB / 32 },
                high_bytes: if tp > 1 { 4 * GIB } else { 2 * GIB },
                rule: if tp > 1 {
                    "cuBLAS workspaces, NCCL channel buffers and custom all-reduce buffers of the \
                     tensor-parallel group (vLLM's non-torch increase of its profile run): \
                     published vLLM 0.19 logs print 2.06 to 2.17 GiB at TP 2 and 4"
                        .to_string()
                } else {
                    "cuBLAS and attention workspaces (vLLM's non-torch increase of its profile \
                     run): published vLLM 0.19 logs print 0.24 to 0.27 GiB on one GPU"
                        .to_string()
                },
            }
        }
        Serve::Sglang => Estimated {
            bytes: GIB / 2,
            low_bytes: GIB / 4,
            high_bytes: GIB,
            rule: "the CUDA context and library workspaces SGLang finds used before it sizes \
                   the pool"
                .to_string(),
        },
        Serve::None => Estimated {
            bytes: 0,
            low_bytes: 0,
            high_bytes: 0,
            rule: "not modelled: the flat reserve stands for it".to_string(),
        },
    }
}

/// CUDA graph memory: the activations of the largest captured batch (up to 512 sequences) and
/// the graphs' own pools.
pub fn cuda_graphs(shape: &Shape, max_num_seqs: u64, tp: u64, captured: bool) -> Estimated {
    if !captured {
        return Estimated {
            bytes: 0,
            low_bytes: 0,
            high_bytes: 0,
            rule: "none: --enforce-eager runs without CUDA graphs".to_string(),
        };
    }
    let largest = max_num_seqs.min(512);
    let bytes = (GIB / 4 + forward_bytes(shape, largest, tp)).max(GIB / 2);
    // Tensor parallel adds the all-reduce buffers registered for the graphs.
    let high = (2 * bytes).max(GIB + GIB / 2) + if tp > 1 { GIB } else { 0 };
    Estimated {
        bytes,
        low_bytes: GIB / 8,
        high_bytes: high,
        rule: format!(
            "graphs captured for batches up to {largest} sequences: their activation pool and \
             per-graph memory; published logs print 0.1 to 2.5 GiB; not taken from the budget \
             but from the margin above it"
        ),
    }
}

/// The budget of one GPU holding `weights` bytes and caching `kv_per_token` bytes a token.
#[allow(clippy::too_many_arguments)]
pub fn budget(
    options: &EngineOptions,
    shape: &Shape,
    total: u128,
    a100: bool,
    weights: u128,
    kv_per_token: u128,
    tp: u64,
    last_stage: bool,
    reserve: u128,
) -> Budget {
    let serve = options.serve;
    let (default_tokens, default_seqs) = vllm_defaults(total, a100);
    let tokens = options.max_num_batched_tokens.unwrap_or(default_tokens);
    let seqs = options.max_num_seqs.unwrap_or(default_seqs);
    let captured = !options.enforce_eager && serve != Serve::None;
    let (fraction, block) = match serve {
        Serve::Vllm => (
            options.gpu_memory_utilization.unwrap_or(Decimal::new(9, 1)),
            VLLM_BLOCK_TOKENS,
        ),
        Serve::Sglang => (
            options
                .mem_fraction_static
                .unwrap_or_else(|| sglang_default_fraction(tp)),
            1,
        ),
        Serve::None => (Decimal::ONE, 1),
    };
    let activation = match serve {
        Serve::None => Estimated {
            bytes: 0,
            low_bytes: 0,
            high_bytes: 0,
            rule: "not modelled: the flat reserve stands for it".to_string(),
        },
        _ => activation_peak(shape, tokens, seqs.min(tokens), tp, last_stage),
    };
    let graphs = cuda_graphs(shape, seqs, tp, captured);
    let budget_bytes = fraction_of(total, fraction);
    let mut b = Budget {
        serve,
        total_bytes: total,
        fraction,
        budget_bytes,
        weights_bytes: weights,
        activation_peak: activation,
        non_torch: non_torch(serve, tp),
        cuda_graphs: graphs,
        reserve_bytes: if serve == Serve::None { reserve } else { 0 },
        margin_bytes: total - budget_bytes,
        kv_pool_bytes: 0,
        block_tokens: block,
        kv_bytes_per_token: kv_per_token,
        kv_blocks: 0,
        kv_tokens: 0,
        max_num_batched_tokens: (serve == Serve::Vllm).then_some(tokens),
        max_num_seqs: (serve == Serve::Vllm).then_some(seqs),
        cuda_graphs_captured: captured,
        sampler_warmup_bytes: if serve == Serve::Vllm && last_stage {
            u128::from(seqs) * u128::from(shape.vocab) * SAMPLER_BYTES_PER_LOGIT
        } else {
            0
        },
    };
    let before = b.before_kv();
    b.kv_pool_bytes = i128::try_from(budget_bytes).unwrap_or(i128::MAX)
        - i128::try_from(before).unwrap_or(i128::MAX);
    let block_bytes = kv_per_token * u128::from(block);
    if b.kv_pool_bytes > 0 && block_bytes > 0 {
        let blocks = (b.kv_pool_bytes as u128) / block_bytes;
        b.kv_blocks = u64::try_from(blocks).unwrap_or(u64::MAX);
        b.kv_tokens = b.kv_blocks.saturating_mul(block);
    }
    b
}

/// A mixture of experts stored in MXFP4 (gpt-oss): what vLLM pads when it allocates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mxfp4Experts {
    /// Experts per layer.
    pub experts: u64,
    /// Hidden width (each expert's input and output).
    pub hidden: u64,
    /// One expert's intermediate width, whole (before tensor parallelism splits it).
    pub intermediate: u64,
}

/// The MXFP4 mixture-of-experts backend vLLM picks on a GPU and the multiples it pads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mxfp4Padding {
    /// The backend, as `vllm/model_executor/layers/quantization/mxfp4.py` names it.
    pub backend: &'static str,
    /// `intermediate_size_per_partition` is rounded up to a multiple of this.
    pub intermediate_multiple: u64,
    /// `hidden_size` is rounded up to a multiple of this (1: not padded).
    pub hidden_multiple: u64,
}

/// The backend `get_mxfp4_backend` (vllm/model_executor/layers/quantization/mxfp4.py) picks
/// with its defaults, from the GPU's name, and the padding `Mxfp4MoEMethod.create_weights`
/// then applies:
///
/// - Hopper (H100, H200, H800, GH200): Triton (`triton_kernels`, supported from SM90 to
///   below SM110), whose `create_weights` pads the intermediate size per GPU to 64 only, but
///   whose Hopper layouts (`mxfp4_utils.py` `_swizzle_mxfp4`: triton_kernels'
///   `HopperMXValueLayout` and `HopperMXScaleLayout`, tiled for the wgmma kernel) load larger:
///   published vLLM 0.19 logs on an H100 print 13.64 GiB for gpt-oss-20b at TP 1 and 7.01 GiB
///   at TP 2, which are the Marlin shapes below to 0.05 GiB (the 64-multiple alone gives 12.81
///   and 6.51). So Hopper is counted at Marlin's padding, as vLLM 0.10.1 also loaded it
///   (gpt-oss-120b: 65.97 GiB printed, 65.90 by this rule; vLLM 0.14.1 printed 64.38, under it).
/// - Blackwell data-centre GPUs (B100, B200, B300, GB200, GB300) with FlashInfer, as vLLM's
///   CUDA wheels ship it: `SM100_FI_MXFP4_BF16`: both to multiples of 256.
/// - Everything else vLLM runs MXFP4 on (Ampere and Ada: A100, L40S, RTX 3090/4090; SM120
///   Blackwell such as the RTX 5090 and RTX PRO 6000, which `triton_kernels` does not
///   support): Marlin, whose kernel needs n % 256 and k % 128: the intermediate size to a
///   multiple of 128, the hidden size to 256.
/// - A GPU this cannot name (AMD's pad to up to 256 as well): the largest padding, 256 and
///   256, so the weights are never counted short.
pub fn mxfp4_padding(gpu: &str) -> Mxfp4Padding {
    let g = gpu.to_ascii_lowercase();
    let has = |w: &[&str]| w.iter().any(|x| g.contains(x));
    if has(&["h100", "h200", "h800", "gh200", "h20"]) {
        Mxfp4Padding {
            backend: "Triton (SM90), loaded at Marlin's padded shapes",
            intermediate_multiple: 128,
            hidden_multiple: 256,
        }
    } else if has(&["b100", "b200", "b300", "gb200", "gb300"]) {
        Mxfp4Padding {
            backend: "FlashInfer SM100_FI_MXFP4_BF16",
            intermediate_multiple: 256,
            hidden_multiple: 256,
        }
    } else if has(&[
        "a100", "a800", "a10", "a40", "a30", "a6000", "l40", "l4", "3090", "4090", "4080", "3080",
        "5090", "5080", "rtx", "pro 6000", "pro-6000",
    ]) {
        Mxfp4Padding {
            backend: "Marlin",
            intermediate_multiple: 128,
            hidden_multiple: 256,
        }
    } else {
        Mxfp4Padding {
            backend: "unknown GPU: the largest padding vLLM applies",
            intermediate_multiple: 256,
            hidden_multiple: 256,
        }
    }
}

/// Bytes of one layer's MXFP4 experts on one GPU as `Mxfp4MoEMethod.create_weights` allocates
/// them: `w13_weight` [E, 2I, H/2] and `w2_weight` [E, H, I/2] bytes of packed 4-bit values,
/// their 8-bit scales one per 32 values, and the bfloat16 biases [E, 2I] and [E, H], where I is
/// the intermediate size per GPU and both I and H are padded as `pad` says.
pub fn mxfp4_layer_bytes(m: &Mxfp4Experts, tp: u64, pad: Option<Mxfp4Padding>) -> u128 {
    let round = |x: u64, m: u64| x.div_ceil(m.max(1)) * m.max(1);
    let per_gpu = m.intermediate / tp.max(1);
    let (i, h) = match pad {
        Some(p) => (
            round(per_gpu, p.intermediate_multiple),
            round(m.hidden, p.hidden_multiple),
        ),
        None => (per_gpu, m.hidden),
    };
    let (e, i, h) = (u128::from(m.experts), u128::from(i), u128::from(h));
    let w13 = 2 * i * h / 2 + 2 * i * h / 32 + 2 * i * 2;
    let w2 = h * i / 2 + h * i / 32 + h * 2;
    e * (w13 + w2)
}

/// What vLLM's padding adds to `layers` layers of MXFP4 experts on one GPU of `gpu`.
pub fn mxfp4_padding_bytes(m: &Mxfp4Experts, layers: u64, tp: u64, gpu: &str) -> u128 {
    let padded = mxfp4_layer_bytes(m, tp, Some(mxfp4_padding(gpu)));
    let stored = mxfp4_layer_bytes(m, tp, None);
    u128::from(layers) * padded.saturating_sub(stored)
}

/// Why an engine would not start or would be tight, when it would not simply fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The engine starts and holds the context x batch.
    pub fits: bool,
    /// It fits with little to spare, or an estimate's range reaches over the edge.
    pub tight: bool,
    /// Why not, or why tight, in one sentence (empty when it simply fits).
    pub reason: String,
}

/// Judges a budget for `context` tokens x `batch` sequences: the pool must hold every
/// sequence's blocks, CUDA graphs must fit in the margin; tight when what is left is under
/// `tight_share` of the card or an estimate's high end would not fit.
pub fn judge(b: &Budget, context: Option<u64>, batch: u64, tight_share: Decimal) -> Verdict {
    let gib = |x: f64| x / GIB as f64;
    if b.kv_pool_bytes <= 0 || b.kv_blocks == 0 {
        return Verdict {
            fits: false,
            tight: false,
            reason: format!(
                "{} has no memory for the KV cache: {:.2} GiB left after the weights and the \
                 profile run (\"No available memory for the cache blocks\")",
                b.serve.label(),
                gib(b.kv_pool_bytes as f64)
            ),
        };
    }
    let block_bytes = b.kv_bytes_per_token * u128::from(b.block_tokens);
    let needed = context.map_or(u128::from(b.block_tokens.max(1)), |c| {
        b.blocks_for(c, batch) * u128::from(b.block_tokens)
    });
    let needed_blocks = needed / u128::from(b.block_tokens.max(1));
    if needed_blocks > u128::from(b.kv_blocks) {
        return Verdict {
            fits: false,
            tight: false,
            reason: format!(
                "{} holds {} KV tokens on this GPU, fewer than the {} that {} x {} need",
                b.serve.label(),
                b.kv_tokens,
                needed,
                batch,
                context.unwrap_or(1)
            ),
        };
    }
    if b.serve == Serve::Vllm && b.cuda_graphs.bytes > b.margin_bytes {
        return Verdict {
            fits: false,
            tight: false,
            reason: format!(
                "CUDA graphs ({:.2} GiB estimated) do not fit in the {:.2} GiB vLLM leaves above \
                 its budget: --enforce-eager or a lower --gpu-memory-utilization",
                gib(b.cuda_graphs.bytes as f64),
                gib(b.margin_bytes as f64)
            ),
        };
    }
    let spare_blocks = u128::from(b.kv_blocks) - needed_blocks;
    let spare = spare_blocks * block_bytes;
    let share = fraction_of(b.total_bytes, tight_share);
    let mut reasons = Vec::new();
    if spare < share {
        reasons.push(format!(
            "{:.2} GiB of KV pool to spare, under {}% of the card",
            gib(spare as f64),
            (tight_share * Decimal::from(100)).normalize()
        ));
    }
    // What the low-side estimates would leave: the high ends taken instead.
    let extra = match b.serve {
        Serve::Vllm => {
            (b.activation_peak.high_bytes - b.activation_peak.bytes)
                + (b.non_torch.high_bytes - b.non_torch.bytes)
        }
        _ => 0,
    };
    if extra > spare {
        reasons.push(format!(
            "with the estimates' high ends (activation peak {:.2} GiB, non-torch {:.2} GiB) the \
             pool would not hold it",
            gib(b.activation_peak.high_bytes as f64),
            gib(b.non_torch.high_bytes as f64)
        ));
    }
    if b.serve == Serve::Vllm && b.cuda_graphs.high_bytes > b.margin_bytes {
        reasons.push(format!(
            "CUDA graphs may take up to {:.2} GiB of the {:.2} GiB margin",
            gib(b.cuda_graphs.high_bytes as f64),
            gib(b.margin_bytes as f64)
        ));
    }
    // vLLM warms its sampler up after the KV cache and the graphs: published vLLM 0.19 logs of
    // gpt-oss-20b on an H100 at 0.95 allocated the cache, captured the graphs and then ran out
    // of memory there ("Tried to allocate 786.00 MiB", with 1.6 to 1.8 GiB reserved by PyTorch
    // but unallocated), where at 0.9 it started.
    let room = b.margin_bytes.saturating_sub(b.cuda_graphs.high_bytes);
    if b.serve == Serve::Vllm && b.sampler_warmup_bytes > room {
        reasons.push(format!(
            "the sampler's warm-up after the KV cache ({:.2} GiB: {} rows of logits) may not fit \
             in the {:.2} GiB left above the budget after CUDA graphs (up to {:.2} GiB), as \
             published vLLM 0.19 start-ups of gpt-oss-20b at 0.95 failed there: a lower \
             --gpu-memory-utilization or --max-num-seqs",
            gib(b.sampler_warmup_bytes as f64),
            b.max_num_seqs.unwrap_or(0),
            gib(room as f64),
            gib(b.cuda_graphs.high_bytes as f64)
        ));
    }
    if b.serve == Serve::Sglang {
        let act = b.activation_peak.bytes + b.cuda_graphs.bytes;
        if act > b.margin_bytes {
            reasons.push(format!(
                "activations and CUDA graphs ({:.2} GiB estimated) exceed the {:.2} GiB SGLang \
                 leaves outside --mem-fraction-static",
                gib(act as f64),
                gib(b.margin_bytes as f64)
            ));
        }
    }
    Verdict {
        fits: true,
        tight: !reasons.is_empty(),
        reason: reasons.join("; "),
    }
}

/// The largest context at `batch` the pool holds, in whole blocks per sequence.
pub fn largest_context(b: &Budget, batch: u64) -> u64 {
    (b.kv_blocks / batch.max(1)).saturating_mul(b.block_tokens)
}

/// The largest batch at `context` the pool holds, capped by `--max-num-seqs`.
pub fn largest_batch(b: &Budget, context: u64) -> u64 {
    let per = context.div_ceil(b.block_tokens.max(1)).max(1);
    let n = b.kv_blocks / per;
    b.max_num_seqs.map_or(n, |m| n.min(m))
}

/// A decimal as f64 for messages.
pub fn as_f64(d: Decimal) -> f64 {
    d.to_f64().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama8b() -> Shape {
        Shape {
            hidden: 4096,
            intermediate: 14336,
            experts: None,
            shared_intermediate: 0,
            vocab: 128_256,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            activation_bytes: 2,
        }
    }

    #[test]
    fn vllm_takes_the_utilisation_then_the_profile_run() {
        let total = 85_031_714_816u128; // 79.19 GiB
        let b = budget(
            &EngineOptions::default(),
            &llama8b(),
            total,
            false,
            16_060_522_496,
            131_072,
            1,
            true,
            0,
        );
        assert_eq!(b.budget_bytes, total * 9 / 10);
        assert_eq!(b.max_num_batched_tokens, Some(8192));
        assert_eq!(b.max_num_seqs, Some(1024));
        let pool = b.budget_bytes - 16_060_522_496 - b.activation_peak.bytes - b.non_torch.bytes;
        assert_eq!(b.kv_pool_bytes, pool as i128);
        assert_eq!(b.kv_blocks as u128, pool / (16 * 131_072));
        assert_eq!(b.kv_tokens % 16, 0);
        // The sampler's 1024 rows of 128256 logits dominate the 8192-token forward pass.
        assert_eq!(
            b.activation_peak.bytes,
            1024 * 128_256 * SAMPLER_BYTES_PER_LOGIT + 8192 * 4096 * 2
        );
    }

    #[test]
    fn the_forward_peak_is_the_mlp_moment_as_a_published_log_printed_it() {
        // vllm-project/vllm#10517, Llama-3.1-8B on an RTX 3090 (vLLM 0.6.4): peak_torch_memory
        // 17.06 and 17.98 GiB at 20000 and 29000 batched tokens, less the 14.9888 GiB of
        // weights: 2.07 and 2.99 GiB (to the printed hundredth).
        let shape = llama8b();
        assert_eq!(forward_bytes(&shape, 1, 1), 110_592);
        for (tokens, printed) in [(20_000u64, 2.07f64), (29_000, 2.99)] {
            let gib = forward_bytes(&shape, tokens, 1) as f64 / GIB as f64;
            assert!((gib - printed).abs() < 0.02, "{tokens}: {gib}");
        }
        // Tensor parallel splits the projections, not the residual stream.
        assert_eq!(forward_bytes(&shape, 1, 2), 2 * (3 * 4096 + 3 * 14336 / 2));
        // A wide attention and a narrow MLP: the attention moment is the larger.
        let wide = Shape {
            intermediate: 1024,
            ..shape
        };
        assert_eq!(
            forward_bytes(&wide, 1, 1),
            2 * (3 * 4096 + 48 * 128 + 32 * 128)
        );
    }

    #[test]
    fn no_pool_is_no_and_a_short_pool_is_no() {
        let shape = llama8b();
        let total = 24u128 * GIB;
        let b = budget(
            &EngineOptions::default(),
            &shape,
            total,
            false,
            22 * GIB,
            131_072,
            1,
            true,
            0,
        );
        assert!(b.kv_pool_bytes < 0);
        let v = judge(&b, Some(1), 1, Decimal::new(5, 2));
        assert!(!v.fits && v.reason.contains("No available memory"), "{v:?}");
        let b = budget(
            &EngineOptions::default(),
            &shape,
            total,
            false,
            16 * GIB,
            131_072,
            1,
            true,
            0,
        );
        let v = judge(&b, Some(b.kv_tokens + 1), 1, Decimal::new(5, 2));
        assert!(!v.fits);
        let v = judge(&b, Some(b.kv_tokens), 1, Decimal::new(5, 2));
        assert!(v.fits && v.tight, "{v:?}");
        assert_eq!(largest_context(&b, 1), b.kv_tokens);
        assert_eq!(largest_batch(&b, 16), (b.kv_blocks).min(256));
    }

    #[test]
    fn graphs_beyond_the_margin_are_no_and_eager_has_none() {
        let shape = llama8b();
        let total = 80u128 * GIB;
        let mut o = EngineOptions {
            gpu_memory_utilization: Some(Decimal::new(999, 3)),
            ..EngineOptions::default()
        };
        let b = budget(&o, &shape, total, false, 16 * GIB, 131_072, 1, true, 0);
        let v = judge(&b, Some(8192), 1, Decimal::new(5, 2));
        assert!(!v.fits && v.reason.contains("CUDA graphs"), "{v:?}");
        o.enforce_eager = true;
        let b = budget(&o, &shape, total, false, 16 * GIB, 131_072, 1, true, 0);
        assert_eq!(b.cuda_graphs.bytes, 0);
        assert!(judge(&b, Some(8192), 1, Decimal::new(5, 2)).fits);
    }

    #[test]
    fn a_sampler_warm_up_beyond_the_margin_is_tight_never_a_plain_fit() {
        let shape = llama8b();
        let total = 80u128 * GIB;
        let tight = Decimal::new(5, 2);
        // 0.95 and 2048 rows of 128256 logits (3.9 GiB) against the 4 GiB margin less graphs.
        let mut o = EngineOptions {
            gpu_memory_utilization: Some(Decimal::new(95, 2)),
            max_num_seqs: Some(2048),
            ..EngineOptions::default()
        };
        let b = budget(&o, &shape, total, false, 16 * GIB, 131_072, 1, true, 0);
        assert_eq!(b.sampler_warmup_bytes, 2048 * 128_256 * 16);
        let v = judge(&b, Some(8192), 1, tight);
        assert!(v.fits && v.tight, "{v:?}");
        assert!(v.reason.contains("sampler's warm-up"), "{v:?}");
        // Off the last pipeline stage there is no sampler.
        let b = budget(&o, &shape, total, false, 16 * GIB, 131_072, 1, false, 0);
        assert_eq!(b.sampler_warmup_bytes, 0);
        // The default 0.9 leaves 8 GiB above the budget: it fits.
        o.gpu_memory_utilization = None;
        let b = budget(&o, &shape, total, false, 16 * GIB, 131_072, 1, true, 0);
        let v = judge(&b, Some(8192), 1, tight);
        assert!(v.fits && !v.reason.contains("sampler's warm-up"), "{v:?}");
    }

    #[test]
    fn sglang_keeps_its_static_fraction() {
        let b = budget(
            &EngineOptions {
                serve: Serve::Sglang,
                ..EngineOptions::default()
            },
            &llama8b(),
            80 * GIB,
            false,
            16 * GIB,
            131_072,
            2,
            true,
            0,
        );
        assert_eq!(b.fraction, Decimal::new(87, 2));
        assert_eq!(b.block_tokens, 1);
        assert_eq!(
            b.kv_pool_bytes,
            (fraction_of(80 * GIB, Decimal::new(87, 2)) - 16 * GIB - GIB / 2) as i128
        );
    }

    #[test]
    fn mxfp4_experts_are_padded_as_the_backend_of_the_gpu_needs() {
        // gpt-oss-120b: 128 experts, hidden and intermediate 2880.
        let m = Mxfp4Experts {
            experts: 128,
            hidden: 2880,
            intermediate: 2880,
        };
        // Hopper loads at Marlin's shapes (vLLM 0.19 printed 13.64 GiB for gpt-oss-20b on an
        // H100, whose checkpoint holds 12.81): the padding is the same on both.
        assert_eq!(
            mxfp4_padding_bytes(&m, 36, 1, "H100 80GB"),
            mxfp4_padding_bytes(&m, 36, 1, "a100-80gb")
        );
        let small = Mxfp4Experts { experts: 32, ..m };
        let twenty = mxfp4_padding_bytes(&small, 24, 1, "h100-sxm") as f64 / GIB as f64;
        assert!((twenty - 0.86).abs() < 0.01, "{twenty}");
        // Marlin (Ampere, Ada, and Hopper in vLLM 0.10.1, whose log printed 65.97 GiB where the
        // checkpoint holds 60.77): hidden 3072, intermediate 2944, 5.13 GiB more.
        let marlin = mxfp4_padding_bytes(&m, 36, 1, "a100-80gb") as f64 / GIB as f64;
        assert!((marlin - 5.13).abs() < 0.01, "{marlin}");
        // An unknown GPU takes the largest padding: never fewer bytes than any backend.
        let unknown = mxfp4_padding_bytes(&m, 36, 1, "mystery");
        for g in ["h100", "b200", "a100", "rtx-4090"] {
            assert!(unknown >= mxfp4_padding_bytes(&m, 36, 1, g), "{g}");
        }
        assert_eq!(mxfp4_padding("b200").hidden_multiple, 256);
    }

    proptest::proptest! {
        #[test]
        fn the_pool_shrinks_as_the_profile_grows(tokens in 1u64..65_536, seqs in 1u64..2048) {
            let shape = llama8b();
            let o = |t: u64, s: u64| EngineOptions {
                max_num_batched_tokens: Some(t),
                max_num_seqs: Some(s),
                ..EngineOptions::default()
            };
            let a = budget(&o(tokens, seqs), &shape, 80 * GIB, false, 16 * GIB, 131_072, 1, true, 0);
            let b = budget(&o(tokens + 1, seqs + 1), &shape, 80 * GIB, false, 16 * GIB, 131_072, 1, true, 0);
            proptest::prop_assert!(b.kv_pool_bytes <= a.kv_pool_bytes);
            proptest::prop_assert!(a.kv_tokens.is_multiple_of(16));
            proptest::prop_assert!(u128::from(a.kv_tokens) * 131_072 <= a.kv_pool_bytes.max(0) as u128);
        }
    }
}
