//! What the CPU reference device reports about the machine.

use serde_json::json;

use crate::environment::{ENVIRONMENT_SCHEMA, Environment};
use crate::tool::ToolInfo;

/// The environment of the CPU reference device: CPU model and logical cores, the GEMM library.
/// Nothing personal: no host name, user name or environment variable.
pub fn environment(tool: ToolInfo) -> Environment {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Environment {
        schema: ENVIRONMENT_SCHEMA.to_string(),
        tool,
        requested_device: "cpu".to_string(),
        backend: "cpu-reference".to_string(),
        reference_device: true,
        usable: true,
        problem: None,
        details: json!({
            "note": "CPU reference device: real arithmetic on the host CPU, host memory counters; not a GPU measurement",
            "cpu_model": cpu_model(),
            "logical_cpus": threads,
            "arch": std::env::consts::ARCH,
            "os": std::env::consts::OS,
            "gemm": "ndarray general_mat_mul over matrixmultiply sgemm (float32 accumulation)",
            "device_clock": false,
        }),
    }
}

/// The CPU's marketing name from `/proc/cpuinfo`, where the OS has one.
fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_a_usable_reference_device() {
        let env = environment(ToolInfo::new(None));
        assert!(env.usable && env.reference_device);
        assert_eq!(env.backend, "cpu-reference");
        assert!(env.details["logical_cpus"].as_u64().unwrap() >= 1);
    }
}
