//! `iteragpu fit` and `iteragpu estimate --model`, end to end. Expected rows are computed here
//! from `price --list --json` and the model's published figures, not from the binary's `fit`.

use std::io::Write;
use std::path::{Path, PathBuf};

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;
use serde_json::{Value, json};

use crate::stubs::{StubDir, iteragpu};

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

/// Llama 3.1 8B's published figures: 8030261248 parameters in bfloat16, 32 layers, 32 heads, 8
/// KV heads of 128, a 128256 x 4096 embedding and an untied output head of the same size.
const LLAMA_PARAMETERS: u128 = 8_030_261_248;
const LLAMA_EMBEDDING: u128 = 128_256 * 4096;
/// KV bytes per token per layer per KV head: key and value, 128 elements each, 2 bytes.
const KV_PER_LAYER_HEAD: u128 = 2 * 128 * 2;

/// The busiest GPU's need for Llama 3.1 8B in bfloat16 at `context` x 1 under tensor parallel
/// `tp` and `pp` pipeline stages, from the published figures: stages of vLLM's get_pp_indices
/// (floor(32 / pp), one more for each of the 32 mod pp stages before the last), the embedding
/// on the first stage, the head on the last, everything over `tp`.
fn llama_need(tp: u128, pp: u128, context: u128, reserve: u128) -> u128 {
    let base = 32 / pp;
    let extra = 32 % pp;
    let mut layers = vec![base; pp as usize];
    for i in 0..extra as usize {
        layers[pp as usize - 2 - i] += 1;
    }
    let body = LLAMA_PARAMETERS - 2 * LLAMA_EMBEDDING;
    let mut worst = 0;
    for (i, n) in layers.iter().enumerate() {
        let ends = if pp == 1 {
            2 * LLAMA_EMBEDDING
        } else if i == 0 || i + 1 == pp as usize {
            LLAMA_EMBEDDING
        } else {
            0
        };
        // Two bytes per parameter of the stage's share, split over tp, rounded up.
        let weights = (2 * (body * n + ends * 32)).div_ceil(32 * tp);
        let kv = n * (8 / tp) * KV_PER_LAYER_HEAD * context;
        worst = worst.max(weights + kv + reserve);
    }
    worst
}

