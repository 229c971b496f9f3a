//! Finding cuBLAS and cuBLASLt: where to look, and opening a matching pair from one folder.
//!
//! The loader path covers system installs; CUDA_PATH / CUDA_HOME and `/usr/local/cuda` cover
//! toolkit installs that are not registered with the loader; Python environments cover the
//! libraries PyTorch wheels bring (`site-packages/nvidia/cu13/lib`, `.../nvidia/cublas/lib`).
//! cuBLASLt is opened before cuBLAS from the same folder, so cuBLAS binds to that very cuBLASLt
//! (a mismatched pair fails at handle creation). The pair is opened once and never closed: it
//! stays loaded for the process's life, so nothing that runs after a measurement (the device's
//! teardown, a destructor in the library) can find its code unmapped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::{CudaError, load_error};
use crate::maps;

/// A folder to try and why it is on the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    /// The folder.
    pub path: PathBuf,
    /// Where the folder came from: `CUDA_PATH`, `python environment`, ...
    pub origin: &'static str,
}

/// cuBLASLt and cuBLAS, opened from one folder, loaded for the process's life.
#[derive(Clone)]
pub struct BlasLibraries {
    /// cuBLASLt, opened first.
    pub lt: &'static Library,
    /// cuBLAS, bound to `lt`.
    pub blas: &'static Library,
    /// The file of cuBLASLt.
    pub lt_path: PathBuf,
    /// The file of cuBLAS.
    pub blas_path: PathBuf,
    /// The SONAME major version (13 or 12).
    pub major: u32,
    /// How the folder was found.
    pub origin: &'static str,
}

impl std::fmt::Debug for BlasLibraries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlasLibraries")
            .field("lt_path", &self.lt_path)
            .field("blas_path", &self.blas_path)
            .field("major", &self.major)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The cuBLAS majors worth trying with a driver of this CUDA version: cuBLAS 13 needs a CUDA 13
/// driver, so an older driver only gets cuBLAS 12.
pub fn majors_for_driver(driver_version: i32) -> &'static [u32] {
    if driver_version >= 13000 {
        &[13, 12]
    } else {
        &[12]
    }
}

/// The folders to search after the loader's own path, in order, without duplicates.
///
/// `var` reads an environment variable (only to find libraries; nothing read here is reported)
/// and `home` is the user's home folder.
pub fn search_folders(var: &dyn Fn(&str) -> Option<OsString>, home: Option<&Path>) -> Vec<Folder> {
    let mut out: Vec<Folder> = Vec::new();
    let mut push = |path: PathBuf, origin: &'static str| {
        if !out.iter().any(|f| f.path == path) {
            out.push(Folder { path, origin });
        }
    };
    for (name, origin) in [("CUDA_PATH", "CUDA_PATH"), ("CUDA_HOME", "CUDA_HOME")] {
        if let Some(root) = var(name).filter(|v| !v.is_empty()) {
            let root = PathBuf::from(root);
            for sub in [
                "lib64",
                "lib",
                "targets/x86_64-linux/lib",
                "targets/sbsa-linux/lib",
            ] {
                push(root.join(sub), origin);
            }
        }
    }
    push(PathBuf::from("/usr/local/cuda/lib64"), "/usr/local/cuda");
    push(
        PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"),
        "/usr/local/cuda",
    );
    for site in site_packages(var, home) {
        let nvidia = site.join("nvidia");
        push(nvidia.join("cu13").join("lib"), "python environment");
        push(nvidia.join("cublas").join("lib"), "python environment");
    }
    out
}

/// The `site-packages` / `dist-packages` folders of Python environments findable without running
/// Python: an active virtualenv or conda environment, the prefixes of the `python3` programs on
/// PATH, the system and user installs.
pub fn site_packages(var: &dyn Fn(&str) -> Option<OsString>, home: Option<&Path>) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for name in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = var(name).filter(|v| !v.is_empty()) {
            prefixes.push(PathBuf::from(p));
        }
    }
    if let Some(path) = var("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("python3").is_file()
                && let Some(prefix) = dir.parent()
            {
                prefixes.push(prefix.to_path_buf());
            }
        }
    }
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    if let Some(home) = home {
        prefixes.push(home.join(".local"));
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
                continue;
            };
            let mut pythons: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect();
            pythons.sort();
            for py in pythons {
                for sub in ["site-packages", "dist-packages"] {
                    let site = py.join(sub);
                    if site.is_dir() && !out.contains(&site) {
                        out.push(site);
                    }
                }
            }
        }
    }
    out
}

/// The pair opened by the first successful [`load_blas`] of this process.
static LOADED: OnceLock<BlasLibraries> = OnceLock::new();

/// Keeps a library loaded until the process ends (never `dlclose`d).
fn keep(lib: Library) -> &'static Library {
    Box::leak(Box::new(lib))
}

/// Opens cuBLASLt and cuBLAS: first by SONAME through the loader's path, then from each folder of
/// [`search_folders`]. `tried` in the error lists what was attempted. The first pair found is
/// kept for the process's life and returned by every later call.
pub fn load_blas(driver_version: i32) -> Result<BlasLibraries, CudaError> {
    if let Some(libs) = LOADED.get() {
        return Ok(libs.clone());
    }
    let libs = find_blas(driver_version)?;
    Ok(LOADED.get_or_init(|| libs).clone())
}

