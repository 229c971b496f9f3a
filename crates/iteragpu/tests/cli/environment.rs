//! `iteragpu environment`: the CPU report, argument errors, and the CUDA report against stub
//! libraries for every way a GPU can be missing.

use predicates::prelude::*;
use serde_json::Value;

use crate::stubs::{StubDir, iteragpu, system_has_driver};

fn json_report(cmd: &mut assert_cmd::Command) -> Value {
    let out = cmd.arg("--json").assert().success().get_output().clone();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "the tool panicked: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn problem(v: &Value) -> &str {
    v["problem"].as_str().unwrap_or_default()
}

#[test]
fn cpu_reports_the_reference_device() {
    let libs = StubDir::new();
    let v = json_report(iteragpu(libs.path()).args(["environment", "--device", "cpu"]));
    assert_eq!(v["backend"], "cpu-reference");
    assert_eq!(v["reference_device"], true);
    assert_eq!(v["usable"], true);
}

#[test]
fn an_unknown_device_is_a_usage_error_naming_it() {
    let libs = StubDir::new();
    iteragpu(libs.path())
        .args(["environment", "--device", "gpu0"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("\"gpu0\"").and(predicate::str::contains("cuda:N")));
}

#[test]
fn no_driver_is_reported_with_exit_0() {
    let libs = StubDir::new();
    let v = json_report(iteragpu(libs.path()).args(["environment", "--device", "cuda:0"]));
    assert_eq!(v["backend"], "cuda");
    assert_eq!(v["requested_device"], "cuda:0");
    if !system_has_driver() {
        assert_eq!(v["usable"], false);
        assert!(problem(&v).starts_with("no NVIDIA driver was found"), "{v}");
        assert!(problem(&v).contains("libcuda.so.1"));
        assert_eq!(v["details"]["nvml"]["available"], false);
    }
}

#[test]
fn no_driver_human_report_says_why() {
    if system_has_driver() {
        return;
    }
    let libs = StubDir::new();
    iteragpu(libs.path())
        .args(["environment"])
        .assert()
        .success()
        .stdout(predicate::str::contains("usable: no"))
        .stdout(predicate::str::contains(
            "problem: no NVIDIA driver was found",
        ));
}

#[test]
fn the_toolkit_stub_is_recognised() {
    let libs = StubDir::new();
    libs.driver(&["INIT_RESULT=34"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert_eq!(v["usable"], false);
    assert!(problem(&v).contains("stub library"), "{v}");
    assert!(problem(&v).contains("CUDA_ERROR_STUB_LIBRARY"));
    assert!(problem(&v).contains(&libs.path().display().to_string()));
}

#[test]
fn a_driver_without_devices_says_so() {
    let libs = StubDir::new();
    libs.driver(&["INIT_RESULT=100"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert_eq!(v["usable"], false);
    assert!(
        problem(&v).contains("sees no GPU (CUDA_ERROR_NO_DEVICE)"),
        "{v}"
    );
}

#[test]
fn another_init_failure_is_named() {
    let libs = StubDir::new();
    libs.driver(&["INIT_RESULT=999"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert!(
        problem(&v).contains("failed to initialise (CUDA_ERROR_UNKNOWN, code 999)"),
        "{v}"
    );
}

#[test]
fn an_old_driver_without_v2_symbols_still_reports_the_gpu() {
    let libs = StubDir::new();
    libs.driver(&["DRIVER_VERSION=12020"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    let d = &v["details"];
    assert_eq!(d["driver"]["cuda_version"], "12.2");
    assert_eq!(d["driver"]["event_timing_symbol"], "cuEventElapsedTime");
    assert_eq!(d["gpu"]["uuid_symbol"], "cuDeviceGetUuid");
    assert_eq!(d["gpu"]["name"], "Stub GPU");
    assert_eq!(d["gpu"]["uuid"], "GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8");
    assert_eq!(
        d["gpu"]["uuid_label_from"],
        "GPU- assumed: NVML could not say"
    );
    assert_eq!(d["gpu"]["compute_capability"], "9.0");
    assert_eq!(d["gpu"]["sm_count"], 132);
    assert_eq!(d["gpu"]["free_memory_bytes"], 149_000_000_000u64);
    assert_eq!(d["visible_devices"], 1);
    assert_eq!(d["kernel_form"], "cubin sm_90");
    assert_eq!(d["cublas_workspace_bytes"], 33_554_432);
    assert_eq!(d["cublaslt_workspace_bytes"], 1_048_576);
    // No cuBLAS in the stub folder: the GPU is described, but not usable.
    assert_eq!(v["usable"], false);
    assert!(problem(&v).starts_with("cuBLAS was not found"), "{v}");
}

#[test]
fn a_new_driver_uses_the_v2_symbols() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2", "DRIVER_VERSION=12080"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert_eq!(
        v["details"]["driver"]["event_timing_symbol"],
        "cuEventElapsedTime_v2"
    );
    assert_eq!(v["details"]["gpu"]["uuid_symbol"], "cuDeviceGetUuid_v2");
}

#[test]
fn a_missing_required_symbol_names_it_and_the_fix() {
    let libs = StubDir::new();
    libs.driver(&["OMIT_MEMGETINFO"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert_eq!(v["usable"], false);
    assert!(problem(&v).contains("lacks cuMemGetInfo_v2"), "{v}");
    assert!(problem(&v).contains("R525"));
}

#[test]
fn a_cuda_11_driver_is_refused() {
    let libs = StubDir::new();
    libs.driver(&["DRIVER_VERSION=11080"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert!(problem(&v).contains("supports CUDA 11.8"), "{v}");
    assert!(problem(&v).contains("R525 or newer"));
}

#[test]
fn an_ordinal_past_the_last_device_is_named() {
    let libs = StubDir::new();
    libs.driver(&["DEVICE_COUNT=2"]);
    let v = json_report(iteragpu(libs.path()).args(["environment", "--device", "cuda:2"]));
    assert_eq!(v["requested_device"], "cuda:2");
    assert_eq!(v["details"]["visible_devices"], 2);
    assert!(
        problem(&v)
            .starts_with("cuda:2 does not exist: the driver sees 2 GPU(s) (cuda:0 to cuda:1)"),
        "{v}"
    );
}

#[test]
fn a_gpu_older_than_ampere_is_refused() {
    let libs = StubDir::new();
    libs.driver(&["CC_MAJOR=7", "CC_MINOR=5"]);
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert!(problem(&v).contains("compute capability 7.5"), "{v}");
    assert_eq!(v["details"]["kernel_form"], "ptx-jit");
}

#[test]
fn a_full_stub_stack_is_usable_and_reports_every_library() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml().cublas("toolkit/lib64");
    let v = json_report(
        iteragpu(libs.path())
            .env("CUDA_PATH", libs.path().join("toolkit"))
            .args(["environment", "--device", "cuda:0"]),
    );
    assert_eq!(v["usable"], true, "{v}");
    assert!(v["problem"].is_null());
    let d = &v["details"];
    assert_eq!(d["libraries"]["cublas"]["version"], "12.8.4");
    assert_eq!(d["libraries"]["cublaslt"]["version"], "12.8.4");
    assert_eq!(d["libraries"]["found_via"], "CUDA_PATH");
    assert!(
        d["libraries"]["cublas"]["library"]
            .as_str()
            .unwrap()
            .ends_with("toolkit/lib64/libcublas.so.12")
    );
    assert_eq!(d["nvml"]["available"], true);
    assert_eq!(d["nvml"]["driver_version"], "550.54.15");
    assert_eq!(d["nvml"]["cuda_driver_version"], "12.4");
    let gpu_nvml = &d["gpu"]["nvml"];
    assert_eq!(gpu_nvml["uuid"], "GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8");
    assert_eq!(gpu_nvml["power_limit_watts"], 700.0);
    assert_eq!(gpu_nvml["pcie"]["generation"], 5);
    // Functions this NVML lacks are simply absent.
    assert!(gpu_nvml["memory"].is_null());
    // No environment variable value leaks into the report.
    let text = v.to_string();
    assert!(!text.contains("LD_LIBRARY_PATH=") && !text.contains("CUDA_PATH="));
}

#[test]
fn cublas_on_the_loader_path_is_found_there() {
    let libs = StubDir::new();
    libs.driver(&[]).cublas("");
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    assert_eq!(v["usable"], true, "{v}");
    assert_eq!(v["details"]["libraries"]["found_via"], "loader path");
}

#[test]
fn a_mig_instance_keeps_the_mig_label_nvml_knows_it_by() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml_with(&["MIG"]).cublas("");
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    let gpu = &v["details"]["gpu"];
    assert_eq!(
        gpu["uuid"], "MIG-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8",
        "{v}"
    );
    assert_eq!(gpu["uuid_label_from"], "NVML");
    assert_eq!(
        gpu["nvml"]["uuid"],
        "MIG-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
    );
}

#[test]
fn the_default_workspaces_follow_the_compute_capability_exactly() {
    for (major, minor, cublas) in [(9, 0, 33_554_432u64), (9, 1, 8_519_680), (10, 0, 8_519_680)] {
        let libs = StubDir::new();
        libs.driver(&[&format!("CC_MAJOR={major}"), &format!("CC_MINOR={minor}")]);
        let v = json_report(iteragpu(libs.path()).args(["environment"]));
        assert_eq!(
            v["details"]["cublas_workspace_bytes"], cublas,
            "{major}.{minor}: {v}"
        );
    }
}

/// A stub lot: a driver, NVML and cuBLAS; the scenario comes from `vars` (see the stubs' sources
/// for each STUB_* variable).
fn lot(args: &[&str], vars: &[(&str, &str)]) -> Value {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml().cublas("");
    let mut cmd = iteragpu(libs.path());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    json_report(cmd.arg("environment").args(args))
}

fn findings(v: &Value) -> Vec<(String, Option<String>)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_string(),
                f["device"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn finding<'v>(v: &'v Value, code: &str) -> &'v Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
        .unwrap_or_else(|| panic!("no {code} in {v:#}"))
}

const H200_PAIR: [(&str, &str); 3] = [
    ("STUB_DEVICE_COUNT", "2"),
    ("STUB_NAMES", "NVIDIA H200,NVIDIA H200"),
    ("STUB_NVML_PCIE_MAX", "5x16"),
];

#[test]
fn a_healthy_pair_reports_both_gpus_and_peer_access_without_a_warning() {
    let v = lot(&["--device", "all"], &H200_PAIR);
    assert_eq!(v["schema"], "iteragpu.lot/1");
    assert_eq!(v["requested_device"], "all");
    assert_eq!(v["visible_devices"], 2);
    assert_eq!(v["usable"], true, "{v:#}");
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1]["environment"]["requested_device"], "cuda:1");
    assert_eq!(
        devices[1]["facts"]["uuid"],
        "GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f9"
    );
    assert_eq!(devices[1]["facts"]["pcie_max_generation"], 5);
    assert_eq!(v["peers"].as_array().unwrap().len(), 2);
    assert!(
        v["peers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["can_access"] == true)
    );
    assert_eq!(v["warnings"], 0, "{v:#}");
}

#[test]
fn a_gpu_trained_at_gen3_x8_is_warned_with_its_link() {
    let mut vars = H200_PAIR.to_vec();
    vars.push(("STUB_NVML_PCIE", "5x16,3x8"));
    let v = lot(&["--device", "all"], &vars);
    assert_eq!(
        findings(&v),
        [("pcie_link_degraded".to_string(), Some("cuda:1".to_string()))]
    );
    let f = finding(&v, "pcie_link_degraded");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["figures"]["generation"], 3);
    assert_eq!(f["figures"]["width"], 8);
    assert_eq!(f["figures"]["max_generation"], 5);
    assert!(f["message"].as_str().unwrap().contains("Gen3 x8"));
}

#[test]
fn cuda_ordinals_are_matched_to_nvml_by_uuid_not_by_index() {
    // CUDA_VISIBLE_DEVICES=1,0: cuda:0 is the second physical GPU, the one at Gen3 x8.
    let mut vars = H200_PAIR.to_vec();
    vars.extend([("STUB_NVML_PCIE", "5x16,3x8"), ("STUB_CUDA_ORDER", "1,0")]);
    let v = lot(&["--device", "all"], &vars);
    assert_eq!(
        findings(&v),
        [("pcie_link_degraded".to_string(), Some("cuda:0".to_string()))]
    );
    assert_eq!(
        v["devices"][0]["facts"]["uuid"],
        "GPU-6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f9"
    );
}

/// A B200 as CUDA sees one: its name and the catalogue's 182631 MiB, nearly all free.
const B200: [(&str, &str); 3] = [
    ("STUB_NAMES", "NVIDIA B200"),
    ("STUB_TOTAL_BYTES", "191503138816"),
    ("STUB_FREE_BYTES", "190000000000"),
];

#[test]
fn a_gpu_missing_from_the_package_is_warned() {
    // A B200 lot holds two GPUs; one is visible.
    let v = lot(&["--package", "b200:7:1"], &B200);
    assert_eq!(v["requested_device"], "all");
    assert_eq!(v["package"]["gpus"], 2);
    assert_eq!(v["package"]["model"], "NVIDIA B200");
    assert_eq!(findings(&v), [("gpu_missing".to_string(), None)]);
    let f = finding(&v, "gpu_missing");
    assert_eq!(f["figures"]["expected_gpus"], 2);
    assert_eq!(f["figures"]["visible_gpus"], 1);
    // Two lots promise four.
    let v = lot(&["--device", "all", "--package", "b200:7:2"], &B200);
    assert_eq!(finding(&v, "gpu_missing")["figures"]["expected_gpus"], 4);
}

#[test]
fn another_model_than_the_package_is_warned() {
    let v = lot(&["--package", "b200:7:1"], &H200_PAIR);
    let codes: Vec<String> = findings(&v).into_iter().map(|(c, _)| c).collect();
    assert_eq!(
        codes,
        [
            "model_mismatch",
            "memory_below_package",
            "model_mismatch",
            "memory_below_package"
        ]
    );
    assert_eq!(
        finding(&v, "model_mismatch")["figures"]["found"],
        "NVIDIA H200"
    );
}

#[test]
fn a_throttled_clock_is_warned() {
    let mut vars = H200_PAIR.to_vec();
    vars.extend([
        ("STUB_NVML_THROTTLE", "0,0x8"),
        ("STUB_NVML_SM_CLOCK", "1980,1100"),
    ]);
    let v = lot(&["--device", "cuda:0,1"], &vars);
    assert_eq!(v["requested_device"], "cuda:0,1");
    assert_eq!(
        findings(&v),
        [("clock_throttled".to_string(), Some("cuda:1".to_string()))]
    );
    let f = finding(&v, "clock_throttled");
    assert_eq!(f["figures"]["reasons"][0], "hw_slowdown");
    assert_eq!(f["figures"]["sm_clock_mhz"], 1100);
    assert_eq!(f["figures"]["max_sm_clock_mhz"], 1980);
}

#[test]
fn a_neighbour_process_holding_memory_is_warned() {
    let mut vars = H200_PAIR.to_vec();
    vars.push(("STUB_NVML_PROCS", "0:4242:8589934592"));
    let v = lot(&["--device", "all"], &vars);
    assert_eq!(
        findings(&v),
        [("other_processes".to_string(), Some("cuda:0".to_string()))]
    );
    let f = finding(&v, "other_processes");
    assert_eq!(f["figures"]["used_bytes"], 8_589_934_592u64);
    assert_eq!(f["figures"]["processes"][0]["pid"], 4242);
    // The one-GPU report lists the process too.
    let one = lot(&["--device", "cuda:0"], &vars);
    assert_eq!(
        one["details"]["gpu"]["nvml"]["other_processes"][0]["pid"],
        4242
    );
}

#[test]
fn memory_faults_mig_links_and_peers_are_named() {
    let mut vars = H200_PAIR.to_vec();
    vars.extend([
        ("STUB_NVML_ECC", "0,3"),
        ("STUB_NVML_REMAP", "0:0:0,1:1:0"),
        ("STUB_NVML_RETIRED_PENDING", "1,0"),
        ("STUB_NVML_MIG_MODE", "0,1"),
        ("STUB_NVML_PERSISTENCE", "0"),
        ("STUB_NVML_NVLINK", "18,12"),
        ("STUB_NO_PEER", "0>1,1>0"),
    ]);
    let v = lot(&["--device", "all"], &vars);
    let f = findings(&v);
    let has =
        |code: &str, dev: Option<&str>| f.contains(&(code.to_string(), dev.map(str::to_string)));
    assert!(has("retired_pages_pending", Some("cuda:0")), "{f:?}");
    assert!(has("ecc_uncorrected_errors", Some("cuda:1")), "{f:?}");
    assert!(has("row_remap_pending", Some("cuda:1")), "{f:?}");
    assert!(has("mig_enabled", Some("cuda:1")), "{f:?}");
    assert!(has("nvlink_links_down", Some("cuda:1")), "{f:?}");
    assert!(has("no_peer_access", None), "{f:?}");
    assert!(has("persistence_off", Some("cuda:0")) && has("persistence_off", Some("cuda:1")));
    assert_eq!(
        finding(&v, "ecc_uncorrected_errors")["figures"]["uncorrected_volatile"],
        3
    );
    assert_eq!(
        finding(&v, "nvlink_links_down")["figures"]["active_links"],
        12
    );
    // Warnings come before notes.
    let last_warning = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .rposition(|x| x["severity"] == "warning")
        .unwrap();
    let first_note = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .position(|x| x["severity"] == "note")
        .unwrap();
    assert!(last_warning < first_note);
}

#[test]
fn the_lot_text_report_has_one_block_per_gpu_and_the_warnings() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml().cublas("");
    let out = iteragpu(libs.path())
        .env("STUB_DEVICE_COUNT", "2")
        .env("STUB_NAMES", "NVIDIA B200,NVIDIA B200")
        .env("STUB_TOTAL_BYTES", "191503138816")
        .env("STUB_FREE_BYTES", "190000000000")
        .env("STUB_NVML_PCIE", "5x16,3x8")
        .env("STUB_NVML_PCIE_MAX", "5x16")
        .args(["environment", "--package", "b200:7:2"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("lot: all (2 GPU(s) visible)"), "{text}");
    assert!(
        text.contains(
            "package: b200:7:2 promises 4 x NVIDIA B200 (2 per lot x 2 lot(s), 182631 MiB each)"
        ),
        "{text}"
    );
    assert!(
        text.contains("\n== cuda:0\ndevice: cuda:0 (backend cuda)\nusable: yes\n"),
        "{text}"
    );
    assert!(text.contains("\n== cuda:1\n"), "{text}");
    assert!(text.contains("  cuda:0 -> cuda:1  yes\n"), "{text}");
    assert!(
        text.contains("lot checks: 2 warning(s), 0 note(s) (datasheet table: embedded)"),
        "{text}"
    );
    assert!(
        text.contains("  WARNING gpu_missing: the package b200:7:2 promises 4 GPU(s)"),
        "{text}"
    );
    assert!(
        text.contains("  WARNING pcie_link_degraded: cuda:1 runs its PCIe link at Gen3 x8"),
        "{text}"
    );
}

#[test]
fn without_a_driver_the_lot_report_says_why_and_warns_the_package() {
    if system_has_driver() {
        return;
    }
    let libs = StubDir::new();
    let v = json_report(iteragpu(libs.path()).args(["environment", "--package", "h200:3:1"]));
    assert_eq!(v["usable"], false);
    assert!(
        v["problem"]
            .as_str()
            .unwrap()
            .starts_with("no NVIDIA driver was found")
    );
    assert!(v["visible_devices"].is_null());
    assert_eq!(findings(&v), [("gpu_missing".to_string(), None)]);
}

#[test]
fn package_and_device_mistakes_are_usage_errors() {
    let libs = StubDir::new();
    iteragpu(libs.path())
        .args(["environment", "--device", "cuda:0", "--package", "b200:7:1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--package checks a whole lot"));
    iteragpu(libs.path())
        .args(["environment", "--package", "b300:7:1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown GPU `b300`"));
    iteragpu(libs.path())
        .args(["environment", "--package", "b200:5:1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("days must be 3, 7 or 30"));
    iteragpu(libs.path())
        .args(["environment", "--device", "cuda:0,0"])
        .assert()
        .code(2);
}

/// Issue 27: a driver that claims 10,000 GPUs (the per-GPU and per-pair work once took over
/// 120 s and 6.6 GB) is not believed: the lot report and the probe end at once with a sentence
/// naming the count and the bound, before any per-GPU query.
#[test]
fn a_driver_claiming_thousands_of_gpus_is_not_believed() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml().cublas("");
    let dir = tempfile::tempdir().unwrap();
    let said = "the NVIDIA driver claims 10000 visible GPUs; no host holds more than 64";
    for args in [
        vec!["environment", "--device", "all", "--json"],
        vec!["environment", "--device", "cuda:0", "--json"],
        vec![
            "probe",
            "--device",
            "all",
            "--seconds",
            "1",
            "--output",
            "p.json",
        ],
    ] {
        let started = std::time::Instant::now();
        let out = iteragpu(libs.path())
            .current_dir(dir.path())
            .env("STUB_DEVICE_COUNT", "10000")
            .args(&args)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(matches!(out.status.code(), Some(0..=2)), "{args:?}: {text}");
        assert!(text.contains(said), "{args:?}: {text}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
    assert!(!dir.path().join("p.json").exists());
}

/// Issue 22: while docs/gpu-runs.md records no GPU run, `environment`'s text report (one GPU or
/// the lot), README.md and the kit's README say in one same line that the GPU path was checked
/// against stub libraries and PyTorch's source, not on a GPU; once a run is recorded, none does.
#[test]
fn the_not_yet_on_a_gpu_line_is_in_the_report_and_both_readmes() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |name: &str| std::fs::read_to_string(repo.join(name)).unwrap();
    let owed = read("docs/gpu-runs.md").contains("No GPU run has been recorded yet");
    let libs = StubDir::new();
    let mut lines: Vec<Option<String>> = Vec::new();
    for device in ["cuda:0", "all"] {
        let out = iteragpu(libs.path())
            .args(["environment", "--device", device])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let text = String::from_utf8(out).unwrap();
        // The second line, under the tool's name and commit.
        let second = text.lines().nth(1).unwrap_or_default();
        lines.push(second.starts_with("GPU path: ").then(|| second.to_string()));
    }
    let cpu = iteragpu(libs.path())
        .args(["environment", "--device", "cpu"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(!String::from_utf8(cpu).unwrap().contains("GPU path: "));
    // Line breaks in the Markdown are spaces.
    let flat = |name: &str| read(name).split_whitespace().collect::<Vec<_>>().join(" ");
    if owed {
        let line = lines[0]
            .clone()
            .expect("the report says the GPU path is not yet proven");
        assert_eq!(lines[1].as_ref(), Some(&line), "the lot report says it too");
        assert!(line.contains("stub libraries") && line.contains("not yet on a GPU"));
        for readme in ["README.md", "README-kit.md"] {
            assert!(flat(readme).contains(&line), "{readme} lacks {line:?}");
        }
    } else {
        assert_eq!(lines, [None, None], "a run is recorded: the line goes");
        for readme in ["README.md", "README-kit.md"] {
            assert!(
                !flat(readme).contains("GPU path: checked against stub libraries"),
                "a run is recorded in docs/gpu-runs.md: {readme} still says it is not"
            );
        }
    }
}

/// True when the loader found a cuBLAS of this machine's own (by name or under /usr/local/cuda)
/// before the fake trees a test set up: the test then cannot see its own tree chosen.
fn found_on_this_machine(v: &Value) -> bool {
    let folder = v["details"]["libraries"]["folder"].as_str().unwrap_or("~");
    !folder.starts_with('~')
}

/// Issue 22: a cuBLAS that is nowhere is reported with every folder searched and why each
/// failed, and with the wheel of the driver's CUDA major.
#[test]
fn a_missing_cublas_names_every_folder_and_the_wheel_for_the_driver() {
    for (version, wheel, files) in [
        (
            "13000",
            "`pip install nvidia-cublas`",
            "nvidia/cu13/lib/libcublas{,Lt}.so.13",
        ),
        (
            "12080",
            "`pip install nvidia-cublas-cu12`",
            "nvidia/cublas/lib/libcublas{,Lt}.so.12",
        ),
    ] {
        let libs = StubDir::new();
        libs.driver(&["WITH_V2", &format!("DRIVER_VERSION={version}")]);
        std::fs::create_dir_all(libs.path().join("venv/lib/python3.12/site-packages")).unwrap();
        let v = json_report(
            iteragpu(libs.path())
                .env("CUDA_PATH", libs.path().join("toolkit"))
                .env("VIRTUAL_ENV", libs.path().join("venv"))
                .args(["environment"]),
        );
        if v["usable"] == true {
            assert!(found_on_this_machine(&v), "{v}");
            continue;
        }
        let p = problem(&v);
        let majors = if version == "13000" { "{13,12}" } else { "12" };
        for expected in [
            "cuBLAS was not found: no folder holds ".to_string(),
            format!(
                "; searched, in order: ~ (LD_LIBRARY_PATH entry 1, searched first): none of \
                 libcublas{{,Lt}}.so.{majors}; by name (the loader's cache and default folders): "
            ),
            "~/toolkit/lib64 (CUDA_PATH names this toolkit): no such folder".to_string(),
            "~/toolkit/targets/sbsa-linux/lib (CUDA_PATH names this toolkit): no such folder"
                .to_string(),
            "/usr/local/cuda/lib64 (the toolkit's default install): ".to_string(),
            "~/venv/lib/python3.12/site-packages/nvidia/cu13/lib (VIRTUAL_ENV): no such folder"
                .to_string(),
            "~/venv/lib/python3.12/site-packages/nvidia/cublas/lib (VIRTUAL_ENV): no such folder"
                .to_string(),
            wheel.to_string(),
            format!("(it installs site-packages/{files})"),
        ] {
            assert!(p.contains(&expected), "{expected:?} not in {p}");
        }
        assert!(!p.contains("other folders"), "{p}");
    }
}

/// Issue 22: LD_LIBRARY_PATH pointing at the folder another tool (PyTorch) loaded its cuBLAS
/// from makes iteragpu load that very pair, before a toolkit's and whatever its major; the report
/// names the folder and why.
#[test]
fn ld_library_path_loads_the_very_cublas_another_tool_loaded() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2", "DRIVER_VERSION=13000"])
        .nvml()
        .cublas("toolkit/lib64")
        .compile(
            "libcublas.c",
            "torch/nvidia/cu13/lib",
            "libcublasLt.so.13",
            &["LT"],
        )
        .compile(
            "libcublas.c",
            "torch/nvidia/cu13/lib",
            "libcublas.so.13",
            &[],
        );
    let torch = libs.path().join("torch/nvidia/cu13/lib");
    let path = std::env::join_paths([libs.path(), torch.as_path()]).unwrap();
    let mut cmd = iteragpu(libs.path());
    cmd.env("LD_LIBRARY_PATH", &path)
        .env("CUDA_PATH", libs.path().join("toolkit"));
    let v = json_report(cmd.args(["environment"]));
    assert_eq!(v["usable"], true, "{v}");
    let l = &v["details"]["libraries"];
    assert_eq!(l["found_via"], "loader path", "{v}");
    assert_eq!(l["folder"], "~/torch/nvidia/cu13/lib");
    assert_eq!(
        l["found_because"],
        "LD_LIBRARY_PATH entry 2, searched first"
    );
    assert_eq!(
        l["cublas"]["library"],
        "~/torch/nvidia/cu13/lib/libcublas.so.13"
    );
    assert_eq!(
        l["cublaslt"]["library"],
        "~/torch/nvidia/cu13/lib/libcublasLt.so.13"
    );
    // The text report says it as well.
    let out = iteragpu(libs.path())
        .env("LD_LIBRARY_PATH", &path)
        .env("CUDA_PATH", libs.path().join("toolkit"))
        .args(["environment"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("  folder: ~/torch/nvidia/cu13/lib\n")
            && text.contains("  found because: LD_LIBRARY_PATH entry 2, searched first\n")
            && text.contains("  found via: loader path\n"),
        "{text}"
    );
}

/// Issue 22: a `python3` on PATH that is a link into a venv brings that venv's wheels (it was
/// not found before).
#[cfg(unix)]
#[test]
fn a_venv_behind_a_linked_python3_on_path_is_found() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2", "DRIVER_VERSION=13000"])
        .compile(
            "libcublas.c",
            "venv/lib/python3.12/site-packages/nvidia/cu13/lib",
            "libcublasLt.so.13",
            &["LT"],
        )
        .compile(
            "libcublas.c",
            "venv/lib/python3.12/site-packages/nvidia/cu13/lib",
            "libcublas.so.13",
            &[],
        );
    let root = libs.path();
    std::fs::create_dir_all(root.join("venv/bin")).unwrap();
    std::fs::write(root.join("venv/bin/python3"), "").unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::os::unix::fs::symlink(root.join("venv/bin/python3"), root.join("bin/python3")).unwrap();
    let v = json_report(
        iteragpu(root)
            .env("PATH", root.join("bin"))
            .args(["environment"]),
    );
    if found_on_this_machine(&v) {
        return;
    }
    assert_eq!(v["usable"], true, "{v}");
    let l = &v["details"]["libraries"];
    assert_eq!(l["found_via"], "python environment", "{v}");
    assert_eq!(
        l["folder"],
        "~/venv/lib/python3.12/site-packages/nvidia/cu13/lib"
    );
    assert_eq!(
        l["found_because"],
        "python3 on PATH at ~/bin/python3, a link to ~/venv/bin/python3"
    );
}

/// Issue 22: the report names the file of every library it opened: the driver (also when it
/// refuses it), NVML, cuBLAS and cuBLASLt.
#[test]
fn every_library_opened_is_named_by_its_file() {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml().cublas("");
    let v = json_report(iteragpu(libs.path()).args(["environment"]));
    let d = &v["details"];
    assert_eq!(d["driver"]["library"], "~/libcuda.so.1", "{v}");
    assert_eq!(d["nvml"]["library"], "~/libnvidia-ml.so.1", "{v}");
    assert_eq!(d["libraries"]["cublas"]["library"], "~/libcublas.so.12");
    assert_eq!(d["libraries"]["cublaslt"]["library"], "~/libcublasLt.so.12");
    assert_eq!(d["libraries"]["folder"], "~");
    // A driver that fails to initialise is still named.
    let refused = StubDir::new();
    refused.driver(&["INIT_RESULT=999"]);
    let v = json_report(iteragpu(refused.path()).args(["environment"]));
    assert_eq!(v["usable"], false);
    assert_eq!(v["details"]["driver"]["library"], "~/libcuda.so.1", "{v}");
}
