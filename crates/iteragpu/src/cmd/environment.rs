//! `iteragpu environment`: the diagnosis of the device a user asked for.

use std::fmt::Write as _;
use std::process::ExitCode;

use lab::environment::Environment;
use lab::tool::ToolInfo;
use serde_json::Value;

use crate::{exit, output};

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

/// The identity of this build.
pub fn tool_info() -> ToolInfo {
    ToolInfo::new(option_env!("ITERAGPU_COMMIT"))
}

/// Runs `environment`. A GPU that is not usable is reported (exit 0), not an error.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let env = if args.device == "cpu" {
        lab::cpu::environment(tool_info())
    } else if let Some(ordinal) = lab_cuda::parse_ordinal(&args.device) {
        lab_cuda::environment(ordinal, tool_info())
    } else {
        return Err(exit::usage(format!(
            "unknown device {:?}: expected cuda:N (e.g. cuda:0) or cpu",
            args.device
        )));
    };
    if args.json {
        output::print_json(&env)?;
    } else {
        output::print_text(&render(&env))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The human report: a header, then the details as indented `key: value` lines.
fn render(env: &Environment) -> String {
    let mut out = String::new();
    let commit = env.tool.commit.as_deref().unwrap_or("unknown commit");
    let _ = writeln!(out, "{} {} ({commit})", env.tool.name, env.tool.version);
    let _ = writeln!(
        out,
        "device: {} (backend {})",
        env.requested_device, env.backend
    );
    if env.usable {
        let _ = writeln!(out, "usable: yes");
    } else {
        let _ = writeln!(out, "usable: no");
        if let Some(problem) = &env.problem {
            let _ = writeln!(out, "problem: {problem}");
        }
    }
    if let Value::Object(map) = &env.details {
        for (key, value) in map {
            render_value(&mut out, key, value, 0);
        }
    }
    out
}

fn render_value(out: &mut String, key: &str, value: &Value, depth: usize) {
    let indent = "  ".repeat(depth);
    let key = key.replace('_', " ");
    match value {
        Value::Null => {}
        Value::Object(map) => {
            if map.values().all(Value::is_null) {
                return;
            }
            let _ = writeln!(out, "{indent}{key}:");
            for (k, v) in map {
                render_value(out, k, v, depth + 1);
            }
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            let _ = writeln!(out, "{indent}{key}: {}", items.join(", "));
        }
        other => {
            let _ = writeln!(out, "{indent}{key}: {}", scalar(other));
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".to_string(),
        Value::Bool(false) => "no".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_shows_problem_and_nested_details() {
        let env = Environment {
            schema: "x".into(),
            tool: ToolInfo::new(Some("abc1234")),
            requested_device: "cuda:0".into(),
            backend: "cuda".into(),
            reference_device: false,
            usable: false,
            problem: Some("no NVIDIA driver was found".into()),
            details: serde_json::json!({"gpu": {"name": "H200", "sm_count": 132, "nvml": null}, "ecc": true}),
        };
        let text = render(&env);
        assert!(text.contains("(abc1234)"));
        assert!(text.contains("usable: no\nproblem: no NVIDIA driver was found\n"));
        assert!(text.contains("gpu:\n  name: H200\n  sm count: 132\n"));
        assert!(text.contains("ecc: yes"));
        assert!(!text.contains("nvml"));
    }
}
