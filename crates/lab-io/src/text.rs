//! Text that came from outside (a file, a document, the command line) made safe to show and to
//! store: one sanitiser for every command.
//!
//! - [`printable`] / [`printable_lines`]: control characters, terminal escape sequences (ESC, the
//!   8-bit CSI) and bidirectional overrides never reach a terminal raw; each becomes a visible
//!   `\u{..}` escape, so a device name or a note can neither move the cursor, recolour the
//!   screen, rewrite the window title nor reorder what a reader sees.
//! - [`neutralise_cell`]: a spreadsheet cell that starts with `=`, `+`, `-`, `@`, a tab or a
//!   carriage return would be run as a formula when the CSV is opened; as OWASP recommends, such
//!   a cell gets a leading `'`, which spreadsheets show as text.

use std::borrow::Cow;

/// True for a character that must not reach a terminal, a generated script or a YAML file as it
/// is: C0 and C1 controls, DEL, the Unicode line and paragraph separators (YAML 1.1 readers break
/// lines there) and the Unicode bidirectional controls (the "Trojan Source" characters).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

fn escape_where(text: &str, unsafe_char: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` with every unsafe character (see [`is_unsafe_char`]), line breaks included, written as
/// a visible `\u{..}` escape: for one value on one line.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape_where(text, is_unsafe_char)
}

/// Like [`printable`] but keeps line feeds: for a whole message or page of text the tool wrote
/// around values it did not check itself.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && is_unsafe_char(c))
}

/// The characters that make a spreadsheet treat a cell as a formula (OWASP, "CSV Injection").
pub const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// True when a spreadsheet would read `cell` as a formula.
pub fn starts_like_formula(cell: &str) -> bool {
    cell.starts_with(FORMULA_STARTS)
}

/// `cell` as it is safe to store in a CSV file that people open in a spreadsheet: unchanged, or
/// with a leading `'` when it starts like a formula.
pub fn neutralise_cell(cell: &str) -> Cow<'_, str> {
    if starts_like_formula(cell) {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_what_a_terminal_would_obey() {
        assert_eq!(printable("NVIDIA H200"), "NVIDIA H200");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(printable("x\ny\r"), "x\\u{a}y\\u{d}");
        assert_eq!(printable("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(printable("\u{7f}"), "\\u{7f}");
        assert_eq!(printable_lines("one\ntwo\u{7}"), "one\ntwo\\u{7}");
        // Non-ASCII text that is not a control stays as it is.
        assert_eq!(printable("Größe – 東京"), "Größe – 東京");
    }

    #[test]
    fn formulas_get_a_leading_quote() {
        for bad in [
            "=1+1",
            "+1",
            "-2",
            "@SUM(A1)",
            "\tx",
            "\rx",
            "=HYPERLINK(\"x\")",
        ] {
            assert_eq!(neutralise_cell(bad), format!("'{bad}"));
            assert!(!starts_like_formula(&neutralise_cell(bad)));
        }
        for good in [
            "tickets-v3",
            "rerun, same corpus",
            "",
            "'already quoted",
            " =spaced",
        ] {
            assert_eq!(neutralise_cell(good), good);
        }
    }

    proptest! {
        #[test]
        fn printable_output_has_no_unsafe_character(s in "\\PC*|[\\x00-\\x1f\\x7f-\\u{9f}\\u{202a}-\\u{202e}a]{0,40}") {
            let out = printable(&s);
            prop_assert!(!out.chars().any(is_unsafe_char));
            let lines = printable_lines(&s);
            prop_assert!(!lines.chars().any(|c| c != '\n' && is_unsafe_char(c)));
        }

        #[test]
        fn neutralised_cells_never_start_like_formulas(s in "\\PC{0,20}|[=+@\\t\\r-].{0,10}") {
            prop_assert!(!starts_like_formula(&neutralise_cell(&s)));
        }
    }
}
