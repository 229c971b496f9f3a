//! The command line, declared once: help text, options and their checks live here.

use clap::{Parser, Subcommand};

/// IteraGPU Lab: check whether weights fit, diagnose the GPU you rented, measure a small bounded
/// workload phase by phase, and turn a package price into a price per accepted result.
#[derive(Debug, Parser)]
#[command(name = "iteragpu", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Describe the device and its software (driver, libraries, memory), or with --device all
    /// every GPU of the lot and what can cost the renter money. Exit 0 even when no GPU is
    /// usable: the report then says why.
    Environment(crate::cmd::environment::Args),
    /// Estimate the memory a model occupies: weights, and with --model its exact count, KV cache
    /// and training states (no GPU needed).
    Estimate(crate::cmd::estimate::Args),
    /// Price a GPU package from the tariff catalogue, and one accepted result (no GPU needed).
    Price(crate::cmd::price::Args),
    /// Which catalogue packages hold a model (weights, KV cache, training), cheapest first (no
    /// GPU needed).
    Fit(crate::cmd::fit::Args),
    /// Measure the synthetic Linear -> GELU -> Linear model phase by phase (time and memory)
    /// and write one JSON document that must not exist yet.
    Measure(crate::cmd::measure::Args),
    /// Write the kit: a deterministic zip, and the same as a .tar.gz, with the documents, data,
    /// MANIFEST.json and SHA256SUMS.
    Kit(crate::cmd::kit::Args),
    /// Check a kit (zip, tar.gz or extracted folder) against its MANIFEST.json: complete, then
    /// valid.
    Verify(crate::cmd::verify::Args),
    /// Write (`init`) and lock (`lock`) the quality protocol, before the test.
    Protocol(crate::cmd::protocol::Args),
    /// Append one run to the results grid, against a locked protocol and a complete measurement.
    Record(crate::cmd::record::Args),
    /// Price one accepted useful unit per package, from the results grid and the catalogue.
    Cost(crate::cmd::cost::Args),
    /// Measure one dimension at a time over a list or range of values, each point in a new
    /// process, stopping at the first point that would not fit; writes summary.csv.
    Sweep(crate::cmd::sweep::Args),
    /// The checks on every node of a package that spans several machines: write the Slurm
    /// batch script (and submit it) or the SkyPilot task, one folder of results per node.
    Fleet(crate::cmd::fleet::Args),
    /// Turn measurement documents and sweep folders into one self-contained HTML report.
    Report(crate::cmd::report::Args),
    /// Is every GPU the card that was paid for? Copy bandwidth and dense matrix throughput per
    /// GPU against the datasheet, bounded in time, into one JSON document that must not exist
    /// yet.
    Probe(crate::cmd::probe::Args),
    /// One rank of an all-reduce / all-gather bandwidth run over every GPU of every node
    /// (nccl-tests' figures: time, algbw, busbw), through PyTorch; run it under srun.
    Collective(crate::cmd::collective::Args),
    /// Print the shell completion script for bash, zsh, fish, elvish or PowerShell.
    Completions(crate::cmd::completions::Args),
    /// Print the manual page (roff) of iteragpu or of one of its commands.
    Man(crate::cmd::man::Args),
}

/// The devices a completion offers: the CPU reference device and the first eight GPUs.
const DEVICES: [&str; 9] = [
    "cpu", "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7",
];

