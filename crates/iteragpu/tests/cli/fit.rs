//! `iteragpu fit` and `iteragpu estimate --model`, end to end. Expected rows are computed here
//! from `price --list --json` and the model's published figures, not from the binary's `fit`.

use std::io::Write;
use std::path::{Path, PathBuf};

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;
use serde_json::{Value, json};

fn models(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/models")
        .join(name)
}

fn run_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = cargo_bin_cmd!("iteragpu")
        .args(&all)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

/// The catalogue as `price --list --json` gives it.
fn catalogue() -> Vec<Value> {
    run_json(&["price", "--list"])["rows"]
        .as_array()
        .unwrap()
        .clone()
}

const GIB: u128 = 1 << 30;

/// Every (gpu, lots, days) the catalogue offers up to `max_gpus`, with the need per GPU for
/// `model_bytes` split evenly plus `reserve` bytes: (gpu, lots, gpus, days, need, usable, fits,
/// price).
#[allow(clippy::type_complexity)]
fn expected_rows(
    model_bytes: u128,
    reserve: u128,
    max_gpus: u64,
    days: Option<u64>,
) -> Vec<(String, u64, u64, u64, u128, u128, bool, u64)> {
    let mut rows = Vec::new();
    for r in catalogue() {
        let d = r["days"].as_u64().unwrap();
        if days.is_some_and(|want| want != d) {
            continue;
        }
        let per = r["gpus_per_lot"].as_u64().unwrap();
        let usable = u128::from(r["usable_memory_mib"].as_u64().unwrap()) * 1024 * 1024;
        for lots in 1.. {
            let gpus = per * lots;
            if gpus > max_gpus {
                break;
            }
            let need = model_bytes.div_ceil(u128::from(gpus)) + reserve;
            let price = r["price_cents"].as_u64().unwrap() * lots;
            rows.push((
                r["gpu"].as_str().unwrap().to_string(),
                lots,
                gpus,
                d,
                need,
                usable,
                need <= usable,
                price,
            ));
        }
    }
    rows
}

