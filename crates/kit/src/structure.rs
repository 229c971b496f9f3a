//! The layout of a zip archive, read by this module itself rather than taken on trust from the
//! zip library, which reads each member through the central directory and never compares it
//! with the member's own (local) header.
//!
//! A zip names each member twice: in its local header, just before the data, and in the central
//! directory at the end. Tools that extract by streaming read the local headers; this tool and
//! most others read the central directory. An archive whose two names differ (the central
//! directory says `README.md`, the local header `../../../tmp/EVL.md`) looks harmless here and
//! writes outside the folder there. So every local header is compared with its central entry
//! (name, method, flags, CRC and sizes), and the file must be exactly the entries one after the
//! other, then the central directory, then its end record: no byte before, between or after
//! them, where another tool could find other members.

use std::io::{Read, Seek, SeekFrom};

/// The most entries a kit may have (a real one has about ten).
pub const MAX_ENTRIES: u64 = 10_000;
/// The largest central directory read.
pub const CENTRAL_LIMIT: u64 = 16 << 20;

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const END_SIG: u32 = 0x0605_4b50;
const END64_SIG: u32 = 0x0606_4b50;
const LOCATOR64_SIG: u32 = 0x0706_4b50;
const DESCRIPTOR_SIG: u32 = 0x0807_4b50;
/// Flag bit 3: CRC and sizes follow the data in a descriptor.
const FLAG_DESCRIPTOR: u16 = 1 << 3;

/// One member as the central directory describes it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The name's bytes.
    pub name: Vec<u8>,
    /// Where its local header starts.
    pub local_offset: u64,
    compressed: u64,
    uncompressed: u64,
    crc: u32,
    method: u16,
    flags: u16,
    zip64: bool,
}

impl Entry {
    fn shown(&self) -> String {
        lab_io::text::printable(&String::from_utf8_lossy(&self.name)).into_owned()
    }
}

/// The archive's layout and everything wrong with it.
#[derive(Debug, Default)]
pub struct Layout {
    /// The central directory's entries, in its order.
    pub entries: Vec<Entry>,
    /// Each problem in one sentence.
    pub problems: Vec<String>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn read_at(file: &mut (impl Read + Seek), at: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0; len];
    file.seek(SeekFrom::Start(at))
        .and_then(|_| file.read_exact(&mut buf))
        .map_err(|e| format!("cannot read {len} bytes at offset {at}: {e}"))?;
    Ok(buf)
}

/// The zip64 extended information of an entry (header id 1): the fields whose 32-bit value is
/// all ones, in the order uncompressed size, compressed size, local header offset.
fn zip64_fields(extra: &[u8], wanted: [bool; 3]) -> Option<[Option<u64>; 3]> {
    let mut at = 0;
    while at + 4 <= extra.len() {
        let id = u16_at(extra, at);
        let size = usize::from(u16_at(extra, at + 2));
        let data = extra.get(at + 4..at + 4 + size)?;
        if id == 1 {
            let mut out = [None; 3];
            let mut pos = 0;
            for (i, want) in wanted.iter().enumerate() {
                if *want {
                    out[i] = Some(u64_at(data.get(pos..pos + 8)?, 0));
                    pos += 8;
                }
            }
            return Some(out);
        }
        at += 4 + size;
    }
    None
}

/// Where the end record is, and what it says.
struct End {
    entries: u64,
    central_size: u64,
    central_offset: u64,
    /// Where the central directory must end: the zip64 end record, or the end record.
    central_end: u64,
}

