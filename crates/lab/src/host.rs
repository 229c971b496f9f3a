//! What the host's memory allows: the bytes a new allocation can get (within the machine's and
//! the cgroup's limits), this process's resident memory, and buffers sized from a user's number
//! that are asked for fallibly. Every device's pre-flight and the probe's host buffers use these.

use std::path::Path;

/// Bytes a new allocation can get without swapping and without the kernel's OOM killer, where
/// the OS says: the machine's `MemAvailable`, and under a cgroup memory limit (a container, a
/// Slurm job, a systemd slice) no more than the tightest limit of this process's cgroup and its
/// ancestors less what each already uses. Without the cgroup's word a run that fits the machine
/// but not its container is killed (exit 137) instead of refused with a sentence.
pub fn available_host_bytes() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_available(&text));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_headroom(Path::new("/sys/fs/cgroup"), &text));
    match (machine, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The least headroom (limit less usage) over the cgroup named in `proc_cgroup` (the text of
/// `/proc/self/cgroup`) and its ancestors under `root`, or `None` where no limit is set. cgroup
/// v2 (`0::/path`: `memory.max`, `memory.current`) is read first, then v1's memory controller
/// (`N:memory:/path` under `root/memory`: `memory.limit_in_bytes`, `memory.usage_in_bytes`,
/// where "no limit" reads as a number near 2^63).
fn cgroup_headroom(root: &Path, proc_cgroup: &str) -> Option<u64> {
    let mut tightest: Option<u64> = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (base, limit_file, usage_file) = if controllers.is_empty() {
            (root.to_path_buf(), "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                root.join("memory"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // The process's own cgroup, then each ancestor up to the root of this namespace.
        let mut folder = base.join(path.trim_start_matches('/'));
        loop {
            let read = |name: &str| std::fs::read_to_string(folder.join(name)).ok();
            if let Some(limit) = read(limit_file).and_then(|t| t.trim().parse::<u64>().ok())
                && limit < 1 << 62
            {
                let used = read(usage_file)
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                let room = limit.saturating_sub(used);
                tightest = Some(tightest.map_or(room, |t| t.min(room)));
            }
            if folder == base || !folder.pop() || !folder.starts_with(&base) {
                break;
            }
        }
    }
    tightest
}

/// A buffer of `len` bytes, each `byte`, or `None` when the allocator cannot provide it: for
/// buffers whose size comes from a user's number, which must never abort the process.
pub fn filled_buffer(len: usize, byte: u8) -> Option<Vec<u8>> {
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len).ok()?;
    buffer.resize(len, byte);
    Some(buffer)
}

/// This process's resident memory now (`VmRSS`), where the OS says.
pub fn resident_bytes() -> Option<u64> {
    status_kib("VmRSS:")
}

/// The most memory this process has held resident so far (`VmHWM`, the high-water mark),
/// where the OS says.
pub fn peak_resident_bytes() -> Option<u64> {
    status_kib("VmHWM:")
}

fn status_kib(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_limit_bounds_the_available_memory_at_its_tightest_level() {
        let root = tempfile::tempdir().unwrap();
        let job = root.path().join("slurm/job_7/step_0");
        std::fs::create_dir_all(&job).unwrap();
        let write =
            |dir: &Path, name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        // The step itself has no limit, the job 4 GiB with 1 GiB used, the slice 16 GiB.
        write(&job, "memory.max", "max\n");
        write(job.parent().unwrap(), "memory.max", "4294967296\n");
        write(job.parent().unwrap(), "memory.current", "1073741824\n");
        write(&root.path().join("slurm"), "memory.max", "17179869184\n");
        write(&root.path().join("slurm"), "memory.current", "2147483648\n");
        let v2 = "0::/slurm/job_7/step_0\n";
        assert_eq!(cgroup_headroom(root.path(), v2), Some(3 << 30));
        // Usage above the limit (it happens briefly) leaves no room, not a wrapped figure.
        write(&job, "memory.max", "1000\n");
        write(&job, "memory.current", "5000\n");
        assert_eq!(cgroup_headroom(root.path(), v2), Some(0));
        // A container's namespace root: `0::/` reads the files at the root itself.
        let ns = tempfile::tempdir().unwrap();
        write(ns.path(), "memory.max", "2147483648\n");
        write(ns.path(), "memory.current", "0\n");
        assert_eq!(cgroup_headroom(ns.path(), "0::/\n"), Some(2 << 30));
        // No limit anywhere (the host's root cgroup has no memory.max): no bound.
        let none = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_headroom(none.path(), "0::/\n"), None);
        // cgroup v1: only the memory controller's line counts; "unlimited" is a huge number.
        let v1 = tempfile::tempdir().unwrap();
        let mem = v1.path().join("memory/docker/abc");
        std::fs::create_dir_all(&mem).unwrap();
        write(&mem, "memory.limit_in_bytes", "536870912\n");
        write(&mem, "memory.usage_in_bytes", "36870912\n");
        write(
            &v1.path().join("memory/docker"),
            "memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        let text = "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n";
        assert_eq!(cgroup_headroom(v1.path(), text), Some(500_000_000));
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(mem_available(text), Some(1_024_000));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn an_impossible_buffer_is_refused_not_aborted() {
        assert!(filled_buffer(usize::MAX, 0).is_none());
        assert_eq!(filled_buffer(3, 7).unwrap(), [7, 7, 7]);
    }

    #[test]
    fn resident_memory_is_read_and_the_peak_is_at_least_the_current() {
        let (now, peak) = (resident_bytes().unwrap(), peak_resident_bytes().unwrap());
        assert!(now > 0 && peak >= now, "{now} {peak}");
    }
}
