//! `probe --device cpu`: the host side only. It times copies of host memory into host memory
//! (`memcpy`, one thread) with the host's monotonic clock, through the same bounded sampling loop
//! and statistics as a GPU probe, so the document, its schema and the report can be checked on
//! any machine. It is labelled as what it is: a host figure, never a GPU's, with no datasheet to
//! compare it with.

use lab::environment::Environment;
use lab::probe::timing::{Clock, Monotonic, SamplePlan, sample, slice};
use lab::probe::{CopyFigure, CopyKind, DeviceProbe, FigureStatus};

/// Probes host memcpy bandwidth with `copy_bytes` buffers for at most `seconds`.
pub fn probe(
    environment: Environment,
    copy_bytes: u64,
    seconds: f64,
    plan: &SamplePlan,
) -> DeviceProbe {
    let setup = Monotonic::start();
    let mut figure = CopyFigure::new(CopyKind::HostMemcpy, "host", "host", copy_bytes);
    let mut error = None;
    // Every page written first (not zeroed lazily by the OS), so the timed copies do not
    // include page faults; the budget starts once the buffers are ready. The caller checked the
    // size against the host's memory ([`super::check_copy_buffers`]); the buffers are still
    // asked for fallibly, since memory can go between the check and now.
    let buffers = usize::try_from(copy_bytes).ok().and_then(|len| {
        Some((
            lab::host::filled_buffer(len, 0xa5)?,
            lab::host::filled_buffer(len, 0x5a)?,
        ))
    });
    match buffers {
        Some((src, mut dst)) => {
            let clock = Monotonic::start();
            let deadline = seconds;
            let result = sample::<std::convert::Infallible>(
                &clock,
                deadline,
                slice(deadline - clock.now(), 1),
                plan,
                || {
                    let t = Monotonic::start();
                    dst.copy_from_slice(&src);
                    std::hint::black_box(&mut dst);
                    Ok(t.now())
                },
            );
            let Ok(sampled) = result;
            if sampled.samples.is_empty() {
                figure.give_up(
                    FigureStatus::Skipped,
                    format!("the {seconds} s budget was spent before a timed copy"),
                );
            } else {
                figure.record(&sampled.samples);
                figure.note = Some(
                    "CPU reference device: host memory to host memory on one thread, timed with the host clock; not a GPU figure and not compared with any datasheet"
                        .to_string(),
                );
            }
        }
        None => {
            let message = format!(
                "the host could not provide two buffers of {copy_bytes} bytes for the copies"
            );
            figure.give_up(FigureStatus::Failed, message.clone());
            error = Some(message);
        }
    }
    DeviceProbe {
        device: "cpu".to_string(),
        environment,
        facts: None,
        datasheet: None,
        copies: vec![figure],
        gemms: Vec::new(),
        pcie_after_copies: None,
        elapsed_seconds: setup.now(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::tool::ToolInfo;

    #[test]
    fn the_host_copy_is_measured_and_labelled() {
        let env = crate::environment(ToolInfo::new(None));
        let d = probe(env, 1 << 20, 2.0, &SamplePlan::new(3, 10));
        let c = &d.copies[0];
        assert_eq!(c.kind, CopyKind::HostMemcpy);
        assert_eq!(c.status, FigureStatus::Measured);
        let s = c.seconds.unwrap();
        assert!(s.samples >= 3 && s.samples <= 10);
        assert!(c.gb_per_s.unwrap() > 0.0);
        assert!(c.note.as_deref().unwrap().contains("not a GPU figure"));
        assert!(c.reference.is_none());
        assert!(d.elapsed_seconds < 10.0);
    }

    #[test]
    fn copy_buffers_are_checked_against_the_host_before_they_are_made() {
        assert!(lab::probe::check_copy_buffers(1 << 20, Some(2 << 20)).is_ok());
        assert!(lab::probe::check_copy_buffers(1 << 20, None).is_ok());
        let e = lab::probe::check_copy_buffers((1 << 20) + 1, Some(2 << 20)).unwrap_err();
        assert_eq!(e.needed, Some((2 << 20) + 2));
        assert!(
            e.to_string()
                .starts_with("--copy-bytes 1048577 needs 2097154 bytes (0.00 GiB) of host memory"),
            "{e}"
        );
        for huge in [1 << 63, u64::MAX] {
            let e = lab::probe::check_copy_buffers(huge, None).unwrap_err();
            assert!(e.to_string().contains("more than 2^64 bytes"), "{e}");
        }
    }

    #[test]
    fn a_spent_budget_skips_with_a_reason() {
        let env = crate::environment(ToolInfo::new(None));
        let d = probe(env, 1 << 10, 0.0, &SamplePlan::new(3, 10));
        assert_eq!(d.copies[0].status, FigureStatus::Skipped);
        assert!(d.copies[0].note.as_deref().unwrap().contains("budget"));
    }
}
