//! `iteragpu estimate`: the bytes the weights of a model occupy, and nothing more.

use std::fmt::Write as _;
use std::process::ExitCode;

use lab::estimate::{Estimate, estimate, parse_bits, parse_reserve_gib};
use lab::units::parse_parameters;
use rust_decimal::Decimal;

use crate::output;

const EXAMPLES: &str = "\
Examples:
  iteragpu estimate --parameters 7000000000 --bits 16 --reserve-gib 4
  iteragpu estimate --parameters 70B --bits 4
  iteragpu estimate --parameters 1.5T --bits 8 --json

Bytes per parameter are ceil(bits / 8): 4-bit weights count one whole byte each here.
GiB = 2^30 bytes, GB = 10^9 bytes, both rounded half to even at 4 decimals.
Not included: activations, KV cache, quantisation metadata, gradients, optimizer state,
runtime libraries and CUDA context. An estimate is not a guarantee that a model fits.";

/// Options of `estimate`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Number of parameters: 7000000000, 7e9, 7_000_000_000, 7B, 70M, 1.5T or 1.5k. The value
    /// must be a whole number (1.5B is fine, 1.5 is not).
    #[arg(long, value_name = "N", value_parser = parse_parameters, allow_hyphen_values = true)]
    pub parameters: u64,

    /// Storage width in bits per parameter, 1 to 64 (16 for float16/bfloat16, 8 for int8, 4 for
    /// int4), rounded up to whole bytes.
    #[arg(long, value_name = "B", value_parser = parse_bits, allow_hyphen_values = true)]
    pub bits: u32,

    /// Memory to set aside on top of the weights, in GiB (a non-negative decimal, at most 4
    /// decimal places). It is your assumption, printed as such, never a measurement.
    #[arg(long, value_name = "R", value_parser = parse_reserve_gib, allow_hyphen_values = true)]
    pub reserve_gib: Option<Decimal>,

    /// Print one JSON document instead of text (decimals as strings).
    #[arg(long)]
    pub json: bool,
}

/// Runs `estimate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reserve = args.reserve_gib.unwrap_or(Decimal::ZERO);
    let e = estimate(args.parameters, args.bits, reserve)
        .map_err(|err| crate::exit::usage(err.to_string()))?;
    if args.json {
        output::print_json(&e)?;
    } else {
        output::print_text(&render(&e, args.reserve_gib.is_some()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The human report.
fn render(e: &Estimate, reserve_given: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Weight estimate (the weights only)");
    let _ = writeln!(s, "  parameters          {}", e.parameters);
    let _ = writeln!(
        s,
        "  bits per parameter  {} -> {} byte{} per parameter (ceil({} / 8))",
        e.bits,
        e.bytes_per_parameter,
        if e.bytes_per_parameter == 1 { "" } else { "s" },
        e.bits
    );
    let _ = writeln!(s, "  weight bytes        {}", e.weight_bytes);
    let _ = writeln!(s, "  weight GiB (2^30)   {}", e.weight_gib);
    let _ = writeln!(s, "  weight GB (10^9)    {}", e.weight_gb);
    if reserve_given {
        let _ = writeln!(
            s,
            "  reserve (assumed)   {} GiB (your assumption, not measured)",
            e.reserve_gib
        );
        let _ = writeln!(
            s,
            "  total               {} GiB (weights + reserve)",
            e.total_gib
        );
    } else {
        let _ = writeln!(s, "  reserve (assumed)   none (--reserve-gib R adds one)");
        let _ = writeln!(
            s,
            "  total               {} GiB (weights only)",
            e.total_gib
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Not included: {}.", e.excluded.join(", "));
    let _ = writeln!(
        s,
        "This is arithmetic on the weights, not a guarantee that a model fits on a GPU."
    );
    let _ = writeln!(
        s,
        "GiB and GB are rounded half to even at 4 decimals; bytes are exact."
    );
    s
}
