//! Where a loaded library came from, read from `/proc/self/maps`.
//!
//! A library opened by name is found by the dynamic loader; to report which file it picked we look
//! at the process's own mappings instead of asking the loader (no extra FFI needed).

use std::path::{Path, PathBuf};

/// The path of the first mapped file whose name starts with `prefix` (e.g. `libcuda.so`).
pub fn loaded_path(prefix: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    find_in_maps(&maps, prefix)
}

/// The lookup behind [`loaded_path`], on the text of a maps file.
pub fn find_in_maps(maps: &str, prefix: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(mapped_file)
        .map(Path::new)
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .map(Path::to_path_buf)
}

/// The file of one line of a maps file: everything after the five fields before it (so a path
/// with spaces is whole), without the kernel's ` (deleted)` mark. `None` for anonymous mappings.
fn mapped_file(line: &str) -> Option<&str> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start();
        rest = &rest[rest.find(char::is_whitespace)?..];
    }
    let path = rest.trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    (!path.is_empty()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_mapped_library() {
        let maps = "7f00-7f01 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f02-7f03 r-xp 00000000 08:01 456 /opt/nvidia/lib/libcuda.so.550.54.15\n\
                    7f04-7f05 rw-p 00000000 00:00 0\n";
        assert_eq!(
            find_in_maps(maps, "libcuda.so"),
            Some(PathBuf::from("/opt/nvidia/lib/libcuda.so.550.54.15"))
        );
        assert_eq!(find_in_maps(maps, "libcublas"), None);
    }

    #[test]
    fn a_path_with_spaces_is_whole() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 77     /opt/my envs/torch/nvidia/cu13/lib/libcublasLt.so.13\n\
                    7f02-7f03 r-xp 00000000 08:01 78     /tmp/x/libcublas.so.13 (deleted)\n";
        assert_eq!(
            find_in_maps(maps, "libcublasLt.so.13"),
            Some(PathBuf::from(
                "/opt/my envs/torch/nvidia/cu13/lib/libcublasLt.so.13"
            ))
        );
        assert_eq!(
            find_in_maps(maps, "libcublas.so.13"),
            Some(PathBuf::from("/tmp/x/libcublas.so.13"))
        );
        assert_eq!(mapped_file("7f04-7f05 rw-p 00000000 00:00 0"), None);
        assert_eq!(mapped_file("7f04-7f05 rw-p 00000000 00:00 0   "), None);
    }

    #[test]
    fn sees_this_process_libc() {
        assert!(loaded_path("libc").is_some() || loaded_path("ld-").is_some());
    }
}
