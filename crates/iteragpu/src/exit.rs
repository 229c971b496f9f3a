//! Exit codes: 0 success, 1 a runtime failure or a data file that fails validation, 2 a usage
//! error or no usable GPU for a command that needs one (as the original kit).

use std::process::ExitCode;

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
    // `{:#}` joins the chain of causes; each layer says only what it adds (no OS message is
    // repeated), and nothing from a file reaches the terminal raw.
    crate::output::eprint_line(&format!("iteragpu: error: {err:#}"));
    if err.chain().any(|cause| cause.is::<Usage>()) {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}
