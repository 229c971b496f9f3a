//! Every program IteraGPU Lab starts (the torch engine's Python, a sweep's `measure` points, the
//! probes for a Python with torch) runs *bounded*: it ends by a deadline, when the user presses
//! Ctrl-C, and when the binary itself dies, even by `kill -9`; and when it ends, nothing it
//! started is left running, not even a grandchild that left the process group with `setsid`.
//!
//! # How, and why this way
//!
//! The binary does not start the program itself: it starts a copy of itself as a *supervisor*
//! ([`command`], [`spawn`]; the binary's `main` calls [`serve_if_asked`] first), which starts the
//! program in a process group of its own and watches it. The supervisor is single-threaded and
//! small, and it is what makes each end reliable:
//!
//! - **Grandchildren.** The supervisor is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process
//!   whose parent dies is re-parented to it instead of to init, so *every* descendant, whether it
//!   changed its process group, its session (`setsid`) or double-forked, stays in the
//!   supervisor's tree in `/proc` until it is reaped. Killing a process group misses the
//!   `setsid` grandchild; a cgroup would not (but needs a delegated cgroup, which a user's
//!   shell, a Slurm step or a container rarely gives). Walking the subreaper's tree needs nothing
//!   but `/proc`, and it cannot be escaped by the means a Python program or a shell script has.
//! - **The binary's own death.** A process cannot act on its own `kill -9`, so something else
//!   must: the supervisor asks the kernel for SIGTERM when its parent dies (`PR_SET_PDEATHSIG`)
//!   and then ends the tree as on a deadline. (It checks after arming that the parent is still
//!   the one that started it, in case it died before.) The program itself is armed with SIGKILL
//!   on the supervisor's death, so a `kill -9` of the supervisor too leaves no direct child.
//! - **Ending.** On the deadline, on SIGINT, SIGTERM or SIGHUP (Ctrl-C reaches the supervisor,
//!   which stays in the caller's process group unless the caller moves it), on the parent's death,
//!   and also when the program ends by itself while descendants remain: every descendant gets
//!   SIGTERM, then, after a short grace ([`GRACE`]), SIGKILL, again and again until the tree
//!   is empty (a process forking while it is killed is found on the next pass), and each is
//!   reaped.
//! - **The outcome.** The supervisor reports how the program ended on a pipe of its own, so the
//!   program's exit status, a signal, the deadline and an interruption are told apart, and so is a
//!   program that could not be started ([`Supervised::wait`]).
//!
//! The program's standard streams are the supervisor's, which never writes to them: a caller's
//! pipes reach the program unchanged. [`for_each_line`] reads such a pipe with each line bounded,
//! so that a program printing without end cannot exhaust the caller's memory.
//!
//! Linux only (the subreaper and the death signal are Linux's); elsewhere [`spawn`] refuses.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The first argument that makes the binary a supervisor (see [`serve_if_asked`]).
pub const SERVE_ARG: &str = "__iteragpu-supervise";

/// The environment variable through which the supervisor learns its report pipe; removed from
/// the program's environment.
const REPORT_ENV: &str = "ITERAGPU_SUPERVISOR_REPORT_FD";

/// How long a program has between SIGTERM and SIGKILL: long enough for Python to run its
/// `finally` blocks and release a GPU context, short enough that a Ctrl-C feels immediate.
pub const GRACE: Duration = Duration::from_secs(2);

/// How often the supervisor looks at its children and the clock.
const TICK: Duration = Duration::from_millis(20);

/// The most the supervisor tries to SIGKILL a tree before it gives up (a process in the
/// kernel's uninterruptible sleep, a GPU driver call, ends only when that call returns).
const KILL_FOR: Duration = Duration::from_secs(10);

/// Set by [`serve_if_asked`]: this binary can be its own supervisor.
static SERVES: AtomicBool = AtomicBool::new(false);

/// The supervisors running now, for [`stop_all`].
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The limits of one program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How long the program may run, from its start; `None`: no deadline (it still ends with
    /// Ctrl-C and with the binary).
    pub deadline: Option<Duration>,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
}

impl Bounds {
    /// A deadline with the usual grace.
    pub fn within(deadline: Duration) -> Bounds {
        Bounds {
            deadline: Some(deadline),
            grace: GRACE,
        }
    }
}

/// How a supervised program ended (its whole tree is gone in every case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (not one the supervisor sent).
    Signalled(i32),
    /// It was still running at the deadline, and was ended.
    Deadline(Duration),
    /// The supervisor was told to stop (Ctrl-C, SIGTERM, SIGHUP, or its parent's death), and
    /// ended it; the signal's number.
    Stopped(i32),
}

