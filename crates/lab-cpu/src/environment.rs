//! What the CPU reference device reports about the machine.

use serde_json::json;

use lab::environment::{ENVIRONMENT_SCHEMA, Environment};
use lab::tool::ToolInfo;

/// The environment of the CPU reference device with its default thread count (the physical
/// cores). Nothing personal: no host name, user name or environment variable.
pub fn environment(tool: ToolInfo) -> Environment {
    device_environment(tool, crate::threads::physical_cores())
}

/// The environment of a CPU reference device computing with `threads` threads: CPU model,
/// logical and physical cores, the vector unit the kernels use, the GEMM library.
pub fn device_environment(tool: ToolInfo, threads: usize) -> Environment {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
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
            "logical_cpus": logical,
            "physical_cores": crate::threads::physical_cores(),
            "threads": threads,
            "vector_unit": vector_unit(),
            "arch": std::env::consts::ARCH,
            "os": std::env::consts::OS,
            "gemm": gemm(),
            "device_clock": false,
        }),
    }
}

/// The products' library and arithmetic.
fn gemm() -> String {
    match crate::bf16::instructions() {
        Some(dot) => format!(
            "faer matmul (float32 accumulation; float16 widened to float32); bfloat16 on {} \
             (float32 accumulation)",
            dot.name()
        ),
        None => "faer matmul (float32 accumulation; float16 and bfloat16 widened to float32)"
            .to_string(),
    }
}

/// The widest vector instructions the kernels use here (chosen at run time).
fn vector_unit() -> &'static str {
    match pulp::Arch::new() {
        #[cfg(target_arch = "x86_64")]
        pulp::Arch::V4(_) => "AVX-512",
        #[cfg(target_arch = "x86_64")]
        pulp::Arch::V3(_) => "AVX2+FMA",
        _ => "baseline (no AVX2)",
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
        let env = device_environment(ToolInfo::new(None), 3);
        assert_eq!(env.details["threads"], 3);
    }
}
