//! The renting decisions of IteraGPU Lab, made before a GPU is rented and without one: what the
//! weights and the KV cache of a model take ([`estimate`], [`memory`]), which catalogue packages
//! hold it ([`fit`]: the layouts an engine runs, [`layout`]; the largest context and batch per
//! GPU, [`capacity`]; decode and prefill ceilings, [`ceiling`]), what a package costs and what
//! one accepted result costs ([`price`]), from the tariff catalogue ([`catalogue`]), and what
//! each GPU model should deliver by its vendor's datasheet ([`datasheet`]); [`units`] reads
//! counts and prints exact decimals for all of them, and [`field`] reads the cells of the
//! catalogue and offers files and says what is wrong with one.
//!
//! A model folder is read by `model`; [`loaded`] turns what it read into the facts these
//! estimates take. Not here: measuring a GPU
//! (`lab` and the device crates), the ledger of accepted results (`ledger`).
#![forbid(unsafe_code)]

pub mod capacity;
pub mod catalogue;
pub mod ceiling;
pub mod datasheet;
pub mod engine;
pub mod estimate;
pub mod field;
pub mod fit;
pub mod layout;
pub mod loaded;
pub mod memory;
pub mod offers;
pub mod price;
mod rows;
pub mod units;
