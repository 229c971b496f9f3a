//! The torch engine: iteragpu's measurement protocol run by the machine's own PyTorch, on CUDA or
//! ROCm (whose build answers the same `torch.cuda` calls and counters), so that a GPU the native
//! engine cannot drive (an AMD MI300X) is measured all the same, and so that the native engine's
//! counters can be compared with torch's own on one machine.
//!
//! The protocol is one Python program, [`PROGRAM`] (`engine.py` beside this file), carried inside
//! the binary and run with `python -c`: nothing is installed or unpacked, and the notebook holds a
//! copy generated from the same file. The program prints the document on stdout; this crate
//! reads it back as a [`MeasurementDocument`] (so every reader of documents accepts it) and never
//! writes a file itself: the caller does, as for the native engine.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use lab::measure::document::{MEASUREMENT_LIMIT, MeasurementDocument};
use lab_child::{Bounds, Ended};

pub mod collective;
pub mod environment;

/// The engine's Python program, the one copy.
pub const PROGRAM: &str = include_str!("engine.py");

/// How long the search for a Python with torch waits for one `python3` to answer (it imports
/// nothing, so a healthy one answers in well under a second).
pub const PROBE_DEADLINE: Duration = Duration::from_secs(30);

/// The longest stderr line kept for an error message, in bytes (the rest of a line is dropped).
const LINE_LIMIT: usize = 2000;

/// How the program's stderr lines that are meant for the user start.
const PREFIX: &str = "iteragpu: torch engine: ";

/// Why the torch engine produced no document.
#[derive(Debug, thiserror::Error)]
pub enum TorchError {
    /// No Python on the `PATH` can import torch.
    #[error(
        "no python3 on the PATH has PyTorch ({searched}); install PyTorch for CUDA or ROCm, or \
         give --python PATH; nothing was written"
    )]
    NoPython {
        /// Each interpreter tried, and why it was passed over.
        searched: String,
    },
    /// The interpreter could not be started.
    #[error("--python {python}: cannot be run ({source}); nothing was written")]
    Spawn {
        /// The interpreter.
        python: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The program refused the run before measuring: no torch, no GPU, a bad device.
    #[error("{0}")]
    Refused(String),
    /// The pre-flight estimate exceeds what the GPU has free.
    #[error("{0}")]
    WouldNotFit(String),
    /// The Python cannot import torch (or a package torch needs): refused, like a Python that
    /// has none.
    #[error(
        "--python {python} cannot import PyTorch ({line}); install PyTorch for CUDA or ROCm into \
         it, or give another --python; nothing was written"
    )]
    NoTorch {
        /// The interpreter.
        python: PathBuf,
        /// Its last line on stderr.
        line: String,
    },
    /// The program was still running at its deadline; it and everything it started were ended.
    #[error(
        "the torch engine ({python}) did not finish within {}, so it and every process it \
         started were ended{detail}; give a longer --timeout if the run needs it; nothing was \
         written", lab_child::format_duration(*.after)
    )]
    Deadline {
        /// The interpreter.
        python: PathBuf,
        /// The deadline.
        after: Duration,
        /// Its last line on stderr.
        detail: String,
    },
    /// The run was interrupted (Ctrl-C, SIGTERM, SIGHUP); it and everything it started were
    /// ended.
    #[error(
        "the torch engine ({python}) was interrupted (Ctrl-C, SIGTERM or SIGHUP), so it and every \
         process it started were ended; nothing was written"
    )]
    Interrupted {
        /// The interpreter.
        python: PathBuf,
    },
    /// The program ended without a document.
    #[error(
        "the torch engine ({python}) ended with {status} and wrote no document{detail}; nothing \
         was written"
    )]
    Failed {
        /// The interpreter.
        python: PathBuf,
        /// Its exit status, in words.
        status: String,
        /// Its last line on stderr.
        detail: String,
    },
    /// The program printed something that is not a measurement document.
    #[error("the torch engine ({python}) printed no valid {what} ({reason}); nothing was written")]
    BadDocument {
        /// The interpreter.
        python: PathBuf,
        /// What it should have printed (`measurement document`).
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
}

