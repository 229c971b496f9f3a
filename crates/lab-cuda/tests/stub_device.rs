//! `CudaDevice` against stub libraries: the whole device path (open, allocator over driver
//! segments, kernels, events, cuBLAS failure, out of memory, read-back, drop) runs without a GPU.
//!
//! The driver is chosen when the process starts (LD_LIBRARY_PATH), so the test re-runs its own
//! binary as a child with the stub folder on the loader path; the child does the work.

use std::path::Path;
use std::process::Command;

use lab::device::{Device, DeviceError};
use lab::dtype::DType;
use lab::tool::ToolInfo;
use lab_cuda::CudaDevice;

const CHILD: &str = "LAB_CUDA_STUB_CHILD";

fn compile(dir: &Path, source: &str, soname: &str, defines: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/stubs")
        .join(source);
    let mut cmd = Command::new("gcc");
    cmd.args(["-shared", "-fPIC", "-O0", "-w"])
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-o")
        .arg(dir.join(soname))
        .arg(src);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    let out = cmd
        .output()
        .expect("gcc must be installed to build the stub libraries");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_child(test: &str, defines: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    compile(dir.path(), "libcuda.c", "libcuda.so.1", defines);
    compile(dir.path(), "libcublas.c", "libcublasLt.so.12", &["LT"]);
    compile(dir.path(), "libcublas.c", "libcublas.so.12", &[]);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", dir.path())
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_device_path_runs_against_a_stub_driver() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child(
            "the_device_path_runs_against_a_stub_driver",
            &["FULL", "WITH_V2"],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let mut d = CudaDevice::open(0, ToolInfo::new(None)).expect("the stub device opens");
    let env = d.environment();
    assert!(env.usable);
    assert_eq!(env.details["kernel_form"], "cubin sm_90");
    assert_eq!(d.workspace_bytes(), 33_554_432);

    let x = d.allocate(16, 64, DType::Float32, "inputs").unwrap();
    let stats = d.stats();
    assert_eq!(stats.all.allocated.current, 4096);
    assert_eq!(stats.all.reserved.current, 2 * 1024 * 1024);
    d.upload(&x, &vec![0.5; 16 * 64]).unwrap();
    assert!(matches!(d.upload(&x, &[1.0]), Err(DeviceError::Shape(_))));
    d.fill_inputs(&x, 7).unwrap();

    let mem = d.device_memory().unwrap().unwrap();
    assert_eq!(mem.free_bytes, 149_000_000_000);
    d.start_clock().unwrap();
    assert_eq!(d.stop_clock().unwrap(), Some(0.0015));

    let h = d.allocate(16, 64, DType::Float32, "gelu output").unwrap();
    d.gelu(&x, &h).unwrap();

    // The stub cuBLAS refuses to create a handle: a backend error, and the workspace that was not
    // handed over is not left allocated.
    let w = d.allocate(64, 64, DType::Float32, "weight").unwrap();
    let b = d.allocate(1, 64, DType::Float32, "bias").unwrap();
    let before = d.stats().all.allocated.current;
    match d.linear(&x, &w, &b, &h, false) {
        Err(DeviceError::Backend(msg)) => {
            assert!(
                msg.contains("cublasCreate_v2 failed: CUBLAS_STATUS_EXECUTION_FAILED"),
                "{msg}"
            )
        }
        other => panic!("expected a cuBLAS error, got {other:?}"),
    }
    assert_eq!(d.stats().all.allocated.current, before);

    // More than the stub's 64 MiB: the allocator's out-of-memory error with its figures.
    match d.allocate(8192, 8192, DType::Float32, "linear1 output") {
        Err(DeviceError::OutOfMemory {
            what, requested, ..
        }) => {
            assert_eq!(what, "linear1 output");
            assert_eq!(requested, 8192 * 8192 * 4);
        }
        other => panic!("expected out of memory, got {other:?}"),
    }

    let rows = d.read_rows(&x, &[0, 15]).unwrap();
    assert_eq!(rows.len(), 128);
    assert!(matches!(d.read_rows(&x, &[16]), Err(DeviceError::Shape(_))));
    d.synchronize().unwrap();
    for t in [x, h, w, b] {
        d.free(t);
    }
    assert_eq!(d.stats().all.allocated.current, 0);
    drop(d);
    println!("CHILD DONE");
}

#[test]
fn a_failing_stream_creation_is_a_device_error_not_unavailable() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child(
            "a_failing_stream_creation_is_a_device_error_not_unavailable",
            &[],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let err =
        CudaDevice::open(0, ToolInfo::new(None)).expect_err("cuStreamCreate fails in the stub");
    assert_eq!(
        err.to_string(),
        "cuStreamCreate failed: CUDA_ERROR_UNKNOWN (code 999)"
    );
    assert!(!err.is_unavailable());
    println!("CHILD DONE");
}
