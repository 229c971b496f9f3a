//! The embedded kernels and the choice between a cubin and the PTX.
//!
//! `kernels/lab.cu` (seeded inputs, GELU, and the bias broadcast of a Linear that takes torch's
//! `cublasGemmEx` path) is compiled ahead of time (scripts/build-kernels.sh): PTX for compute_80
//! (`.version 8.0`, which R525 and newer drivers can JIT) and cubins for the architectures below.
//! A cubin runs on its own architecture and on later minor revisions of the same major one
//! (sm_86 code runs on 8.7), so the best cubin is the newest one of the device's major version
//! that is not newer than the device; without one the driver JIT-compiles the PTX.

use std::ffi::CStr;

use cudarc::driver::sys::{CUfunction, CUmodule};

use crate::driver::Driver;
use crate::error::CudaError;

/// The generated PTX text (no NUL inside).
const PTX_TEXT: &[u8] = include_bytes!("../../../kernels/generated/lab.ptx");

/// The PTX, NUL-terminated as `cuModuleLoadData` requires.
static PTX_IMAGE: [u8; PTX_TEXT.len() + 1] = {
    let mut out = [0u8; PTX_TEXT.len() + 1];
    let mut i = 0;
    while i < PTX_TEXT.len() {
        out[i] = PTX_TEXT[i];
        i += 1;
    }
    out
};

/// The PTX image as a slice.
static PTX: &[u8] = &PTX_IMAGE;

/// The cubins, by architecture (`(major, minor)`, file contents).
static CUBINS: &[((i32, i32), &[u8])] = &[
    (
        (8, 0),
        include_bytes!("../../../kernels/generated/lab.sm_80.cubin"),
    ),
    (
        (8, 6),
        include_bytes!("../../../kernels/generated/lab.sm_86.cubin"),
    ),
    (
        (8, 9),
        include_bytes!("../../../kernels/generated/lab.sm_89.cubin"),
    ),
    (
        (9, 0),
        include_bytes!("../../../kernels/generated/lab.sm_90.cubin"),
    ),
    (
        (10, 0),
        include_bytes!("../../../kernels/generated/lab.sm_100.cubin"),
    ),
    (
        (12, 0),
        include_bytes!("../../../kernels/generated/lab.sm_120.cubin"),
    ),
];

/// How the kernels reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelForm {
    /// A cubin built for `sm_{major}{minor}`.
    Cubin(i32, i32),
    /// The PTX, compiled by the driver's JIT.
    PtxJit,
}

impl std::fmt::Display for KernelForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelForm::Cubin(major, minor) => write!(f, "cubin sm_{major}{minor}"),
            KernelForm::PtxJit => f.write_str("ptx-jit"),
        }
    }
}

/// Which form to load, as `--kernel-form` asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KernelChoice {
    /// The cubin for the device's architecture when there is one, else the PTX; and the PTX when
    /// the driver refuses the cubin.
    #[default]
    Auto,
    /// The cubin only: an error when none fits the device or the driver refuses it.
    Cubin,
    /// The PTX through the driver's JIT, even when a cubin fits (to exercise that path).
    Ptx,
}

impl std::str::FromStr for KernelChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<KernelChoice, String> {
        match s {
            "auto" => Ok(KernelChoice::Auto),
            "cubin" => Ok(KernelChoice::Cubin),
            "ptx" => Ok(KernelChoice::Ptx),
            other => Err(format!(
                "`{other}` is not a kernel form: use auto, cubin or ptx"
            )),
        }
    }
}

impl std::fmt::Display for KernelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KernelChoice::Auto => "auto",
            KernelChoice::Cubin => "cubin",
            KernelChoice::Ptx => "ptx",
        })
    }
}

/// The architectures with a cubin, as `sm_XY` names.
pub fn cubin_archs() -> Vec<String> {
    CUBINS
        .iter()
        .map(|((ma, mi), _)| format!("sm_{ma}{mi}"))
        .collect()
}

/// The form to try first for a device of compute capability `major.minor`.
pub fn preferred_form(major: i32, minor: i32) -> KernelForm {
    CUBINS
        .iter()
        .map(|(arch, _)| *arch)
        .filter(|&(ma, mi)| ma == major && mi <= minor)
        .max()
        .map_or(KernelForm::PtxJit, |(ma, mi)| KernelForm::Cubin(ma, mi))
}

fn image(form: KernelForm) -> &'static [u8] {
    match form {
        KernelForm::Cubin(ma, mi) => CUBINS
            .iter()
            .find(|(arch, _)| *arch == (ma, mi))
            .map_or(PTX, |(_, bytes)| bytes),
        KernelForm::PtxJit => PTX,
    }
}

/// The loaded module and its kernels.
#[derive(Debug)]
pub struct Kernels {
    /// The module (unloaded by [`Kernels::unload`]).
    pub module: CUmodule,
    /// How it was loaded.
    pub form: KernelForm,
    /// Seeded inputs for float32, float16, bfloat16.
    pub inputs: [CUfunction; 3],
    /// GELU for float32, float16, bfloat16.
    pub gelu: [CUfunction; 3],
    /// The bias broadcast `out[r, c] = bias[c]` for 4-byte and 2-byte elements (`bias_rows_b32`,
    /// `bias_rows_b16`), before a `cublasGemmEx` with beta = 1.
    pub bias_rows: [CUfunction; 2],
}

impl Kernels {
    /// The bias broadcast for elements of `dtype`.
    pub fn bias_rows_for(&self, dtype: lab::dtype::DType) -> CUfunction {
        if dtype.size_bytes() == 4 {
            self.bias_rows[0]
        } else {
            self.bias_rows[1]
        }
    }
}

