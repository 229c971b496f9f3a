//! `iteragpu collective`: the network between the GPUs of every node, measured as nccl-tests'
//! `all_reduce_perf` and `all_gather_perf` measure it, through the machine's PyTorch
//! (`torch.distributed`: NCCL on CUDA, RCCL on ROCm, gloo on CPUs). The Python side is
//! [`COLLECTIVE_PROGRAM`] (`collective.py` beside this file), run once per rank; each rank prints
//! one [`CollectiveDocument`], read back here and judged by [`judge`] and [`slow_pairs`].
//!
//! Bus bandwidth is nccl-tests' figure: algorithm bandwidth (bytes / time) times 2(n-1)/n for an
//! all-reduce and (n-1)/n for an all-gather over n ranks, so that it can be compared with the
//! fabric's own link speed whatever the number of ranks.

use std::path::Path;
use std::time::Duration;

use lab::node::NodeIdentity;
use lab::tool::ToolInfo;
use serde::{Deserialize, Serialize};

use crate::{TorchError, run_program};

/// The collective program, the one copy.
pub const COLLECTIVE_PROGRAM: &str = include_str!("collective.py");

/// The schema every collective document carries.
pub const COLLECTIVE_SCHEMA: &str = "iteragpu.collective/1";

/// The most one rank's document may be: a few hundred bytes per size.
pub const COLLECTIVE_LIMIT: u64 = 4 << 20;

/// The share of the expected bus bandwidth below which the fabric is judged slow: NCCL reaches
/// 80-95% of the link rate at 1 GiB on a healthy fabric (nccl-tests' published figures).
pub const SLOW_SHARE: f64 = 0.7;

/// The share of the pairs' median below which one pair is named slow.
pub const SLOW_PAIR_SHARE: f64 = 0.5;

/// One rank's document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveDocument {
    /// [`COLLECTIVE_SCHEMA`].
    pub schema: String,
    /// The program's version.
    pub program_version: u32,
    /// This build of iteragpu (filled by the binary, absent in the program's own output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolInfo>,
    /// The scheduler's node (filled by the binary; no host name or address otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeIdentity>,
    /// `torch.__version__`.
    pub torch: String,
    /// `CUDA x`, `ROCm, HIP x` or `CPU only`.
    pub torch_build: String,
    /// `nccl` or `gloo`.
    pub backend: String,
    /// `cuda:N` or `cpu`.
    pub device: String,
    /// Where the rendezvous came from: `env`, `slurm` or `skypilot`.
    pub rendezvous: String,
    /// This rank.
    pub rank: u32,
    /// Its rank on its node.
    pub local_rank: u32,
    /// The ranks of the run.
    pub world_size: u32,
    /// Untimed calls per size.
    pub warmup: u32,
    /// Timed calls per size.
    pub iters: u32,
    /// The smallest size asked for, bytes.
    pub min_bytes: u64,
    /// The largest size asked for, bytes.
    pub max_bytes: u64,
    /// What NCCL chose (words only), or gloo's TCP.
    pub fabric: Fabric,
    /// One entry per operation and size.
    pub results: Vec<SizeResult>,
}

/// What the library under torch.distributed chose, as words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fabric {
    /// NCCL's version (absent for gloo).
    pub version: Option<String>,
    /// `IB`, `Socket`, `P2P/SHM (one node)`, `unknown` (NCCL) or `gloo TCP`.
    pub transport: String,
    /// The most collective channels NCCL said it opened.
    pub channels: Option<u32>,
}

/// One operation at one size, as nccl-tests prints a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    /// `all_reduce` or `all_gather`.
    pub op: String,
    /// The bytes of the result buffer.
    pub bytes: u64,
    /// The slowest rank's mean time per call, microseconds.
    pub time_us: f64,
    /// bytes / time, GB/s (10^9).
    pub algbw_gb_s: f64,
    /// algbw x 2(n-1)/n (all-reduce) or (n-1)/n (all-gather), GB/s.
    pub busbw_gb_s: f64,
    /// Whether this rank's result was the expected one.
    pub correct: bool,
    /// How many ranks found a wrong result.
    pub wrong_ranks: u32,
}

/// The bus bandwidth factor of `op` over `n` ranks (nccl-tests' `busBw` factor).
pub fn bus_factor(op: &str, n: u32) -> Option<f64> {
    let n = f64::from(n.max(1));
    match op {
        "all_reduce" => Some(2.0 * (n - 1.0) / n),
        "all_gather" => Some((n - 1.0) / n),
        _ => None,
    }
}

