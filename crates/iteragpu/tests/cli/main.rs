//! End-to-end tests of the `iteragpu` binary: one module per command.

mod collective;
mod completions;
mod engine;
mod engine_bounds;
mod engine_logs;
mod environment;
mod errors;
mod estimate;
mod files;
mod fit;
mod fleet_check;
mod fleet_inject;
mod fleet_skypilot;
mod fleet_slurm;
mod gpu_check;
mod help_examples;
mod install;
mod kill_loop;
mod kit;
mod lab_sh;
mod ledger;
mod man;
mod offers;
mod price;
mod probe;
mod readme;
mod report;
mod sizes;
mod sweep;

mod measure;
mod missing_inputs;
mod notebook;
mod stubs;
mod verify;
