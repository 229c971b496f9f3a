//! `iteragpu environment`: the diagnosis of the device a user asked for.

use std::process::ExitCode;

use lab::environment::{ENVIRONMENT_SCHEMA, Environment};
use lab::tool::ToolInfo;

use crate::output;

/// Options of `environment`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The device to describe: `cuda:N` (an NVIDIA GPU) or `cpu` (the CPU reference device).
    #[arg(long, default_value = "cuda:0")]
    pub device: String,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `environment`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let env = Environment {
        schema: ENVIRONMENT_SCHEMA.to_string(),
        tool: ToolInfo::new(option_env!("ITERAGPU_COMMIT")),
        requested_device: args.device.clone(),
        backend: "none".to_string(),
        reference_device: false,
        usable: false,
        problem: Some("this build has no device backend yet".to_string()),
        details: serde_json::Value::Null,
    };
    if args.json {
        output::print_json(&env)?;
    } else {
        output::print_text(&format!(
            "device {}: not usable: {}\n",
            env.requested_device,
            env.problem.as_deref().unwrap_or("")
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
