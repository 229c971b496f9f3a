//! `iteragpu sweep`: one dimension raised point by point, each point a fresh `measure` process,
//! until the points run out or memory does.
//!
//! Why a child process per point: a clean allocator and a clean device context each time (as the
//! original asks, "in a new process"), and a crash or an out-of-memory in one point cannot take
//! the sweep down with it. Why the child does the pre-flight check rather than the parent: the
//! parent never opens the device, so a CUDA context of its own never eats into the memory the
//! points are measured against. The child refuses a point that would not fit with a sentence
//! that starts with [`run::WOULD_NOT_FIT`], which the parent recognises.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use lab::dtype::DType;
use lab::measure::config::{MeasureOptions, Plan};
use lab::measure::document::MeasurementDocument;
use serde::Serialize;
use sweep::{Dimension, Outcome, Point, PointRunner, Row, Spec, Status, Stop};

use crate::exit::usage;
use crate::output::{self, Progress};
use crate::run::{self, RunOptions};
use lab_io::bytes::binary as bytes;

/// Options of `sweep`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu sweep --device cuda:0 --batch 2 --context 128 --width 64..8192:x2 --dtype bfloat16 \\
      --warmup 1 --repeats 3 --output-dir runs/width
  iteragpu sweep --device cpu --batch 1,2,4,8 --width 256 --output-dir runs/batch
  iteragpu sweep --device cuda:0 --context 128..2048:+128 --max-memory 6GiB --output-dir runs/ctx

Exactly one of --batch, --context, --width, --hidden is a list (64,128,256) or a range with a
step (64..8192:x2 doubles, 64..512:+64 adds). Each point runs `iteragpu measure` in a new process
and writes DIR/point-<option>-<value>.json; DIR/summary.csv lists the point as `running` before
it starts and gets its result after it, so it names every document in the folder at any moment.
Before each point the pre-flight estimate is compared with the device's free memory x
--max-memory-fraction (and --max-memory); the sweep stops at the first point that would not fit,
runs out of memory or fails, and keeps everything measured before it. Ctrl-C or SIGTERM stops
after the point in progress; the points not run are listed as `interrupted`. The folder is
claimed for the sweep's whole life (DIR/.iteragpu-sweep.lock): a second sweep into it is
refused. A point's process dies with the sweep, even when the sweep is killed.

A line per finished point goes to stderr. On a terminal a progress bar shows too; with
TERM=dumb, or --progress when stderr is not a terminal, a plain line also says when each point
starts. A CPU sweep says so above its table, and summary.csv's `device` column names the device
of every row (`cpu`: the CPU reference device, host arithmetic, not a GPU figure).

Exit codes: 0 every point ran, or the sweep stopped at a memory limit after at least one point;
1 a point failed, no point fitted, or the sweep was interrupted; 2 bad options, a folder that is
not new or empty, or no usable GPU.")]
pub struct Args {
    /// `cuda:N` for an NVIDIA GPU, or `cpu` for the CPU reference device.
    #[arg(long)]
    pub device: String,
    /// Batch size, or a list/range to sweep.
    #[arg(long, default_value = "1", value_parser = parse_spec, value_name = "N|LIST|RANGE")]
    pub batch: Spec,
    /// Positions per sequence, or a list/range to sweep.
    #[arg(long, default_value = "16", value_parser = parse_spec, value_name = "N|LIST|RANGE")]
    pub context: Spec,
    /// Model width, or a list/range to sweep.
    #[arg(long, default_value = "64", value_parser = parse_spec, value_name = "N|LIST|RANGE")]
    pub width: Spec,
    /// Hidden width [default: 4 x width], or a list/range to sweep.
    #[arg(long, value_parser = parse_spec, value_name = "N|LIST|RANGE")]
    pub hidden: Option<Spec>,
    /// Storage type, passes, seed and math mode, as for `measure`.
    #[command(flatten)]
    pub run: RunOptions,
    /// Refuse a point when its pre-flight estimate exceeds the device's free memory times this
    /// fraction (0 < F <= 1).
    #[arg(long, default_value_t = 0.9, value_parser = run::parse_fraction, value_name = "F")]
    pub max_memory_fraction: f64,
    /// Refuse a point when its pre-flight estimate exceeds this many bytes, whatever is free:
    /// 1073741824, 512MiB, 6GiB.
    #[arg(long, value_parser = run::parse_max_memory, value_name = "BYTES")]
    pub max_memory: Option<u64>,
    /// The folder for the documents and summary.csv: new (it is created) or empty.
    #[arg(long, value_name = "DIR")]
    pub output_dir: PathBuf,
    /// Print the summary as one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Say when each point starts, in plain lines on stderr, even when stderr is not a terminal
    /// (on a terminal it always shows: a bar, or plain lines with TERM=dumb).
    #[arg(long)]
    pub progress: bool,
}

