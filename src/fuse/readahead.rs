//! The mount's read-ahead window (`[fuse] read_ahead_kb`): how far ahead of a sequential reader
//! the kernel asks the daemon for pages of a file that its page cache does not hold.
//!
//! The kernel gives a FUSE mount's device a window of 128 KiB and lowers it, never raises it, to
//! what the daemon answers in `INIT`; only the device's `read_ahead_kb` in `/sys/class/bdi/`
//! raises it. So once the kernel has the `INIT` answer (a request of the daemon's own waits for
//! it), a thread writes the configured window there. With 128 KiB a large file's first read in
//! the cached I/O mode is a `READ` of 128 KiB at a time, one after another; with 1024 each
//! carries a mebibyte (docs/benchmarks.md). Writing it needs root; without, the kernel's stays.

use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

/// The `read_ahead_kb` file of the device `major:minor`.
fn window_file(major: u32, minor: u32) -> PathBuf {
    PathBuf::from(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"))
}

/// Sets the window of the mount at `mountpoint` to `kb` KiB from a thread of its own (its
/// `statx` is a request to the mount, which must not come from a thread serving requests). `0`
/// leaves the kernel's window.
pub fn widen(mountpoint: &Path, kb: u32) {
    if kb == 0 {
        return;
    }
    let mountpoint = mountpoint.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("wardfs-readahead".into())
        .spawn(move || match set(&mountpoint, kb) {
            Ok(file) => tracing::debug!(file = %file.display(), kb, "read-ahead window set"),
            Err(e) => tracing::debug!(error = %e, kb, "the read-ahead window stays the kernel's"),
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "cannot start the read-ahead window's thread");
    }
}

/// Waits for the kernel to have the mount's `INIT` answer (a forced `statx` of the mount's root
/// is a `GETATTR`, which the kernel holds until then), then writes the window. The root is
/// opened without following a link and must be a FUSE file system's, so a path swapped
/// meanwhile changes no other device's window.
fn set(mountpoint: &Path, kb: u32) -> std::io::Result<PathBuf> {
    let root = rustix::fs::open(
        mountpoint,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::statx(
        &root,
        "",
        AtFlags::EMPTY_PATH | AtFlags::STATX_FORCE_SYNC,
        StatxFlags::BASIC_STATS,
    )?;
    if rustix::fs::fstatfs(&root)?.f_type as i64 != libc::FUSE_SUPER_MAGIC {
        return Err(std::io::Error::other(format!(
            "{} is not a FUSE mount",
            mountpoint.display()
        )));
    }
    let file = window_file(st.stx_dev_major, st.stx_dev_minor);
    std::fs::write(&file, format!("{kb}\n"))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a FUSE mount's window is written: a plain directory, or a symlink put in the
    /// mount's place, is refused before anything is written.
    #[test]
    fn only_a_fuse_mounts_window_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let e = set(dir.path(), 1024).unwrap_err();
        assert!(e.to_string().contains("not a FUSE mount"), "{e}");
        let link = dir.path().join("mnt");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let e = set(&link, 1024).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
    }

    #[test]
    fn the_window_file_is_the_devices_in_sysfs() {
        assert_eq!(
            window_file(0, 42),
            Path::new("/sys/class/bdi/0:42/read_ahead_kb")
        );
    }
}
