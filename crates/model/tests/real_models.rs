//! Published parameter counts of real models, from their config.json alone and from synthetic
//! safetensors headers that carry each model's real tensor list (single file and sharded).
//!
//! The tensor lists here are written from the transformers modelling code's module names and
//! shapes, independently of `model::config`'s formulas: the headers' sum must equal both the
//! formula and the published figure.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// (folder under data/models, published parameter count), for the models whose tensor lists the
/// synthetic safetensors tests below write too. Sources: data/models/README.md.
const MODELS: [(&str, u64); 11] = [
    ("llama-3.1-8b", 8_030_261_248),
    ("llama-3.2-3b", 3_212_749_824),
    ("qwen2.5-7b", 7_615_616_512),
    ("qwen2-0.5b", 494_032_768),
    ("mistral-7b-v0.1", 7_241_732_096),
    ("mixtral-8x7b-v0.1", 46_702_792_704),
    ("gemma-2-9b", 9_241_705_984),
    ("phi-3-mini-4k-instruct", 3_821_079_552),
    ("gemma-3-4b-it", 4_300_079_472),
    // Qwen/Qwen3-8B: 8,190,735,360 parameters (the Hub's safetensors total, "8.19B").
    ("qwen3-8b", 8_190_735_360),
    // openai/gpt-oss-20b: 20,914,757,184 parameters unquantised (the model card's "21B", the
    // gpt-oss paper's 20.91B total); its MXFP4 files hold other element counts, checked below.
    ("gpt-oss-20b", 20_914_757_184),
];

/// The larger models, counted from config.json only (their tensor lists run to tens of
/// thousands of entries).
const CONFIG_ONLY: [(&str, u64); 3] = [
    // Qwen/Qwen3-30B-A3B: 30,532,122,624 (the Hub's safetensors total, "30.5B").
    ("qwen3-30b-a3b", 30_532_122_624),
    // deepseek-ai/DeepSeek-V3 without its multi-token-prediction layer: 671,026,419,200
    // (README_WEIGHTS.md: "671B" main model weights; the exact figure is derived from the Hub's
    // 684,531,386,000 below).
    ("deepseek-v3", 671_026_419_200),
    // meta-llama/Llama-4-Scout-17B-16E: published only rounded, "109B" total. The exact figure
    // is this formula's (text 107,769,861,120 + vision tower and projector 871,932,416); it is
    // not checked against an exact published count.
    ("llama-4-scout-17b-16e", 108_641_793_536),
];

/// Every model with a fixture.
fn all_models() -> impl Iterator<Item = (&'static str, u64)> {
    MODELS.into_iter().chain(CONFIG_ONLY)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/models")
        .join(name)
}

fn config(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("config.json")).unwrap())
        .unwrap()
}

#[test]
fn published_counts_come_out_of_config_json_alone() {
    for (name, published) in all_models() {
        let m = model::inspect(&fixture(name)).unwrap();
        assert_eq!(m.source, model::ParametersSource::Config, "{name}");
        assert_eq!(m.parameters, published, "{name}");
        // The config.json path itself gives the same.
        let direct = model::inspect(&fixture(name).join("config.json")).unwrap();
        assert_eq!(direct.parameters, published, "{name}");
    }
}

#[test]
fn mixtral_has_fewer_active_parameters_than_total() {
    let m = model::inspect(&fixture("mixtral-8x7b-v0.1")).unwrap();
    let a = m.architecture.unwrap();
    assert_eq!(a.experts, Some((8, 2)));
    // Per layer, 6 of 8 experts of 3 x 4096 x 14336 are idle for a token.
    assert_eq!(
        m.parameters - m.active_parameters,
        32 * 6 * 3 * 4096 * 14336
    );
    assert_eq!(m.active_parameters, 12_879_925_248);
    for (name, _) in all_models() {
        let m = model::inspect(&fixture(name)).unwrap();
        let a = m.architecture.unwrap();
        if a.experts.is_none() {
            assert_eq!(m.active_parameters, m.parameters, "{name}");
        } else {
            assert!(m.active_parameters < m.parameters, "{name}");
        }
    }
}

