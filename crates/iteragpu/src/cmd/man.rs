//! `iteragpu man [COMMAND]`: the manual page in roff, generated from the same command definition
//! as `--help` (its text, options and examples).

use std::process::ExitCode;

use clap::CommandFactory;

use crate::exit::usage;
use crate::output;

/// Options of `man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu man | man -l -
  iteragpu man measure | man -l -
  mkdir -p ~/.local/share/man/man1 && iteragpu man > ~/.local/share/man/man1/iteragpu.1")]
pub struct Args {
    /// A command (`measure`, `price`, ...) for its own page, iteragpu-COMMAND(1); without it,
    /// the page of iteragpu(1), which lists every command.
    pub command: Option<String>,
}

/// Runs `man`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut top = crate::cli::Cli::command();
    top.build();
    let page = match &args.command {
        None => top,
        Some(name) => {
            let names: Vec<String> = top
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .filter(|n| n != "help")
                .collect();
            let sub = top
                .find_subcommand(name)
                .filter(|c| c.get_name() != "help")
                .ok_or_else(|| {
                    usage(format!(
                        "unknown command `{name}`; the commands are: {}",
                        names.join(", ")
                    ))
                })?;
            // Once built, a command is displayed as `iteragpu-measure` (the page's title, as
            // git-commit(1) is) and its synopsis reads `iteragpu measure`.
            sub.clone()
        }
    };
    let mut roff = Vec::new();
    clap_mangen::Man::new(page).render(&mut roff)?;
    output::print_text(&String::from_utf8(roff)?)?;
    Ok(ExitCode::SUCCESS)
}
