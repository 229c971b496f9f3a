//! `CudaDevice` against stub libraries: the whole device path (open, allocator over driver
//! segments, kernels, events, the cuBLASLt Linear, cuBLAS failure, out of memory, read-back,
//! drop) runs without a GPU, and with the computing stubs a whole measurement passes its check.
//!
//! The driver is chosen when the process starts (LD_LIBRARY_PATH), so the test re-runs its own
//! binary as a child with the stub folder on the loader path; the child does the work.

use std::path::Path;
use std::process::Command;

use lab::alloc::Action;
use lab::device::{Device, DeviceError};
use lab::dtype::DType;
use lab::measure::config::{MeasureOptions, Plan};
use lab::measure::document::Preflight;
use lab::measure::preflight;
use lab::measure::runner::{self, Mode, RunInfo, Silent};
use lab::tool::ToolInfo;
use lab::workspaces::{
    AddmmPath, CUBLAS_WORKSPACE, CUBLASLT_WORKSPACE, UnifiedWorkspace, WorkspaceOptions,
};
use lab_cuda::{CudaDevice, CudaOptions, KernelChoice};

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
        .arg(src)
        .arg("-lm");
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
    run_child_with(test, defines, &[], &[])
}

/// Runs `test` in a child over stub libraries built with `defines` (driver), `blas_defines`
/// (cuBLAS) and `lt_defines` (cuBLASLt, besides `LT`); the stubs that record write to
/// `$STUB_LOG` in the stub folder.
fn run_child_with(
    test: &str,
    defines: &[&str],
    blas_defines: &[&str],
    lt_defines: &[&str],
) -> String {
    let dir = tempfile::tempdir().unwrap();
    compile(dir.path(), "libcuda.c", "libcuda.so.1", defines);
    let mut lt = vec!["LT"];
    lt.extend_from_slice(lt_defines);
    compile(dir.path(), "libcublas.c", "libcublasLt.so.12", &lt);
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
    let mut d = CudaDevice::open(0, ToolInfo::new(None), &CudaOptions::default())
        .expect("the stub device opens");
    let env = d.environment();
    assert!(env.usable);
    assert_eq!(env.details["kernel_form"], "cubin sm_90");
    assert_eq!(env.details["kernel_form_requested"], "auto");
    let policy = d.memory_policy();
    assert_eq!(policy.cublas_workspace_bytes, 33_554_432);
    assert_eq!(policy.cublaslt_workspace_bytes, 1 << 20);
    assert!(!policy.cublaslt_workspace_unified);

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
    let err = CudaDevice::open(0, ToolInfo::new(None), &CudaOptions::default())
        .expect_err("cuStreamCreate fails in the stub");
    assert_eq!(
        err.to_string(),
        "cuStreamCreate failed: CUDA_ERROR_UNKNOWN (code 999)"
    );
    assert!(!err.is_unavailable());
    println!("CHILD DONE");
}

/// The stub folder's call log, emptied each time it is read.
struct Log(std::ffi::OsString);

impl Log {
    fn new() -> Log {
        Log(std::env::var_os("STUB_LOG").unwrap())
    }

    fn take(&self) -> String {
        let log = std::fs::read_to_string(&self.0).unwrap_or_default();
        std::fs::write(&self.0, "").unwrap();
        log
    }
}

/// The `key=value` fields of the first line of `log` that starts with `prefix`.
fn fields(log: &str, prefix: &str) -> std::collections::HashMap<String, String> {
    fields_of(
        log.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{log}")),
    )
}

