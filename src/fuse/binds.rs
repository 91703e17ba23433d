//! A fork's tree at a directory of one's choice (`wardfs fork NAME --mount DIR`): a bind mount
//! of `MOUNT/forks/NAME` onto `DIR`, in the caller's mount namespace (root only).
//!
//! Nothing is recorded: the kernel's table of mounts (`/proc/self/mountinfo`) is the record. A
//! bind of the mount shows the same device (`major:minor`) as the mount, with the path of the
//! fork inside the filesystem as its root (`/forks/NAME`, or `/forks/NAME//deleted` once the
//! kernel dropped that entry), so the binds of a fork are found again without state: by
//! `wardfs unmount DIR` (which detaches only a fork's bind), by the daemon when the fork is
//! removed ([`ForkBinds`]) and when it unmounts (a bind left behind would answer ENOTCONN).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Weak;

use crate::config::FORKS_DIR;
use crate::core::{ChangeListener, Unlocked, ZoneId, Zones};

/// The source the mount shows in `/proc/self/mountinfo` (its type is `fuse`, or `fuse.wardfs`
/// where the subtype is kept).
const SOURCE: &str = "wardfs";

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountLine {
    /// `major:minor` of the filesystem.
    device: String,
    /// The path inside the filesystem that is the root of this mount.
    root: String,
    /// Where it is mounted.
    mountpoint: PathBuf,
    fstype: String,
    source: String,
}

impl MountLine {
    /// Whether it is a mount of wardfs.
    fn is_wardfs(&self) -> bool {
        (self.fstype == "fuse" || self.fstype.starts_with("fuse.")) && self.source == SOURCE
    }
}

/// A bind that could not be made or undone.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("{0}")]
    Refused(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// Returns the text of a mountinfo field, its `\ooo` escapes (space, tab, newline,
/// backslash) decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one line of mountinfo: `id parent major:minor root mountpoint options [optional…]
/// - fstype source superoptions`.
fn parse_line(line: &str) -> Option<MountLine> {
    let fields: Vec<&str> = line.split(' ').collect();
    let dash = fields.iter().position(|f| *f == "-")?;
    Some(MountLine {
        device: fields.get(2)?.to_string(),
        root: unescape(fields.get(3)?),
        mountpoint: PathBuf::from(unescape(fields.get(4)?)),
        fstype: fields.get(dash + 1)?.to_string(),
        source: unescape(fields.get(dash + 2)?),
    })
}

/// The mounts of this process's mount namespace, in the order they were made.
fn mounts() -> std::io::Result<Vec<MountLine>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// Returns `path` resolved, its last component by name only (a dead mount is never stat'ed).
pub fn resolved(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

/// Returns `path` made absolute, its longest existing leading part resolved and the rest
/// folded by name (`..` drops the part before it).
fn existing_part_resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<std::path::Component> = abs.components().collect();
    for keep in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..keep].iter().collect();
        let Ok(mut out) = std::fs::canonicalize(&head) else {
            continue;
        };
        for part in &parts[keep..] {
            match part {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::Normal(name) => out.push(name),
                _ => {}
            }
        }
        return out;
    }
    abs
}

/// The device of the wardfs mount at `mount` (the last one mounted there), if one is.
fn device_of(lines: &[MountLine], mount: &Path) -> Option<String> {
    let mount = resolved(mount);
    lines
        .iter()
        .rev()
        .find(|l| l.is_wardfs() && l.mountpoint == mount && l.root == "/")
        .map(|l| l.device.clone())
}

/// The fork a mount of wardfs shows, from its root: `/forks/NAME` (or beneath it).
fn fork_of(line: &MountLine) -> Option<String> {
    if !line.is_wardfs() {
        return None;
    }
    let root = line.root.strip_suffix("//deleted").unwrap_or(&line.root);
    let rest = root
        .strip_prefix('/')?
        .strip_prefix(FORKS_DIR)?
        .strip_prefix('/')?;
    let name = rest.split('/').next().filter(|n| !n.is_empty())?;
    Some(name.to_string())
}

