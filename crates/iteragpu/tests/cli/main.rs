//! End-to-end tests of the `iteragpu` binary: one module per command.

mod environment;
mod estimate;
mod price;

mod measure;
mod stubs;
