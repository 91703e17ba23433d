//! The echo's helper: a process of its own (the `wardfs` binary started with [`HELPER_ARG`])
//! that performs the echo's operations through the mount (`super::echo`), one at a time, as the
//! echo thread asks over a pipe, and answers each with its errno.
//!
//! A process of its own, never a thread of the daemon: a request to a FUSE mount that the daemon
//! has read waits for its answer uninterruptibly. A daemon thread waiting so when the daemon is
//! killed (SIGKILL) would never finish dying, so the daemon would never close `/dev/fuse`, whose
//! closing aborts the connection, and the mount and everything using it would hang.
//!
//! The helper is also the mount's watchdog. A daemon thread may wait for the kernel all the same:
//! a notification to the mount (an invalidation) waits for the directory's lock, which a process
//! waiting for the daemon's answer may hold, the helper among them. When the daemon is killed
//! then, that thread never ends either. So the helper is told when the echo thread that started
//! it ends (`PR_SET_PDEATHSIG`, [`WATCHDOG_SIGNAL`]; the echo thread never waits for the
//! kernel, so it ends at once), unless it was stopped first (the daemon kills it when it stops
//! the echo), and then aborts the mount's connection (`/sys/fs/fuse/connections/N/abort`, or a
//! forced unmount as root): every request waiting fails, every thread of the daemon's is let go,
//! the daemon dies, and so does the helper. It holds nothing of the mount between two bursts
//! ([`Op::End`]) and inherits no descriptor of the daemon's (all are marked close-on-exec before
//! it starts).
//!
//! The protocol: each request is a tag byte and its fields (numbers little-endian, paths as a
//! length and bytes); each answer four bytes, the errno (0: done).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Timespec, Timestamps};
use rustix::io::Errno;

/// The argument that starts the `wardfs` binary as the echo's helper (`src/main.rs`), followed by
/// the daemon's pid and the mount point.
pub const HELPER_ARG: &str = "--wardfs-mount-echo-helper";

/// The signal the helper gets when the thread that started it ends (`PR_SET_PDEATHSIG`): not
/// one a service manager or a terminal sends to every process of a group.
const WATCHDOG_SIGNAL: i32 = libc::SIGUSR2;

/// Longest path the helper takes (a mount-relative path).
const MAX_PATH: u32 = 64 * 1024;

/// A time as `utimensat` takes it: seconds and nanoseconds.
pub type Time = (i64, i64);

/// One operation through the mount; paths relative to the mount's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Opens the mount's root (at this absolute path): refused unless it is a FUSE mount.
    Begin(PathBuf),
    /// Closes everything of the mount the helper holds.
    End,
    /// Makes `rel` of `kind` with `mode` (a symlink pointing at `target`).
    Create {
        rel: PathBuf,
        kind: FileType,
        mode: u32,
        target: Option<PathBuf>,
    },
    /// Opens `rel` for writing and truncates it to `size`; when it may not be opened for
    /// writing, sets its times to `atime` and `mtime` instead.
    Modify {
        rel: PathBuf,
        size: u64,
        atime: Time,
        mtime: Time,
    },
    /// Sets `rel`'s times (not following a symlink).
    Attrib {
        rel: PathBuf,
        atime: Time,
        mtime: Time,
    },
    /// Removes `rel` (`rmdir` when `dir`).
    Remove { rel: PathBuf, dir: bool },
    /// Renames `from` to `to`.
    Rename { from: PathBuf, to: PathBuf },
}

