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
        // NVML knows the driver's own version (570.86.15); without NVML the CUDA driver API
        // version is all there is, and says which it is.
        driver: first(
            d,
            &[
                "/nvml/driver_version",
                "/driver/version",
                "/driver_version",
                "/driver/driver_version",
            ],
        )
        .or_else(|| first(d, &["/driver/cuda_version"]).map(|v| format!("CUDA {v}")))
        .unwrap_or_else(|| UNKNOWN.into()),
    }
}

fn tokens(text: &str) -> Vec<String> {
    text.to_ascii_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a GPU that calls itself `device_model` is the catalogue's GPU `slug` (display name
/// `catalogue_model`). The driver's names differ from the catalogue's (`NVIDIA H100 80GB HBM3`
/// is the `h100-sxm`), so the rule is: every part of the slug (split at `-`, `_`, `.`) is a word
/// of the device's name, where `sxm` also holds for a name with no other form factor (`pcie`,
/// `nvl`), since SXM boards rarely say so; or the device's name is the catalogue's name. A CPU
/// reference device, or a device whose name is unknown, is never a catalogue GPU.
pub fn is_package_gpu(device: &DeviceIdentity, slug: &str, catalogue_model: &str) -> bool {
    if device.uuid == CPU_REFERENCE || device.model == UNKNOWN {
        return false;
    }
    let words = tokens(&device.model);
    if words == tokens(catalogue_model) {
        return true;
    }
    let has = |w: &str| words.iter().any(|x| x == w);
    tokens(slug).iter().all(|part| match part.as_str() {
        "sxm" => words.iter().any(|w| w.starts_with("sxm")) || !(has("pcie") || has("nvl")),
        other => has(other),
    })
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
        let id = identify(&lab_cpu::environment(ToolInfo::new(None)));
        assert_eq!(id.uuid, CPU_REFERENCE);
        assert_eq!(id.driver, "none");
        let id = identify(&env("cpu-reference", true, json!({"cpu_model": null})));
        assert_eq!(id.model, UNKNOWN);
    }

    fn gpu(name: &str) -> DeviceIdentity {
        DeviceIdentity {
            model: name.into(),
            uuid: "GPU-1".into(),
            driver: "570".into(),
        }
    }

    /// The names drivers report for the catalogue's GPUs, against the slugs.
    #[test]
    fn driver_names_match_their_catalogue_slugs_and_no_other() {
        let catalogue = rent::catalogue::Catalogue::embedded();
        let name_of = |slug: &str| catalogue.find(slug, 7).unwrap().model.clone();
        let cases = [
            ("NVIDIA H200", "h200"),
            ("NVIDIA H100 80GB HBM3", "h100-sxm"),
            ("NVIDIA H100 PCIe", "h100-pcie"),
            ("NVIDIA H100 NVL", "h100-nvl"),
            ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
            ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
            ("NVIDIA B200", "b200"),
            ("NVIDIA L4", "l4"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("NVIDIA GeForce RTX 5090", "rtx-5090"),
            ("NVIDIA RTX A6000", "rtx-a6000"),
            (
                "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "rtx-pro-6000",
            ),
        ];
        let slugs: Vec<&str> = catalogue.gpus();
        for (name, slug) in cases {
            for other in &slugs {
                assert_eq!(
                    is_package_gpu(&gpu(name), other, &name_of(other)),
                    *other == slug,
                    "{name} against {other}"
                );
            }
        }
        // The catalogue's own display name always matches.
        assert!(is_package_gpu(
            &gpu("AMD Instinct MI300X"),
            "mi300x",
            "AMD Instinct MI300X"
        ));
        let cpu = identify(&lab_cpu::environment(ToolInfo::new(None)));
        assert!(!is_package_gpu(&cpu, "h200", "NVIDIA H200"));
        assert!(!is_package_gpu(&gpu(UNKNOWN), "h200", "NVIDIA H200"));
    }

    #[test]
    fn cuda_with_and_without_details() {
        let id = identify(&env(
            "cuda",
            false,
            json!({"gpu": {"name": "NVIDIA H200", "uuid": "GPU-1234"}, "nvml": {"driver_version": "570.86.15"}, "driver": {"cuda_version": "12.8"}}),
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
        let id = identify(&env(
            "cuda",
            false,
            json!({"gpu": {"name": "NVIDIA L4"}, "nvml": {"available": false}, "driver": {"cuda_version": "12.8"}}),
        ));
        assert_eq!(id.driver, "CUDA 12.8");
        assert_eq!(identify(&env("cuda", false, Value::Null)).model, UNKNOWN);
    }
}