/// The active counts of the mixtures of experts, against the rounded figures their publishers
/// give, whose composition differs from model to model (said case by case).
#[test]
fn active_parameters_of_the_mixtures_of_experts() {
    let active = |name: &str| model::inspect(&fixture(name)).unwrap().active_parameters;
    // Qwen3-30B-A3B, "3.3B activated": attention, router, 8 of 128 experts, norms, embedding and
    // lm_head of 48 layers.
    assert_eq!(active("qwen3-30b-a3b"), 3_353_032_704);
    // gpt-oss-20b, "3.6B active" (model card; the paper's 3.61B): with 4 of 32 experts this
    // formula gives 4,187,440,704 with the embedding table; the published figure leaves the
    // embedding (201088 x 2880, a lookup) out and keeps the unembedding.
    assert_eq!(active("gpt-oss-20b"), 4_187_440_704);
    assert_eq!(4_187_440_704u64 - 201_088 * 2880, 3_608_307_264);
    // DeepSeek-V3, "37B activated" (paper) or "36.7B (including 0.9B for Embedding and 0.9B for
    // the output Head)" (README_WEIGHTS.md): ambiguous; 8 routed + 1 shared expert, attention,
    // router, norms, embedding and head give 37,552,297,472 here.
    assert_eq!(active("deepseek-v3"), 37_552_297_472);
    // Llama 4 Scout, "17B active": 1 of 16 experts plus the shared expert gives 17,172,894,720
    // for the language model; this count adds the vision tower (871,932,416).
    assert_eq!(
        active("llama-4-scout-17b-16e"),
        17_172_894_720 + 871_932_416
    );
}

#[test]
fn every_parts_list_sums_to_the_count() {
    for (name, published) in all_models() {
        let a = model::inspect(&fixture(name))
            .unwrap()
            .architecture
            .unwrap();
        let sum: u128 = a.parts.iter().map(model::Part::parameters).sum();
        assert_eq!(sum, u128::from(published), "{name}");
        let split = a.quantised_split();
        assert_eq!(
            split.quantised.len() + split.kept.len(),
            a.parts.len(),
            "{name}"
        );
        assert!(
            split.not_applied.is_empty(),
            "{name}: {:?}",
            split.not_applied
        );
    }
}

/// Issue 24: a 4-bit checkpoint keeps its embeddings and lm_head at 16 bits. For Qwen2.5-7B
/// that is 2 x 152064 x 3584 parameters left out of the packing.
#[test]
fn a_quantised_layout_keeps_embeddings_and_lm_head() {
    let a = model::inspect(&fixture("qwen2.5-7b"))
        .unwrap()
        .architecture
        .unwrap();
    let split = a.quantised_split();
    let kept: u128 = split.kept.iter().map(|p| p.parameters()).sum();
    let embeddings: u128 = split
        .kept
        .iter()
        .filter(|p| matches!(p.role, model::Role::Embeddings | model::Role::LmHead))
        .map(|p| p.parameters())
        .sum();
    assert_eq!(embeddings, 2 * 152_064 * 3584);
    // Norms and q/k/v biases are kept too.
    assert_eq!(kept - embeddings, 28 * (2 * 3584 + 3584 + 2 * 512) + 3584);
    assert!(split.rule.contains("AWQ, GPTQ and FP8"), "{}", split.rule);
}

/// gpt-oss-20b's checkpoint keeps attention, routers, embeddings and lm_head in bfloat16 and
/// packs only the experts in MXFP4 (4-bit values in 16-byte blocks of 32, one 8-bit scale per
/// block). Its files hold 11,956,805,184 elements in 13,761,264,768 bytes (uint8 blocks and
/// scales, bfloat16 for the rest), the figures a public listing of the real safetensors shows.
#[test]
fn gpt_oss_layout_is_the_mxfp4_checkpoint() {
    let a = model::inspect(&fixture("gpt-oss-20b"))
        .unwrap()
        .architecture
        .unwrap();
    let q = a.quantization.clone().unwrap();
    assert_eq!(q.method.as_deref(), Some("mxfp4"));
    assert_eq!(q.bits, Some(4));
    let split = a.quantised_split();
    assert!(
        split
            .quantised
            .iter()
            .all(|p| p.role == model::Role::Experts)
    );
    let packed: u128 = split.quantised.iter().map(|p| p.parameters()).sum();
    let kept: u128 = split.kept.iter().map(|p| p.parameters()).sum();
    assert_eq!(packed, 24 * 32 * (5760 * 2880 + 2880 * 2880));
    let blocks = packed / 2;
    let scales = packed / 32;
    assert_eq!(blocks + scales + kept, 11_956_805_184);
    assert_eq!(blocks + scales + 2 * kept, 13_761_264_768);
}