/// The rows as nccl-tests prints them: operation, size, time, algbw, busbw, correct; each line
/// starts with `indent`.
pub fn curve_table(results: &[SizeResult], indent: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{indent}{:>10} {:>12} {:>12} {:>12} {:>12}  correct",
        "op", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{indent}{:>10} {:>12} {:>12.1} {:>12.3} {:>12.3}  {}",
            r.op,
            r.bytes,
            r.time_us,
            r.algbw_gb_s,
            r.busbw_gb_s,
            if r.correct && r.wrong_ranks == 0 {
                "yes".to_string()
            } else {
                format!("NO ({} rank(s) wrong)", r.wrong_ranks.max(1))
            }
        );
    }
    out
}

/// Reads one rank's document, refusing another schema.
pub fn parse(bytes: &[u8]) -> Result<CollectiveDocument, String> {
    let doc: CollectiveDocument = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if doc.schema != COLLECTIVE_SCHEMA {
        return Err(format!(
            "schema {:?} is not {COLLECTIVE_SCHEMA:?}",
            doc.schema
        ));
    }
    Ok(doc)
}

/// The program's options.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `auto`, `nccl` or `gloo`.
    pub backend: String,
    /// `all_reduce`, `all_gather`, or both, comma-separated.
    pub ops: String,
    /// Smallest size, bytes (at least 8).
    pub min_bytes: u64,
    /// Largest size, bytes.
    pub max_bytes: u64,
    /// Untimed calls per size.
    pub warmup: u32,
    /// Timed calls per size.
    pub iters: u32,
    /// The rendezvous port under Slurm and SkyPilot.
    pub port: u16,
    /// How long the ranks wait for each other.
    pub rendezvous_timeout: Duration,
}

/// Runs the program for this rank under `bounds` (see [`lab_child`]); the rank, world size and
/// rendezvous come from the environment (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, Slurm or
/// SkyPilot). A refusal (exit 2) is [`TorchError::Refused`] with the program's sentence.
pub fn run(
    python: &Path,
    options: &Options,
    progress: bool,
    bounds: lab_child::Bounds,
) -> Result<CollectiveDocument, TorchError> {
    let args = vec![
        "--backend".to_string(),
        options.backend.clone(),
        "--ops".to_string(),
        options.ops.clone(),
        "--min-bytes".to_string(),
        options.min_bytes.to_string(),
        "--max-bytes".to_string(),
        options.max_bytes.to_string(),
        "--warmup".to_string(),
        options.warmup.to_string(),
        "--iters".to_string(),
        options.iters.to_string(),
        "--port".to_string(),
        options.port.to_string(),
        "--rendezvous-timeout".to_string(),
        format!("{}", options.rendezvous_timeout.as_secs_f64()),
        "--output".to_string(),
        "-".to_string(),
    ];
    let out = run_program(
        python,
        COLLECTIVE_PROGRAM,
        &args,
        &[],
        progress,
        COLLECTIVE_LIMIT,
        bounds,
    )?;
    parse(&out.stdout).map_err(|reason| TorchError::BadDocument {
        python: python.to_path_buf(),
        what: "collective document",
        reason,
    })
}

/// The judgement of one run's documents (one per rank).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// `passed`, `failed` or `not checked`.
    pub verdict: &'static str,
    /// What fails it, one sentence each.
    pub reasons: Vec<String>,
    /// What was not checked and why, one sentence each.
    pub not_checked: Vec<String>,
    /// The all-reduce bus bandwidth at the largest size, GB/s.
    pub busbw_gb_s: Option<f64>,
}