/// Every other place the wardfs mount at `mount` is bound: each mount point with the fork it
/// shows (`None`: a bind of something else of the mount, or of the whole of it).
pub fn binds_of(mount: &Path) -> Vec<(PathBuf, Option<String>)> {
    let Ok(lines) = mounts() else {
        return Vec::new();
    };
    let Some(device) = device_of(&lines, mount) else {
        return Vec::new();
    };
    let mount = resolved(mount);
    lines
        .iter()
        .filter(|l| l.device == device && l.mountpoint != mount)
        .map(|l| (l.mountpoint.clone(), fork_of(l)))
        .collect()
}

fn c_path(path: &Path) -> Result<CString, BindError> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| BindError::Refused(format!("{}: a path with a NUL byte", path.display())))
}

/// Returns the last OS error, as root-only operations report it.
fn os_error(what: String) -> BindError {
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EPERM) {
        return BindError::Refused(format!(
            "{what}: not permitted: mounting and unmounting need root (CAP_SYS_ADMIN)"
        ));
    }
    BindError::Io { what, source: e }
}

/// Binds `MOUNT/forks/NAME` (the fork `name` of the wardfs mount at `mount`) onto the
/// directory `dir` ([`check_target`] first).
pub fn bind(mount: &Path, name: &str, dir: &Path) -> Result<PathBuf, BindError> {
    let target = check_target(mount, dir)?;
    let source = resolved(mount).join(FORKS_DIR).join(name);
    let (src, dest) = (c_path(&source)?, c_path(&target)?);
    // SAFETY: valid NUL-terminated paths; a bind takes no filesystem type or data.
    let done = unsafe {
        libc::mount(
            src.as_ptr(),
            dest.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if done != 0 {
        return Err(os_error(format!(
            "cannot bind {} onto {}",
            source.display(),
            target.display()
        )));
    }
    Ok(target)
}

/// Checks that a fork of the wardfs mount at `mount` can be bound at `dir` (made when
/// missing); returns `dir` resolved. Refuses a `mount` that is not wardfs's, a `dir` inside the
/// mount, one that is not an empty directory (its files would be hidden), and one that is a
/// mount point already.
pub fn check_target(mount: &Path, dir: &Path) -> Result<PathBuf, BindError> {
    let lines = mounts().map_err(|source| BindError::Io {
        what: "/proc/self/mountinfo".into(),
        source,
    })?;
    if device_of(&lines, mount).is_none() {
        return Err(BindError::Refused(format!(
            "{} is not a wardfs mount: start the daemon with its mount (`wardfs serve`, \
             not --no-mount)",
            mount.display()
        )));
    }
    // Before anything is made: a directory made inside the mount would be made in a zone.
    let inside = |p: &Path| p.starts_with(resolved(mount));
    if inside(&existing_part_resolved(dir)) {
        return Err(BindError::Refused(format!(
            "{} is inside the mount {}: choose a directory outside it",
            dir.display(),
            mount.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|source| BindError::Io {
        what: format!("cannot make {}", dir.display()),
        source,
    })?;
    let target = resolved(dir);
    if inside(&target) {
        return Err(BindError::Refused(format!(
            "{} leads inside the mount {}: choose a directory outside it",
            dir.display(),
            mount.display()
        )));
    }
    if lines.iter().any(|l| l.mountpoint == target) {
        return Err(BindError::Refused(format!(
            "{} is a mount point already: unmount it first (`wardfs unmount {}` for a fork's)",
            dir.display(),
            dir.display()
        )));
    }
    let mut entries = std::fs::read_dir(&target).map_err(|source| BindError::Io {
        what: format!("{} is not a directory one can list", dir.display()),
        source,
    })?;
    if entries.next().is_some() {
        return Err(BindError::Refused(format!(
            "{} is not empty: its files would be hidden under the fork; choose an empty \
             directory",
            dir.display()
        )));
    }
    Ok(target)
}

/// Detaches the mount at `dir` (lazily: open files keep working until closed).
fn detach(dir: &Path) -> Result<(), BindError> {
    let c = c_path(dir)?;
    // SAFETY: a valid NUL-terminated path; umount2 has no other memory effects.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    Err(os_error(format!("cannot unmount {}", dir.display())))
}

/// Unmounts `dir` when it is a fork's bind (made by [`bind`]); returns the fork's name.
/// Refuses anything else mounted there, and a `dir` where nothing is mounted.
pub fn unbind(dir: &Path) -> Result<String, BindError> {
    let target = resolved(dir);
    let lines = mounts().map_err(|source| BindError::Io {
        what: "/proc/self/mountinfo".into(),
        source,
    })?;
    let Some(line) = lines.iter().rev().find(|l| l.mountpoint == target) else {
        return Err(BindError::Refused(format!(
            "{}: nothing is mounted there",
            dir.display()
        )));
    };
    let Some(fork) = fork_of(line) else {
        return Err(BindError::Refused(format!(
            "{} is not a fork's mount (one `wardfs fork NAME --mount DIR` made): nothing \
             unmounted",
            dir.display()
        )));
    };
    detach(&target)?;
    Ok(fork)
}

/// Detaches every bind of the mount at `mount` that shows the fork `name`, or every bind of
/// it at all when `name` is `None`; failures are logged.
pub fn unbind_all(mount: &Path, name: Option<&str>) {
    for (dir, fork) in binds_of(mount) {
        if name.is_some() && fork.as_deref() != name {
            continue;
        }
        match detach(&dir) {
            Ok(()) => tracing::info!(dir = %dir.display(), fork = ?fork, "unmounted a fork's bind"),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot unmount a fork's bind")
            }
        }
    }
}

/// Unmounts a fork's binds when the fork is removed.
pub struct ForkBinds {
    pub mount: PathBuf,
    /// Weak: the zones hold this listener.
    pub zones: Weak<Zones>,
}

impl ChangeListener for ForkBinds {
    fn changed(&self, _paths: &[PathBuf], _unlocked: &Unlocked) {}

    fn forks_changed(&self, name: &str, _unlocked: &Unlocked) {
        // Told when a fork is made too: only a fork the zones no longer serve loses its binds.
        let Some(zones) = self.zones.upgrade() else {
            return;
        };
        let served = ZoneId::fork(name).is_some_and(|id| zones.fork_ids().contains(&id));
        if !served {
            unbind_all(&self.mount, Some(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mountinfo_line_is_read_with_its_escapes() {
        let l = parse_line(
            "812 30 0:93 /forks/try-a /tmp/my\\040dir rw,nosuid shared:520 - fuse wardfs rw,user_id=0",
        )
        .unwrap();
        assert_eq!(l.device, "0:93");
        assert_eq!(l.root, "/forks/try-a");
        assert_eq!(l.mountpoint, Path::new("/tmp/my dir"));
        assert_eq!(fork_of(&l).as_deref(), Some("try-a"));
        let gone = MountLine {
            root: "/forks/try-a//deleted".into(),
            ..l.clone()
        };
        assert_eq!(fork_of(&gone).as_deref(), Some("try-a"));
        let whole = MountLine {
            root: "/".into(),
            ..l.clone()
        };
        assert_eq!(fork_of(&whole), None);
        let other = MountLine {
            fstype: "ext4".into(),
            ..l.clone()
        };
        assert_eq!(fork_of(&other), None);
        let another_fuse = MountLine {
            source: "sshfs".into(),
            ..l
        };
        assert_eq!(fork_of(&another_fuse), None);
        assert_eq!(unescape("a\\134b\\011c\\12"), "a\\b\tc\\12");
    }
}
