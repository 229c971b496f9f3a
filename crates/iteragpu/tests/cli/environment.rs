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
