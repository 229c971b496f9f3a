//! How many threads the CPU reference device computes with, and the helper that splits
//! element-wise work across them.
//!
//! The matrix product (faer) and the element-wise work (GELU, conversions) share rayon's global
//! pool, so the process starts exactly one set of worker threads, sized once by `--threads`.

use rayon::prelude::*;

/// Below this many elements an element-wise operation runs on the calling thread: waking the
/// workers costs more than the work (an AVX-512 GELU takes about 0.3 ns an element, a wake-up
/// and join tens of microseconds). With 2^15, a width-64 pass (GELU on 65,536 elements, its
/// products on one thread) took 0.30-0.33 ms on 2 threads against 0.19-0.21 ms now.
pub const PARALLEL_MIN_ELEMENTS: usize = 1 << 18;

/// The physical cores this machine has (distinct `physical id`/`core id` pairs in
/// `/proc/cpuinfo`), no more than the CPUs this process may use; the logical CPUs where the OS
/// does not say.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") else {
        return logical;
    };
    let (mut package, mut cores) = (String::new(), std::collections::BTreeSet::new());
    for line in text.lines() {
        if let Some((key, value)) = line.split_once(':') {
            match key.trim() {
                "physical id" => package = value.trim().to_string(),
                "core id" => {
                    cores.insert((package.clone(), value.trim().to_string()));
                }
                _ => {}
            }
        }
    }
    if cores.is_empty() {
        logical
    } else {
        cores.len().min(logical)
    }
}

/// Sizes rayon's global pool to `threads` workers, once per process, and returns the number of
/// threads the device will use: `threads`, or fewer when the pool was already started smaller
/// (another device in the same process, as in the tests).
pub fn start_pool(threads: usize) -> Result<usize, String> {
    let threads = threads.max(1);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("iteragpu-cpu-{i}"))
        .build_global()
    {
        Ok(()) => Ok(threads),
        // A thread that could not be started carries the OS error; otherwise the pool is
        // already running.
        Err(e) if std::error::Error::source(&e).is_some() => {
            Err(format!("could not start {threads} worker threads: {e}"))
        }
        Err(_) => Ok(threads.min(rayon::current_num_threads())),
    }
}

/// `f` over matching parts of `src` and `dst`, one part per thread when there are enough
/// elements to pay for the threads, else on the calling thread.
pub fn for_each_part<A: Sync, B: Send>(
    threads: usize,
    src: &[A],
    dst: &mut [B],
    f: impl Fn(&[A], &mut [B]) + Sync + Send,
) {
    debug_assert_eq!(src.len(), dst.len());
    if threads < 2 || src.len() < PARALLEL_MIN_ELEMENTS {
        f(src, dst);
        return;
    }
    // Whole cache lines per part, so no two threads write the same line.
    let chunk = src.len().div_ceil(threads).next_multiple_of(64);
    src.par_chunks(chunk)
        .zip(dst.par_chunks_mut(chunk))
        .for_each(|(s, d)| f(s, d));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physical_cores_is_at_least_one_and_at_most_the_logical_cpus() {
        let n = physical_cores();
        assert!(n >= 1);
        assert!(n <= std::thread::available_parallelism().map_or(1, |n| n.get()));
    }

    #[test]
    fn every_element_is_visited_once_with_uneven_parts() {
        for threads in [1, 2, 3, 7] {
            let len = PARALLEL_MIN_ELEMENTS * 3 + 5;
            let src: Vec<u32> = (0..len as u32).collect();
            let mut dst = vec![0u32; len];
            for_each_part(threads, &src, &mut dst, |s, d| {
                for (d, s) in d.iter_mut().zip(s) {
                    *d += s + 1;
                }
            });
            assert!(dst.iter().enumerate().all(|(i, &v)| v == i as u32 + 1));
        }
    }
}
