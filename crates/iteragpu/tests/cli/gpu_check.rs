//! `scripts/gpu-check.sh` and its judge, `scripts/gpu_check_report.py`, without a GPU: the
//! rehearsal on the CPU reference device (with its plan), the fail-fast `--version`, and a
//! verdict that fails on one wrong counter, on a workspace PyTorch was observed to allocate that
//! iteragpu's policy does not have, on two different cuBLAS files and on a torch knob left set.
//! The judge is fed doctored documents: no torch is needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn binary() -> PathBuf {
    assert_cmd::cargo::cargo_bin("iteragpu")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_gpu_check_rehearses_on_the_cpu_and_judges_every_case() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-check.sh"))
        .arg(out_dir.path())
        .env("GPU_CHECK_REHEARSAL", "1")
        .env("ITERAGPU", binary())
        .env_remove("DEVICE")
        .env_remove("GPU_CHECK_BUDGET_S")
        .env_remove("GPU_CHECK_PROBE_S")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut files: Vec<String> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "gpu-check-json.tar.gz",
            "gpu-check.log",
            "nvidia-smi.txt",
            "summary.txt"
        ]
    );
    let summary = std::fs::read_to_string(out_dir.path().join("summary.txt")).unwrap();
    assert!(
        summary.contains("verdict: all 14 case(s) SAME"),
        "{summary}"
    );
    // One case per dtype with batch x context = 1 (torch's non-Lt path on a GPU).
    for (name, dtype) in [("f32", "float32"), ("f16", "float16"), ("bf16", "bfloat16")] {
        assert!(
            summary.contains(&format!("== {name}-row: {dtype} [1 x 1 x 64]")),
            "{summary}"
        );
    }
    assert!(summary.contains("== tf32-medium: float32"), "{summary}");
    assert!(
        summary.contains("cold_forward[0]  peak_reserved_bytes"),
        "{summary}"
    );
    // The probe ran within the budget: the CPU's host copies, labelled, in the summary.
    assert!(
        summary.contains("CPU REFERENCE DEVICE: host copies only, not a GPU figure"),
        "{summary}"
    );
    assert!(summary.contains("   cpu      host_memcpy "), "{summary}");
    assert!(summary.contains("   probe complete"), "{summary}");
    let log = std::fs::read_to_string(out_dir.path().join("gpu-check.log")).unwrap();
    // The plan comes first: every step with an estimate and its share of the budget, stated as
    // an estimate; then the GPU run's plan within the 360 s budget of the 420 s call.
    let plan_at = log
        .find("plan: an ESTIMATE per step from the shapes")
        .expect(&log);
    assert!(
        plan_at < log.find("] the binary runs here").unwrap(),
        "{log}"
    );
    assert!(
        log.contains("not a measurement; budget 360 s within the call's 420 s"),
        "{log}"
    );
    for row in [
        "   environment (--json, once)",
        "   f32-row: iteragpu measure + plan",
        "   ptx-medium: iteragpu measure + plan",
        "   probe (2 s of probing)",
        "   pytorch and its cuBLAS (one import torch)        skipped (rehearsal)",
        "   f32-large: pytorch eager",
        "   probe (30 s of probing)",
        "   total (estimate)",
    ] {
        assert!(log.contains(row), "{row:?} not in {log}");
    }
    assert!(log.contains("the GPU run's plan"), "{log}");
    let shares = log
        .lines()
        .filter(|l| l.starts_with("   ") && l.trim_end().ends_with('%'))
        .count();
    assert!(shares > 2 * 14, "{log}");
    // One start-up per tool and step: `environment` once, in JSON, its text derived.
    assert_eq!(log.matches("] environment").count(), 1, "{log}");
    assert!(
        log.contains("device cpu: backend cpu-reference, usable: yes"),
        "{log}"
    );
    assert!(
        log.contains("torch knobs found: none set; cleared for every tool (PYTORCH_ALLOC_CONF,"),
        "{log}"
    );
    assert!(log.contains("probe --device cpu --seconds 2"), "{log}");
    assert!(log.contains("refused with exit 2, as expected"), "{log}");
    assert!(log.contains("gpu-check: all steps passed"), "{log}");
}

#[test]
fn a_binary_that_cannot_run_here_stops_the_check_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("iteragpu");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"iteragpu: /lib/x86_64-linux-gnu/libc.so.6: version \\`GLIBC_2.39' not found\" >&2\nexit 1\n",
    )
    .unwrap();
    let chmod = Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    assert!(chmod.success());
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-check.sh"))
        .arg(dir.path().join("out"))
        .env("ITERAGPU", &fake)
        .env("DEVICE", "cuda:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("GLIBC_2.39' not found"), "{all}");
    assert!(all.contains("does not run on this machine"), "{all}");
    assert!(!all.contains("] environment"), "nothing else ran: {all}");
}

/// A work folder as gpu-check leaves it for one case, with the iteragpu document standing in for
/// PyTorch's too (their counters are then the same by construction).
fn case_folder() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let shape = [
        "--batch",
        "2",
        "--context",
        "8",
        "--width",
        "32",
        "--dtype",
        "float16",
        "--warmup",
        "2",
        "--repeats",
        "2",
    ];
    let run = Command::new(binary())
        .args(["measure", "--device", "cpu"])
        .args(shape)
        .arg("--output")
        .arg(work.path().join("c.json"))
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run));
    let plan = Command::new(binary())
        .args(["measure", "--plan", "--device", "cpu", "--json"])
        .args(shape)
        .output()
        .unwrap();
    assert!(plan.status.success(), "{}", text(&plan));
    std::fs::write(work.path().join("c.plan.json"), &plan.stdout).unwrap();
    std::fs::copy(work.path().join("c.json"), work.path().join("c.torch.json")).unwrap();
    std::fs::write(
        work.path().join("c.free.json"),
        r#"{"ours": null, "torch": null}"#,
    )
    .unwrap();
    // Both tools ran with the same cuBLAS files: iteragpu's environment report names them as the
    // CUDA device does, PyTorch's as /proc/self/maps shows them.
    edit(&work.path().join("c.json"), |v| {
        v["environment"]["details"]["libraries"] = serde_json::json!({
            "cublas": {"library": CUBLAS, "version": "13.1.0"},
            "cublaslt": {"library": CUBLASLT, "version": "13.1.0"},
            "found_via": "loader path",
        });
    });
    edit(&work.path().join("c.torch.json"), |v| {
        as_pytorch(v, &[]);
    });
    work
}

const CUBLAS: &str =
    "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13";
const CUBLASLT: &str =
    "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13";
const MIB: u64 = 1_048_576;

