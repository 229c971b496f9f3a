//! The one way a value gets into a file this crate writes: one function per format, each of which
//! either returns the value as that format reads it back unchanged, or refuses it with
//! [`Error::Value`] naming the option.
//!
//! - [`shell`]: a word of a POSIX shell (the batch script, the task's `setup` and `run`), and a
//!   value quoted the same way inside a `#` comment of the batch script.
//! - [`yaml`]: a YAML double-quoted scalar (the task's keys, and values inside its comments).
//! - [`sbatch`]: the value of an `#SBATCH` line, which sbatch, not the shell, reads.
//!
//! Every format refuses the characters none of them can carry on one line ([`refuse_unsafe`]):
//! a comment has no escape at all, so a line break in a model name would end the comment and
//! run the next line (the injection of issue 32), and in a YAML block it would add keys. Those
//! values are refused, never escaped: an escape that one reader undoes and another does not
//! (bash, sbatch, PyYAML, a YAML 1.2 reader) is how injection comes back.

use lab_io::text::is_unsafe_char;

use crate::Error;

/// Why a value with a line break or another control character is refused.
const UNSAFE: &str = "holds a line break or another control character, which no generated script or YAML file can carry safely: give it on one line of printable text";

/// Refuses a value that holds a character no format here can carry on one line: C0 and C1
/// controls (line feed, carriage return, tab, NUL, ESC...), DEL, the Unicode line and paragraph
/// separators (YAML 1.1 readers such as SkyPilot's break lines there) and the bidirectional
/// controls (which make a script read differently from what runs), as
/// [`lab_io::text::is_unsafe_char`] lists them.
pub fn refuse_unsafe(what: &'static str, value: &str) -> Result<(), Error> {
    if value.chars().any(is_unsafe_char) {
        return Err(Error::Value {
            what,
            value: value.to_string(),
            why: UNSAFE,
        });
    }
    Ok(())
}

/// `value` as one word of a POSIX shell: as it is when every character is plainly safe
/// (letters, digits, `-_./:=,@%+`), else in single quotes, where nothing is special but the
/// quote itself (written `'\''`). The same text is one line, so it may also stand in a comment.
pub fn shell(what: &'static str, value: &str) -> Result<String, Error> {
    refuse_unsafe(what, value)?;
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    Ok(if plain {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    })
}

/// `value` as a YAML double-quoted scalar: `"` and `\` escaped with a backslash, every other
/// (printable) character as it is. Those two escapes mean the same in YAML 1.1 and 1.2, so
/// SkyPilot's PyYAML and any YAML 1.2 reader read the same string back.
pub fn yaml(what: &'static str, value: &str) -> Result<String, Error> {
    refuse_unsafe(what, value)?;
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// Why a value is refused on an `#SBATCH` line.
const SBATCH: &str = "holds a space, a quote, `\\`, `#`, `%` or the word hetjob or packjob, which an #SBATCH line cannot carry as it is (sbatch splits words at spaces, takes quotes and `\\` as escapes, cuts the line at `#`, blanks those words, and reads `%` and `\\` in a file name as a pattern): choose a value without them";

/// `value` as it stands on an `#SBATCH` line, which sbatch reads with its own rules: words end
/// at white space, quotes and `\` are escapes, an unescaped `#` ends the line, the words
/// `hetjob` and `packjob` are blanked wherever they are (any case), and in a file name `%` starts
/// a pattern (`%j`) and a `\` turns every pattern off. A value with none of these is written as
/// it is; any other is refused rather than escaped, so that no reader's escape rules matter.
pub fn sbatch(what: &'static str, value: &str) -> Result<String, Error> {
    refuse_unsafe(what, value)?;
    let lower = value.to_ascii_lowercase();
    if value.is_empty()
        || value
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '\'' | '"' | '\\' | '#' | '%'))
        || lower.contains("hetjob")
        || lower.contains("packjob")
    {
        return Err(Error::Value {
            what,
            value: value.to_string(),
            why: SBATCH,
        });
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(shell("w", "/a/b-c.json").unwrap(), "/a/b-c.json");
        assert_eq!(shell("w", "a b").unwrap(), "'a b'");
        assert_eq!(shell("w", "it's").unwrap(), r"'it'\''s'");
        assert_eq!(shell("w", "").unwrap(), "''");
        assert_eq!(shell("w", "$(id)`id`").unwrap(), "'$(id)`id`'");
    }

    #[test]
    fn scalars_are_quoted_for_yaml() {
        assert_eq!(yaml("y", "NVIDIA B200").unwrap(), "\"NVIDIA B200\"");
        assert_eq!(yaml("y", r#"a"b\c"#).unwrap(), r#""a\"b\\c""#);
        assert_eq!(yaml("y", "").unwrap(), "\"\"");
    }

    #[test]
    fn line_breaks_and_controls_are_refused_in_every_format() {
        for bad in [
            "a\nb",
            "a\rb",
            "a\0b",
            "a\tb",
            "a\x1bb",
            "a\u{85}b",
            "a\u{2028}b",
            "a\u{2029}b",
            "a\u{202e}b",
            "a\x7fb",
        ] {
            for result in [shell("--x", bad), yaml("--x", bad), sbatch("--x", bad)] {
                let e = result.unwrap_err().to_string();
                assert!(e.starts_with("--x `a\\u{"), "{e}");
                assert!(!e.contains('\n') && e.contains("line break"), "{e}");
            }
        }
    }

    #[test]
    fn what_sbatch_would_read_differently_is_refused() {
        assert_eq!(
            sbatch("--output", "/shared/fleet").unwrap(),
            "/shared/fleet"
        );
        for bad in [
            "/a b",
            "/a'b",
            "/a\"b",
            "/a\\b",
            "/a#b",
            "/run-%j",
            "/x/HetJob-1",
            "/x/packjob",
            "",
        ] {
            let e = sbatch("--output", bad).unwrap_err().to_string();
            assert!(e.contains("#SBATCH line cannot carry"), "{e}");
        }
    }
}