/// DeepSeek-V3's Hub total of 684,531,386,000 stored elements is this count plus what the
/// checkpoint adds: the multi-token-prediction layer 61 (a MoE layer, enorm, hnorm, eh_proj and
/// shared_head.norm, 11,610,068,224 unique parameters; README_WEIGHTS.md rounds them to 11.5B),
/// that layer's own copies of embed_tokens and shared_head.head (926,679,040 each), and the
/// float32 weight_scale_inv of every FP8 matrix, one per 128 x 128 block (41,540,496).
#[test]
fn deepseek_v3_published_total_is_the_count_plus_mtp_and_block_scales() {
    let a = model::inspect(&fixture("deepseek-v3"))
        .unwrap()
        .architecture
        .unwrap();
    assert_eq!(a.parameters, 671_026_419_200);
    assert!(
        a.notes[0].contains("num_nextn_predict_layers is 1"),
        "{:?}",
        a.notes
    );
    let h: u128 = 7168;
    let attention =
        h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h;
    let moe = h * 256 + 256 + 257 * 3 * h * 2048;
    let mtp_layer = attention + 2 * h + moe;
    let mtp = mtp_layer + 3 * h + 2 * h * h;
    assert_eq!(mtp, 11_610_068_224);
    let copies = 2 * 129_280 * h;
    // The split packs what the FP8 checkpoint stores in float8_e4m3fn: every linear weight of
    // the decoder layers (the MTP layer adds 702,264 blocks of its own).
    let split = a.quantised_split();
    let blocks: u128 = split
        .quantised
        .iter()
        .map(|p| {
            u128::from(p.rows.div_ceil(128))
                * u128::from(p.columns.div_ceil(128))
                * u128::from(p.count)
        })
        .sum();
    assert_eq!(blocks, 40_838_232);
    let mtp_blocks = 702_264;
    assert_eq!(
        u128::from(a.parameters) + mtp + copies + blocks + mtp_blocks,
        684_531_386_000
    );
}

#[test]
fn attention_geometry_is_read_with_defaults() {
    let geometry = |name: &str| {
        model::inspect(&fixture(name))
            .unwrap()
            .architecture
            .unwrap()
            .attention
    };
    let llama = geometry("llama-3.1-8b");
    assert_eq!((llama.layers, llama.kv_heads, llama.head_dim), (32, 8, 128));
    // 2 x 32 layers x 8 KV heads x 128 = 65536 elements per token: 128 KiB in bfloat16.
    assert_eq!(llama.kv_elements_per_token(), 65_536);
    assert_eq!(llama.sliding_window, None);
    let gemma3 = geometry("gemma-3-4b-it");
    // Omitted text_config fields take Gemma3TextConfig's defaults: 8 heads, 4 KV heads, 256.
    assert_eq!(
        (
            gemma3.layers,
            gemma3.heads,
            gemma3.kv_heads,
            gemma3.head_dim
        ),
        (34, 8, 4, 256)
    );
    assert_eq!(
        gemma3.sliding_window,
        Some(model::SlidingWindow {
            window: 1024,
            layers: 34 - 5,
            chunked: false
        })
    );
    let gemma2 = geometry("gemma-2-9b");
    assert_eq!(
        gemma2.sliding_window,
        Some(model::SlidingWindow {
            window: 4096,
            layers: 21,
            chunked: false
        })
    );
    let qwen = geometry("qwen2.5-7b");
    assert_eq!(qwen.sliding_window, None, "use_sliding_window is false");
    let mistral = geometry("mistral-7b-v0.1");
    assert_eq!(
        mistral.sliding_window,
        Some(model::SlidingWindow {
            window: 4096,
            layers: 32,
            chunked: false
        })
    );
    let qwen3 = geometry("qwen3-8b");
    assert_eq!((qwen3.layers, qwen3.kv_heads, qwen3.head_dim), (36, 8, 128));
    assert_eq!(qwen3.sliding_window, None);
    // gpt-oss: layer_types alternate, 12 of 24 layers slide over 128 tokens.
    let oss = geometry("gpt-oss-20b");
    assert_eq!(
        oss.sliding_window,
        Some(model::SlidingWindow {
            window: 128,
            layers: 12,
            chunked: false
        })
    );
    assert_eq!(oss.kv_elements_per_layer(), 2 * 8 * 64);
    // Llama 4: 36 of 48 layers (no_rope_layers 1) attend within chunks of 8192 tokens.
    let scout = geometry("llama-4-scout-17b-16e");
    assert_eq!(
        scout.sliding_window,
        Some(model::SlidingWindow {
            window: 8192,
            layers: 36,
            chunked: true
        })
    );
    // DeepSeek-V3 caches one latent of kv_lora_rank + qk_rope_head_dim = 512 + 64 per token per
    // layer, not 2 x 128 heads x 192.
    let v3 = geometry("deepseek-v3");
    assert_eq!(v3.latent_kv, Some(576));
    assert_eq!(v3.kv_elements_per_token(), 61 * 576);
}

