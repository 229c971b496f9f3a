//! Finding cuBLAS and cuBLASLt: where to look, and opening a matching pair from one folder.
//!
//! The order, first found wins:
//! 1. each folder of `LD_LIBRARY_PATH`, in its order, each tried for the pair of every major;
//!    so a folder put there (the one PyTorch loaded its cuBLAS from, say) wins over everything
//!    below, whatever major the rest of the machine has;
//! 2. the dynamic loader by name (its cache, `ldconfig -p`, and its default folders);
//! 3. `CUDA_PATH` and `CUDA_HOME`, then `/usr/local/cuda`, each with `lib64`, `lib`,
//!    `targets/x86_64-linux/lib` and `targets/sbsa-linux/lib`;
//! 4. the Python environments findable without running Python, as PyTorch wheels install the
//!    libraries (`site-packages/nvidia/cu13/lib`, then `.../nvidia/cublas/lib`): an active
//!    virtualenv or conda environment, the prefix of each `python3` on PATH (following its links,
//!    so a `python3` linked into a venv brings that venv), the system installs, `~/.local`.
//!
//! The roots of 3 and 4 that are not environment variables (`/usr/local/cuda`, `/usr/local`,
//! `/usr`, the home folder) are a [`Roots`], so tests run on fake trees. When nothing is found the
//! error names every place searched and why each failed.
//!
//! cuBLASLt is opened before cuBLAS from the same folder, so cuBLAS binds to that very cuBLASLt
//! (a mismatched pair fails at handle creation). The pair is opened once and never closed: it
//! stays loaded for the process's life, so nothing that runs after a measurement (the device's
//! teardown, a destructor in the library) can find its code unmapped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use crate::environment::redact_home;
use crate::error::{CudaError, load_error};
use crate::maps;

/// `found_via` of the loader's own path: `LD_LIBRARY_PATH`'s folders and the lookup by name.
pub const LOADER_PATH: &str = "loader path";
/// `found_via` of a Python environment's `nvidia/*/lib` folder.
pub const PYTHON_ENVIRONMENT: &str = "python environment";

/// The most links followed from one `python3` (a loop of links stops there).
const MAX_LINKS: usize = 16;

/// A folder to try and why it is on the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    /// The folder.
    pub path: PathBuf,
    /// Where the folder came from, as the report's `found_via` says it: `loader path`,
    /// `CUDA_PATH`, `CUDA_HOME`, `/usr/local/cuda`, `python environment`.
    pub origin: &'static str,
    /// Why it is on the list, in a few words (`LD_LIBRARY_PATH`, `python3 on PATH at ...`).
    pub why: String,
}

/// The places searched that are not environment variables. [`Roots::system`] is what the tool
/// uses; tests point every root into a temporary folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The toolkit's default install, `/usr/local/cuda`.
    pub cuda: PathBuf,
    /// The system Python prefixes, `/usr/local` then `/usr`.
    pub python_prefixes: Vec<PathBuf>,
    /// The user's home folder (for `~/.local`, and shown as `~` in messages).
    pub home: Option<PathBuf>,
    /// Whether to ask the dynamic loader by name (its cache and default folders), which depends
    /// on the machine; off in tests.
    pub by_name: bool,
}

impl Roots {
    /// This machine's roots, the home folder from `HOME`.
    pub fn system() -> Roots {
        Roots {
            cuda: PathBuf::from("/usr/local/cuda"),
            python_prefixes: vec![PathBuf::from("/usr/local"), PathBuf::from("/usr")],
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            by_name: true,
        }
    }

    /// A path for a message, with the home folder shown as `~`.
    fn shown(&self, path: &Path) -> String {
        redact_home(path, self.home.as_deref())
    }
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
    /// How the folder was found (the report's `found_via`).
    pub origin: &'static str,
    /// The folder both files were opened from.
    pub folder: PathBuf,
    /// Why that folder was searched (the report's `found_because`).
    pub why: String,
}

