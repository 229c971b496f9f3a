//! The CUDA device of IteraGPU Lab.
//!
//! Everything that touches NVIDIA's libraries lives here, and only here is `unsafe` allowed
//! (each block says why it is sound). The libraries are opened at run time (nothing CUDA is
//! needed to build), and every way of not having a usable GPU — no driver, the toolkit's stub,
//! no device, a wrong ordinal, an old driver, no cuBLAS — is an error value with a sentence a
//! user can act on, never a panic.
//!
//! A peer of `lab-cpu` over the measurement core's `Device` seam (`lab::device`). Not here: the
//! runner, the allocator model, the workspaces' rules and the documents (`lab`), the datasheet
//! a probe is judged against (`rent::datasheet`).

#[cfg(test)]
mod bias_kernel_on_host;
mod blas;
pub mod blaslt;
mod copies;
mod device;
mod driver;
mod environment;
mod error;
pub mod gemm;
mod kernels;
#[cfg(test)]
mod kernels_on_host;
mod loader;
pub mod lot;
mod maps;
mod nvml;
pub mod probe;
mod segments;
mod version;

pub use device::{CudaDevice, CudaOptions};
pub use environment::environment;
pub use error::CudaError;
pub use kernels::{KernelChoice, KernelForm};
pub use version::cuda_version;

/// Parses `cuda:N` (also `cuda`, meaning `cuda:0`) into the ordinal N.
pub fn parse_ordinal(device: &str) -> Option<usize> {
    match device.strip_prefix("cuda") {
        Some("") => Some(0),
        Some(rest) => {
            let digits = rest.strip_prefix(':')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordinals() {
        assert_eq!(parse_ordinal("cuda:0"), Some(0));
        assert_eq!(parse_ordinal("cuda:7"), Some(7));
        assert_eq!(parse_ordinal("cuda"), Some(0));
        assert_eq!(parse_ordinal("cuda:"), None);
        assert_eq!(parse_ordinal("cuda:+1"), None);
        assert_eq!(parse_ordinal("cuda:-1"), None);
        assert_eq!(parse_ordinal("cuda0"), None);
        assert_eq!(parse_ordinal("cpu"), None);
        assert_eq!(parse_ordinal("gpu:0"), None);
    }

    proptest! {
        #[test]
        fn every_number_round_trips(n in 0usize..1_000_000) {
            prop_assert_eq!(parse_ordinal(&format!("cuda:{n}")), Some(n));
        }

        #[test]
        fn never_panics(s in ".*") {
            let _ = parse_ordinal(&s);
        }
    }
}