/// The command line as the shell completions see it: the same commands and options as [`Cli`],
/// with the values each option takes where a fixed list exists: `--gpu` the bundled catalogue's
/// GPU ids, `--days` its durations, `--package` every GPU:DAYS:1 it offers, `--device` `cpu`,
/// `cuda:0`..`cuda:7` (and `all` where the command takes it). The lists only guide the shell:
/// parsing still goes through [`Cli`], which accepts any `cuda:N` and any `--catalogue`.
pub fn completion_command() -> clap::Command {
    use clap::CommandFactory;
    use clap::builder::PossibleValuesParser;

    let catalogue = rent::catalogue::Catalogue::embedded();
    let gpus: Vec<String> = catalogue.gpus().iter().map(|g| g.to_string()).collect();
    let days: Vec<String> = rent::catalogue::DURATIONS
        .iter()
        .map(u32::to_string)
        .collect();
    let packages: Vec<String> = catalogue
        .rows()
        .iter()
        .map(|t| format!("{}:{}:1", t.gpu, t.days))
        .collect();
    // clap keeps `'static` names (its `string` feature is off); the few dozen names live as long
    // as the one command that prints the script.
    let values = |list: &[String]| {
        PossibleValuesParser::new(
            list.iter()
                .map(|v| -> &'static str { Box::leak(v.clone().into_boxed_str()) }),
        )
    };
    let mut top = Cli::command();
    let names: Vec<String> = top
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let commands: Vec<String> = names.iter().filter(|n| *n != "help").cloned().collect();
    for name in &names {
        top = top.mut_subcommand(name, |mut sub| {
            let has = |sub: &clap::Command, id: &str| sub.get_arguments().any(|a| a.get_id() == id);
            if has(&sub, "gpu") {
                sub = sub.mut_arg("gpu", |a| a.value_parser(values(&gpus)));
            }
            if has(&sub, "days") {
                sub = sub.mut_arg("days", |a| a.value_parser(values(&days)));
            }
            if has(&sub, "package") {
                // zsh reads a colon in the value's name as the end of it.
                sub = sub.mut_arg("package", |a| {
                    a.value_parser(values(&packages)).value_name("PACKAGE")
                });
            }
            if has(&sub, "device") {
                // `environment` and `probe` also take every GPU at once.
                let mut devices: Vec<String> = DEVICES.iter().map(|d| d.to_string()).collect();
                if matches!(sub.get_name(), "environment" | "probe") {
                    devices.insert(0, "all".to_string());
                }
                sub = sub.mut_arg("device", |a| a.value_parser(values(&devices)));
            }
            if has(&sub, "output_dir") {
                sub = sub.mut_arg("output_dir", |a| a.value_hint(clap::ValueHint::DirPath));
            }
            if sub.get_name() == "man" {
                sub = sub.mut_arg("command", |a| a.value_parser(values(&commands)));
            }
            sub
        });
    }
    top
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        super::Cli::command().debug_assert();
        super::completion_command().debug_assert();
    }

    /// The short flags, as ripgrep and hyperfine spell them: `-o` for the one file a command
    /// writes (`--output`, as `rg`'s and most tools' `-o FILE`), `-w` and `-r` for the warm-up
    /// and timed passes (hyperfine's `-w/--warmup` and `-r/--runs`). Nothing else gets one: a
    /// short flag is added where the ecosystem already has the letter, never guessed.
    #[test]
    fn the_short_flags_are_the_ecosystems() {
        let cmd = super::Cli::command();
        let mut shorts = Vec::new();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                if let Some(c) = arg.get_short().filter(|c| !matches!(c, 'h' | 'V')) {
                    shorts.push(format!("{} -{c} --{}", sub.get_name(), arg.get_id()));
                }
            }
        }
        shorts.sort();
        let mut want = [
            "kit -o --output",
            "measure -o --output",
            "measure -r --repeats",
            "measure -w --warmup",
            "probe -o --output",
            "sweep -r --repeats",
            "sweep -w --warmup",
        ];
        want.sort();
        assert_eq!(shorts, want);
    }

    #[test]
    fn completions_offer_the_catalogue_and_the_devices() {
        let cmd = super::completion_command();
        let values = |sub: &str, arg: &str| -> Vec<String> {
            let sub = cmd.find_subcommand(sub).unwrap();
            let arg = sub.get_arguments().find(|a| a.get_id() == arg).unwrap();
            arg.get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect()
        };
        let gpus = values("price", "gpu");
        assert_eq!(gpus, rent::catalogue::Catalogue::embedded().gpus());
        assert_eq!(values("price", "days"), ["3", "7", "30"]);
        assert!(values("environment", "package").contains(&"b200:7:1".to_string()));
        assert_eq!(values("measure", "device")[..2], ["cpu", "cuda:0"]);
        assert_eq!(values("probe", "device")[0], "all");
        assert!(!values("sweep", "device").contains(&"all".to_string()));
        assert_eq!(
            values("measure", "dtype"),
            ["float32", "float16", "bfloat16"]
        );
    }
}
