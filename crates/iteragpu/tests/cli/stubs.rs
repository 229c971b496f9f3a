//! Stand-ins for NVIDIA's libraries, compiled with gcc into a temporary folder, so the tests can
//! run the binary against "a driver" on a machine without a GPU: put the folder first on
//! `LD_LIBRARY_PATH` of the child process.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// A folder of stub libraries, removed when dropped.
pub struct StubDir {
    dir: TempDir,
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../lab-cuda/tests/stubs")
        .join(name)
}

impl StubDir {
    /// An empty folder (no library at all).
    pub fn new() -> StubDir {
        StubDir {
            dir: tempfile::tempdir().expect("a temporary folder"),
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Compiles `source` into `sub/soname` (sub may be "") with the given `-D` definitions.
    pub fn compile(&self, source_name: &str, sub: &str, soname: &str, defines: &[&str]) -> &Self {
        let folder = self.dir.path().join(sub);
        std::fs::create_dir_all(&folder).expect("stub folder");
        let mut cmd = Command::new("gcc");
        cmd.args(["-shared", "-fPIC", "-O0", "-w"])
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(folder.join(soname))
            .arg(source(source_name))
            .arg("-lm");
        for d in defines {
            cmd.arg(format!("-D{d}"));
        }
        let out = cmd
            .output()
            .expect("gcc must be installed to build the stub libraries");
        assert!(
            out.status.success(),
            "gcc failed on {source_name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self
    }

    /// Adds a stub `libcuda.so.1`.
    pub fn driver(&self, defines: &[&str]) -> &Self {
        self.compile("libcuda.c", "", "libcuda.so.1", defines)
    }

    /// Adds a stub `libnvidia-ml.so.1`.
    pub fn nvml(&self) -> &Self {
        self.nvml_with(&[])
    }

    /// Adds a stub `libnvidia-ml.so.1` built with `defines` (`MIG`: the GPU is a MIG instance).
    pub fn nvml_with(&self, defines: &[&str]) -> &Self {
        self.compile("libnvidia-ml.c", "", "libnvidia-ml.so.1", defines)
    }

    /// Adds a cuBLASLt/cuBLAS 12 pair in `sub`.
    pub fn cublas(&self, sub: &str) -> &Self {
        self.cublas_with(sub, &[], &[])
    }

    /// Adds a cuBLASLt/cuBLAS 12 pair in `sub`, cuBLAS built with `blas` and cuBLASLt with `lt`
    /// (besides `LT`): `RECORD`, `COMPUTE`, `DESTROY_FAILS`, ... (see the stub's source).
    pub fn cublas_with(&self, sub: &str, blas: &[&str], lt: &[&str]) -> &Self {
        let mut lt_defines = vec!["LT"];
        lt_defines.extend_from_slice(lt);
        self.compile("libcublas.c", sub, "libcublasLt.so.12", &lt_defines)
            .compile("libcublas.c", sub, "libcublas.so.12", blas)
    }
}

/// The binary, with the stub folder as the loader path and no variable that could lead the
/// resolver to a real installation.
pub fn iteragpu(libs: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("iteragpu").expect("the iteragpu binary");
    cmd.env("LD_LIBRARY_PATH", libs)
        .env("HOME", libs)
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .env_remove("CUDA_VISIBLE_DEVICES");
    cmd
}

/// True when this machine has a real NVIDIA driver registered with the loader, in which case
/// "no library" cannot be simulated with LD_LIBRARY_PATH alone.
pub fn system_has_driver() -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"))
        .unwrap_or(false)
}
