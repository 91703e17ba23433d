//! The FUSE side of a mounted daemon: checks that FUSE is usable ([`require_fuse`]), whether a
//! path is a mount point ([`mounted`]), and the lazy unmount that cleans up after a daemon that
//! died with its mount ([`lazy_unmount`]). [`Daemon`](super::daemon::Daemon) mounts when its
//! options say so ([`Options::mount`](super::daemon::Options::mount)).

use std::path::Path;
use std::process::Command;

use super::tools::which;

/// Fails the test, naming what to install, unless `/dev/fuse` and `fusermount3` are there.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: FUSE tests need the fuse kernel module and `apt-get install fuse3`"
    );
    assert!(
        which("fusermount3"),
        "fusermount3 is not installed; install it with `apt-get install fuse3` (make test does this)"
    );
}

/// Whether `path` is a mount point of this process's mount namespace.
pub fn mounted(path: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(path) else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split(' ').nth(4))
                .any(|mp| Path::new(mp) == canon)
        })
        .unwrap_or(false)
}

/// Detaches the mount at `path` if there is one (`fusermount3 -u -z`).
pub fn lazy_unmount(path: &Path) {
    if mounted(path) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(path)
            .status();
    }
}
