//! `environment --device cuda:N`: what the driver, the libraries and the GPU say, gathered stage
//! by stage so that a failure still reports everything learnt before it.

use std::path::Path;

use lab::environment::{ENVIRONMENT_SCHEMA, Environment};
use lab::tool::ToolInfo;
use serde_json::{Map, Value, json};

use crate::blas::Blas;
use crate::driver::{Attribute, CuDevice, Driver, format_uuid};
use crate::error::CudaError;
use crate::kernels::{KernelForm, cubin_archs, preferred_form};
use crate::loader::{self, BlasLibraries};
use crate::maps;
use crate::nvml::{self, NvmlHandle};
use crate::version::cuda_version;
use lab::workspaces::{DEFAULT_CUBLASLT_WORKSPACE, default_cublas_workspace};

/// The oldest compute capability the kernels (compute_80) and bfloat16 GEMMs support.
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);

/// Describes `cuda:ordinal`. Never fails: without a usable GPU the report has `usable: false`
/// and a `problem` sentence, and still says what was found.
pub fn environment(ordinal: usize, tool: ToolInfo) -> Environment {
    let mut details = Map::new();
    let outcome = probe(ordinal, &mut details);
    Environment {
        schema: ENVIRONMENT_SCHEMA.to_string(),
        tool,
        requested_device: format!("cuda:{ordinal}"),
        backend: "cuda".to_string(),
        reference_device: false,
        usable: outcome.is_ok(),
        problem: outcome.err().map(|e| e.to_string()),
        details: Value::Object(details),
    }
}

fn probe(ordinal: usize, details: &mut Map<String, Value>) -> Result<(), CudaError> {
    let mut nvml = nvml::open();
    describe_nvml(&nvml, details);
    let driver = match Driver::load() {
        Ok(driver) => driver,
        Err(e) => {
            describe_refused_driver(details);
            return Err(e);
        }
    };
    describe_driver(&driver, details);
    let dev = driver.device(ordinal);
    details.insert("visible_devices".into(), json!(driver.device_count()?));
    let dev = dev?;
    let major_minor = describe_gpu(&driver, dev, nvml.as_mut().ok(), details)?;
    // Device-wide free memory needs a context; the primary context is released at once.
    driver.retain_primary_context(dev)?;
    let info = driver.mem_get_info();
    driver.release_primary_context(dev);
    let (free, total) = info?;
    if let Some(Value::Object(gpu)) = details.get_mut("gpu") {
        gpu.insert("free_memory_bytes".into(), json!(free));
        gpu.insert("total_memory_bytes".into(), json!(total));
    }
    check_compute_capability(ordinal, &driver, dev, major_minor)?;
    let libs = match loader::load_blas(driver.version) {
        Ok(libs) => libs,
        Err(e) => {
            describe_blas(None, details);
            return Err(e);
        }
    };
    match Blas::new(libs.clone()) {
        Ok(blas) => {
            describe_blas(Some(&blas), details);
            Ok(())
        }
        Err(e) => {
            // The files were opened: name them, without versions.
            describe_libraries(&libs, None, details);
            Err(e)
        }
    }
}

/// Refuses GPUs older than compute capability 8.0.
pub fn check_compute_capability(
    ordinal: usize,
    driver: &Driver,
    dev: CuDevice,
    (major, minor): (i32, i32),
) -> Result<(), CudaError> {
    if (major, minor) < MIN_COMPUTE_CAPABILITY {
        let name = driver.facts(dev).map(|f| f.name).unwrap_or_default();
        return Err(CudaError::UnsupportedGpu {
            ordinal,
            name,
            major,
            minor,
        });
    }
    Ok(())
}

/// Adds NVML's availability (and its problem, if any) under `nvml`.
pub fn describe_nvml(nvml: &Result<NvmlHandle, String>, details: &mut Map<String, Value>) {
    let value = match nvml {
        Ok(h) => json!({
            "available": true,
            "library": h.path.as_deref().map(display_path),
            "driver_version": h.driver_version(),
            "cuda_driver_version": h.cuda_driver_version().map(cuda_version),
        }),
        Err(reason) => json!({"available": false, "problem": reason}),
    };
    details.insert("nvml".into(), value);
}

/// Adds the driver's library, version and the names of the symbols that differ by generation.
pub fn describe_driver(driver: &Driver, details: &mut Map<String, Value>) {
    details.insert(
        "driver".into(),
        json!({
            "library": driver.path.as_deref().map(display_path),
            "cuda_version": cuda_version(driver.version),
            "event_timing_symbol": driver.elapsed_symbol(),
        }),
    );
}

/// When the driver library opened but was refused (the toolkit's stub, no device, too old, a
/// missing symbol, a failed initialisation): adds the file that was opened, under
/// `driver.library`, so every report names the libcuda it judged.
fn describe_refused_driver(details: &mut Map<String, Value>) {
    if let Some(path) = maps::loaded_path("libcuda.so") {
        details.insert("driver".into(), json!({"library": display_path(&path)}));
    }
}

