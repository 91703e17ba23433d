//! Freezing and killing a sandbox's process tree: a cgroup v2 (`cgroup.freeze`), a cgroup v1
//! `freezer` (`freezer.state`), or, where neither can be made, `SIGSTOP`/`SIGCONT` to every
//! process of the sandbox's pid namespace.
//!
//! A sandbox's cgroup is `<root>/wardfs/<sandbox id>`; its first process is moved into it
//! before it execs ([`Freezer::enter_before_exec`]), so every process of the tree is born
//! inside and none can slip out between a listing and a freeze. The cgroup is removed when the
//! tree is gone ([`Freezer::remove`]).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::tree::{self, Proc};

/// Which mechanism freezes sandboxes (a provider setting; `Auto` picks the first that works).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FreezerKind {
    /// cgroup v2 if a unified hierarchy is mounted, else the v1 freezer, else signals.
    #[default]
    Auto,
    /// A cgroup v2 hierarchy mounted at this path (`/sys/fs/cgroup`, `/sys/fs/cgroup/unified`).
    CgroupV2(PathBuf),
    /// A cgroup v1 hierarchy with the freezer controller (`/sys/fs/cgroup/freezer`).
    CgroupV1(PathBuf),
    /// `SIGSTOP` and `SIGCONT` to every process of the sandbox's pid namespace.
    Signals,
}

/// The mechanism in use, with the directory its sandboxes' cgroups go in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freezer {
    V2(PathBuf),
    V1(PathBuf),
    Signals,
}

/// How long a freeze, thaw or kill may take before it is an error.
const SETTLE: Duration = Duration::from_secs(10);

impl Freezer {
    /// Resolves `kind` on this machine: makes `<root>/wardfs`, or falls back (for `Auto`).
    pub fn open(kind: &FreezerKind) -> Result<Freezer, String> {
        let v2 = |root: &Path| -> Result<Freezer, String> {
            let dir = root.join("wardfs");
            mkdir(&dir)?;
            Ok(Freezer::V2(dir))
        };
        let v1 = |root: &Path| -> Result<Freezer, String> {
            let dir = root.join("wardfs");
            mkdir(&dir)?;
            Ok(Freezer::V1(dir))
        };
        match kind {
            FreezerKind::CgroupV2(root) => v2(root),
            FreezerKind::CgroupV1(root) => v1(root),
            FreezerKind::Signals => Ok(Freezer::Signals),
            FreezerKind::Auto => {
                let base = Path::new("/sys/fs/cgroup");
                for root in [base.to_path_buf(), base.join("unified")] {
                    if root.join("cgroup.procs").exists() && !root.join("tasks").exists() {
                        if let Ok(f) = v2(&root) {
                            return Ok(f);
                        }
                    }
                }
                let freezer = base.join("freezer");
                if freezer.join("tasks").exists() {
                    if let Ok(f) = v1(&freezer) {
                        return Ok(f);
                    }
                }
                Ok(Freezer::Signals)
            }
        }
    }

    /// Returns the cgroup directory of sandbox `id` (`None` for signals).
    pub fn cgroup(&self, id: &str) -> Option<PathBuf> {
        match self {
            Freezer::V2(dir) | Freezer::V1(dir) => Some(dir.join(id)),
            Freezer::Signals => None,
        }
    }

    /// Makes the cgroup of `id` and returns the `cgroup.procs` path the first process writes
    /// itself into before exec (see [`enter_before_exec`]).
    pub fn prepare(&self, id: &str) -> Result<Option<CString>, String> {
        let Some(dir) = self.cgroup(id) else {
            return Ok(None);
        };
        mkdir(&dir)?;
        let procs = dir.join("cgroup.procs");
        Ok(Some(
            CString::new(procs.into_os_string().into_encoded_bytes())
                .map_err(|_| format!("{}: a NUL in the path", dir.display()))?,
        ))
    }

