//! `iteragpu collective`: one rank of an all-reduce / all-gather bandwidth run over every GPU of
//! every node, through the machine's PyTorch (see [`lab_torch::collective`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use lab_io::files;
use lab_torch::TorchError;
use lab_torch::collective::{CollectiveDocument, Options};

use crate::exit::usage;
use crate::output;

/// Options of `collective`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu collective --output collective-%t.json   # one rank per GPU, under srun or torchrun
  iteragpu collective --backend gloo --max-bytes 16MiB   # CPUs: a quick test of the program

Run once per GPU (one rank each): under Slurm `srun --ntasks-per-node 8 iteragpu collective
--output collective-%t.json`; by hand, one process per rank with `RANK=0 WORLD_SIZE=2
MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 iteragpu collective` and so on. The rendezvous comes from the environment, first match wins:
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (as torchrun sets them); Slurm's SLURM_PROCID,
SLURM_NTASKS and MASTER_ADDR, else the first node of the step's (SLURM_STEP_NODELIST) or
job's node list, with --port; SkyPilot's SKYPILOT_NODE_RANK,
SKYPILOT_NODE_IPS (the first is rank 0) with --port.

For each size from --min-bytes to --max-bytes, doubling: --warmup untimed calls, then --iters
timed calls; the time is the slowest rank's mean, as nccl-tests reports it. algbw = bytes /
time; busbw (bus bandwidth) = algbw x 2(n-1)/n for all-reduce and x (n-1)/n for all-gather over
n ranks: the figure to compare with the fabric's link speed whatever n is. Every rank checks
its result (rank r sends r+1). On NCCL the document records NCCL's version, the transport it
chose (NET/IB or Socket, from NCCL_DEBUG=INFO lines read and dropped: no host name or address is
kept) and its channels.

Refused with one sentence and exit 2: ranks that disagree on the world size, a rendezvous that
does not complete within --rendezvous-timeout, NCCL or gloo missing from this PyTorch. The gloo
backend on CPUs is the test path: its bandwidth is loopback or TCP, never a fabric's. Exit
codes: 0 measured and every result correct on every rank, 1 a wrong result (the document is
written and says which size), 2 refused.")]
pub struct Args {
    /// `auto` (NCCL when torch sees a GPU, else gloo), `nccl` or `gloo`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "nccl", "gloo"])]
    pub backend: String,

    /// `all_reduce`, `all_gather`, or both, comma-separated.
    #[arg(long, default_value = "all_reduce,all_gather", value_name = "OPS")]
    pub ops: String,

    /// The smallest message, bytes (KiB, MiB, GiB suffixes).
    #[arg(long, default_value = "8", value_parser = parse_bytes, value_name = "SIZE")]
    pub min_bytes: u64,

    /// The largest message, bytes (KiB, MiB, GiB suffixes); at least 1GiB for the bandwidth to
    /// be judged, smaller for a quick gloo test on CPUs.
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes, value_name = "SIZE")]
    pub max_bytes: u64,

    /// Untimed calls per size.
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,

    /// Timed calls per size.
    #[arg(long, default_value_t = 20)]
    pub iters: u32,

    /// The rendezvous port on the first node (Slurm and SkyPilot).
    #[arg(long, default_value_t = 29500)]
    pub port: u16,

    /// How long the ranks wait for each other, seconds.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub rendezvous_timeout: u64,

    /// The whole run's deadline, seconds: the program and everything it started are ended then.
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    pub timeout: u64,

    /// The Python that has PyTorch [default: the first python3 on the PATH with a torch
    /// package].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,

    /// Write this rank's document to FILE (must not exist yet; `%t` is replaced by the rank).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Print the document as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `8`, `64KiB`, `16MiB`, `1GiB`.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => {
            return Err(format!(
                "{s:?}: expected bytes such as 8, 64KiB, 16MiB or 1GiB"
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected bytes such as 8, 64KiB, 16MiB or 1GiB"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n && *v >= 8)
        .ok_or_else(|| format!("{s:?}: expected at least 8 bytes and at most 2^63"))
}

/// Runs one rank.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.min_bytes > args.max_bytes {
        return Err(usage(format!(
            "--min-bytes {} is over --max-bytes {}",
            args.min_bytes, args.max_bytes
        )));
    }
    if args.iters == 0 || args.rendezvous_timeout == 0 || args.timeout == 0 {
        return Err(usage(
            "--iters, --rendezvous-timeout and --timeout must be at least 1".to_string(),
        ));
    }
    let rank = std::env::var("RANK")
        .or_else(|_| std::env::var("SLURM_PROCID"))
        .or_else(|_| std::env::var("SKYPILOT_NODE_RANK"))
        .unwrap_or_else(|_| "0".to_string());
    let output_path = args
        .output
        .as_ref()
        .map(|p| PathBuf::from(p.to_string_lossy().replace("%t", rank.trim()).to_string()));
    if let Some(p) = &output_path {
        files::check_new(p).map_err(|e| usage(e.to_string()))?;
    }
    let path = std::env::var("PATH").ok();
    let python = lab_torch::find_python(args.python.as_deref(), path.as_deref())
        .map_err(|e| usage(e.to_string()))?;
    let options = Options {
        backend: args.backend.clone(),
        ops: args.ops.clone(),
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        warmup: args.warmup,
        iters: args.iters,
        port: args.port,
        rendezvous_timeout: Duration::from_secs(args.rendezvous_timeout),
    };
    let bounds = lab_child::Bounds::within(Duration::from_secs(args.timeout));
    let progress = output::Progress::detect(false).shown();
    let mut doc =
        lab_torch::collective::run(&python, &options, progress, bounds).map_err(|e| match e {
            TorchError::Refused(why) => usage(why),
            TorchError::NoPython { .. } | TorchError::Spawn { .. } | TorchError::NoTorch { .. } => {
                usage(e.to_string())
            }
            other => anyhow::Error::new(other),
        })?;
    doc.tool = Some(crate::tool_info());
    doc.node = lab::node::NodeIdentity::detect(None);
    if let Some(p) = &output_path {
        let mut json = serde_json::to_vec_pretty(&doc)?;
        json.push(b'\n');
        let written = files::write_new(p, &json)?;
        if let Some(warning) = written.warning(p) {
            output::warn(&warning);
        }
    }
    if args.json {
        output::print_json(&doc)?;
    } else {
        output::print_text(&render(&doc))?;
    }
    let wrong = doc.results.iter().any(|r| !r.correct || r.wrong_ranks > 0);
    Ok(if wrong {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// nccl-tests' table: one row per operation and size.
pub fn render(doc: &CollectiveDocument) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "collective: rank {} of {} ({}, torch {} {}, rendezvous {})",
        doc.rank, doc.world_size, doc.backend, doc.torch, doc.torch_build, doc.rendezvous
    );
    let _ = writeln!(
        out,
        "fabric: {}{}{}",
        doc.fabric.transport,
        doc.fabric
            .version
            .as_deref()
            .map(|v| format!(", NCCL {v}"))
            .unwrap_or_default(),
        doc.fabric
            .channels
            .map(|c| format!(", {c} channels"))
            .unwrap_or_default()
    );
    out.push_str(&lab_torch::collective::curve_table(&doc.results, ""));
    if doc.backend == "gloo" {
        let _ = writeln!(
            out,
            "gloo is the CPU test path: its bandwidth is TCP's, never judged against a fabric"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_bytes("8"), Ok(8));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert!(parse_bytes("4").is_err());
        assert!(parse_bytes("1GB").is_err());
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("99999999999GiB").is_err());
    }
}
