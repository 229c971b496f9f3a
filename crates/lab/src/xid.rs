//! XID errors: the NVIDIA driver's own record of a GPU fault (`NVRM: Xid (PCI:0000:3b:00): 79,
//! ...` in the kernel log), which renters read with `dmesg` and DCGM reports as health. NVML
//! gives them only to a process that registered for events before they happened, so the kernel
//! log since boot is the one place a check started later can read them; it is often closed to
//! a container (`dmesg_restrict`), which is then said, never read as "no errors".

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

use serde::{Deserialize, Serialize};

/// How many XIDs of one code the kernel log holds for one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidCount {
    /// The XID (`79`: fallen off the bus).
    pub code: u32,
    /// How many times since the kernel log's oldest record.
    pub count: u64,
}

/// XIDs that mean the GPU itself (its memory, its bus, its NVLink or its firmware) is faulty,
/// from NVIDIA's XID catalogue; the others (13, 31, 43, 45, ...) are mostly raised by a
/// program's own faults and only warn.
pub const HARDWARE: [u32; 17] = [
    48, 54, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140, 143, 154,
];

/// Whether `code` is in [`HARDWARE`].
pub fn is_hardware(code: u32) -> bool {
    HARDWARE.contains(&code)
}

/// The GPU and the XID of one kernel-log line, or `None` for any other line. The GPU is its
/// PCI address as [`bus_key`] writes it.
pub fn parse_line(line: &str) -> Option<(String, u32)> {
    let rest = &line[line.find("NVRM: Xid (")? + "NVRM: Xid (".len()..];
    let (address, rest) = rest.split_once(')')?;
    let address = bus_key(address.strip_prefix("PCI:").unwrap_or(address))?;
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || digits.len() > 9 || !rest[digits.len()..].starts_with(',') {
        return None;
    }
    Some((address, digits.parse().ok()?))
}

/// A PCI address as `dddd:bb:dd` (domain, bus, device; lower case), from the kernel log's
/// `0000:3b:00` or NVML's `00000000:3B:00.0`, so the two can be matched.
pub fn bus_key(address: &str) -> Option<String> {
    let address = address.trim();
    let address = address.split_once('.').map_or(address, |(a, _)| a);
    let mut parts = address.split(':');
    let (domain, bus, device) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let hex = |s: &str, max: usize| {
        (!s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let domain = hex(domain, 8)?;
    let bus = hex(bus, 2)?;
    let device = hex(device, 2)?;
    (domain <= 0xffff).then(|| format!("{domain:04x}:{bus:02x}:{device:02x}"))
}

/// XID counts per GPU (by [`bus_key`]) in `lines`.
pub fn count<'a>(lines: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Vec<XidCount>> {
    let mut by_gpu: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
    for (gpu, code) in lines.into_iter().filter_map(parse_line) {
        *by_gpu.entry(gpu).or_default().entry(code).or_default() += 1;
    }
    by_gpu
        .into_iter()
        .map(|(gpu, codes)| {
            let counts = codes
                .into_iter()
                .map(|(code, count)| XidCount { code, count })
                .collect();
            (gpu, counts)
        })
        .collect()
}

/// At most this many kernel-log records are read: the log is a ring of a few MiB, so this is
/// only a bound against a device that never says it is done.
const MAX_RECORDS: usize = 1 << 20;

/// The XIDs in the kernel log since its oldest record (`/dev/kmsg`, read without waiting for
/// new records), per GPU; an error says why the log could not be read.
pub fn read_kernel_log() -> Result<BTreeMap<String, Vec<XidCount>>, String> {
    const O_NONBLOCK: i32 = 0o4000;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open("/dev/kmsg")
        .map_err(|e| format!("the kernel log is not readable here (/dev/kmsg: {e})"))?;
    let mut lines = Vec::new();
    let mut record = vec![0u8; 8192];
    for _ in 0..MAX_RECORDS {
        match file.read(&mut record) {
            Ok(0) => break,
            // One record per read: `PRIORITY,SEQUENCE,TIME,FLAGS;MESSAGE`.
            Ok(n) => {
                let text = String::from_utf8_lossy(&record[..n]);
                if let Some((_, message)) = text.split_once(';')
                    && message.contains("NVRM: Xid")
                {
                    lines.push(message.lines().next().unwrap_or_default().to_string());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: the record was overwritten while it was read; the next one follows.
            Err(e) if e.raw_os_error() == Some(32) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("the kernel log could not be read (/dev/kmsg: {e})")),
        }
    }
    Ok(count(lines.iter().map(String::as_str)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn driver_lines_are_read_and_other_lines_are_not() {
        assert_eq!(
            parse_line(
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
            ),
            Some(("0000:3b:00".to_string(), 79))
        );
        assert_eq!(
            parse_line(
                "[  12.5] NVRM: Xid (PCI:0001:C1:00): 48, An uncorrectable double bit error"
            ),
            Some(("0001:c1:00".to_string(), 48))
        );
        assert_eq!(parse_line("NVRM: Xid (PCI:0000:3b:00): 119 ,x"), None);
        assert_eq!(parse_line("NVRM: Xid (PCI:0000:3b:00): , 79"), None);
        assert_eq!(parse_line("NVRM: Xid (PCI:zz:3b:00): 79, x"), None);
        assert_eq!(parse_line("NVRM: GPU at PCI:0000:3b:00: GPU-abc"), None);
        assert_eq!(parse_line("usb 1-1: new device"), None);
    }

    #[test]
    fn nvml_and_kernel_addresses_meet() {
        assert_eq!(bus_key("00000000:3B:00.0").as_deref(), Some("0000:3b:00"));
        assert_eq!(bus_key("0000:3b:00").as_deref(), Some("0000:3b:00"));
        assert_eq!(bus_key("00010000:3B:00.0"), None);
        assert_eq!(bus_key("3b:00"), None);
        assert_eq!(bus_key("0000:3b:00:1"), None);
    }

    #[test]
    fn counts_per_gpu_and_code() {
        let log = [
            "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
            "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
            "NVRM: Xid (PCI:0000:5e:00): 94, Contained ECC error",
            "something else",
        ];
        let c = count(log);
        assert_eq!(
            c["0000:3b:00"],
            vec![
                XidCount { code: 13, count: 2 },
                XidCount { code: 79, count: 1 }
            ]
        );
        assert_eq!(c["0000:5e:00"], vec![XidCount { code: 94, count: 1 }]);
        assert_eq!(c.len(), 2);
        assert!(is_hardware(79) && is_hardware(94) && !is_hardware(13));
    }

    #[test]
    fn reading_the_kernel_log_ends_with_an_answer() {
        // Readable or not on this machine, it ends (no waiting for new records) and says why
        // when it cannot read.
        match read_kernel_log() {
            Ok(_) => {}
            Err(why) => assert!(why.contains("/dev/kmsg"), "{why}"),
        }
    }

    proptest! {
        #[test]
        fn any_line_is_read_or_passed_over_without_panic(line in ".{0,200}") {
            let _ = parse_line(&line);
        }

        #[test]
        fn a_written_line_reads_back(domain in 0u32..=0xffff, bus in 0u32..=0xff, device in 0u32..=0x1f, code in 0u32..100_000) {
            let line = format!("NVRM: Xid (PCI:{domain:04X}:{bus:02x}:{device:02X}): {code}, pid=1, text");
            prop_assert_eq!(parse_line(&line), Some((format!("{domain:04x}:{bus:02x}:{device:02x}"), code)));
        }
    }
}
