//! The CPU reference device: real arithmetic on this machine's CPU under the same allocator
//! policy as the GPU, so the runner, the counters and the document can be checked anywhere.
//! It is a reference, never a stand-in for a GPU: every output it produces says so, and it is
//! only used when asked for by name (`--device cpu`).

mod bf16;
mod convert;
mod device;
mod environment;
mod gelu;
mod gemm;
mod memory;
mod plan;
mod threads;

pub use device::{CpuDevice, CpuOptions};
pub use environment::{device_environment, environment};
pub use gelu::gelu32;
pub use memory::{
    HostSegments, available_host_bytes, filled_buffer, peak_resident_bytes, resident_bytes,
};
pub use plan::{HostMemoryPlan, HostWouldNotFit};
pub use threads::physical_cores;
