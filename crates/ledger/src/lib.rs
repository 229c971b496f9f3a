//! The quality ledger of IteraGPU Lab: what counts as a useful result is fixed *before* the test,
//! and every real run is then recorded against it.
//!
//! - [`protocol`]: a protocol file a person fills in (the useful unit, the acceptance criterion
//!   and minimum rate, the corpus, who judges, what makes two units distinct), then *locks*: the
//!   lock records the file's SHA-256 and the time, and any later change to the file is refused.
//! - [`grid`]: the raw results grid `data/resultats-bruts.csv`, one validated row per run, added
//!   all or nothing (the grid is rewritten to a temporary file and renamed) under an exclusive
//!   file lock, so concurrent writers lose nothing and a kill or a full disk tears nothing.
//! - [`mod@record`]: builds a row from a locked protocol, a complete measurement document made on
//!   the package's GPU, the rental the user names, and the counts a reviewer reported.
//! - [`cost`]: the price of one accepted useful unit per rental and for all rentals together,
//!   from the grid and the tariff catalogue, with the original's rules (whole package price,
//!   distinct units, exact decimals) and the protocol's rule for repeated runs.
//! - [`device`]: reads the device's model, UUID and driver out of a measurement's environment,
//!   and tells whether it is the package's GPU.
//!
//! Not here: the package prices it divides (`rent::price`, from `rent::catalogue`), the
//! measurement documents it links to (`lab::measure`), the file rules (`lab-io`).
#![forbid(unsafe_code)]

pub mod cost;
pub mod device;
pub mod error;
pub mod grid;
pub mod hash;
pub mod protocol;
pub mod record;
mod time;

pub use error::LedgerError;
pub use grid::{HEADER, Package, Row};
pub use protocol::{Aggregation, Lock, LockedProtocol, Protocol};
pub use record::{RecordRequest, Recorded, record};