/// One tensor: name, dtype, shape.
type Tensor = (String, &'static str, Vec<u64>);

fn get(c: &Value, key: &str, default: u64) -> u64 {
    c.get(key).and_then(Value::as_u64).unwrap_or(default)
}

/// The tensors a decoder-only checkpoint stores, named and shaped as in the transformers
/// modelling files (LlamaForCausalLM and its relatives).
fn decoder_tensors(c: &Value, arch: &str, prefix: &str, dtype: &'static str) -> Vec<Tensor> {
    let gemma = arch.starts_with("Gemma");
    let (dv, dh, di, dl, dn) = match arch {
        "Gemma3" => (262_208, 2304, 9216, 26, 8),
        _ => (0, 0, 0, 0, 0),
    };
    let v = get(c, "vocab_size", dv);
    let h = get(c, "hidden_size", dh);
    let i = get(c, "intermediate_size", di);
    let layers = get(c, "num_hidden_layers", dl);
    let heads = get(c, "num_attention_heads", dn);
    let kv = get(c, "num_key_value_heads", if gemma { 4 } else { heads });
    let hd = get(c, "head_dim", if gemma { 256 } else { h / heads });
    let tied = c
        .get("tie_word_embeddings")
        .and_then(Value::as_bool)
        .unwrap_or(gemma);
    let mut t: Vec<Tensor> = Vec::new();
    let mut add = |name: String, shape: Vec<u64>| t.push((name, dtype, shape));
    add(format!("{prefix}model.embed_tokens.weight"), vec![v, h]);
    for l in 0..layers {
        let p = format!("{prefix}model.layers.{l}.");
        if arch == "Phi3" {
            add(
                format!("{p}self_attn.qkv_proj.weight"),
                vec![heads * hd + 2 * kv * hd, h],
            );
        } else {
            add(format!("{p}self_attn.q_proj.weight"), vec![heads * hd, h]);
            add(format!("{p}self_attn.k_proj.weight"), vec![kv * hd, h]);
            add(format!("{p}self_attn.v_proj.weight"), vec![kv * hd, h]);
        }
        if arch == "Qwen2" {
            add(format!("{p}self_attn.q_proj.bias"), vec![heads * hd]);
            add(format!("{p}self_attn.k_proj.bias"), vec![kv * hd]);
            add(format!("{p}self_attn.v_proj.bias"), vec![kv * hd]);
        }
        add(format!("{p}self_attn.o_proj.weight"), vec![h, heads * hd]);
        if arch == "Gemma3" || arch == "Qwen3" {
            add(format!("{p}self_attn.q_norm.weight"), vec![hd]);
            add(format!("{p}self_attn.k_norm.weight"), vec![hd]);
        }
        match arch {
            "Mixtral" => {
                let e = get(c, "num_local_experts", 8);
                add(format!("{p}block_sparse_moe.gate.weight"), vec![e, h]);
                for x in 0..e {
                    let q = format!("{p}block_sparse_moe.experts.{x}.");
                    add(format!("{q}w1.weight"), vec![i, h]);
                    add(format!("{q}w2.weight"), vec![h, i]);
                    add(format!("{q}w3.weight"), vec![i, h]);
                }
            }
            "Phi3" => {
                add(format!("{p}mlp.gate_up_proj.weight"), vec![2 * i, h]);
                add(format!("{p}mlp.down_proj.weight"), vec![h, i]);
            }
            _ => {
                add(format!("{p}mlp.gate_proj.weight"), vec![i, h]);
                add(format!("{p}mlp.up_proj.weight"), vec![i, h]);
                add(format!("{p}mlp.down_proj.weight"), vec![h, i]);
            }
        }
        add(format!("{p}input_layernorm.weight"), vec![h]);
        add(format!("{p}post_attention_layernorm.weight"), vec![h]);
        if gemma {
            add(format!("{p}pre_feedforward_layernorm.weight"), vec![h]);
            add(format!("{p}post_feedforward_layernorm.weight"), vec![h]);
        }
    }
    add(format!("{prefix}model.norm.weight"), vec![h]);
    if !tied {
        add(format!("{prefix}lm_head.weight"), vec![v, h]);
    }
    t
}

/// Gemma3ForConditionalGeneration's checkpoint: the language model under `language_model.`,
/// the SigLIP tower under `vision_tower.vision_model.`, and the projector.
fn gemma3_multimodal_tensors(c: &Value) -> Vec<Tensor> {
    let mut t = decoder_tensors(&c["text_config"], "Gemma3", "language_model.", "BF16");
    let v = &c["vision_config"];
    let (h, i, layers) = (
        get(v, "hidden_size", 0),
        get(v, "intermediate_size", 0),
        get(v, "num_hidden_layers", 0),
    );
    let (image, patch) = (get(v, "image_size", 0), get(v, "patch_size", 0));
    let text_h = get(&c["text_config"], "hidden_size", 0);
    let p = "vision_tower.vision_model.";
    let mut add = |name: String, shape: Vec<u64>| t.push((name, "BF16", shape));
    add(
        format!("{p}embeddings.patch_embedding.weight"),
        vec![h, 3, patch, patch],
    );
    add(format!("{p}embeddings.patch_embedding.bias"), vec![h]);
    add(
        format!("{p}embeddings.position_embedding.weight"),
        vec![(image / patch).pow(2), h],
    );
    for l in 0..layers {
        let q = format!("{p}encoder.layers.{l}.");
        for norm in ["layer_norm1", "layer_norm2"] {
            add(format!("{q}{norm}.weight"), vec![h]);
            add(format!("{q}{norm}.bias"), vec![h]);
        }
        for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            add(format!("{q}self_attn.{proj}.weight"), vec![h, h]);
            add(format!("{q}self_attn.{proj}.bias"), vec![h]);
        }
        add(format!("{q}mlp.fc1.weight"), vec![i, h]);
        add(format!("{q}mlp.fc1.bias"), vec![i]);
        add(format!("{q}mlp.fc2.weight"), vec![h, i]);
        add(format!("{q}mlp.fc2.bias"), vec![h]);
    }
    add(format!("{p}post_layernorm.weight"), vec![h]);
    add(format!("{p}post_layernorm.bias"), vec![h]);
    add(
        "multi_modal_projector.mm_input_projection_weight".into(),
        vec![h, text_h],
    );
    add(
        "multi_modal_projector.mm_soft_emb_norm.weight".into(),
        vec![h],
    );
    t
}

