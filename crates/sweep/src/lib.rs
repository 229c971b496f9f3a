//! Sweeps: one dimension of the synthetic model raised step by step, each point measured in a
//! fresh process, until the points run out or memory does.
//!
//! This crate holds everything about a sweep that needs no process and no device: the syntax of
//! a varied value (`64,128,256`, `64..8192:x2`, `64..512:+64`), the byte ceilings
//! (`--max-memory 6GiB`), the loop with its stopping rules (written against [`PointRunner`], so it
//! is tested with a scripted runner), and `summary.csv`, one row per point, written atomically
//! after every point so that nothing measured is ever lost.
//!
//! Not here: running one point (`iteragpu measure` in a child process, over `lab::measure`), the
//! report that draws a sweep (`report`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bytes;
pub mod run;
pub mod spec;
pub mod summary;

pub use bytes::{ByteSizeError, parse_bytes};
pub use run::{Dimension, Outcome, Point, PointRunner, Stop, run_points};
pub use spec::{Spec, SpecError, parse_spec};
pub use summary::{Row, Status, SummaryError, read_summary, write_summary};