/// Turns a copy of an iteragpu document into what `measure --engine torch` writes: torch 2.11.0,
/// the cuBLAS files it mapped, the knobs it ran with (none) and the workspace blocks observed
/// after the cold pass (cuBLAS first, then cuBLASLt), in its `engine` section.
fn as_pytorch(v: &mut Value, workspaces: &[u64]) {
    let details = &mut v["environment"]["details"];
    details["torch"] = "2.11.0+cu130".into();
    details["libraries"] = serde_json::json!({
        "cublas": {"library": CUBLAS, "version": "13.1.0"},
        "cublaslt": {"library": CUBLASLT, "version": "13.1.0"},
        "found_via": "torch's own loading; the files mapped in /proc/self/maps after the first product",
        "files": [CUBLASLT, CUBLAS],
    });
    let knobs = serde_json::json!({
        "PYTORCH_ALLOC_CONF": null, "PYTORCH_CUDA_ALLOC_CONF": null, "DISABLE_ADDMM_CUDA_LT": null,
        "PYTORCH_NO_CUDA_MEMORY_CACHING": null, "CUBLAS_WORKSPACE_CONFIG": null,
        "CUBLASLT_WORKSPACE_SIZE": null, "TORCH_CUBLASLT_UNIFIED_WORKSPACE": null,
        "TORCH_CUBLAS_WORKSPACE_CACHE": null,
    });
    // The matmul settings torch reported after the run (strict float32: no TF32).
    let matmul = serde_json::json!({
        "allow_tf32": false, "float32_matmul_precision": "highest", "fp32_precision": "ieee",
        "preferred_blas_library": "_BlasBackend.Cublas", "float32_math": "ieee",
    });
    v["engine"] = serde_json::json!({
        "name": "torch", "version": "2.11.0+cu130", "build": "CUDA 13.0",
        "python": "/opt/torch/.venv/bin/python3", "blas_libraries": [CUBLASLT, CUBLAS],
        "allocator_knobs": knobs, "matmul": matmul, "mirrored_torch": "2.11.0",
        "counters": "torch.cuda.memory_stats", "computed_policy": null,
    });
    observe(v, workspaces);
}

/// Sets the workspace blocks PyTorch was observed to hold after its cold pass, in allocation
/// order: the cuBLAS workspace, then the cuBLASLt one (as the torch engine names them).
fn observe(v: &mut Value, workspaces: &[u64]) {
    let roles = ["cuBLAS workspace", "cuBLASLt workspace"];
    let named: Vec<(&str, u64)> = workspaces
        .iter()
        .enumerate()
        .map(|(i, &size)| (roles.get(i).copied().unwrap_or("unknown"), size))
        .collect();
    observe_named(v, &named);
}

/// Sets the observed workspace blocks, each named, in allocation order.
fn observe_named(v: &mut Value, named: &[(&str, u64)]) {
    let blocks: Vec<Value> = named
        .iter()
        .enumerate()
        .map(|(i, &(role, size))| {
            serde_json::json!({"address": 0x7f00_0000_0000_u64 + (i as u64) * 64 * MIB,
                "size": size, "requested_size": size, "segment_type": "large", "order": i,
                "role": role})
        })
        .collect();
    let workspaces: Vec<u64> = named.iter().map(|&(_, size)| size).collect();
    let policy = &mut v["configuration"]["memory_policy"];
    policy["mirrors"] = "torch 2.11.0+cu130".into();
    policy["cublas_workspace_bytes"] = workspaces.first().copied().unwrap_or(0).into();
    policy["cublaslt_workspace_bytes"] = workspaces.get(1).copied().unwrap_or(0).into();
    policy["cublaslt_workspace_unified"] = false.into();
    v["engine"]["observed_workspaces"] = blocks.into();
    v["engine"]["observation_error"] = Value::Null;
}

/// iteragpu's policy as the CUDA device states it on compute capability 9.0.
fn cuda_policy(v: &mut Value) {
    let policy = &mut v["configuration"]["memory_policy"];
    policy["cublas_workspace_bytes"] = (32 * MIB).into();
    policy["cublaslt_workspace_bytes"] = MIB.into();
    policy["cublaslt_workspace_unified"] = false.into();
}

fn judge(work: &Path) -> Output {
    judge_case(work, "c")
}

fn judge_case(work: &Path, case: &str) -> Output {
    Command::new("python3")
        .arg(repo().join("scripts/gpu_check_report.py"))
        .arg(work)
        .args(["--require-peer", case])
        .output()
        .expect("python3 must be installed to judge the GPU check")
}

fn edit(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    change(&mut v);
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn the_judge_fails_on_one_wrong_counter_and_names_it() {
    let work = case_folder();
    let same = judge(work.path());
    assert!(same.status.success(), "{}", text(&same));
    assert!(text(&same).contains("verdict: all 1 case(s) SAME"));

    // PyTorch reserved one more 2 MiB segment at the peak of the cold pass.
    edit(&work.path().join("c.torch.json"), |v| {
        let peak = &mut v["phases"][2]["memory"]["peak_reserved_bytes"];
        *peak = (peak.as_u64().unwrap() + 2_097_152).into();
    });
    let wrong = judge(work.path());
    let out = text(&wrong);
    assert_eq!(wrong.status.code(), Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("cold_forward[0]") && l.contains("peak_reserved_bytes"))
        .unwrap();
    assert!(
        line.contains("-2097152") && line.ends_with("DIFFERENT"),
        "{line}"
    );
    assert!(out.contains("FAILED c: 1 counter(s) differ"), "{out}");
    assert_eq!(
        out.matches("DIFFERENT").count(),
        1,
        "only that counter: {out}"
    );
}

#[test]
fn the_judge_fails_on_a_failed_check_a_missing_peer_or_a_different_policy() {
    let work = case_folder();
    edit(&work.path().join("c.torch.json"), |v| {
        v["check"]["passed"] = false.into();
    });
    let out = judge(work.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("PyTorch check failed"),
        "{}",
        text(&out)
    );

    // A different policy: PyTorch's allocator held a 32 MiB workspace the CPU policy lacks.
    let work = case_folder();
    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB])
    });
    let out = judge(work.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "memory_policy.cublas_workspace_bytes: iteragpu 0, pytorch observed 33554432"
        ),
        "{}",
        text(&out)
    );

    let work = case_folder();
    std::fs::remove_file(work.path().join("c.torch.json")).unwrap();
    let out = judge(work.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no PyTorch document"), "{}", text(&out));
}

#[test]
fn the_judge_holds_each_case_to_its_expectations() {
    let work = case_folder();
    let met = judge_case(work.path(), "c|expect=allow_tf32:false");
    assert!(met.status.success(), "{}", text(&met));
    assert!(
        text(&met).contains("expected allow_tf32 false: iteragpu false  ok"),
        "{}",
        text(&met)
    );
    assert!(
        text(&met).contains("expected allow_tf32 false: PyTorch ran with false  ok"),
        "{}",
        text(&met)
    );
    // The CPU reference loads no kernels: a case that expects the PTX JIT fails.
    let unmet = judge_case(work.path(), "c|expect=kernel_form:ptx-jit");
    assert_eq!(unmet.status.code(), Some(1), "{}", text(&unmet));
    assert!(
        text(&unmet).contains("kernel_form is None, expected ptx-jit"),
        "{}",
        text(&unmet)
    );
}

