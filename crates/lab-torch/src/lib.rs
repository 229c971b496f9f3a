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

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lab::measure::document::{MEASUREMENT_LIMIT, MeasurementDocument};

pub mod environment;

/// The engine's Python program, the one copy.
pub const PROGRAM: &str = include_str!("engine.py");

/// The environment variable through which the program learns its parent's process id, so that it
/// dies with the binary (a `measure` killed by its sweep never leaves torch running on the GPU).
pub const PARENT_ENV: &str = "ITERAGPU_TORCH_ENGINE_PARENT";

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
        /// Its last lines on stderr.
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
        let has_torch = Command::new(&candidate)
            .args([
                "-c",
                "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match has_torch {
            Ok(s) if s.success() => return Ok(candidate),
            Ok(_) => searched.push(format!("{}: no torch", candidate.display())),
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

/// What a finished program left: the document, and the notes it printed for the user.
#[derive(Debug)]
pub struct Finished {
    /// The document (complete or not, as `complete` says).
    pub document: MeasurementDocument,
    /// The program's notes (a torch other than the mirrored one), without the prefix.
    pub notes: Vec<String>,
}

/// Runs the program with `python` and `args` (the program's options, `--output -` added here),
/// with `env` set for it; its per-phase lines go to stderr when `progress`.
pub fn run(
    python: &Path,
    args: &[String],
    env: &[(String, String)],
    progress: bool,
) -> Result<Finished, TorchError> {
    let mut all = args.to_vec();
    all.extend(["--output".to_string(), "-".to_string()]);
    let ended = run_program(python, PROGRAM, &all, env, progress, MEASUREMENT_LIMIT)?;
    let document = parse(&ended.stdout).map_err(|reason| TorchError::BadDocument {
        python: python.to_path_buf(),
        what: "measurement document",
        reason,
    })?;
    let notes = ended
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
struct Ended {
    stdout: Vec<u8>,
    kept: Vec<String>,
}

/// Starts `program` (one of this crate's Python programs) with `python -c`, `args` and `env`,
/// and waits for it: exit 2 is a refusal, 3 would not fit, 0 or 1 leave their stdout (at most
/// `limit` bytes), anything else is a failure. The one place a Python child is started, so that
/// every program of the engine is started, bounded and reaped the same way.
fn run_program(
    python: &Path,
    program: &str,
    args: &[String],
    env: &[(String, String)],
    progress: bool,
    limit: u64,
) -> Result<Ended, TorchError> {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(PARENT_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| TorchError::Spawn {
            python: python.to_path_buf(),
            source,
        })?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let lines = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("  ") && !line.trim().is_empty() {
                if progress {
                    eprintln!("{line}");
                }
            } else {
                kept.push(line);
                if kept.len() > 200 {
                    kept.remove(0);
                }
            }
        }
        kept
    });
    let mut stdout = Vec::new();
    let read = child
        .stdout
        .take()
        .expect("stdout is piped")
        .take(limit + 1)
        .read_to_end(&mut stdout);
    let status = child.wait().map_err(|source| TorchError::Spawn {
        python: python.to_path_buf(),
        source,
    })?;
    let kept = lines.join().unwrap_or_default();
    let said = |kept: &[String]| -> Option<String> {
        kept.iter()
            .rev()
            .find_map(|l| l.strip_prefix(PREFIX))
            .map(str::to_string)
    };
    match status.code() {
        Some(2) => {
            return Err(TorchError::Refused(said(&kept).unwrap_or_else(|| {
                format!(
                    "the torch engine refused the options: {}",
                    tail(&kept).trim_start_matches("; ")
                )
            })));
        }
        Some(3) => {
            return Err(TorchError::WouldNotFit(
                said(&kept).unwrap_or_else(|| "the run would not fit".to_string()),
            ));
        }
        Some(0 | 1) => {}
        _ => {
            return Err(TorchError::Failed {
                python: python.to_path_buf(),
                status: describe(status),
                detail: tail(&kept),
            });
        }
    }
    if let Err(e) = read {
        return Err(TorchError::BadDocument {
            python: python.to_path_buf(),
            what: "output",
            reason: format!("reading it failed: {e}"),
        });
    }
    if stdout.len() as u64 > limit {
        return Err(TorchError::BadDocument {
            python: python.to_path_buf(),
            what: "output",
            reason: format!("it is over {limit} bytes"),
        });
    }
    Ok(Ended { stdout, kept })
}

/// Reads the program's output as a measurement document of the torch engine.
pub fn parse(bytes: &[u8]) -> Result<MeasurementDocument, String> {
    let doc: MeasurementDocument = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    match &doc.engine {
        Some(e) if e.name == "torch" => Ok(doc),
        _ => Err("it has no torch engine section".to_string()),
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("signal {sig}");
        }
    }
    match status.code() {
        Some(c) => format!("exit {c}"),
        None => "an unknown status".to_string(),
    }
}

/// The last lines the program printed, for an error sentence.
fn tail(kept: &[String]) -> String {
    let last: Vec<&str> = kept
        .iter()
        .rev()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .take(3)
        .collect();
    if last.is_empty() {
        String::new()
    } else {
        let mut last = last;
        last.reverse();
        format!(": {}", last.join(" / "))
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
    fn a_missing_interpreter_is_named() {
        let e = run(Path::new("/nonexistent/python3"), &[], &[], false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--python /nonexistent/python3: cannot be run"),
            "{e}"
        );
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
