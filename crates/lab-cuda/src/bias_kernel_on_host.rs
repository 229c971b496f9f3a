//! `kernels/lab.cu`'s bias broadcast compiled for the host: `out[i] = bias[i % cols]` for every
//! element, whatever the launch shape, for both element widths.
//!
//! As for the other kernels (`kernels_on_host`), the source section is compiled with g++ under a
//! shim that defines `__global__` away and runs every (block, thread) of a grid in turn, so a
//! wrong index or stride shows before any GPU run.

use std::ffi::c_void;
use std::process::Command;

use crate::kernels::launch_shape;

/// The kernels' source, as embedded at build time.
const SOURCE: &str = include_str!("../../../kernels/lab.cu");
/// Where the bias section begins (it runs to the end of the file).
const MARKER: &str = "// ---- Bias broadcast";

const SHIM_HEAD: &str = r#"
typedef unsigned long long u64;
typedef unsigned short u16;
#define __global__
struct Dim { unsigned int x; };
static Dim blockIdx, threadIdx, blockDim, gridDim;
"#;

const SHIM_TAIL: &str = r#"
template <class F> static void launch(unsigned g, unsigned b, F body) {
    gridDim.x = g; blockDim.x = b;
    for (unsigned i = 0; i < g; ++i) for (unsigned t = 0; t < b; ++t) {
        blockIdx.x = i; threadIdx.x = t; body();
    }
}
#define HOST(k, T) extern "C" void host_##k(unsigned g, unsigned b, const T* bias, T* out, u64 n, u64 cols) { launch(g, b, [&] { k(bias, out, n, cols); }); }
HOST(bias_rows_b32, unsigned int) HOST(bias_rows_b16, u16)
"#;

type BiasFn = unsafe extern "C" fn(u32, u32, *const c_void, *mut c_void, u64, u64);

#[test]
fn the_bias_broadcast_fills_every_row_with_the_bias() {
    let at = SOURCE.find(MARKER).expect("lab.cu keeps its bias section");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bias_host.cpp");
    std::fs::write(&src, format!("{SHIM_HEAD}\n{}\n{SHIM_TAIL}", &SOURCE[at..])).unwrap();
    let so = dir.path().join("libbias_host.so");
    let out = Command::new("g++")
        .args(["-std=c++17", "-O1", "-shared", "-fPIC", "-o"])
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
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    // SAFETY: the shim's HOST macro gives both symbols this prototype.
    let b32: BiasFn = unsafe { *lib.get::<BiasFn>(b"host_bias_rows_b32").unwrap() };
    // SAFETY: as above.
    let b16: BiasFn = unsafe { *lib.get::<BiasFn>(b"host_bias_rows_b16").unwrap() };
    for (rows, cols) in [(1usize, 256usize), (16, 1), (16, 4), (7, 33), (300, 5)] {
        let n = (rows * cols) as u64;
        for (grid, block) in [launch_shape(n), (3, 32)] {
            let bias32: Vec<u32> = (0..cols as u32).map(|c| 0x4000_0000 | c).collect();
            let mut out32 = vec![0u32; rows * cols];
            // SAFETY: `out32` holds n elements and `bias32` cols, of 4 bytes.
            unsafe {
                b32(
                    grid,
                    block,
                    bias32.as_ptr().cast(),
                    out32.as_mut_ptr().cast(),
                    n,
                    cols as u64,
                )
            };
            let bias16: Vec<u16> = (0..cols as u16).map(|c| 0x3c00 ^ c).collect();
            let mut out16 = vec![0u16; rows * cols];
            // SAFETY: as above, 2-byte elements.
            unsafe {
                b16(
                    grid,
                    block,
                    bias16.as_ptr().cast(),
                    out16.as_mut_ptr().cast(),
                    n,
                    cols as u64,
                )
            };
            for r in 0..rows {
                assert_eq!(
                    &out32[r * cols..(r + 1) * cols],
                    &bias32[..],
                    "{rows}x{cols} row {r} ({grid}x{block})"
                );
                assert_eq!(
                    &out16[r * cols..(r + 1) * cols],
                    &bias16[..],
                    "{rows}x{cols} row {r}"
                );
            }
        }
    }
}
