//! The FUSE mount: the zones as a real filesystem, a thin adapter over the same backing dirs.
//!
//! `<mount>/cache` and `<mount>/workspace` are the zones, `<mount>/forks/NAME` each fork that
//! exists now (a zone too, looked up as the kernel asks: see `top`); `fs` answers the kernel,
//! each request by one call of the `tree::Tree` serving it (`top`, `local_tree`,
//! `sandbox_tree`), in the I/O modes `mode` decides;
//! `inodes` maps inode numbers to backing files, `invalidate` keeps the kernel's caches honest,
//! `echo` repeats each change made outside the mount through it so that its watchers (inotify)
//! hear of it (the requests made by a process of its own, `echo_helper`). Mounting handles a
//! stale mount left by a crash (lazy unmount, then mount again); dropping a [`Mount`] unmounts.
//! `binds` puts a fork's tree at a directory of one's choice (`wardfs fork NAME --mount DIR`).
//!
//! Owns the kernel's business only: decoding requests, inode numbers, handles, TTLs, the I/O
//! modes (passthrough, or the page cache with no `OPEN`), the transport (FUSE over io_uring by
//! default, implemented in the vendored fuser, `vendor/README.md`; or `/dev/fuse`) and
//! invalidation. Every operation on a zone is the core's. May import `core`, `state` and
//! `config`; never `api`, `git`, `sandbox` or `daemon` (`tests/rules` checks the imports).

pub mod binds;
mod echo;
mod echo_helper;
mod fs;
mod handles;
mod inodes;
mod invalidate;
mod local_tree;
mod mode;
mod probe;
mod readahead;
mod sandbox_tree;
mod top;
mod tree;
#[cfg(test)]
mod tree_tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};

use crate::config::IoMode;
use crate::core::{ListenerId, Zones};

pub use echo_helper::HELPER_ARG as ECHO_HELPER_ARG;
pub use fs::TTL;

/// Runs the process as the mount's echo helper (`wardfs` started with [`ECHO_HELPER_ARG`] by a
/// daemon: see `echo_helper`); `args` are what follows that argument: the daemon's pid and the
/// mount point.
pub fn echo_helper(mut args: impl Iterator<Item = std::ffi::OsString>) -> std::process::ExitCode {
    let (parent, mountpoint) = (args.next(), args.next());
    echo_helper::main(parent.as_deref(), mountpoint.as_deref())
}

/// A mount that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount point {path}: {reason}")]
    MountPoint { path: String, reason: String },
    #[error(
        "mounting at {path} failed: {source} (run `wardfs doctor` to check FUSE on this machine)"
    )]
    Mount {
        path: String,
        source: std::io::Error,
    },
}

/// A mounted filesystem; unmounted when dropped.
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    zones: Arc<Zones>,
    listener: Option<ListenerId>,
    /// Unmounts a fork's binds when the fork is removed ([`binds::ForkBinds`]).
    binds: Option<ListenerId>,
    _evictor: Option<invalidate::Evictor>,
    /// Tells the mount's watchers of changes made outside it ([`echo`]).
    echo: Arc<echo::Echoes>,
    mountpoint: PathBuf,
}

impl Mount {
    /// Returns where the filesystem is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the session threads to end.
    pub fn unmount(mut self) -> std::io::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> std::io::Result<()> {
        for id in [self.listener.take(), self.binds.take()]
            .into_iter()
            .flatten()
        {
            self.zones.remove_listener(id);
        }
        // Not waited for: its requests to the mount fail once the mount is gone.
        self.echo.close();
        self._evictor.take();
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        tracing::info!(mount = %self.mountpoint.display(), "unmounting");
        // A fork bound elsewhere would answer ENOTCONN once the session ends.
        binds::unbind_all(&self.mountpoint, None);
        // A lazy unmount ends the session: the kernel aborts the connection and the worker
        // threads' reads return. fuser's own unmount then finds nothing left to do.
        unmount_lazily(&self.mountpoint)?;
        let _ = session.umount_and_join();
        Ok(())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, mount = %self.mountpoint.display(), "unmount failed");
        }
    }
}

