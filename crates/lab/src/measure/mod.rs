//! The measurement of the synthetic `Linear -> GELU -> Linear` model: options, the values of
//! weights and inputs, the phase runner, the numerical check, the pre-flight plan and the document.

pub mod check;
pub mod config;
pub mod document;
pub mod preflight;
pub mod runner;
pub mod synthetic;