impl Ended {
    /// The exit code, when it exited.
    pub fn code(&self) -> Option<i32> {
        match self {
            Ended::Exited(c) => Some(*c),
            _ => None,
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(c) => write!(f, "exit {c}"),
            Ended::Signalled(s) => write!(f, "signal {}", signal_name(*s)),
            Ended::Deadline(d) => {
                write!(f, "no end within its deadline of {}", format_duration(*d))
            }
            Ended::Stopped(s) => write!(f, "an interruption ({})", signal_name(*s)),
        }
    }
}

/// A duration in words for messages: whole seconds as `90s`, shorter ones in milliseconds.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

fn signal_name(n: i32) -> String {
    match nix::sys::signal::Signal::try_from(n) {
        Ok(s) => s.as_str().to_string(),
        Err(_) => n.to_string(),
    }
}

/// Runs the supervisor and exits when this process was started as one; returns at once
/// otherwise. The binary's `main` calls it first, before parsing its command line.
pub fn serve_if_asked() {
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(OsStr::new(SERVE_ARG)) {
        std::process::exit(supervisor::run(args.collect()));
    }
    SERVES.store(true, Ordering::SeqCst);
}

/// A command that runs `program` under a supervisor with `bounds`: add the program's arguments,
/// environment, folder and standard streams to it as to any [`Command`], then start it with
/// [`spawn`] (once).
pub fn command(program: impl AsRef<OsStr>, bounds: Bounds) -> io::Result<Command> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg(SERVE_ARG)
        .arg(std::process::id().to_string())
        .arg(match bounds.deadline {
            Some(d) => d.as_millis().to_string(),
            None => "none".to_string(),
        })
        .arg(bounds.grace.as_millis().to_string())
        .arg(program.as_ref());
    Ok(cmd)
}

/// A program running under its supervisor.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    report: io::PipeReader,
    program: OsString,
    waited: bool,
}

/// Starts a [`command`]. Call it from a thread that lives until the program ends (the main
/// thread): the kernel's parent-death signal follows the thread that started the supervisor.
pub fn spawn(cmd: &mut Command) -> io::Result<Supervised> {
    if !cfg!(target_os = "linux") {
        return Err(io::Error::other(
            "bounded child processes need Linux (a subreaper and a parent-death signal)",
        ));
    }
    let args: Vec<&OsStr> = cmd.get_args().collect();
    if args.first() != Some(&OsStr::new(SERVE_ARG)) || args.len() < 5 {
        return Err(io::Error::other(
            "lab_child::spawn starts only a command made by lab_child::command",
        ));
    }
    if !SERVES.load(Ordering::SeqCst) {
        return Err(io::Error::other(
            "this program cannot supervise a child: its main does not call \
             lab_child::serve_if_asked",
        ));
    }
    let program = args[4].to_os_string();
    let (report, writer) = io::pipe()?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&writer);
    cmd.env(REPORT_ENV, raw.to_string());
    // The pipe is close-on-exec like every descriptor std opens; the supervisor alone keeps its
    // end across exec.
    // SAFETY: fcntl is async-signal-safe, and the closure touches nothing else.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let fd = std::os::fd::BorrowedFd::borrow_raw(raw);
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )?;
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(writer);
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(child.id());
    Ok(Supervised {
        child,
        report,
        program,
        waited: false,
    })
}

/// Asks every running supervisor of this process to end its program now (its tree gets SIGTERM,
/// then SIGKILL after the grace); each [`Supervised::wait`] then returns [`Ended::Stopped`]. For
/// a Ctrl-C handler.
pub fn stop_all() {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for pid in live {
        if let Ok(pid) = i32::try_from(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

impl Supervised {
    /// The program's stdout, when the command piped it.
    pub fn stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The program's stderr, when the command piped it.
    pub fn stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Waits until the program and everything it started have ended. An `Err` is a program that
    /// could not be started (the operating system's reason, as [`Command::spawn`] gives it) or a
    /// supervisor that died without a word.
    pub fn wait(mut self) -> io::Result<Ended> {
        self.waited = true;
        let status = self.child.wait()?;
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != self.child.id());
        let mut said = String::new();
        let _ = (&mut self.report).take(256).read_to_string(&mut said);
        parse_report(&said).unwrap_or_else(|| Err(lost(&self.program, status)))
    }
}

impl Drop for Supervised {
    /// A program whose caller stopped waiting for it (an early return, a panic) is ended too.
    fn drop(&mut self) {
        if !self.waited {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = self.child.wait();
            LIVE.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|p| *p != self.child.id());
        }
    }
}

fn lost(program: &OsStr, status: ExitStatus) -> io::Error {
    io::Error::other(format!(
        "the supervisor of {} ended ({status}) without saying how the program ended",
        program.to_string_lossy()
    ))
}

/// The supervisor's one line: `exit N`, `signal N`, `deadline MS`, `stopped N`, `spawn ERRNO`.
fn parse_report(said: &str) -> Option<io::Result<Ended>> {
    let (word, n) = said.trim().split_once(' ')?;
    let n: i64 = n.parse().ok()?;
    let small = i32::try_from(n).ok();
    Some(Ok(match word {
        "exit" => Ended::Exited(small?),
        "signal" => Ended::Signalled(small?),
        "deadline" => Ended::Deadline(Duration::from_millis(u64::try_from(n).ok()?)),
        "stopped" => Ended::Stopped(small?),
        "spawn" => return Some(Err(io::Error::from_raw_os_error(small?))),
        _ => return None,
    }))
}

/// Reads `reader` to its end line by line, giving `each` every line (without its newline) cut
/// to at most `max` bytes (the rest of a longer line is read and dropped), so that what a child
/// prints costs the caller bounded memory however much it prints.
pub fn for_each_line(reader: impl Read, max: usize, mut each: impl FnMut(&str)) {
    let mut reader = BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf() {
            Ok([]) => break,
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let (chunk, done, used) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true, i + 1),
            None => (buf, false, buf.len()),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        reader.consume(used);
        if done {
            each(String::from_utf8_lossy(&line).trim_end_matches('\r'));
            line.clear();
        }
    }
    if !line.is_empty() {
        each(String::from_utf8_lossy(&line).trim_end_matches('\r'));
    }
}