fn parse_spec(text: &str) -> Result<Spec, String> {
    sweep::parse_spec(text).map_err(|e| e.to_string())
}

/// What `sweep --json` prints.
#[derive(Debug, Serialize)]
struct SweepSummary<'a> {
    schema: &'static str,
    device: &'a str,
    /// `native` or `torch`.
    engine: &'a str,
    /// True for `--device cpu`: host arithmetic, not a GPU figure.
    reference_device: bool,
    dimension: &'static str,
    values: Vec<usize>,
    output_dir: &'a Path,
    summary: PathBuf,
    stopped: &'static str,
    note: String,
    rows: &'a [Row],
}

/// Runs `sweep`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (dimension, values) = varied(&args)?;
    let dtype: DType = args
        .run
        .dtype
        .parse()
        .map_err(|e| usage(format!("--dtype: {e}")))?;
    if args.device != "cpu" && lab_cuda::parse_ordinal(&args.device).is_none() {
        return Err(usage(format!(
            "--device {:?} is not a device: use cuda:N (for example cuda:0) or cpu",
            args.device
        )));
    }
    if args.run.engine == "torch" && args.device == "cpu" {
        return Err(usage(
            "--engine torch measures a GPU (cuda:N); the CPU reference device is the native \
             engine's (--device cpu without --engine torch)"
                .to_string(),
        ));
    }
    let one = |s: &Spec| s.values()[0];
    let points = Point::all(
        dimension,
        &values,
        one(&args.batch),
        one(&args.context),
        one(&args.width),
        args.hidden.as_ref().map(one),
    );
    // Every point is checked before the first one runs: a range that reaches an impossible size
    // is a usage error now, not a failure an hour in.
    for p in &points {
        Plan::new(MeasureOptions {
            device: args.device.clone(),
            batch: p.batch,
            context: p.context,
            width: p.width,
            hidden: p.hidden,
            dtype,
            warmup: args.run.warmup,
            repeats: args.run.repeats,
            seed: args.run.seed,
            allow_tf32: args.run.allow_tf32,
        })
        .map_err(|e| usage(format!("point {dimension} {}: {e}", p.value)))?;
    }
    let claim = claim_folder(&args.output_dir)?;
    let written = sweep::write_summary(&args.output_dir, &[])?;
    let summary_path = args.output_dir.join(sweep::summary::SUMMARY_FILE);
    if let Some(warning) = written.warning(&summary_path) {
        output::warn(&warning);
    }

    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = Arc::clone(&interrupted);
        // Ctrl-C, SIGTERM and SIGHUP alike. Without a handler they still end the sweep; its
        // point's process then dies with it, and the summary names the point as `running`.
        let _ = ctrlc::set_handler(move || {
            if !flag.swap(true, Ordering::SeqCst) {
                eprintln!(
                    "\niteragpu: interrupted: stopping after the point in progress (its process \
                     finishes on its own)"
                );
            }
        });
    }

    let progress = Progress::detect(args.progress);
    let bar = (progress == Progress::Live).then(|| progress_bar(points.len()));
    let exe = std::env::current_exe().context("could not find this program to run the points")?;
    let mut runner = ChildRunner {
        exe,
        args: &args,
        dtype,
        bar: bar.clone(),
    };
    let dir = args.output_dir.clone();
    let total = points.len();
    let (rows, stop) = sweep::run_points(
        &points,
        sweep::run::RunsOn {
            device: &args.device,
            engine: &args.run.engine,
        },
        dtype,
        &mut runner,
        || interrupted.load(Ordering::SeqCst),
        |rows: &[Row]| -> anyhow::Result<()> {
            let _ = sweep::write_summary(&dir, rows)?;
            if let Some(row) = rows.last().filter(|_| progress == Progress::Lines) {
                output::eprint_line(&format!(
                    "[{}/{total}] {} {}: measuring on {}",
                    rows.len(),
                    row.dimension,
                    row.value,
                    args.device
                ));
            }
            Ok(())
        },
        |i, rows: &[Row]| -> anyhow::Result<()> {
            let _ = sweep::write_summary(&dir, rows)?;
            if let Some(row) = rows.get(i).filter(|r| r.status != Status::Interrupted) {
                point_line(bar.as_ref(), i, total, row);
            }
            Ok(())
        },
    )?;
    drop(claim);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }

    let last = rows.last();
    let ok = rows.iter().filter(|r| r.status == Status::Ok).count();
    let not_run = total - rows.len();
    let note = match (stop, last) {
        (Stop::Finished, _) => format!("all {total} points measured"),
        (Stop::Interrupted, _) => format!(
            "interrupted after {ok} point(s); {} point(s) not run",
            rows.iter()
                .filter(|r| r.status == Status::Interrupted)
                .count()
        ),
        (_, Some(r)) => format!(
            "stopped at {} {}: {}: {}{}",
            dimension,
            r.value,
            r.status.name(),
            r.reason,
            if not_run > 0 {
                format!("; {not_run} later point(s) not run")
            } else {
                String::new()
            }
        ),
        (_, None) => "no point ran".to_string(),
    };
    if args.json {
        output::print_json(&SweepSummary {
            schema: "iteragpu.sweep/1",
            device: &args.device,
            engine: &args.run.engine,
            reference_device: args.device == "cpu",
            dimension: dimension.name(),
            values,
            output_dir: &args.output_dir,
            summary: summary_path.clone(),
            stopped: match stop {
                Stop::Finished => "finished",
                Stop::MemoryLimit => "memory_limit",
                Stop::Failed => "failed",
                Stop::Unusable => "unusable_device",
                Stop::Interrupted => "interrupted",
            },
            note: note.clone(),
            rows: &rows,
        })?;
    } else {
        let shown = if args.run.engine == "torch" {
            format!("{} (engine torch: the machine's PyTorch)", args.device)
        } else {
            args.device.clone()
        };
        output::print_text(&table(&shown, dimension, &rows, &note, &summary_path))?;
    }
    match stop {
        Stop::Finished => Ok(ExitCode::SUCCESS),
        Stop::MemoryLimit if ok > 0 => {
            output::eprint_line(&format!("iteragpu: {note}"));
            Ok(ExitCode::SUCCESS)
        }
        Stop::Unusable => Err(usage(format!(
            "{note}; {} keeps the summary",
            summary_path.display()
        ))),
        _ => Ok(crate::exit::fail(&note, 1)),
    }
}