/// The judge prints every probe figure against the datasheet as the document has it (a stub
/// H200 pair's probe), without changing the verdict.
#[test]
fn the_judge_prints_the_probes_percentages_of_the_datasheet() {
    use crate::stubs::{StubDir, iteragpu};
    let work = case_folder();
    let libs = StubDir::new();
    libs.driver(&["FULL", "WITH_V2", "MEMORY_BUDGET=(1UL<<40)"])
        .nvml()
        .cublas_with("", &["RECORD"], &["RECORD"]);
    let probe = work.path().join("probe.json");
    iteragpu(libs.path())
        .env("STUB_DEVICE_COUNT", "2")
        .env("STUB_NAMES", "NVIDIA H200,NVIDIA H200")
        .env("STUB_EVENT_MS", "1.0,4.0")
        .env("STUB_NVML_PCIE_MAX", "5x16")
        .args(["probe", "--device", "all", "--seconds", "2"])
        .args(["--copy-bytes", "1MiB", "--gemm-size", "64", "--output"])
        .arg(&probe)
        .assert()
        .success();
    let doc: Value = serde_json::from_slice(&std::fs::read(&probe).unwrap()).unwrap();
    let out = judge(work.path());
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("== probe all: 2.0 s per GPU"), "{printed}");
    let mut judged = 0;
    for d in doc["devices"].as_array().unwrap() {
        for f in d["copies"].as_array().unwrap() {
            if let Some(r) = f["reference"].as_object() {
                let want = format!(
                    "   {:<8} {:<30} {:>9.1} GB/s {:>9.1} GB/s {:>7.1}%",
                    d["device"].as_str().unwrap(),
                    f["kind"].as_str().unwrap(),
                    f["gb_per_s"].as_f64().unwrap(),
                    r["value"].as_f64().unwrap(),
                    r["percent"].as_f64().unwrap()
                );
                assert!(printed.contains(&want), "{want:?} not in {printed}");
                judged += 1;
            }
        }
        let bf16 = d["gemms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["kind"] == "bfloat16")
            .unwrap();
        let pct = format!("{:.1}%", bf16["reference"]["percent"].as_f64().unwrap());
        let line = printed
            .lines()
            .find(|l| l.contains(d["device"].as_str().unwrap()) && l.contains("bfloat16 64x64x64"))
            .unwrap_or_else(|| panic!("no bfloat16 line in {printed}"));
        assert!(line.contains(&pct) && line.contains("TF/s"), "{line}");
    }
    assert_eq!(judged, 6, "{printed}");
    assert!(
        printed.contains("   WARNING lot_outlier: cuda:1"),
        "{printed}"
    );
    assert!(printed.contains("verdict: all 1 case(s) SAME"), "{printed}");
}

/// The policy is judged against what PyTorch's allocator was observed to hold, never against a
/// policy it computed: a planted difference (a torch that shares one workspace, as upstream main
/// does since #175879, so no separate 1 MiB cuBLASLt block) fails the case and names it; the same
/// blocks pass; a document without the observation fails.
#[test]
fn the_judge_fails_on_an_observed_workspace_that_differs_from_the_policy() {
    let work = case_folder();
    edit(&work.path().join("c.json"), cuda_policy);
    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB, MIB]);
        // What the torch side computed is for reading only: a wrong one changes nothing.
        v["configuration"]["memory_policy"]["computed"] =
            serde_json::json!({"label": "computed", "blocks": [1, 2, 3]});
    });
    let same = judge(work.path());
    let printed = text(&same);
    assert!(same.status.success(), "{printed}");
    assert!(
        printed.contains(
            "workspaces: iteragpu's memory_policy cuBLAS 33554432 + cuBLASLt 1048576 B; \
             PyTorch observed cuBLAS 33554432 + cuBLASLt 1048576 B after the cold pass  same"
        ),
        "{printed}"
    );

    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB])
    });
    let planted = judge(work.path());
    let printed = text(&planted);
    assert_eq!(planted.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains(
            "memory_policy.cublaslt_workspace_bytes: iteragpu 1048576, pytorch observed 0"
        ),
        "{printed}"
    );
    assert!(
        printed.contains(
            "FAILED c: workspaces differ: iteragpu's memory_policy cuBLAS 33554432 + cuBLASLt \
             1048576, PyTorch observed cuBLAS 33554432"
        ),
        "{printed}"
    );
    assert_eq!(
        printed.matches("DIFFERENT").count(),
        1,
        "only the workspaces: {printed}"
    );

    // batch x context = 1: no Linear takes the cuBLASLt path, so the policy allocates no
    // cuBLASLt block (its size is still what the matmuls would be told), as torch did not.
    edit(&work.path().join("c.json"), |v| {
        v["configuration"]["memory_policy"]["linear_paths"] = serde_json::json!([
            {"layer": "linear1", "path": "bias_copy_then_cublas_gemm", "reason": "mat1 [1, 32]"},
            {"layer": "linear2", "path": "bias_copy_then_cublas_gemm", "reason": "mat1 [1, 128]"},
        ]);
    });
    let one_row = judge(work.path());
    let printed = text(&one_row);
    assert!(one_row.status.success(), "{printed}");
    assert!(
        printed.contains(
            "workspaces: iteragpu's memory_policy cuBLAS 33554432 B (no cuBLASLt path: linear1 \
             bias_copy_then_cublas_gemm, linear2 bias_copy_then_cublas_gemm); PyTorch observed \
             cuBLAS 33554432 B after the cold pass  same"
        ),
        "{printed}"
    );
    // ...and a torch that allocated the cuBLASLt block there anyway differs.
    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB, MIB])
    });
    let lt_anyway = judge(work.path());
    assert_eq!(lt_anyway.status.code(), Some(1), "{}", text(&lt_anyway));
    assert!(
        text(&lt_anyway).contains(
            "memory_policy.cublaslt_workspace_bytes: iteragpu 0, pytorch observed 1048576"
        ),
        "{}",
        text(&lt_anyway)
    );

    // Nothing observed (the snapshot could not be read): not the same, and said why.
    edit(&work.path().join("c.torch.json"), |v| {
        v["engine"]["observed_workspaces"] = Value::Null;
        v["engine"]["observation_error"] = "reading the allocator's snapshot failed: boom".into();
    });
    let unseen = judge(work.path());
    assert_eq!(unseen.status.code(), Some(1), "{}", text(&unseen));
    assert!(
        text(&unseen).contains(
            "PyTorch's workspaces were not observed (reading the allocator's snapshot failed: boom)"
        ),
        "{}",
        text(&unseen)
    );
}