fn put_path(out: &mut Vec<u8>, p: &Path) {
    let b = p.as_os_str().as_bytes();
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_time(out: &mut Vec<u8>, t: Time) {
    out.extend_from_slice(&t.0.to_le_bytes());
    out.extend_from_slice(&t.1.to_le_bytes());
}

fn kind_byte(k: FileType) -> u8 {
    match k {
        FileType::RegularFile => 0,
        FileType::Directory => 1,
        FileType::Symlink => 2,
        FileType::Fifo => 3,
        FileType::Socket => 4,
        _ => 5,
    }
}

fn kind_of(b: u8) -> FileType {
    match b {
        0 => FileType::RegularFile,
        1 => FileType::Directory,
        2 => FileType::Symlink,
        3 => FileType::Fifo,
        4 => FileType::Socket,
        _ => FileType::Unknown,
    }
}

impl Op {
    /// The request's bytes.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Op::Begin(root) => {
                out.push(0);
                put_path(&mut out, root);
            }
            Op::End => out.push(1),
            Op::Create {
                rel,
                kind,
                mode,
                target,
            } => {
                out.push(2);
                put_path(&mut out, rel);
                out.push(kind_byte(*kind));
                out.extend_from_slice(&mode.to_le_bytes());
                put_path(&mut out, target.as_deref().unwrap_or(Path::new("")));
            }
            Op::Modify {
                rel,
                size,
                atime,
                mtime,
            } => {
                out.push(3);
                put_path(&mut out, rel);
                out.extend_from_slice(&size.to_le_bytes());
                put_time(&mut out, *atime);
                put_time(&mut out, *mtime);
            }
            Op::Attrib { rel, atime, mtime } => {
                out.push(4);
                put_path(&mut out, rel);
                put_time(&mut out, *atime);
                put_time(&mut out, *mtime);
            }
            Op::Remove { rel, dir } => {
                out.push(5);
                put_path(&mut out, rel);
                out.push(u8::from(*dir));
            }
            Op::Rename { from, to } => {
                out.push(6);
                put_path(&mut out, from);
                put_path(&mut out, to);
            }
        }
        out
    }

    /// The next request from `r`; `None` at its end.
    fn decode(r: &mut impl Read) -> std::io::Result<Option<Op>> {
        let mut tag = [0u8; 1];
        match r.read_exact(&mut tag) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            other => other?,
        }
        let op = match tag[0] {
            0 => Op::Begin(path(r)?),
            1 => Op::End,
            2 => {
                let rel = path(r)?;
                let kind = kind_of(u8s::<1>(r)?[0]);
                let mode = u32::from_le_bytes(u8s(r)?);
                let target = Some(path(r)?).filter(|t| !t.as_os_str().is_empty());
                Op::Create {
                    rel,
                    kind,
                    mode,
                    target,
                }
            }
            3 => Op::Modify {
                rel: path(r)?,
                size: u64::from_le_bytes(u8s(r)?),
                atime: time(r)?,
                mtime: time(r)?,
            },
            4 => Op::Attrib {
                rel: path(r)?,
                atime: time(r)?,
                mtime: time(r)?,
            },
            5 => Op::Remove {
                rel: path(r)?,
                dir: u8s::<1>(r)?[0] != 0,
            },
            6 => Op::Rename {
                from: path(r)?,
                to: path(r)?,
            },
            t => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("echo helper: unknown request {t}"),
                ))
            }
        };
        Ok(Some(op))
    }
}

fn u8s<const N: usize>(r: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn path(r: &mut impl Read) -> std::io::Result<PathBuf> {
    let n = u32::from_le_bytes(u8s(r)?);
    if n > MAX_PATH {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("echo helper: a path of {n} bytes (at most {MAX_PATH})"),
        ));
    }
    let mut b = vec![0u8; n as usize];
    r.read_exact(&mut b)?;
    Ok(PathBuf::from(OsStr::from_bytes(&b)))
}

fn time(r: &mut impl Read) -> std::io::Result<Time> {
    Ok((i64::from_le_bytes(u8s(r)?), i64::from_le_bytes(u8s(r)?)))
}

/// The running helper, as the echo thread holds it; killed when dropped.
pub struct Helper {
    child: Child,
    to: ChildStdin,
    from: ChildStdout,
}

