//! A sandbox's process tree as `/proc` shows it from the host.
//!
//! A process is named by its pid *and* its start time ([`Proc`]), so a pid the kernel reused
//! for an unrelated process after the sandbox died is never taken for the sandbox (never
//! signalled, never reported running). Zombies count as gone: their parent may be a process
//! that does not reap (a restarted daemon's sandboxes are reparented).

use std::io::{Seek as _, SeekFrom, Write as _};

/// One process, as the host's pid namespace names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    /// Field 22 of `/proc/PID/stat`: clock ticks after boot when it started.
    pub start: u64,
}

/// The fields of `/proc/PID/stat` after the command name (field 3 is index 0).
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

impl Proc {
    /// Returns the live process `pid` with its start time; `None` when there is none.
    pub fn of(pid: i32) -> Option<Proc> {
        let f = stat_fields(pid)?;
        if matches!(f.first().map(String::as_str), Some("Z" | "X")) {
            return None;
        }
        Some(Proc {
            pid,
            start: f.get(19)?.parse().ok()?,
        })
    }

    /// Returns whether this very process (same pid, same start) is alive and not a zombie.
    pub fn alive(&self) -> bool {
        Proc::of(self.pid).is_some_and(|p| p.start == self.start)
    }

    /// Returns the state letter of `/proc/PID/stat` (`R`, `S`, `D`, `T`, …).
    pub fn state(&self) -> Option<char> {
        let f = stat_fields(self.pid)?;
        f.first()?.chars().next()
    }

    /// Returns the live children of this process.
    pub fn children(&self) -> Vec<Proc> {
        let list =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children", pid = self.pid))
                .unwrap_or_default();
        list.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter_map(Proc::of)
            .collect()
    }

    /// Returns the identity of this process's pid namespace (`pid:[inode]`).
    pub fn pid_ns(&self) -> Option<std::path::PathBuf> {
        std::fs::read_link(format!("/proc/{}/ns/pid", self.pid)).ok()
    }

    /// Sends `signal`, unless the pid now names another process.
    pub fn signal(&self, signal: i32) {
        if self.alive() {
            // SAFETY: kill(2) has no memory effects; the pid was checked just above.
            unsafe { libc::kill(self.pid, signal) };
        }
    }

    /// Returns the process's arguments as `/proc/PID/cmdline` shows them.
    pub fn cmdline(&self) -> Vec<u8> {
        std::fs::read(format!("/proc/{}/cmdline", self.pid)).unwrap_or_default()
    }

    /// Overwrites every occurrence of `secret` in this process's argument area with `*`, so
    /// that `ps` on the host no longer shows it. Returns how many were overwritten.
    ///
    /// The argument area is ordinary memory of the process (`arg_start`..`arg_end`, fields 48
    /// and 49 of `/proc/PID/stat`); a program that parsed its arguments at start never reads it
    /// again.
    pub fn scrub_arg(&self, secret: &[u8]) -> std::io::Result<usize> {
        let fields = stat_fields(self.pid).ok_or_else(|| std::io::Error::other("process gone"))?;
        let arg_start: u64 = fields
            .get(45)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other("no arg_start in /proc/PID/stat"))?;
        let args = self.cmdline();
        let mut mem = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{}/mem", self.pid))?;
        let mut done = 0;
        let mut from = 0;
        while let Some(at) = find(&args[from..], secret) {
            let offset = (from + at) as u64;
            mem.seek(SeekFrom::Start(arg_start + offset))?;
            mem.write_all(&vec![b'*'; secret.len()])?;
            done += 1;
            from += at + secret.len();
        }
        Ok(done)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Returns whether `proc` still has an entry in `/proc`, zombie or not.
pub fn exists(proc: Proc) -> bool {
    stat_fields(proc.pid)
        .and_then(|f| f.get(19)?.parse::<u64>().ok())
        .is_some_and(|start| start == proc.start)
}

/// Returns every live process whose pid namespace is `ns` (as [`Proc::pid_ns`] names it).
pub fn in_pid_ns(ns: &std::path::Path) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(Proc::of)
        .filter(|p| p.pid_ns().as_deref() == Some(ns))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = Proc::of(std::process::id() as i32).unwrap();
        assert!(me.alive());
        let other = Proc {
            start: me.start + 1,
            ..me
        };
        assert!(!other.alive());
        assert!(in_pid_ns(&me.pid_ns().unwrap()).contains(&me));
    }

    #[test]
    fn find_locates_a_needle() {
        assert_eq!(find(b"a\0--token\0abc\0", b"abc"), Some(10));
        assert_eq!(find(b"abc", b""), None);
    }
}