fn fields_of(line: &str) -> std::collections::HashMap<String, String> {
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

/// The first word of every line: the calls in order.
fn calls(log: &str) -> Vec<&str> {
    log.lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect()
}

const HOSTMEM: [&str; 5] = [
    "FULL",
    "WITH_V2",
    "HOSTMEM",
    "EXECUTE",
    "MEMORY_BUDGET=(256UL<<20)",
];

#[test]
fn every_argument_reaches_the_driver_cublas_and_cublaslt_as_the_headers_expect() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child_with(
            "every_argument_reaches_the_driver_cublas_and_cublaslt_as_the_headers_expect",
            &HOSTMEM,
            &["RECORD"],
            &["RECORD", "COMPUTE"],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let log = Log::new();
    let mut d = CudaDevice::open(0, ToolInfo::new(None), &CudaOptions::default())
        .expect("the stub device opens");
    d.enable_allocation_trace();
    let opened = log.take();
    assert!(
        opened.contains("stream_create flags=1"),
        "non-blocking stream:\n{opened}"
    );
    assert_eq!(
        opened.matches("event_create flags=0").count(),
        2,
        "{opened}"
    );
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
    let copies = log.take();
    assert!(
        copies
            .lines()
            .filter(|l| l.starts_with("htod") || l.starts_with("dtoh"))
            .all(|l| l.ends_with(&format!("stream={stream}"))),
        "{copies}"
    );

    // Linear: out[m, n] = x[m, k] · w[n, k]ᵀ + b in bfloat16: one cuBLASLt matmul with the bias
    // epilogue; the first one creates the handle and both workspaces through the allocator,
    // after the output exists, cuBLAS's first.
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
    log.take();
    let traced = d.allocation_trace().len();
    let before = d.stats().all.allocated.current;
    d.linear(&x, &w, &b, &out, false).unwrap();
    assert_eq!(
        d.stats().all.allocated.current - before,
        33_554_432 + 1_048_576
    );
    let new: Vec<(Action, &str, u64)> = d.allocation_trace()[traced..]
        .iter()
        .map(|e| (e.action, e.what.as_str(), e.requested_bytes))
        .collect();
    assert_eq!(
        new,
        [
            (Action::Allocate, CUBLAS_WORKSPACE, 33_554_432),
            (Action::Allocate, CUBLASLT_WORKSPACE, 1_048_576)
        ]
    );
    let first = log.take();
    assert_eq!(
        calls(&first),
        [
            "cublas_create",
            "cublas_set_stream",
            "cublas_set_workspace",
            "cublas_set_math_mode",
            "lt_pref_create",
            "lt_desc_create",
            "lt_desc_set",
            "lt_desc_set",
            "lt_desc_set",
            "lt_desc_set",
            "lt_layout_create",
            "lt_layout_create",
            "lt_layout_create",
            "lt_pref_set",
            "lt_pref_set",
            "lt_pref_set",
            "lt_pref_set",
            "lt_pref_set",
            "lt_heuristic",
            "lt_matmul",
            "lt_layout_destroy",
            "lt_layout_destroy",
            "lt_layout_destroy",
            "lt_desc_destroy",
            "lt_pref_destroy",
        ],
        "{first}"
    );
    assert_eq!(fields(&first, "cublas_set_stream")["stream"], stream);
    assert_eq!(fields(&first, "cublas_set_math_mode")["mode"], "0");
    let ws = fields(&first, "cublas_set_workspace");
    assert_eq!(ws["bytes"], "33554432");
    let desc = fields(&first, "lt_desc_create");
    assert_eq!(
        (desc["compute"].as_str(), desc["scale"].as_str()),
        ("68", "0"),
        "COMPUTE_32F, scale CUDA_R_32F"
    );
    let sets: Vec<(String, String, String)> = first
        .lines()
        .filter(|l| l.starts_with("lt_desc_set"))
        .map(fields_of)
        .map(|f| (f["attr"].clone(), f["size"].clone(), f["value"].clone()))
        .collect();
    let bias_ptr = sets[3].2.clone();
    assert_eq!(
        sets,
        [
            ("3".into(), "4".into(), "1".into()), // TRANSA = T (the weight)
            ("4".into(), "4".into(), "0".into()), // TRANSB = N (the input)
            ("7".into(), "4".into(), "4".into()), // EPILOGUE = BIAS
            ("8".into(), "8".into(), bias_ptr.clone()), // BIAS_POINTER
        ]
    );
    assert_eq!(device_bytes(&bias_ptr, n * 2), encode(&bv, dt), "the bias");
    let layouts: Vec<(String, String, String, String)> = first
        .lines()
        .filter(|l| l.starts_with("lt_layout_create"))
        .map(fields_of)
        .map(|f| {
            (
                f["type"].clone(),
                f["rows"].clone(),
                f["cols"].clone(),
                f["ld"].clone(),
            )
        })
        .collect();
    let l = |r: usize, c: usize, ld: usize| {
        (
            "14".to_string(),
            r.to_string(),
            c.to_string(),
            ld.to_string(),
        )
    };
    // A = the weight, k x n (m of cuBLASLt = out features) created transposed; B = the input;
    // C = D = the output, n x m column-major.
    assert_eq!(layouts, [l(k, n, k), l(k, m, k), l(n, m, n)]);
    let prefs: Vec<(String, String, String)> = first
        .lines()
        .filter(|l| l.starts_with("lt_pref_set"))
        .map(fields_of)
        .map(|f| (f["attr"].clone(), f["size"].clone(), f["value"].clone()))
        .collect();
    assert_eq!(
        prefs[0],
        ("1".into(), "8".into(), "1048576".into()),
        "MAX_WORKSPACE_BYTES = the cuBLASLt workspace"
    );
    for (i, p) in prefs[1..].iter().enumerate() {
        assert_eq!(p.0, (5 + i).to_string(), "MIN_ALIGNMENT_{{A,B,C,D}}");
        assert_eq!((p.1.as_str(), p.2.as_str()), ("4", "256"));
    }
    let h = fields(&first, "lt_heuristic");
    let mm = fields(&first, "lt_matmul");
    assert_eq!(
        h["handle"], "b1a5",
        "the cuBLAS handle serves as the Lt handle"
    );
    assert_eq!(mm["handle"], "b1a5");
    assert_eq!(h["requested"], "1");
    assert_eq!(h["desc"], desc["desc"]);
    assert_eq!(h["c"], h["d"], "C and D share a layout");
    assert_eq!(
        (
            mm["adesc"].as_str(),
            mm["bdesc"].as_str(),
            mm["cdesc"].as_str(),
            mm["ddesc"].as_str()
        ),
        (
            h["a"].as_str(),
            h["b"].as_str(),
            h["c"].as_str(),
            h["d"].as_str()
        )
    );
    assert_eq!(mm["algo"], "a160", "the heuristic's algorithm");
    assert_eq!((mm["alpha"].as_str(), mm["beta"].as_str()), ("1", "0"));
    assert_eq!(mm["stream"], stream);
    assert_eq!(mm["ws_bytes"], "1048576");
    assert_eq!(
        device_bytes(&mm["a"], n * k * 2),
        encode(&wv, dt),
        "A is the weight"
    );
    assert_eq!(
        device_bytes(&mm["b"], m * k * 2),
        encode(&xv, dt),
        "B is the input"
    );
    assert_eq!(mm["c"], mm["d"], "C and D are the output");
    let (c, cublas_ws, lt_ws) = (
        mm["c"].parse::<u64>().unwrap(),
        ws["ptr"].parse::<u64>().unwrap(),
        mm["ws"].parse::<u64>().unwrap(),
    );
    let disjoint = |a: u64, la: u64, b: u64, lb: u64| a + la <= b || b + lb <= a;
    assert!(disjoint(c, (m * n * 2) as u64, cublas_ws, 33_554_432));
    assert!(disjoint(c, (m * n * 2) as u64, lt_ws, 1_048_576));
    assert!(disjoint(cublas_ws, 33_554_432, lt_ws, 1_048_576));
    assert_eq!(lt_ws % 256, 0, "workspace alignment");
    // The product itself (the stub computes what cuBLASLt documents for these arguments).
    let got = d.read_rows(&out, &(0..m).collect::<Vec<_>>()).unwrap();
    for r in 0..m {
        for o in 0..n {
            let want: f32 = (0..k)
                .map(|i| dt.round(xv[r * k + i]) * dt.round(wv[o * k + i]))
                .sum::<f32>()
                + dt.round(bv[o]);
            let g = got[r * n + o];
            assert!(
                (g - want).abs() <= 0.02 * want.abs().max(1.0),
                "[{r},{o}] {g} vs {want}"
            );
        }
    }

    // A second product reuses the handle and the workspaces; --allow-tf32 asks for TF32 in the
    // descriptor and in the handle's math mode, float32 strict goes back to the defaults.
    let f = DType::Float32;
    let (x32, w32, b32, o32) = (
        d.allocate(m, k, f, "x").unwrap(),
        d.allocate(n, k, f, "w").unwrap(),
        d.allocate(1, n, f, "b").unwrap(),
        d.allocate(m, n, f, "o").unwrap(),
    );
    log.take();
    let traced = d.allocation_trace().len();
    d.linear(&x32, &w32, &b32, &o32, true).unwrap();
    let tf32 = log.take();
    d.linear(&x32, &w32, &b32, &o32, false).unwrap();
    let strict = log.take();
    assert_eq!(d.allocation_trace().len(), traced, "no new workspace");
    assert!(!tf32.contains("cublas_create"), "{tf32}");
    assert_eq!(fields(&tf32, "cublas_set_math_mode")["mode"], "3");
    assert_eq!(fields(&tf32, "lt_desc_create")["compute"], "77");
    assert_eq!(fields(&strict, "cublas_set_math_mode")["mode"], "0");
    assert_eq!(fields(&strict, "lt_desc_create")["compute"], "68");
    assert_eq!(fields(&strict, "lt_layout_create")["type"], "0");
    assert_eq!(
        fields(&strict, "cublas_set_workspace")["ptr"],
        ws["ptr"],
        "the same cuBLAS workspace"
    );
    assert_eq!(
        fields(&strict, "lt_matmul")["ws"],
        mm["ws"],
        "the same cuBLASLt workspace"
    );

    // GELU and inputs: their parameter lists, element counts, stream.
    let g_out = d.allocate(m, k, dt, "g").unwrap();
    d.gelu(&x, &g_out).unwrap();
    d.fill_inputs(&x, 0xFEED).unwrap();
    d.start_clock().unwrap();
    d.stop_clock().unwrap();
    let rest = log.take();
    let gelu = fields(&rest, "launch gelu_bf16");
    let ga: Vec<&str> = gelu["args"].split(',').collect();
    assert_eq!(ga[0], mm["b"], "GELU reads x");
    assert_eq!(ga[2], (m * k).to_string());
    assert_eq!(gelu["stream"], stream);
    assert_eq!(
        (gelu["grid"].as_str(), gelu["block"].as_str()),
        ("1,1,1", "256,1,1")
    );
    let inputs = fields(&rest, "launch inputs_bf16");
    let ia: Vec<&str> = inputs["args"].split(',').collect();
    assert_eq!(ia, [mm["b"].as_str(), &(m * k).to_string(), "65261"]);
    let records: Vec<&str> = rest.lines().filter(|l| l.starts_with("record")).collect();
    assert_eq!(records.len(), 2, "{rest}");
    assert!(
        records
            .iter()
            .all(|l| l.ends_with(&format!("stream={stream}")))
    );
    assert_ne!(
        records[0], records[1],
        "start and stop are different events"
    );

    // Drop: the handle goes before its workspaces are freed, every segment before the context.
    for t in [x, w, b, out, x32, w32, b32, o32, g_out] {
        d.free(t);
    }
    drop(d);
    let teardown = log.take();
    let pos = |what: &str| {
        teardown
            .find(what)
            .unwrap_or_else(|| panic!("no {what:?} in:\n{teardown}"))
    };
    // Two segments: the cuBLAS workspace's own, and the small one holding everything else.
    assert_eq!(teardown.matches("free ptr=").count(), 2, "{teardown}");
    assert!(pos("cublas_destroy") < pos("free ptr="), "{teardown}");
    assert!(
        teardown.rfind("free ptr=").unwrap() < pos("ctx_release"),
        "{teardown}"
    );
    println!("CHILD DONE");
}

#[test]
fn no_algorithm_from_the_heuristic_is_a_device_error() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child_with(
            "no_algorithm_from_the_heuristic_is_a_device_error",
            &HOSTMEM,
            &["RECORD"],
            &["RECORD", "NO_ALGO"],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let log = Log::new();
    let mut d = CudaDevice::open(0, ToolInfo::new(None), &CudaOptions::default()).unwrap();
    let x = d.allocate(4, 4, DType::Float16, "x").unwrap();
    let w = d.allocate(4, 4, DType::Float16, "w").unwrap();
    let b = d.allocate(1, 4, DType::Float16, "b").unwrap();
    let o = d.allocate(4, 4, DType::Float16, "o").unwrap();
    log.take();
    match d.linear(&x, &w, &b, &o, false) {
        Err(DeviceError::Backend(msg)) => assert_eq!(
            msg,
            "cublasLtMatmulAlgoGetHeuristic failed: CUBLAS_STATUS_NOT_SUPPORTED (no algorithm for \
             this matmul) (status 15)"
        ),
        other => panic!("expected a cuBLASLt error, got {other:?}"),
    }
    let calls_made = log.take();
    assert!(!calls_made.contains("lt_matmul"), "{calls_made}");
    // Whatever was created is destroyed.
    assert_eq!(
        calls_made.matches("lt_layout_destroy").count(),
        3,
        "{calls_made}"
    );
    assert!(calls_made.contains("lt_desc_destroy") && calls_made.contains("lt_pref_destroy"));
    println!("CHILD DONE");
}

fn plan(batch: usize, context: usize, width: usize, dtype: DType) -> Plan {
    Plan::new(MeasureOptions {
        device: "cuda:0".into(),
        batch,
        context,
        width,
        hidden: None,
        dtype,
        warmup: 2,
        repeats: 2,
        seed: 3,
        allow_tf32: false,
    })
    .unwrap()
}

fn run_info() -> RunInfo {
    RunInfo {
        tool: ToolInfo::new(None),
        started_utc: "2026-12-01T00:00:00Z".into(),
        device_init_seconds: 0.0,
        preflight: Preflight {
            estimated_peak_reserved_bytes: 0,
            device_free_bytes: None,
        },
    }
}

#[test]
fn a_whole_run_on_the_stub_gpu_passes_its_check_and_counts_what_the_plan_predicts() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child_with(
            "a_whole_run_on_the_stub_gpu_passes_its_check_and_counts_what_the_plan_predicts",
            &HOSTMEM,
            &["RECORD", "COMPUTE"],
            &["RECORD", "COMPUTE"],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let unified = WorkspaceOptions {
        cublas_bytes: Some(4 << 20),
        unified: UnifiedWorkspace::Unified,
        ..Default::default()
    };
    let none = WorkspaceOptions {
        cublas_bytes: Some(0),
        cublaslt_bytes: Some(0),
        ..Default::default()
    };
    // A cuBLAS workspace below the cuBLASLt one: unset caps the separate cuBLASLt block at
    // 512 KiB, 0 keeps it at 1 MiB.
    let small = |unified| WorkspaceOptions {
        cublas_bytes: Some(512 << 10),
        unified,
        ..Default::default()
    };
    let disabled = WorkspaceOptions {
        addmm_cuda_lt_disabled: true,
        ..Default::default()
    };
    let d = WorkspaceOptions::default();
    let cases = [
        ((2, 8, 32), DType::Float32, d, KernelChoice::Auto),
        ((2, 8, 32), DType::Float16, d, KernelChoice::Ptx),
        ((2, 8, 32), DType::Bfloat16, unified, KernelChoice::Cubin),
        ((2, 8, 32), DType::Float32, none, KernelChoice::Auto),
        (
            (2, 8, 32),
            DType::Float32,
            small(UnifiedWorkspace::Unset),
            KernelChoice::Auto,
        ),
        (
            (2, 8, 32),
            DType::Bfloat16,
            small(UnifiedWorkspace::Separate),
            KernelChoice::Auto,
        ),
        ((2, 8, 32), DType::Float16, disabled, KernelChoice::Auto),
        // torch's cublasGemmEx path: one row, and a width of 1.
        ((1, 1, 64), DType::Float32, d, KernelChoice::Auto),
        ((1, 1, 64), DType::Bfloat16, d, KernelChoice::Auto),
        ((2, 8, 1), DType::Float16, d, KernelChoice::Auto),
    ];
    let log = Log::new();
    for ((b, c, w), dtype, workspaces, kernel_form) in cases {
        let options = CudaOptions {
            kernel_form,
            workspaces,
        };
        log.take();
        let mut d = CudaDevice::open(0, ToolInfo::new(None), &options).unwrap();
        d.enable_allocation_trace();
        let plan = plan(b, c, w, dtype);
        let doc = runner::run(&mut d, &plan, run_info(), Mode::Measure, &mut Silent);
        let what = format!("{b}x{c}x{w} {dtype} {workspaces:?} {kernel_form}");
        assert!(doc.complete, "{what}: {:?}", doc.error);
        let check = doc.check.as_ref().unwrap();
        assert!(check.passed, "{what}: {check:?}");
        let policy = d.memory_policy();
        assert_eq!(
            doc.configuration.memory_policy,
            policy.clone().with_linear_paths(&plan.linears(), dtype)
        );
        let lt = doc.configuration.memory_policy.uses_cublaslt();
        assert_eq!(
            lt,
            b * c > 1 && w > 1 && !workspaces.addmm_cuda_lt_disabled,
            "{what}"
        );
        let paths: Vec<AddmmPath> = doc
            .configuration
            .memory_policy
            .linear_paths
            .iter()
            .map(|l| l.path)
            .collect();
        let path = if lt {
            AddmmPath::CublasLt
        } else {
            AddmmPath::Cublas
        };
        assert_eq!(paths, [path, path], "{what}");
        let form = doc.environment.details["kernel_form"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            form == "ptx-jit",
            kernel_form == KernelChoice::Ptx,
            "{what}: {form}"
        );
        // The plan, made without a device, predicts every counter of every phase and the
        // allocation sequence the device really made.
        let planned = preflight::plan_run(&plan, &policy);
        assert_eq!(planned.phases.len(), doc.phases.len());
        for (p, r) in planned.phases.iter().zip(&doc.phases) {
            let (pm, rm) = (&p.memory, &r.memory);
            assert_eq!(
                [
                    pm.baseline_allocated_bytes,
                    pm.end_allocated_bytes,
                    pm.peak_allocated_bytes,
                    pm.baseline_reserved_bytes,
                    pm.end_reserved_bytes,
                    pm.peak_reserved_bytes,
                ],
                [
                    rm.baseline_allocated_bytes,
                    rm.end_allocated_bytes,
                    rm.peak_allocated_bytes,
                    rm.baseline_reserved_bytes,
                    rm.end_reserved_bytes,
                    rm.peak_reserved_bytes,
                ],
                "{what}: {:?}[{}]",
                r.phase,
                r.index
            );
        }
        let traced = d.allocation_trace();
        let events: Vec<_> = planned.allocations.iter().map(|a| &a.event).collect();
        assert_eq!(events, traced.iter().collect::<Vec<_>>(), "{what}");
        let ws: Vec<(&str, u64)> = traced
            .iter()
            .filter(|e| e.what.contains("workspace"))
            .map(|e| (e.what.as_str(), e.requested_bytes))
            .collect();
        let cublas = workspaces.cublas_bytes.unwrap_or(33_554_432);
        let lt_bytes = match workspaces.unified {
            UnifiedWorkspace::Separate => 1 << 20,
            _ => (1u64 << 20).min(cublas),
        };
        let mut expected = Vec::new();
        if cublas > 0 {
            expected.push((CUBLAS_WORKSPACE, cublas));
        }
        if lt && workspaces.unified != UnifiedWorkspace::Unified && lt_bytes > 0 {
            expected.push((CUBLASLT_WORKSPACE, lt_bytes));
        }
        assert_eq!(ws, expected, "{what}");
        // Per Linear either one cuBLASLt matmul with the bias epilogue, or the bias broadcast
        // and one cublasGemmEx: 2 products per pass, 1 cold + 2 warm-up + 2 timed passes.
        let calls = log.take();
        let (lt_calls, gemm_calls) = if lt { (10, 0) } else { (0, 10) };
        assert_eq!(calls.matches("lt_matmul ").count(), lt_calls, "{what}");
        assert_eq!(
            calls.matches("attr=7 size=4 value=4").count(),
            lt_calls,
            "{what}"
        );
        assert_eq!(calls.matches("gemm_ex ").count(), gemm_calls, "{what}");
        assert_eq!(
            calls.matches("beta=1 ").count(),
            gemm_calls,
            "{what}: beta = 1"
        );
        assert_eq!(
            calls.matches("launch bias_rows_").count(),
            gemm_calls,
            "{what}"
        );
        assert_eq!(calls.matches("cublas_create").count(), 1, "{what}");
        let kernels: std::collections::BTreeSet<&str> = calls
            .lines()
            .filter_map(|l| l.strip_prefix("launch "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            kernels.len(),
            if lt { 2 } else { 3 },
            "inputs and GELU (and the bias broadcast): {kernels:?}"
        );
        assert!(kernels.iter().all(|k| k.starts_with("inputs_")
            || k.starts_with("gelu_")
            || k.starts_with("bias_rows_")));
    }
    println!("CHILD DONE");
}

/// A Linear that torch 2.11 keeps off the cuBLASLt path (a dimension of 1): the bias copied into
/// the output by our kernel first, then one cublasGemmEx with beta = 1 and the arguments
/// cublasCommonArgs gives; no cuBLASLt call and no cuBLASLt workspace, which the first product on
/// the cuBLASLt path then allocates.
#[test]
fn a_linear_with_a_dimension_of_1_copies_the_bias_then_runs_cublas_gemm_ex() {
    if std::env::var_os(CHILD).is_none() {
        let stdout = run_child_with(
            "a_linear_with_a_dimension_of_1_copies_the_bias_then_runs_cublas_gemm_ex",
            &HOSTMEM,
            &["RECORD", "COMPUTE"],
            &["RECORD", "COMPUTE"],
        );
        assert!(stdout.contains("CHILD DONE"), "{stdout}");
        return;
    }
    let log = Log::new();
    let mut d = CudaDevice::open(0, ToolInfo::new(None), &CudaOptions::default()).unwrap();
    d.enable_allocation_trace();
    let stream = "5757";

    // linear1 of --batch 1 --context 1 --width 64: x [1, 64], W [256, 64], bfloat16.
    let (m, k, n) = (1usize, 64usize, 256usize);
    let dt = DType::Bfloat16;
    let (xv, wv, bv) = (values(m * k, 0.05), values(n * k, 0.01), values(n, 0.25));
    let x = d.allocate(m, k, dt, "x").unwrap();
    let w = d.allocate(n, k, dt, "w").unwrap();
    let b = d.allocate(1, n, dt, "b").unwrap();
    d.upload(&x, &xv).unwrap();
    d.upload(&w, &wv).unwrap();
    d.upload(&b, &bv).unwrap();
    let out = d.allocate(m, n, dt, "out").unwrap();
    log.take();
    let traced = d.allocation_trace().len();
    d.linear(&x, &w, &b, &out, false).unwrap();
    let new: Vec<(Action, &str, u64)> = d.allocation_trace()[traced..]
        .iter()
        .map(|e| (e.action, e.what.as_str(), e.requested_bytes))
        .collect();
    assert_eq!(
        new,
        [(Action::Allocate, CUBLAS_WORKSPACE, 33_554_432)],
        "the cuBLAS workspace only"
    );
    let first = log.take();
    assert_eq!(
        calls(&first),
        [
            "launch",
            "cublas_create",
            "cublas_set_stream",
            "cublas_set_workspace",
            "cublas_set_math_mode",
            "cublas_set_math_mode",
            "gemm_ex",
            "cublas_set_math_mode",
        ],
        "{first}"
    );
    let launch = fields(&first, "launch bias_rows_b16");
    let g = fields(&first, "gemm_ex");
    let la: Vec<&str> = launch["args"].split(',').collect();
    assert_eq!(la[1], g["c"], "the bias is copied into the output");
    assert_eq!((la[2], la[3]), ("256", "256"), "n = rows x cols, cols");
    assert_eq!(device_bytes(la[0], n * 2), encode(&bv, dt), "from the bias");
    assert_eq!(launch["stream"], stream);
    let got = |key: &str| g[key].as_str();
    assert_eq!(
        [
            got("transa"),
            got("transb"),
            got("m"),
            got("n"),
            got("k"),
            got("lda"),
            got("ldb"),
            got("ldc")
        ],
        ["1", "0", "256", "1", "64", "64", "64", "256"],
        "T, N, m = out, n = rows, k = in, lda = ldb = in, ldc = out"
    );
    assert_eq!(
        [got("atype"), got("btype"), got("ctype")],
        ["14", "14", "14"]
    );
    assert_eq!(
        [got("compute"), got("algo")],
        ["68", "99"],
        "CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP"
    );
    assert_eq!([got("alpha"), got("beta")], ["1", "1"]);
    assert_eq!(g["handle"], "b1a5");
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
    let modes: Vec<String> = first
        .lines()
        .filter(|l| l.starts_with("cublas_set_math_mode"))
        .map(|l| fields_of(l)["mode"].clone())
        .collect();
    assert_eq!(
        modes,
        ["0", "0", "0"],
        "CUBLAS_DEFAULT_MATH around a half GEMM"
    );
    let result = d.read_rows(&out, &[0]).unwrap();
    for o in 0..n {
        let want: f32 = (0..k)
            .map(|i| dt.round(xv[i]) * dt.round(wv[o * k + i]))
            .sum::<f32>()
            + dt.round(bv[o]);
        assert!(
            (result[o] - want).abs() <= 0.02 * want.abs().max(1.0),
            "[{o}] {} vs {want}",
            result[o]
        );
    }

    // A width of 1 in float32 with TF32 allowed: x [16, 1] · W[4, 1]ᵀ and [16, 4] · W[1, 4]ᵀ; the
    // transposed weights are contiguous, so neither is transposed for cuBLAS.
    let f = DType::Float32;
    for (rows, i, o, want) in [
        (
            16usize,
            1usize,
            4usize,
            ["0", "0", "4", "16", "1", "4", "1", "4"],
        ),
        (16, 4, 1, ["0", "0", "1", "16", "4", "1", "4", "1"]),
    ] {
        let (xv, wv, bv) = (values(rows * i, 1.0), values(o * i, 0.5), values(o, 0.25));
        let x = d.allocate(rows, i, f, "x").unwrap();
        let w = d.allocate(o, i, f, "w").unwrap();
        let b = d.allocate(1, o, f, "b").unwrap();
        let y = d.allocate(rows, o, f, "y").unwrap();
        d.upload(&x, &xv).unwrap();
        d.upload(&w, &wv).unwrap();
        d.upload(&b, &bv).unwrap();
        log.take();
        let traced = d.allocation_trace().len();
        d.linear(&x, &w, &b, &y, true).unwrap();
        assert_eq!(d.allocation_trace().len(), traced, "no new workspace");
        let calls_made = log.take();
        assert!(!calls_made.contains("lt_"), "{calls_made}");
        assert!(calls_made.contains("launch bias_rows_b32"), "{calls_made}");
        let g = fields(&calls_made, "gemm_ex");
        let got: Vec<&str> = ["transa", "transb", "m", "n", "k", "lda", "ldb", "ldc"]
            .iter()
            .map(|key| g[*key].as_str())
            .collect();
        assert_eq!(got, want, "{rows}x{i}x{o}");
        assert_eq!(
            (
                g["compute"].as_str(),
                g["algo"].as_str(),
                g["atype"].as_str()
            ),
            ("77", "-1", "0"),
            "TF32 allowed, CUBLAS_GEMM_DEFAULT, CUDA_R_32F"
        );
        assert_eq!(
            calls_made.matches("cublas_set_math_mode").count(),
            1,
            "float32: only the handle's math mode"
        );
        assert_eq!(fields(&calls_made, "cublas_set_math_mode")["mode"], "3");
        let result = d.read_rows(&y, &(0..rows).collect::<Vec<_>>()).unwrap();
        for r in 0..rows {
            for c in 0..o {
                let want: f32 = (0..i).map(|p| xv[r * i + p] * wv[c * i + p]).sum::<f32>() + bv[c];
                let got = result[r * o + c];
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "[{r},{c}] {got} vs {want}"
                );
            }
        }
        for t in [x, w, b, y] {
            d.free(t);
        }
    }

    // The first product on the cuBLASLt path allocates the cuBLASLt workspace then, not before.
    let x2 = d.allocate(2, k, dt, "x").unwrap();
    let o2 = d.allocate(2, n, dt, "o").unwrap();
    log.take();
    let traced = d.allocation_trace().len();
    d.linear(&x2, &w, &b, &o2, false).unwrap();
    let new: Vec<(&str, u64)> = d.allocation_trace()[traced..]
        .iter()
        .map(|e| (e.what.as_str(), e.requested_bytes))
        .collect();
    assert_eq!(new, [(CUBLASLT_WORKSPACE, 1 << 20)]);
    let lt = log.take();
    assert!(
        lt.contains("lt_matmul") && lt.contains("attr=7 size=4 value=4"),
        "{lt}"
    );
    assert!(!lt.contains("gemm_ex") && !lt.contains("bias_rows"), "{lt}");
    for t in [x, w, b, out, x2, o2] {
        d.free(t);
    }
    drop(d);
    println!("CHILD DONE");
}