/// The supervisor's side.
mod supervisor {
    use super::*;
    use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use nix::unistd::Pid;
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;

    /// The first signal that asked the supervisor to stop, 0 while none has (a Ctrl-C reaches
    /// the supervisor directly and, forwarded by [`stop_all`] as SIGTERM, a moment later: the
    /// first names the interruption).
    static STOP: AtomicI32 = AtomicI32::new(0);

    extern "C" fn on_signal(sig: nix::libc::c_int) {
        let _ = STOP.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// `args`: the parent's pid, the deadline in milliseconds or `none`, the grace in
    /// milliseconds, the program, its arguments. Returns the supervisor's exit code.
    pub(super) fn run(args: Vec<OsString>) -> i32 {
        let Some(fd) = std::env::var(REPORT_ENV)
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
        else {
            eprintln!("iteragpu: {SERVE_ARG} is for the program's own use");
            return 2;
        };
        // SAFETY: the descriptor was left open for this process by `spawn`, and nothing else
        // here owns it.
        let mut report = unsafe { File::from_raw_fd(fd) };
        let _ = nix::fcntl::fcntl(
            &report,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        let number = |i: usize| args.get(i).and_then(|a| a.to_str()?.parse::<u64>().ok());
        let (Some(parent), Some(grace), Some(program)) = (number(0), number(2), args.get(3)) else {
            let _ = writeln!(report, "spawn {}", nix::libc::EINVAL);
            return 2;
        };
        let deadline = number(1).map(Duration::from_millis);
        let grace = Duration::from_millis(grace);
        let started = Instant::now();

        let _ = nix::sys::prctl::set_child_subreaper(true);
        let action = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            let _ = unsafe { signal::sigaction(sig, &action) };
        }
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
        if u64::try_from(nix::unistd::getppid().as_raw()).ok() != Some(parent) {
            return 1; // the parent died before the request: nobody is left to report to
        }

        let me = nix::unistd::getpid();
        let mut cmd = Command::new(program);
        cmd.args(&args[4..]).env_remove(REPORT_ENV).process_group(0);
        // SAFETY: prctl and getppid are async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                if nix::unistd::getppid() != me {
                    return Err(io::Error::other("the supervisor is gone"));
                }
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(
                    report,
                    "spawn {}",
                    e.raw_os_error().unwrap_or(nix::libc::EIO)
                );
                return 1;
            }
        };
        let child = Pid::from_raw(child.id() as i32);

        let mut status = None;
        let outcome = loop {
            reap(child, &mut status);
            if let Some(s) = &status {
                break s.clone();
            }
            let stop = STOP.load(Ordering::SeqCst);
            if stop != 0 {
                break format!("stopped {stop}");
            }
            if let Some(d) = deadline
                && started.elapsed() >= d
            {
                break format!("deadline {}", d.as_millis());
            }
            std::thread::sleep(TICK);
        };
        end_tree(me, child, grace, &mut status);
        let _ = writeln!(report, "{outcome}");
        0
    }

    /// Reaps every child that has ended; records the program's own status.
    fn reap(child: Pid, status: &mut Option<String>) {
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => {
                    if pid == child && status.is_none() {
                        *status = Some(format!("exit {code}"));
                    }
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) => {
                    if pid == child && status.is_none() {
                        *status = Some(format!("signal {}", sig as i32));
                    }
                }
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => break,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
    }

    /// SIGTERM to every descendant, the grace, then SIGKILL until none is left, reaping all.
    fn end_tree(me: Pid, child: Pid, grace: Duration, status: &mut Option<String>) {
        let living = descendants(me);
        if living.is_empty() {
            reap(child, status);
            return;
        }
        for p in &living {
            let _ = signal::kill(*p, Signal::SIGTERM);
        }
        let until = Instant::now() + grace;
        while Instant::now() < until {
            std::thread::sleep(TICK);
            reap(child, status);
            if descendants(me).is_empty() {
                return;
            }
        }
        let until = Instant::now() + KILL_FOR;
        loop {
            let living = descendants(me);
            if living.is_empty() || Instant::now() >= until {
                break;
            }
            for p in &living {
                let _ = signal::kill(*p, Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(5));
            reap(child, status);
        }
        reap(child, status);
    }

    /// The living (not zombie) descendants of `root`, from `/proc`.
    pub(super) fn descendants(root: Pid) -> Vec<Pid> {
        let mut table = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                else {
                    continue;
                };
                let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                    continue;
                };
                if let Some((state, ppid)) = parse_stat(&stat) {
                    table.push((pid, ppid, state));
                }
            }
        }
        let mut found = vec![root.as_raw()];
        let mut out = Vec::new();
        let mut i = 0;
        while i < found.len() {
            let parent = found[i];
            for &(pid, ppid, state) in &table {
                if ppid == parent && !found.contains(&pid) {
                    found.push(pid);
                    if state != 'Z' && state != 'X' {
                        out.push(Pid::from_raw(pid));
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// The state and parent of `/proc/PID/stat`: `PID (COMM) STATE PPID ...`, where COMM may
    /// hold spaces and parentheses (so it is read up to the last `)`).
    pub(super) fn parse_stat(stat: &str) -> Option<(char, i32)> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let ppid = fields.next()?.parse().ok()?;
        Some((state, ppid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_are_read() {
        assert_eq!(
            supervisor::parse_stat("42 (a) b) (c) S 7 42 42 0 -1"),
            Some(('S', 7))
        );
        assert_eq!(supervisor::parse_stat("42 (x"), None);
        assert_eq!(supervisor::parse_stat("42 (x) Z"), None);
    }

    #[test]
    fn this_process_is_found_below_its_parent() {
        let me = nix::unistd::getpid();
        let parent = nix::unistd::getppid();
        assert!(supervisor::descendants(parent).contains(&me));
        assert!(!supervisor::descendants(me).contains(&me));
    }

    #[test]
    fn reports_are_read_and_anything_else_is_not() {
        assert_eq!(parse_report("exit 3\n").unwrap().unwrap(), Ended::Exited(3));
        assert_eq!(
            parse_report("signal 9").unwrap().unwrap(),
            Ended::Signalled(9)
        );
        assert_eq!(
            parse_report("deadline 1500").unwrap().unwrap(),
            Ended::Deadline(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_report("stopped 2").unwrap().unwrap(),
            Ended::Stopped(2)
        );
        let e = parse_report("spawn 2").unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        for bad in [
            "",
            "exit",
            "exit x",
            "deadline -1",
            "other 1",
            "exit 99999999999",
        ] {
            assert!(parse_report(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_plain_command_is_not_spawned_and_neither_without_a_serving_main() {
        let e = spawn(&mut Command::new("true")).unwrap_err();
        assert!(e.to_string().contains("lab_child::command"), "{e}");
        let mut cmd = command("true", Bounds::within(Duration::from_secs(1))).unwrap();
        let e = spawn(&mut cmd).unwrap_err();
        assert!(e.to_string().contains("serve_if_asked"), "{e}");
    }

    #[test]
    fn durations_read_as_words() {
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(
            Ended::Deadline(Duration::from_secs(2)).to_string(),
            "no end within its deadline of 2s"
        );
        assert_eq!(Ended::Stopped(2).to_string(), "an interruption (SIGINT)");
    }

    proptest::proptest! {
        #[test]
        fn lines_are_bounded_and_otherwise_whole(
            lines in proptest::collection::vec("[a-z ]{0,40}", 0..20),
            max in 1usize..50,
        ) {
            let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
            let mut got = Vec::new();
            for_each_line(text.as_bytes(), max, |l| got.push(l.to_string()));
            let want: Vec<String> = lines
                .iter()
                .map(|l| l[..l.len().min(max)].to_string())
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_last_line_without_newline_is_kept() {
        let mut got = Vec::new();
        for_each_line(&b"a\nbcd"[..], 2, |l| got.push(l.to_string()));
        assert_eq!(got, ["a", "bc"]);
    }
}