/// The one option given as a list or range, and its values.
fn varied(args: &Args) -> anyhow::Result<(Dimension, Vec<usize>)> {
    let mut many = Vec::new();
    for (dim, spec) in [
        (Dimension::Batch, Some(&args.batch)),
        (Dimension::Context, Some(&args.context)),
        (Dimension::Width, Some(&args.width)),
        (Dimension::Hidden, args.hidden.as_ref()),
    ] {
        if let Some(Spec::Many(values)) = spec {
            many.push((dim, values.clone()));
        }
    }
    match many.len() {
        1 => Ok(many.remove(0)),
        0 => Err(usage(
            "give exactly one of --batch, --context, --width, --hidden as a list or a range \
             (for example --width 64..1024:x2 or --batch 1,2,4); none was",
        )),
        _ => Err(usage(format!(
            "give exactly one of --batch, --context, --width, --hidden as a list or a range; \
             {} were: vary one dimension at a time",
            many.iter()
                .map(|(d, _)| format!("--{d}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ))),
    }
}

/// The file a sweep holds in its folder for its whole life.
pub const CLAIM_FILE: &str = ".iteragpu-sweep.lock";

/// A sweep's exclusive hold on its folder: the claim file, created exclusively and locked, then
/// removed when the sweep ends (a sweep that is killed leaves it, and the folder is then not
/// empty for another sweep anyway).
struct Claim {
    path: PathBuf,
    _file: std::fs::File,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An error creating or writing in `--output-dir` that the user fixes by choosing another folder.
fn folder_error(dir: &Path, e: &std::io::Error) -> anyhow::Error {
    usage(format!(
        "--output-dir {}: cannot create or write in it: {}; choose a folder you can write to",
        dir.display(),
        lab_io::files::os_message(e)
    ))
}

/// Claims the folder for this sweep: it must be new (it is created) or empty, so the summary
/// describes all of it, and no other sweep may write into it meanwhile. Checked before the first
/// point: a folder that cannot be created or written is a usage error, not a failure later.
fn claim_folder(dir: &Path) -> anyhow::Result<Claim> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(usage(format!(
                "--output-dir {} is not a folder",
                dir.display()
            )));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| folder_error(dir, &e))?;
        }
        Err(e) => return Err(folder_error(dir, &e)),
    }
    let path = dir.join(CLAIM_FILE);
    let not_empty = |what: String| {
        usage(format!(
            "--output-dir {} is not empty ({what}); a sweep writes into a new or empty folder so \
             that its summary describes everything in it",
            dir.display()
        ))
    };
    let mut entries = std::fs::read_dir(dir).map_err(|e| folder_error(dir, &e))?;
    if let Some(entry) = entries.next() {
        let name = entry
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == CLAIM_FILE {
            let held = lab_io::files::open_input(&path).is_ok_and(|f| f.try_lock().is_err());
            return Err(not_empty(if held {
                "another sweep is writing into it now".to_string()
            } else {
                format!("a sweep that was killed left {CLAIM_FILE} in it")
            }));
        }
        return Err(not_empty(format!("it holds {name}")));
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                not_empty("another sweep claimed it a moment ago".to_string())
            } else {
                folder_error(dir, &e)
            }
        })?;
    let claim = Claim {
        path: path.clone(),
        _file: file,
    };
    claim._file.lock().map_err(|e| folder_error(dir, &e))?;
    let _ = writeln!(&claim._file, "{}", std::process::id());
    // Anything else that appeared between the check and the claim (a non-sweep writer) would be
    // left out of the summary: refuse it too.
    let others = std::fs::read_dir(dir)
        .map_err(|e| folder_error(dir, &e))?
        .filter_map(Result::ok)
        .find(|e| e.file_name() != CLAIM_FILE);
    if let Some(other) = others {
        return Err(not_empty(format!(
            "{} appeared in it",
            other.file_name().to_string_lossy()
        )));
    }
    lab_io::files::check_new(&dir.join(sweep::summary::SUMMARY_FILE))
        .map_err(|e| usage(e.to_string()))?;
    Ok(claim)
}

