//! SHA-256 as lower-case hex, the form `sha256sum` prints and MANIFEST.json stores.

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes`, as 64 lower-case hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8]) -> String {
    use std::fmt::Write;
    digest
        .iter()
        .fold(String::with_capacity(digest.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A `Write` sink that hashes what goes through it and counts the bytes, so a zip member can be
/// checked while it streams out of the decompressor, never held whole in memory.
#[derive(Debug, Default)]
pub struct HashingSink {
    hasher: Sha256,
    bytes: u64,
}

impl HashingSink {
    /// The digest (hex) and the byte count.
    pub fn finish(self) -> (String, u64) {
        (hex(&self.hasher.finalize()), self.bytes)
    }
}

impl std::io::Write for HashingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn known_digests() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn sink_matches_one_shot() {
        let mut sink = HashingSink::default();
        sink.write_all(b"ab").unwrap();
        sink.write_all(b"c").unwrap();
        assert_eq!(sink.finish(), (sha256_hex(b"abc"), 3));
    }
}
