//! `iteragpu`: the command-line edge of IteraGPU Lab. Parsing, printing and exit codes live here;
//! everything else is in the library crates, each command importing from the crate of its
//! domain: `estimate`, `fit` and `price` from `rent` (and `model`); `measure`, `probe` and
//! `environment` from `lab` with its devices `lab-cpu` and `lab-cuda`; `sweep` from `sweep`;
//! `report` from `report`; `protocol`, `record` and `cost` from `ledger`; `kit` and `verify`
//! from `kit`; the file rules of all of them from `lab-io`. No command imports another: what two
//! share at the command line sits beside `cmd/` (`run` for measure and sweep, `memory` for
//! estimate and fit, `lot` for environment, probe and fleet, `exit` for error classes).

mod child;
mod cli;
mod cmd;
mod exit;
mod lot;
mod memory;
mod output;
mod run;
mod summary;

/// The identity of this build, with the commit `build.rs` read (the variable is this crate's,
/// so the call stays here rather than in `lab`).
fn tool_info() -> lab::tool::ToolInfo {
    lab::tool::ToolInfo::new(option_env!("ITERAGPU_COMMIT"))
}

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // A copy of this binary supervises each process it starts (see lab_child): that copy serves
    // and exits here, before any parsing.
    lab_child::serve_if_asked();
    exit::set_json_errors(exit::json_requested(std::env::args_os()));
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return exit::clap_error(&err),
    };
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => exit::report(&err),
    }
}
