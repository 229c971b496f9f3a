//! The measurement of the synthetic `Linear -> GELU -> Linear` model: the document, the values
//! of weights and inputs, and (with the runner) the phases.

pub mod document;
pub mod synthetic;
