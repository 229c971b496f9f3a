//! Which ways of splitting a model over a package's GPUs an engine runs: tensor-parallel degrees
//! the attention heads allow, and pipeline stages that split the layers.
//!
//! The rule is vLLM's, read from its source:
//!
//! - `ModelConfig.verify_with_parallel_config` (`vllm/config/model.py`) refuses a tensor-parallel
//!   size that does not divide the attention heads ("Total number of attention heads (H) must be
//!   divisible by tensor parallel size (T)").
//! - `QKVParallelLinear.__init__` (`vllm/model_executor/layers/linear.py`) splits the KV heads
//!   with `divide(total_num_kv_heads, tp_size)` when the degree is below the KV heads (it must
//!   divide them), and otherwise holds one KV head per GPU, each replicated
//!   `divide(tp_size, total_num_kv_heads)` times (the degree must be a multiple of them).
//! - `get_pp_indices` (`vllm/distributed/utils.py`) gives each of P pipeline stages
//!   floor(layers / P) layers and one more to each of the (layers mod P) stages before the last,
//!   counting back from the second-to-last; the first stage also holds the input embedding, the
//!   last the output head (and, with tied embeddings, its own copy of the embedding, as vLLM's
//!   model classes build `embed_tokens` on the first rank "or tie_word_embeddings and
//!   is_last_rank").
//!
//! A package of N GPUs runs tensor parallel T x pipeline P = N for a T the rule allows and at
//! most one stage per layer; nothing else.

use serde::Serialize;

/// The rule in one sentence, for documents and help.
pub const RULE: &str = "vLLM's: a tensor-parallel degree T must divide the attention heads \
     (ModelConfig.verify_with_parallel_config, vllm/config/model.py) and either divide the KV \
     heads or be a multiple of them, each KV head then replicated T / KV heads times \
     (QKVParallelLinear, vllm/model_executor/layers/linear.py); a package of N GPUs runs T x P = N \
     with P pipeline stages splitting the layers as get_pp_indices does (vllm/distributed/utils.py): \
     floor(layers / P) each, one more for each of the (layers mod P) stages before the last, \
     counting back; the embedding on the first stage, the output head on the last";

/// The attention geometry the rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Decoder layers.
    pub layers: u64,
    /// Query heads per layer.
    pub heads: u64,
    /// Key/value heads per layer.
    pub kv_heads: u64,
}

/// One way to run a model over a package's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// GPUs that share every layer (tensor parallel).
    pub tensor_parallel: u64,
    /// Stages the layers are split into (pipeline parallel); 1 without a pipeline.
    pub pipeline_parallel: u64,
    /// KV heads each GPU caches per layer.
    pub kv_heads_per_gpu: u64,
    /// How many GPUs hold a copy of each KV head (1 unless the degree exceeds the KV heads).
    pub kv_head_replicas: u64,
    /// Layers of each pipeline stage, first to last.
    pub stage_layers: Vec<u64>,
}

impl Layout {
    /// `TP2`, `TP1 x PP3`.
    pub fn label(&self) -> String {
        if self.pipeline_parallel == 1 {
            format!("TP{}", self.tensor_parallel)
        } else {
            format!("TP{} x PP{}", self.tensor_parallel, self.pipeline_parallel)
        }
    }
}

/// Why a tensor-parallel degree is refused, or `None` when the rule allows it.
pub fn tensor_parallel_problem(heads: &Heads, tp: u64) -> Option<String> {
    if tp == 0 {
        return Some("a degree of 0 is not a degree".to_string());
    }
    if !heads.heads.is_multiple_of(tp) {
        return Some(format!(
            "{tp} does not divide the {} attention heads",
            heads.heads
        ));
    }
    let kv = heads.kv_heads;
    if kv == 0 {
        return Some("the model has no KV heads".to_string());
    }
    if tp < kv && !kv.is_multiple_of(tp) {
        return Some(format!("{tp} does not divide the {kv} KV heads"));
    }
    if tp > kv && !tp.is_multiple_of(kv) {
        return Some(format!(
            "{tp} is above the {kv} KV heads and not a multiple of them"
        ));
    }
    None
}

/// The layers of each of `stages` pipeline stages, as vLLM's `get_pp_indices` splits
/// `layers` (`stages` between 1 and `layers`).
pub fn stage_layers(layers: u64, stages: u64) -> Vec<u64> {
    let stages = stages.max(1);
    let base = layers / stages;
    let remaining = layers % stages;
    let mut parts = vec![base; stages as usize];
    // `for i in range(2, remaining_layers + 2): partitions[-i] += 1`
    for i in 2..remaining + 2 {
        let at = parts.len() - i as usize;
        parts[at] += 1;
    }
    parts
}