/// GptOssForCausalLM's unquantised checkpoint (as transformers saves it): fused expert tensors
/// with per-expert biases, attention biases and sinks, a router with bias.
fn gpt_oss_tensors(c: &Value) -> Vec<Tensor> {
    let (v, h, i) = (
        get(c, "vocab_size", 0),
        get(c, "hidden_size", 0),
        get(c, "intermediate_size", 0),
    );
    let (heads, kv, hd) = (
        get(c, "num_attention_heads", 0),
        get(c, "num_key_value_heads", 0),
        get(c, "head_dim", 0),
    );
    let e = get(c, "num_local_experts", 0);
    let mut t: Vec<Tensor> = Vec::new();
    let mut add = |name: String, shape: Vec<u64>| t.push((name, "BF16", shape));
    add("model.embed_tokens.weight".into(), vec![v, h]);
    for l in 0..get(c, "num_hidden_layers", 0) {
        let p = format!("model.layers.{l}.");
        for (proj, out, inp) in [
            ("q_proj", heads * hd, h),
            ("k_proj", kv * hd, h),
            ("v_proj", kv * hd, h),
            ("o_proj", h, heads * hd),
        ] {
            add(format!("{p}self_attn.{proj}.weight"), vec![out, inp]);
            add(format!("{p}self_attn.{proj}.bias"), vec![out]);
        }
        add(format!("{p}self_attn.sinks"), vec![heads]);
        add(format!("{p}mlp.router.weight"), vec![e, h]);
        add(format!("{p}mlp.router.bias"), vec![e]);
        add(format!("{p}mlp.experts.gate_up_proj"), vec![e, h, 2 * i]);
        add(format!("{p}mlp.experts.gate_up_proj_bias"), vec![e, 2 * i]);
        add(format!("{p}mlp.experts.down_proj"), vec![e, i, h]);
        add(format!("{p}mlp.experts.down_proj_bias"), vec![e, h]);
        add(format!("{p}input_layernorm.weight"), vec![h]);
        add(format!("{p}post_attention_layernorm.weight"), vec![h]);
    }
    add("model.norm.weight".into(), vec![h]);
    add("lm_head.weight".into(), vec![v, h]);
    t
}