#[test]
fn an_8b_model_at_context_8192_lists_the_cheapest_fitting_package_first() {
    let doc = run_json(&[
        "fit",
        "--model",
        models("llama-3.1-8b").to_str().unwrap(),
        "--context",
        "8192",
    ]);
    // Published: 8030261248 parameters in bfloat16; KV: 2 x 32 x 8 x 128 x 2 bytes per token.
    let model_bytes = 8_030_261_248u128 * 2 + 2 * 32 * 8 * 128 * 2 * 8192;
    assert_eq!(doc["estimate"]["total_bytes"], json!(model_bytes as u64));
    assert_eq!(doc["assumptions"]["reserve_gib_per_gpu"], "2");
    let want = expected_rows(model_bytes, 2 * GIB, 8, None);
    let options = doc["options"].as_array().unwrap();
    assert_eq!(options.len(), want.len());
    for o in options {
        let row = want
            .iter()
            .find(|w| {
                w.0 == o["gpu"].as_str().unwrap()
                    && json!(w.1) == o["lots"]
                    && json!(w.3) == o["days"]
            })
            .unwrap_or_else(|| panic!("unexpected option {o}"));
        assert_eq!(o["total_gpus"], json!(row.2));
        assert_eq!(o["per_gpu_bytes"], json!(row.4 as u64));
        assert_eq!(o["usable_bytes_per_gpu"], json!(row.5 as u64));
        assert_eq!(o["fits"], json!(row.6));
        assert_eq!(o["headroom_bytes"], json!(row.5 as i64 - row.4 as i64));
        assert_eq!(o["total_price_cents"], json!(row.7));
        assert_eq!(o["currency"], "USD");
        assert!(o["source"].as_str().unwrap().contains("example"));
    }
    let cheapest = want.iter().filter(|w| w.6).map(|w| w.7).min().unwrap();
    assert_eq!(options[0]["fits"], true);
    assert_eq!(options[0]["total_price_cents"], json!(cheapest));
    // Fitting first, each group cheapest first.
    let fits: Vec<bool> = options
        .iter()
        .map(|o| o["fits"].as_bool().unwrap())
        .collect();
    assert!(fits.windows(2).all(|w| w[0] || !w[1]));
    let text = cargo_bin_cmd!("iteragpu")
        .args([
            "fit",
            "--model",
            models("llama-3.1-8b").to_str().unwrap(),
            "--context",
            "8192",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(text).unwrap();
    // The EXAMPLE mark on every line of an example row.
    for line in text.lines().skip_while(|l| !l.starts_with("gpu ")).skip(1) {
        if line.is_empty() {
            break;
        }
        assert!(line.ends_with("EXAMPLE"), "{line}");
    }
    assert!(
        text.contains("default assumption; --reserve-gib changes it"),
        "{text}"
    );
}

#[test]
fn a_70b_model_in_bfloat16_needs_more_than_one_80_gb_gpu() {
    let doc = run_json(&[
        "fit",
        "--parameters",
        "70B",
        "--bits",
        "16",
        "--days",
        "30",
        "--max-gpus",
        "4",
    ]);
    let options = doc["options"].as_array().unwrap();
    let want = expected_rows(140_000_000_000, 2 * GIB, 4, Some(30));
    assert_eq!(options.len(), want.len());
    for gpu in ["h100-sxm", "h100-pcie", "a100-80gb"] {
        let one = options
            .iter()
            .find(|o| o["gpu"] == gpu && o["lots"] == 1)
            .unwrap();
        assert_eq!(one["fits"], false, "{gpu}");
        assert!(one["headroom_bytes"].as_i64().unwrap() < 0);
        let two = options
            .iter()
            .find(|o| o["gpu"] == gpu && o["lots"] == 2)
            .unwrap();
        assert_eq!(two["fits"], true, "{gpu}");
    }
    // A custom reserve is used and said.
    let doc = run_json(&[
        "fit",
        "--parameters",
        "70B",
        "--bits",
        "16",
        "--reserve-gib",
        "0.5",
        "--days",
        "3",
        "--max-gpus",
        "1",
    ]);
    assert_eq!(doc["assumptions"]["reserve_given"], true);
    let h200 = doc["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["gpu"] == "h200")
        .unwrap()
        .clone();
    assert_eq!(
        h200["per_gpu_bytes"],
        json!(140_000_000_000u64 + GIB as u64 / 2)
    );
}

#[test]
fn bad_fit_options_are_usage_errors() {
    for (args, says) in [
        (vec!["fit"], "required"),
        (vec!["fit", "--parameters", "7B"], "--bits"),
        (
            vec![
                "fit",
                "--parameters",
                "7B",
                "--bits",
                "16",
                "--max-gpus",
                "0",
            ],
            "from 1 to 1024",
        ),
        (
            vec!["fit", "--parameters", "7B", "--bits", "16", "--days", "5"],
            "3, 7 or 30",
        ),
        (
            vec![
                "fit",
                "--parameters",
                "7B",
                "--bits",
                "16",
                "--context",
                "8",
            ],
            "attention geometry",
        ),
    ] {
        cargo_bin_cmd!("iteragpu")
            .args(&args)
            .assert()
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(says));
    }
}

#[test]
fn estimate_model_json_keeps_every_key_and_adds_the_model_ones() {
    let doc = run_json(&[
        "estimate",
        "--model",
        models("mixtral-8x7b-v0.1").to_str().unwrap(),
        "--context",
        "4096",
        "--batch",
        "2",
    ]);
    for key in [
        "parameters",
        "bits",
        "bytes_per_parameter",
        "weight_bytes",
        "weight_gib",
        "weight_gb",
        "reserve_gib",
        "total_gib",
        "excluded",
        "model",
        "architecture",
        "parameters_source",
        "active_parameters",
        "weight_bytes_by_dtype",
        "packed_weight_bytes",
        "kv_cache_bytes_per_token",
        "kv_cache_bytes",
        "total_bytes",
    ] {
        assert!(doc.get(key).is_some(), "missing {key} in {doc}");
    }
    assert_eq!(doc["architecture"], "MixtralForCausalLM");
    assert_eq!(doc["parameters_source"], "config");
    assert_eq!(doc["parameters"], 46_702_792_704u64);
    assert_eq!(doc["active_parameters"], 12_879_925_248u64);
    assert_eq!(doc["kv_cache_bytes_per_token"], 131_072);
    assert_eq!(doc["kv_cache_bytes"], 131_072u64 * 4096 * 2);
    assert!(doc["packed_weight_bytes"].is_null());
    // 4 bits: packed beside the whole-byte rule.
    let doc = run_json(&[
        "estimate",
        "--model",
        models("qwen2.5-7b").to_str().unwrap(),
        "--bits",
        "4",
        "--group-size",
        "128",
    ]);
    assert_eq!(doc["weight_bytes"], 7_615_616_512u64);
    assert_eq!(doc["packed_weight_bytes"], 7_615_616_512u64 / 2);
    assert_eq!(
        doc["quantisation_metadata_bytes"],
        7_615_616_512u64.div_ceil(128) * 2
    );
    // Training lines are labelled.
    let doc = run_json(&[
        "estimate",
        "--model",
        models("llama-3.2-3b").to_str().unwrap(),
        "--training",
        "adam",
    ]);
    assert_eq!(
        doc["training"]["adam_second_moment_bytes"],
        3_212_749_824u64 * 4
    );
    assert_eq!(doc["total_bytes"], 3_212_749_824u64 * 16);
}

#[test]
fn a_sliding_window_shorter_than_the_context_is_said_in_text_and_json() {
    // Gemma 2 9B: 42 layers, every other one local with a 4096-token window
    // (config.json's sliding_window; modeling_gemma2.py alternates them).
    let gemma = models("gemma-2-9b");
    let gemma = gemma.to_str().unwrap();
    let doc = run_json(&["estimate", "--model", gemma, "--context", "8192"]);
    let notes = doc["model_notes"].as_array().expect("model_notes");
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = notes[0].as_str().unwrap();
    for part in [
        "sliding window",
        "21 of 42 layers",
        "last 4096 tokens",
        "all 8192 tokens",
    ] {
        assert!(note.contains(part), "{part:?} not in {note:?}");
    }
    cargo_bin_cmd!("iteragpu")
        .args(["estimate", "--model", gemma, "--context", "8192"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("Assumed: {note}.")));
    // Within the window there is nothing to say, and Mixtral's experts are said in JSON too.
    let doc = run_json(&["estimate", "--model", gemma, "--context", "4096"]);
    assert_eq!(doc["model_notes"], json!([]));
    let mixtral = models("mixtral-8x7b-v0.1");
    let doc = run_json(&["estimate", "--model", mixtral.to_str().unwrap()]);
    assert!(
        doc["model_notes"][0]
            .as_str()
            .unwrap()
            .starts_with("mixture of experts: all 8 experts")
    );
}

/// A safetensors file with one tensor; data left as a sparse hole.
fn write_safetensors(path: &Path, name: &str, shape: &[u64]) {
    let bytes: u64 = shape.iter().product::<u64>() * 2;
    let header = json!({name: {"dtype": "BF16", "shape": shape, "data_offsets": [0, bytes]}});
    let json = serde_json::to_vec(&header).unwrap();
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&json).unwrap();
    f.set_len(8 + json.len() as u64 + bytes).unwrap();
}

#[test]
fn estimate_model_reads_a_sharded_folder_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut map = serde_json::Map::new();
    for k in 1..=3u64 {
        let file = format!("model-{k:05}-of-00003.safetensors");
        write_safetensors(&dir.path().join(&file), &format!("t{k}"), &[1000, k]);
        map.insert(format!("t{k}"), json!(file));
    }
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        json!({"weight_map": map}).to_string(),
    )
    .unwrap();
    let doc = run_json(&["estimate", "--model", dir.path().to_str().unwrap()]);
    assert_eq!(doc["parameters"], 6000);
    assert_eq!(doc["parameters_source"], "safetensors");
    assert_eq!(doc["weight_bytes_by_dtype"]["BF16"], 12000);
    assert_eq!(doc["weight_bytes"], 12000);
    assert!(doc["architecture"].is_null());
}

