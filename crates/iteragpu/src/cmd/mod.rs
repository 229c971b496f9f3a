//! One module per command. Clap types stop here: each module turns its `Args` into library calls.

pub mod environment;
pub mod estimate;
pub mod price;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs the chosen command and returns its exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Environment(args) => environment::run(args),
        Command::Estimate(args) => estimate::run(args),
        Command::Price(args) => price::run(args),
    }
}