fn tensors_of(name: &str) -> Vec<Tensor> {
    let c = config(name);
    let arch = c["architectures"][0].as_str().unwrap();
    let dtype = if c["torch_dtype"] == "float32" {
        "F32"
    } else {
        "BF16"
    };
    match arch {
        "Gemma3ForConditionalGeneration" => gemma3_multimodal_tensors(&c),
        "LlamaForCausalLM" | "MistralForCausalLM" => decoder_tensors(&c, "Llama", "", dtype),
        "Qwen2ForCausalLM" => decoder_tensors(&c, "Qwen2", "", dtype),
        "MixtralForCausalLM" => decoder_tensors(&c, "Mixtral", "", dtype),
        "Gemma2ForCausalLM" => decoder_tensors(&c, "Gemma2", "", dtype),
        "Phi3ForCausalLM" => decoder_tensors(&c, "Phi3", "", dtype),
        "Qwen3ForCausalLM" => decoder_tensors(&c, "Qwen3", "", dtype),
        "GptOssForCausalLM" => gpt_oss_tensors(&c),
        other => panic!("no tensor list for {other}"),
    }
}

fn bytes_of(dtype: &str) -> u64 {
    match dtype {
        "F32" => 4,
        _ => 2,
    }
}

/// Writes a safetensors file: a real header, and the data as a sparse hole of the right size
/// (the reader must never touch it).
fn write_safetensors(path: &Path, tensors: &[Tensor]) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0u64;
    for (name, dtype, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * bytes_of(dtype);
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let json = serde_json::to_vec(&Value::Object(header)).unwrap();
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
    file.write_all(&json).unwrap();
    file.set_len(8 + json.len() as u64 + offset).unwrap();
}

/// A folder with config.json and the tensors in `shards` files (1: model.safetensors; more: an
/// index and model-0000N-of-0000M.safetensors).
fn synthetic_folder(name: &str, shards: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture(name).join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let tensors = tensors_of(name);
    if shards == 1 {
        write_safetensors(&dir.path().join("model.safetensors"), &tensors);
        return dir;
    }
    let per = tensors.len().div_ceil(shards);
    let mut weight_map = BTreeMap::new();
    for (k, chunk) in tensors.chunks(per).enumerate() {
        let file = format!("model-{:05}-of-{shards:05}.safetensors", k + 1);
        for (n, _, _) in chunk {
            weight_map.insert(n.clone(), file.clone());
        }
        write_safetensors(&dir.path().join(&file), chunk);
    }
    let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.path().join(model::INDEX_FILE), index.to_string()).unwrap();
    dir
}

