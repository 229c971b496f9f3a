//! Executables shipped in the kit: which machine each one runs on (read from its ELF header),
//! and whether it still carries paths of the machine that built it.
//!
//! A binary built with a plain `cargo build` embeds the builder's absolute paths (the cargo
//! registry under the builder's home, the build folder) in its panic locations. Shipping those
//! leaks who built it and where; `scripts/release.sh` remaps them with `--remap-path-prefix`, and
//! the kit refuses a binary that still has them.

use crate::error::KitError;

/// One executable to ship, under `bin/<target>/iteragpu`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// The Rust target triple it runs on, e.g. `x86_64-unknown-linux-gnu`.
    pub target: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl Binary {
    /// Checks `bytes` (named `name` in messages) and works out its target: a 64-bit
    /// little-endian Linux ELF executable for x86_64 or aarch64, without builder paths.
    pub fn new(name: &str, bytes: Vec<u8>) -> Result<Binary, KitError> {
        let target = target_of(&bytes).map_err(|why| KitError::NotABinary {
            name: name.to_string(),
            why,
        })?;
        if let Some(path) = builder_paths(&bytes).into_iter().next() {
            return Err(KitError::BuilderPath {
                name: name.to_string(),
                path,
            });
        }
        Ok(Binary { target, bytes })
    }

    /// Where it goes inside the kit's top folder.
    pub fn path(&self) -> String {
        format!("bin/{}/iteragpu", self.target)
    }
}

const PT_INTERP: u32 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)).ok()
}

/// The target triple of a Linux ELF executable: the architecture from `e_machine`, the C
/// library from the program interpreter (`ld-musl-*` is musl, another one glibc; a binary with
/// none is static, as Rust's musl builds are). The reason it is not one, otherwise.
pub fn target_of(bytes: &[u8]) -> Result<String, String> {
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err("it is not an ELF executable (no \\x7fELF header)".to_string());
    }
    if bytes.get(4..6) != Some(&[2, 1]) {
        return Err("it is not a 64-bit little-endian ELF file".to_string());
    }
    let arch = match u16_at(bytes, 18) {
        Some(EM_X86_64) => "x86_64",
        Some(EM_AARCH64) => "aarch64",
        Some(other) => {
            return Err(format!(
                "its machine is ELF e_machine {other}; the kit ships x86_64 (62) and aarch64 (183)"
            ));
        }
        None => return Err("its ELF header is cut short".to_string()),
    };
    let truncated = || "its ELF program headers are cut short".to_string();
    let phoff = u64_at(bytes, 32).ok_or_else(truncated)?;
    let phentsize = usize::from(u16_at(bytes, 54).ok_or_else(truncated)?);
    let phnum = usize::from(u16_at(bytes, 56).ok_or_else(truncated)?);
    let mut interpreter = None;
    for i in 0..phnum {
        let at = phentsize
            .checked_mul(i)
            .and_then(|o| o.checked_add(phoff))
            .ok_or_else(truncated)?;
        if u32_at(bytes, at).ok_or_else(truncated)? != PT_INTERP {
            continue;
        }
        let offset = u64_at(bytes, at + 8).ok_or_else(truncated)?;
        let size = u64_at(bytes, at + 32).ok_or_else(truncated)?;
        let end = offset.checked_add(size).ok_or_else(truncated)?;
        let text = bytes.get(offset..end).ok_or_else(truncated)?;
        interpreter = Some(String::from_utf8_lossy(text).into_owned());
    }
    let libc = match interpreter {
        Some(interp) if interp.contains("ld-musl") => "musl",
        Some(_) => "gnu",
        None => "musl",
    };
    Ok(format!("{arch}-unknown-linux-{libc}"))
}

/// Pieces of paths that only a build machine has: the cargo and rustup homes, the registry's
/// unpacked sources, a build folder's build-script outputs. Joined at run time, so that this
/// binary does not carry them as literals and find itself guilty.
fn markers() -> Vec<String> {
    [
        &["", ".cargo", ""][..],
        &["", ".rustup", ""],
        &["", "registry", "src", "index.crates.io-"],
        &["", "target", "release", "build", ""],
        &["", "target", "debug", "build", ""],
    ]
    .iter()
    .map(|parts| parts.join("/"))
    .collect()
}

fn is_path_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'`' | b'<' | b'>')
}

