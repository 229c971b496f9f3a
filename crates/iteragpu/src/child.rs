//! A `measure` started by `sweep` dies with the sweep: a sweep that is killed (even with
//! SIGKILL, which it cannot catch) never leaves a measurement running on the device.
//!
//! The sweep names itself in [`PARENT_ENV`]; the child asks the kernel for SIGKILL when its
//! parent dies (`PR_SET_PDEATHSIG` on Linux, through nix), then checks that the parent is still
//! the sweep, in case it died before the request. Elsewhere a watchdog thread polls the parent.

/// The environment variable through which `sweep` passes its process id to its children.
pub const PARENT_ENV: &str = "ITERAGPU_SWEEP_PARENT";

/// Arms the child's end with its parent, when started by a sweep; returns an error sentence when
/// the sweep is already gone.
pub fn die_with_parent() -> Result<(), String> {
    let Some(expected) = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return Ok(());
    };
    #[cfg(target_os = "linux")]
    let armed = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_ok();
    #[cfg(not(target_os = "linux"))]
    let armed = false;
    if parent().is_some_and(|p| p != expected) {
        return Err(
            "the sweep that started this measurement has already ended; nothing was measured"
                .into(),
        );
    }
    if !armed {
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if parent().is_some_and(|p| p != expected) {
                    std::process::exit(1);
                }
            }
        });
    }
    Ok(())
}

fn parent() -> Option<u32> {
    #[cfg(unix)]
    {
        Some(std::os::unix::process::parent_id())
    }
    #[cfg(not(unix))]
    {
        None
    }
}
