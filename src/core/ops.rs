//! The file operations: read, write, edit, delete, exists, list, stat, mkdir, move, resolve.
//!
//! Every operation takes a virtual path as the caller gave it, parses it with [`super::path`], and
//! reaches the file beneath the zone's directory fd. Replacements are atomic (a temp file in the
//! same directory, renamed over the name), so readers never see a torn file and a failed write
//! leaves the old contents. Every successful mutation is recorded in the journal.

use std::ffi::{CStr, CString};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use serde::{Deserialize, Serialize};

use super::error::{FsError, FsResult};
use super::foreign;
use super::path::{self, Target, VPath, ZoneId};
use super::remote_zone::RemoteZone;
use super::sandbox_node::{Removal, Replace};
use super::zone::{kind_of, mtime_ms, LocalZone};
use super::{EntryKind, Limit, Zone, Zones};
use crate::state::Origin;

/// How many leading bytes are checked for NUL when deciding a file is binary.
const BINARY_PROBE: usize = 8192;

/// The result of `read`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReadResult {
    pub path: String,
    pub content: String,
    /// 1-based number of the first line returned.
    pub offset: u64,
    /// Number of lines returned.
    pub lines: u64,
    pub total_lines: u64,
    /// True when lines after the returned ones exist.
    pub truncated: bool,
    pub size: u64,
}

/// The result of `write` and `write_binary`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WriteResult {
    pub path: String,
    pub bytes: u64,
    /// True when the file did not exist before.
    pub created: bool,
}

/// The result of `edit`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EditResult {
    pub path: String,
    pub replacements: usize,
    pub bytes: u64,
}

/// One directory entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
    pub size: u64,
    pub mtime_ms: i64,
}

/// The result of `list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListResult {
    pub path: String,
    pub entries: Vec<Entry>,
}

/// The result of `stat` (symlinks are not followed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatResult {
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    /// Permission bits, e.g. 420 (0o644).
    pub mode: u32,
    pub mtime_ms: i64,
    pub nlink: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub read_only: bool,
}

/// The result of `exists`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExistsResult {
    pub path: String,
    pub exists: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<EntryKind>,
}

/// The result of `resolve`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResolveResult {
    pub path: String,
    pub real_path: String,
    pub exists: bool,
    pub zone_root: String,
}

fn io_err<'a>(vp: &'a VPath, op: &'static str) -> impl Fn(std::io::Error) -> FsError + 'a {
    move |e| FsError::from_io(&vp.to_string(), op, e)
}

fn errno_err<'a>(vp: &'a VPath, op: &'static str) -> impl Fn(rustix::io::Errno) -> FsError + 'a {
    move |e| FsError::from_io(&vp.to_string(), op, e.into())
}

/// A file being written to a temp name beside its destination; renamed into place on commit,
/// removed when dropped uncommitted.
pub struct AtomicWrite<'z> {
    zones: &'z Zones,
    vp: VPath,
    parent: OwnedFd,
    tmp: String,
    file: Option<std::fs::File>,
    written: u64,
    /// The size rule of the write (`None`: a pull, which caps what it fetches itself).
    limit: Option<Limit>,
    /// Permission bits to give the file instead of keeping the old file's.
    mode: Option<u32>,
    /// The destination is in a remote zone: the temp file is in its spool, uploaded on commit.
    remote: bool,
    /// Sync the file before the rename and its directory after it (survives a power loss).
    sync: bool,
}

impl<'z> AtomicWrite<'z> {
    /// Returns the path that will be replaced (after following symlinks inside the zone).
    pub fn path(&self) -> &VPath {
        &self.vp
    }

    /// Gives the file these permission bits (masked by the umask) instead of the old file's.
    pub fn set_mode(&mut self, mode: u32) {
        self.mode = Some(mode & 0o7777 & !self.zones.umask);
    }

    /// Makes the commit durable: the file is synced before the rename and its directory after,
    /// so an acknowledged write survives a power loss, not only a crash of the daemon.
    pub fn set_sync(&mut self, sync: bool) {
        self.sync = sync;
    }

    /// Appends bytes, failing with `TOO_LARGE` past the write limit.
    pub fn write_chunk(&mut self, buf: &[u8]) -> FsResult<()> {
        self.written += buf.len() as u64;
        if let Some(limit) = self.limit {
            self.zones
                .check_size(limit, &self.vp, "the body", self.written)?;
        }
        let file = self.file.as_mut().expect("open until commit");
        file.write_all(buf).map_err(io_err(&self.vp, "write"))
    }

    /// Renames the temp file over the destination, keeping the old file's permission bits.
    pub fn commit(self, origin: Origin) -> FsResult<WriteResult> {
        let _guard = self.zones.locks.lock(&self.vp);
        self.commit_locked(None, "write", origin)
    }

    /// Commits while the caller holds the path lock; with `expect`, fails with `CONFLICT` when
    /// the destination is no longer what the caller saw (and `IS_DIR` when it is a directory).
    fn commit_locked(
        mut self,
        expect: Option<Seen>,
        op: &str,
        origin: Origin,
    ) -> FsResult<WriteResult> {
        if self.remote {
            return self.commit_remote(op, origin);
        }
        let name = self.vp.name().expect("not a root").to_string();
        self.zones.before_replace();
        let existing = check_seen(&self.parent, &name, &self.vp, expect)?;
        let mode = match &existing {
            _ if self.mode.is_some() => self.mode.unwrap_or_default(),
            Some(st) => st.st_mode & 0o7777,
            None => 0o666 & !self.zones.umask,
        };
        let file = self.file.take().expect("open until commit");
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
            .map_err(errno_err(&self.vp, "chmod"))?;
        if self.sync {
            file.sync_all().map_err(io_err(&self.vp, "fsync"))?;
        }
        drop(file);
        rustix::fs::renameat(&self.parent, self.tmp.as_str(), &self.parent, name.as_str())
            .map_err(errno_err(&self.vp, "rename"))?;
        self.tmp.clear();
        if self.sync {
            sync_dir(&self.parent).map_err(errno_err(&self.vp, "fsync directory"))?;
        }
        self.zones
            .record(&self.vp, op, Some(self.written), None, origin);
        Ok(WriteResult {
            path: self.vp.to_string(),
            bytes: self.written,
            created: existing.is_none(),
        })
    }
}

