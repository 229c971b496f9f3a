//! What `environment`, `probe` and `fleet` (and `record`'s `--package`) share about a rented
//! lot at the command line: the `--package` parser, the catalogue's promise as a usage error
//! when it names no package, this node's share, and the findings as text. The rules are
//! `lab::lot`'s and `ledger`'s; this module only turns their errors into exit codes and their
//! findings into lines.

use std::fmt::Write as _;
use std::path::Path;

use lab::lot::{Expectation, Finding, Severity};
use lab::node::NodeIdentity;
use ledger::Package;
use rent::catalogue::Catalogue;

use crate::exit;

/// `--package GPU:DAYS:LOTS`.
pub fn parse_package(s: &str) -> Result<Package, String> {
    s.parse().map_err(|e: ledger::LedgerError| e.to_string())
}

/// What `--package` promises, from the catalogue (an unknown GPU or duration is a usage error).
pub fn expectation(
    package: Option<&Package>,
    catalogue: Option<&Path>,
) -> anyhow::Result<Option<Expectation>> {
    let Some(p) = package else {
        return Ok(None);
    };
    let catalogue = Catalogue::load(catalogue)?;
    let tariff = catalogue
        .find(&p.gpu, p.days)
        .map_err(|e| exit::usage(format!("--package {p}: {e}")))?;
    Ok(Some(Expectation::new(p.to_string(), tariff, p.lots)))
}

/// What this node must hold of the package: its share on node k of N (a package that does not
/// split evenly is a usage error), else the whole package.
pub fn node_expectation(
    expectation: Option<Expectation>,
    node: Option<&NodeIdentity>,
) -> anyhow::Result<Option<Expectation>> {
    expectation
        .map(|e| {
            e.for_node(node)
                .map_err(|e| exit::usage(format!("--package: {e}")))
        })
        .transpose()
}

/// The findings as lines, warnings first (`environment` and `probe` print them alike).
pub fn render_findings(findings: &[Finding], datasheet: &str) -> String {
    let mut out = String::new();
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let _ = writeln!(
        out,
        "lot checks: {warnings} warning(s), {} note(s) (datasheet table: {datasheet})",
        findings.len() - warnings
    );
    for f in findings {
        let level = match f.severity {
            Severity::Warning => "WARNING",
            Severity::Note => "note",
        };
        let _ = writeln!(out, "  {level} {}: {}", f.code, f.message);
    }
    out
}