#[test]
fn hostile_model_files_are_refused_with_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    write_safetensors(&path, "w", &[4]);
    // Claim a terabyte in a small file.
    let header = json!({"w": {"dtype": "BF16", "shape": [500_000_000_000u64], "data_offsets": [0, 1_000_000_000_000u64]}});
    let json = serde_json::to_vec(&header).unwrap();
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&json).unwrap();
    drop(f);
    cargo_bin_cmd!("iteragpu")
        .args(["estimate", "--model", dir.path().to_str().unwrap()])
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(
            "tensor `w` claims bytes 0 to 1000000000000",
        ))
        .stderr(predicate::str::contains("panicked").not());
    std::fs::remove_file(&path).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architectures":["FalconForCausalLM"]}"#,
    )
    .unwrap();
    cargo_bin_cmd!("iteragpu")
        .args(["estimate", "--model", dir.path().to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "architecture `FalconForCausalLM` is not one",
        ))
        .stderr(predicate::str::contains("LlamaForCausalLM"));
}

/// Issue 27: a tensor named twice (a JSON reader keeps one: 10 elements counted, not 1,010) and an
/// overlap hidden by an empty tensor (1,200 elements counted in 1,000 bytes) are refused, each
/// with one sentence and exit 1.
#[test]
fn a_twice_named_or_hidden_overlapping_tensor_is_refused() {
    for (header, data, says) in [
        (
            r#"{"w":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]},"w":{"dtype":"U8","shape":[10],"data_offsets":[1000,1010]}}"#,
            1010,
            "tensor `w` is named twice in the header; expected each tensor once",
        ),
        (
            r#"{"big":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]},"z":{"dtype":"U8","shape":[0],"data_offsets":[500,500]},"c":{"dtype":"U8","shape":[100],"data_offsets":[600,700]},"d":{"dtype":"U8","shape":[100],"data_offsets":[700,800]}}"#,
            1000,
            "tensor `c` has data_offsets [600, 700] overlapping tensor `big` at [0, 1000]",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut f = std::fs::File::create(dir.path().join("model.safetensors")).unwrap();
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
        f.set_len(8 + header.len() as u64 + data).unwrap();
        drop(f);
        let out = cargo_bin_cmd!("iteragpu")
            .args(["estimate", "--model", dir.path().to_str().unwrap()])
            .assert()
            .code(1)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(says))
            .get_output()
            .stderr
            .clone();
        assert_eq!(String::from_utf8_lossy(&out).lines().count(), 1);
    }
}

#[test]
fn help_teaches_with_examples() {
    for cmd in ["fit", "estimate"] {
        cargo_bin_cmd!("iteragpu")
            .args([cmd, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("--model data/models/llama-3.1-8b"));
    }
}