impl Drop for AtomicWrite<'_> {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let _ = rustix::fs::unlinkat(&self.parent, self.tmp.as_str(), AtFlags::empty());
        }
    }
}

/// What [`Zones::seen`] found at a path: compared again by [`Zones::replace_entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nothing there.
    Absent,
    /// A file, symlink or directory with this identity.
    Entry(Identity),
    /// A remote zone: no identity to compare.
    Unknown,
}

/// One version of a directory entry (inode, size, mtime, ctime), as [`Zones::seen`] read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity(Fingerprint);

/// The new entry [`Zones::replace_entry`] puts at a path.
pub enum Replacement<'a> {
    /// A regular file: its bytes (streamed) and permission bits (masked).
    File {
        content: &'a mut dyn Read,
        mode: u32,
    },
    /// A symlink to this target (stored verbatim; the caller has validated it).
    Symlink(&'a str),
}

/// Streams `content` into an atomic write (bounded by the write limit, 64 KiB at a time).
fn copy_into(w: &mut AtomicWrite<'_>, content: &mut dyn Read) -> FsResult<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match content.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FsError::from_io(&w.vp.to_string(), "read", e)),
        };
        w.write_chunk(&buf[..n])?;
    }
}

/// What identifies one version of a file: replaced, rewritten or touched files differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl Fingerprint {
    fn of(st: &Stat) -> Fingerprint {
        Fingerprint {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// Stats `name` in `parent` (not following a symlink) under the caller's path lock and checks it
/// against `expect`: `CONFLICT` when it is no longer what the caller saw, `IS_DIR` for a directory.
fn check_seen(
    parent: &OwnedFd,
    name: &str,
    vp: &VPath,
    expect: Option<Seen>,
) -> FsResult<Option<Stat>> {
    let now = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Some(st),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(errno_err(vp, "stat")(e)),
    };
    if let Some(exp) = expect {
        let current = match &now {
            Some(st) => Seen::Entry(Identity(Fingerprint::of(st))),
            None => Seen::Absent,
        };
        if exp != Seen::Unknown && current != exp {
            return Err(FsError::Conflict {
                path: vp.to_string(),
                reason:
                    "the file changed between reading and replacing it; read it again and retry"
                        .into(),
            });
        }
    }
    if let Some(st) = &now {
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
    }
    Ok(now)
}

/// Syncs a directory given by an `O_PATH` fd (reopened for reading: `fsync` needs a real fd).
fn sync_dir(dir: &OwnedFd) -> rustix::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&fd)
}

/// Checks UTF-8 and the absence of NUL bytes in the probe window.
fn check_text(vp: &VPath, bytes: &[u8], probe_nul: bool) -> FsResult<()> {
    if probe_nul {
        if let Some(i) = memchr::memchr(0, &bytes[..bytes.len().min(BINARY_PROBE)]) {
            return Err(FsError::Binary {
                path: vp.to_string(),
                reason: format!("NUL byte at offset {i}"),
            });
        }
    }
    std::str::from_utf8(bytes)
        .map(|_| ())
        .map_err(|e| FsError::Binary {
            path: vp.to_string(),
            reason: format!("invalid UTF-8 at byte {}", e.valid_up_to()),
        })
}

fn count_lines(bytes: &[u8]) -> u64 {
    let n = memchr::memchr_iter(b'\n', bytes).count() as u64;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        n
    } else {
        n + 1
    }
}

impl Zones {
    fn writable_local(&self, vp: &VPath) -> FsResult<&LocalZone> {
        let z = self.local(vp)?;
        z.check_writable(vp)?;
        Ok(z)
    }

    /// Reads a UTF-8 text file, optionally a window of lines (`offset` is the 1-based first line).
    pub fn read(
        &self,
        path: &str,
        offset: Option<u64>,
        limit: Option<u64>,
    ) -> FsResult<ReadResult> {
        let vp = path::parse_entry(path)?;
        if offset == Some(0) {
            return Err(FsError::invalid(
                "offset",
                "is a 1-based line number; the first line is 1",
            ));
        }
        if limit == Some(0) {
            return Err(FsError::invalid("limit", "must be at least 1 line"));
        }
        let (file, size) = match self.remote(&vp) {
            Some(r) => self.remote_fetch(r, &vp)?,
            None => {
                let (file, st) = self.local(&vp)?.open_file_for_read(&vp)?;
                (file, st.st_size as u64)
            }
        };
        let max = self.limits.max_read_bytes;
        let first = offset.unwrap_or(1);
        if size <= max {
            let mut buf = Vec::with_capacity(size as usize + 1);
            (&file).read_to_end(&mut buf).map_err(io_err(&vp, "read"))?;
            check_text(&vp, &buf, true)?;
            let total = count_lines(&buf);
            let text = String::from_utf8(buf).expect("checked");
            if offset.is_none() && limit.is_none() {
                return Ok(ReadResult {
                    path: vp.to_string(),
                    content: text,
                    offset: 1,
                    lines: total,
                    total_lines: total,
                    truncated: false,
                    size,
                });
            }
            let mut lines = text.split_inclusive('\n').skip((first - 1) as usize);
            let take = limit.unwrap_or(u64::MAX);
            let mut content = String::new();
            let mut n = 0u64;
            for l in lines.by_ref() {
                if n == take {
                    break;
                }
                content.push_str(l);
                n += 1;
            }
            return Ok(ReadResult {
                path: vp.to_string(),
                content,
                offset: first,
                lines: n,
                total_lines: total,
                truncated: first - 1 + n < total,
                size,
            });
        }
        if limit.is_none() {
            self.check_size(Limit::Read, &vp, "the file", size)?;
        }
        self.read_window_streaming(&vp, file, size, first, limit.unwrap_or(u64::MAX))
    }