/// The interpreter to run the program with: `explicit` when given, else the first `python3` on
/// `path` (a `PATH` value) that has a `torch` package, found without importing it.
pub fn find_python(explicit: Option<&Path>, path: Option<&str>) -> Result<PathBuf, TorchError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let mut searched = Vec::new();
    let mut seen = Vec::new();
    for dir in std::env::split_paths(path.unwrap_or_default()) {
        let candidate = dir.join("python3");
        if !candidate.is_file() {
            continue;
        }
        // The same folder twice (`/bin` is `/usr/bin` on merged systems) is tried once; a venv's
        // python3 links to the system's interpreter yet has its own packages, so the folder, not
        // the interpreter's file, is what counts.
        let real = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        if seen.contains(&real) {
            continue;
        }
        seen.push(real);
        match has_torch(&candidate) {
            Ok(Ended::Exited(0)) => return Ok(candidate),
            Ok(Ended::Exited(_)) => searched.push(format!("{}: no torch", candidate.display())),
            Ok(Ended::Deadline(d)) => searched.push(format!(
                "{}: no answer within {}",
                candidate.display(),
                lab_child::format_duration(d)
            )),
            Ok(other) => searched.push(format!("{}: {other}", candidate.display())),
            Err(e) => searched.push(format!("{}: {e}", candidate.display())),
        }
    }
    Err(TorchError::NoPython {
        searched: if searched.is_empty() {
            "none found".to_string()
        } else {
            format!("tried {}", searched.join(", "))
        },
    })
}

