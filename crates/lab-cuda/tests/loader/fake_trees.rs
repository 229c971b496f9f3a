//! The cuBLAS loader on fake library trees: which file is chosen, and an error that names every
//! folder searched with why each failed.
//!
//! Compiled into the crate's unit tests (`#[path]` from `src/loader.rs`: the loader is private to
//! the crate): `cargo test --release --locked -p lab-cuda --lib loader`.
//!
//! Every root is a temporary folder ([`Roots`]: `/usr/local/cuda`, the system Python prefixes,
//! the home folder) and every environment variable comes from the test, and the lookup by name
//! (the machine's loader cache) is off, so nothing here depends on what the machine has
//! installed. The cuBLAS pairs are the stub sources of `tests/stubs/libcublas.c`, compiled with
//! gcc into each tree under the SONAMEs of the real wheels. A test that opens a pair runs in a
//! child process, so that no stub stays loaded in the process running the other tests (a later
//! lookup by name would be given it).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

const CHILD: &str = "LAB_CUDA_LOADER_CHILD";

/// Runs `body` in a child process running only the test `test` (the calling test); in that child,
/// runs it.
fn isolated(test: &str, body: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        body();
        return;
    }
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    let name = format!("{module}::{test}");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test named {name}:\n{stdout}"
    );
}

/// Compiles the stub cuBLASLt (`-DLT`) or cuBLAS as `folder/soname`.
fn compile(folder: &Path, soname: &str, lt: bool) {
    std::fs::create_dir_all(folder).unwrap();
    let mut cmd = Command::new("gcc");
    cmd.args(["-shared", "-fPIC", "-O0", "-w"])
        .arg(format!("-Wl,-soname,{soname}"))
        .arg("-o")
        .arg(folder.join(soname))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/stubs/libcublas.c"
        ));
    if lt {
        cmd.arg("-DLT");
    }
    let out = cmd
        .output()
        .expect("gcc must be installed to build the stub libraries");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stub `libcublasLt.so.MAJOR` and `libcublas.so.MAJOR` in `folder`.
fn stub_pair(folder: &Path, major: u32) {
    compile(folder, &format!("libcublasLt.so.{major}"), true);
    compile(folder, &format!("libcublas.so.{major}"), false);
}