    /// Reads a window of lines from a file larger than the read limit without loading it whole.
    fn read_window_streaming(
        &self,
        vp: &VPath,
        file: std::fs::File,
        size: u64,
        first: u64,
        take: u64,
    ) -> FsResult<ReadResult> {
        let mut r = BufReader::with_capacity(1 << 16, file);
        let head = r.fill_buf().map_err(io_err(vp, "read"))?;
        if let Some(i) = memchr::memchr(0, &head[..head.len().min(BINARY_PROBE)]) {
            return Err(FsError::Binary {
                path: vp.to_string(),
                reason: format!("NUL byte at offset {i}"),
            });
        }
        let mut line_no = 0u64; // lines fully consumed so far
        let mut content: Vec<u8> = Vec::new();
        let mut line = Vec::new();
        let last = first.saturating_add(take); // exclusive
        while line_no + 1 < last {
            line.clear();
            let n = r.read_until(b'\n', &mut line).map_err(io_err(vp, "read"))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if line_no >= first {
                content.extend_from_slice(&line);
                self.check_size(Limit::Read, vp, "the requested lines", content.len() as u64)?;
            }
        }
        let returned = line_no.saturating_sub(first - 1);
        // Count the rest without keeping it.
        let mut total = line_no;
        let mut tail_has_partial = false;
        loop {
            let buf = r.fill_buf().map_err(io_err(vp, "read"))?;
            if buf.is_empty() {
                break;
            }
            total += memchr::memchr_iter(b'\n', buf).count() as u64;
            tail_has_partial = !buf.ends_with(b"\n");
            let len = buf.len();
            r.consume(len);
        }
        if tail_has_partial {
            total += 1;
        }
        check_text(vp, &content, false)?;
        Ok(ReadResult {
            path: vp.to_string(),
            content: String::from_utf8(content).expect("checked"),
            offset: first,
            lines: returned,
            total_lines: total,
            truncated: line_no < total,
            size,
        })
    }

    /// Opens a regular file for reading its raw bytes; returns the file and its size.
    pub fn read_binary(&self, path: &str) -> FsResult<(std::fs::File, u64)> {
        let vp = path::parse_entry(path)?;
        if let Some(r) = self.remote(&vp) {
            return self.remote_fetch(r, &vp);
        }
        let (file, st) = self.local(&vp)?.open_file_for_read(&vp)?;
        Ok((file, st.st_size as u64))
    }

    /// Starts an atomic write of `path`: parents are created, symlinks inside the zone followed.
    pub fn begin_write(&self, path: &str) -> FsResult<AtomicWrite<'_>> {
        let vp = path::parse_entry(path)?;
        if let Some(r) = self.remote(&vp) {
            return self.remote_begin_write(r, vp);
        }
        let z = self.writable_local(&vp)?;
        let vp = z.follow_last(&vp)?;
        if vp.is_root() {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
        let parent = z.ensure_parent(&vp)?;
        self.start_write(vp, parent, false)
    }

