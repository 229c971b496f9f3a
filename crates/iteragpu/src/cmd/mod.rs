//! One module per command. Clap types stop here: each module turns its `Args` into library calls.
//! No command imports another: what two commands share lives in the library crate of its domain,
//! or, when it is about the command line itself (a clap type, an exit code, a text rendering), in
//! a module beside `cmd/` (`run`, `memory`, `lot`, `exit`, `summary`).

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

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every line of `dir`'s Rust files that reaches into another command's module.
    fn cross_imports(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                cross_imports(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // Spelt in two parts, so that this test does not find itself.
                let into_cmd = ["crate", "cmd", ""].join("::");
                for (n, line) in text.lines().enumerate() {
                    let sibling = line.match_indices("super::").any(|(at, _)| {
                        let rest = &line[at + "super::".len()..];
                        let name: String = rest
                            .chars()
                            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                            .collect();
                        !name.is_empty() && rest[name.len()..].starts_with("::")
                    });
                    if line.contains(&into_cmd) || sibling {
                        found.push(format!("{}:{}: {line}", path.display(), n + 1));
                    }
                }
            }
        }
    }

    #[test]
    fn no_command_imports_another() {
        let mut found = Vec::new();
        cross_imports(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd"),
            &mut found,
        );
        assert!(found.is_empty(), "{}", found.join("\n"));
    }
}