/// Judges the documents of one run against `expected_busbw_gb_s` (the fabric's figure; `None`
/// when the catalogue does not know it): every rank present and agreeing on the world size,
/// every result correct, no socket fallback under NCCL, and the all-reduce bus bandwidth at the
/// largest size at least [`SLOW_SHARE`] of the expected figure. gloo is a CPU test path: its
/// bandwidth is never checked against a fabric, so such a run is at best `not checked`.
pub fn judge(docs: &[CollectiveDocument], expected_busbw_gb_s: Option<f64>) -> Judgement {
    let mut failed = Vec::new();
    let mut unchecked = Vec::new();
    let Some(first) = docs.first() else {
        return Judgement {
            verdict: "failed",
            reasons: vec!["no collective document was found: no rank reported".to_string()],
            not_checked: Vec::new(),
            busbw_gb_s: None,
        };
    };
    let n = first.world_size;
    if let Some(d) = docs.iter().find(|d| d.world_size != n) {
        failed.push(format!(
            "the ranks disagree on the world size: rank {} has {}, rank {} has {n}",
            d.rank, d.world_size, first.rank
        ));
    }
    let missing: Vec<String> = (0..n)
        .filter(|r| !docs.iter().any(|d| d.rank == *r))
        .map(|r| r.to_string())
        .collect();
    if !missing.is_empty() {
        failed.push(format!(
            "rank(s) {} of {n} left no document",
            missing.join(", ")
        ));
    }
    for d in docs {
        if let Some(r) = d.results.iter().find(|r| !r.correct) {
            failed.push(format!(
                "rank {} found a wrong {} result at {} B",
                d.rank, r.op, r.bytes
            ));
        }
    }
    if let Some(d) = docs
        .iter()
        .find(|d| d.backend == "nccl" && d.fabric.transport == "Socket")
    {
        failed.push(format!(
            "NCCL on rank {} fell back to sockets (NET/Socket): the fabric (InfiniBand or RoCE) \
             was not used",
            d.rank
        ));
    }
    let largest = first
        .results
        .iter()
        .filter(|r| r.op == "all_reduce")
        .max_by_key(|r| r.bytes);
    let busbw = largest.map(|r| r.busbw_gb_s);
    match (largest, expected_busbw_gb_s) {
        (None, _) => unchecked.push("no all-reduce was measured".to_string()),
        (Some(_), _) if first.backend != "nccl" => unchecked.push(format!(
            "bandwidth not checked: {} is the CPU test path, no fabric figure applies",
            first.backend
        )),
        (Some(r), _) if r.bytes < 1 << 30 => unchecked.push(format!(
            "bandwidth not checked: the largest size was {} B, under 1 GiB",
            r.bytes
        )),
        (Some(_), None) => unchecked.push(
            "bandwidth not checked: the catalogue gives no bus bandwidth for this fabric \
             (unknown)"
                .to_string(),
        ),
        (Some(r), Some(want)) if r.busbw_gb_s < SLOW_SHARE * want => failed.push(format!(
            "all-reduce bus bandwidth {:.1} GB/s at {} B is under {:.0}% of the {want:.1} GB/s \
             expected",
            r.busbw_gb_s,
            r.bytes,
            SLOW_SHARE * 100.0
        )),
        (Some(_), Some(_)) => {}
    }
    let verdict = if !failed.is_empty() {
        "failed"
    } else if !unchecked.is_empty() {
        "not checked"
    } else {
        "passed"
    };
    Judgement {
        verdict,
        reasons: failed,
        not_checked: unchecked,
        busbw_gb_s: busbw,
    }
}

