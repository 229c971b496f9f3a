//! End-to-end tests of the `iteragpu` binary: one module per command.

mod environment;
mod estimate;
mod files;
mod fit;
mod gpu_check;
mod kill_loop;
mod kit;
mod ledger;
mod price;
mod probe;
mod report;
mod sweep;

mod measure;
mod stubs;
mod verify;
