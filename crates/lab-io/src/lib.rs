//! The file and text rules every IteraGPU Lab command shares, in a crate of their own so that
//! every other crate (the renting decisions, the measurement core, the ledger, the kit, the
//! report) can use them without depending on anything else.
//!
//! - [`bytes`]: byte counts as text (GiB at a stated precision, a binary unit, a limit).
//! - [`files`]: a result file is written whole or not at all, never over an existing one; an
//!   input must be a regular file and is read within a stated limit.
//! - [`text`]: text from outside made safe to show in a terminal and to store in a CSV cell.
//!
//! Not here: what is written (each crate's documents), the measurement (`lab`), prices
//! (`rent`).
#![forbid(unsafe_code)]

pub mod bytes;
pub mod files;
pub mod text;
