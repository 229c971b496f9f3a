//! `iteragpu estimate`, end to end.

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;
use serde_json::json;

fn estimate(args: &[&str]) -> assert_cmd::assert::Assert {
    cargo_bin_cmd!("iteragpu")
        .arg("estimate")
        .args(args)
        .assert()
}

#[test]
fn the_issue_example_prints_every_figure() {
    estimate(&[
        "--parameters",
        "7000000000",
        "--bits",
        "16",
        "--reserve-gib",
        "4",
    ])
    .success()
    .stdout(predicate::str::contains("weight bytes        14000000000"))
    .stdout(predicate::str::contains("weight GiB (2^30)   13.0385"))
    .stdout(predicate::str::contains("weight GB (10^9)    14.0000"))
    .stdout(predicate::str::contains("reserve (assumed)   4.0000 GiB"))
    .stdout(predicate::str::contains("total               17.0385 GiB"))
    .stdout(predicate::str::contains(
        "not a guarantee that a model fits",
    ))
    .stdout(predicate::str::contains(
        "Not included: activations, KV cache",
    ))
    .stderr(predicate::str::is_empty());
}

/// The JSON keys of a plain estimate: the original nine and the ones issue 24 adds, the same at
/// every width.
const PLAIN_KEYS: [&str; 33] = [
    "assumptions",
    "batch",
    "bits",
    "bytes_per_parameter",
    "context",
    "excluded",
    "kv_bits",
    "kv_cache_bytes",
    "kv_cache_bytes_per_token",
    "kv_cache_layers",
    "model_bytes",
    "model_gib",
    "packed_layout",
    "packed_model_bytes",
    "packed_model_gib",
    "packed_total_breakdown",
    "packed_total_bytes",
    "packed_total_gib",
    "packed_weight_bytes",
    "packed_weight_gib",
    "parameters",
    "quantisation_metadata",
    "quantisation_metadata_bytes",
    "reserve_bytes",
    "reserve_gib",
    "total_breakdown",
    "total_bytes",
    "total_gib",
    "training",
    "weight_bytes",
    "weight_bytes_rule",
    "weight_gb",
    "weight_gib",
];

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = estimate(&all).success().get_output().stdout.clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

