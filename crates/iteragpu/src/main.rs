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
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version: the tool's own text, printed as clap styles it.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        // A refused command line quotes what was typed: plain text, nothing a terminal obeys.
        Err(e) => {
            output::eprint_line(e.render().to_string().trim_end());
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => exit::report(&err),
    }
}