    /// Returns the live processes of sandbox `id`: its cgroup's members, or, for signals, the
    /// processes of the pid namespace of `init` (plus `outer`, the host-side parent).
    pub fn members(&self, id: &str, outer: Option<Proc>, init: Option<Proc>) -> Vec<Proc> {
        match self.cgroup(id) {
            Some(dir) => std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|p| p.trim().parse().ok())
                .filter_map(Proc::of)
                .collect(),
            None => {
                let mut procs: Vec<Proc> = init
                    .and_then(|i| i.pid_ns())
                    .map(|ns| tree::in_pid_ns(&ns))
                    .unwrap_or_default();
                procs.extend(outer.filter(Proc::alive));
                procs
            }
        }
    }

    /// Freezes sandbox `id` and waits until every process is frozen.
    pub fn freeze(&self, id: &str, outer: Option<Proc>, init: Option<Proc>) -> Result<(), String> {
        match self {
            Freezer::V2(_) => self.write(id, "cgroup.freeze", "1")?,
            Freezer::V1(_) => self.write(id, "freezer.state", "FROZEN")?,
            Freezer::Signals => {}
        }
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Freezer::Signals = self {
                // New children may appear until every parent is stopped: repeat until none runs.
                for p in self.members(id, outer, init) {
                    if p.state() != Some('T') {
                        p.signal(libc::SIGSTOP);
                    }
                }
            }
            if self.frozen(id, outer, init) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("sandbox {id} did not freeze within {SETTLE:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Thaws sandbox `id`.
    pub fn thaw(&self, id: &str, outer: Option<Proc>, init: Option<Proc>) -> Result<(), String> {
        match self {
            Freezer::V2(_) => self.write(id, "cgroup.freeze", "0"),
            Freezer::V1(_) => self.write(id, "freezer.state", "THAWED"),
            Freezer::Signals => {
                for p in self.members(id, outer, init) {
                    p.signal(libc::SIGCONT);
                }
                Ok(())
            }
        }
    }

    /// Returns whether sandbox `id` is frozen (every process, for signals).
    pub fn frozen(&self, id: &str, outer: Option<Proc>, init: Option<Proc>) -> bool {
        let read = |file: &str| {
            self.cgroup(id)
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
                .unwrap_or_default()
        };
        match self {
            Freezer::V2(_) => read("cgroup.events")
                .lines()
                .any(|l| l.trim() == "frozen 1"),
            Freezer::V1(_) => read("freezer.state").trim() == "FROZEN",
            Freezer::Signals => {
                let procs = self.members(id, None, init);
                let _ = outer;
                !procs.is_empty() && procs.iter().all(|p| p.state() == Some('T'))
            }
        }
    }

    /// Kills every process of sandbox `id` and waits until none is left.
    ///
    /// The pid namespace's init goes first (which kills every process in it) and `outer`, its
    /// parent, is left to reap it and exit by itself: killed first, it would leave the init
    /// to the host's init, which may not reap. `outer` is killed too if it lingers.
    pub fn kill(&self, id: &str, outer: Option<Proc>, init: Option<Proc>) -> Result<(), String> {
        if let Some(init) = init {
            init.signal(libc::SIGKILL);
        }
        let started = Instant::now();
        let deadline = started + SETTLE;
        loop {
            let init_alive = init.is_some_and(|p| p.alive());
            let left: Vec<Proc> = self
                .members(id, None, init)
                .into_iter()
                .filter(|p| Some(*p) != outer)
                .collect();
            for p in &left {
                p.signal(libc::SIGKILL);
            }
            // A v1-frozen task dies only once thawed; a stopped `outer` cannot reap.
            let _ = self.thaw(id, outer, None);
            let outer_alive = outer.is_some_and(|p| p.alive());
            if outer_alive && (!init_alive || started.elapsed() > Duration::from_secs(2)) {
                // Its child is gone (or it never had one): it should be exiting; make sure.
                if init.is_none() || started.elapsed() > Duration::from_millis(500) {
                    outer.unwrap().signal(libc::SIGKILL);
                }
            }
            if left.is_empty() && !init_alive && !outer_alive {
                return Ok(());
            }
            if Instant::now() > deadline {
                let pids: Vec<i32> = left.iter().chain(outer.iter()).map(|p| p.pid).collect();
                return Err(format!(
                    "sandbox {id}: processes {pids:?} still alive {SETTLE:?} after SIGKILL"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Removes the (empty) cgroup of `id`; a missing one is fine.
    pub fn remove(&self, id: &str) -> Result<(), String> {
        let Some(dir) = self.cgroup(id) else {
            return Ok(());
        };
        let deadline = Instant::now() + SETTLE;
        loop {
            match std::fs::remove_dir(&dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                // EBUSY while the last exited task is still being released.
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("cannot remove cgroup {}: {e}", dir.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn write(&self, id: &str, file: &str, value: &str) -> Result<(), String> {
        let Some(dir) = self.cgroup(id) else {
            return Ok(());
        };
        let path = dir.join(file);
        std::fs::write(&path, value)
            .map_err(|e| format!("cannot write {value} to {}: {e}", path.display()))
    }
}

fn mkdir(dir: &Path) -> Result<(), String> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot make cgroup {}: {e}", dir.display())),
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`. Called between
/// fork and exec, so it uses only async-signal-safe calls (open, write, close).
pub fn enter_before_exec(procs: &CString) -> std::io::Result<()> {
    // SAFETY: plain system calls on a valid NUL-terminated path and a local buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // "0" moves the writer itself (cgroup v1 and v2 alike).
        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != 1 {
            return Err(err);
        }
    }
    Ok(())
}