/// Every distinct absolute builder path found in `bytes` (see `markers`), in order of first
/// appearance: the run of path characters around each marker, starting at a `/`.
pub fn builder_paths(bytes: &[u8]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for marker in markers() {
        let marker = marker.as_bytes();
        let mut from = 0;
        while let Some(i) = find(&bytes[from..], marker).map(|i| i + from) {
            from = i + marker.len();
            let mut start = i;
            while start > 0 && is_path_byte(bytes[start - 1]) {
                start -= 1;
            }
            // Only an absolute path that reaches the marker through at least one folder.
            let Some(slash) = bytes[start..i].iter().position(|&b| b == b'/') else {
                continue;
            };
            let start = start + slash;
            let mut end = from;
            while end < bytes.len() && is_path_byte(bytes[end]) {
                end += 1;
            }
            let path = String::from_utf8_lossy(&bytes[start..end]).into_owned();
            if !found.contains(&path) {
                found.push(path);
            }
        }
    }
    found
}

/// The glibc the kit's README promises its binaries start on: 2.28 (Debian 10, Ubuntu 20.04,
/// RHEL 8), the version scripts/release.sh links against.
pub const KIT_GLIBC: GlibcVersion = GlibcVersion([2, 28, 0]);

/// A glibc version, as its symbol versions spell it: `GLIBC_2.2.5`, `GLIBC_2.35`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion(pub [u32; 3]);

impl GlibcVersion {
    /// `2.35` from `GLIBC_2.35`; None for `GLIBC_PRIVATE` and other names.
    pub fn from_symbol_version(name: &str) -> Option<GlibcVersion> {
        let digits = name.strip_prefix("GLIBC_")?;
        let mut parts = [0u32; 3];
        let mut count = 0;
        for part in digits.split('.') {
            if count == 3 || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            parts[count] = part.parse().ok()?;
            count += 1;
        }
        (count >= 2).then_some(GlibcVersion(parts))
    }
}

impl std::fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [major, minor, patch] = self.0;
        if patch == 0 {
            write!(f, "{major}.{minor}")
        } else {
            write!(f, "{major}.{minor}.{patch}")
        }
    }
}

const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;

