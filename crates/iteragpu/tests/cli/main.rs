//! End-to-end tests of the `iteragpu` binary: one module per command.

mod estimate;
mod kit;
mod ledger;
mod price;
mod verify;
