//! Identity of the tool that produced a document, so a reader can tell which build measured it.

use serde::{Deserialize, Serialize};

/// Name, version and source commit of the tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Always `iteragpu`.
    pub name: String,
    /// The crate version.
    pub version: String,
    /// The git commit the binary was built from, when the build could read it.
    pub commit: Option<String>,
}

impl ToolInfo {
    /// The identity of this build. The binary passes its own commit (read at build time).
    pub fn new(commit: Option<&str>) -> ToolInfo {
        ToolInfo {
            name: "iteragpu".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: commit.map(str::to_string),
        }
    }
}