/// Both tools must run with the same cuBLAS and cuBLASLt files (resolved paths: a link and its
/// target are the same file); two different files fail the case, naming both.
#[test]
fn the_judge_fails_on_two_different_cublas_files_and_names_both() {
    let work = case_folder();
    // iteragpu reports the link it opened, PyTorch the file /proc/self/maps shows: the same.
    let lib = work.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::fs::write(lib.join("libcublasLt.so.13.1.0.3"), "").unwrap();
    std::os::unix::fs::symlink("libcublasLt.so.13.1.0.3", lib.join("libcublasLt.so.13")).unwrap();
    let link = lib.join("libcublasLt.so.13").display().to_string();
    let target = lib.join("libcublasLt.so.13.1.0.3").display().to_string();
    edit(&work.path().join("c.json"), |v| {
        v["environment"]["details"]["libraries"]["cublaslt"]["library"] = link.clone().into();
    });
    edit(&work.path().join("c.torch.json"), |v| {
        v["environment"]["details"]["libraries"]["cublaslt"]["library"] = target.clone().into();
        v["environment"]["details"]["libraries"]["files"] = serde_json::json!([target, CUBLAS]);
    });
    let same = judge(work.path());
    let printed = text(&same);
    assert!(same.status.success(), "{printed}");
    assert!(
        printed.contains(&format!(
            "cuBLASLt file: iteragpu {link} ({target}), pytorch {target}  same"
        )),
        "{printed}"
    );
    assert!(
        printed.contains(&format!(
            "cuBLAS file: iteragpu {CUBLAS}, pytorch {CUBLAS}  same"
        )),
        "{printed}"
    );

    // iteragpu took the toolkit's cuBLAS, PyTorch its wheel's.
    let toolkit = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcublas.so.13.0.0.19";
    edit(&work.path().join("c.json"), |v| {
        v["environment"]["details"]["libraries"]["cublas"]["library"] = toolkit.into();
    });
    let different = judge(work.path());
    let printed = text(&different);
    assert_eq!(different.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains(&format!(
            "cuBLAS file: iteragpu {toolkit}, pytorch {CUBLAS}  DIFFERENT"
        )),
        "{printed}"
    );
    assert!(
        printed.contains(&format!(
            "FAILED c: different cuBLAS files: iteragpu {toolkit}, PyTorch {CUBLAS}"
        )),
        "{printed}"
    );

    // A document that does not say which file it ran with fails too.
    edit(&work.path().join("c.torch.json"), |v| {
        v["environment"]["details"]["libraries"] = Value::Null;
    });
    let unrecorded = judge(work.path());
    assert_eq!(unrecorded.status.code(), Some(1), "{}", text(&unrecorded));
    assert!(
        text(&unrecorded).contains("cuBLAS file not recorded by PyTorch"),
        "{}",
        text(&unrecorded)
    );

    // gpu-check's environment step holds iteragpu's report to the files torch mapped.
    let env = work.path().join("environment.json");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(work.path().join("c.json")).unwrap()).unwrap();
    std::fs::write(&env, serde_json::to_vec(&doc["environment"]).unwrap()).unwrap();
    let check = |files: &[&str]| {
        Command::new("python3")
            .arg(repo().join("scripts/gpu_check_report.py"))
            .arg("--environment")
            .arg(&env)
            .args(files)
            .output()
            .unwrap()
    };
    let ok = check(&[&target, toolkit]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(
        text(&ok).contains("  cuBLAS: the same file as torch's"),
        "{}",
        text(&ok)
    );
    let bad = check(&[&target, CUBLAS]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains(&format!(
            "  cuBLAS: DIFFERENT files: iteragpu {toolkit}, torch {CUBLAS}"
        )),
        "{}",
        text(&bad)
    );
}

/// A torch other than 2.11.0 fails the case, naming its version and the one iteragpu mirrors
/// (its counters are still compared); so do a knob PyTorch ran with, and a knob gpu-check
/// cleared that the PyTorch document does not record.
#[test]
fn the_judge_fails_on_another_torch_and_on_a_knob_left_set() {
    let work = case_folder();
    for (version, why) in [
        ("2.12.0+cu130", "2.12.0+cu130"),
        ("2.11.1+cu130", "2.11.1+cu130"),
        ("2.10.0+rocm7.0", "2.10.0+rocm7.0"),
        ("", ""),
    ] {
        edit(&work.path().join("c.torch.json"), |v| {
            v["engine"]["version"] = if version.is_empty() {
                Value::Null
            } else {
                version.into()
            };
        });
        let other = judge(work.path());
        let printed = text(&other);
        assert_eq!(other.status.code(), Some(1), "{printed}");
        let who = if why.is_empty() { "unknown" } else { why };
        assert!(
            printed.contains(&format!(
                "PyTorch is torch {who}; iteragpu mirrors torch 2.11 (2.11.0)  DIFFERENT"
            )),
            "{printed}"
        );
        assert!(
            printed.contains(&format!(
                "FAILED c: PyTorch is torch {who}, not 2.11.0, the torch iteragpu mirrors"
            )),
            "{printed}"
        );
        // Its counters were still compared and printed, each the same.
        assert!(
            printed.contains("cold_forward[0]  peak_reserved_bytes"),
            "{printed}"
        );
    }
    edit(&work.path().join("c.torch.json"), |v| {
        v["engine"]["version"] = "2.11.0+cu130".into();
    });
    let mirrored = judge(work.path());
    assert!(mirrored.status.success(), "{}", text(&mirrored));

    // gpu-check cleared a knob the document does not record.
    std::fs::write(
        work.path().join("torch-knobs.json"),
        r#"{"DISABLE_ADDMM_CUDA_LT": null, "TORCH_BLAS_PREFER_CUBLASLT": null}"#,
    )
    .unwrap();
    let unrecorded = judge(work.path());
    assert_eq!(unrecorded.status.code(), Some(1), "{}", text(&unrecorded));
    assert!(
        text(&unrecorded)
            .contains("FAILED c: torch knobs not recorded: TORCH_BLAS_PREFER_CUBLASLT"),
        "{}",
        text(&unrecorded)
    );
    edit(&work.path().join("c.torch.json"), |v| {
        v["engine"]["allocator_knobs"]["TORCH_BLAS_PREFER_CUBLASLT"] = Value::Null;
    });
    let recorded = judge(work.path());
    assert!(recorded.status.success(), "{}", text(&recorded));

    edit(&work.path().join("c.torch.json"), |v| {
        v["engine"]["allocator_knobs"]["DISABLE_ADDMM_CUDA_LT"] = "1".into();
    });
    let knob = judge(work.path());
    assert_eq!(knob.status.code(), Some(1), "{}", text(&knob));
    assert!(
        text(&knob).contains("FAILED c: PyTorch ran with DISABLE_ADDMM_CUDA_LT=1"),
        "{}",
        text(&knob)
    );
}

/// The torch engine's own rules, without torch: torch's check_env takes only "1" and "0";
/// the workspaces are the live blocks that are not the model's tensors, in allocation order.
#[test]
fn pytorch_eager_reads_knobs_as_torch_does_and_observes_the_workspaces() {
    let script = r#"
import importlib.util, sys, types
spec = importlib.util.spec_from_file_location("pe", sys.argv[1])
pe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pe)
assert [pe.check_env(v) for v in ("1", "0", "true", "yes", "on", " 1", None)] == [True, False, None, None, None, None, None]
class T:
    def __init__(self, p): self.p = p
    def data_ptr(self): return self.p
    def numel(self): return 16
    def element_size(self): return 4
MiB = 1 << 20
snap = {"segments": [
    {"device": 0, "address": 0x1000, "segment_type": "small", "blocks": [
        {"size": 512, "requested_size": 64, "state": "active_allocated"},
        {"size": MiB, "requested_size": MiB, "state": "active_allocated"},
        {"size": MiB - 512, "requested_size": 0, "state": "inactive"}]},
    {"device": 0, "address": 0x9000000, "segment_type": "large", "blocks": [
        {"address": 0x9000000, "size": 32 * MiB, "requested_size": 32 * MiB, "state": "active_allocated"}]},
    {"device": 1, "address": 0x5000, "blocks": [{"size": 512, "requested_size": 8, "state": "active_allocated"}]}],
    "device_traces": [[{"action": "alloc", "addr": 0x1000}, {"action": "alloc", "addr": 0x9000000},
                       {"action": "alloc", "addr": 0x1200}], []]}