impl std::fmt::Debug for BlasLibraries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlasLibraries")
            .field("lt_path", &self.lt_path)
            .field("blas_path", &self.blas_path)
            .field("major", &self.major)
            .field("origin", &self.origin)
            .field("folder", &self.folder)
            .field("why", &self.why)
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

/// One place of the search, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A folder, tried for the pair of every major.
    Folder(Folder),
    /// The dynamic loader, asked for the pair by name.
    ByName,
}

/// A list of folders without duplicates (the first reason a folder is on it is kept).
#[derive(Default)]
struct Places(Vec<Place>);

impl Places {
    fn push(&mut self, path: PathBuf, origin: &'static str, why: impl Into<String>) {
        let known = self
            .0
            .iter()
            .any(|p| matches!(p, Place::Folder(f) if f.path == path));
        if !known {
            self.0.push(Place::Folder(Folder {
                path,
                origin,
                why: why.into(),
            }));
        }
    }
}

/// Where a toolkit root keeps its libraries.
const TOOLKIT_SUBFOLDERS: [&str; 4] = [
    "lib64",
    "lib",
    "targets/x86_64-linux/lib",
    "targets/sbsa-linux/lib",
];

/// Every place to search, in the order of the module's documentation. `var` reads an
/// environment variable (only to find libraries; no value read here is reported except as the
/// folders searched).
pub fn search_plan(var: &dyn Fn(&str) -> Option<OsString>, roots: &Roots) -> Vec<Place> {
    let mut places = Places::default();
    places
        .0
        .extend(loader_path_folders(var).into_iter().map(|(path, why)| {
            Place::Folder(Folder {
                path,
                origin: LOADER_PATH,
                why,
            })
        }));
    if roots.by_name {
        places.0.push(Place::ByName);
    }
    for folder in search_folders(var, roots) {
        places.push(folder.path, folder.origin, folder.why);
    }
    places.0
}

/// `LD_LIBRARY_PATH`'s folders, in order, each with its position. Empty entries and entries with
/// a `$` (the loader's `$ORIGIN`, `$LIB`, `$PLATFORM`) are left to the lookup by name.
pub fn loader_path_folders(var: &dyn Fn(&str) -> Option<OsString>) -> Vec<(PathBuf, String)> {
    let Some(value) = var("LD_LIBRARY_PATH") else {
        return Vec::new();
    };
    let value = value.to_string_lossy().into_owned();
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    for (i, entry) in value.split([':', ';']).enumerate() {
        let path = PathBuf::from(entry);
        if entry.is_empty() || entry.contains('$') || out.iter().any(|(p, _)| *p == path) {
            continue;
        }
        out.push((
            path,
            format!("LD_LIBRARY_PATH entry {}, searched first", i + 1),
        ));
    }
    out
}

/// The folders to search after the loader's own path, in order, without duplicates: the toolkit
/// roots, then the Python environments.
pub fn search_folders(var: &dyn Fn(&str) -> Option<OsString>, roots: &Roots) -> Vec<Folder> {
    let mut places = Places::default();
    let mut toolkits: Vec<(PathBuf, &'static str, String)> = Vec::new();
    for name in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(root) = var(name).filter(|v| !v.is_empty()) {
            toolkits.push((
                PathBuf::from(root),
                name,
                format!("{name} names this toolkit"),
            ));
        }
    }
    toolkits.push((
        roots.cuda.clone(),
        "/usr/local/cuda",
        "the toolkit's default install".to_string(),
    ));
    for (root, origin, why) in toolkits {
        for sub in TOOLKIT_SUBFOLDERS {
            places.push(root.join(sub), origin, why.clone());
        }
    }
    for (site, why) in site_packages(var, roots) {
        let nvidia = site.join("nvidia");
        places.push(
            nvidia.join("cu13").join("lib"),
            PYTHON_ENVIRONMENT,
            why.clone(),
        );
        places.push(nvidia.join("cublas").join("lib"), PYTHON_ENVIRONMENT, why);
    }
    places
        .0
        .into_iter()
        .filter_map(|p| match p {
            Place::Folder(f) => Some(f),
            Place::ByName => None,
        })
        .collect()
}