fn find_end(
    file: &mut (impl Read + Seek),
    len: u64,
    problems: &mut Vec<String>,
) -> Result<End, String> {
    let tail_len = len.min(22 + 65_535);
    let tail = read_at(file, len - tail_len, tail_len as usize)?;
    let base = len - tail_len;
    let mut at = tail
        .len()
        .checked_sub(22)
        .ok_or("too short to be a zip archive")?;
    let found = loop {
        if u32_at(&tail, at) == END_SIG {
            let comment = usize::from(u16_at(&tail, at + 20));
            if at + 22 + comment <= tail.len() {
                break at;
            }
        }
        at = at
            .checked_sub(1)
            .ok_or("no end of central directory record")?;
    };
    let e = &tail[found..];
    let end_of_record = base + found as u64 + 22 + u64::from(u16_at(e, 20));
    if end_of_record < len {
        problems.push(format!(
            "{} bytes follow the end of the archive (after its end record and comment)",
            len - end_of_record
        ));
    }
    if u16_at(e, 4) != 0 || u16_at(e, 6) != 0 {
        problems.push("it is one part of a multi-part archive".into());
    }
    let offset = base + found as u64;
    let mut end = End {
        entries: u64::from(u16_at(e, 10)),
        central_size: u64::from(u32_at(e, 12)),
        central_offset: u64::from(u32_at(e, 16)),
        central_end: offset,
    };
    if u16_at(e, 8) != u16_at(e, 10) {
        problems.push("its end record counts the entries twice, differently".into());
    }
    // A zip64 locator sits just before the end record.
    if offset >= 20 {
        let locator = read_at(file, offset - 20, 20)?;
        if u32_at(&locator, 0) == LOCATOR64_SIG {
            let record_at = u64_at(&locator, 8);
            let record = read_at(file, record_at, 56)?;
            if u32_at(&record, 0) != END64_SIG {
                return Err("its zip64 locator points at no zip64 end record".into());
            }
            let record_end = record_at
                .saturating_add(12)
                .saturating_add(u64_at(&record, 4));
            if record_end != offset - 20 {
                problems.push(format!(
                    "data lies between the zip64 end record (ending at {record_end}) and its \
                     locator (at {})",
                    offset - 20
                ));
            }
            end.entries = u64_at(&record, 32);
            end.central_size = u64_at(&record, 40);
            end.central_offset = u64_at(&record, 48);
            end.central_end = record_at;
        }
    }
    Ok(end)
}

