//! `kernels/lab.cu` compiled for the host and compared with the Rust reference, bit for bit.
//!
//! No GPU is needed: the kernels' source after the conversion helpers (generator, GELU and every
//! kernel's grid-stride loop) is compiled with g++ under a shim that defines
//! `__device__`/`__global__` away, emulates a launch by running every (block, thread) of a grid
//! in turn, and supplies host conversions with the same rounding (nearest even) as the PTX `cvt.rn`
//! the helpers use. A wrong constant, shift, key, index or launch shape shows here, before any GPU
//! run. The helpers themselves are inline PTX: a separate check pins their rounding mode.

use std::ffi::c_void;
use std::path::Path;
use std::process::Command;

use lab::dtype::DType;
use lab::measure::check::gelu64;
use lab::measure::synthetic::input_value;

use crate::kernels::launch_shape;

/// The kernels' source, as embedded at build time.
const SOURCE: &str = include_str!("../../../kernels/lab.cu");
/// Where the inline-PTX helpers end and the portable part begins.
const MARKER: &str = "// ---- Seeded inputs";

/// Host stand-ins for what the portable part uses from CUDA and from the helpers above MARKER.
const SHIM_HEAD: &str = r#"
#include <cmath>
#include <cstring>
typedef unsigned long long u64;
typedef unsigned short u16;
#define __device__
#define __forceinline__ inline
#define __global__
struct Dim { unsigned int x; };
static Dim blockIdx, threadIdx, blockDim, gridDim;
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline unsigned int bits_of(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float float_of(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float f16_to_f32(u16 h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }
static inline u16 f32_to_f16(float f) { _Float16 v = (_Float16)f; u16 h; memcpy(&h, &v, 2); return h; }
static inline float bf16_to_f32(u16 h) { return float_of(((unsigned int)h) << 16); }
static inline u16 f32_to_bf16(float f) {
    unsigned int u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
"#;

/// Launch emulation: every thread of a `grid x block` launch runs the kernel body in turn.
const SHIM_TAIL: &str = r#"
template <class F> static void launch(unsigned g, unsigned b, F body) {
    gridDim.x = g; blockDim.x = b;
    for (unsigned i = 0; i < g; ++i) for (unsigned t = 0; t < b; ++t) {
        blockIdx.x = i; threadIdx.x = t; body();
    }
}
#define HOST1(k, T) extern "C" void host_##k(unsigned g, unsigned b, T* out, u64 n, u64 s) { launch(g, b, [&] { k(out, n, s); }); }
#define HOST2(k, T) extern "C" void host_##k(unsigned g, unsigned b, const T* x, T* y, u64 n) { launch(g, b, [&] { k(x, y, n); }); }
HOST1(inputs_f32, float) HOST1(inputs_f16, u16) HOST1(inputs_bf16, u16)
HOST2(gelu_f32, float) HOST2(gelu_f16, u16) HOST2(gelu_bf16, u16)
extern "C" float host_input_value(u64 seed, u64 i) { return input_value(mix64(seed), i); }
"#;

type InputsFn = unsafe extern "C" fn(u32, u32, *mut c_void, u64, u64);
type GeluFn = unsafe extern "C" fn(u32, u32, *const c_void, *mut c_void, u64);
type ValueFn = unsafe extern "C" fn(u64, u64) -> f32;

struct HostKernels {
    lib: libloading::Library,
    _dir: tempfile::TempDir,
}

impl HostKernels {
    fn build() -> HostKernels {
        let at = SOURCE
            .find(MARKER)
            .expect("lab.cu keeps its section marker");
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lab_host.cpp");
        std::fs::write(&src, format!("{SHIM_HEAD}\n{}\n{SHIM_TAIL}", &SOURCE[at..])).unwrap();
        let so = dir.path().join("liblab_host.so");
        let out = Command::new("g++")
            .args([
                "-std=c++17",
                "-O1",
                "-ffp-contract=off",
                "-shared",
                "-fPIC",
                "-o",
            ])
            .arg(&so)
            .arg(&src)
            .output()
            .expect("g++ must be installed to compile kernels/lab.cu for the host");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // SAFETY: a library we just built; its initialisers are the C++ runtime's.
        let lib = unsafe { libloading::Library::new(Path::new(&so)) }.unwrap();
        HostKernels { lib, _dir: dir }
    }

    fn get<T: Copy>(&self, name: &str) -> T {
        // SAFETY: the test names each symbol with the prototype the shim's macros give it.
        unsafe {
            *self
                .lib
                .get::<T>(format!("host_{name}").as_bytes())
                .unwrap()
        }
    }
}

fn suffix(d: DType) -> &'static str {
    match d {
        DType::Float32 => "f32",
        DType::Float16 => "f16",
        DType::Bfloat16 => "bf16",
    }
}

/// Element `i` of a kernel's output buffer, as f32.
fn element(buf: &[u8], d: DType, i: usize) -> f32 {
    let s = d.size_bytes() as usize;
    crate::device::decode(&buf[i * s..(i + 1) * s], d)[0]
}

/// Launch shapes to emulate for `n` elements: the device's own, and a small grid that makes
/// every thread stride several times.
fn shapes(n: u64) -> [(u32, u32); 2] {
    [launch_shape(n), (3, 32)]
}

#[test]
fn conversion_helpers_round_to_nearest_even() {
    let helpers = &SOURCE[..SOURCE.find(MARKER).unwrap()];
    assert!(helpers.contains("cvt.rn.f16.f32"));
    assert!(helpers.contains("cvt.rn.bf16.f32"));
    assert!(helpers.contains("cvt.f32.f16"));
    assert!(helpers.contains("((unsigned int)h) << 16"));
}

#[test]
fn input_kernels_reproduce_the_rust_generator_bit_for_bit() {
    let k = HostKernels::build();
    for d in DType::ALL {
        let f: InputsFn = k.get(&format!("inputs_{}", suffix(d)));
        for seed in [0u64, 1, 42, 0xDEAD_BEEF_F00D_u64, u64::MAX] {
            let n = 3000u64;
            for (grid, block) in shapes(n) {
                let mut buf = vec![0u8; n as usize * d.size_bytes() as usize];
                // SAFETY: `buf` holds n elements of the dtype.
                unsafe { f(grid, block, buf.as_mut_ptr().cast(), n, seed) };
                for i in 0..n as usize {
                    let want = d.round(input_value(seed, i as u64));
                    let got = element(&buf, d, i);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{d} seed {seed} element {i} (grid {grid}x{block})"
                    );
                }
            }
        }
    }
}

#[test]
fn the_generator_uses_the_whole_64_bit_index() {
    // Tensors of the large case index past 2^32 elements: the device's `input_value` must agree
    // there too (a 32-bit index would repeat values).
    let k = HostKernels::build();
    let f: ValueFn = k.get("input_value");
    for seed in [0u64, 7, u64::MAX] {
        for i in [
            (1u64 << 31) - 1,
            1 << 31,
            (1 << 32) + 12_345,
            (1 << 40) + 3,
            u64::MAX,
        ] {
            // SAFETY: a pure function of two integers.
            let got = unsafe { f(seed, i) };
            assert_eq!(
                got.to_bits(),
                input_value(seed, i).to_bits(),
                "seed {seed} index {i}"
            );
        }
    }
}

#[test]
fn gelu_kernels_compute_the_exact_erf_form_in_float32() {
    let k = HostKernels::build();
    let xs: Vec<f32> = (0..2001).map(|i| (i as f32 - 1000.0) / 125.0).collect();
    for d in DType::ALL {
        let f: GeluFn = k.get(&format!("gelu_{}", suffix(d)));
        let x = crate::device::encode(&xs, d);
        for (grid, block) in shapes(xs.len() as u64) {
            let mut y = vec![0u8; x.len()];
            // SAFETY: both buffers hold xs.len() elements of the dtype.
            unsafe {
                f(
                    grid,
                    block,
                    x.as_ptr().cast(),
                    y.as_mut_ptr().cast(),
                    xs.len() as u64,
                )
            };
            for (i, &v) in xs.iter().enumerate() {
                let xv = f64::from(d.round(v));
                let exact = gelu64(xv);
                let got = f64::from(element(&y, d, i));
                // float32 arithmetic (a few ulp, and `1 + erf` cancels for negative x, as in
                // PyTorch's float32 GELU), then one rounding to the dtype (half an ulp).
                let relative = match d {
                    DType::Float32 => 8.0 * f64::from(f32::EPSILON),
                    DType::Float16 => 2f64.powi(-11) + 8.0 * f64::from(f32::EPSILON),
                    DType::Bfloat16 => 2f64.powi(-8) + 8.0 * f64::from(f32::EPSILON),
                };
                let tolerance = relative * exact.abs() + 2.0 * f64::from(f32::EPSILON) * xv.abs();
                assert!(
                    (got - exact).abs() <= tolerance,
                    "{d} gelu({xv}) = {got}, exact {exact}"
                );
            }
        }
    }
}