/// The prefixes of the Python environments findable without running Python, each with why:
/// an active virtualenv or conda environment; for each `python3` on PATH, the folder above its
/// `bin`, above the folder its `bin` links to, and above every file its chain of links passes
/// through (a `python3` linked into a venv brings that venv, whose own `python3` links on to the
/// system's); the system installs; `~/.local`.
pub fn python_prefixes(
    var: &dyn Fn(&str) -> Option<OsString>,
    roots: &Roots,
) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let mut push = |prefix: PathBuf, why: String| {
        if !out.iter().any(|(p, _)| *p == prefix) {
            out.push((prefix, why));
        }
    };
    for name in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = var(name).filter(|v| !v.is_empty()) {
            push(PathBuf::from(p), name.to_string());
        }
    }
    if let Some(path) = var("PATH") {
        for dir in std::env::split_paths(&path) {
            let exe = dir.join("python3");
            if !exe.is_file() {
                continue;
            }
            let shown = roots.shown(&exe);
            if let Some(prefix) = dir.parent() {
                push(prefix.to_path_buf(), format!("python3 on PATH at {shown}"));
            }
            if let Ok(real) = dir.canonicalize()
                && real != dir
                && let Some(prefix) = real.parent()
            {
                push(
                    prefix.to_path_buf(),
                    format!("python3 on PATH at {shown}, in {}", roots.shown(&real)),
                );
            }
            let mut link = exe.clone();
            for _ in 0..MAX_LINKS {
                let Ok(target) = std::fs::read_link(&link) else {
                    break;
                };
                let target = match link.parent() {
                    Some(parent) if target.is_relative() => parent.join(target),
                    _ => target,
                };
                // The folder above the target's `bin`, with `..` and links in it resolved.
                let bin = target
                    .parent()
                    .map(|b| b.canonicalize().unwrap_or(b.to_path_buf()));
                if let Some(prefix) = bin.as_deref().and_then(Path::parent) {
                    push(
                        prefix.to_path_buf(),
                        format!(
                            "python3 on PATH at {shown}, a link to {}",
                            roots.shown(&target)
                        ),
                    );
                }
                link = target;
            }
        }
    }
    for prefix in &roots.python_prefixes {
        push(
            prefix.clone(),
            format!("the system Python in {}", prefix.display()),
        );
    }
    if let Some(home) = &roots.home {
        push(
            home.join(".local"),
            "the user's installs in ~/.local".to_string(),
        );
    }
    out
}

