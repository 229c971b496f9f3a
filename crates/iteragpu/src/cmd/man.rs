//! `iteragpu man [COMMAND]`: the manual page in roff, generated from the same command definition
//! as `--help` (its text, options and examples); `--output-dir DIR` writes every page, iteragpu(1)
//! and one iteragpu-COMMAND(1) per command, for `man` to find.
//!
//! clap_mangen renders the name, synopsis, description and options; the rest of a command's
//! `--help` epilogue is split here into the sections a manual page has: EXAMPLES (the lines under
//! `Examples:`), EXIT STATUS (the codes every command shares, then the command's own `Exit
//! codes:` sentence), the remaining paragraphs as NOTES, and SEE ALSO.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::exit::usage;
use crate::output;

/// Options of `man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu man | man -l -
  iteragpu man measure | man -l -
  iteragpu man --output-dir ~/.local/share/man/man1 && man iteragpu-measure

--output-dir writes iteragpu.1 and one iteragpu-COMMAND.1 per command, replacing pages of the
same names. man finds ~/.local/share/man by itself when ~/.local/bin is on the PATH; elsewhere
add the folder above man1 to MANPATH (export MANPATH=\"$HOME/.local/share/man:\", the final
colon keeps the system's pages).")]
pub struct Args {
    /// A command (`measure`, `price`, ...) for its own page, iteragpu-COMMAND(1); without it,
    /// the page of iteragpu(1), which lists every command.
    #[arg(conflicts_with = "output_dir")]
    pub command: Option<String>,
    /// Write every page (iteragpu.1 and iteragpu-COMMAND.1 for each command) into this folder, a
    /// `man1` folder such as ~/.local/share/man/man1 (created if missing), instead of printing
    /// one.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

/// The exit codes every command shares (README.md, "Exit codes").
const EXIT_CODES: [(&str, &str); 3] = [
    ("0", "success."),
    (
        "1",
        "a runtime failure, or a data file (such as a --catalogue file) that fails validation.",
    ),
    (
        "2",
        "a usage error: a missing or bad option value, an unknown GPU, a duration not offered, a \
         total that overflows; a file or folder named on the command line that is not there; or \
         no usable GPU for a command that needs one.",
    ),
];

/// Runs `man`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut top = <crate::cli::Cli as clap::CommandFactory>::command();
    top.build();
    let names: Vec<String> = top
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    if let Some(dir) = &args.output_dir {
        return write_all(&top, &names, dir);
    }
    let page = match &args.command {
        None => top.clone(),
        Some(name) => top
            .find_subcommand(name)
            .filter(|c| c.get_name() != "help")
            .ok_or_else(|| {
                usage(format!(
                    "unknown command `{name}`; the commands are: {}",
                    names.join(", ")
                ))
            })?
            // Once built, a command is displayed as `iteragpu-measure` (the page's title, as
            // git-commit(1) is) and its synopsis reads `iteragpu measure`.
            .clone(),
    };
    let roff = render(page, args.command.is_none(), &names)?;
    output::print_text(&roff)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes every page into `dir` and says where.
fn write_all(top: &clap::Command, names: &[String], dir: &Path) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(dir).map_err(|e| {
        usage(format!(
            "--output-dir {}: cannot create it: {}",
            dir.display(),
            lab_io::files::os_message(&e)
        ))
    })?;
    let mut pages = vec![("iteragpu.1".to_string(), top.clone(), true)];
    for name in names {
        if let Some(sub) = top.find_subcommand(name) {
            pages.push((format!("iteragpu-{name}.1"), sub.clone(), false));
        }
    }
    let count = pages.len();
    for (file, page, is_top) in pages {
        let roff = render(page, is_top, names)?;
        let path = dir.join(&file);
        let written = lab_io::files::replace(&path, roff.as_bytes())?;
        if let Some(warning) = written.warning(&path) {
            output::warn(&warning);
        }
    }
    output::print_text(&format!(
        "wrote {count} pages in {}: iteragpu.1 and iteragpu-COMMAND.1 for {}\n",
        dir.display(),
        names.join(", ")
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// One page: clap_mangen's sections, then EXIT STATUS, ENVIRONMENT (the tool's page), EXAMPLES,
/// NOTES and SEE ALSO from the command's epilogue.
fn render(page: clap::Command, is_top: bool, names: &[String]) -> anyhow::Result<String> {
    let epilogue = page
        .get_after_long_help()
        .or_else(|| page.get_after_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let name = page.get_name().to_string();
    let man = clap_mangen::Man::new(page.clone().after_help(None::<&str>));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if page.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if page.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = String::from_utf8(out)?;
    let parts = Epilogue::split(&epilogue);

    roff.push_str(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_CODES {
        roff.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", text(meaning)));
    }
    if let Some(own) = &parts.exit_codes {
        roff.push_str(&format!(".PP\n{}\n", text(&format!("For {name}: {own}"))));
    }
    if is_top {
        roff.push_str(".SH ENVIRONMENT\n");
        for (var, meaning) in [
            (
                "TERM",
                "with stderr on a terminal, TERM=dumb turns the progress of probe and sweep into \
                 plain lines (no progress bar). Progress goes to stderr on a terminal only, or \
                 with --progress.",
            ),
            (
                "NO_COLOR",
                "nothing iteragpu prints is coloured; clap's help follows NO_COLOR too.",
            ),
            (
                "MANPATH",
                "where man looks for these pages: add the folder above the man1 folder given to \
                 iteragpu man --output-dir.",
            ),
        ] {
            roff.push_str(&format!(".TP\n\\fB{var}\\fR\n{}\n", text(meaning)));
        }
    }
    let examples = if is_top {
        TOP_EXAMPLES.iter().map(|s| s.to_string()).collect()
    } else {
        parts.examples
    };
    if !examples.is_empty() {
        roff.push_str(".SH EXAMPLES\n.PP\n.nf\n.RS 4\n");
        for line in &examples {
            roff.push_str(&text(line));
            roff.push('\n');
        }
        roff.push_str(".RE\n.fi\n");
    }
    if !parts.notes.is_empty() {
        roff.push_str(".SH NOTES\n");
        for paragraph in &parts.notes {
            roff.push_str(&format!(".PP\n{}\n", text(paragraph)));
        }
    }
    roff.push_str(".SH \"SEE ALSO\"\n");
    let see: Vec<String> = if is_top {
        names
            .iter()
            .map(|n| format!("\\fBiteragpu\\-{}\\fR(1)", text(n)))
            .collect()
    } else {
        vec!["\\fBiteragpu\\fR(1)".to_string()]
    };
    roff.push_str(&see.join(", "));
    roff.push('\n');
    if let Some(version) = page.get_version() {
        roff.push_str(&format!(".SH VERSION\nv{}\n", text(version)));
    }
    Ok(roff)
}

/// The examples of iteragpu(1).
const TOP_EXAMPLES: [&str; 5] = [
    "iteragpu estimate --parameters 7B --bits 16",
    "iteragpu price --gpu b200 --days 7 --lots 1",
    "iteragpu measure --device cpu --batch 1 --context 16 --width 64 -o run.json",
    "iteragpu completions bash > ~/.local/share/bash-completion/completions/iteragpu",
    "iteragpu man --output-dir ~/.local/share/man/man1",
];

/// A command's `--help` epilogue in parts.
#[derive(Debug, Default, PartialEq)]
struct Epilogue {
    /// The lines under `Examples:`, their indentation removed (continuations keep theirs).
    examples: Vec<String>,
    /// The sentence from `Exit codes:` to the end of its paragraph, without those words.
    exit_codes: Option<String>,
    /// The other paragraphs, each joined into one line.
    notes: Vec<String>,
}

impl Epilogue {
    fn split(text: &str) -> Epilogue {
        let mut parts = Epilogue::default();
        let mut paragraphs: Vec<Vec<&str>> = vec![Vec::new()];
        for line in text.lines() {
            if line.trim().is_empty() {
                paragraphs.push(Vec::new());
            } else if let Some(last) = paragraphs.last_mut() {
                last.push(line);
            }
        }
        for lines in paragraphs.into_iter().filter(|p| !p.is_empty()) {
            if lines[0].trim() == "Examples:" {
                let indent = lines.get(1).map_or(0, |l| l.len() - l.trim_start().len());
                for line in &lines[1..] {
                    let cut = indent.min(line.len() - line.trim_start().len());
                    parts.examples.push(line[cut..].to_string());
                }
                continue;
            }
            let mut joined = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            if let Some(at) = joined.find("Exit codes: ") {
                parts.exit_codes = Some(joined[at + "Exit codes: ".len()..].to_string());
                joined.truncate(at);
            }
            let joined = joined.trim().to_string();
            if !joined.is_empty() {
                parts.notes.push(joined);
            }
        }
        parts
    }
}

/// `s` as roff text: backslashes printed, dashes as `\-` (so options can be copied), and a line
/// that would start with a control character made literal.
fn text(s: &str) -> String {
    s.lines()
        .map(|line| {
            let escaped = line.replace('\\', "\\e").replace('-', "\\-");
            if escaped.starts_with('.') || escaped.starts_with('\'') {
                format!("\\&{escaped}")
            } else {
                escaped
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epilogue_splits_into_examples_exit_codes_and_notes() {
        let parts = Epilogue::split(
            "Examples:\n  iteragpu a \\\n      --b 1\n  iteragpu c\n\nOne note\nthat goes on.\n\nMore. \
             Exit codes: 0 fine,\n1 not.\n",
        );
        assert_eq!(parts.examples, ["iteragpu a \\", "    --b 1", "iteragpu c"]);
        assert_eq!(parts.exit_codes.as_deref(), Some("0 fine, 1 not."));
        assert_eq!(parts.notes, ["One note that goes on.", "More."]);
        assert_eq!(text(".x -y \\z"), "\\&.x \\-y \\ez");
    }
}