torch = types.SimpleNamespace(__version__="2.11.0+cu130",
    cuda=types.SimpleNamespace(memory=types.SimpleNamespace(_snapshot=lambda: snap)))
sizes = pe.workspace_sizes(False, 9, 0, None)
assert sizes == [("cuBLAS workspace", 32 * MiB), ("cuBLASLt workspace", MiB)], sizes
blocks, how = pe.observe_workspaces(torch, 0, [T(0x1000)], True, sizes)
assert [(b["role"], b["requested_size"]) for b in blocks] == [("cuBLAS workspace", 32 * MiB), ("cuBLASLt workspace", MiB)], blocks
assert how.startswith("in allocation order"), how
policy = pe.memory_policy(torch.__version__, blocks, how, None)
assert (policy["cublas_workspace_bytes"], policy["cublaslt_workspace_bytes"]) == (32 * MiB, MiB), policy
assert policy["workspaces_from"].startswith("observed"), policy

# Named by size, not by position: the same blocks allocated the other way round keep their names
# (the judge then sees the order), and a lone 1 MiB block (TORCH_BLAS_PREFER_CUBLASLT on a one-row
# product) is the cuBLASLt workspace, not "the first one".
snap["device_traces"][0] = [{"action": "alloc", "addr": 0x9000000}, {"action": "alloc", "addr": 0x1200}]
blocks, how = pe.observe_workspaces(torch, 0, [T(0x1000)], True, sizes)
assert [b["role"] for b in blocks] == ["cuBLAS workspace", "cuBLASLt workspace"], blocks
snap["device_traces"][0] = [{"action": "alloc", "addr": 0x1200}, {"action": "alloc", "addr": 0x9000000}]
blocks, how = pe.observe_workspaces(torch, 0, [T(0x1000)], True, sizes)
assert [b["role"] for b in blocks] == ["cuBLASLt workspace", "cuBLAS workspace"], blocks
assert [b["role"] for b in pe.name_workspaces([{"requested_size": MiB}], sizes)] == ["cuBLASLt workspace"]
# No allocation order recorded: said so, by address.
blocks, how = pe.observe_workspaces(torch, 0, [T(0x1000)], False, sizes)
assert "NO allocation order" in how and all(b["order"] is None for b in blocks), how

# Compute capability 8.0: cuBLAS :4096:2:16:8.
assert pe.workspace_sizes(False, 8, 0, None)[0] == ("cuBLAS workspace", 4096 * 1024 * 2 + 16 * 1024 * 8)
# ROCm, MI300X (gfx942): hipBLAS 128 MiB, hipBLASLt 76 MiB; its hipBLASLt block alone (the Lt
# path takes no hipBLAS handle there) is the hipBLASLt workspace, where a position called it cuBLAS.
rocm = pe.workspace_sizes(True, 9, 4, "gfx942:sramecc+:xnack-")
assert rocm == [("hipBLAS workspace", 128 * MiB), ("hipBLASLt workspace", 76 * MiB)], rocm
assert pe.workspace_sizes(True, 9, 0, "gfx90a:sramecc+:xnack-")[0] == ("hipBLAS workspace", 32 * MiB)
named = pe.name_workspaces([{"requested_size": 76 * MiB}], rocm)
assert [b["role"] for b in named] == ["hipBLASLt workspace"], named
policy = pe.memory_policy("2.11.0+rocm7.1", named, "in allocation order", None)
assert (policy["cublas_workspace_bytes"], policy["cublaslt_workspace_bytes"]) == (0, 76 * MiB), policy
# The knobs move the sizes as torch reads them (each cleared by gpu-check).
import os
os.environ["HIPBLASLT_WORKSPACE_SIZE"] = "2048"
os.environ["HIPBLAS_WORKSPACE_CONFIG"] = ":1024:4"
assert pe.workspace_sizes(True, 9, 4, "gfx942") == [("hipBLAS workspace", 4 * MiB), ("hipBLASLt workspace", 2 * MiB)]
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":1024:1"
# On CUDA an unset TORCH_CUBLASLT_UNIFIED_WORKSPACE caps the cuBLASLt size at the cuBLAS one:
# two workspaces of one size cannot be told apart, and are named so.
same = pe.workspace_sizes(False, 9, 0, None)
assert same == [("cuBLAS workspace", MiB), ("cuBLASLt workspace", MiB)], same
assert pe.name_workspaces([{"requested_size": MiB}], same)[0]["role"].startswith("ambiguous"), same
assert pe.name_workspaces([{"requested_size": 3 * MiB}], same)[0]["role"].startswith("unknown"), same
os.environ["TORCH_CUBLASLT_UNIFIED_WORKSPACE"] = "1"
assert pe.workspace_sizes(False, 9, 0, None) == [("cuBLAS workspace", MiB)]
print("ok")
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(repo().join("crates/lab-torch/src/engine.py"))
        .env_remove("CUBLAS_WORKSPACE_CONFIG")
        .env_remove("HIPBLAS_WORKSPACE_CONFIG")
        .env_remove("ROCBLAS_WORKSPACE_CONFIG")
        .env_remove("CUBLASLT_WORKSPACE_SIZE")
        .env_remove("HIPBLASLT_WORKSPACE_SIZE")
        .env_remove("TORCH_CUBLASLT_UNIFIED_WORKSPACE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

/// The workspaces must be the policy's in the policy's order: the same two blocks allocated the
/// other way round fail, as does an order that was not observed, a block named for a workspace
/// iteragpu does not have (ROCm's hipBLASLt) or named ambiguously; then the right order passes.
#[test]
fn the_judge_fails_on_workspaces_in_another_order_or_of_another_name() {
    let work = case_folder();
    edit(&work.path().join("c.json"), cuda_policy);
    edit(&work.path().join("c.torch.json"), |v| {
        observe_named(
            v,
            &[("cuBLASLt workspace", MIB), ("cuBLAS workspace", 32 * MIB)],
        )
    });
    let swapped = judge(work.path());
    let printed = text(&swapped);
    assert_eq!(swapped.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains(
            "FAILED c: workspaces allocated in another order: iteragpu's memory_policy cuBLAS \
             then cuBLASLt, PyTorch cuBLASLt then cuBLAS"
        ),
        "{printed}"
    );

    // The right order, but not observed (no memory history): not the same.
    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB, MIB]);
        for b in v["engine"]["observed_workspaces"].as_array_mut().unwrap() {
            b["order"] = Value::Null;
        }
    });
    let unordered = judge(work.path());
    assert_eq!(unordered.status.code(), Some(1), "{}", text(&unordered));
    assert!(
        text(&unordered)
            .contains("FAILED c: PyTorch's allocation order of its workspaces was not observed"),
        "{}",
        text(&unordered)
    );

    // ROCm on an MI300X: one 76 MiB hipBLASLt block, which a position would call cuBLAS's.
    edit(&work.path().join("c.torch.json"), |v| {
        observe_named(v, &[("hipBLASLt workspace", 76 * MIB)])
    });
    let rocm = judge(work.path());
    let printed = text(&rocm);
    assert_eq!(rocm.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("PyTorch observed hipBLASLt 79691776 B after the cold pass  DIFFERENT"),
        "{printed}"
    );
    assert!(
        printed.contains("a workspace iteragpu does not have: PyTorch observed hipBLASLt 79691776"),
        "{printed}"
    );

    // Two blocks of one size the engine could not tell apart.
    edit(&work.path().join("c.torch.json"), |v| {
        observe_named(
            v,
            &[
                (
                    "ambiguous: cuBLAS workspace or cuBLASLt workspace (both 33554432 bytes)",
                    32 * MIB,
                ),
                ("cuBLASLt workspace", MIB),
            ],
        )
    });
    let ambiguous = judge(work.path());
    assert_eq!(ambiguous.status.code(), Some(1), "{}", text(&ambiguous));

    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB, MIB])
    });
    let same = judge(work.path());
    assert!(same.status.success(), "{}", text(&same));
}

