//! Exit codes: 0 success, 1 a runtime failure or a data file that fails validation, 2 a usage
//! error or no usable GPU for a command that needs one (as the original kit). A file or folder
//! named on the command line that is not there is refused input, exit 2, whichever command reads
//! it: [`report()`] decides that here, once, from the error's kind ([`names_a_missing_path`]).
//!
//! An error is one line on stderr: `iteragpu: error: <sentence>` by default, or, when the
//! command line asked for `--json`, one JSON object `{"error": ..., "exit_code": ...}`, so a
//! script reading JSON never has to parse prose. Clap's own usage errors take the same shape
//! and keep exit 2.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once in `main` from the raw command line: errors are printed as JSON.
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// An error that must end the process with exit 2: the user asked for something that cannot be
/// done as asked (a bad value clap could not catch, or a GPU that is not there).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Builds a usage error (exit 2) from a message.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

/// The error of a GPU command whose device could not be set up, before anything is written: no
/// driver, the toolkit's stub, no device, a wrong ordinal or no cuBLAS is a usage error (exit 2,
/// as the original kit), never a reason to fall back to the CPU; anything else is a runtime
/// failure. `what` names what was being set up.
pub fn gpu_setup(device: &str, what: &str, e: lab_cuda::CudaError) -> anyhow::Error {
    if e.is_unavailable() {
        usage(format!(
            "--device {device}: no usable GPU: {e}; nothing was written"
        ))
    } else {
        anyhow::Error::new(e).context(format!("could not set up {what}; nothing was written"))
    }
}

/// Ledger errors the user fixes by changing the command (exit 2); the rest are data (exit 1).
/// Shared by `protocol`, `record` and `cost`.
pub fn ledger(err: ledger::LedgerError) -> anyhow::Error {
    if err.is_usage() {
        usage(err.to_string())
    } else {
        err.into()
    }
}

/// Whether the command line asks for JSON: `--json` anywhere before a `--` that ends the
/// options. Read from the raw arguments so that even a line clap refuses gets a JSON error.
pub fn json_requested(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Chooses the form of every error printed from now on.
pub fn set_json_errors(on: bool) {
    JSON_ERRORS.store(on, Ordering::Relaxed);
}

/// The one line printed for an error: text, or a JSON object when `--json` was asked for.
pub fn error_line(message: &str, code: u8, json: bool) -> String {
    if json {
        serde_json::json!({ "error": message, "exit_code": code }).to_string()
    } else {
        format!("iteragpu: error: {message}")
    }
}

/// Prints one error line on stderr (see [`error_line`]) and returns the exit code to end with.
/// Commands that finish with a failure they have already written up (an incomplete run, a
/// failed verification) call this instead of returning an error.
/// Nothing from a file or the command line reaches the terminal raw: the text line is escaped
/// as every stderr line is, the JSON object as every JSON document is.
pub fn fail(message: &str, code: u8) -> ExitCode {
    if JSON_ERRORS.load(Ordering::Relaxed) {
        let line = error_line(message, code, true);
        eprintln!("{}", crate::output::escape_json(&line));
    } else {
        crate::output::eprint_line(&error_line(message, code, false));
    }
    ExitCode::from(code)
}

/// Prints an error to stderr as one sentence and picks the exit code. A closed stdout (as with
/// `iteragpu price --list | head -1`) is not an error worth a message.
pub fn report(err: &anyhow::Error) -> ExitCode {
    let broken_pipe = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    let code = if err.chain().any(|cause| cause.is::<Usage>()) || names_a_missing_path(err) {
        2
    } else {
        1
    };
    fail(&format!("{err:#}"), code)
}

/// Whether the error is a path that does not exist: an OS error of kind `NotFound` anywhere in
/// the chain, or a library's read error that holds one. Each library names the path in its own
/// sentence; this only picks the exit code (2, refused input), so that every command treats a
/// missing `--catalogue`, `--model`, `--offers`, `--probe`, `--results`, kit or document alike.
/// A file that is there but does not read or validate stays a data error (exit 1).
pub fn names_a_missing_path(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind::NotFound;
    err.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            return e.kind() == NotFound;
        }
        if let Some(e) = cause.downcast_ref::<lab_io::files::InputError>() {
            return e.is_not_found();
        }
        if let Some(rent::catalogue::CatalogueError::Read { reason, .. }) = cause.downcast_ref() {
            return reason.kind() == NotFound;
        }
        if let Some(rent::datasheet::DatasheetError::Read { reason, .. }) = cause.downcast_ref() {
            return reason.kind() == NotFound;
        }
        if let Some(rent::offers::OffersError::Read { reason, .. }) = cause.downcast_ref() {
            return reason.kind() == NotFound;
        }
        if let Some(model::ModelError::Read { reason, .. }) = cause.downcast_ref() {
            return reason.kind() == NotFound;
        }
        if let Some(kit::VerifyError::Open { kind, .. }) = cause.downcast_ref() {
            return *kind == NotFound;
        }
        if let Some(ledger::LedgerError::Input(e)) = cause.downcast_ref() {
            return e.is_not_found();
        }
        false
    })
}