impl Helper {
    /// Starts the helper of the mount at `mountpoint`: this same binary (`/proc/self/exe`), with
    /// no environment and no descriptor but its pipes, told when the calling thread ends.
    pub fn spawn(mountpoint: &Path) -> std::io::Result<Helper> {
        let parent = std::process::id();
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg(HELPER_ARG)
            .arg(parent.to_string())
            .arg(mountpoint)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: prctl and close_range are async-signal-safe and touch no memory of the
        // parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, WATCHDOG_SIGNAL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Every descriptor of the daemon's (/dev/fuse above all) closes at exec.
                libc::syscall(
                    libc::SYS_close_range,
                    3u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let to = child.stdin.take().expect("piped");
        let from = child.stdout.take().expect("piped");
        Ok(Helper { child, to, from })
    }

    /// The helper's process id (the `pid` of its requests to the mount).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Performs `op` through the helper: `Ok(Err(errno))` when the operation failed,
    /// `Err` when the helper is gone.
    pub fn run(&mut self, op: &Op) -> std::io::Result<Result<(), Errno>> {
        self.to.write_all(&op.encode())?;
        self.to.flush()?;
        let n = i32::from_le_bytes(u8s(&mut self.from)?);
        Ok(match n {
            0 => Ok(()),
            n => Err(Errno::from_raw_os_error(n)),
        })
    }
}

impl Drop for Helper {
    /// Stops the helper (SIGKILL: it aborts nothing), and reaps it.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The helper process: performs the requests read from stdin, answering each on stdout, until
/// stdin ends; aborts the connection of the mount at `mountpoint` when the daemon's thread that
/// started it ends without stopping it (see the module's docs). `parent` is the daemon's pid.
pub fn main(parent: Option<&OsStr>, mountpoint: Option<&OsStr>) -> std::process::ExitCode {
    let parent: Option<i32> = parent.and_then(|p| p.to_str()?.parse().ok());
    let Some(mountpoint) = mountpoint.map(PathBuf::from) else {
        return std::process::ExitCode::FAILURE;
    };
    if let Err(e) = watch_parent(mountpoint) {
        eprintln!("wardfs echo helper: cannot watch the daemon: {e}");
        return std::process::ExitCode::FAILURE;
    }
    // Started by the daemon only; its death may have come before the signal was asked for.
    // SAFETY: getppid has no preconditions.
    if parent != Some(unsafe { libc::getppid() }) {
        return std::process::ExitCode::FAILURE;
    }
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut at = Performer::default();
    loop {
        let op = match Op::decode(&mut input) {
            Ok(Some(op)) => op,
            Ok(None) => return std::process::ExitCode::SUCCESS,
            Err(_) => return std::process::ExitCode::FAILURE,
        };
        let errno = match at.perform(&op) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error(),
        };
        if output
            .write_all(&errno.to_le_bytes())
            .and_then(|()| output.flush())
            .is_err()
        {
            return std::process::ExitCode::FAILURE;
        }
    }
}

/// Starts the watchdog: a thread that waits for [`WATCHDOG_SIGNAL`] (blocked everywhere else,
/// so that it reaches this thread even while the one performing requests waits for the kernel)
/// and then aborts the connection of the mount at `mountpoint` and ends the process. A terminal's
/// SIGINT, which the daemon handles itself, is ignored.
fn watch_parent(mountpoint: PathBuf) -> std::io::Result<()> {
    let conn = connection_of(&mountpoint);
    // SAFETY: plain signal-mask calls on a set built here; SIG_IGN for SIGINT.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, WATCHDOG_SIGNAL);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        set
    };
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: waits for a signal of `set`, blocked in every thread.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            abort_connection(conn, &mountpoint);
            // SAFETY: ends the process at once, the other thread waiting or not.
            unsafe { libc::_exit(0) }
        })?;
    Ok(())
}

/// The FUSE connection number of the mount at `mountpoint` (its device's minor number, the
/// name of its directory in `/sys/fs/fuse/connections`), read from `/proc/self/mountinfo`
/// without asking the mount anything.
fn connection_of(mountpoint: &Path) -> Option<u32> {
    let canon = match (mountpoint.parent(), mountpoint.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir).ok()?.join(name),
        _ => mountpoint.to_path_buf(),
    };
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .rev()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = f.iter().skip_while(|x| **x != "-").nth(1)?;
            let at = Path::new(&f.get(4)?.replace("\\040", " ")).to_path_buf();
            (fstype.starts_with("fuse") && at == canon)
                .then(|| f.get(2)?.split(':').nth(1)?.parse().ok())
                .flatten()
        })
        .next()
}

/// Aborts the connection `conn` of the mount at `mountpoint`: every request waiting for the
/// daemon fails (`ENOTCONN`). Through `/sys/fs/fuse/connections` (the mount's owner may), else
/// a forced unmount (root).
fn abort_connection(conn: Option<u32>, mountpoint: &Path) {
    if let Some(n) = conn {
        if std::fs::write(format!("/sys/fs/fuse/connections/{n}/abort"), "1").is_ok() {
            return;
        }
    }
    if let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) {
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_FORCE) };
    }
}

/// What the helper holds of the mount during a burst.
#[derive(Default)]
struct Performer {
    root: Option<OwnedFd>,
}