#[test]
fn an_8b_model_at_context_8192_lists_the_cheapest_fitting_package_first() {
    let doc = run_json(&[
        "fit",
        "--serve",
        "none",
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
    assert_eq!(doc["selection"]["rows_total"], json!(want.len()));
    for o in options {
        let row = want
            .iter()
            .find(|w| {
                w.0 == o["gpu"].as_str().unwrap()
                    && json!(w.1) == o["lots"]
                    && json!(w.3) == o["days"]
            })
            .unwrap_or_else(|| panic!("unexpected option {o}"));
        let gpus = row.2 as u128;
        assert_eq!(o["total_gpus"], json!(row.2));
        // 1, 2, 4 or 8 GPUs divide the 32 heads and the 8 KV heads: plain tensor parallel, the
        // even split. 3, 5, 6 and 7 do not: the largest degree that does, times pipeline stages.
        let (tp, pp) = match gpus {
            1 | 2 | 4 | 8 => (gpus, 1),
            6 => (2, 3),
            n => (1, n),
        };
        assert_eq!(o["layout"]["tensor_parallel"], json!(tp as u64), "{o}");
        assert_eq!(o["layout"]["pipeline_parallel"], json!(pp as u64), "{o}");
        let need = llama_need(tp, pp, 8192, 2 * GIB);
        if pp == 1 {
            assert_eq!(need, row.4, "{o}");
        }
        assert_eq!(o["per_gpu_bytes"], json!(need as u64), "{o}");
        assert_eq!(o["usable_bytes_per_gpu"], json!(row.5 as u64));
        assert_eq!(o["fits"], json!(need <= row.5));
        assert_eq!(o["headroom_bytes"], json!(row.5 as i64 - need as i64));
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
    let text = run_text(&[
        "fit",
        "--serve",
        "none",
        "--model",
        models("llama-3.1-8b").to_str().unwrap(),
        "--context",
        "8192",
    ]);
    // The EXAMPLE mark on every line of an example row; a short table by default, and how to
    // see every row.
    let rows = table_rows(&text);
    assert_eq!(rows.len(), 10, "{text}");
    for line in &rows {
        assert!(line.ends_with("EXAMPLE"), "{line}");
    }
    assert!(
        text.contains(&format!(
            "10 of {} rows shown; --all shows every one",
            want.len()
        )),
        "{text}"
    );
    assert!(
        text.contains("default assumption; --reserve-gib changes it"),
        "{text}"
    );
}

/// The binary's stdout for `args`, which must succeed.
fn run_text(args: &[&str]) -> String {
    let out = cargo_bin_cmd!("iteragpu")
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

/// The table's rows in fit's text.
fn table_rows(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("gpu "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs()
}

/// Issue 24, item 1 and 2: Llama 3.1 8B in bfloat16 on one H100 SXM at batch 1. The largest
/// context and batch are computed here from the bytes: usable 81106 MiB - weights - reserve, over
/// the KV cache's 131072 bytes per token (2 x 32 layers x 8 KV heads x 128 x 2 bytes).
#[test]
fn llama_8b_on_one_h100_holds_the_context_and_batch_its_bytes_allow() {
    let llama = models("llama-3.1-8b");
    let llama = llama.to_str().unwrap();
    let row = |extra: &[&str]| -> Value {
        let mut args = vec![
            "fit",
            "--serve",
            "none",
            "--model",
            llama,
            "--gpu",
            "h100-sxm",
            "--max-gpus",
            "1",
            "--days",
            "7",
        ];
        args.extend_from_slice(extra);
        let doc = run_json(&args);
        let options = doc["options"].as_array().unwrap();
        assert_eq!(options.len(), 1, "{doc}");
        options[0].clone()
    };
    let usable = 81_106u128 << 20;
    let weights = LLAMA_PARAMETERS * 2;
    let per_token = 2 * 32 * 8 * 128 * 2u128;
    assert_eq!(per_token, 131_072);
    let free = usable - weights - 2 * GIB;
    // Memory alone allows 509931 tokens: more than the model's 131072 positions, so the cap.
    assert_eq!(free / per_token, 509_931);
    let o = row(&["--context", "8192"]);
    assert_eq!(o["largest_context"], 131_072);
    assert_eq!(o["largest_context_limit"], "max_position_embeddings");
    assert_eq!(
        o["largest_batch"],
        json!((free / (per_token * 8192)) as u64)
    );
    assert_eq!(o["largest_batch"], 62);
    // A reserve that leaves 4560773120 bytes: the memory is the limit.
    let o = row(&["--context", "8192", "--reserve-gib", "60"]);
    let free60 = usable - weights - 60 * GIB;
    assert_eq!(o["largest_context"], json!((free60 / per_token) as u64));
    assert_eq!(o["largest_context"], 34_795);
    assert_eq!(o["largest_context_limit"], "memory");
    assert_eq!(
        o["largest_batch"],
        json!((free60 / (per_token * 8192)) as u64)
    );
    assert_eq!(o["largest_batch"], 4);
    // Four sequences: the context shares the same free bytes.
    let o = row(&["--context", "8192", "--batch", "4", "--reserve-gib", "60"]);
    assert_eq!(o["largest_context"], json!((free60 / 4 / per_token) as u64));
    // The decode ceiling: the datasheet's 3350 GB/s over the weights and the 8192 tokens' cache
    // read once per step, of the input embedding (128256 x 4096 at 2 bytes) only the one row
    // the sequence's token looks up.
    let o = row(&["--context", "8192"]);
    let c = &o["ceilings"];
    let table = 128_256 * 4096 * 2u128;
    let bytes = weights - table + 4096 * 2 + per_token * 8192;
    assert_eq!(bytes, 16_083_599_360);
    assert_eq!(c["decode_bytes_per_step_per_gpu"], json!(bytes as f64));
    assert_eq!(c["memory_bandwidth_gb_s"], json!(3350.0));
    assert!(close(
        c["decode_tokens_per_s"].as_f64().unwrap(),
        3350e9 / bytes as f64
    ));
    assert!(c["bound"].as_str().unwrap().contains("never a prediction"));
    assert!(
        c["bandwidth_source"]
            .as_str()
            .unwrap()
            .starts_with("datasheet (embedded): NVIDIA H100 SXM")
    );
    // Prefill: 2 FLOP per parameter + 4 x 32 heads x 128 x 32 layers x (8192 + 1) / 2 per token,
    // against the dense bfloat16 peak of 989.4 TFLOP/s.
    let flop = 2.0 * LLAMA_PARAMETERS as f64 + 4.0 * 32.0 * 128.0 * 32.0 * 8193.0 / 2.0;
    assert!(close(c["prefill_flop_per_token"].as_f64().unwrap(), flop));
    assert!(close(
        c["prefill_tokens_per_s"].as_f64().unwrap(),
        989.4e12 / flop
    ));
    assert_eq!(c["compute"], "bfloat16");
    // 42900 cents for 7 days at the ceiling, per million tokens.
    let per_mtok: f64 = c["decode_price_per_mtok_cents"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let want = 42_900.0 * 1e6 / (7.0 * 86_400.0 * 3350e9 / bytes as f64);
    assert!((per_mtok - want).abs() < 1e-4, "{per_mtok} vs {want}");
    // The text says the cap and what the ceilings are.
    let text = run_text(&[
        "fit",
        "--serve",
        "none",
        "--model",
        llama,
        "--context",
        "8192",
        "--gpu",
        "h100-sxm",
        "--max-gpus",
        "1",
        "--days",
        "7",
    ]);
    assert!(text.contains("131072 cap"), "{text}");
    assert!(
        text.contains("cap = the model's max_position_embeddings (131072)"),
        "{text}"
    );
    assert!(text.contains("never a prediction"), "{text}");
    assert!(
        text.contains(&format!("{:.1}", 3350e9 / bytes as f64)),
        "{text}"
    );
}

/// Issue 24, item 2: a probe of the CPU reference device is not a GPU figure; a GPU probe's
/// figures replace the datasheet's for its model and are named on its rows.
#[test]
fn a_cpu_probe_is_refused_and_a_gpu_probe_replaces_the_datasheet() {
    let dir = tempfile::tempdir().unwrap();
    let llama = models("llama-3.1-8b");
    let llama = llama.to_str().unwrap();
    let libs = StubDir::new();
    let cpu = dir.path().join("cpu.json");
    iteragpu(libs.path())
        .args([
            "probe",
            "--device",
            "cpu",
            "--seconds",
            "1",
            "--copy-bytes",
            "1MiB",
        ])
        .arg("--output")
        .arg(&cpu)
        .assert()
        .success();
    cargo_bin_cmd!("iteragpu")
        .args([
            "fit",
            "--serve",
            "none",
            "--model",
            llama,
            "--probe",
            cpu.to_str().unwrap(),
        ])
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("CPU reference device"))
        .stderr(predicate::str::contains("not a GPU figure"));
    // A stub H100 SXM's probe, its device copy and bfloat16 figures doctored.
    libs.driver(&["FULL", "WITH_V2", "MEMORY_BUDGET=(1UL<<40)"])
        .nvml()
        .cublas_with("", &["RECORD"], &["RECORD"]);
    let gpu = dir.path().join("gpu.json");
    iteragpu(libs.path())
        .env("STUB_NAMES", "NVIDIA H100 80GB HBM3")
        .env("STUB_EVENT_MS", "2.0")
        .args([
            "probe",
            "--device",
            "cuda:0",
            "--seconds",
            "2",
            "--copy-bytes",
            "1MiB",
            "--gemm-size",
            "64",
        ])
        .arg("--output")
        .arg(&gpu)
        .assert()
        .success();
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&gpu).unwrap()).unwrap();
    assert_eq!(doc["devices"][0]["datasheet"]["gpu"], "h100-sxm");
    for c in doc["devices"][0]["copies"].as_array_mut().unwrap() {
        if c["kind"] == "d2d" {
            c["gb_per_s"] = json!(1234.5);
        }
    }
    for g in doc["devices"][0]["gemms"].as_array_mut().unwrap() {
        if g["kind"] == "bfloat16" {
            g["tflops"] = json!(555.0);
        }
    }
    let doctored = dir.path().join("doctored.json");
    std::fs::write(&doctored, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = run_json(&[
        "fit",
        "--serve",
        "none",
        "--model",
        llama,
        "--context",
        "8192",
        "--max-gpus",
        "1",
        "--days",
        "7",
        "--probe",
        doctored.to_str().unwrap(),
    ]);
    assert_eq!(out["probe"]["gpu"], "h100-sxm");
    assert_eq!(out["probe"]["memory_bandwidth_gb_s"], json!(2.0 * 1234.5));
    let rows = out["options"].as_array().unwrap();
    let h100 = rows.iter().find(|o| o["gpu"] == "h100-sxm").unwrap();
    let c = &h100["ceilings"];
    assert_eq!(c["memory_bandwidth_gb_s"], json!(2469.0));
    let source = c["bandwidth_source"].as_str().unwrap();
    assert!(source.starts_with("probe "), "{source}");
    assert!(source.contains("doctored.json"), "{source}");
    // The weights less the input embedding's table but one row, and the 8192 tokens' cache.
    let bytes = (LLAMA_PARAMETERS * 2 - 128_256 * 4096 * 2 + 4096 * 2 + 131_072 * 8192) as f64;
    assert!(close(
        c["decode_tokens_per_s"].as_f64().unwrap(),
        2469e9 / bytes
    ));
    assert_eq!(c["dense_tflops"], json!(555.0));
    assert!(
        c["compute_source"]
            .as_str()
            .unwrap()
            .contains("measured bfloat16")
    );
    // Every other GPU keeps the datasheet.
    for o in rows
        .iter()
        .filter(|o| o["gpu"] != "h100-sxm" && o["fits"] == true)
    {
        assert!(
            o["ceilings"]["bandwidth_source"]
                .as_str()
                .unwrap()
                .starts_with("datasheet"),
            "{o}"
        );
    }
    let text = run_text(&[
        "fit",
        "--serve",
        "none",
        "--model",
        llama,
        "--context",
        "8192",
        "--max-gpus",
        "1",
        "--days",
        "7",
        "--all",
        "--probe",
        doctored.to_str().unwrap(),
    ]);
    let line = table_rows(&text)
        .into_iter()
        .find(|l| l.starts_with("h100-sxm "))
        .unwrap();
    assert!(line.contains(" probe "), "{line}");
    assert!(text.contains("ceilings from  probe "), "{text}");
}

/// Issue 24, items 3 and 4: Mixtral at 32K x 8 never runs a tensor-parallel degree of 3; a
/// package of 3 GPUs is priced as pipeline stages, tight rows are marked, filters hold.
#[test]
fn mixtral_at_32k_by_8_runs_only_layouts_its_heads_allow() {
    let mixtral = models("mixtral-8x7b-v0.1");
    let mixtral = mixtral.to_str().unwrap();
    let base = [
        "fit",
        "--serve",
        "none",
        "--model",
        mixtral,
        "--context",
        "32768",
        "--batch",
        "8",
        "--tight-gib",
        "2",
    ];
    let doc = run_json(&base);
    let options = doc["options"].as_array().unwrap();
    assert!(options.iter().any(|o| o["fits"] == true));
    for o in options {
        let gpus = o["total_gpus"].as_u64().unwrap();
        if o["fits"] == true {
            let tp = o["layout"]["tensor_parallel"].as_u64().unwrap();
            let pp = o["layout"]["pipeline_parallel"].as_u64().unwrap();
            // 32 heads, 8 KV heads: the degree divides 32 and divides 8 or is a multiple of it.
            assert!(32 % tp == 0 && (8 % tp == 0 || tp % 8 == 0), "{o}");
            assert_ne!(tp, 3, "{o}");
            assert_eq!(tp * pp, gpus, "{o}");
        }
        if gpus == 3 {
            assert_eq!(o["heads_divisible"], false);
            assert_eq!(o["layout"]["tensor_parallel"], 1, "{o}");
            assert_eq!(o["layout"]["stage_layers"], json!([11, 11, 10]), "{o}");
        }
        // Tight: fits with under 2 GiB of headroom.
        let headroom = o["headroom_bytes"].as_i64().unwrap();
        let tight = o["fits"] == true && headroom < 2 << 30;
        assert_eq!(o["tight"], json!(tight), "{o}");
        // AMD GPUs are said to be out of the native engine's reach.
        let amd = o["gpu"].as_str().unwrap().starts_with("mi3");
        assert_eq!(o["native_engine"], json!(!amd), "{o}");
        // The largest context at batch 8 never exceeds Mixtral's 32768 positions.
        if let Some(c) = o["largest_context"].as_u64() {
            assert!(c <= 32_768, "{o}");
        }
    }
    assert!(options.iter().any(|o| o["tight"] == true));
    let text = run_text(&base);
    assert!(
        !table_rows(&text)
            .iter()
            .any(|l| l.contains(" TP3 ") || l.contains("TP3 x")),
        "{text}"
    );
    let text = run_text(&[&base[..], &["--all"]].concat());
    let rows = table_rows(&text);
    assert!(rows.iter().any(|l| l.contains(" tight ")), "{text}");
    assert!(text.contains("tight = fits with under 2 GiB"), "{text}");
    assert!(rows.iter().any(|l| l.contains("ROCm EXAMPLE")), "{text}");
    assert!(text.contains("native engine is CUDA only"), "{text}");
    // --fits-only --limit 5: five rows, every one fitting.
    let text = run_text(&[&base[..], &["--fits-only", "--limit", "5"]].concat());
    let rows = table_rows(&text);
    assert_eq!(rows.len(), 5, "{text}");
    assert!(
        rows.iter()
            .all(|l| l.contains(" yes ") || l.contains(" tight ")),
        "{text}"
    );
}

#[test]
fn filters_and_orders_keep_the_rows_asked_for() {
    let llama = models("llama-3.1-8b");
    let llama = llama.to_str().unwrap();
    let doc = run_json(&[
        "fit",
        "--serve",
        "none",
        "--model",
        llama,
        "--context",
        "8192",
        "--gpu",
        "h100-sxm,l40s",
        "--sort",
        "headroom",
    ]);
    let options = doc["options"].as_array().unwrap();
    assert!(
        options
            .iter()
            .all(|o| o["gpu"] == "h100-sxm" || o["gpu"] == "l40s")
    );
    let head: Vec<i64> = options
        .iter()
        .filter(|o| o["fits"] == true)
        .map(|o| o["headroom_bytes"].as_i64().unwrap())
        .collect();
    assert!(head.windows(2).all(|w| w[0] >= w[1]), "{head:?}");
    let doc = run_json(&[
        "fit",
        "--serve",
        "none",
        "--model",
        llama,
        "--context",
        "8192",
        "--sort",
        "price-per-mtok",
        "--fits-only",
        "--limit",
        "7",
    ]);
    let options = doc["options"].as_array().unwrap();
    assert_eq!(options.len(), 7);
    assert_eq!(doc["selection"]["rows_shown"], 7);
    let per: Vec<f64> = options
        .iter()
        .map(|o| {
            o["ceilings"]["decode_price_per_mtok_cents"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(per.windows(2).all(|w| w[0] <= w[1]), "{per:?}");
    cargo_bin_cmd!("iteragpu")
        .args(["fit", "--serve", "none", "--model", llama, "--gpu", "h100"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--gpu `h100` is not a GPU of the catalogue",
        ))
        .stderr(predicate::str::contains("did you mean"));
}

/// The breakdown line adds up to its total: weights, scales, KV cache (issue 24: the scales
/// were in the total and missing from the line).
#[test]
fn the_breakdown_names_every_part_of_the_total() {
    let qwen = models("qwen2.5-7b");
    let args = [
        "fit",
        "--serve",
        "none",
        "--model",
        qwen.to_str().unwrap(),
        "--bits",
        "4",
        "--group-size",
        "128",
        "--context",
        "4096",
        "--max-gpus",
        "1",
    ];
    let e = run_json(&args)["estimate"].clone();
    let scales = e["quantisation_metadata_bytes"].as_u64().unwrap();
    // 28 layers x 4 KV heads x 128 x 2 (key and value) x 2 bytes x 4096 tokens.
    let kv = 2 * 28 * 4 * 128 * 2 * 4096u64;
    assert_eq!(e["kv_cache_bytes"], kv);
    assert!(scales > 0);
    // What a GPU holds at 4 bits: the packed weights (two parameters a byte, embeddings and
    // lm_head at 16 bits), their scales and the KV cache: the estimate's packed figure.
    let held = e["packed_model_bytes"].as_u64().unwrap();
    let weights = held - scales - kv;
    assert_eq!(e["packed_weight_bytes"], weights, "{e}");
    let text = run_text(&args);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("model memory"))
        .unwrap();
    assert!(
        line.contains(&format!("{} bytes (", weights + scales + kv)),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "weights {weights} + scales {scales} + KV cache {kv})"
        )),
        "{line}"
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
        (
            vec!["fit", "--parameters", "7B", "--bits", "16", "--limit", "0"],
            "positive whole number of rows",
        ),
        (
            vec![
                "fit",
                "--parameters",
                "7B",
                "--bits",
                "16",
                "--limit",
                "3",
                "--all",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "fit",
                "--parameters",
                "7B",
                "--bits",
                "16",
                "--sort",
                "cheap",
            ],
            "price-per-mtok",
        ),
        (
            vec![
                "fit",
                "--parameters",
                "7B",
                "--bits",
                "16",
                "--tight-gib",
                "-1",
            ],
            "--tight-gib",
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
    // Since issue 24 item 5 the packed figure is the checkpoint's layout: the decoder's linear
    // layers at 4 bits; the two 152064 x 3584 embeddings (untied), the RMSNorms (2 per layer and
    // a final one, 3584 each) and the q/k/v biases (3584 + 512 + 512 per layer) at 16 bits.
    let kept = 2 * 152_064 * 3584 + (2 * 28 + 1) * 3584 + 28 * (3584 + 512 + 512);
    assert_eq!(kept, 1_090_328_064u64);
    let packed = 7_615_616_512u64 - kept;
    assert_eq!(doc["packed_weight_bytes"], packed / 2 + kept * 2);
    // One 16-bit scale and one 4-bit zero point per group of 128 packed parameters.
    assert_eq!(
        doc["quantisation_metadata_bytes"],
        (packed / 128 * (16 + 4)).div_ceil(8)
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

/// Every key `fit --json` had keeps its place; the new ones are added beside them.
#[test]
fn fit_json_keeps_every_key_and_adds_the_new_ones() {
    let doc = run_json(&[
        "fit",
        "--serve",
        "none",
        "--model",
        models("llama-3.1-8b").to_str().unwrap(),
        "--context",
        "8192",
        "--max-gpus",
        "2",
    ]);
    for key in [
        "model",
        "architecture",
        "parameters",
        "active_parameters",
        "parameters_source",
        "assumptions",
        "estimate",
        "catalogue",
        "options",
        "datasheet",
        "probe",
        "selection",
    ] {
        assert!(doc.get(key).is_some(), "missing {key}");
    }
    for key in [
        "reserve_gib_per_gpu",
        "reserve_given",
        "split",
        "usable_memory",
        "model_bytes",
        "context",
        "batch",
        "max_gpus",
        "days",
        "notes",
        "layout_rule",
        "tight_headroom_gib",
        "kv_cache_per_gpu",
        "max_position_embeddings",
        "ceilings",
    ] {
        assert!(
            doc["assumptions"].get(key).is_some(),
            "missing assumptions.{key}"
        );
    }
    assert!(
        doc["assumptions"]["layout_rule"]
            .as_str()
            .unwrap()
            .contains("verify_with_parallel_config")
    );
    assert_eq!(doc["assumptions"]["max_position_embeddings"], 131_072);
    let o = &doc["options"][0];
    for key in [
        "gpu",
        "model",
        "lots",
        "total_gpus",
        "days",
        "per_gpu_bytes",
        "usable_bytes_per_gpu",
        "fits",
        "headroom_bytes",
        "heads_divisible",
        "total_price_cents",
        "price_per_gpu_day_cents",
        "currency",
        "example",
        "source",
        "layout",
        "layout_problem",
        "tight",
        "native_engine",
        "largest_context",
        "largest_context_limit",
        "largest_batch",
        "ceilings",
    ] {
        assert!(o.get(key).is_some(), "missing options[0].{key}");
    }
    for key in [
        "bound",
        "decode_tokens_per_s",
        "decode_tokens_per_s_per_sequence",
        "decode_bytes_per_step_per_gpu",
        "decode_experts_read_per_layer",
        "prefill_tokens_per_s",
        "prefill_flop_per_token",
        "memory_bandwidth_gb_s",
        "bandwidth_source",
        "compute",
        "dense_tflops",
        "compute_source",
        "decode_price_per_mtok_cents",
        "prefill_price_per_mtok_cents",
    ] {
        assert!(o["ceilings"].get(key).is_some(), "missing ceilings.{key}");
    }
    for key in [
        "tensor_parallel",
        "pipeline_parallel",
        "kv_heads_per_gpu",
        "kv_head_replicas",
        "stage_layers",
    ] {
        assert!(o["layout"].get(key).is_some(), "missing layout.{key}");
    }
}