/// The newest glibc a 64-bit little-endian ELF file asks for: the highest `GLIBC_x.y[.z]` among
/// the version needs of its `.gnu.version_r` section (what `objdump -T` shows as `(GLIBC_2.35)`
/// beside the symbols it imports). The loader refuses to start it on an older glibc. None for a
/// file with no glibc version needs (a static or musl build); the reason when the section is
/// malformed.
pub fn glibc_needed(bytes: &[u8]) -> Result<Option<GlibcVersion>, String> {
    let cut = |what: &str| format!("its {what} is cut short or points outside the file");
    let shoff = u64_at(bytes, 40).ok_or_else(|| cut("ELF header"))?;
    let shentsize = usize::from(u16_at(bytes, 58).ok_or_else(|| cut("ELF header"))?);
    let shnum = usize::from(u16_at(bytes, 60).ok_or_else(|| cut("ELF header"))?);
    if shnum > 0 && shentsize < 64 {
        return Err(format!("its section headers are {shentsize} bytes, not 64"));
    }
    let section = |i: usize| -> Result<(u32, usize, usize, u32, u32), String> {
        let at = i
            .checked_mul(shentsize)
            .and_then(|o| o.checked_add(shoff))
            .ok_or_else(|| cut("section table"))?;
        let kind = u32_at(bytes, at + 4).ok_or_else(|| cut("section table"))?;
        let offset = u64_at(bytes, at + 24).ok_or_else(|| cut("section table"))?;
        let size = u64_at(bytes, at + 32).ok_or_else(|| cut("section table"))?;
        let link = u32_at(bytes, at + 40).ok_or_else(|| cut("section table"))?;
        let info = u32_at(bytes, at + 44).ok_or_else(|| cut("section table"))?;
        Ok((kind, offset, size, link, info))
    };
    let mut newest: Option<GlibcVersion> = None;
    for i in 0..shnum {
        let (kind, offset, size, link, count) = section(i)?;
        if kind != SHT_GNU_VERNEED {
            continue;
        }
        let table = offset
            .checked_add(size)
            .and_then(|end| bytes.get(offset..end))
            .ok_or_else(|| cut(".gnu.version_r section"))?;
        let (_, str_offset, str_size, _, _) = section(link as usize)?;
        let strings = str_offset
            .checked_add(str_size)
            .and_then(|end| bytes.get(str_offset..end))
            .ok_or_else(|| cut("version string table"))?;
        let name_at = |at: u32| -> Result<&str, String> {
            let tail = strings
                .get(at as usize..)
                .ok_or_else(|| cut("version string table"))?;
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            std::str::from_utf8(&tail[..end]).map_err(|_| "a version name is not UTF-8".into())
        };
        // Verneed entries (16 bytes: version, count, file, aux, next), each with `count` Vernaux
        // entries (16 bytes: hash, flags, other, name, next), chained by relative offsets.
        let mut need = 0usize;
        for _ in 0..count {
            let aux_count = u16_at(table, need + 2).ok_or_else(|| cut(".gnu.version_r entry"))?;
            let aux_offset = u32_at(table, need + 8).ok_or_else(|| cut(".gnu.version_r entry"))?;
            let next = u32_at(table, need + 12).ok_or_else(|| cut(".gnu.version_r entry"))?;
            let mut aux = need
                .checked_add(aux_offset as usize)
                .ok_or_else(|| cut(".gnu.version_r entry"))?;
            for _ in 0..aux_count {
                let name = u32_at(table, aux + 8).ok_or_else(|| cut(".gnu.version_r entry"))?;
                if let Some(v) = GlibcVersion::from_symbol_version(name_at(name)?) {
                    newest = newest.max(Some(v));
                }
                let step = u32_at(table, aux + 12).ok_or_else(|| cut(".gnu.version_r entry"))?;
                if step == 0 {
                    break;
                }
                aux = aux
                    .checked_add(step as usize)
                    .ok_or_else(|| cut(".gnu.version_r entry"))?;
            }
            if next == 0 {
                break;
            }
            need = need
                .checked_add(next as usize)
                .ok_or_else(|| cut(".gnu.version_r entry"))?;
        }
    }
    Ok(newest)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A minimal ELF64 executable header (and one program header naming `interpreter`, if given)
/// for `machine`, as tests need one that is not a real program.
#[doc(hidden)]
pub fn test_elf(machine: u16, interpreter: Option<&str>, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 64 + 56];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[6] = 1; // version
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b[18..20].copy_from_slice(&machine.to_le_bytes());
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    let phnum: u16 = if interpreter.is_some() { 1 } else { 0 };
    b[56..58].copy_from_slice(&phnum.to_le_bytes());
    if let Some(interp) = interpreter {
        let offset = b.len() as u64;
        let mut text = interp.as_bytes().to_vec();
        text.push(0);
        b[64..68].copy_from_slice(&PT_INTERP.to_le_bytes());
        b[72..80].copy_from_slice(&offset.to_le_bytes());
        b[96..104].copy_from_slice(&(text.len() as u64).to_le_bytes());
        b.extend_from_slice(&text);
    }
    b.extend_from_slice(payload);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const GNU_X86: &str = "/lib64/ld-linux-x86-64.so.2";
    const GNU_ARM: &str = "/lib/ld-linux-aarch64.so.1";

    #[test]
    fn the_target_comes_from_the_elf_header_and_interpreter() {
        let x86 = test_elf(EM_X86_64, Some(GNU_X86), b"");
        assert_eq!(target_of(&x86).unwrap(), "x86_64-unknown-linux-gnu");
        let arm = test_elf(EM_AARCH64, Some(GNU_ARM), b"");
        assert_eq!(target_of(&arm).unwrap(), "aarch64-unknown-linux-gnu");
        let musl = test_elf(EM_X86_64, Some("/lib/ld-musl-x86_64.so.1"), b"");
        assert_eq!(target_of(&musl).unwrap(), "x86_64-unknown-linux-musl");
        let fully_static = test_elf(EM_AARCH64, None, b"");
        assert_eq!(
            target_of(&fully_static).unwrap(),
            "aarch64-unknown-linux-musl"
        );
    }

    #[test]
    fn what_is_not_a_linux_binary_says_why() {
        assert!(
            target_of(b"#!/bin/sh\n")
                .unwrap_err()
                .contains("not an ELF")
        );
        let mut riscv = test_elf(243, Some(GNU_X86), b"");
        assert!(target_of(&riscv).unwrap_err().contains("e_machine 243"));
        riscv.truncate(70);
        assert!(target_of(&riscv).is_err());
        let mut big_endian = test_elf(EM_X86_64, None, b"");
        big_endian[5] = 2;
        assert!(
            target_of(&big_endian)
                .unwrap_err()
                .contains("little-endian")
        );
        // A program header that points past the end of the file.
        let mut cut = test_elf(EM_X86_64, Some(GNU_X86), b"");
        cut.truncate(cut.len() - 4);
        assert!(target_of(&cut).unwrap_err().contains("cut short"));
    }

    #[test]
    fn builder_paths_are_found_with_their_whole_path() {
        let registry = [
            "",
            "root",
            ".cargo",
            "registry",
            "src",
            "x",
            "clap-4.6.0",
            "src",
            "a.rs",
        ]
        .join("/");
        let out_dir = [
            "", "home", "ci", "w", "target", "release", "build", "y-1", "out", "b.rs",
        ]
        .join("/");
        let payload = format!("\0panic at {registry}\0\0{out_dir}\0{registry}\0");
        assert_eq!(builder_paths(payload.as_bytes()), vec![registry, out_dir]);
        // Remapped paths, relative paths and the markers alone are not builder paths.
        let clean = b"\0crates.io/clap-4.6.0/src/a.rs\0crates/lab/src/lib.rs\0/rustc/abc/library/std/src/io.rs\0.cargo/config\0";
        assert!(builder_paths(clean).is_empty());
    }

    #[test]
    fn this_code_does_not_carry_its_own_markers() {
        // The markers are assembled at run time: none of them is a literal in this file.
        let source = include_str!("binary.rs");
        for marker in markers() {
            assert!(!source.contains(&marker), "{marker} is a literal");
        }
    }

    #[test]
    fn glibc_symbol_versions_parse_and_order() {
        let v = |s| GlibcVersion::from_symbol_version(s);
        assert_eq!(v("GLIBC_2.35"), Some(GlibcVersion([2, 35, 0])));
        assert_eq!(v("GLIBC_2.2.5"), Some(GlibcVersion([2, 2, 5])));
        assert_eq!(v("GLIBC_PRIVATE"), None);
        assert_eq!(v("GLIBC_2"), None);
        assert_eq!(v("GCC_3.0"), None);
        assert_eq!(v("GLIBC_2.x"), None);
        assert!(v("GLIBC_2.2.5") < v("GLIBC_2.28"));
        assert!(v("GLIBC_2.28") < v("GLIBC_2.35"));
        assert_eq!(v("GLIBC_2.2.5").unwrap().to_string(), "2.2.5");
        assert_eq!(KIT_GLIBC.to_string(), "2.28");
    }

    /// The test binary itself: what this reader finds is what `objdump -T` lists, when objdump
    /// is there to ask.
    #[test]
    fn glibc_needed_agrees_with_objdump_on_a_real_binary() {
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let found = glibc_needed(&bytes).unwrap();
        if cfg!(target_env = "gnu") {
            assert!(
                found.is_some_and(|v| v >= GlibcVersion([2, 2, 5])),
                "{found:?}"
            );
        }
        let Ok(out) = std::process::Command::new("objdump")
            .arg("-T")
            .arg(&exe)
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let objdump = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .filter_map(GlibcVersion::from_symbol_version)
            .max();
        assert_eq!(found, objdump);
        // The fake header of the tests has no sections, so no needs; a cut table is refused.
        assert_eq!(glibc_needed(&test_elf(EM_X86_64, None, b"")).unwrap(), None);
        let mut cut = bytes.clone();
        cut.truncate(bytes.len() / 2);
        assert!(glibc_needed(&cut).is_err());
    }

    #[test]
    fn a_binary_is_placed_by_its_target_and_refused_with_builder_paths() {
        let bin = Binary::new("a", test_elf(EM_AARCH64, Some(GNU_ARM), b"ok")).unwrap();
        assert_eq!(bin.path(), "bin/aarch64-unknown-linux-gnu/iteragpu");
        let dirty = ["", "root", ".cargo", "registry", "src", "i", "s.rs"].join("/");
        let err =
            Binary::new("b", test_elf(EM_X86_64, Some(GNU_X86), dirty.as_bytes())).unwrap_err();
        assert!(err.to_string().contains(&dirty), "{err}");
        let err = Binary::new("c", b"text".to_vec()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("c is not a binary the kit can ship"),
            "{err}"
        );
    }
}