fn find_blas(driver_version: i32) -> Result<BlasLibraries, CudaError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let folders = search_folders(&|name| std::env::var_os(name), home.as_deref());
    let mut tried: Vec<String> = Vec::new();
    for &major in majors_for_driver(driver_version) {
        match open_by_soname(major) {
            Ok(libs) => return Ok(libs),
            Err(e) => tried.push(e),
        }
    }
    for folder in &folders {
        for &major in majors_for_driver(driver_version) {
            let lt = folder.path.join(format!("libcublasLt.so.{major}"));
            let blas = folder.path.join(format!("libcublas.so.{major}"));
            if !(lt.exists() && blas.exists()) {
                continue;
            }
            match open_pair(&lt, &blas, major, folder.origin) {
                Ok(libs) => return Ok(libs),
                Err(e) => tried.push(e),
            }
        }
    }
    if tried
        .iter()
        .all(|t| t.contains("cannot open shared object file"))
    {
        tried = vec![format!(
            "not on the loader path, nor in {} other folders",
            folders.len()
        )];
    }
    Err(CudaError::NoCublas {
        tried: tried.join("; "),
    })
}

fn open_by_soname(major: u32) -> Result<BlasLibraries, String> {
    let lt_name = format!("libcublasLt.so.{major}");
    // SAFETY: opening cuBLASLt runs its initialisers, which have no preconditions.
    let lt = unsafe { Library::new(&lt_name) }.map_err(|e| load_error(&e))?;
    let lt_path = maps::loaded_path(&lt_name).unwrap_or_else(|| PathBuf::from(&lt_name));
    let blas_name = format!("libcublas.so.{major}");
    // Same folder as the cuBLASLt the loader chose, when that file is there.
    let beside = lt_path.with_file_name(&blas_name);
    let target = if beside.is_absolute() && beside.exists() {
        beside
    } else {
        PathBuf::from(&blas_name)
    };
    // SAFETY: as above, for cuBLAS; its cuBLASLt dependency resolves to the one already loaded.
    let blas = unsafe { Library::new(&target) }.map_err(|e| load_error(&e))?;
    let blas_path = maps::loaded_path(&blas_name).unwrap_or(target);
    Ok(BlasLibraries {
        lt: keep(lt),
        blas: keep(blas),
        lt_path,
        blas_path,
        major,
        origin: "loader path",
    })
}

fn open_pair(
    lt_path: &Path,
    blas_path: &Path,
    major: u32,
    origin: &'static str,
) -> Result<BlasLibraries, String> {
    // SAFETY: opening cuBLASLt runs its initialisers, which have no preconditions.
    let lt = unsafe { Library::new(lt_path) }.map_err(|e| load_error(&e))?;
    // SAFETY: as above; cuBLAS's cuBLASLt dependency resolves (by SONAME) to the one just loaded.
    let blas = unsafe { Library::new(blas_path) }.map_err(|e| load_error(&e))?;
    Ok(BlasLibraries {
        lt: keep(lt),
        blas: keep(blas),
        lt_path: lt_path.to_path_buf(),
        blas_path: blas_path.to_path_buf(),
        major,
        origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_13_drivers_try_both_majors() {
        assert_eq!(majors_for_driver(13000), &[13, 12]);
        assert_eq!(majors_for_driver(12080), &[12]);
    }

    #[test]
    fn folders_follow_the_documented_order() {
        let tmp = tempfile::tempdir().unwrap();
        let venv = tmp.path().join("venv");
        let site = venv.join("lib/python3.12/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let venv_os = venv.clone().into_os_string();
        let var = move |name: &str| match name {
            "CUDA_PATH" => Some(OsString::from("/opt/cuda-12.8")),
            "VIRTUAL_ENV" => Some(venv_os.clone()),
            _ => None,
        };
        let folders = search_folders(&var, None);
        let paths: Vec<&Path> = folders.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths[0], Path::new("/opt/cuda-12.8/lib64"));
        assert_eq!(folders[0].origin, "CUDA_PATH");
        let local = paths
            .iter()
            .position(|p| *p == Path::new("/usr/local/cuda/lib64"))
            .unwrap();
        let cu13 = paths
            .iter()
            .position(|p| *p == site.join("nvidia/cu13/lib"))
            .unwrap();
        let cublas = paths
            .iter()
            .position(|p| *p == site.join("nvidia/cublas/lib"))
            .unwrap();
        assert!(local < cu13 && cu13 < cublas);
    }

    #[test]
    fn a_python_on_path_brings_its_site_packages() {
        let tmp = tempfile::tempdir().unwrap();
        let prefix = tmp.path().join("env");
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::write(prefix.join("bin/python3"), "").unwrap();
        let site = prefix.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let path = std::env::join_paths([prefix.join("bin")]).unwrap();
        let var = move |name: &str| (name == "PATH").then(|| path.clone());
        assert!(site_packages(&var, None).contains(&site));
    }
}