/// Ends a command line that clap refused. Help and version go to stdout as clap prints them
/// (exit 0); a bare `iteragpu` or `iteragpu protocol` prints the help as clap does (exit 2);
/// every other refusal becomes the tool's one line, exit 2.
pub fn clap_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Printing help can only fail on a closed stdout, which is no error worth a word.
            let _ = err.print();
            ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2))
        }
        _ => fail(&one_line(&err.render().to_string()), 2),
    }
}

/// Folds clap's multi-line error text into one sentence: the message, its tips, and the usage
/// line, without the "For more information" footer.
pub fn one_line(rendered: &str) -> String {
    let mut message = String::new();
    let mut usage = String::new();
    let mut in_usage = false;
    for line in rendered.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Usage:") {
            in_usage = true;
            usage = rest.trim().to_string();
            continue;
        }
        if trimmed.is_empty() {
            in_usage = false;
            continue;
        }
        if trimmed.starts_with("For more information") {
            continue;
        }
        if in_usage {
            usage.push(' ');
            usage.push_str(trimmed);
            continue;
        }
        let part = trimmed.strip_prefix("error: ").unwrap_or(trimmed);
        if message.is_empty() {
            message.push_str(part);
        } else if message.ends_with(':') {
            message.push(' ');
            message.push_str(part);
        } else {
            message.push_str("; ");
            message.push_str(part);
        }
    }
    if usage.is_empty() {
        format!("{message} (--help explains every option)")
    } else {
        format!("{message} (usage: {usage}; --help explains every option)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_asked_for_anywhere_before_a_double_dash() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(json_requested(args(&["iteragpu", "price", "--json"])));
        assert!(json_requested(args(&["iteragpu", "--json", "price"])));
        assert!(!json_requested(args(&["iteragpu", "price"])));
        assert!(!json_requested(args(&[
            "iteragpu", "report", "--", "--json"
        ])));
        // The program name is never an option.
        assert!(!json_requested(args(&["--json"])));
    }

    #[test]
    fn an_error_line_is_text_or_one_json_object() {
        assert_eq!(error_line("bad `x`", 2, false), "iteragpu: error: bad `x`");
        let json: serde_json::Value =
            serde_json::from_str(&error_line("bad \"x\"\nand more", 1, true)).unwrap();
        assert_eq!(json["error"], "bad \"x\"\nand more");
        assert_eq!(json["exit_code"], 1);
        assert!(!error_line("a\nb", 1, true).contains('\n'));
    }

    #[test]
    fn clap_text_folds_into_one_line() {
        let missing = "error: the following required arguments were not provided:\n  --lots <L>\n\n\
                       Usage: iteragpu price --gpu <GPU> --days <D> --lots <L>\n\n\
                       For more information, try '--help'.\n";
        assert_eq!(
            one_line(missing),
            "the following required arguments were not provided: --lots <L> (usage: iteragpu \
             price --gpu <GPU> --days <D> --lots <L>; --help explains every option)"
        );
        let tip = "error: unrecognized subcommand 'estimat'\n\n  tip: a similar subcommand exists: \
                   'estimate'\n\nUsage: iteragpu <COMMAND>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(tip),
            "unrecognized subcommand 'estimat'; tip: a similar subcommand exists: 'estimate' \
             (usage: iteragpu <COMMAND>; --help explains every option)"
        );
        assert!(!one_line(tip).contains('\n'));
    }
}
