//! The environment report shared by `iteragpu environment` and every measurement document.

use serde::{Deserialize, Serialize};

use crate::node::NodeIdentity;
use crate::tool::ToolInfo;

/// Schema identifier of [`Environment`] documents.
pub const ENVIRONMENT_SCHEMA: &str = "iteragpu.environment/1";

/// What machine and software a run saw.
///
/// The header is typed so every backend says the same things in the same place; `details` holds
/// what only one backend knows (driver and library versions, GPU attributes, CPU model).
/// No environment variables, host or user names ever go in here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// Always [`ENVIRONMENT_SCHEMA`].
    pub schema: String,
    /// The build that wrote the report.
    pub tool: ToolInfo,
    /// The device the user asked for (`cuda:0`, `cpu`).
    pub requested_device: String,
    /// `cuda` or `cpu-reference`.
    pub backend: String,
    /// True when the CPU reference device produced this: never a GPU measurement.
    pub reference_device: bool,
    /// Whether the requested device can run a measurement.
    pub usable: bool,
    /// Why it cannot, in a sentence a user can act on (absent when usable).
    pub problem: Option<String>,
    /// Backend-specific facts.
    pub details: serde_json::Value,
}

/// The engine that described the GPUs when it is not the native one: `environment --engine
/// torch` reads them through the machine's PyTorch (on ROCm too), and says which in the lot
/// report; a one-device report says it in its details (`engine`, `torch`, `torch_build`), as the
/// environment of a `measure --engine torch` document does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentEngine {
    /// `torch`.
    pub name: String,
    /// Its version (`torch.__version__`).
    pub version: String,
    /// How it was built: `CUDA 13.0`, `ROCm, HIP 6.4.x`, `CPU only`.
    pub build: String,
    /// The interpreter that ran it.
    pub python: String,
}

/// `environment --json` for one device: the [`Environment`] report, and which node of a
/// multi-node job it came from (absent outside a scheduler unless named with `--node`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentReport {
    /// The report.
    #[serde(flatten)]
    pub environment: Environment,
    /// The node (see [`crate::node`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeIdentity>,
}