/// The `site-packages` / `dist-packages` folders of [`python_prefixes`], each with why its
/// prefix is on the list. A folder reached twice under two names (`/lib` linking to `/usr/lib`)
/// is listed once, under the first.
pub fn site_packages(
    var: &dyn Fn(&str) -> Option<OsString>,
    roots: &Roots,
) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for (prefix, why) in python_prefixes(var, roots) {
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
                    let Ok(real) = site.canonicalize() else {
                        continue;
                    };
                    if real.is_dir() && !seen.contains(&real) {
                        seen.push(real);
                        out.push((site, why.clone()));
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

/// Opens cuBLASLt and cuBLAS from the first place of [`search_plan`] that holds a pair that
/// opens. The first pair found is kept for the process's life and returned by every later call.
pub fn load_blas(driver_version: i32) -> Result<BlasLibraries, CudaError> {
    if let Some(libs) = LOADED.get() {
        return Ok(libs.clone());
    }
    let libs = find_blas(
        driver_version,
        &|name| std::env::var_os(name),
        &Roots::system(),
    )?;
    Ok(LOADED.get_or_init(|| libs).clone())
}

/// The search behind [`load_blas`], with its environment and roots given: the first pair that
/// opens, or [`CudaError::CublasNotFound`] naming every place searched and why each failed.
pub fn find_blas(
    driver_version: i32,
    var: &dyn Fn(&str) -> Option<OsString>,
    roots: &Roots,
) -> Result<BlasLibraries, CudaError> {
    let majors = majors_for_driver(driver_version);
    let mut failed: Vec<String> = Vec::new();
    for place in search_plan(var, roots) {
        match place {
            Place::ByName => match by_name(majors, roots) {
                Ok(libs) => return Ok(libs),
                Err(why) => failed.push(format!(
                    "by name (the loader's cache and default folders): {why}"
                )),
            },
            Place::Folder(folder) => match in_folder(&folder, majors) {
                Ok(libs) => return Ok(libs),
                Err(why) => failed.push(format!(
                    "{} ({}): {why}",
                    roots.shown(&folder.path),
                    folder.why
                )),
            },
        }
    }
    Err(CudaError::CublasNotFound {
        searched: failed.join("; "),
        driver_version,
    })
}

/// What a folder holds of one file.
enum Presence {
    File,
    Missing,
    BrokenLink,
}

fn presence(path: &Path) -> Presence {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Presence::File,
        Ok(_) => Presence::Missing,
        Err(_) if std::fs::symlink_metadata(path).is_ok() => Presence::BrokenLink,
        Err(_) => Presence::Missing,
    }
}

/// `none of libcublas{,Lt}.so.{13,12}` for these majors.
fn none_of(majors: &[u32]) -> String {
    let list: Vec<String> = majors.iter().map(u32::to_string).collect();
    if list.len() == 1 {
        format!("none of libcublas{{,Lt}}.so.{}", list[0])
    } else {
        format!("none of libcublas{{,Lt}}.so.{{{}}}", list.join(","))
    }
}

/// Opens the pair of the first major this folder holds both files of, or says why not: no such
/// folder, none of the files, one file without the other, or the loader's refusal.
fn in_folder(folder: &Folder, majors: &[u32]) -> Result<BlasLibraries, String> {
    if !folder.path.is_dir() {
        return Err("no such folder".to_string());
    }
    let mut notes: Vec<String> = Vec::new();
    for &major in majors {
        let lt_name = format!("libcublasLt.so.{major}");
        let blas_name = format!("libcublas.so.{major}");
        let lt = folder.path.join(&lt_name);
        let blas = folder.path.join(&blas_name);
        match (presence(&lt), presence(&blas)) {
            (Presence::File, Presence::File) => {
                match open_pair(&lt, &blas, major, folder.origin, &folder.why) {
                    Ok(libs) => return Ok(libs),
                    // The loader's message names the file: keep only its name.
                    Err(e) => notes.push(e.replace(&format!("{}/", folder.path.display()), "")),
                }
            }
            (Presence::Missing, Presence::Missing) => {}
            (a, b) => {
                let state = |name: &str, p: Presence| match p {
                    Presence::File => format!("{name} present"),
                    Presence::Missing => format!("{name} missing"),
                    Presence::BrokenLink => format!("{name} a broken link"),
                };
                notes.push(format!("{}, {}", state(&lt_name, a), state(&blas_name, b)));
            }
        }
    }
    if notes.is_empty() {
        Err(none_of(majors))
    } else {
        Err(notes.join(", "))
    }
}

/// Asks the dynamic loader for the pair by name, each major in turn.
fn by_name(majors: &[u32], roots: &Roots) -> Result<BlasLibraries, String> {
    let mut notes: Vec<String> = Vec::new();
    let mut not_found: Vec<String> = Vec::new();
    for &major in majors {
        match open_by_soname(major) {
            Ok(libs) => return Ok(libs),
            Err(SonameError::NoLt) => not_found.push(format!("libcublasLt.so.{major}")),
            Err(SonameError::Lt(e)) => notes.push(e),
            Err(SonameError::Blas { lt, error }) => notes.push(format!(
                "libcublasLt.so.{major} found at {}, but {error}",
                roots.shown(&lt)
            )),
        }
    }
    if !not_found.is_empty() {
        notes.insert(0, format!("{} not found", not_found.join(" and ")));
    }
    Err(notes.join(", "))
}

/// Why a lookup by name failed.
enum SonameError {
    /// The loader has no cuBLASLt of that name.
    NoLt,
    /// It has one and refused it.
    Lt(String),
    /// cuBLASLt opened from `lt`; cuBLAS did not.
    Blas { lt: PathBuf, error: String },
}

fn open_by_soname(major: u32) -> Result<BlasLibraries, SonameError> {
    let lt_name = format!("libcublasLt.so.{major}");
    // SAFETY: opening cuBLASLt runs its initialisers, which have no preconditions.
    let lt = unsafe { Library::new(&lt_name) }.map_err(|e| {
        let e = load_error(&e);
        if e.contains("cannot open shared object file") {
            SonameError::NoLt
        } else {
            SonameError::Lt(e)
        }
    })?;
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
    let blas = unsafe { Library::new(&target) }.map_err(|e| SonameError::Blas {
        lt: lt_path.clone(),
        error: load_error(&e),
    })?;
    let blas_path = maps::loaded_path(&blas_name).unwrap_or(target);
    let folder = lt_path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(BlasLibraries {
        lt: keep(lt),
        blas: keep(blas),
        lt_path,
        blas_path,
        major,
        origin: LOADER_PATH,
        folder,
        why: "found by name by the dynamic loader (its cache or a default folder)".to_string(),
    })
}

fn open_pair(
    lt_path: &Path,
    blas_path: &Path,
    major: u32,
    origin: &'static str,
    why: &str,
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
        folder: lt_path.parent().map(Path::to_path_buf).unwrap_or_default(),
        why: why.to_string(),
    })
}