/// Reads the central directory and checks every local header against it, and that the entries,
/// the central directory and the end record cover the file exactly. `Err` when the file is not
/// a zip archive this can read at all.
pub fn layout(file: &mut (impl Read + Seek), len: u64) -> Result<Layout, String> {
    let mut out = Layout::default();
    let end = find_end(file, len, &mut out.problems)?;
    if end.entries > MAX_ENTRIES {
        return Err(format!(
            "it has {} entries; a kit has at most {MAX_ENTRIES}",
            end.entries
        ));
    }
    if end.central_size > CENTRAL_LIMIT {
        return Err(format!(
            "its central directory is {} bytes; at most {} are read",
            end.central_size,
            lab_io::bytes::exact(CENTRAL_LIMIT)
        ));
    }
    let central_stop = end.central_offset.saturating_add(end.central_size);
    if central_stop > end.central_end {
        return Err("its central directory runs past its end record".into());
    }
    if central_stop < end.central_end {
        out.problems.push(format!(
            "{} bytes lie between the central directory and its end record",
            end.central_end - central_stop
        ));
    }
    let cd = read_at(file, end.central_offset, end.central_size as usize)?;
    let mut at = 0usize;
    while at < cd.len() {
        if at + 46 > cd.len() || u32_at(&cd, at) != CENTRAL_SIG {
            out.problems.push(format!(
                "the central directory holds {} bytes that are not an entry",
                cd.len() - at
            ));
            break;
        }
        let h = &cd[at..];
        let (n, m, k) = (
            usize::from(u16_at(h, 28)),
            usize::from(u16_at(h, 30)),
            usize::from(u16_at(h, 32)),
        );
        if at + 46 + n + m + k > cd.len() {
            return Err("a central directory entry runs past the directory".into());
        }
        let name = h[46..46 + n].to_vec();
        let extra = &h[46 + n..46 + n + m];
        let (mut uncompressed, mut compressed, mut local_offset) = (
            u64::from(u32_at(h, 24)),
            u64::from(u32_at(h, 20)),
            u64::from(u32_at(h, 42)),
        );
        let wanted = [
            uncompressed == 0xFFFF_FFFF,
            compressed == 0xFFFF_FFFF,
            local_offset == 0xFFFF_FFFF,
        ];
        let zip64 = wanted.iter().any(|w| *w);
        if zip64 {
            let fields = zip64_fields(extra, wanted)
                .ok_or("an entry lacks the zip64 sizes its central record announces")?;
            uncompressed = fields[0].unwrap_or(uncompressed);
            compressed = fields[1].unwrap_or(compressed);
            local_offset = fields[2].unwrap_or(local_offset);
        }
        out.entries.push(Entry {
            name,
            local_offset,
            compressed,
            uncompressed,
            crc: u32_at(h, 16),
            method: u16_at(h, 10),
            flags: u16_at(h, 8),
            zip64,
        });
        at += 46 + n + m + k;
    }
    if out.entries.len() as u64 != end.entries {
        out.problems.push(format!(
            "the end record counts {} entries, the central directory holds {}",
            end.entries,
            out.entries.len()
        ));
    }

    // Each local header, and where its entry ends.
    let mut spans: Vec<(u64, u64, String)> = Vec::with_capacity(out.entries.len());
    for entry in &out.entries {
        let shown = entry.shown();
        if entry.local_offset.saturating_add(30) > end.central_offset {
            out.problems.push(format!(
                "the local header of {shown} would lie past the entries (offset {})",
                entry.local_offset
            ));
            continue;
        }
        let head = read_at(file, entry.local_offset, 30)?;
        if u32_at(&head, 0) != LOCAL_SIG {
            out.problems.push(format!(
                "no local header at offset {} where the central directory puts {shown}",
                entry.local_offset
            ));
            continue;
        }
        let (n, m) = (
            usize::from(u16_at(&head, 26)),
            usize::from(u16_at(&head, 28)),
        );
        let rest = read_at(file, entry.local_offset + 30, n + m)?;
        let local_name = &rest[..n];
        let local_extra = &rest[n..];
        if local_name != entry.name.as_slice() {
            out.problems.push(format!(
                "the local header of {shown} names it {}: a tool that extracts by local headers \
                 would write another file",
                lab_io::text::printable(&String::from_utf8_lossy(local_name))
            ));
        }
        let flags = u16_at(&head, 6);
        if u16_at(&head, 8) != entry.method || flags & 0x0809 != entry.flags & 0x0809 {
            out.problems.push(format!(
                "the local header of {shown} differs from its central entry (compression method \
                 or flags)"
            ));
        }
        if flags & FLAG_DESCRIPTOR == 0 {
            let (mut lc, mut lu) = (u64::from(u32_at(&head, 18)), u64::from(u32_at(&head, 22)));
            if (lc == 0xFFFF_FFFF || lu == 0xFFFF_FFFF)
                && let Some(f) =
                    zip64_fields(local_extra, [lu == 0xFFFF_FFFF, lc == 0xFFFF_FFFF, false])
            {
                lu = f[0].unwrap_or(lu);
                lc = f[1].unwrap_or(lc);
            }
            if u32_at(&head, 14) != entry.crc || lc != entry.compressed || lu != entry.uncompressed
            {
                out.problems.push(format!(
                    "the local header of {shown} gives another CRC or size than its central entry"
                ));
            }
        }
        let data_end = (entry.local_offset + 30 + (n + m) as u64).saturating_add(entry.compressed);
        let mut stop = data_end;
        if entry.flags & FLAG_DESCRIPTOR != 0 {
            let wide = entry.zip64 || local_extra_has_zip64(local_extra);
            let words = if wide { 4 + 8 + 8 } else { 4 + 4 + 4 };
            if data_end.saturating_add(4) <= end.central_offset {
                let first = read_at(file, data_end, 4)?;
                let signed = u32_at(&first, 0) == DESCRIPTOR_SIG;
                stop = data_end + words + if signed { 4 } else { 0 };
            } else {
                stop = data_end + words;
            }
        }
        spans.push((entry.local_offset, stop, shown));
    }
    spans.sort();
    let mut pos = 0u64;
    let mut before = "the first entry".to_string();
    for (start, stop, name) in &spans {
        if *start > pos {
            out.problems.push(format!(
                "{} bytes of data lie before {} that no entry accounts for",
                start - pos,
                if pos == 0 {
                    "the first entry".to_string()
                } else {
                    name.clone()
                }
            ));
        } else if *start < pos {
            out.problems.push(format!("{name} overlaps {before}"));
        }
        pos = pos.max(*stop);
        before.clone_from(name);
    }
    if end.central_offset > pos {
        out.problems.push(format!(
            "{} bytes of data lie between the last entry and the central directory",
            end.central_offset - pos
        ));
    } else if end.central_offset < pos {
        out.problems
            .push("the central directory overlaps the last entry".to_string());
    }
    Ok(out)
}

fn local_extra_has_zip64(extra: &[u8]) -> bool {
    let mut at = 0;
    while at + 4 <= extra.len() {
        if u16_at(extra, at) == 1 {
            return true;
        }
        at += 4 + usize::from(u16_at(extra, at + 2));
    }
    false
}