impl Kernels {
    /// Loads the kernels in the form `choice` asks for: by default the cubin for the device,
    /// falling back to the PTX if the driver refuses it.
    pub fn load(
        driver: &Driver,
        major: i32,
        minor: i32,
        choice: KernelChoice,
    ) -> Result<Kernels, CudaError> {
        let first = match choice {
            KernelChoice::Ptx => KernelForm::PtxJit,
            KernelChoice::Auto => preferred_form(major, minor),
            KernelChoice::Cubin => match preferred_form(major, minor) {
                KernelForm::PtxJit => {
                    return Err(CudaError::Kernels {
                        arch: format!("{major}.{minor}"),
                        reason: format!(
                            "--kernel-form cubin, but no embedded cubin runs on it (cubins: {})",
                            cubin_archs().join(", ")
                        ),
                    });
                }
                cubin => cubin,
            },
        };
        let fallback = choice == KernelChoice::Auto && first != KernelForm::PtxJit;
        let (module, form) = match driver.module_load(image(first)) {
            Ok(m) => (m, first),
            Err(cubin_err) if fallback => match driver.module_load(PTX) {
                Ok(m) => (m, KernelForm::PtxJit),
                Err(ptx_err) => {
                    return Err(CudaError::Kernels {
                        arch: format!("{major}.{minor}"),
                        reason: format!("{first}: {cubin_err}; ptx-jit: {ptx_err}"),
                    });
                }
            },
            Err(e) => {
                return Err(CudaError::Kernels {
                    arch: format!("{major}.{minor}"),
                    reason: e.to_string(),
                });
            }
        };
        let get = |name: &CStr| driver.function(module, name);
        let load_all = || -> Result<Kernels, CudaError> {
            Ok(Kernels {
                module,
                form,
                inputs: [
                    get(c"inputs_f32")?,
                    get(c"inputs_f16")?,
                    get(c"inputs_bf16")?,
                ],
                gelu: [get(c"gelu_f32")?, get(c"gelu_f16")?, get(c"gelu_bf16")?],
                bias_rows: [get(c"bias_rows_b32")?, get(c"bias_rows_b16")?],
            })
        };
        load_all().inspect_err(|_| driver.module_unload(module))
    }

    /// Unloads the module.
    pub fn unload(&self, driver: &Driver) {
        driver.module_unload(self.module);
    }
}

/// Threads per block and blocks for `n` elements with a grid-stride loop.
pub fn launch_shape(n: u64) -> (u32, u32) {
    const BLOCK: u64 = 256;
    const MAX_BLOCKS: u64 = 1 << 16;
    let blocks = n.div_ceil(BLOCK).clamp(1, MAX_BLOCKS);
    (blocks as u32, BLOCK as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubin_for_each_known_architecture() {
        assert_eq!(preferred_form(9, 0), KernelForm::Cubin(9, 0));
        assert_eq!(preferred_form(8, 0), KernelForm::Cubin(8, 0));
        assert_eq!(preferred_form(8, 6), KernelForm::Cubin(8, 6));
        assert_eq!(preferred_form(8, 7), KernelForm::Cubin(8, 6));
        assert_eq!(preferred_form(8, 9), KernelForm::Cubin(8, 9));
        assert_eq!(preferred_form(10, 3), KernelForm::Cubin(10, 0));
        assert_eq!(preferred_form(12, 1), KernelForm::Cubin(12, 0));
        assert_eq!(preferred_form(11, 0), KernelForm::PtxJit);
        assert_eq!(preferred_form(7, 5), KernelForm::PtxJit);
        assert_eq!(KernelForm::Cubin(9, 0).to_string(), "cubin sm_90");
        assert_eq!(KernelForm::PtxJit.to_string(), "ptx-jit");
    }

    #[test]
    fn kernel_choices_parse_and_print() {
        for c in [KernelChoice::Auto, KernelChoice::Cubin, KernelChoice::Ptx] {
            assert_eq!(c.to_string().parse::<KernelChoice>(), Ok(c));
        }
        let err = "jit".parse::<KernelChoice>().unwrap_err();
        assert!(
            err.contains("`jit`") && err.contains("auto, cubin or ptx"),
            "{err}"
        );
    }

    #[test]
    fn embedded_images_are_what_the_driver_expects() {
        assert_eq!(PTX.last(), Some(&0));
        assert_eq!(PTX.iter().filter(|&&b| b == 0).count(), 1);
        let text = std::str::from_utf8(&PTX[..PTX.len() - 1]).unwrap();
        assert!(
            text.contains(".version 8.0"),
            "PTX must stay JIT-able by R525 drivers"
        );
        assert!(text.contains(".target sm_80"));
        for name in [
            "inputs_f32",
            "inputs_f16",
            "inputs_bf16",
            "gelu_f32",
            "gelu_f16",
            "gelu_bf16",
            "bias_rows_b32",
            "bias_rows_b16",
        ] {
            assert!(text.contains(&format!(".entry {name}(")), "{name}");
        }
        for (_, cubin) in CUBINS {
            assert_eq!(&cubin[..4], b"\x7fELF");
        }
        assert_eq!(cubin_archs().len(), CUBINS.len());
    }

    #[test]
    fn launch_shapes_cover_every_element() {
        assert_eq!(launch_shape(0), (1, 256));
        assert_eq!(launch_shape(257), (2, 256));
        assert_eq!(launch_shape(u64::MAX / 2).0, 1 << 16);
    }
}
