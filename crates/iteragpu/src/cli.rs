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
    /// Write the kit: a deterministic zip with the documents, data, MANIFEST.json and SHA256SUMS.
    Kit(crate::cmd::kit::Args),
    /// Check a kit (zip or extracted folder) against its MANIFEST.json: complete, then valid.
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
    /// Print the shell completion script for bash, zsh, fish, elvish or PowerShell.
    Completions(crate::cmd::completions::Args),
    /// Print the manual page (roff) of iteragpu or of one of its commands.
    Man(crate::cmd::man::Args),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
