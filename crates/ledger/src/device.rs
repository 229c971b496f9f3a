//! The device a measurement ran on, as the results grid names it: model, UUID, driver.
//!
//! The environment's `details` are backend-specific JSON, so they are read defensively: a key
//! that is absent or of another type gives [`UNKNOWN`], never an error.

use lab::environment::Environment;
use serde_json::Value;

/// What the grid says when the measurement does not tell.
pub const UNKNOWN: &str = "unknown";

/// The UUID column of a CPU reference run: it has no device UUID, and must never pass for a GPU.
pub const CPU_REFERENCE: &str = "cpu-reference";

/// Model, UUID and driver of a measured device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// GPU name, or the CPU model for the CPU reference device.
    pub model: String,
    /// GPU UUID, or [`CPU_REFERENCE`].
    pub uuid: String,
    /// Driver version, or `none` for the CPU reference device.
    pub driver: String,
}

/// The first of `pointers` (JSON pointers into `details`) holding a string or a number.
fn first(details: &Value, pointers: &[&str]) -> Option<String> {
    pointers.iter().find_map(|p| match details.pointer(p)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// Reads the identity out of an environment report.
pub fn identify(env: &Environment) -> DeviceIdentity {
    let d = &env.details;
    if env.reference_device || env.backend == CPU_REFERENCE {
        return DeviceIdentity {
            model: first(d, &["/cpu_model", "/cpu/model"]).unwrap_or_else(|| UNKNOWN.into()),
            uuid: CPU_REFERENCE.into(),
            driver: "none".into(),
        };
    }
    DeviceIdentity {
        model: first(d, &["/gpu/name", "/device/name", "/gpu_name", "/name"])
            .unwrap_or_else(|| UNKNOWN.into()),
        uuid: first(d, &["/gpu/uuid", "/device/uuid", "/gpu_uuid", "/uuid"])
            .unwrap_or_else(|| UNKNOWN.into()),
        driver: first(
            d,
            &[
                "/driver/version",
                "/driver_version",
                "/driver/driver_version",
            ],
        )
        .unwrap_or_else(|| UNKNOWN.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::tool::ToolInfo;
    use serde_json::json;

    fn env(backend: &str, reference: bool, details: Value) -> Environment {
        Environment {
            schema: lab::environment::ENVIRONMENT_SCHEMA.into(),
            tool: ToolInfo::new(None),
            requested_device: "x".into(),
            backend: backend.into(),
            reference_device: reference,
            usable: true,
            problem: None,
            details,
        }
    }

    #[test]
    fn cpu_reference() {
        let id = identify(&lab::cpu::environment(ToolInfo::new(None)));
        assert_eq!(id.uuid, CPU_REFERENCE);
        assert_eq!(id.driver, "none");
        let id = identify(&env("cpu-reference", true, json!({"cpu_model": null})));
        assert_eq!(id.model, UNKNOWN);
    }

    #[test]
    fn cuda_with_and_without_details() {
        let id = identify(&env(
            "cuda",
            false,
            json!({"gpu": {"name": "NVIDIA H200", "uuid": "GPU-1234"}, "driver": {"version": "570.86.15"}}),
        ));
        assert_eq!(
            id,
            DeviceIdentity {
                model: "NVIDIA H200".into(),
                uuid: "GPU-1234".into(),
                driver: "570.86.15".into()
            }
        );
        let id = identify(&env(
            "cuda",
            false,
            json!({"gpu": {"name": 3}, "driver": []}),
        ));
        assert_eq!(id.model, "3");
        assert_eq!(id.uuid, UNKNOWN);
        assert_eq!(id.driver, UNKNOWN);
        assert_eq!(identify(&env("cuda", false, Value::Null)).model, UNKNOWN);
    }
}