/// Whether `python` has a `torch` package, found without importing it, within
/// [`PROBE_DEADLINE`].
fn has_torch(python: &Path) -> std::io::Result<Ended> {
    let mut cmd = lab_child::command(python, Bounds::within(PROBE_DEADLINE))?;
    cmd.args([
        "-c",
        "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    lab_child::spawn(&mut cmd)?.wait()
}

/// What a finished program left: the document, and the notes it printed for the user.
#[derive(Debug)]
pub struct Finished {
    /// The document (complete or not, as `complete` says).
    pub document: MeasurementDocument,
    /// The program's notes (a torch other than the mirrored one), without the prefix.
    pub notes: Vec<String>,
}

/// Runs the program with `python` and `args` (the program's options, `--output -` added here),
/// with `env` set for it, under `bounds` (see [`lab_child`]: its own process group, ended with
/// everything it started at the deadline, on Ctrl-C and when this process dies); its per-phase
/// lines go to stderr when `progress`.
pub fn run(
    python: &Path,
    args: &[String],
    env: &[(String, String)],
    progress: bool,
    bounds: Bounds,
) -> Result<Finished, TorchError> {
    let mut all = args.to_vec();
    all.extend(["--output".to_string(), "-".to_string()]);
    let output = run_program(
        python,
        PROGRAM,
        &all,
        env,
        progress,
        MEASUREMENT_LIMIT,
        bounds,
    )?;
    let document = parse(&output.stdout).map_err(|reason| TorchError::BadDocument {
        python: python.to_path_buf(),
        what: "measurement document",
        reason,
    })?;
    let notes = output
        .kept
        .iter()
        .filter_map(|l| l.strip_prefix(PREFIX))
        .filter_map(|l| l.strip_prefix("note: "))
        .map(str::to_string)
        .collect();
    Ok(Finished { document, notes })
}

/// What a program that ended with 0 or 1 left: its stdout (within the limit) and the stderr
/// lines that were not progress.
struct Output {
    stdout: Vec<u8>,
    kept: Vec<String>,
}

/// Starts `program` (one of this crate's Python programs) with `python -c`, `args` and `env`
/// under `bounds`, and waits for it: exit 2 is a refusal, 3 would not fit, 0 or 1 leave their
/// stdout (at most `limit` bytes), anything else is a failure. The one place a Python child is
/// started, so that every program of the engine is started, bounded and reaped the same way.
fn run_program(
    python: &Path,
    program: &str,
    args: &[String],
    env: &[(String, String)],
    progress: bool,
    limit: u64,
    bounds: Bounds,
) -> Result<Output, TorchError> {
    let spawn_error = |source| TorchError::Spawn {
        python: python.to_path_buf(),
        source,
    };
    let mut cmd = lab_child::command(python, bounds).map_err(spawn_error)?;
    cmd.arg("-c")
        .arg(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = lab_child::spawn(&mut cmd).map_err(spawn_error)?;
    let stderr = child.stderr().expect("stderr is piped");
    let lines = std::thread::spawn(move || {
        let mut kept = std::collections::VecDeque::new();
        lab_child::for_each_line(stderr, LINE_LIMIT, |line| {
            if line.starts_with("  ") && !line.trim().is_empty() {
                if progress {
                    eprintln!("{line}");
                }
            } else {
                kept.push_back(line.to_string());
                if kept.len() > 200 {
                    kept.pop_front();
                }
            }
        });
        Vec::from(kept)
    });
    let mut stdout = Vec::new();
    let read = child
        .stdout()
        .expect("stdout is piped")
        .take(limit + 1)
        .read_to_end(&mut stdout);
    let ended = child.wait().map_err(spawn_error);
    let kept = lines.join().unwrap_or_default();
    let ended = ended?;
    let said = |kept: &[String]| -> Option<String> {
        kept.iter()
            .rev()
            .find_map(|l| l.strip_prefix(PREFIX))
            .map(str::to_string)
    };
    let python = python.to_path_buf();
    match ended {
        Ended::Exited(2) => {
            return Err(TorchError::Refused(said(&kept).unwrap_or_else(|| {
                format!("the torch engine refused the options{}", tail(&kept))
            })));
        }
        Ended::Exited(3) => {
            return Err(TorchError::WouldNotFit(
                said(&kept).unwrap_or_else(|| "the run would not fit".to_string()),
            ));
        }
        Ended::Deadline(after) => {
            return Err(TorchError::Deadline {
                python,
                after,
                detail: tail(&kept),
            });
        }
        Ended::Stopped(_) => {
            // Which of the signals came first is a race (a Ctrl-C reaches the supervisor and,
            // forwarded, this process), so none is named.
            return Err(TorchError::Interrupted { python });
        }
        Ended::Exited(0 | 1) if stdout.iter().all(u8::is_ascii_whitespace) => {
            // Nothing printed: Python ended before the program ran (it cannot import torch, or
            // cannot even read the program); its own last line says why.
            if let Some(line) = last_line(&kept).filter(|l| is_import_error(l)) {
                return Err(TorchError::NoTorch { python, line });
            }
            return Err(TorchError::Failed {
                python,
                status: ended.to_string(),
                detail: tail(&kept),
            });
        }
        Ended::Exited(0 | 1) => {}
        Ended::Exited(_) | Ended::Signalled(_) => {
            return Err(TorchError::Failed {
                python,
                status: ended.to_string(),
                detail: tail(&kept),
            });
        }
    }
    if let Err(e) = read {
        return Err(TorchError::BadDocument {
            python,
            what: "output",
            reason: format!("reading it failed: {e}"),
        });
    }
    if stdout.len() as u64 > limit {
        return Err(TorchError::BadDocument {
            python,
            what: "output",
            reason: format!("it is over {limit} bytes"),
        });
    }
    Ok(Output { stdout, kept })
}

/// Whether Python's last word is that a module cannot be imported (torch, or one it needs).
fn is_import_error(line: &str) -> bool {
    line.starts_with("ModuleNotFoundError:") || line.starts_with("ImportError:")
}

/// Reads the program's output as a measurement document of the torch engine.
pub fn parse(bytes: &[u8]) -> Result<MeasurementDocument, String> {
    let doc: MeasurementDocument = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    match &doc.engine {
        Some(e) if e.name == "torch" => Ok(doc),
        _ => Err("it has no torch engine section".to_string()),
    }
}

/// The program's last non-empty line on stderr, trimmed.
fn last_line(kept: &[String]) -> Option<String> {
    kept.iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// The program's last line on stderr, quoted for an error sentence (empty when it printed none).
fn tail(kept: &[String]) -> String {
    match last_line(kept) {
        Some(line) => format!("; its last line on stderr: {line:?}"),
        None => "; it printed nothing on stderr".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_the_engine_file() {
        assert!(PROGRAM.starts_with("#!/usr/bin/env python3\n\"\"\"iteragpu's torch engine"));
        assert!(PROGRAM.contains("def entry(argv):"));
    }

    #[test]
    fn import_errors_are_told_from_other_last_lines() {
        assert!(is_import_error(
            "ModuleNotFoundError: No module named 'torch'"
        ));
        assert!(is_import_error(
            "ImportError: libcudart.so.13: cannot open shared object file"
        ));
        assert!(!is_import_error("RuntimeError: CUDA error"));
        assert!(!is_import_error("  ImportError: in a traceback line"));
    }

    #[test]
    fn the_last_line_is_quoted_and_silence_is_said() {
        let kept = [
            "Traceback".to_string(),
            "E: x \"y\"".to_string(),
            " ".to_string(),
        ];
        assert_eq!(tail(&kept), "; its last line on stderr: \"E: x \\\"y\\\"\"");
        assert_eq!(tail(&[]), "; it printed nothing on stderr");
    }

    #[test]
    fn no_python_on_an_empty_path() {
        let dir = tempfile::tempdir().unwrap();
        let e = find_python(None, dir.path().to_str()).unwrap_err();
        assert!(e.to_string().contains("(none found)"), "{e}");
    }

    #[test]
    fn a_document_without_the_engine_section_is_refused() {
        assert!(parse(b"{}").is_err());
    }
}