/// Whether a mount's answer says its daemon is gone: ENOTCONN, or ECONNABORTED when the
/// connection was torn down with its io_uring queues (a daemon killed while serving over rings).
pub fn daemon_gone(answer: &Result<rustix::fs::StatVfs, rustix::io::Errno>) -> bool {
    matches!(
        answer,
        Err(rustix::io::Errno::NOTCONN | rustix::io::Errno::CONNABORTED)
    )
}

/// Makes `path` usable as a mount point: creates it, and lazily unmounts a stale FUSE mount whose
/// daemon died (its connection answers ENOTCONN or ECONNABORTED, [`daemon_gone`]).
pub fn prepare_mountpoint(path: &Path) -> Result<(), MountError> {
    let bad = |reason: String| MountError::MountPoint {
        path: path.display().to_string(),
        reason,
    };
    if is_mounted(path) {
        // statfs is never answered from the kernel's caches, so it tells a live daemon from a dead one.
        match statvfs_within(path, HUNG_MOUNT_TIMEOUT) {
            None => {
                // A daemon killed while one of its threads waited on a lock the kernel holds for a
                // request to that same daemon (an entry invalidation against a pending create)
                // never finishes dying, so its connection is never aborted and every request,
                // this statfs too, waits forever. Aborting the connection frees all of them.
                tracing::warn!(mount = %path.display(), "a mount that does not answer statfs (a daemon killed mid-request?); aborting its connection");
                abort_connection(path).map_err(|e| {
                    bad(format!(
                        "cannot abort the hung mount: {e}; as root: umount -f {}",
                        path.display()
                    ))
                })?;
                unmount_lazily(path)
                    .map_err(|e| bad(format!("cannot clear the stale mount: {e}")))?;
            }
            Some(answer) if daemon_gone(&answer) => {
                tracing::warn!(mount = %path.display(), "stale mount found (a crashed daemon?); unmounting it lazily");
                unmount_lazily(path)
                    .map_err(|e| bad(format!("cannot clear the stale mount: {e}")))?;
            }
            Some(Ok(_)) => {
                return Err(bad(
                    "something is already mounted there (another wardfs?)".into()
                ))
            }
            Some(Err(e)) => return Err(bad(format!("cannot check the existing mount: {e}"))),
        }
    }
    match std::fs::metadata(path) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => Err(bad("exists and is not a directory".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path).map_err(|e| bad(format!("cannot create it: {e}")))
        }
        Err(e) => Err(bad(e.to_string())),
    }
}

/// How long a mount found at start-up may take to answer statfs before it counts as hung.
pub const HUNG_MOUNT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Runs statvfs on `path` in a thread of its own; `None` when it did not answer within `timeout`
/// (the thread is left waiting: it returns once the connection is aborted).
pub fn statvfs_within(
    path: &Path,
    timeout: std::time::Duration,
) -> Option<Result<rustix::fs::StatVfs, rustix::io::Errno>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("wardfs-statfs".into())
        .spawn(move || {
            let _ = tx.send(rustix::fs::statvfs(&p));
        });
    if spawned.is_err() {
        // No thread to spare: ask directly rather than take a live mount for a hung one.
        return Some(rustix::fs::statvfs(path));
    }
    rx.recv_timeout(timeout).ok()
}

/// Aborts the FUSE connection of the mount at `path` (`umount2(MNT_FORCE)`, privileged): its
/// pending requests fail with ENOTCONN. The mount itself may stay (busy) until detached.
pub fn abort_connection(path: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(std::io::Error::other)?;
    // SAFETY: a valid NUL-terminated path; umount2 has no other memory effects.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_FORCE) } == 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error() {
        // Aborted, but still in use (by the very requests it failed): detached next.
        e if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
        e => Err(e),
    }
}