/// Null counters are never the same as a count: PyTorch's (as its CPU test switch writes them),
/// iteragpu's, or a row PyTorch lacks; with device memory figures beside them (the memory outside
/// the allocator), a verdict, not a traceback.
#[test]
fn the_judge_fails_on_null_counters_and_missing_rows() {
    let work = case_folder();
    let null_all = |v: &mut Value| {
        for row in v["phases"].as_array_mut().unwrap() {
            for k in [
                "baseline_allocated_bytes",
                "end_allocated_bytes",
                "peak_allocated_bytes",
                "baseline_reserved_bytes",
                "end_reserved_bytes",
                "peak_reserved_bytes",
                "baseline_requested_bytes",
                "end_requested_bytes",
                "peak_requested_bytes",
            ] {
                row["memory"][k] = Value::Null;
            }
            row["memory"]["device_before"] =
                serde_json::json!({"free_bytes": 100 * MIB, "total_bytes": 200 * MIB});
            row["memory"]["device_after"] =
                serde_json::json!({"free_bytes": 90 * MIB, "total_bytes": 200 * MIB});
        }
    };
    edit(&work.path().join("c.torch.json"), null_all);
    std::fs::write(
        work.path().join("c.free.json"),
        format!(r#"{{"ours": {}, "torch": {}}}"#, 120 * MIB, 120 * MIB),
    )
    .unwrap();
    let nulls = judge(work.path());
    let printed = text(&nulls);
    assert_eq!(nulls.status.code(), Some(1), "{printed}");
    assert!(!printed.contains("Traceback"), "{printed}");
    assert!(
        printed.contains("PyTorch's counters are null or not byte counts"),
        "{printed}"
    );
    let line = printed
        .lines()
        .find(|l| l.contains("cold_forward[0]") && l.contains("peak_reserved_bytes"))
        .unwrap();
    assert!(
        line.contains(" null ") && line.ends_with("DIFFERENT"),
        "{line}"
    );
    assert!(
        printed.contains("pytorch outside the allocator: set-up 20.0 MiB"),
        "{printed}"
    );

    // iteragpu's own counters null: the same.
    let work = case_folder();
    edit(&work.path().join("c.json"), null_all);
    let ours = judge(work.path());
    assert_eq!(ours.status.code(), Some(1), "{}", text(&ours));
    assert!(
        text(&ours).contains("iteragpu's counters are null or not byte counts"),
        "{}",
        text(&ours)
    );

    // A row PyTorch lacks (the phase count still equal: one row renamed).
    let work = case_folder();
    edit(&work.path().join("c.torch.json"), |v| {
        v["phases"][4]["index"] = 7.into();
    });
    let missing = judge(work.path());
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        text(&missing).contains("phase rows: iteragpu"),
        "{}",
        text(&missing)
    );
}

/// TF32 is judged from what PyTorch's products ran with, as torch reported it after the run
/// (`engine.matmul.allow_tf32`), not from the torch document's configuration (which the binary
/// replaces with iteragpu's own): a TF32 case run without TF32 on the torch side fails, as does
/// a document that does not record it, and a strict case run with TF32.
#[test]
fn the_judge_fails_on_a_tf32_case_run_without_tf32() {
    let work = case_folder();
    edit(&work.path().join("c.json"), |v| {
        v["configuration"]["allow_tf32"] = true.into();
    });
    // The torch document's configuration says TF32 (as the binary writes it); torch ran without.
    edit(&work.path().join("c.torch.json"), |v| {
        v["configuration"]["allow_tf32"] = true.into();
    });
    let without = judge_case(work.path(), "c|expect=allow_tf32:true");
    let printed = text(&without);
    assert_eq!(without.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("TF32: iteragpu allow_tf32 True, PyTorch ran with allow_tf32 False"),
        "{printed}"
    );
    assert!(
        printed.contains("expected allow_tf32 true: PyTorch ran with false  DIFFERENT"),
        "{printed}"
    );
    assert!(
        printed.contains("PyTorch ran with allow_tf32 False, iteragpu with True"),
        "{printed}"
    );

    // Not recorded at all: not the same either.
    edit(&work.path().join("c.torch.json"), |v| {
        v["engine"]
            .as_object_mut()
            .unwrap()
            .remove("matmul")
            .unwrap();
    });
    let unrecorded = judge_case(work.path(), "c|expect=allow_tf32:true");
    assert_eq!(unrecorded.status.code(), Some(1), "{}", text(&unrecorded));
    assert!(
        text(&unrecorded).contains(
            "PyTorch did not record the TF32 setting it ran with (engine.matmul.allow_tf32)"
        ),
        "{}",
        text(&unrecorded)
    );

    // With TF32 on both sides, the case holds.
    edit(&work.path().join("c.torch.json"), |v| {
        v["engine"]["matmul"] =
            serde_json::json!({"allow_tf32": true, "float32_matmul_precision": "high"});
    });
    let with = judge_case(work.path(), "c|expect=allow_tf32:true");
    let printed = text(&with);
    assert!(with.status.success(), "{printed}");
    assert!(
        printed.contains("expected allow_tf32 true: PyTorch ran with true  ok"),
        "{printed}"
    );

    // A strict case whose torch side ran with TF32.
    edit(&work.path().join("c.json"), |v| {
        v["configuration"]["allow_tf32"] = false.into();
    });
    let strict = judge(work.path());
    assert_eq!(strict.status.code(), Some(1), "{}", text(&strict));
}

