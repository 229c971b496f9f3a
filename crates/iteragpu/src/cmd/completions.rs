//! `iteragpu completions SHELL`: the completion script, generated from the same command
//! definition as the help, so the two never disagree.

use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::output;

/// Options of `completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu completions bash > ~/.local/share/bash-completion/completions/iteragpu
  iteragpu completions zsh > ~/.zfunc/_iteragpu        (with fpath+=~/.zfunc before compinit)
  iteragpu completions fish > ~/.config/fish/completions/iteragpu.fish")]
pub struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Runs `completions`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(
        args.shell,
        &mut crate::cli::Cli::command(),
        "iteragpu",
        &mut script,
    );
    output::print_text(&String::from_utf8(script)?)?;
    Ok(ExitCode::SUCCESS)
}