/// Adds the GPU's facts; returns its compute capability.
pub fn describe_gpu(
    driver: &Driver,
    dev: CuDevice,
    nvml: Option<&mut NvmlHandle>,
    details: &mut Map<String, Value>,
) -> Result<(i32, i32), CudaError> {
    let facts = driver.facts(dev)?;
    let attr = |a: Attribute| driver.attribute(dev, a).ok();
    // The UUID's label (`GPU-` or, for a MIG instance, `MIG-`) is the one NVML knows it by; the
    // driver returns the 16 bytes only.
    let mut uuid = (
        format_uuid("GPU", &facts.uuid),
        "GPU- assumed: NVML could not say",
    );
    let nvml_facts = match nvml {
        Some(h) => {
            if h.match_device(&facts.uuid) {
                if let Some(u) = &h.device_uuid {
                    uuid = (u.clone(), "NVML");
                }
                h.device_facts()
            } else {
                json!("no NVML device has this GPU's UUID")
            }
        }
        None => Value::Null,
    };
    let form = preferred_form(facts.major, facts.minor);
    details.insert(
        "gpu".into(),
        json!({
            "name": facts.name,
            "uuid": uuid.0,
            "uuid_label_from": uuid.1,
            "uuid_symbol": facts.uuid_symbol,
            "compute_capability": format!("{}.{}", facts.major, facts.minor),
            "sm_count": attr(Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            "total_memory_bytes": facts.total_bytes,
            // As the catalogue's usable_memory_mib and torch's total_memory print it.
            "total_memory_mib": facts.total_bytes >> 20,
            "l2_cache_bytes": attr(Attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            "memory_bus_width_bits": attr(Attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            "ecc_enabled": attr(Attribute::CU_DEVICE_ATTRIBUTE_ECC_ENABLED).map(|v| v != 0),
            "pci_bus": pci_bus(
                attr(Attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                attr(Attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                attr(Attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
            ),
            "nvml": nvml_facts,
        }),
    );
    details.insert("kernel_form".into(), json!(form.to_string()));
    details.insert("kernel_cubins".into(), json!(cubin_archs()));
    // torch 2.11's defaults for this GPU (a run records the sizes it used in its document).
    details.insert(
        "cublas_workspace_bytes".into(),
        json!(default_cublas_workspace(facts.major, facts.minor)),
    );
    details.insert(
        "cublaslt_workspace_bytes".into(),
        json!(DEFAULT_CUBLASLT_WORKSPACE),
    );
    Ok((facts.major, facts.minor))
}

/// Records the kernel form actually loaded (it may differ from the preferred one).
pub fn set_kernel_form(form: KernelForm, details: &mut Map<String, Value>) {
    details.insert("kernel_form".into(), json!(form.to_string()));
}

/// Adds cuBLAS and cuBLASLt paths and versions, the folder they were opened from and why that
/// folder was searched.
pub fn describe_blas(blas: Option<&Blas>, details: &mut Map<String, Value>) {
    match blas {
        Some(b) => describe_libraries(
            &b.libs,
            Some((b.version.as_str(), b.lt_version.as_str())),
            details,
        ),
        None => {
            details.insert("libraries".into(), Value::Null);
        }
    }
}

/// The files of a loaded pair, with their versions (cuBLAS, cuBLASLt) when they were read.
fn describe_libraries(
    libs: &BlasLibraries,
    versions: Option<(&str, &str)>,
    details: &mut Map<String, Value>,
) {
    let (blas_version, lt_version) = versions.unzip();
    details.insert(
        "libraries".into(),
        json!({
            "cublas": {"library": display_path(&libs.blas_path), "version": blas_version},
            "cublaslt": {"library": display_path(&libs.lt_path), "version": lt_version},
            "found_via": libs.origin,
            "folder": display_path(&libs.folder),
            "found_because": libs.why,
        }),
    );
}

fn pci_bus(domain: Option<i32>, bus: Option<i32>, device: Option<i32>) -> Option<String> {
    Some(format!("{:04x}:{:02x}:{:02x}.0", domain?, bus?, device?))
}

/// A path for a report, with the home folder shown as `~` so no user name appears.
pub fn display_path(path: &Path) -> String {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    redact_home(path, home.as_deref())
}

/// `path` with `home` shown as `~` (no user name in a report or a message).
pub(crate) fn redact_home(path: &Path, home: Option<&Path>) -> String {
    match home {
        Some(home) if home != Path::new("/") && !home.as_os_str().is_empty() => {
            path.strip_prefix(home).map_or_else(
                |_| path.display().to_string(),
                |rest| {
                    if rest.as_os_str().is_empty() {
                        "~".to_string()
                    } else {
                        format!("~/{}", rest.display())
                    }
                },
            )
        }
        _ => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_not_reported() {
        assert_eq!(
            redact_home(
                Path::new("/home/alice/.local/lib/libcublas.so.12"),
                Some(Path::new("/home/alice"))
            ),
            "~/.local/lib/libcublas.so.12"
        );
        assert_eq!(
            redact_home(
                Path::new("/usr/lib/libcuda.so.1"),
                Some(Path::new("/home/alice"))
            ),
            "/usr/lib/libcuda.so.1"
        );
        assert_eq!(
            redact_home(Path::new("/home/alice"), Some(Path::new("/home/alice"))),
            "~"
        );
        assert_eq!(
            redact_home(Path::new("/usr/lib/x"), Some(Path::new("/"))),
            "/usr/lib/x"
        );
    }

    #[test]
    fn pci_bus_id_format() {
        assert_eq!(
            pci_bus(Some(0), Some(0x1b), Some(0)),
            Some("0000:1b:00.0".into())
        );
        assert_eq!(pci_bus(None, Some(1), Some(0)), None);
    }

    #[test]
    fn without_a_gpu_the_report_is_still_valid() {
        let env = environment(0, ToolInfo::new(None));
        assert_eq!(env.requested_device, "cuda:0");
        assert_eq!(env.backend, "cuda");
        if !env.usable {
            assert!(env.problem.is_some());
        }
    }
}
