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
    run_child_with(test, defines, &[])
}

/// Runs `test` in a child over stub libraries built with `defines` (driver) and `blas_defines`
/// (cuBLAS); the stubs that record write to `$STUB_LOG` in the stub folder.
fn run_child_with(test: &str, defines: &[&str], blas_defines: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    compile(dir.path(), "libcuda.c", "libcuda.so.1", defines);
    compile(dir.path(), "libcublas.c", "libcublasLt.so.12", &["LT"]);
    compile(dir.path(), "libcublas.c", "libcublas.so.12", blas_defines);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("STUB_LOG", dir.path().join("calls.log"))
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

/// The `key=value` fields of the first line of `log` that starts with `prefix`.
fn fields(log: &str, prefix: &str) -> std::collections::HashMap<String, String> {
    let line = log
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{log}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The bytes at a stub "device" address (host memory in this test's own process).
fn device_bytes(address: &str, len: usize) -> Vec<u8> {
    let p: usize = address.parse().unwrap();
    // SAFETY: the HOSTMEM stub's device pointers are live malloc'ed host blocks of this process,
    // and `len` lies inside the tensor the test allocated there.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec()
}

fn values(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37 - 1.1) * scale).collect()
}

fn encode(v: &[f32], d: DType) -> Vec<u8> {
    match d {
        DType::Float32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::Float16 => v
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect(),
        DType::Bfloat16 => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect(),
    }
}

#[test]
fn every_argument_reaches_the_driver_and_cublas_as_the_headers_expect() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child_with(
            "every_argument_reaches_the_driver_and_cublas_as_the_headers_expect",
            &["FULL", "WITH_V2", "HOSTMEM", "MEMORY_BUDGET=(256UL<<20)"],
            &["RECORD"],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let log_path = std::env::var_os("STUB_LOG").unwrap();
    let take_log = || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        std::fs::write(&log_path, "").unwrap();
        log
    };
    let mut d = CudaDevice::open(0, ToolInfo::new(None)).expect("the stub device opens");
    let log = take_log();
    assert!(
        log.contains("stream_create flags=1"),
        "non-blocking stream:\n{log}"
    );
    assert_eq!(log.matches("event_create flags=0").count(), 2, "{log}");
    let stream = "5757";

    // Uploads and row read-back land at the right offsets for every element size.
    for dtype in DType::ALL {
        let (rows, cols) = (5, 3);
        let v = values(rows * cols, 1.0);
        let t = d.allocate(rows, cols, dtype, "t").unwrap();
        d.upload(&t, &v).unwrap();
        let got = d.read_rows(&t, &[4, 0, 2]).unwrap();
        let want: Vec<f32> = [4, 0, 2]
            .iter()
            .flat_map(|&r| v[r * cols..(r + 1) * cols].iter().map(|x| dtype.round(*x)))
            .collect();
        assert_eq!(got, want, "{dtype}");
        d.free(t);
    }
    let log = take_log();
    assert!(
        log.lines()
            .filter(|l| l.starts_with("htod") || l.starts_with("dtoh"))
            .all(|l| l.ends_with(&format!("stream={stream}"))),
        "{log}"
    );

    // Linear: out[m, n] = x[m, k] · w[n, k]ᵀ + b, bfloat16, on first use creating the handle and
    // its 32 MiB workspace through the allocator, after the output exists.
    let (m, k, n) = (6usize, 4usize, 8usize);
    let dt = DType::Bfloat16;
    let (xv, wv, bv) = (values(m * k, 1.0), values(n * k, 0.5), values(n, 0.25));
    let x = d.allocate(m, k, dt, "x").unwrap();
    let w = d.allocate(n, k, dt, "w").unwrap();
    let b = d.allocate(1, n, dt, "b").unwrap();
    d.upload(&x, &xv).unwrap();
    d.upload(&w, &wv).unwrap();
    d.upload(&b, &bv).unwrap();
    let out = d.allocate(m, n, dt, "out").unwrap();
    take_log();
    let before = d.stats().all.allocated.current;
    d.linear(&x, &w, &b, &out, false).unwrap();
    assert_eq!(d.stats().all.allocated.current - before, 33_554_432);
    let log = take_log();
    let order: Vec<&str> = log
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        order,
        [
            "cublas_create",
            "cublas_set_stream",
            "cublas_set_math_mode",
            "cublas_set_workspace",
            "launch",
            "gemm"
        ],
        "{log}"
    );
    assert_eq!(fields(&log, "cublas_set_stream")["stream"], stream);
    assert_eq!(fields(&log, "cublas_set_math_mode")["mode"], "0");
    let ws = fields(&log, "cublas_set_workspace");
    assert_eq!(ws["bytes"], "33554432");
    assert_eq!(
        ws["ptr"].parse::<u64>().unwrap() % 256,
        0,
        "workspace alignment"
    );
    let bias = fields(&log, "launch bias_rows_b16");
    let args: Vec<&str> = bias["args"].split(',').collect();
    assert_eq!(args.len(), 4);
    assert_eq!(args[2], (m * n).to_string(), "elements");
    assert_eq!(args[3], n.to_string(), "columns");
    assert_eq!(bias["grid"], "1,1,1");
    assert_eq!(bias["block"], "256,1,1");
    assert_eq!((bias["smem"].as_str(), bias["extra"].as_str()), ("0", "0"));
    assert_eq!(bias["stream"], stream);
    assert_eq!(
        device_bytes(args[0], n * 2),
        encode(&bv, dt),
        "bias pointer"
    );
    let g = fields(&log, "gemm");
    let want = [
        ("ta", "1"),
        ("tb", "0"),
        ("m", "8"),
        ("n", "6"),
        ("k", "4"),
        ("alpha", "1"),
        ("beta", "1"),
        ("at", "14"),
        ("bt", "14"),
        ("ct", "14"),
        ("lda", "4"),
        ("ldb", "4"),
        ("ldc", "8"),
        ("compute", "68"),
        ("algo", "-1"),
    ];
    for (key, value) in want {
        assert_eq!(g[key], value, "gemm {key}: {log}");
    }
    assert_eq!(
        device_bytes(&g["a"], n * k * 2),
        encode(&wv, dt),
        "A is the weight"
    );
    assert_eq!(
        device_bytes(&g["b"], m * k * 2),
        encode(&xv, dt),
        "B is the input"
    );
    assert_eq!(
        g["c"], args[1],
        "C is the output the bias was broadcast into"
    );
    let (c, wsp) = (
        g["c"].parse::<u64>().unwrap(),
        ws["ptr"].parse::<u64>().unwrap(),
    );
    assert!(
        wsp >= c + (m * n * 2) as u64 || wsp + 33_554_432 <= c,
        "workspace overlaps the output"
    );

    // A second product reuses the handle; float32 with --allow-tf32 asks for TF32 compute.
    let f = DType::Float32;
    let (x32, w32, b32, o32) = (
        d.allocate(m, k, f, "x").unwrap(),
        d.allocate(n, k, f, "w").unwrap(),
        d.allocate(1, n, f, "b").unwrap(),
        d.allocate(m, n, f, "o").unwrap(),
    );
    take_log();
    d.linear(&x32, &w32, &b32, &o32, true).unwrap();
    d.linear(&x32, &w32, &b32, &o32, false).unwrap();
    let log = take_log();
    assert!(!log.contains("cublas_create"), "{log}");
    assert!(log.contains("launch bias_rows_b32"), "{log}");
    let gemms: Vec<&str> = log.lines().filter(|l| l.starts_with("gemm")).collect();
    assert!(
        gemms[0].contains(" at=0 ") && gemms[0].contains("compute=77"),
        "{log}"
    );
    assert!(gemms[1].contains("compute=68"), "{log}");

    // GELU and inputs: their parameter lists, element counts, stream.
    let g_out = d.allocate(m, k, dt, "g").unwrap();
    d.gelu(&x, &g_out).unwrap();
    d.fill_inputs(&x, 0xFEED).unwrap();
    d.start_clock().unwrap();
    d.stop_clock().unwrap();
    let log = take_log();
    let gelu = fields(&log, "launch gelu_bf16");
    let ga: Vec<&str> = gelu["args"].split(',').collect();
    assert_eq!(ga.len(), 3);
    assert_eq!(ga[0], g["b"], "GELU reads x");
    assert_eq!(ga[2], (m * k).to_string());
    assert_eq!(gelu["stream"], stream);
    let inputs = fields(&log, "launch inputs_bf16");
    let ia: Vec<&str> = inputs["args"].split(',').collect();
    assert_eq!(ia, [g["b"].as_str(), &(m * k).to_string(), "65261"]);
    let records: Vec<&str> = log.lines().filter(|l| l.starts_with("record")).collect();
    assert_eq!(records.len(), 2, "{log}");
    assert!(
        records
            .iter()
            .all(|l| l.ends_with(&format!("stream={stream}")))
    );
    assert_ne!(
        records[0], records[1],
        "start and stop are different events"
    );

    // Drop: the handle goes before its workspace is freed, every segment before the context.
    for t in [x, w, b, out, x32, w32, b32, o32, g_out] {
        d.free(t);
    }
    drop(d);
    let log = take_log();
    let pos = |what: &str| {
        log.find(what)
            .unwrap_or_else(|| panic!("no {what:?} in:\n{log}"))
    };
    let frees = log.matches("free ptr=").count();
    assert!(frees >= 2, "{log}");
    assert!(pos("cublas_destroy") < pos("free ptr="), "{log}");
    assert!(
        log.rfind("free ptr=").unwrap() < pos("ctx_release"),
        "{log}"
    );
    println!("CHILD DONE");
}