/// The pair pass: each `(a, b, busbw)` is one run over two nodes; a pair under
/// [`SLOW_PAIR_SHARE`] of the other pairs' median (the upper one of an even count) is named,
/// and a node in every slow pair (when there are at least two) is named as the slow node. The
/// other pairs, not all of them: on a ring of three nodes a slow node is in two pairs of three,
/// and would be the median itself.
pub fn slow_pairs(pairs: &[(String, String, f64)]) -> Vec<String> {
    if pairs.len() < 2 {
        return Vec::new();
    }
    let others_median = |i: usize| {
        let mut figures: Vec<f64> = pairs
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, p)| p.2)
            .collect();
        figures.sort_by(f64::total_cmp);
        figures[figures.len() / 2]
    };
    let slow: Vec<(&(String, String, f64), f64)> = pairs
        .iter()
        .enumerate()
        .map(|(i, p)| (p, others_median(i)))
        .filter(|(p, median)| p.2 < SLOW_PAIR_SHARE * median)
        .collect();
    let mut out: Vec<String> = slow
        .iter()
        .map(|((a, b, f), median)| {
            format!(
                "the pair {a}-{b} is slow: {f:.3} GB/s against the other pairs' median {median:.3} GB/s"
            )
        })
        .collect();
    let slow: Vec<&(String, String, f64)> = slow.into_iter().map(|(p, _)| p).collect();
    if slow.len() >= 2 {
        for node in [&slow[0].0, &slow[0].1] {
            if slow.iter().all(|(a, b, _)| a == node || b == node) {
                out.push(format!("the node {node} is in every slow pair"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(rank: u32, n: u32, backend: &str, busbw: f64, bytes: u64) -> CollectiveDocument {
        CollectiveDocument {
            schema: COLLECTIVE_SCHEMA.to_string(),
            program_version: 1,
            tool: None,
            node: None,
            torch: "2.11.0".into(),
            torch_build: "CUDA 13.0".into(),
            backend: backend.into(),
            device: "cuda:0".into(),
            rendezvous: "slurm".into(),
            rank,
            local_rank: 0,
            world_size: n,
            warmup: 5,
            iters: 20,
            min_bytes: 8,
            max_bytes: bytes,
            fabric: Fabric {
                version: Some("2.27.3".into()),
                transport: "IB".into(),
                channels: Some(16),
            },
            results: vec![SizeResult {
                op: "all_reduce".into(),
                bytes,
                time_us: 1.0,
                algbw_gb_s: busbw / 1.5,
                busbw_gb_s: busbw,
                correct: true,
                wrong_ranks: 0,
            }],
        }
    }

    fn four(busbw: f64) -> Vec<CollectiveDocument> {
        (0..4).map(|r| doc(r, 4, "nccl", busbw, 1 << 30)).collect()
    }

    #[test]
    fn bus_factors_are_nccl_tests_ones() {
        assert_eq!(bus_factor("all_reduce", 4), Some(1.5));
        assert_eq!(bus_factor("all_gather", 4), Some(0.75));
        assert_eq!(bus_factor("all_reduce", 1), Some(0.0));
        assert_eq!(bus_factor("broadcast", 4), None);
    }

    #[test]
    fn a_slow_fabric_fails() {
        let j = judge(&four(100.0), Some(400.0));
        assert_eq!(j.verdict, "failed");
        assert!(j.reasons[0].contains("100.0 GB/s"), "{j:?}");
    }

    #[test]
    fn a_socket_fallback_is_named() {
        let mut docs = four(380.0);
        docs[2].fabric.transport = "Socket".into();
        let j = judge(&docs, Some(400.0));
        assert_eq!(j.verdict, "failed");
        assert!(
            j.reasons[0].contains("rank 2 fell back to sockets"),
            "{j:?}"
        );
    }

    #[test]
    fn missing_ranks_and_wrong_results_fail() {
        let mut docs = four(380.0);
        docs.remove(3);
        docs[1].results[0].correct = false;
        let j = judge(&docs, Some(400.0));
        assert_eq!(j.verdict, "failed");
        assert!(
            j.reasons
                .iter()
                .any(|r| r == "rank(s) 3 of 4 left no document")
        );
        assert!(j.reasons.iter().any(|r| r.contains("rank 1 found a wrong")));
        let mut docs = four(380.0);
        docs[0].world_size = 3;
        assert_eq!(judge(&docs, Some(400.0)).verdict, "failed");
        assert_eq!(judge(&[], Some(400.0)).verdict, "failed");
    }

    #[test]
    fn unknown_figures_gloo_and_small_runs_are_not_checked() {
        let j = judge(&four(380.0), None);
        assert_eq!(j.verdict, "not checked");
        assert!(j.reasons.is_empty(), "{j:?}");
        assert!(j.not_checked[0].contains("(unknown)"), "{j:?}");
        let gloo: Vec<_> = (0..4).map(|r| doc(r, 4, "gloo", 1.0, 1 << 30)).collect();
        assert_eq!(judge(&gloo, Some(400.0)).verdict, "not checked");
        let small: Vec<_> = (0..4).map(|r| doc(r, 4, "nccl", 380.0, 1 << 20)).collect();
        assert_eq!(judge(&small, Some(400.0)).verdict, "not checked");
    }

    #[test]
    fn a_healthy_fabric_passes() {
        let j = judge(&four(380.0), Some(400.0));
        assert_eq!(j.verdict, "passed", "{j:?}");
        assert_eq!(j.busbw_gb_s, Some(380.0));
    }

    #[test]
    fn the_slow_pair_and_node_are_named() {
        let p = |a: &str, b: &str, f| (a.to_string(), b.to_string(), f);
        let pairs = [
            p("n1", "n2", 10.0),
            p("n1", "n3", 10.5),
            p("n3", "n4", 0.8),
            p("n2", "n4", 0.9),
            p("n1", "n4", 1.0),
            p("n2", "n3", 9.5),
        ];
        let out = slow_pairs(&pairs);
        assert!(out[0].starts_with("the pair n3-n4 is slow"), "{out:?}");
        assert!(out.iter().any(|l| l == "the node n4 is in every slow pair"));
        let even = [p("n1", "n2", 10.0), p("n3", "n4", 9.0)];
        assert!(slow_pairs(&even).is_empty());
        // A ring of three with one slow node: it is in two of the three pairs.
        let ring = [p("n1", "n2", 10.0), p("n2", "n3", 1.0), p("n3", "n1", 1.1)];
        let out = slow_pairs(&ring);
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out.iter().any(|l| l == "the node n3 is in every slow pair"));
        let ring = [p("n1", "n2", 10.0), p("n2", "n3", 9.0), p("n3", "n1", 9.5)];
        assert!(slow_pairs(&ring).is_empty());
    }

    #[test]
    fn a_document_of_another_schema_is_refused() {
        let mut d = doc(0, 1, "gloo", 0.0, 8);
        d.schema = "x".into();
        assert!(parse(&serde_json::to_vec(&d).unwrap()).is_err());
        d.schema = COLLECTIVE_SCHEMA.into();
        assert_eq!(parse(&serde_json::to_vec(&d).unwrap()).unwrap(), d);
    }
}
