//! `iteragpu`: the command-line edge of IteraGPU Lab. Parsing, printing and exit codes live here;
//! everything else is in the library crates.

mod child;
mod cli;
mod cmd;
mod exit;
mod output;
mod summary;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => exit::report(&err),
    }
}