fn keys(doc: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = doc.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// A breakdown's lines sum to its total.
fn sums(doc: &serde_json::Value, breakdown: &str, total: &str) {
    let sum: u64 = doc[breakdown]
        .as_array()
        .unwrap_or_else(|| panic!("{breakdown} in {doc}"))
        .iter()
        .map(|i| i["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(json!(sum), doc[total], "{breakdown}");
}

#[test]
fn json_is_one_document_with_the_issue_keys() {
    let doc = json(&["--parameters", "7B", "--bits", "16", "--reserve-gib", "4"]);
    assert_eq!(keys(&doc), PLAIN_KEYS);
    assert_eq!(doc["parameters"], 7_000_000_000u64);
    assert_eq!(doc["bits"], 16);
    assert_eq!(doc["bytes_per_parameter"], 2);
    assert_eq!(doc["weight_bytes"], 14_000_000_000u64);
    assert_eq!(doc["weight_gib"], "13.0385");
    assert_eq!(doc["weight_gb"], "14.0000");
    assert_eq!(doc["reserve_gib"], "4.0000");
    assert_eq!(doc["total_gib"], "17.0385");
    // Issue 24: total_bytes is there at 16 bits, and it is the same quantity as total_gib.
    assert_eq!(doc["model_bytes"], 14_000_000_000u64);
    assert_eq!(doc["reserve_bytes"], 4u64 << 30);
    assert_eq!(doc["total_bytes"], 14_000_000_000u64 + (4 << 30));
    sums(&doc, "total_breakdown", "total_bytes");
    assert!(doc["packed_weight_bytes"].is_null());
    assert!(doc["packed_total_gib"].is_null());
    let excluded: Vec<&str> = doc["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for item in ["activations", "KV cache", "gradients", "optimizer state"] {
        assert!(excluded.contains(&item), "{item} missing from {excluded:?}");
    }
    assert!(
        excluded
            .iter()
            .any(|e| e.starts_with("quantisation metadata"))
    );
    assert!(excluded.iter().any(|e| e.starts_with("runtime libraries")));
}

/// Issue 24: at 4 bits with a 4 GiB reserve, the total is the weights plus the reserve, never
/// less than the weights, in text and JSON; the packed figure comes beside it with its own total.
#[test]
fn four_bits_with_a_reserve_add_up_in_text_and_json() {
    let args = ["--parameters", "70B", "--bits", "4", "--reserve-gib", "4"];
    estimate(&args)
        .success()
        .stdout(predicate::str::contains("weight GiB (2^30)   65.1926\n"))
        .stdout(predicate::str::contains(
            "total               69.1926 GiB (weights + reserve)\n",
        ))
        .stdout(predicate::str::contains(
            "packed weight bytes 35000000000\n",
        ))
        .stdout(predicate::str::contains("packed weight GiB   32.5963\n"))
        .stdout(predicate::str::contains(
            "packed total        36.5963 GiB (packed weights + reserve)\n",
        ))
        .stdout(predicate::str::contains(
            "Packed 4-bit storage, a second figure",
        ));
    let doc = json(&args);
    assert_eq!(
        keys(&doc),
        PLAIN_KEYS,
        "the keys do not change with the width"
    );
    assert_eq!(doc["weight_bytes"], 70_000_000_000u64);
    assert_eq!(doc["total_gib"], "69.1926");
    assert_eq!(doc["total_bytes"], 70_000_000_000u64 + (4 << 30));
    assert!(doc["total_bytes"].as_u64() >= doc["weight_bytes"].as_u64());
    assert_eq!(doc["packed_weight_bytes"], 35_000_000_000u64);
    assert_eq!(doc["packed_total_gib"], "36.5963");
    assert_eq!(doc["packed_total_bytes"], 35_000_000_000u64 + (4 << 30));
    sums(&doc, "total_breakdown", "total_bytes");
    sums(&doc, "packed_total_breakdown", "packed_total_bytes");
}

fn models(name: &str) -> String {
    format!("{}/../../data/models/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Issue 24: Qwen3, Qwen3 MoE, gpt-oss, DeepSeek-V3 and Llama 4 are counted from config.json,
/// to their published totals (sources in data/models/README.md).
#[test]
fn the_architectures_renters_ask_about_are_counted() {
    for (name, arch, parameters, active) in [
        (
            "qwen3-8b",
            "Qwen3ForCausalLM",
            8_190_735_360u64,
            8_190_735_360u64,
        ),
        (
            "qwen3-30b-a3b",
            "Qwen3MoeForCausalLM",
            30_532_122_624,
            3_353_032_704,
        ),
        (
            "gpt-oss-20b",
            "GptOssForCausalLM",
            20_914_757_184,
            4_187_440_704,
        ),
        (
            "deepseek-v3",
            "DeepseekV3ForCausalLM",
            671_026_419_200,
            37_552_297_472,
        ),
        (
            "llama-4-scout-17b-16e",
            "Llama4ForConditionalGeneration",
            108_641_793_536,
            18_044_827_136,
        ),
    ] {
        let doc = json(&["--model", &models(name)]);
        assert_eq!(doc["architecture"], arch, "{name}");
        assert_eq!(doc["parameters"], parameters, "{name}");
        assert_eq!(doc["active_parameters"], active, "{name}");
        sums(&doc, "total_breakdown", "total_bytes");
    }
}

/// gpt-oss-20b from its config.json alone: the MXFP4 layout its quantization_config describes
/// gives the real checkpoint's 13,761,264,768 bytes (experts packed at 4 bits with one 8-bit
/// scale per 32, everything else in bfloat16), beside the whole-byte headline.
#[test]
fn gpt_oss_packed_figure_is_its_checkpoint() {
    let doc = json(&["--model", &models("gpt-oss-20b"), "--reserve-gib", "2"]);
    assert_eq!(doc["bits"], 4);
    assert_eq!(doc["weight_bytes"], 20_914_757_184u64);
    assert_eq!(doc["quantisation_metadata_bytes"], 597_196_800u64);
    assert_eq!(doc["packed_weight_bytes"], 13_164_067_968u64);
    assert_eq!(doc["packed_model_bytes"], 13_761_264_768u64);
    assert_eq!(doc["packed_total_bytes"], 13_761_264_768u64 + (2 << 30));
    let layout = &doc["packed_layout"];
    let kept: u64 = layout["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(json!(kept), layout["kept_bytes"]);
    assert_eq!(
        layout["quantised_bytes"].as_u64().unwrap() + kept,
        13_164_067_968
    );
    assert!(
        layout["rule"]
            .as_str()
            .unwrap()
            .contains("modules_to_not_convert")
    );
    sums(&doc, "total_breakdown", "total_bytes");
    sums(&doc, "packed_total_breakdown", "packed_total_bytes");
    assert!(doc["total_bytes"].as_u64() > doc["packed_total_bytes"].as_u64());
}

/// Issue 24: a 4-bit Qwen2.5-7B keeps its embeddings and lm_head (2 x 152064 x 3584) at 16
/// bits, as AWQ and GPTQ checkpoints do: 1,634,992,128 bytes (1.52 GiB) more than packing them.
#[test]
fn four_bit_embeddings_stay_at_sixteen_bits() {
    let doc = json(&["--model", &models("qwen2.5-7b"), "--bits", "4"]);
    let naive = 7_615_616_512u64 / 2;
    let embeddings = 2 * 152_064 * 3584u64;
    let layout = &doc["packed_layout"];
    let kept = layout["kept"].as_array().unwrap();
    assert_eq!(kept[0]["what"], "embeddings");
    assert_eq!(kept[1]["what"], "lm_head");
    assert_eq!(
        kept[0]["parameters"].as_u64().unwrap() + kept[1]["parameters"].as_u64().unwrap(),
        embeddings
    );
    let packed = doc["packed_weight_bytes"].as_u64().unwrap();
    // Norms and biases (333,312 parameters) are kept at 16 bits too.
    assert_eq!(packed, naive + embeddings * 3 / 2 + 333_312 * 3 / 2);
    // Scales and zero points per group of 128 columns of the packed matrices.
    assert_eq!(doc["quantisation_metadata"]["groups"], 50_978_816u64);
    assert_eq!(doc["quantisation_metadata_bytes"], 50_978_816u64 * 5 / 2);
}

/// Sliding-window layers and DeepSeek-V3's latent are counted as they are cached.
#[test]
fn kv_cache_counts_windows_and_latents() {
    // gpt-oss-20b: 12 layers slide over 128 tokens, 12 attend to all; 2 x 8 x 64 x 2 bytes each.
    let doc = json(&["--model", &models("gpt-oss-20b"), "--context", "8192"]);
    let per_layer = 2 * 8 * 64 * 2u64;
    assert_eq!(doc["kv_cache_bytes_per_token"], 24 * per_layer);
    assert_eq!(
        doc["kv_cache_bytes"],
        12 * per_layer * 128 + 12 * per_layer * 8192
    );
    let layers = doc["kv_cache_layers"].as_array().unwrap();
    assert_eq!(layers[0]["kind"], "sliding_window");
    assert_eq!(layers[0]["cached_tokens"], 128);
    // DeepSeek-V3: kv_lora_rank + qk_rope_head_dim = 576 elements per token per layer, 61
    // layers, bfloat16: 70,272 bytes per token, not 2 x 128 heads x 192 x 61 x 2.
    let doc = json(&["--model", &models("deepseek-v3"), "--context", "32768"]);
    assert_eq!(doc["kv_cache_bytes_per_token"], 70_272);
    assert_eq!(doc["kv_cache_bytes"], 70_272u64 * 32768);
    assert_eq!(doc["kv_cache_layers"][0]["kind"], "latent");
    assert!(
        doc["assumptions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("multi-head latent attention"))
    );
    // Llama 4 Scout: 36 chunked layers keep at most 8192 tokens.
    let doc = json(&[
        "--model",
        &models("llama-4-scout-17b-16e"),
        "--context",
        "65536",
    ]);
    let per_layer = 2 * 8 * 128 * 2u64;
    assert_eq!(
        doc["kv_cache_bytes"],
        36 * per_layer * 8192 + 12 * per_layer * 65536
    );
}

#[test]
fn other_notations_give_the_same_count() {
    for n in ["7e9", "7_000_000_000", "7B", "7000M", "7.0B", "0.007T"] {
        estimate(&["--parameters", n, "--bits", "16"])
            .success()
            .stdout(predicate::str::contains("parameters          7000000000\n"));
    }
    // 4-bit weights take one whole byte each here.
    estimate(&["--parameters", "70B", "--bits", "4"])
        .success()
        .stdout(predicate::str::contains("weight bytes        70000000000"))
        .stdout(predicate::str::contains("reserve (assumed)   none"));
}

#[test]
fn bad_input_is_refused_with_a_sentence_naming_it() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--parameters", "0", "--bits", "16"],
            "parameter count `0` is zero",
        ),
        (
            &["--parameters", "-5", "--bits", "16"],
            "parameter count `-5` is negative",
        ),
        (
            &["--parameters", "abc", "--bits", "16"],
            "parameter count `abc` is not a number",
        ),
        (
            &["--parameters", "1.5", "--bits", "16"],
            "parameter count `1.5` is not a whole number",
        ),
        (
            &["--parameters", "1.00000000001B", "--bits", "16"],
            "parameter count `1.00000000001B` is not a whole number",
        ),
        (
            &["--parameters", "18446744073709551616", "--bits", "16"],
            "parameter count `18446744073709551616` is larger than 18446744073709551615",
        ),
        (
            &["--parameters", "7B", "--bits", "0"],
            "bits per parameter `0` is not accepted; expected a whole number from 1 to 64",
        ),
        (
            &["--parameters", "7B", "--bits", "65"],
            "bits per parameter `65` is not accepted; expected a whole number from 1 to 64",
        ),
        (
            &["--parameters", "7B", "--bits", "16", "--reserve-gib", "-1"],
            "reserve `-1` GiB is negative",
        ),
        (
            &["--parameters", "7B", "--bits", "16", "--reserve-gib", "NaN"],
            "reserve `NaN` is not a finite number",
        ),
        (
            &["--parameters", "7B", "--bits", "16", "--reserve-gib", "inf"],
            "reserve `inf` is not a finite number",
        ),
    ];
    for (args, says) in cases {
        estimate(args)
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(*says))
            .stderr(predicate::str::contains("expected"))
            .stderr(predicate::str::contains("panicked").not());
    }
}

#[test]
fn missing_options_are_usage_errors() {
    estimate(&["--bits", "16"])
        .code(2)
        .stderr(predicate::str::contains("--parameters"));
}

#[test]
fn help_teaches_with_examples() {
    estimate(&["--help"])
        .success()
        .stdout(predicate::str::contains(
            "iteragpu estimate --parameters 7000000000 --bits 16 --reserve-gib 4",
        ))
        .stdout(predicate::str::contains("not a guarantee"));
}
