//! The memory probe: a process's resident set from `/proc/<pid>/status`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`…), if the process exists.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    field_kib(&status, field)
}

/// The CPU time `pid` has used so far (user and system, every thread), from
/// `/proc/<pid>/stat` (`pid` 0: this process).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let path = if pid == 0 {
        "/proc/self/stat".to_owned()
    } else {
        format!("/proc/{pid}/stat")
    };
    cpu_of_stat(&std::fs::read_to_string(path).ok()?)
}

/// `utime + stime` of a `/proc/<pid>/stat` line: fields 14 and 15, counted after the
/// command name (which may hold spaces and parentheses), in clock ticks of 10 ms (Linux
/// reports them in `USER_HZ`, 100 on every architecture it runs this on).
fn cpu_of_stat(stat: &str) -> Option<Duration> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    // After the name: state (3) … utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// A `Field:   1234 kB` line of a `/proc/<pid>/status` text, in KiB.
fn field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

/// The resident set of `pid` now, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// Samples the resident set of a process every few milliseconds until dropped, and
/// keeps the largest value seen.
#[derive(Debug)]
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Start sampling `pid`.
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            let peak = Arc::clone(&peak);
            move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rss) = rss_kib(pid) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        RssSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// Stop and return the largest resident set seen, in KiB.
    pub fn finish(mut self) -> u64 {
        self.stop_thread();
        self.peak.load(Ordering::Relaxed)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_time_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0";
        assert_eq!(cpu_of_stat(stat), Some(Duration::from_millis(2870)));
        assert_eq!(cpu_of_stat("4242 (x) S 1 2"), None, "too few fields");
        // Spinning shows within a few clock ticks (10 ms each), however busy the machine.
        let spent = cpu_time(0).expect("this process's CPU time");
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while cpu_time(0).expect("again") <= spent {
            assert!(
                std::time::Instant::now() < until,
                "10 s of spinning never showed"
            );
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn reads_own_resident_set() {
        // Not compared with `VmHWM`: the kernel updates the peak lazily, so it can lag
        // behind a resident set read a moment earlier.
        let pid = std::process::id();
        let rss = rss_kib(pid).expect("this process has a resident set");
        assert!(rss > 0);
        assert_eq!(status_kib(pid, "NoSuchField"), None);
        assert_eq!(rss_kib(u32::MAX), None, "no such process");
    }

    #[test]
    fn parses_status_fields() {
        let status = "Name:\tbench-all\nVmHWM:\t   30208 kB\nVmRSS:\t   25600 kB\nThreads:\t4\n";
        assert_eq!(field_kib(status, "VmRSS"), Some(25600));
        assert_eq!(field_kib(status, "VmHWM"), Some(30208));
        assert_eq!(field_kib(status, "Threads"), None, "not in kB");
        assert_eq!(
            field_kib(status, "VmRS"),
            None,
            "a prefix of a field is not the field"
        );
    }
}