    /// Creates the temp file of an [`AtomicWrite`] of `vp` in `parent` (beside the destination,
    /// or in a remote zone's spool, read back at commit).
    fn start_write(&self, vp: VPath, parent: OwnedFd, remote: bool) -> FsResult<AtomicWrite<'_>> {
        let tmp = self.next_tmp_name();
        let fd = rustix::fs::openat(
            &parent,
            tmp.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_err(&vp, "create temp file"))?;
        Ok(AtomicWrite {
            zones: self,
            vp,
            parent,
            tmp,
            file: Some(std::fs::File::from(fd)),
            written: 0,
            limit: Some(Limit::Write),
            mode: None,
            remote,
            sync: false,
        })
    }

    /// Replaces (or creates) a file with the given bytes, atomically.
    pub fn write_bytes(&self, path: &str, content: &[u8], origin: Origin) -> FsResult<WriteResult> {
        let mut w = self.begin_write(path)?;
        w.write_chunk(content)?;
        w.commit(origin)
    }

    /// Replaces (or creates) a file, atomically; with `sync`, the file and its directory are
    /// synced before the call returns, so the write survives a power loss (see docs/reliability.md).
    pub fn write_synced(
        &self,
        path: &str,
        content: &[u8],
        sync: bool,
        origin: Origin,
    ) -> FsResult<WriteResult> {
        let mut w = self.begin_write(path)?;
        w.set_sync(sync);
        w.write_chunk(content)?;
        w.commit(origin)
    }

    /// Replaces (or creates) a text file, atomically.
    pub fn write(&self, path: &str, content: &str, origin: Origin) -> FsResult<WriteResult> {
        self.write_bytes(path, content.as_bytes(), origin)
    }

    /// Replaces an exact string in a text file; with `replace_all` every occurrence, otherwise the
    /// string must occur exactly once. Fails with `CONFLICT` when the file changes meanwhile.
    pub fn edit(
        &self,
        path: &str,
        old: &str,
        new: &str,
        replace_all: bool,
        origin: Origin,
    ) -> FsResult<EditResult> {
        let vp = path::parse_entry(path)?;
        if old.is_empty() {
            return Err(FsError::invalid("old", "must not be empty"));
        }
        if old == new {
            return Err(FsError::invalid(
                "new",
                "is the same as old; nothing would change",
            ));
        }
        if let Some(r) = self.remote(&vp) {
            return self.remote_edit(r, &vp, old, new, replace_all, origin);
        }
        let z = self.writable_local(&vp)?;
        let vp = z.follow_last(&vp)?;
        let name = vp.name().ok_or_else(|| FsError::IsDir {
            path: vp.to_string(),
        })?;
        let _guard = self.locks.lock(&vp);
        let parent = z.open_parent(&vp)?;
        let fd = rustix::fs::openat(
            &parent,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno_err(&vp, "open"))?;
        let st = rustix::fs::fstat(&fd).map_err(errno_err(&vp, "stat"))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
        z.check_links(&vp, &st)?;
        let size = st.st_size as u64;
        self.check_size(Limit::Read, &vp, "the file", size)?;
        let before = Fingerprint::of(&st);
        let mut buf = Vec::with_capacity(size as usize + 1);
        std::fs::File::from(fd)
            .read_to_end(&mut buf)
            .map_err(io_err(&vp, "read"))?;
        check_text(&vp, &buf, true)?;
        let text = String::from_utf8(buf).expect("checked");
        let count = text.matches(old).count();
        if count == 0 {
            return Err(FsError::NoMatch {
                path: vp.to_string(),
            });
        }
        if count > 1 && !replace_all {
            return Err(FsError::NotUnique {
                path: vp.to_string(),
                count,
            });
        }
        let updated = if replace_all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        let mut w = self.begin_write(&vp.to_string())?;
        w.write_chunk(updated.as_bytes())?;
        let res = w.commit_locked(Some(Seen::Entry(Identity(before))), "edit", origin)?;
        Ok(EditResult {
            path: res.path,
            replacements: count,
            bytes: res.bytes,
        })
    }

    /// Replaces (or creates) a file with the given bytes and permission bits (masked by the
    /// umask), atomically; git uses it to write executables as executables.
    pub fn write_with_mode(
        &self,
        path: &str,
        content: &[u8],
        mode: u32,
        origin: Origin,
    ) -> FsResult<WriteResult> {
        let mut w = self.begin_write(path)?;
        w.set_mode(mode);
        w.write_chunk(content)?;
        w.commit(origin)
    }

    /// Creates (or atomically replaces) a symlink at `path` pointing at `target`. The target is
    /// stored as given; every access through sandfs still resolves beneath the zone.
    pub fn symlink(&self, path: &str, target: &str, origin: Origin) -> FsResult<()> {
        let vp = path::parse_entry(path)?;
        if self.remote(&vp).is_some() {
            return self.sandbox_symlink(&vp, target, true, origin);
        }
        check_symlink_target(target)?;
        let z = self.writable_local(&vp)?;
        let name = vp.name().expect("entry");
        let parent = z.ensure_parent(&vp)?;
        let _guard = self.locks.lock(&vp);
        if let Ok(st) = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(FsError::IsDir {
                    path: vp.to_string(),
                });
            }
        }
        let tmp = self.next_tmp_name();
        rustix::fs::symlinkat(target, &parent, tmp.as_str()).map_err(errno_err(&vp, "symlink"))?;
        if let Err(e) = rustix::fs::renameat(&parent, tmp.as_str(), &parent, name) {
            let _ = rustix::fs::unlinkat(&parent, tmp.as_str(), AtFlags::empty());
            return Err(errno_err(&vp, "rename")(e));
        }
        self.record(&vp, "symlink", None, None, origin);
        Ok(())
    }

    /// Returns what is at `path` now, without following a symlink in its last component: the
    /// identity [`Zones::replace_entry`] compares right before it replaces the entry.
    pub fn seen(&self, path: &str) -> FsResult<Seen> {
        let vp = path::parse_entry(path)?;
        if self.remote(&vp).is_some() {
            return Ok(Seen::Unknown);
        }
        let z = self.local(&vp)?;
        let parent = match z.open_parent(&vp) {
            Ok(p) => p,
            Err(FsError::NotFound { .. }) => return Ok(Seen::Absent),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(
            &parent,
            vp.name().expect("entry"),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(Seen::Entry(Identity(Fingerprint::of(&st)))),
            Err(rustix::io::Errno::NOENT) => Ok(Seen::Absent),
            Err(e) => Err(errno_err(&vp, "stat")(e)),
        }
    }

    /// Replaces the entry at `path` as itself: the new file or symlink is made under a temp name
    /// and renamed over the name, so a symlink there is replaced, never written through. With
    /// `expect`, the entry must still be what [`Zones::seen`] returned (same inode, size, mtime and
    /// ctime), checked under the path lock right before the rename; otherwise `CONFLICT` and
    /// nothing changes. A directory in the way is `IS_DIR` (the caller removes it first if it
    /// means to). Modes from outside are masked ([`foreign::mask_mode`]). Pulls (git and mirror)
    /// write through here; `limits.max_write_bytes` (the API's body limit) does not apply, each
    /// pull caps what it fetches itself (`limits.sandbox_file_bytes` for mirror pulls).
    pub fn replace_entry(
        &self,
        path: &str,
        new: Replacement<'_>,
        expect: Option<Seen>,
        origin: Origin,
    ) -> FsResult<WriteResult> {
        let vp = path::parse_entry(path)?;
        if self.remote(&vp).is_some() {
            // A sandbox replaces as itself on its side (upload or symlink call); no inode to compare.
            return match new {
                Replacement::File { content, mode } => {
                    let mut w = self.begin_write(path)?;
                    w.limit = None;
                    w.set_mode(foreign::mask_mode(mode, self.umask));
                    copy_into(&mut w, content)?;
                    w.commit(origin)
                }
                Replacement::Symlink(target) => {
                    self.symlink(path, target, origin)?;
                    Ok(WriteResult {
                        path: vp.to_string(),
                        bytes: 0,
                        created: matches!(expect, Some(Seen::Absent)),
                    })
                }
            };
        }
        let z = self.writable_local(&vp)?;
        let parent = z.ensure_parent(&vp)?;
        match new {
            Replacement::File { content, mode } => {
                let mut w = self.start_write(vp, parent, false)?;
                w.limit = None;
                w.set_mode(foreign::mask_mode(mode, self.umask));
                copy_into(&mut w, content)?;
                let _guard = self.locks.lock(&w.vp);
                w.commit_locked(expect, "write", origin)
            }
            Replacement::Symlink(target) => {
                check_symlink_target(target)?;
                let name = vp.name().expect("entry");
                let tmp = self.next_tmp_name();
                rustix::fs::symlinkat(target, &parent, tmp.as_str())
                    .map_err(errno_err(&vp, "symlink"))?;
                let cleanup = |e: FsError| {
                    let _ = rustix::fs::unlinkat(&parent, tmp.as_str(), AtFlags::empty());
                    e
                };
                let _guard = self.locks.lock(&vp);
                let now = check_seen(&parent, name, &vp, expect).map_err(cleanup)?;
                rustix::fs::renameat(&parent, tmp.as_str(), &parent, name)
                    .map_err(|e| cleanup(errno_err(&vp, "rename")(e)))?;
                self.record(&vp, "symlink", None, None, origin);
                Ok(WriteResult {
                    path: vp.to_string(),
                    bytes: 0,
                    created: now.is_none(),
                })
            }
        }
    }

    /// Removes the file or symlink at `path` only if it is still what the caller saw (compared
    /// under the path lock, right before the unlink): a pull's deletion never removes a write
    /// acknowledged after its check. A directory gives `IS_DIR`; a changed entry `CONFLICT`.
    pub fn remove_entry(&self, path: &str, expect: Seen, origin: Origin) -> FsResult<()> {
        let vp = path::parse_entry(path)?;
        if self.remote(&vp).is_some() {
            return self.delete(path, false, origin);
        }
        let z = self.writable_local(&vp)?;
        let name = vp.name().expect("entry");
        let parent = z.open_parent(&vp)?;
        let _guard = self.locks.lock(&vp);
        self.before_replace();
        if check_seen(&parent, name, &vp, Some(expect))?.is_none() {
            return Ok(());
        }
        rustix::fs::unlinkat(&parent, name, AtFlags::empty()).map_err(errno_err(&vp, "unlink"))?;
        self.record(&vp, "delete", None, None, origin);
        Ok(())
    }

    /// Runs the test hook that injects a concurrent change right before a compare-and-swap.
    fn before_replace(&self) {
        #[cfg(test)]
        if let Some(hook) = self.before_replace.lock().expect("not poisoned").as_ref() {
            hook();
        }
    }

    /// Returns the target of the symlink at `path` (not followed).
    pub fn readlink(&self, path: &str) -> FsResult<String> {
        let vp = path::parse_entry(path)?;
        if let Some(r) = self.remote(&vp) {
            return r.stat_fresh(&vp)?.link_target.ok_or_else(|| {
                FsError::invalid(
                    "path",
                    format!("{vp} is not a symlink (or the sandbox follows symlinks when it describes them)"),
                )
            });
        }
        let z = self.local(&vp)?;
        let parent = z.open_parent(&vp)?;
        let target = rustix::fs::readlinkat(&parent, vp.name().expect("entry"), Vec::new())
            .map_err(errno_err(&vp, "readlink"))?;
        target.into_string().map_err(|_| FsError::Binary {
            path: vp.to_string(),
            reason: "the symlink's target is not UTF-8".into(),
        })
    }

    /// Deletes a file or symlink; a directory only with `recursive` (or when empty).
    pub fn delete(&self, path: &str, recursive: bool, origin: Origin) -> FsResult<()> {
        let vp = path::parse_entry(path)?;
        if self.remote(&vp).is_some() {
            return self.sandbox_remove(&vp, Removal::Any { recursive }, origin);
        }
        let z = self.writable_local(&vp)?;
        let name = vp.name().expect("entry");
        let parent = z.open_parent(&vp)?;
        let st = z.stat_at(&parent, name, &vp)?;
        let _guard = self.locks.lock(&vp);
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            if recursive {
                remove_tree(
                    parent.as_fd(),
                    &CString::new(name).expect("no NUL in a parsed path"),
                )
                .map_err(errno_err(&vp, "delete"))?;
            } else {
                rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR)
                    .map_err(errno_err(&vp, "rmdir"))?;
            }
        } else {
            rustix::fs::unlinkat(&parent, name, AtFlags::empty())
                .map_err(errno_err(&vp, "unlink"))?;
        }
        self.record(&vp, "delete", None, None, origin);
        Ok(())
    }

    /// Returns whether a path exists (symlinks are not followed).
    pub fn exists(&self, path: &str) -> FsResult<ExistsResult> {
        let vp = match path::parse(path)? {
            Target::Top => {
                return Ok(ExistsResult {
                    path: "/".into(),
                    exists: true,
                    kind: Some(EntryKind::Dir),
                })
            }
            Target::Zone(vp) => vp,
        };
        if let Some(r) = self.remote(&vp) {
            return match r.stat(&vp) {
                Ok(meta) => Ok(ExistsResult {
                    path: vp.to_string(),
                    exists: true,
                    kind: Some(meta.kind),
                }),
                Err(FsError::NotFound { .. }) | Err(FsError::NotDir { .. }) => Ok(ExistsResult {
                    path: vp.to_string(),
                    exists: false,
                    kind: None,
                }),
                Err(e) => Err(e),
            };
        }
        match self.local(&vp)?.lstat(&vp) {
            Ok(st) => Ok(ExistsResult {
                path: vp.to_string(),
                exists: true,
                kind: Some(kind_of(&st)),
            }),
            Err(FsError::NotFound { .. }) | Err(FsError::NotDir { .. }) => Ok(ExistsResult {
                path: vp.to_string(),
                exists: false,
                kind: None,
            }),
            Err(e) => Err(e),
        }
    }

    /// Lists a directory (sorted by name); `/` lists the zones.
    pub fn list(&self, path: &str) -> FsResult<ListResult> {
        let vp = match path::parse(path)? {
            Target::Top => {
                let entries = ZoneId::ALL
                    .iter()
                    .filter_map(|id| match self.zone(*id) {
                        Zone::Local(z) => {
                            let st = rustix::fs::fstat(z.dirfd()).ok()?;
                            Some(Entry {
                                name: id.name().into(),
                                kind: EntryKind::Dir,
                                size: st.st_size as u64,
                                mtime_ms: mtime_ms(&st),
                            })
                        }
                        Zone::Remote(_) => Some(Entry {
                            name: id.name().into(),
                            kind: EntryKind::Dir,
                            size: 0,
                            mtime_ms: 0,
                        }),
                        Zone::Disabled(_) => None,
                    })
                    .collect();
                return Ok(ListResult {
                    path: "/".into(),
                    entries,
                });
            }
            Target::Zone(vp) => vp,
        };
        if let Some(r) = self.remote(&vp) {
            let meta = r.stat(&vp)?;
            if meta.kind != EntryKind::Dir {
                return Err(FsError::NotDir {
                    path: vp.to_string(),
                });
            }
            let entries = r
                .list(&vp)?
                .iter()
                .map(|e| Entry {
                    name: e.name.clone(),
                    kind: e.meta.kind,
                    size: e.meta.size,
                    mtime_ms: super::remote_zone::mtime_ms(&e.meta),
                })
                .collect();
            return Ok(ListResult {
                path: vp.to_string(),
                entries,
            });
        }
        let z = self.local(&vp)?;
        let fd = z.open(&vp, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut entries = Vec::new();
        let dir = rustix::fs::Dir::new(fd.try_clone().map_err(io_err(&vp, "dup"))?)
            .map_err(errno_err(&vp, "readdir"))?;
        for ent in dir {
            let ent = ent.map_err(errno_err(&vp, "readdir"))?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                tracing::warn!(dir = %vp, "skipping a name that is not UTF-8");
                continue;
            };
            let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue, // removed meanwhile
                Err(e) => return Err(errno_err(&vp, "stat")(e)),
            };
            entries.push(Entry {
                name: name.to_string(),
                kind: kind_of(&st),
                size: st.st_size as u64,
                mtime_ms: mtime_ms(&st),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListResult {
            path: vp.to_string(),
            entries,
        })
    }

    /// Describes one path without following a symlink in its last component.
    pub fn stat(&self, path: &str) -> FsResult<StatResult> {
        let vp = match path::parse(path)? {
            Target::Top => {
                return Ok(StatResult {
                    path: "/".into(),
                    kind: EntryKind::Dir,
                    size: 0,
                    mode: 0o555,
                    mtime_ms: 0,
                    nlink: 2,
                    target: None,
                    read_only: true,
                })
            }
            Target::Zone(vp) => vp,
        };
        if let Some(r) = self.remote(&vp) {
            let meta = r.stat(&vp)?;
            return Ok(StatResult {
                path: vp.to_string(),
                kind: meta.kind,
                size: meta.size,
                mode: meta.mode.unwrap_or(if meta.kind == EntryKind::Dir {
                    0o755
                } else {
                    0o644
                }),
                mtime_ms: super::remote_zone::mtime_ms(&meta),
                nlink: 1,
                target: meta.link_target,
                read_only: r.read_only(),
            });
        }
        let z = self.local(&vp)?;
        let st = z.lstat(&vp)?;
        let target = if kind_of(&st) == EntryKind::Symlink {
            let parent = z.open_parent(&vp)?;
            let t =
                rustix::fs::readlinkat(&parent, vp.name().expect("symlink has a name"), Vec::new())
                    .map_err(errno_err(&vp, "readlink"))?;
            Some(t.to_string_lossy().into_owned())
        } else {
            None
        };
        Ok(StatResult {
            path: vp.to_string(),
            kind: kind_of(&st),
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
            mtime_ms: mtime_ms(&st),
            nlink: st.st_nlink,
            target,
            read_only: z.read_only(),
        })
    }

    /// Creates a directory; with `parents`, missing parents too and no error when it exists.
    pub fn mkdir(&self, path: &str, parents: bool, origin: Origin) -> FsResult<()> {
        let vp = path::parse_entry(path)?;
        if let Some(r) = self.remote(&vp) {
            r.check_writable(&vp)?;
            match r.stat_fresh(&vp) {
                Ok(meta) if parents && meta.kind == EntryKind::Dir => return Ok(()),
                Ok(_) => {
                    return Err(FsError::Exists {
                        path: vp.to_string(),
                    })
                }
                Err(FsError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            if !parents {
                let parent = vp.parent().expect("an entry has a parent");
                match r.stat_fresh(&parent)? {
                    meta if meta.kind == EntryKind::Dir => {}
                    _ => {
                        return Err(FsError::NotDir {
                            path: parent.to_string(),
                        })
                    }
                }
            }
            r.mkdir_p(&vp)?;
            self.record(&vp, "mkdir", None, None, origin);
            return Ok(());
        }
        let z = self.writable_local(&vp)?;
        if parents {
            if let Ok(st) = z.lstat(&vp) {
                return if kind_of(&st) == EntryKind::Dir {
                    Ok(())
                } else {
                    Err(FsError::Exists {
                        path: vp.to_string(),
                    })
                };
            }
            z.mkdir_p(&vp)?;
        } else {
            let parent = z.open_parent(&vp)?;
            rustix::fs::mkdirat(
                &parent,
                vp.name().expect("entry"),
                Mode::from_raw_mode(0o777),
            )
            .map_err(errno_err(&vp, "mkdir"))?;
        }
        self.record(&vp, "mkdir", None, None, origin);
        Ok(())
    }

    /// Moves (renames) a file or directory; fails with `EXISTS` unless `overwrite`. Across zones on
    /// different filesystems, regular files are copied and the source removed.
    pub fn rename(&self, from: &str, to: &str, overwrite: bool, origin: Origin) -> FsResult<()> {
        let src = path::parse_entry(from)?;
        let dst = path::parse_entry(to)?;
        if dst.starts_with(&src) {
            return Err(FsError::invalid(
                "to",
                format!("{dst} lies inside {src}; a directory cannot move into itself"),
            ));
        }
        if self.remote(&src).is_some() || self.remote(&dst).is_some() {
            return self.remote_rename(&src, &dst, overwrite, origin);
        }
        let zs = self.writable_local(&src)?;
        let zd = self.writable_local(&dst)?;
        let sp = zs.open_parent(&src)?;
        let (sname, dname) = (src.name().expect("entry"), dst.name().expect("entry"));
        // The source must exist before any missing destination directory is created.
        zs.stat_at(&sp, sname, &src)?;
        let dp = zd.ensure_parent(&dst)?;
        let _guards = self.locks.lock_two(&src, &dst);
        let flags = if overwrite {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(&sp, sname, &dp, dname, flags) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) | Err(rustix::io::Errno::NOTEMPTY) => {
                return Err(FsError::Exists {
                    path: dst.to_string(),
                })
            }
            Err(rustix::io::Errno::XDEV) => {
                drop(_guards);
                return self.copy_across(&src, &dst, overwrite, origin);
            }
            Err(e) => return Err(errno_err(&src, "rename")(e)),
        }
        self.record(&src, "move", None, Some(&dst), origin);
        Ok(())
    }

    /// Moves a regular file between filesystems: atomic write at the destination, then unlink.
    fn copy_across(
        &self,
        src: &VPath,
        dst: &VPath,
        overwrite: bool,
        origin: Origin,
    ) -> FsResult<()> {
        let kind = match self.remote(src) {
            Some(r) => r.stat_fresh(src)?.kind,
            None => kind_of(&self.local(src)?.lstat(src)?),
        };
        if kind != EntryKind::File {
            return Err(FsError::invalid(
                "from",
                format!("{src} is not a regular file; only files move between zones on different filesystems"),
            ));
        }
        if !overwrite && self.exists(&dst.to_string())?.exists {
            return Err(FsError::Exists {
                path: dst.to_string(),
            });
        }
        let (mut file, _) = self.read_binary(&src.to_string())?;
        let mut w = self.begin_write(&dst.to_string())?;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf).map_err(io_err(src, "read"))?;
            if n == 0 {
                break;
            }
            w.write_chunk(&buf[..n])?;
        }
        w.commit(origin)?;
        match self.remote(src) {
            Some(r) => r.remove(src, false)?,
            None => {
                let parent = self.local(src)?.open_parent(src)?;
                rustix::fs::unlinkat(&parent, src.name().expect("entry"), AtFlags::empty())
                    .map_err(errno_err(src, "unlink"))?;
            }
        }
        self.record(src, "move", None, Some(dst), origin);
        Ok(())
    }

    /// Returns the real path behind a virtual path, for tools that work outside sandfs.
    pub fn resolve(&self, path: &str) -> FsResult<ResolveResult> {
        let vp = path::parse_in_zone(path)?;
        if let Some(r) = self.remote(&vp) {
            let exists = match r.stat(&vp) {
                Ok(_) => true,
                Err(FsError::NotFound { .. }) => false,
                Err(e) => return Err(e),
            };
            return Ok(ResolveResult {
                path: vp.to_string(),
                real_path: format!("{}:{}", r.sandbox(), r.remote_path(&vp)),
                exists,
                zone_root: format!("{}:{}", r.sandbox(), r.root()),
            });
        }
        let z = self.local(&vp)?;
        let root = z.root().display().to_string();
        match z.open(&vp, OFlags::PATH) {
            Ok(fd) => Ok(ResolveResult {
                path: vp.to_string(),
                real_path: LocalZone::fd_real_path(&fd)
                    .map_err(io_err(&vp, "resolve"))?
                    .display()
                    .to_string(),
                exists: true,
                zone_root: root,
            }),
            Err(FsError::NotFound { .. }) if !vp.is_root() => {
                let parent = z.open_parent(&vp)?;
                let dir = LocalZone::fd_real_path(&parent).map_err(io_err(&vp, "resolve"))?;
                Ok(ResolveResult {
                    path: vp.to_string(),
                    real_path: dir.join(vp.name().expect("entry")).display().to_string(),
                    exists: false,
                    zone_root: root,
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// The operations on zones served from a sandbox (see [`super::remote_zone`]).
impl Zones {
    /// Downloads a remote file into an unnamed local file in the zone's spool.
    fn remote_fetch(&self, r: &RemoteZone, vp: &VPath) -> FsResult<(std::fs::File, u64)> {
        let meta = r.stat_fresh(vp)?;
        match meta.kind {
            EntryKind::File => {}
            EntryKind::Dir => {
                return Err(FsError::IsDir {
                    path: vp.to_string(),
                })
            }
            _ => {
                return Err(FsError::InvalidArgument {
                    name: "path".into(),
                    rule: format!("{vp} is not a regular file"),
                })
            }
        }
        self.check_size(Limit::SandboxFile, vp, "the sandbox's file", meta.size)?;
        // Streamed into the spool: never whole in memory, whatever the sandbox sends.
        let file = r.spool_file().map_err(io_err(vp, "create spool file"))?;
        let n = r.download(vp, &file, meta.size)?;
        Ok((file, n))
    }

    /// Starts a write into a remote zone: collected in the spool, uploaded on commit.
    fn remote_begin_write(&self, r: &RemoteZone, vp: VPath) -> FsResult<AtomicWrite<'_>> {
        r.check_writable(&vp)?;
        if vp.is_root() {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
        let parent = rustix::fs::open(
            r.spool(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno_err(&vp, "open spool"))?;
        self.start_write(vp, parent, true)
    }

    /// Replaces an exact string in a remote text file; `CONFLICT` when the file changed in the
    /// sandbox between reading and writing it.
    fn remote_edit(
        &self,
        r: &RemoteZone,
        vp: &VPath,
        old: &str,
        new: &str,
        replace_all: bool,
        origin: Origin,
    ) -> FsResult<EditResult> {
        r.check_writable(vp)?;
        let _guard = self.locks.lock(vp);
        let before = r.stat_fresh(vp)?;
        if before.kind == EntryKind::Dir {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
        self.check_size(Limit::Read, vp, "the file", before.size)?;
        let data = r.read(vp, before.size)?;
        check_text(vp, &data, true)?;
        let text = std::str::from_utf8(&data).expect("checked");
        let count = text.matches(old).count();
        if count == 0 {
            return Err(FsError::NoMatch {
                path: vp.to_string(),
            });
        }
        if count > 1 && !replace_all {
            return Err(FsError::NotUnique {
                path: vp.to_string(),
                count,
            });
        }
        let updated = if replace_all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        let now = r.stat_fresh(vp)?;
        if (now.size, now.mtime_ns) != (before.size, before.mtime_ns) {
            return Err(FsError::Conflict {
                path: vp.to_string(),
                reason: "the file changed in the sandbox between reading and replacing it; read it again and retry".into(),
            });
        }
        let bytes = updated.len() as u64;
        r.write(vp, bytes::Bytes::from(updated))?;
        self.record(vp, "edit", Some(bytes), None, origin);
        Ok(EditResult {
            path: vp.to_string(),
            replacements: count,
            bytes,
        })
    }

    /// Moves within one remote zone by a rename in the sandbox, otherwise by copy and delete.
    fn remote_rename(
        &self,
        src: &VPath,
        dst: &VPath,
        overwrite: bool,
        origin: Origin,
    ) -> FsResult<()> {
        if self.remote(src).is_none() || src.zone() != dst.zone() {
            self.check_writable(src)?;
            return self.copy_across(src, dst, overwrite, origin);
        }
        let replace = if overwrite {
            Replace::Files
        } else {
            Replace::Never
        };
        self.sandbox_rename(src, dst, replace, origin)
    }
}

impl AtomicWrite<'_> {
    /// Uploads the spooled content to the sandbox (and sets the mode when asked).
    fn commit_remote(mut self, op: &str, origin: Origin) -> FsResult<WriteResult> {
        // The caller holds the path lock (see `commit` and `commit_locked`).
        let r = self.zones.remote(&self.vp).expect("a remote write");
        let existing = match r.stat_fresh(&self.vp) {
            Ok(meta) if meta.kind == EntryKind::Dir => {
                return Err(FsError::IsDir {
                    path: self.vp.to_string(),
                })
            }
            Ok(_) => true,
            Err(FsError::NotFound { .. }) => false,
            Err(e) => return Err(e),
        };
        // Streamed from the spool: never whole in memory.
        let file = self.file.take().expect("open until commit");
        r.upload(&self.vp, &file)?;
        drop(file);
        if let Some(mode) = self.mode {
            r.set_meta(
                &self.vp,
                super::provider::MetaUpdate {
                    mode: Some(mode),
                    mtime: None,
                },
            )?;
        }
        self.zones
            .record(&self.vp, op, Some(self.written), None, origin);
        Ok(WriteResult {
            path: self.vp.to_string(),
            bytes: self.written,
            created: !existing,
        })
    }
}

/// The rule for a symlink's target made through sandfs: non-empty, no NUL.
pub(super) fn check_symlink_target(target: &str) -> FsResult<()> {
    if target.is_empty() || target.contains('\0') {
        return Err(FsError::invalid(
            "symlink target",
            "must be non-empty and contain no NUL",
        ));
    }
    Ok(())
}

/// Removes `name` in `parent` and everything beneath it, never following a symlink.
fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<()> {
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let listing = rustix::io::dup(&fd)?;
    for ent in rustix::fs::Dir::new(listing)? {
        let ent = ent?;
        let child = ent.file_name();
        if child.to_bytes() == b"." || child.to_bytes() == b".." {
            continue;
        }
        match rustix::fs::unlinkat(&fd, child, AtFlags::empty()) {
            Err(rustix::io::Errno::ISDIR) | Err(rustix::io::Errno::PERM)
                if matches!(ent.file_type(), FileType::Directory | FileType::Unknown) =>
            {
                remove_tree(fd.as_fd(), child)?;
            }
            other => other?,
        }
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)
}
