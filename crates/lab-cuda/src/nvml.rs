//! NVML: the driver's management library, for what the CUDA driver API does not say (driver
//! version string, clocks, ECC, MIG, PCIe, power, per-process memory). Optional everywhere: a
//! missing NVML leaves those facts out, never fails a run.

use std::path::PathBuf;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::UsedGpuMemory;
use serde_json::{Value, json};

use crate::maps;

/// NVML, opened and initialised, and the NVML name of our device.
pub struct NvmlHandle {
    /// Never shut down nor unloaded: nvml-wrapper's `Drop` would call `nvmlShutdown` and close
    /// the library, and nothing at the end of a run may depend on a driver library's teardown.
    nvml: std::mem::ManuallyDrop<Nvml>,
    /// The UUID under which NVML knows our CUDA device, once matched.
    pub device_uuid: Option<String>,
    /// The library file.
    pub path: Option<PathBuf>,
}

impl std::fmt::Debug for NvmlHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlHandle")
            .field("device_uuid", &self.device_uuid)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The symbols whose absence would make nvml-wrapper fail in a way we cannot catch as an error:
/// its `Drop` calls `nvmlShutdown` without checking it resolved.
const REQUIRED: [&str; 2] = ["nvmlInit_v2", "nvmlShutdown"];

/// Opens NVML, or says why not.
pub fn open() -> Result<NvmlHandle, String> {
    {
        // SAFETY: loading libnvidia-ml runs its initialisers, which have no preconditions. The
        // handle only checks symbols and is closed at the end of this block (NVML keeps its own).
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .map_err(|e| format!("NVML not found ({})", crate::error::load_error(&e)))?;
        for name in REQUIRED {
            // SAFETY: the symbol is only looked up, never called, so its type does not matter.
            if unsafe { lib.get::<*const ()>(name.as_bytes()) }.is_err() {
                return Err(format!("NVML lacks {name}"));
            }
        }
    }
    let nvml = Nvml::init().map_err(|e| format!("NVML did not initialise: {e}"))?;
    Ok(NvmlHandle {
        nvml: std::mem::ManuallyDrop::new(nvml),
        device_uuid: None,
        path: maps::loaded_path("libnvidia-ml.so"),
    })
}

impl NvmlHandle {
    /// The driver's version string (`550.54.15`).
    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// The CUDA version the driver supports, as encoded by CUDA (12080).
    pub fn cuda_driver_version(&self) -> Option<i32> {
        self.nvml.sys_cuda_driver_version().ok()
    }

    /// Finds the NVML device with the CUDA device's UUID (NVML indices are not CUDA ordinals when
    /// CUDA_VISIBLE_DEVICES reorders devices). Under MIG, CUDA reports the instance's UUID, which
    /// NVML knows as `MIG-...`: the matched name keeps that label.
    pub fn match_device(&mut self, uuid_hex: &[u8; 16]) -> bool {
        for prefix in ["GPU", "MIG"] {
            let uuid = crate::driver::format_uuid(prefix, uuid_hex);
            if self.nvml.device_by_uuid(uuid.as_str()).is_ok() {
                self.device_uuid = Some(uuid);
                return true;
            }
        }
        false
    }

    /// Facts about the matched device, each left out when NVML cannot say.
    pub fn device_facts(&self) -> Value {
        let Some(uuid) = &self.device_uuid else {
            return Value::Null;
        };
        let Ok(d) = self.nvml.device_by_uuid(uuid.as_str()) else {
            return Value::Null;
        };
        let mem = d.memory_info().ok();
        let ecc = d.is_ecc_enabled().ok();
        let mig = d.mig_mode().ok();
        json!({
            "uuid": uuid,
            "memory": mem.map(|m| json!({"total_bytes": m.total, "free_bytes": m.free, "used_bytes": m.used})),
            "clocks_mhz": {
                "graphics": d.clock_info(Clock::Graphics).ok(),
                "sm": d.clock_info(Clock::SM).ok(),
                "memory": d.clock_info(Clock::Memory).ok(),
                "max_graphics": d.max_clock_info(Clock::Graphics).ok(),
                "max_sm": d.max_clock_info(Clock::SM).ok(),
                "max_memory": d.max_clock_info(Clock::Memory).ok(),
            },
            "ecc": ecc.map(|e| json!({"enabled": e.currently_enabled, "pending": e.pending_enabled})),
            "mig": mig.map(|m| json!({"enabled": m.current == 1, "pending": m.pending == 1})),
            "pcie": {
                "generation": d.current_pcie_link_gen().ok(),
                "width": d.current_pcie_link_width().ok(),
                "max_generation": d.max_pcie_link_gen().ok(),
                "max_width": d.max_pcie_link_width().ok(),
            },
            "power_limit_watts": d.enforced_power_limit().ok().map(|mw| f64::from(mw) / 1000.0),
        })
    }

    /// The bytes this process uses on the matched device, where NVML lists it.
    pub fn process_used_bytes(&self) -> Option<u64> {
        let uuid = self.device_uuid.as_ref()?;
        let d = self.nvml.device_by_uuid(uuid.as_str()).ok()?;
        let processes = d.running_compute_processes().ok()?;
        let pids = own_pids();
        processes
            .into_iter()
            .find(|p| pids.contains(&p.pid))
            .and_then(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            })
    }
}

/// This process's ids in every PID namespace /proc shows (`NSpid`), plus its own id: NVML lists
/// host PIDs, which inside a container differ from `std::process::id()`.
fn own_pids() -> Vec<u32> {
    let mut pids = vec![std::process::id()];
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        pids.extend(parse_nspid(&status));
    }
    pids
}

fn parse_nspid(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lists_every_namespace() {
        assert_eq!(parse_nspid("Name:\tx\nNSpid:\t4242\t17\n"), vec![4242, 17]);
        assert!(parse_nspid("Name:\tx\n").is_empty());
    }

    #[test]
    fn missing_nvml_is_a_reason_not_a_panic() {
        if let Err(reason) = open() {
            assert!(reason.contains("NVML"), "{reason}");
        }
    }
}
