//! The CPU reference device: real arithmetic on this machine's CPU under the same allocator
//! policy as the GPU, so the runner, the counters and the document can be checked anywhere.
//! It is a reference, never a stand-in for a GPU: every output it produces says so, and it is
//! only used when asked for by name (`--device cpu`). [`probe`] is its side of `probe`: host
//! memory copies, labelled as such.
//!
//! A peer of `lab-cuda` over the measurement core's `Device` seam (`lab::device`). Not here: the
//! runner, the allocator model and the document (`lab`), the host's memory facts that every
//! device's pre-flight uses (`lab::host`), the bfloat16 kernel on AVX512_BF16 (`lab-bf16`).
#![forbid(unsafe_code)]

mod bf16;
mod convert;
mod device;
mod environment;
mod gelu;
mod gemm;
mod memory;
mod plan;
pub mod probe;
mod threads;

pub use device::{CpuDevice, CpuOptions};
pub use environment::{device_environment, environment};
pub use gelu::gelu32;
pub use memory::HostSegments;
pub use plan::{HostMemoryPlan, HostWouldNotFit};
pub use threads::physical_cores;