/// Runs each point as `iteragpu measure` in a new process.
struct ChildRunner<'a> {
    exe: PathBuf,
    args: &'a Args,
    dtype: DType,
    bar: Option<ProgressBar>,
}

/// The most of a point's stderr kept for its failure's reason: its last lines, each bounded.
const KEPT_LINES: usize = 50;

impl PointRunner for ChildRunner<'_> {
    fn run(&mut self, point: &Point) -> Outcome {
        let a = self.args;
        let file = a.output_dir.join(point.file_name());
        if let Some(bar) = &self.bar {
            bar.set_message(format!("measuring {} {}", point.dimension, point.value));
        }
        // Each point runs under a deadline: its measurement's own (`run::default_timeout`,
        // or --timeout) and a margin for the measure process itself.
        let deadline = a.run.timeout.unwrap_or_else(|| {
            Plan::new(MeasureOptions {
                device: a.device.clone(),
                batch: point.batch,
                context: point.context,
                width: point.width,
                hidden: point.hidden,
                dtype: self.dtype,
                warmup: a.run.warmup,
                repeats: a.run.repeats,
                seed: a.run.seed,
                allow_tf32: a.run.allow_tf32,
            })
            .map_or(run::STARTUP_ALLOWANCE, |plan| run::default_timeout(&plan))
        }) + run::POINT_MARGIN;
        let mut cmd = match lab_child::command(&self.exe, lab_child::Bounds::within(deadline)) {
            Ok(cmd) => cmd,
            Err(e) => {
                return Outcome::Failed {
                    reason: format!("could not start {}: {e}", self.exe.display()),
                    unusable: false,
                };
            }
        };
        cmd.arg("measure")
            .args(["--device", &a.device])
            .args(["--batch", &point.batch.to_string()])
            .args(["--context", &point.context.to_string()])
            .args(["--width", &point.width.to_string()]);
        if let Some(h) = point.hidden {
            cmd.args(["--hidden", &h.to_string()]);
        }
        cmd.args(a.run.to_args())
            .args(["--max-memory-fraction", &a.max_memory_fraction.to_string()]);
        if let Some(m) = a.max_memory {
            cmd.args(["--max-memory", &m.to_string()]);
        }
        cmd.arg("--output")
            .arg(&file)
            .env(crate::child::PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Its own process group: a Ctrl-C at the terminal reaches the sweep only, so the point
        // in progress finishes and writes its document. If the sweep itself dies, the point's
        // processes die with it (lab_child's supervisor).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let started = lab_child::spawn(&mut cmd).and_then(|mut child| {
            let mut kept = std::collections::VecDeque::new();
            if let Some(stderr) = child.stderr() {
                lab_child::for_each_line(stderr, 2000, |line| {
                    kept.push_back(line.to_string());
                    if kept.len() > KEPT_LINES {
                        kept.pop_front();
                    }
                });
            }
            Ok((child.wait()?, Vec::from(kept).join("\n")))
        });
        let (ended, stderr) = match started {
            Ok(out) => out,
            Err(e) => {
                return Outcome::Failed {
                    reason: format!("could not start {}: {e}", self.exe.display()),
                    unusable: false,
                };
            }
        };
        let message = stderr
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("iteragpu: error: "))
            .unwrap_or(stderr.trim())
            .to_string();
        if file.is_file() {
            return match read_document(&file) {
                Ok(doc) => Outcome::Measured(Box::new(doc)),
                Err(e) => Outcome::Failed {
                    reason: format!("{e:#}"),
                    unusable: false,
                },
            };
        }
        if let Some(why) = message.strip_prefix(run::WOULD_NOT_FIT) {
            return Outcome::WouldNotFit(why.to_string());
        }
        let reason = match ended {
            lab_child::Ended::Exited(_) if !message.is_empty() => message,
            lab_child::Ended::Exited(code) => {
                format!("the measurement exited with code {code} and no message")
            }
            lab_child::Ended::Signalled(_) => format!(
                "the measurement process was killed ({ended}); the host may have run out of memory"
            ),
            lab_child::Ended::Deadline(_) | lab_child::Ended::Stopped(_) => format!(
                "the measurement process had {ended}, so it and every process it started were \
                 ended (--timeout gives a point more time){}",
                stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| format!("; its last line on stderr: {:?}", l.trim()))
                    .unwrap_or_default()
            ),
        };
        Outcome::Failed {
            reason,
            unusable: ended.code() == Some(2),
        }
    }
}

