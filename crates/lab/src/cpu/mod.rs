//! The CPU reference device: real arithmetic on this machine's CPU under the same allocator
//! policy as the GPU, so the runner, the counters and the document can be checked anywhere.
//! It is a reference, never a stand-in for a GPU: every output it produces says so, and it is
//! only used when asked for by name (`--device cpu`).

mod device;
mod environment;
mod memory;

pub use device::{CpuDevice, gelu32};
pub use environment::environment;
pub use memory::{HostSegments, available_host_bytes};