/// Detaches the mount at `path` (`umount2(MNT_DETACH)` when privileged, else `fusermount3 -uz`).
pub fn unmount_lazily(path: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(std::io::Error::other)?;
    // SAFETY: a valid NUL-terminated path; umount2 has no other memory effects.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let st = std::process::Command::new("fusermount3")
        .args(["-u", "-z", "-q"])
        .arg(path)
        .status()?;
    if st.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "fusermount3 -uz {} failed",
            path.display()
        )))
    }
}

/// Returns true when `path` is a mount point (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    // The mount point itself is resolved by name, never stat'ed: a hung mount would not answer.
    let canon = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => {
            std::fs::canonicalize(dir).map(|d| d.join(name))
        }
        _ => std::fs::canonicalize(path),
    };
    let Ok(canon) = canon else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split(' ').nth(4))
                .any(|mp| Path::new(&mp.replace("\\040", " ")) == canon)
        })
        .unwrap_or(false)
}

/// Mounts the zones at `mountpoint`; `io` is each zone's I/O mode, by zone index; `transport`
/// how requests reach the daemon (with io_uring, `threads / 2` ring threads per CPU, beside the
/// `threads` readers of `/dev/fuse`, which still carry FORGET and INTERRUPT).
pub fn mount(
    zones: Arc<Zones>,
    mountpoint: &Path,
    threads: usize,
    io: [IoMode; 2],
    fuse: crate::config::FuseSection,
) -> Result<Mount, MountError> {
    prepare_mountpoint(mountpoint)?;
    let echo = echo::Echoes::new();
    let read_ahead_kb = fuse.read_ahead_kb;
    let fs =
        fs::WardFs::new(zones.clone(), io, fuse, echo.clone()).map_err(|e| MountError::Mount {
            path: mountpoint.display().to_string(),
            source: e,
        })?;
    let inodes = fs.inodes.clone();
    let probe = fs.probe.clone();
    let root = rustix::process::geteuid().is_root();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("wardfs".into()),
        MountOption::Subtype("wardfs".into()),
        MountOption::DefaultPermissions,
    ];
    if root {
        // Everyone may use the mount; the kernel still checks permissions (default_permissions).
        config.acl = SessionACL::All;
    }
    // No AutoUnmount: its helper outlives a crashed daemon and, when the daemon is restarted at
    // once, can unmount the new mount instead of the stale one. A stale mount is cleared at the
    // next start instead (see `prepare_mountpoint`).
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(|e| MountError::Mount {
        path: mountpoint.display().to_string(),
        source: e,
    })?;
    let listener = zones.add_listener(Arc::new(invalidate::Direct {
        inodes: inodes.clone(),
        notifier: session.notifier(),
        echo: echo.clone(),
        zones: Arc::downgrade(&zones),
    }));
    let top = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    probe.start(&top);
    readahead::widen(&top, read_ahead_kb);
    if let Err(e) = echo::start(echo.clone(), top, Arc::downgrade(&zones)) {
        tracing::warn!(error = %e, "cannot start the echo thread; watchers on the mount (editors) hear only of changes made through it");
        echo.close();
    }
    let binds = zones.add_listener(Arc::new(binds::ForkBinds {
        mount: mountpoint.to_path_buf(),
        zones: Arc::downgrade(&zones),
    }));
    let evictor = match invalidate::Evictor::start(inodes, session.notifier()) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the eviction thread; the mount keeps one descriptor per directory the kernel holds, past the budget");
            None
        }
    };
    tracing::info!(mount = %mountpoint.display(), threads, "mounted");
    Ok(Mount {
        session: Some(session),
        zones,
        listener: Some(listener),
        binds: Some(binds),
        _evictor: evictor,
        echo,
        mountpoint: mountpoint.to_path_buf(),
    })
}
