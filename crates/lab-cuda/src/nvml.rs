//! NVML: the driver's management library, for what the CUDA driver API does not say (driver
//! version string, clocks, ECC, MIG, PCIe, power, per-process memory). Optional everywhere: a
//! missing NVML leaves those facts out, never fails a run.

use std::path::PathBuf;

use lab::lot::{GpuFacts, OtherProcess};
use lab::xid::XidCount;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, ComputeMode, EccCounter, MemoryError};
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
    /// The kernel log's XIDs per GPU, read once per process (see [`lab::xid`]).
    xids: XidLog,
}

type XidLog =
    std::sync::OnceLock<Result<std::collections::BTreeMap<String, Vec<XidCount>>, String>>;

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

/// Opens NVML, or says why not. Once the file is opened, a problem names it (`NVML at FILE
/// lacks ...`), and the handle keeps it as `path`.
pub fn open() -> Result<NvmlHandle, String> {
    let path = {
        // SAFETY: loading libnvidia-ml runs its initialisers, which have no preconditions. The
        // handle only checks symbols and is closed at the end of this block (NVML keeps its own).
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .map_err(|e| format!("NVML not found ({})", crate::error::load_error(&e)))?;
        // Read while this handle holds the file mapped: the file the loader chose.
        let path = maps::loaded_path("libnvidia-ml.so");
        let at = at_file(path.as_deref());
        for name in REQUIRED {
            // SAFETY: the symbol is only looked up, never called, so its type does not matter.
            if unsafe { lib.get::<*const ()>(name.as_bytes()) }.is_err() {
                return Err(format!("NVML{at} lacks {name}"));
            }
        }
        path
    };
    let nvml = Nvml::init()
        .map_err(|e| format!("NVML{} did not initialise: {e}", at_file(path.as_deref())))?;
    Ok(NvmlHandle {
        nvml: std::mem::ManuallyDrop::new(nvml),
        device_uuid: None,
        path: maps::loaded_path("libnvidia-ml.so").or(path),
        xids: XidLog::new(),
    })
}