/// The layout with tensor-parallel degree `tp` on `gpus` GPUs, or why it does not run.
pub fn layout(heads: &Heads, gpus: u64, tp: u64) -> Result<Layout, String> {
    if tp == 0 || !gpus.is_multiple_of(tp) {
        return Err(format!("{tp} does not divide the package's {gpus} GPUs"));
    }
    if let Some(problem) = tensor_parallel_problem(heads, tp) {
        return Err(problem);
    }
    let pp = gpus / tp;
    if pp > heads.layers {
        return Err(format!(
            "{pp} pipeline stages exceed the {} layers",
            heads.layers
        ));
    }
    let (kv_heads_per_gpu, kv_head_replicas) = if tp >= heads.kv_heads {
        (1, tp / heads.kv_heads)
    } else {
        (heads.kv_heads / tp, 1)
    };
    Ok(Layout {
        tensor_parallel: tp,
        pipeline_parallel: pp,
        kv_heads_per_gpu,
        kv_head_replicas,
        stage_layers: stage_layers(heads.layers, pp),
    })
}

/// Every layout the rule allows on `gpus` GPUs, the largest tensor-parallel degree first; or,
/// when there is none, why.
pub fn layouts(heads: &Heads, gpus: u64) -> Result<Vec<Layout>, String> {
    let mut out = Vec::new();
    for tp in (1..=gpus).rev() {
        if gpus.is_multiple_of(tp)
            && let Ok(l) = layout(heads, gpus, tp)
        {
            out.push(l);
        }
    }
    if out.is_empty() {
        let why = match tensor_parallel_problem(heads, gpus) {
            Some(p) => format!("tensor parallel over all {gpus}: {p}"),
            None => format!("{gpus} GPUs"),
        };
        return Err(format!(
            "no layout runs: {why}, and no smaller degree dividing {gpus} leaves at most {} \
             pipeline stages (one per layer)",
            heads.layers
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIXTRAL: Heads = Heads {
        layers: 32,
        heads: 32,
        kv_heads: 8,
    };

    #[test]
    fn the_degree_divides_the_heads_and_divides_or_multiplies_the_kv_heads() {
        for tp in [1, 2, 4, 8, 16, 32] {
            assert_eq!(tensor_parallel_problem(&MIXTRAL, tp), None, "{tp}");
        }
        for tp in [3, 5, 6, 7, 12, 24] {
            assert!(tensor_parallel_problem(&MIXTRAL, tp).is_some(), "{tp}");
        }
        // 28 heads, 4 KV heads (Qwen2.5 7B): 7 divides the heads but not the KV heads, and is
        // above 4 without being a multiple of it.
        let qwen = Heads {
            layers: 28,
            heads: 28,
            kv_heads: 4,
        };
        assert!(
            tensor_parallel_problem(&qwen, 7)
                .unwrap()
                .contains("not a multiple")
        );
        assert_eq!(tensor_parallel_problem(&qwen, 4), None);
        // 16 heads, 8 KV heads: 16 is a multiple of 8, each KV head held twice.
        let gemma = Heads {
            layers: 42,
            heads: 16,
            kv_heads: 8,
        };
        let l = layout(&gemma, 16, 16).unwrap();
        assert_eq!((l.kv_heads_per_gpu, l.kv_head_replicas), (1, 2));
    }

    #[test]
    fn stages_split_the_layers_as_vllm_does() {
        // get_pp_indices(32, r, 3): [11, 11, 10]; (32, r, 5): [6, 6, 7, 7, 6]; (32, r, 7):
        // 4 each and 4 more from the second-to-last back: [4, 4, 5, 5, 5, 5, 4].
        assert_eq!(stage_layers(32, 3), vec![11, 11, 10]);
        assert_eq!(stage_layers(32, 5), vec![6, 6, 7, 7, 6]);
        assert_eq!(stage_layers(32, 7), vec![4, 4, 5, 5, 5, 5, 4]);
        assert_eq!(stage_layers(32, 1), vec![32]);
        assert_eq!(stage_layers(32, 4), vec![8; 4]);
    }

    #[test]
    fn three_gpus_run_mixtral_only_as_a_pipeline() {
        let all = layouts(&MIXTRAL, 3).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].tensor_parallel, 1);
        assert_eq!(all[0].pipeline_parallel, 3);
        assert_eq!(all[0].label(), "TP1 x PP3");
        let six = layouts(&MIXTRAL, 6).unwrap();
        assert_eq!(
            six.iter().map(Layout::label).collect::<Vec<_>>(),
            ["TP2 x PP3", "TP1 x PP6"]
        );
        // More stages than layers run nothing.
        let tiny = Heads {
            layers: 2,
            heads: 32,
            kv_heads: 8,
        };
        let err = layouts(&tiny, 3).unwrap_err();
        assert!(
            err.contains("3 does not divide the 32 attention heads"),
            "{err}"
        );
    }
}