#[cfg(unix)]
fn link(target: impl AsRef<Path>, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// A fake machine: its roots and environment, all in one temporary folder.
struct Machine {
    _dir: tempfile::TempDir,
    /// The temporary folder, its links resolved (paths found through links are resolved too).
    root: PathBuf,
    vars: HashMap<String, OsString>,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        Machine {
            root: dir.path().canonicalize().unwrap(),
            _dir: dir,
            vars: HashMap::new(),
        }
    }

    /// A path in the machine.
    fn at(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    fn set(&mut self, name: &str, value: impl Into<OsString>) {
        self.vars.insert(name.to_string(), value.into());
    }

    fn roots(&self) -> Roots {
        Roots {
            cuda: self.at("usr/local/cuda"),
            python_prefixes: vec![self.at("usr/local"), self.at("usr")],
            home: Some(self.at("home/alice")),
            by_name: false,
        }
    }

    fn find(&self, driver_version: i32) -> Result<BlasLibraries, CudaError> {
        let var = |name: &str| self.vars.get(name).cloned();
        find_blas(driver_version, &var, &self.roots())
    }

    fn chosen(&self, driver_version: i32) -> BlasLibraries {
        self.find(driver_version)
            .unwrap_or_else(|e| panic!("nothing chosen: {e}"))
    }

    fn error(&self, driver_version: i32) -> String {
        match self.find(driver_version) {
            Ok(libs) => panic!("{libs:?} was chosen"),
            Err(e) => e.to_string(),
        }
    }
}

/// Asserts the pair of `major` was opened from `folder`.
fn assert_from(libs: &BlasLibraries, folder: &Path, major: u32) {
    assert_eq!(
        libs.lt_path,
        folder.join(format!("libcublasLt.so.{major}")),
        "{libs:?}"
    );
    assert_eq!(
        libs.blas_path,
        folder.join(format!("libcublas.so.{major}")),
        "{libs:?}"
    );
    assert_eq!(libs.folder, folder);
    assert_eq!(libs.major, major);
}

#[test]
fn the_cu13_wheel_layout_in_a_venv_is_chosen() {
    isolated("the_cu13_wheel_layout_in_a_venv_is_chosen", || {
        let mut m = Machine::new();
        let lib = m.at("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
        stub_pair(&lib, 13);
        m.set("VIRTUAL_ENV", m.at("venv"));
        let libs = m.chosen(13000);
        assert_from(&libs, &lib, 13);
        assert_eq!(libs.origin, PYTHON_ENVIRONMENT);
        assert_eq!(libs.why, "VIRTUAL_ENV");
        // A CUDA 12 driver cannot run cuBLAS 13: the folder is named with what it lacks, and
        // the hint is the CUDA 12 wheel.
        let e = m.error(12040);
        assert!(
            e.contains(&format!(
                "{} (VIRTUAL_ENV): none of libcublas{{,Lt}}.so.12",
                lib.display()
            )),
            "{e}"
        );
        assert!(e.contains("`pip install nvidia-cublas-cu12`"), "{e}");
        assert!(
            e.contains("site-packages/nvidia/cublas/lib/libcublas{,Lt}.so.12"),
            "{e}"
        );
    });
}

#[test]
fn the_cu12_wheel_layout_is_chosen_with_either_driver() {
    isolated("the_cu12_wheel_layout_is_chosen_with_either_driver", || {
        let mut m = Machine::new();
        let lib = m.at("conda/lib/python3.11/site-packages/nvidia/cublas/lib");
        stub_pair(&lib, 12);
        m.set("CONDA_PREFIX", m.at("conda"));
        for driver in [12040, 13000] {
            let libs = m.chosen(driver);
            assert_from(&libs, &lib, 12);
            assert_eq!(libs.origin, PYTHON_ENVIRONMENT);
            assert_eq!(libs.why, "CONDA_PREFIX");
        }
    });
}

#[test]
fn a_toolkit_root_comes_before_the_wheels_and_cuda_path_before_it() {
    isolated(
        "a_toolkit_root_comes_before_the_wheels_and_cuda_path_before_it",
        || {
            let mut m = Machine::new();
            stub_pair(
                &m.at("venv/lib/python3.12/site-packages/nvidia/cu13/lib"),
                13,
            );
            m.set("VIRTUAL_ENV", m.at("venv"));
            let toolkit = m.at("usr/local/cuda/targets/x86_64-linux/lib");
            stub_pair(&toolkit, 13);
            link("targets/x86_64-linux/lib", &m.at("usr/local/cuda/lib64"));
            let libs = m.chosen(13000);
            // lib64 comes first, a link to the targets folder as in the toolkit.
            assert_from(&libs, &m.at("usr/local/cuda/lib64"), 13);
            assert_eq!(libs.origin, "/usr/local/cuda");
            assert_eq!(libs.why, "the toolkit's default install");
            // CUDA_HOME, then CUDA_PATH before it, win over /usr/local/cuda.
            let home = m.at("opt/cuda-13.0/targets/sbsa-linux/lib");
            stub_pair(&home, 13);
            m.set("CUDA_HOME", m.at("opt/cuda-13.0"));
            let libs = m.chosen(13000);
            assert_from(&libs, &home, 13);
            assert_eq!(libs.origin, "CUDA_HOME");
            assert_eq!(libs.why, "CUDA_HOME names this toolkit");
            let path = m.at("opt/cuda-12.8/lib");
            stub_pair(&path, 12);
            m.set("CUDA_PATH", m.at("opt/cuda-12.8"));
            assert_eq!(m.chosen(13000).origin, "CUDA_PATH");
            assert_from(&m.chosen(13000), &path, 12);
        },
    );
}

#[test]
fn ld_library_path_wins_even_with_an_older_major() {
    isolated("ld_library_path_wins_even_with_an_older_major", || {
        let mut m = Machine::new();
        // cuBLAS 13 in the toolkit and in a venv; the folder another tool loaded its cuBLAS 12
        // from is on LD_LIBRARY_PATH, second.
        stub_pair(&m.at("usr/local/cuda/lib64"), 13);
        stub_pair(
            &m.at("venv/lib/python3.12/site-packages/nvidia/cu13/lib"),
            13,
        );
        m.set("VIRTUAL_ENV", m.at("venv"));
        let torch = m.at("torch/site-packages/nvidia/cublas/lib");
        stub_pair(&torch, 12);
        std::fs::create_dir_all(m.at("empty")).unwrap();
        m.set(
            "LD_LIBRARY_PATH",
            std::env::join_paths([m.at("empty"), torch.clone()]).unwrap(),
        );
        let libs = m.chosen(13000);
        assert_from(&libs, &torch, 12);
        assert_eq!(libs.origin, LOADER_PATH);
        assert_eq!(libs.why, "LD_LIBRARY_PATH entry 2, searched first");
    });
}

#[test]
fn a_venv_reached_through_a_linked_python3_is_found() {
    isolated("a_venv_reached_through_a_linked_python3_is_found", || {
        let mut m = Machine::new();
        // The system's interpreter, a venv whose python3 links to it (as `python -m venv`
        // makes it), and a folder on PATH whose python3 links into the venv.
        std::fs::create_dir_all(m.at("base/bin")).unwrap();
        std::fs::write(m.at("base/bin/python3.12"), "").unwrap();
        link("../../base/bin/python3.12", &m.at("venv/bin/python3"));
        link(m.at("venv/bin/python3"), &m.at("bin/python3"));
        let lib = m.at("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
        stub_pair(&lib, 13);
        m.set("PATH", m.at("bin"));
        let libs = m.chosen(13000);
        assert_from(&libs, &lib, 13);
        assert_eq!(libs.origin, PYTHON_ENVIRONMENT);
        assert_eq!(
            libs.why,
            format!(
                "python3 on PATH at {}, a link to {}",
                m.at("bin/python3").display(),
                m.at("venv/bin/python3").display()
            )
        );
    });
}

#[test]
fn every_prefix_a_python3_on_path_leads_to_is_listed() {
    let mut m = Machine::new();
    std::fs::create_dir_all(m.at("base/bin")).unwrap();
    std::fs::write(m.at("base/bin/python3.12"), "").unwrap();
    link("../../base/bin/python3.12", &m.at("venv/bin/python3"));
    link(m.at("venv/bin/python3"), &m.at("bin/python3"));
    // A folder on PATH that is itself a link to another venv's bin.
    std::fs::create_dir_all(m.at("other/bin")).unwrap();
    std::fs::write(m.at("other/bin/python3"), "").unwrap();
    link(m.at("other/bin"), &m.at("opt/bin"));
    // A loop of links ends the walk, without an error.
    link(m.at("loop/b"), &m.at("loop/a"));
    link(m.at("loop/a"), &m.at("loop/b"));
    link(m.at("loop/a"), &m.at("looping/python3"));
    m.set(
        "PATH",
        std::env::join_paths([m.at("bin"), m.at("opt/bin"), m.at("looping")]).unwrap(),
    );
    let var = |name: &str| m.vars.get(name).cloned();
    let prefixes: Vec<PathBuf> = python_prefixes(&var, &m.roots())
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for want in ["", "venv", "base", "opt", "other", "usr/local", "usr"] {
        let want = m.at(want);
        assert!(prefixes.contains(&want), "{want:?} not in {prefixes:?}");
    }
    assert_eq!(prefixes.last(), Some(&m.at("home/alice/.local")));
}

#[test]
fn nothing_found_names_every_folder_and_why_each_failed() {
    isolated(
        "nothing_found_names_every_folder_and_why_each_failed",
        || {
            let mut m = Machine::new();
            // LD_LIBRARY_PATH: a folder that does not exist, and an empty one.
            std::fs::create_dir_all(m.at("empty")).unwrap();
            m.set(
                "LD_LIBRARY_PATH",
                std::env::join_paths([m.at("gone"), m.at("empty")]).unwrap(),
            );
            // CUDA_PATH: cuBLASLt without cuBLAS.
            compile(&m.at("cuda-path/lib64"), "libcublasLt.so.13", true);
            m.set("CUDA_PATH", m.at("cuda-path"));
            // /usr/local/cuda: two files the loader refuses.
            std::fs::create_dir_all(m.at("usr/local/cuda/lib64")).unwrap();
            std::fs::write(m.at("usr/local/cuda/lib64/libcublasLt.so.13"), "").unwrap();
            std::fs::write(m.at("usr/local/cuda/lib64/libcublas.so.13"), "").unwrap();
            // A venv whose cuBLAS is a broken link; the user's site-packages without nvidia/.
            let venv_lib = m.at("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
            compile(&venv_lib, "libcublasLt.so.13", true);
            link(
                m.at("nowhere/libcublas.so.13"),
                &venv_lib.join("libcublas.so.13"),
            );
            m.set("VIRTUAL_ENV", m.at("venv"));
            std::fs::create_dir_all(m.at("home/alice/.local/lib/python3.12/site-packages"))
                .unwrap();

            let e = m.error(13000);
            println!("{e}");
            let var = |name: &str| m.vars.get(name).cloned();
            let plan = search_plan(&var, &m.roots());
            // 2 on LD_LIBRARY_PATH, 4 for each toolkit root, 2 for each site-packages (the venv's,
            // the user's).
            assert_eq!(plan.len(), 14, "{plan:?}");
            // Every folder, in the order searched, each with why it failed.
            let mut from = 0;
            for place in &plan {
                let Place::Folder(f) = place else {
                    unreachable!("the lookup by name is off")
                };
                let shown = m.roots().shown(&f.path);
                let at = e[from..]
                    .find(&format!("{shown} ({}): ", f.why))
                    .unwrap_or_else(|| panic!("{shown} missing, or out of order, in {e}"));
                from += at + shown.len();
            }
            let d = |p: &str| m.at(p).display().to_string();
            for expected in [
                "cuBLAS was not found: no folder holds libcublasLt.so.13 with libcublas.so.13 \
                 (or the .so.12 pair) that opens; searched, in order: "
                    .to_string(),
                format!(
                    "{} (LD_LIBRARY_PATH entry 1, searched first): no such folder",
                    d("gone")
                ),
                format!(
                    "{} (LD_LIBRARY_PATH entry 2, searched first): none of libcublas{{,Lt}}.so.{{13,12}}",
                    d("empty")
                ),
                format!(
                    "{} (CUDA_PATH names this toolkit): libcublasLt.so.13 present, libcublas.so.13 missing",
                    d("cuda-path/lib64")
                ),
                format!(
                    "{} (CUDA_PATH names this toolkit): no such folder",
                    d("cuda-path/lib")
                ),
                format!(
                    "{} (the toolkit's default install): libcublasLt.so.13: file too short",
                    d("usr/local/cuda/lib64")
                ),
                format!(
                    "{} (VIRTUAL_ENV): libcublasLt.so.13 present, libcublas.so.13 a broken link",
                    venv_lib.display()
                ),
                format!(
                    "{} (VIRTUAL_ENV): no such folder",
                    d("venv/lib/python3.12/site-packages/nvidia/cublas/lib")
                ),
                // The home folder is never shown by name.
                "~/.local/lib/python3.12/site-packages/nvidia/cu13/lib (the user's installs in \
                 ~/.local): no such folder"
                    .to_string(),
                "; for this CUDA 13.0 driver, `pip install nvidia-cublas` into the Python \
                 environment whose python3 is on PATH (it installs \
                 site-packages/nvidia/cu13/lib/libcublas{,Lt}.so.13), or install the CUDA \
                 toolkit's cuBLAS, or put the folder that holds both files first on \
                 LD_LIBRARY_PATH"
                    .to_string(),
            ] {
                assert!(e.contains(&expected), "{expected}\nnot in\n{e}");
            }
            assert!(!e.contains("home/alice"), "{e}");
            assert!(e.ends_with("LD_LIBRARY_PATH"), "{e}");
        },
    );
}

#[test]
fn a_site_packages_reached_under_two_names_is_listed_once() {
    // As on a merged /usr: /bin links to usr/bin and /lib to usr/lib, so the python3 in both
    // PATH folders leads to the same dist-packages.
    let mut m = Machine::new();
    std::fs::create_dir_all(m.at("usr/bin")).unwrap();
    std::fs::write(m.at("usr/bin/python3"), "").unwrap();
    std::fs::create_dir_all(m.at("usr/lib/python3/dist-packages")).unwrap();
    link("usr/bin", &m.at("bin"));
    link("usr/lib", &m.at("lib"));
    m.set(
        "PATH",
        std::env::join_paths([m.at("usr/bin"), m.at("bin")]).unwrap(),
    );
    let var = |name: &str| m.vars.get(name).cloned();
    let sites = site_packages(&var, &m.roots());
    assert_eq!(
        sites,
        [(
            m.at("usr/lib/python3/dist-packages"),
            format!("python3 on PATH at {}", m.at("usr/bin/python3").display())
        )]
    );
}
