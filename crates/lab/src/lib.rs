//! The measurement core of IteraGPU Lab.
//!
//! Everything here runs, and is tested, on a machine without a GPU: the [`device::Device`] seam
//! every device implements, the caching-allocator model that mirrors PyTorch's counters
//! ([`alloc`]) and the library workspaces ([`workspaces`]), the phase runner, pre-flight,
//! numerical check and document ([`measure`]), the probe's document and judge ([`probe`]), the
//! lot checks ([`lot`]), which node of a multi-node job a document came from ([`node`]),
//! statistics, and the host's memory facts ([`host`]).
//!
//! Not here: the devices themselves, each a peer crate over the seam (`lab-cpu`, the CPU
//! reference device; `lab-cuda`, NVIDIA GPUs); the renting decisions (catalogue, prices, `fit`,
//! the datasheet, estimates: `rent`); the file rules every command shares (`lab-io`).
#![forbid(unsafe_code)]

pub mod alloc;
pub mod device;
pub mod dtype;
pub mod environment;
pub mod host;
pub mod lot;
pub mod measure;
pub mod node;
pub mod probe;
pub mod stats;
pub mod tool;
pub mod workspaces;
pub mod xid;
