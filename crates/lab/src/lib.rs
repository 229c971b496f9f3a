//! Pure logic of IteraGPU Lab.
//!
//! Everything here runs, and is tested, on a machine without a GPU: the weight estimate, the
//! tariff catalogue and package prices, the caching-allocator policy that mirrors PyTorch's
//! counters, the measurement document and the phase runner written against the [`device::Device`]
//! trait, and the CPU reference device. The CUDA device lives in the `lab-cuda` crate and only
//! supplies segments, kernels and a BLAS behind the same trait.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod catalogue;
pub mod cpu;
pub mod device;
pub mod dtype;
pub mod environment;
pub mod estimate;
pub mod files;
pub mod fit;
pub mod measure;
pub mod memory;
pub mod price;
pub mod text;
pub mod tool;
pub mod units;
pub mod workspaces;