#[test]
fn published_counts_come_out_of_single_and_sharded_safetensors_headers() {
    for (name, published) in MODELS {
        let from_config = model::inspect(&fixture(name)).unwrap();
        for shards in [1, 4] {
            let dir = synthetic_folder(name, shards);
            let m = model::inspect(dir.path()).unwrap();
            assert_eq!(m.source, model::ParametersSource::Safetensors, "{name}");
            assert_eq!(m.parameters, published, "{name} in {shards} shard(s)");
            assert_eq!(m.files.len(), shards, "{name}");
            assert_eq!(m.active_parameters, from_config.active_parameters, "{name}");
            let dtype = if config(name)["torch_dtype"] == "float32" {
                "F32"
            } else {
                "BF16"
            };
            assert_eq!(
                m.weight_bytes_by_dtype[dtype],
                published * bytes_of(dtype),
                "{name}"
            );
            // Only the headers were read: a few hundred kilobytes at most, of gigabytes.
            assert!(
                m.header_bytes_read < 2_000_000,
                "{name}: {}",
                m.header_bytes_read
            );
        }
    }
}

#[test]
fn an_index_that_does_not_match_its_shards_is_refused() {
    let dir = synthetic_folder("qwen2-0.5b", 2);
    let index_path = dir.path().join(model::INDEX_FILE);
    let mut index: Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    index["weight_map"]["model.norm.weight"] = json!("model-00001-of-00002.safetensors");
    std::fs::write(&index_path, index.to_string()).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("does not map tensor `model.norm.weight`"),
        "{err}"
    );

    index["weight_map"]["model.norm.weight"] = json!("../../etc/passwd.safetensors");
    std::fs::write(&index_path, index.to_string()).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("expected the name of a .safetensors file in the same folder"),
        "{err}"
    );

    index["weight_map"]["model.norm.weight"] = json!("model-00003-of-00002.safetensors");
    std::fs::write(&index_path, index.to_string()).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(
            "names the shard `model-00003-of-00002.safetensors`, which is not in the folder"
        ),
        "{err}"
    );
}

/// A header that claims 1 TB of tensors in a 1 KB file is refused, naming file and tensor, after
/// reading only the header.
#[test]
fn a_terabyte_claimed_in_a_kilobyte_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let header = json!({"huge.weight": {"dtype": "BF16", "shape": [500_000_000_000u64], "data_offsets": [0, 1_000_000_000_000u64]}});
    let json = serde_json::to_vec(&header).unwrap();
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
    file.write_all(&json).unwrap();
    file.set_len(1024).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors: tensor `huge.weight` claims bytes 0 to 1000000000000"),
        "{err}"
    );
    assert!(err.contains("the offsets are outside the file"), "{err}");
}

#[test]
fn hostile_header_lengths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    // Over 100 MB claimed.
    let mut bytes = 100_000_001u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    std::fs::write(&path, &bytes).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("claims 100000001 bytes, more than the 100000000 bytes accepted"),
        "{err}"
    );
    // Past the end of the file.
    let mut bytes = 5000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    std::fs::write(&path, &bytes).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("claims 5000 bytes but the file holds 2"),
        "{err}"
    );
    // Shorter than the length itself.
    std::fs::write(&path, b"abc").unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
    // Bad JSON.
    let mut bytes = 3u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{x}");
    std::fs::write(&path, &bytes).unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(err.contains("is not valid JSON"), "{err}");
}

#[test]
fn a_folder_without_a_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("holds no config.json and no *.safetensors file"),
        "{err}"
    );
    let err = model::inspect(&dir.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot read"), "{err}");
    // An oversized config.json is refused without reading it whole.
    let big = dir.path().join("config.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(model::MAX_CONFIG_BYTES + 1)
        .unwrap();
    let err = model::inspect(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("more than the 4194304 bytes accepted for a config.json"),
        "{err}"
    );
}

/// An architecture whose formula is unknown still gets its exact count from safetensors.
#[test]
fn unknown_architectures_are_counted_from_safetensors() {
    let dir = synthetic_folder("qwen2-0.5b", 1);
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architectures":["FancyNewForCausalLM"]}"#,
    )
    .unwrap();
    let m = model::inspect(dir.path()).unwrap();
    assert_eq!(m.parameters, 494_032_768);
    assert!(m.architecture.is_none());
    assert_eq!(m.architecture_name.as_deref(), Some("FancyNewForCausalLM"));
    // Without safetensors it is refused by name.
    let err = model::inspect(&dir.path().join("config.json"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("architecture `FancyNewForCausalLM` is not one whose parameters"),
        "{err}"
    );
}
