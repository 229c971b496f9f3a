//! Writing to stdout and stderr: one JSON document for `--json`, text otherwise. Nothing that
//! came from a file, a document or the command line reaches a terminal raw: control characters,
//! escape sequences and bidirectional overrides go out as visible escapes ([`lab_io::text`]).

use std::io::Write;

/// `json` (serialised by serde_json, which escapes C0 controls inside strings) with the
/// characters serde_json leaves raw (DEL, C1 controls such as the 8-bit CSI, bidirectional
/// overrides) written as `\uXXXX` escapes: the same JSON value, safe on a terminal. Raw line feeds
/// are the pretty printer's own (a line feed inside a string is already `\n`).
pub fn escape_json(json: &str) -> std::borrow::Cow<'_, str> {
    if !json
        .chars()
        .any(|c| c != '\n' && lab_io::text::is_unsafe_char(c))
    {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if c != '\n' && lab_io::text::is_unsafe_char(c) {
            // Every such character is in the Basic Multilingual Plane: one \u escape.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Prints `value` as one pretty JSON document followed by a newline, and nothing else.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(value)?;
    let mut out = std::io::stdout().lock();
    out.write_all(escape_json(&json).as_bytes())?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Prints text as given (it carries its own newlines), with anything a terminal would obey
/// escaped.
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(lab_io::text::printable_lines(text).as_bytes())?;
    out.flush()?;
    Ok(())
}

/// One line on stderr, escaped like [`print_text`].
pub fn eprint_line(text: &str) {
    eprintln!("{}", lab_io::text::printable_lines(text));
}

/// A warning on stderr: something the user should know although the command succeeded.
pub fn warn(text: &str) {
    eprint_line(&format!("iteragpu: warning: {text}"));
}

/// How a long command (`probe`, `sweep`) shows its progress on stderr.
///
/// The rule: a live display only on a terminal that can show one; plain lines on a terminal with
/// `TERM=dumb` (an editor's shell, a serial console), or anywhere with `--progress`; otherwise
/// nothing, because a script that reads stderr of a failing command expects its one error line
/// (and TERM, inherited from whatever started the script, says nothing of who reads the pipe).
/// Nothing is coloured in any mode, so `NO_COLOR` needs no case of its own. A `measure` started
/// by a sweep never shows progress: the sweep reads its stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A terminal: a progress bar where the command has one, and its lines.
    Live,
    /// Plain lines, one per step, no cursor movement.
    Lines,
    /// Nothing.
    Off,
}

impl Progress {
    /// The mode for this process: stderr, `TERM`, and whether `--progress` was given.
    pub fn detect(requested: bool) -> Progress {
        use std::io::IsTerminal;
        Progress::choose(
            std::io::stderr().is_terminal(),
            std::env::var_os("TERM").is_some_and(|t| t == "dumb"),
            requested,
            std::env::var_os(crate::child::PARENT_ENV).is_some(),
        )
    }

    /// The rule of [`Progress::detect`], given its inputs.
    pub fn choose(terminal: bool, dumb: bool, requested: bool, sweep_child: bool) -> Progress {
        match (terminal, dumb, requested) {
            _ if sweep_child => Progress::Off,
            (true, false, _) => Progress::Live,
            (true, true, _) | (false, _, true) => Progress::Lines,
            (false, _, false) => Progress::Off,
        }
    }

    /// Whether anything is shown.
    pub fn shown(self) -> bool {
        self != Progress::Off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_live_on_a_terminal_and_lines_under_term_dumb_or_when_asked() {
        assert_eq!(Progress::choose(true, false, false, false), Progress::Live);
        assert_eq!(Progress::choose(true, true, false, false), Progress::Lines);
        assert_eq!(Progress::choose(false, false, true, false), Progress::Lines);
        assert_eq!(Progress::choose(false, true, true, false), Progress::Lines);
        // A pipe: nothing, whatever TERM says, unless asked.
        assert_eq!(Progress::choose(false, true, false, false), Progress::Off);
        assert_eq!(Progress::choose(false, false, false, false), Progress::Off);
        // A sweep's point: never, its stderr is the sweep's to read.
        assert_eq!(Progress::choose(true, false, true, true), Progress::Off);
    }

    #[test]
    fn json_escapes_keep_the_value_and_lose_the_control() {
        let value = serde_json::json!({"name": "a\u{1b}[2J\u{9b}1m\u{202e}\u{7f}b\nc"});
        let json = serde_json::to_string_pretty(&value).unwrap();
        let escaped = escape_json(&json);
        assert!(
            !escaped
                .chars()
                .any(|c| c != '\n' && lab_io::text::is_unsafe_char(c)),
            "{escaped}"
        );
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, value);
    }
}
