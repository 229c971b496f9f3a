//! One module per command. Clap types stop here: each module turns its `Args` into library calls.

pub mod collective;
pub mod completions;
pub mod cost;
pub mod environment;
pub mod estimate;
pub mod fit;
pub mod fleet;
pub mod kit;
pub mod man;
pub mod measure;
pub mod price;
pub mod probe;
pub mod protocol;
pub mod record;
pub mod report;
pub mod sweep;
pub mod verify;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs the chosen command and returns its exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Environment(args) => environment::run(args),
        Command::Estimate(args) => estimate::run(args),
        Command::Price(args) => price::run(args),
        Command::Fit(args) => fit::run(args),
        Command::Measure(args) => measure::run(args),
        Command::Kit(args) => kit::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Protocol(args) => protocol::run(args),
        Command::Record(args) => record::run(args),
        Command::Cost(args) => cost::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Report(args) => report::run(args),
        Command::Probe(args) => probe::run(args),
        Command::Collective(args) => collective::run(args),
        Command::Fleet(args) => fleet::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => man::run(args),
    }
}