/// The loader on fake library trees (the wheels' layouts, a toolkit root, `LD_LIBRARY_PATH`, a
/// venv behind a linked `python3`). The file lives with the crate's tests but is compiled here,
/// because the loader is private to the crate; run it with
/// `cargo test --release --locked -p lab-cuda --lib loader`.
#[cfg(test)]
#[path = "../tests/loader/fake_trees.rs"]
mod fake_trees;

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(base: &Path) -> Roots {
        Roots {
            cuda: base.join("usr/local/cuda"),
            python_prefixes: vec![base.join("usr/local"), base.join("usr")],
            home: None,
            by_name: false,
        }
    }

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
            "LD_LIBRARY_PATH" => Some(OsString::from("/opt/a::/opt/$LIB:/opt/b:/opt/a")),
            _ => None,
        };
        let roots = Roots {
            by_name: true,
            ..roots(tmp.path())
        };
        let plan = search_plan(&var, &roots);
        let folder = |i: usize| match &plan[i] {
            Place::Folder(f) => f.clone(),
            Place::ByName => panic!("{i} is the lookup by name"),
        };
        // LD_LIBRARY_PATH's folders, then the loader by name, then the rest.
        assert_eq!(folder(0).path, Path::new("/opt/a"));
        assert_eq!(folder(0).origin, LOADER_PATH);
        assert_eq!(folder(0).why, "LD_LIBRARY_PATH entry 1, searched first");
        assert_eq!(folder(1).path, Path::new("/opt/b"));
        assert_eq!(folder(1).why, "LD_LIBRARY_PATH entry 4, searched first");
        assert_eq!(plan[2], Place::ByName);
        assert_eq!(folder(3).path, Path::new("/opt/cuda-12.8/lib64"));
        assert_eq!(folder(3).origin, "CUDA_PATH");
        let paths: Vec<PathBuf> = plan
            .iter()
            .filter_map(|p| match p {
                Place::Folder(f) => Some(f.path.clone()),
                Place::ByName => None,
            })
            .collect();
        let at = |p: PathBuf| paths.iter().position(|x| *x == p).unwrap();
        let local = at(roots.cuda.join("lib64"));
        let cu13 = at(site.join("nvidia/cu13/lib"));
        let cublas = at(site.join("nvidia/cublas/lib"));
        assert!(at(PathBuf::from("/opt/cuda-12.8/targets/sbsa-linux/lib")) < local);
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
        let sites = site_packages(&var, &roots(tmp.path()));
        assert!(sites.iter().any(|(s, _)| *s == site), "{sites:?}");
    }
}