/// No input makes the judge print a traceback: every field of both documents replaced in turn
/// by null, a string, a list, an object, a negative number and a bool, and whole files that are
/// not JSON objects, each give a verdict (DIFFERENT with a reason where it cannot be the same).
#[test]
fn no_malformed_input_makes_the_judge_print_a_traceback() {
    let work = case_folder();
    edit(&work.path().join("c.json"), cuda_policy);
    edit(&work.path().join("c.torch.json"), |v| {
        observe(v, &[32 * MIB, MIB])
    });
    std::fs::write(
        work.path().join("c.free.json"),
        format!(r#"{{"ours": {}, "torch": {}}}"#, 120 * MIB, 120 * MIB),
    )
    .unwrap();
    let harness = r#"
import contextlib, copy, importlib.util, io, json, os, sys, traceback
spec = importlib.util.spec_from_file_location("judge", sys.argv[1])
judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(judge)
work = sys.argv[2]
BAD = [None, "x", [], {}, -1, True]

def paths(v, at=()):
    yield at
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, at + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, at + (i,))

def put(doc, at, value):
    if not at:
        return value
    doc = copy.deepcopy(doc)
    cur = doc
    for k in at[:-1]:
        cur = cur[k]
    cur[at[-1]] = value
    return doc

def run(name, text):
    with open(os.path.join(work, name), "w") as f:
        f.write(text)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = judge.main([work, "--require-peer", "c|expect=allow_tf32:false"])
        except Exception:
            print(out.getvalue())
            traceback.print_exc()
            sys.exit(f"traceback with {name} = {text[:200]}")
    return code, out.getvalue()

tried = different = 0
for name in ("c.json", "c.torch.json", "c.plan.json", "c.free.json"):
    original = open(os.path.join(work, name)).read()
    doc = json.loads(original)
    for at in list(paths(doc)):
        for bad in BAD:
            code, out = run(name, json.dumps(put(doc, at, bad)))
            tried += 1
            different += code == 1
            if code == 1 and "verdict: 1 of 1 case(s) FAILED" not in out:
                sys.exit(f"exit 1 without a verdict: {name} {at} = {bad!r}: {out}")
            # A counter of any document that is not a count is never the same.
            if "phases" in at and at[-1] in judge.COUNTERS and code != 1:
                sys.exit(f"{name} {at} = {bad!r} judged the same")
    for text in ("", "{", "[]", "null", "3", '"x"', "\x00\xff"):
        code, out = run(name, text)
        tried += 1
        if name != "c.free.json" and (code != 1 or "DIFFERENT" not in out):
            sys.exit(f"{name} = {text!r}: exit {code}, {out}")
    run(name, original)
print("tried", tried, "different", different)
"#;
    let out = Command::new("python3")
        .args(["-c", harness])
        .arg(repo().join("scripts/gpu_check_report.py"))
        .arg(work.path())
        .output()
        .unwrap();
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(!printed.contains("Traceback"), "{printed}");
    let tried: u64 = printed
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(tried > 1000, "{printed}");

    // The other uses of the judge, with a file that is no document: one sentence, no traceback.
    let junk = work.path().join("junk.json");
    std::fs::write(&junk, "[1, 2").unwrap();
    for args in [
        vec!["--environment".to_string(), junk.display().to_string()],
        vec!["--lot".to_string(), junk.display().to_string()],
        vec!["--plan".into(), "--budget".into(), "x".into()],
    ] {
        let out = Command::new("python3")
            .arg(repo().join("scripts/gpu_check_report.py"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(!text(&out).contains("Traceback"), "{}", text(&out));
    }
    std::fs::write(&junk, r#"{"details": [], "usable": true}"#).unwrap();
    let out = Command::new("python3")
        .arg(repo().join("scripts/gpu_check_report.py"))
        .args(["--environment", junk.to_str().unwrap(), CUBLAS])
        .output()
        .unwrap();
    assert!(!text(&out).contains("Traceback"), "{}", text(&out));
}

/// A folder of stand-ins for a rehearsal: an `iteragpu` that runs the real binary except for the
/// step whose output is `hang_on` (there it ignores SIGTERM and sleeps), and, with `smi_hangs`, an
/// `nvidia-smi` that ignores SIGTERM and never answers. Each hung stand-in writes its pid to
/// `pids`, so that the test can say none is left running.
struct StandIns {
    dir: tempfile::TempDir,
}

impl StandIns {
    fn new(hang_on: &str, smi_hangs: bool) -> StandIns {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let write = |name: &str, body: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, body).unwrap();
            let ok = Command::new("chmod").arg("+x").arg(&path).status().unwrap();
            assert!(ok.success());
        };
        write(
            "iteragpu",
            format!(
                "#!/bin/bash\ncase \" $* \" in *\"/{hang_on} \"*) trap '' TERM; echo $$ >>'{}'; \
                 exec sleep 300;; esac\nexec '{}' \"$@\"\n",
                pids.display(),
                binary().display()
            ),
        );
        if smi_hangs {
            std::fs::create_dir(dir.path().join("bin")).unwrap();
            write(
                "bin/nvidia-smi",
                format!(
                    "#!/bin/bash\ntrap '' TERM\necho $$ >>'{}'\nexec sleep 300\n",
                    pids.display()
                ),
            );
        }
        StandIns { dir }
    }

    fn command(&self, out: &Path) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("scripts/gpu-check.sh"))
            .arg(out)
            .env("GPU_CHECK_REHEARSAL", "1")
            .env("ITERAGPU", self.dir.path().join("iteragpu"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.dir.path().join("bin").display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env_remove("DEVICE")
            .env_remove("GPU_CHECK_BUDGET_S")
            .env_remove("GPU_CHECK_PROBE_S")
            .env_remove("GPU_CHECK_STEP_S");
        cmd
    }

    /// The stand-ins that hung, each still running or not.
    fn hung(&self) -> Vec<(String, bool)> {
        std::fs::read_to_string(self.dir.path().join("pids"))
            .unwrap_or_default()
            .lines()
            .map(|pid| {
                // Running, or a zombie not yet reaped (killed: the state after the name is Z).
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
                let alive = matches!(state, Some(c) if c != 'Z' && c != 'X');
                (pid.to_string(), alive)
            })
            .collect()
    }
}

/// The documents in a gpu-check-json.tar.gz, read with tar.
fn packed(out: &Path) -> Vec<String> {
    let list = Command::new("tar")
        .arg("-tzf")
        .arg(out.join("gpu-check-json.tar.gz"))
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", text(&list));
    String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

const REHEARSED: [&str; 14] = [
    "f32-small",
    "f32-row",
    "f32-medium",
    "f16-small",
    "f16-row",
    "f16-medium",
    "bf16-small",
    "bf16-row",
    "bf16-medium",
    "f32-large",
    "f16-large",
    "bf16-large",
    "tf32-medium",
    "ptx-medium",
];

/// A step that ignores SIGTERM is killed 5 s after it (`timeout -k 5`), a hanging nvidia-smi is
/// killed the same way and not called again, and every case that finished still has its
/// documents and its verdict in OUTPUT_DIR; the hung case fails, naming why.
#[test]
fn a_step_ignoring_sigterm_and_a_hanging_nvidia_smi_leave_every_finished_case() {
    let stand_ins = StandIns::new("f16-small.json", true);
    let out_dir = tempfile::tempdir().unwrap();
    let out = stand_ins
        .command(out_dir.path())
        .env("GPU_CHECK_STEP_S", "5")
        .output()
        .unwrap();
    let log = text(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(
        log.contains("nvidia-smi: no answer within 5 s (killed); not called again in this run"),
        "{log}"
    );
    assert!(
        log.contains("killed: no end within 5 s, nor 5 s after SIGTERM (SIGKILL)"),
        "{log}"
    );
    assert!(
        log.contains("FAILED: measure f16-small (exit 137)"),
        "{log}"
    );
    assert!(
        log.contains("nvidia-smi: not run (it hung before)"),
        "{log}"
    );
    let hung = stand_ins.hung();
    assert_eq!(
        hung.len(),
        2,
        "one nvidia-smi call and one step hung: {hung:?}"
    );
    assert!(hung.iter().all(|(_, alive)| !alive), "{hung:?}");

    assert_eq!(
        files_in(out_dir.path()),
        [
            "gpu-check-json.tar.gz",
            "gpu-check.log",
            "nvidia-smi.txt",
            "summary.txt"
        ]
    );
    let docs = packed(out_dir.path());
    for case in REHEARSED {
        for suffix in [".plan.json", ".free.json"] {
            assert!(
                docs.contains(&format!("{case}{suffix}")),
                "{case}: {docs:?}"
            );
        }
        assert_eq!(
            docs.contains(&format!("{case}.json")),
            case != "f16-small",
            "{case}: {docs:?}"
        );
    }
    let summary = std::fs::read_to_string(out_dir.path().join("summary.txt")).unwrap();
    assert!(!summary.starts_with("PARTIAL"), "{summary}");
    assert!(
        summary.contains("FAILED f16-small: iteragpu's document missing"),
        "{summary}"
    );
    assert!(
        summary.contains("verdict: 1 of 14 case(s) FAILED"),
        "{summary}"
    );
}

/// Starts a rehearsal whose f16-medium step hangs ignoring SIGTERM, in a process group of its
/// own, and returns once that step hangs.
fn start_until_hung(stand_ins: &StandIns, out: &Path, step_s: Option<&str>) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = stand_ins.command(out);
    if let Some(s) = step_s {
        cmd.env("GPU_CHECK_STEP_S", s);
    }
    let child = cmd
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log_path = out.join("gpu-check.log");
    let started = std::time::Instant::now();
    loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains("] f16-medium: iteragpu measure") && !stand_ins.hung().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(240),
            "the run never reached f16-medium: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    child
}

/// Killed at any moment (SIGKILL to the whole run, as at the call's limit, here while a step
/// hangs): OUTPUT_DIR still holds every document of the cases that finished and their judgement,
/// marked partial.
#[test]
fn a_kill_at_any_moment_leaves_the_judged_cases_so_far() {
    let stand_ins = StandIns::new("f16-medium.json", false);
    let out_dir = tempfile::tempdir().unwrap();
    let mut child = start_until_hung(&stand_ins, out_dir.path(), None);
    let group = format!("-{}", child.id());
    let killed = Command::new("kill")
        .args(["-KILL", "--", &group])
        .status()
        .unwrap();
    assert!(killed.success());
    child.wait().unwrap();
    // The hung step runs in timeout's own process group: end it as the machine's end would.
    for (pid, alive) in stand_ins.hung() {
        if alive {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    }

    let files = files_in(out_dir.path());
    assert_eq!(
        files,
        [
            "gpu-check-json.tar.gz",
            "gpu-check.log",
            "nvidia-smi.txt",
            "summary.txt"
        ]
    );
    let docs = packed(out_dir.path());
    for case in &REHEARSED[..5] {
        for suffix in [".json", ".plan.json", ".free.json"] {
            assert!(
                docs.contains(&format!("{case}{suffix}")),
                "{case}: {docs:?}"
            );
        }
    }
    assert!(docs.contains(&"torch-knobs.json".to_string()), "{docs:?}");
    assert!(
        !docs.iter().any(|d| d.starts_with("f16-medium")),
        "{docs:?}"
    );
    let summary = std::fs::read_to_string(out_dir.path().join("summary.txt")).unwrap();
    assert!(
        summary.starts_with("PARTIAL: the judgement of the 5 case(s) run so far"),
        "{summary}"
    );
    for case in &REHEARSED[..5] {
        assert!(summary.contains(&format!("== {case}: ")), "{summary}");
    }
    assert!(summary.contains("verdict: all 5 case(s) SAME"), "{summary}");
}

/// gpu-check clears exactly the knobs the torch engine records (so the judge can hold every
/// PyTorch document to all of them), and both lists hold the knobs of CUDA and ROCm torch 2.11 that
/// change counters, workspaces, paths or float32 math.
#[test]
fn the_script_clears_the_knobs_the_engine_records() {
    let script = std::fs::read_to_string(repo().join("scripts/gpu-check.sh")).unwrap();
    let start = script.find("TORCH_KNOBS=(").unwrap() + "TORCH_KNOBS=(".len();
    let end = start + script[start..].find(')').unwrap();
    let mut cleared: Vec<&str> = script[start..end].split_whitespace().collect();
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util, sys\n\
             spec = importlib.util.spec_from_file_location('e', sys.argv[1])\n\
             e = importlib.util.module_from_spec(spec); spec.loader.exec_module(e)\n\
             print(' '.join(e.TORCH_KNOBS))",
        ])
        .arg(repo().join("crates/lab-torch/src/engine.py"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let recorded_text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut recorded: Vec<&str> = recorded_text.split_whitespace().collect();
    cleared.sort_unstable();
    recorded.sort_unstable();
    assert_eq!(cleared, recorded);
    for k in [
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "DISABLE_ADDMM_CUDA_LT",
        "CUBLAS_WORKSPACE_CONFIG",
        "CUBLASLT_WORKSPACE_SIZE",
        "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
        "TORCH_BLAS_PREFER_CUBLASLT",
        "PYTORCH_TUNABLEOP_ENABLED",
        "HIPBLASLT_WORKSPACE_SIZE",
        "HIPBLAS_WORKSPACE_CONFIG",
        "ROCBLAS_WORKSPACE_CONFIG",
        "TORCH_BLAS_PREFER_HIPBLASLT",
        "NVIDIA_TF32_OVERRIDE",
    ] {
        assert!(cleared.contains(&k), "{k} not cleared: {cleared:?}");
    }
}

/// A SIGTERM to the whole run while a step hangs ignoring it: the step is killed at its bound
/// (SIGKILL 5 s after SIGTERM), then the run packs once more, the hung case judged as failed,
/// and stops with 143.
#[test]
fn a_sigterm_packs_once_more_after_the_step_in_progress() {
    let stand_ins = StandIns::new("f16-medium.json", false);
    let out_dir = tempfile::tempdir().unwrap();
    let mut child = start_until_hung(&stand_ins, out_dir.path(), Some("5"));
    let group = format!("-{}", child.id());
    let sent = Command::new("kill")
        .args(["-TERM", "--", &group])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(out_dir.path().join("gpu-check.log")).unwrap();
    assert_eq!(status.code(), Some(143), "{log}");
    assert!(
        log.contains("gpu-check: stopped by a signal after"),
        "{log}"
    );
    let hung = stand_ins.hung();
    assert_eq!(hung.len(), 1, "{hung:?}");
    assert!(hung.iter().all(|(_, alive)| !alive), "{hung:?}");
    let summary = std::fs::read_to_string(out_dir.path().join("summary.txt")).unwrap();
    assert!(
        summary.starts_with("PARTIAL: the judgement of the 6 case(s) run so far"),
        "{summary}"
    );
    assert!(
        summary.contains("FAILED f16-medium: iteragpu's document missing"),
        "{summary}"
    );
    assert!(
        summary.contains("verdict: 1 of 6 case(s) FAILED"),
        "{summary}"
    );
    let docs = packed(out_dir.path());
    for case in &REHEARSED[..5] {
        assert!(docs.contains(&format!("{case}.json")), "{case}: {docs:?}");
    }
    assert_eq!(
        files_in(out_dir.path()),
        [
            "gpu-check-json.tar.gz",
            "gpu-check.log",
            "nvidia-smi.txt",
            "summary.txt"
        ]
    );
}