fn read_document(path: &Path) -> anyhow::Result<MeasurementDocument> {
    let bytes = lab_io::files::read_bounded(
        path,
        lab::measure::document::MEASUREMENT_LIMIT,
        lab::measure::document::MEASUREMENT_KIND,
    )?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a measurement document", path.display()))
}

/// The progress bar of a terminal that can draw one ([`Progress::Live`]); uncoloured. Finished
/// points get a line either way.
fn progress_bar(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// One line per finished point on stderr (above the bar on a terminal).
fn point_line(bar: Option<&ProgressBar>, i: usize, total: usize, row: &Row) {
    let mut line = format!(
        "[{}/{}] {} {}: {}",
        i + 1,
        total,
        row.dimension,
        row.value,
        row.status.name()
    );
    if let Some(w) = row.warm_forward_median_wall_seconds {
        line.push_str(&format!(", {:.3} ms wall", w * 1e3));
    }
    if let Some(d) = row.warm_forward_median_device_seconds {
        line.push_str(&format!(", {:.3} ms device", d * 1e3));
    }
    if let Some(f) = row.achieved_flops_per_second {
        line.push_str(&format!(", {:.2} GFLOP/s", f / 1e9));
    }
    if let Some(r) = row.peak_reserved_bytes {
        line.push_str(&format!(", peak reserved {}", bytes(r)));
    }
    if !row.reason.is_empty() {
        line.push_str(&format!(" ({})", row.reason));
    }
    match bar {
        Some(bar) => {
            bar.inc(1);
            bar.println(lab_io::text::printable_lines(&line));
        }
        None => output::eprint_line(&line),
    }
}

/// The line above a CPU sweep's table, as `measure` says it of one run.
pub const CPU_REFERENCE_LINE: &str = "CPU REFERENCE DEVICE: real arithmetic on the host CPU, not a GPU measurement (summary.csv: device cpu)";

/// The table printed at the end, under the device it ran on.
fn table(device: &str, dimension: Dimension, rows: &[Row], note: &str, summary: &Path) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if device == "cpu" {
        let _ = writeln!(s, "{CPU_REFERENCE_LINE}");
    } else {
        let _ = writeln!(s, "device: {device}");
    }
    let _ = writeln!(
        s,
        "{:>9} {:<14} {:>12} {:>12} {:>11} {:>11} {:>11}  file",
        dimension.name(),
        "status",
        "wall ms",
        "device ms",
        "GFLOP/s",
        "alloc peak",
        "resv peak"
    );
    let dash = || "-".to_string();
    for r in rows {
        let _ = writeln!(
            s,
            "{:>9} {:<14} {:>12} {:>12} {:>11} {:>11} {:>11}  {}",
            r.value,
            r.status.name(),
            r.warm_forward_median_wall_seconds
                .map_or_else(dash, |w| format!("{:.3}", w * 1e3)),
            r.warm_forward_median_device_seconds
                .map_or_else(dash, |d| format!("{:.3}", d * 1e3)),
            r.achieved_flops_per_second
                .map_or_else(dash, |f| format!("{:.2}", f / 1e9)),
            r.peak_allocated_bytes.map_or_else(dash, bytes),
            r.peak_reserved_bytes.map_or_else(dash, bytes),
            if r.file.is_empty() { "-" } else { &r.file },
        );
    }
    let _ = writeln!(s, "{note}\nsummary: {}", summary.display());
    s
}