impl Performer {
    fn perform(&mut self, op: &Op) -> Result<(), Errno> {
        match op {
            Op::Begin(root) => {
                let fd = rustix::fs::open(
                    root,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                if rustix::fs::fstatfs(&fd)?.f_type as i64 != libc::FUSE_SUPER_MAGIC {
                    return Err(Errno::NODEV);
                }
                self.root = Some(fd);
                Ok(())
            }
            Op::End => {
                self.root = None;
                Ok(())
            }
            Op::Create {
                rel,
                kind,
                mode,
                target,
            } => {
                let (dir, name) = self.parent(rel)?;
                let mode = Mode::from_raw_mode(*mode & 0o7777);
                match kind {
                    FileType::Directory => rustix::fs::mkdirat(&dir, name, mode),
                    FileType::RegularFile => rustix::fs::openat(
                        &dir,
                        name,
                        OFlags::WRONLY
                            | OFlags::CREATE
                            | OFlags::EXCL
                            | OFlags::NOFOLLOW
                            | OFlags::CLOEXEC,
                        mode,
                    )
                    .map(drop),
                    FileType::Symlink => {
                        rustix::fs::symlinkat(target.as_deref().ok_or(Errno::INVAL)?, &dir, name)
                    }
                    FileType::Fifo | FileType::Socket => {
                        rustix::fs::mknodat(&dir, name, *kind, mode, 0)
                    }
                    _ => Err(Errno::OPNOTSUPP),
                }
            }
            Op::Modify {
                rel,
                size,
                atime,
                mtime,
            } => {
                let (dir, name) = self.parent(rel)?;
                let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
                match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
                    Ok(fd) => rustix::fs::ftruncate(&fd, *size),
                    Err(Errno::ACCESS | Errno::PERM | Errno::ROFS | Errno::TXTBSY) => {
                        set_times(&dir, name, *atime, *mtime)
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Attrib { rel, atime, mtime } => {
                let (dir, name) = self.parent(rel)?;
                set_times(&dir, name, *atime, *mtime)
            }
            Op::Remove { rel, dir: is_dir } => {
                let (dir, name) = self.parent(rel)?;
                let flags = if *is_dir {
                    AtFlags::REMOVEDIR
                } else {
                    AtFlags::empty()
                };
                rustix::fs::unlinkat(&dir, name, flags)
            }
            Op::Rename { from, to } => {
                let (from_dir, from_name) = self.parent(from)?;
                let (to_dir, to_name) = self.parent(to)?;
                rustix::fs::renameat(&from_dir, from_name, &to_dir, to_name)
            }
        }
    }

    /// The directory of `rel` (opened through the mount, beneath its root: no symlink, no other
    /// mount) and `rel`'s name.
    fn parent<'r>(&self, rel: &'r Path) -> Result<(OwnedFd, &'r OsStr), Errno> {
        let root = self.root.as_ref().ok_or(Errno::BADF)?;
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Err(Errno::INVAL);
        };
        let dir = rustix::fs::openat2(
            root,
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV,
        )?;
        Ok((dir, name))
    }
}

fn set_times(dir: &OwnedFd, name: &OsStr, atime: Time, mtime: Time) -> Result<(), Errno> {
    let ts = |t: Time| Timespec {
        tv_sec: t.0,
        tv_nsec: t.1 as _,
    };
    let times = Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    };
    rustix::fs::utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_reads_back_as_it_was_written() {
        let ops = [
            Op::Begin("/tmp/mnt".into()),
            Op::End,
            Op::Create {
                rel: "workspace/a b/\u{1b}x".into(),
                kind: FileType::Symlink,
                mode: 0o777,
                target: Some("../t".into()),
            },
            Op::Create {
                rel: "workspace/d".into(),
                kind: FileType::Directory,
                mode: 0o755,
                target: None,
            },
            Op::Modify {
                rel: "workspace/f".into(),
                size: 1 << 40,
                atime: (-5, 7),
                mtime: (1_800_000_000, 999_999_999),
            },
            Op::Attrib {
                rel: "cache/l".into(),
                atime: (1, 2),
                mtime: (3, 4),
            },
            Op::Remove {
                rel: "forks/f1/x".into(),
                dir: true,
            },
            Op::Rename {
                from: "workspace/a".into(),
                to: "workspace/b/c".into(),
            },
        ];
        let bytes: Vec<u8> = ops.iter().flat_map(Op::encode).collect();
        let mut r = &bytes[..];
        for op in &ops {
            assert_eq!(Op::decode(&mut r).unwrap().as_ref(), Some(op));
        }
        assert_eq!(Op::decode(&mut r).unwrap(), None);
        // A path longer than the helper takes is refused, not allocated.
        let mut huge = vec![3u8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Op::decode(&mut &huge[..]).is_err());
    }
}
