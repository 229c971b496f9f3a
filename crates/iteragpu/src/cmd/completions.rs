//! `iteragpu completions SHELL`: the completion script, generated from the same command
//! definition as the help, so the two never disagree. Option values with a fixed list are
//! completed too ([`crate::cli::completion_command`]): `--gpu` and `--package` from the bundled
//! catalogue, `--days`, `--device`, `--dtype`, and the command of `iteragpu man`.

use std::process::ExitCode;

use clap_complete::Shell;

use crate::output;

/// Options of `completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu completions bash > ~/.local/share/bash-completion/completions/iteragpu
  iteragpu completions zsh > ~/.zfunc/_iteragpu   # with fpath+=~/.zfunc before compinit
  iteragpu completions fish > ~/.config/fish/completions/iteragpu.fish

Values are completed where the list is fixed: --gpu and --package (GPU:DAYS:1) from the bundled
catalogue, --days (3, 7, 30), --device (cpu, cuda:0 to cuda:7, and all for environment and
probe), --dtype, and the command of `iteragpu man`. Files and folders complete as paths.")]
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
        &mut crate::cli::completion_command(),
        "iteragpu",
        &mut script,
    );
    output::print_text(&String::from_utf8(script)?)?;
    Ok(ExitCode::SUCCESS)
}
