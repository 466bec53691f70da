//! Which machine and process a lease holder is, and a clock that keeps counting while the
//! machine sleeps.
//!
//! A host name says little: cloned images and containers share one, and two processes that see
//! their own state folder at one path (private mount namespaces) hold "the same" lock file. So a
//! holder records this machine's id (`/etc/machine-id`), this boot's id and its pid namespace,
//! and a lease's earlier holder is known dead only where all three are this process's own and
//! its pid is gone. Anywhere else its TTL is waited out.
//!
//! `Instant` (`CLOCK_MONOTONIC` on Linux) stands still while a laptop is suspended, so a writer
//! that wakes would still believe in a lease a standby took meanwhile. The lease's own times come
//! from [`boot_clock`] (`CLOCK_BOOTTIME`, as `/proc/uptime` shows it), which counts the sleep.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// This machine, this boot and this pid namespace, as one string (empty where none of it can be
/// read: such a holder is never taken for this process's predecessor).
pub fn machine() -> &'static str {
    static MACHINE: OnceLock<String> = OnceLock::new();
    MACHINE.get_or_init(|| {
        let read =
            |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let id = read("/etc/machine-id").or_else(|| read("/var/lib/dbus/machine-id"));
        let boot = read("/proc/sys/kernel/random/boot_id");
        let pid_ns = std::fs::read_link("/proc/self/ns/pid").ok().map(|l| l.display().to_string());
        match (id, boot, pid_ns) {
            (Some(id), Some(boot), Some(ns)) => format!("{id}/{boot}/{ns}"),
            _ => String::new(),
        }
    })
}

/// Whether process `pid` of a holder on `holder_machine` is certainly gone: the holder is of this
/// machine, boot and pid namespace, and no such process runs (a pid reused since makes it look
/// alive: the TTL is then waited out, which is safe).
pub fn certainly_gone(holder_machine: &str, pid: u32) -> bool {
    let here = machine();
    !here.is_empty()
        && holder_machine == here
        && pid != std::process::id()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Time since boot, counting suspend (`/proc/uptime`, 10 ms steps); where that cannot be read,
/// time since this process first asked (which does not count suspend).
pub fn boot_clock() -> Duration {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let uptime = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse::<f64>().ok()));
    match uptime {
        Some(secs) => Duration::from_secs_f64(secs),
        None => ORIGIN.get_or_init(Instant::now).elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_known_and_only_a_dead_pid_of_it_is_gone() {
        let here = machine();
        assert!(!here.is_empty(), "a Linux machine has an id, a boot id and a pid namespace");
        // This process, and a live one (pid 1), are not gone; a pid no process has is.
        assert!(!certainly_gone(here, std::process::id()));
        assert!(!certainly_gone(here, 1));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(certainly_gone(here, pid));
        // The same pid elsewhere (another machine, boot or namespace) is never taken as gone.
        assert!(!certainly_gone("other/boot/pid:[1]", pid));
        assert!(!certainly_gone("", pid));
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_clock();
        std::thread::sleep(Duration::from_millis(30));
        let b = boot_clock();
        assert!(b > a && b - a >= Duration::from_millis(10), "{a:?} then {b:?}");
    }
}