/// ` at FILE` (home shown as `~`), or nothing when the file is not known.
fn at_file(path: Option<&std::path::Path>) -> String {
    path.map(|p| format!(" at {}", crate::environment::display_path(p)))
        .unwrap_or_default()
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

    /// The name NVML knows a CUDA device by (`GPU-...`, or `MIG-...` for a MIG instance), without
    /// changing which device this handle is matched to.
    pub fn uuid_of(&self, uuid_hex: &[u8; 16]) -> Option<String> {
        ["GPU", "MIG"]
            .iter()
            .map(|prefix| crate::driver::format_uuid(prefix, uuid_hex))
            .find(|uuid| self.nvml.device_by_uuid(uuid.as_str()).is_ok())
    }

    /// Fills the NVML facts of the device known as `uuid` into `facts` (each left `None` when
    /// NVML cannot say) and sets `nvml_matched`.
    pub fn fill_facts(&self, uuid: &str, facts: &mut GpuFacts) {
        let Ok(d) = self.nvml.device_by_uuid(uuid) else {
            return;
        };
        facts.nvml_matched = true;
        facts.uuid = uuid.to_string();
        facts.pci_bus_id = d.pci_info().ok().and_then(|p| lab::xid::bus_key(&p.bus_id));
        match (
            &facts.pci_bus_id,
            self.xids.get_or_init(lab::xid::read_kernel_log),
        ) {
            (Some(bus), Ok(log)) => {
                facts.xid_errors = Some(log.get(bus).cloned().unwrap_or_default());
            }
            (None, _) => {
                facts.xid_not_checked = Some("NVML gave no PCI address for it".to_string());
            }
            (_, Err(why)) => facts.xid_not_checked = Some(why.clone()),
        }
        facts.pcie_generation = d.current_pcie_link_gen().ok();
        facts.pcie_width = d.current_pcie_link_width().ok();
        facts.pcie_max_generation = d.max_pcie_link_gen().ok();
        facts.pcie_max_width = d.max_pcie_link_width().ok();
        facts.pcie_gpu_max_generation = self.gpu_max_pcie_generation(&d);
        facts.sm_clock_mhz = d.clock_info(Clock::SM).ok();
        facts.max_sm_clock_mhz = d.max_clock_info(Clock::SM).ok();
        facts.throttle_reasons = d.current_throttle_reasons().ok().map(reason_names);
        facts.power_limit_watts = d
            .enforced_power_limit()
            .ok()
            .map(|mw| f64::from(mw) / 1000.0);
        facts.default_power_limit_watts = d
            .power_management_limit_default()
            .ok()
            .map(|mw| f64::from(mw) / 1000.0);
        facts.ecc_enabled = d.is_ecc_enabled().ok().map(|e| e.currently_enabled);
        facts.ecc_uncorrected_volatile = d
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok();
        facts.ecc_corrected_volatile = d
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .ok();
        facts.retired_pages_pending = d.are_pages_pending_retired().ok();
        if let Some((corr, unc, pending, failure)) = self.remapped_rows(&d) {
            facts.remapped_rows_correctable = Some(corr);
            facts.remapped_rows_uncorrectable = Some(unc);
            facts.row_remap_pending = Some(pending);
            facts.row_remap_failure = Some(failure);
        }
        facts.mig_enabled = d.mig_mode().ok().map(|m| m.current == 1);
        facts.persistence_mode = d.is_in_persistent_mode().ok();
        facts.compute_mode = d.compute_mode().ok().map(|m| {
            match m {
                ComputeMode::Default => "default",
                ComputeMode::ExclusiveThread => "exclusive_thread",
                ComputeMode::Prohibited => "prohibited",
                ComputeMode::ExclusiveProcess => "exclusive_process",
            }
            .to_string()
        });
        facts.other_processes = other_processes(&d);
        let links: Vec<bool> = (0..NVLINK_MAX_LINKS)
            .filter_map(|l| d.link_wrapper_for(l).is_active().ok())
            .collect();
        facts.nvlink_active_links =
            (!links.is_empty()).then(|| links.iter().filter(|a| **a).count() as u32);
    }

    /// `nvmlDeviceGetGpuMaxPcieLinkGeneration` (the GPU's own maximum), which nvml-wrapper does
    /// not wrap.
    fn gpu_max_pcie_generation(&self, d: &nvml_wrapper::Device<'_>) -> Option<u32> {
        let f = self
            .nvml
            .lib()
            .nvmlDeviceGetGpuMaxPcieLinkGeneration
            .as_ref()
            .ok()?;
        let mut generation: std::ffi::c_uint = 0;
        // SAFETY: the prototype is nvml.h's; `d` is a live handle of this NVML; valid out-pointer.
        let rc = unsafe { f(d.handle(), &mut generation) };
        (rc == 0).then_some(generation)
    }

    /// `nvmlDeviceGetRemappedRows`: (correctable, uncorrectable, pending, failure), which
    /// nvml-wrapper does not wrap.
    fn remapped_rows(&self, d: &nvml_wrapper::Device<'_>) -> Option<(u32, u32, bool, bool)> {
        let f = self.nvml.lib().nvmlDeviceGetRemappedRows.as_ref().ok()?;
        let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
        // SAFETY: the prototype is nvml.h's; `d` is a live handle; four valid out-pointers.
        let rc = unsafe { f(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
        (rc == 0).then_some((corr, unc, pending != 0, failure != 0))
    }

    /// Facts about the matched device, each left out when NVML cannot say.
    pub fn device_facts(&self) -> Value {
        let Some(uuid) = &self.device_uuid else {
            return Value::Null;
        };
        let Ok(d) = self.nvml.device_by_uuid(uuid.as_str()) else {
            return Value::Null;
        };
        let mut health = GpuFacts::default();
        self.fill_facts(uuid, &mut health);
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
            "default_power_limit_watts": health.default_power_limit_watts,
            "throttle_reasons": health.throttle_reasons,
            "ecc_errors": {
                "uncorrected_volatile": health.ecc_uncorrected_volatile,
                "corrected_volatile": health.ecc_corrected_volatile,
                "retired_pages_pending": health.retired_pages_pending,
                "remapped_rows_uncorrectable": health.remapped_rows_uncorrectable,
                "remapped_rows_correctable": health.remapped_rows_correctable,
                "row_remap_pending": health.row_remap_pending,
                "row_remap_failure": health.row_remap_failure,
            },
            "persistence_mode": health.persistence_mode,
            "compute_mode": health.compute_mode,
            "nvlink_active_links": health.nvlink_active_links,
            "other_processes": health.other_processes,
            "pci_bus_id": health.pci_bus_id,
            "xid_errors": health.xid_errors,
            "xid_not_checked": health.xid_not_checked,
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

/// NVML's `NVML_NVLINK_MAX_LINKS`.
const NVLINK_MAX_LINKS: u32 = 18;

/// The names of NVML's clock-event (throttle) reason bits, as the lot checks read them.
fn reason_names(r: ThrottleReasons) -> Vec<String> {
    [
        (ThrottleReasons::GPU_IDLE, "gpu_idle"),
        (
            ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
        ),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (
            ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
        ),
        (
            ThrottleReasons::DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
        ),
    ]
    .iter()
    .filter(|(bit, _)| r.contains(*bit))
    .map(|(_, name)| name.to_string())
    .collect()
}

/// The other processes on a device (compute and graphics, this process left out), or `None`
/// when NVML cannot list them.
fn other_processes(d: &nvml_wrapper::Device<'_>) -> Option<Vec<OtherProcess>> {
    let compute = d.running_compute_processes();
    let graphics = d.running_graphics_processes();
    if compute.is_err() && graphics.is_err() {
        return None;
    }
    let own = own_pids();
    let mut out: Vec<OtherProcess> = Vec::new();
    for p in compute
        .unwrap_or_default()
        .into_iter()
        .chain(graphics.unwrap_or_default())
    {
        if own.contains(&p.pid) || out.iter().any(|o| o.pid == p.pid) {
            continue;
        }
        out.push(OtherProcess {
            pid: p.pid,
            used_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
        });
    }
    Some(out)
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
