//! The open probe: right after mounting, one thread of the daemon opens a file that only it
//! can see (`MOUNT/.wardfs-open-probe`, never listed), so that the kernel meets the mount's
//! `ENOSYS` to `OPEN` at once instead of at the first open of a file by someone.
//!
//! Why: in the cached I/O mode the mount answers `OPEN` with `ENOSYS`, and from then on the
//! kernel opens files without asking and sends no `RELEASE` at their close, `CREATE`'s files
//! included. Until the first `OPEN`, every file a program creates still costs a `RELEASE`: an
//! untar as a fresh mount's first work paid 3,586 of them (docs/benchmarks.md, issue 32).
//!
//! The name is answered only to the probing thread (the kernel's `pid` of the request is its
//! thread id) and only when `OPEN` is answered `ENOSYS`; to anyone else it does not exist, and
//! the top level refuses every change, so nobody can make a file of that name either. The
//! entry is never cached (TTL 0), so a later lookup by someone else asks again and is `ENOENT`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::FileAttr;
use rustix::fs::{Mode, OFlags};

use super::inodes::PROBE_INO;
use super::tree::virtual_dir;

/// The name the probe opens in the mount's top level.
pub const PROBE_NAME: &str = ".wardfs-open-probe";

/// The thread probing now, if any.
#[derive(Default)]
pub struct Probe {
    /// The probing thread's id; 0 when none probes (the kernel gives pid 0 for a caller outside
    /// the mount's pid namespace, which must never match).
    tid: AtomicU32,
}

impl Probe {
    /// True when the lookup of `name` by the thread `pid` is the probe's.
    pub fn asks(&self, pid: u32, name: &OsStr) -> bool {
        let tid = self.tid.load(Ordering::Acquire);
        tid != 0 && tid == pid && name == PROBE_NAME
    }

    /// The probe file's attributes: an empty file the daemon owns, readable by it only.
    pub fn attr(born: SystemTime) -> FileAttr {
        FileAttr {
            size: 0,
            blocks: 0,
            kind: fuser::FileType::RegularFile,
            perm: 0o400,
            ..virtual_dir(PROBE_INO, born, born, 1)
        }
    }

    /// Opens and closes the probe file through the mount at `mountpoint`, from a thread of its
    /// own (a request of the daemon's own must never wait on a thread that serves requests).
    /// A failure (the mount gone meanwhile, a kernel that asks nothing) only means the kernel
    /// learns at the first open by someone, as without the probe.
    pub fn start(self: &Arc<Self>, mountpoint: &Path) {
        let probe = self.clone();
        let path: PathBuf = mountpoint.join(PROBE_NAME);
        let spawned = std::thread::Builder::new()
            .name("wardfs-probe".into())
            .spawn(move || {
                probe.tid.store(
                    rustix::thread::gettid().as_raw_nonzero().get() as u32,
                    Ordering::Release,
                );
                let opened = rustix::fs::open(
                    &path,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                    Mode::empty(),
                );
                probe.tid.store(0, Ordering::Release);
                if let Err(e) = opened {
                    tracing::debug!(error = %e, "the open probe found nothing to open");
                }
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cannot start the open probe's thread");
        }
    }
}
