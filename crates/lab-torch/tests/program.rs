//! The torch engine's program run on a CPU-only torch through its test-only switch
//! (`--test-only-cpu`, which the binary never passes): the phase order, the document's fields
//! and the numerical check, with the allocator counters marked unavailable. The interpreter is
//! `ITERAGPU_TEST_TORCH_PYTHON`, else the repository's `.cache/torch/venv` (which `.ci/run`
//! installs); without either the tests say so and pass outside CI, and fail under CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn torch_python() -> Option<PathBuf> {
    let explicit = std::env::var_os("ITERAGPU_TEST_TORCH_PYTHON").map(PathBuf::from);
    let cached = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/torch/venv/bin/python");
    let found = explicit.or_else(|| cached.is_file().then_some(cached));
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the torch engine's program: .ci/run installs torch into .cache/torch/venv"
        );
        eprintln!("no torch for the engine's program (set ITERAGPU_TEST_TORCH_PYTHON): not run");
    }
    found
}

fn program(python: &Path, args: &[&str]) -> Output {
    Command::new(python)
        .arg("-c")
        .arg(lab_torch::PROGRAM)
        .args(args)
        .output()
        .expect("python runs")
}

fn document(python: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--device", "cuda:0", "--test-only-cpu", "--output", "-"];
    all.extend_from_slice(args);
    let out = program(python, &all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

const COUNTERS: [&str; 9] = [
    "baseline_allocated_bytes",
    "baseline_reserved_bytes",
    "end_allocated_bytes",
    "end_reserved_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "baseline_requested_bytes",
    "end_requested_bytes",
    "peak_requested_bytes",
];

#[test]
fn phases_fields_and_check_on_a_cpu_torch() {
    let Some(python) = torch_python() else { return };
    for dtype in ["float32", "float16", "bfloat16"] {
        let doc = document(
            &python,
            &[
                "--batch",
                "2",
                "--context",
                "5",
                "--width",
                "24",
                "--dtype",
                dtype,
                "--warmup",
                "2",
                "--repeats",
                "3",
                "--seed",
                "7",
            ],
        );
        let phases: Vec<(String, u64)> = doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["phase"].as_str().unwrap().to_string(),
                    r["index"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: Vec<(String, u64)> = [
            ("model_load", 0),
            ("inputs", 0),
            ("cold_forward", 0),
            ("warmup", 0),
            ("warm_forward", 0),
            ("warm_forward", 1),
            ("warm_forward", 2),
        ]
        .iter()
        .map(|&(p, i)| (p.to_string(), i))
        .collect();
        assert_eq!(phases, want, "{dtype}");
        for row in doc["phases"].as_array().unwrap() {
            assert!(row["wall_seconds"].as_f64().unwrap() > 0.0);
            assert!(
                row["device_seconds"].is_null(),
                "no device clock on the CPU"
            );
            for c in COUNTERS {
                assert!(row["memory"][c].is_null(), "{c} is unavailable on the CPU");
            }
        }
        assert!(
            doc["engine"]["counters"]
                .as_str()
                .unwrap()
                .starts_with("unavailable")
        );
        assert_eq!(doc["engine"]["name"], "torch");
        assert!(doc["engine"]["version"].as_str().unwrap().starts_with('2'));
        // Every knob of CUDA and ROCm torch (and cuBLAS) that changes counters, paths or float32
        // math is recorded (null: unset), and what the products ran with is read back from torch.
        let knobs = doc["engine"]["allocator_knobs"].as_object().unwrap();
        for k in [
            "TORCH_BLAS_PREFER_CUBLASLT",
            "PYTORCH_TUNABLEOP_ENABLED",
            "HIPBLASLT_WORKSPACE_SIZE",
            "HIPBLAS_WORKSPACE_CONFIG",
            "ROCBLAS_WORKSPACE_CONFIG",
            "TORCH_BLAS_PREFER_HIPBLASLT",
            "PYTORCH_HIP_ALLOC_CONF",
            "NVIDIA_TF32_OVERRIDE",
            "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
        ] {
            assert!(knobs.contains_key(k), "{k} not recorded: {knobs:?}");
        }
        let matmul = &doc["engine"]["matmul"];
        assert_eq!(matmul["allow_tf32"], false, "{matmul}");
        assert_eq!(matmul["float32_matmul_precision"], "highest", "{matmul}");
        assert_eq!(matmul["float32_math"], "ieee", "{matmul}");
        assert_eq!(doc["environment"]["backend"], "torch-cpu-test-only");
        assert_eq!(doc["environment"]["reference_device"], true);
        // 10 rows: the check samples 8 of them, first and last included.
        let check = &doc["check"];
        assert_eq!(check["rows"], serde_json::json!([0, 1, 2, 3, 5, 6, 7, 9]));
        let bound = if dtype == "float32" { 1e-5 } else { 1e-2 };
        assert_eq!(check["bound"].as_f64(), Some(bound));
        assert!(
            check["relative_error"].as_f64().unwrap() <= bound,
            "{check}"
        );
        assert_eq!(check["passed"], true);
        assert_eq!(doc["complete"], true);
        let m = &doc["synthetic_model"];
        assert_eq!(m["parameter_count"], 24 * 96 + 96 + 96 * 24 + 24);
        assert_eq!(m["forward_flops"], 4 * 10 * 24 * 96);
        assert_eq!(doc["configuration"]["hidden"], 96);
        assert_eq!(doc["configuration"]["dtype"], dtype);

        // Everything but the counters is what iteragpu's readers accept: with the counters
        // filled in, the document reads back as a measurement document of the torch engine.
        let mut filled = doc.clone();
        for row in filled["phases"].as_array_mut().unwrap() {
            for c in COUNTERS {
                row["memory"][c] = 0.into();
            }
        }
        let parsed = lab_torch::parse(&serde_json::to_vec(&filled).unwrap()).expect("it reads");
        assert_eq!(parsed.phases.len(), 7);
        assert!(parsed.check.as_ref().unwrap().passed);
        assert_eq!(parsed.engine.as_ref().unwrap().name, "torch");
        // The binary writes the document it read back: the matmul record survives it.
        let rewritten = serde_json::to_value(&parsed).unwrap();
        assert_eq!(rewritten["engine"]["matmul"], doc["engine"]["matmul"]);
    }
}

/// With --allow-tf32 torch runs float32 products with TF32, and the document says so from torch
/// itself (`engine.matmul`, `configuration.math_mode`), not from the option.
#[test]
fn the_tf32_setting_is_read_back_from_torch() {
    let Some(python) = torch_python() else { return };
    let doc = document(&python, &["--width", "16", "--allow-tf32"]);
    let matmul = &doc["engine"]["matmul"];
    assert_eq!(matmul["allow_tf32"], true, "{matmul}");
    assert_eq!(matmul["float32_matmul_precision"], "high", "{matmul}");
    assert_eq!(matmul["float32_math"], "tf32", "{matmul}");
    assert_eq!(
        doc["configuration"]["math_mode"],
        "float32 products may use TF32 (--allow-tf32)"
    );
    let strict = document(&python, &["--width", "16"]);
    assert_eq!(
        strict["configuration"]["math_mode"],
        "float32 products in strict float32 (no TF32)"
    );
}

#[test]
fn the_same_seed_gives_the_same_values_and_another_seed_others() {
    let Some(python) = torch_python() else { return };
    let run = |seed: &str| {
        let d = document(&python, &["--width", "16", "--seed", seed]);
        d["check"]["max_abs_error"].as_f64().unwrap()
    };
    // float64 recomputation of float32 values: the error is a property of the values.
    assert_eq!(run("3"), run("3"));
    assert_ne!(run("3"), run("4"));
}

#[test]
fn refusals_write_nothing_and_name_the_value() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    let path = out.to_str().unwrap();
    // This machine's torch sees no GPU: refused, never run on the CPU.
    let r = program(&python, &["--device", "cuda:0", "--output", path]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("sees no GPU") && err.contains("never falls back to the CPU"),
        "{err}"
    );
    let r = program(&python, &["--device", "cpu", "--output", path]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("--device 'cpu'"));
    let r = program(
        &python,
        &["--device", "cuda:0", "--batch", "0", "--output", path],
    );
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("--batch 0: must be at least 1"));
    assert!(!out.exists());
    std::fs::write(&out, "kept").unwrap();
    let r = program(
        &python,
        &["--device", "cuda:0", "--test-only-cpu", "--output", path],
    );
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("already exists"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "kept");
    // Written to a file, the document is whole and the folder holds no temporary file.
    let file = dir.path().join("cpu.json");
    let r = program(
        &python,
        &[
            "--device",
            "cuda:0",
            "--test-only-cpu",
            "--output",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["complete"], true);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

/// The notebook carries the program, generated from this crate's copy
/// (`scripts/sync-notebook-engine.py`), so that it measures through PyTorch without the binary.
#[test]
fn the_notebook_carries_the_engine_program() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../notebooks/iteragpu-lab.ipynb");
    let nb: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let cells: Vec<&Value> = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "engine-program")
        .collect();
    assert_eq!(cells.len(), 1, "one engine-program cell");
    let source: String = cells[0]["source"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let start = source
        .find("ENGINE_PROGRAM = r'''")
        .expect("the program's string")
        + 21;
    let end = source[start..].find("'''").expect("its end") + start;
    assert!(
        &source[start..end] == lab_torch::PROGRAM,
        "the notebook's engine-program cell is not crates/lab-torch/src/engine.py: run \
         scripts/sync-notebook-engine.py"
    );
    assert!(source[end..].contains("exec(compile(ENGINE_PROGRAM"));
}
