//! The file operations: read, write, edit, delete, exists, list, stat, mkdir, move, resolve.
//!
//! Every operation takes a virtual path as the caller gave it, parses it with [`super::path`],
//! applies the core's rules (read-only, sizes, the path lock) and makes one call to the zone's
//! [`store::Store`], whatever backs the zone; then journals the change. Replacements are atomic (a temp
//! file put over the name), so readers never see a torn file and a failed write leaves the old
//! contents. The `*_at` functions (`mkdir_at`, `remove_at`, `symlink_at`, `rename_at`) are the one
//! place each change is made: the API's operations and the mount's sandbox zones both call them.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::error::{FsError, FsResult};
use super::foreign;
use super::path::{self, Target, VPath, ZoneId};
use super::store::{self, Moved, Opened, Put, Removal, Replace, Seen, Way};
use super::zone::mtime_ms;
use super::{EntryKind, Limit, Zone, Zones};
use crate::state::Origin;

/// How many leading bytes are checked for NUL when deciding a file is binary.
const BINARY_PROBE: usize = 8192;

/// Text read from a file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ReadResult {
    /// The normalized virtual path.
    pub path: String,
    /// The lines returned, with their line endings, concatenated. Empty when `offset` is past
    /// the end.
    pub content: String,
    /// 1-based number of the first line returned (the requested `offset`, 1 by default).
    pub offset: u64,
    /// Number of lines returned in `content`.
    pub lines: u64,
    /// Number of lines in the whole file (a last line without a trailing newline counts).
    pub total_lines: u64,
    /// True when lines after the returned ones exist: read on with `offset` = `offset` +
    /// `lines`.
    pub truncated: bool,
    /// Size of the whole file in bytes.
    pub size: u64,
}

/// A completed write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct WriteResult {
    /// The virtual path written: the normalized request path, or the symlink's target when the
    /// last component was a symlink inside the zone.
    pub path: String,
    /// Bytes written (the file's new size).
    pub bytes: u64,
    /// True when the file did not exist before.
    pub created: bool,
}

/// A completed edit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct EditResult {
    /// The virtual path edited (after following a symlink in the last component).
    pub path: String,
    /// Occurrences of `old` replaced (1 unless `replace_all`).
    pub replacements: usize,
    /// The file's new size in bytes.
    pub bytes: u64,
}

/// One directory entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Entry {
    /// The entry's name (not a path).
    pub name: String,
    pub kind: EntryKind,
    /// Size in bytes (for a symlink: the length of its target; for a directory: as the
    /// filesystem reports).
    pub size: u64,
    /// Modification time in milliseconds since the Unix epoch.
    pub mtime_ms: i64,
}

/// A directory's entries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ListResult {
    /// The normalized virtual path of the directory (`/` for the top level).
    pub path: String,
    /// The entries sorted by name, hidden ones included, not recursive.
    pub entries: Vec<Entry>,
    /// Names in the directory that are not UTF-8, escaped as git quotes them (`"\377.txt"`),
    /// sorted: every wardfs path is UTF-8, so they are not in `entries` (made beside wardfs).
    #[serde(default)]
    pub skipped: Vec<String>,
}

/// Metadata of one path (a symlink in the last component is not followed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct StatResult {
    /// The normalized virtual path (`/` for the top level).
    pub path: String,
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits including setuid/setgid/sticky (`st_mode & 0o7777`), e.g. 420 for
    /// 0o644.
    pub mode: u32,
    /// Modification time in milliseconds since the Unix epoch (0 for `/`).
    pub mtime_ms: i64,
    /// Number of hard links.
    pub nlink: u64,
    /// The symlink's target as stored (not resolved). Present only when `kind` is `symlink`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// True when the path's zone refuses changes (always true for `/`).
    pub read_only: bool,
}

/// Whether a path exists.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ExistsResult {
    /// The normalized virtual path (`/` for the top level).
    pub path: String,
    /// True when something is at the path (a dangling symlink exists too).
    pub exists: bool,
    /// What is there (symlinks not followed). Present only when `exists` is true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<EntryKind>,
}

/// The host path behind a virtual path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ResolveResult {
    /// The normalized virtual path.
    pub path: String,
    /// Absolute host path. For an existing path, resolved by the kernel (symlinks inside the
    /// zone followed); for a missing one, the real parent directory joined with the name.
    pub real_path: String,
    /// Whether the path exists (a dangling symlink counts as missing).
    pub exists: bool,
    /// The host directory backing the zone.
    pub zone_root: String,
}

fn io_err<'a>(vp: &'a VPath, op: &'static str) -> impl Fn(std::io::Error) -> FsError + 'a {
    move |e| FsError::from_io(&vp.to_string(), op, e)
}

fn errno_err<'a>(vp: &'a VPath, op: &'static str) -> impl Fn(rustix::io::Errno) -> FsError + 'a {
    move |e| FsError::from_io(&vp.to_string(), op, e.into())
}

/// A file being written to a temp name beside its destination (or in a sandbox zone's spool);
/// put in place on commit ([`store::Store::put`]), removed when dropped uncommitted.
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

    /// Puts the written file in place, keeping the old file's permission bits.
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
        let zones = self.zones;
        let store = zones.store(&self.vp)?;
        zones.before_replace();
        let created = store.put(Put {
            vp: &self.vp,
            dir: &self.parent,
            tmp: &mut self.tmp,
            file: self.file.take().expect("open until commit"),
            mode: self.mode,
            new_mode: 0o666 & !zones.umask,
            sync: self.sync,
            expect,
        })?;
        zones.record(&self.vp, op, Some(self.written), None, origin);
        Ok(WriteResult {
            path: self.vp.to_string(),
            bytes: self.written,
            created,
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
        let Opened { file, size, .. } = self.store(&vp)?.open_read(self, &vp)?;
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
        let (file, size, _) = self.read_binary_seen(path)?;
        Ok((file, size))
    }

    /// [`Zones::read_binary`], and the version opened (compared with [`Zones::seen`] later to
    /// tell whether the file is still the one read).
    pub fn read_binary_seen(&self, path: &str) -> FsResult<(std::fs::File, u64, Seen)> {
        let vp = path::parse_entry(path)?;
        let opened = self.store(&vp)?.open_read(self, &vp)?;
        Ok((opened.file, opened.size, opened.seen))
    }

    /// Starts an atomic write of `path`: parents are created, symlinks inside the zone followed.
    pub fn begin_write(&self, path: &str) -> FsResult<AtomicWrite<'_>> {
        let vp = path::parse_entry(path)?;
        self.start_write(&vp, true, Way::Beneath)
    }

    /// Creates the temp file of an [`AtomicWrite`] of `vp` where its store says (beside the
    /// destination, or in a sandbox zone's spool), after the read-only rule.
    fn start_write(&self, vp: &VPath, follow: bool, way: Way) -> FsResult<AtomicWrite<'_>> {
        self.check_writable(vp)?;
        let (vp, parent) = self.store(vp)?.write_dir(vp, follow, way)?;
        let tmp = store::tmp_name();
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
    /// string must occur exactly once. Fails with `CONFLICT` when the file changes between
    /// reading and replacing it (the path lock is held throughout; a change beside wardfs is
    /// caught by the compare right before the replacement).
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
        self.check_writable(&vp)?;
        let store = self.store(&vp)?;
        let vp = store.real(&store.follow(&vp)?)?;
        // Held from the read to the replacement: concurrent edits of one file take turns.
        let _guard = self.locks.lock(&vp);
        let Opened { file, size, seen } = store.open_read(self, &vp)?;
        self.check_size(Limit::Read, &vp, "the file", size)?;
        let mut buf = Vec::with_capacity(size as usize + 1);
        (&file).read_to_end(&mut buf).map_err(io_err(&vp, "read"))?;
        drop(file);
        check_text(&vp, &buf, true)?;
        // A test holds an edit here, between its read and its replacement, lock held.
        super::gate::hold("edit-locked");
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
        let mut w = self.start_write(&vp, false, Way::Beneath)?;
        w.write_chunk(updated.as_bytes())?;
        let res = w.commit_locked(Some(seen), "edit", origin)?;
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
    /// stored as given; every access through wardfs still resolves beneath the zone.
    pub fn symlink(&self, path: &str, target: &str, origin: Origin) -> FsResult<()> {
        let vp = self.real_entry(path)?;
        self.symlink_at(&vp, target, true, None, Way::Beneath, origin)
            .map(|_| ())
    }

    /// Makes `vp` a symlink to `target` (see [`store::Store::symlink`]): the one symlink operation of
    /// every entry point, under the target rule, the read-only rule and the path lock, journaled.
    /// Returns whether it was created.
    pub fn symlink_at(
        &self,
        vp: &VPath,
        target: &str,
        replace: bool,
        expect: Option<Seen>,
        way: Way,
        origin: Origin,
    ) -> FsResult<bool> {
        check_symlink_target(target)?;
        self.check_writable(vp)?;
        let store = self.store(vp)?;
        let _guard = self.locks.lock(vp);
        let created = store.symlink(vp, target, replace, expect, way)?;
        self.record(vp, "symlink", None, None, origin);
        Ok(created)
    }

    /// Returns what is at `path` now, without following a symlink in its last component: the
    /// identity [`Zones::replace_entry`] compares right before it replaces the entry.
    pub fn seen(&self, path: &str) -> FsResult<Seen> {
        let vp = path::parse_entry(path)?;
        self.store(&vp)?.seen(&vp)
    }

    /// Whether the way to `path`'s entry is plain directories, no symlink or file above its
    /// last component (see [`store::Store::plain_way`]; a zone root's way always is).
    pub fn plain_way(&self, path: &str) -> FsResult<bool> {
        let vp = path::parse_in_zone(path)?;
        Ok(self.store(&vp)?.plain_way(&vp))
    }

    /// Replaces the entry at `path` as itself: the new file or symlink is made under a temp name
    /// and put over the name, so a symlink there is replaced, never written through. With
    /// `expect`, the entry must still be what [`Zones::seen`] returned, checked under the path
    /// lock right before the replacement; otherwise `CONFLICT` and nothing changes. A directory
    /// in the way is `IS_DIR` (the caller removes it first if it means to). Modes from outside
    /// are masked ([`foreign::mask_mode`]). Pulls (git and mirror) write through here;
    /// `limits.max_write_bytes` (the API's body limit) does not apply, each pull caps what it
    /// fetches itself (`limits.sandbox_file_bytes` for mirror pulls).
    pub fn replace_entry(
        &self,
        path: &str,
        new: Replacement<'_>,
        expect: Option<Seen>,
        origin: Origin,
    ) -> FsResult<WriteResult> {
        let vp = path::parse_entry(path)?;
        match new {
            Replacement::File { content, mode } => {
                let mut w = self.start_write(&vp, false, Way::Plain)?;
                w.limit = None;
                w.set_mode(foreign::mask_mode(mode, self.umask));
                copy_into(&mut w, content)?;
                let _guard = self.locks.lock(&w.vp);
                w.commit_locked(expect, "write", origin)
            }
            Replacement::Symlink(target) => {
                let created = self.symlink_at(&vp, target, true, expect, Way::Plain, origin)?;
                Ok(WriteResult {
                    path: vp.to_string(),
                    bytes: 0,
                    created,
                })
            }
        }
    }

    /// Overwrites the regular file at `path` in place with `content` (the same inode, truncated
    /// and written; see `LocalZone::overwrite`) and permission bits `mode` (masked), if it is
    /// still `expect` (compared under the path lock): `CONFLICT` when it changed. For a restore,
    /// which rewrites many files whose versions it has just read. `None`, with nothing changed,
    /// when the file cannot be overwritten in place (not a local regular file with one link, or
    /// open for writing through the mount): the caller uses [`Zones::replace_entry`].
    pub fn overwrite_file(
        &self,
        path: &str,
        content: &[u8],
        mode: u32,
        expect: Seen,
        origin: Origin,
    ) -> FsResult<Option<WriteResult>> {
        let vp = path::parse_entry(path)?;
        self.check_writable(&vp)?;
        let Zone::Local(z) = self.zone(vp.zone()) else {
            return Ok(None);
        };
        if !matches!(expect, Seen::Entry(_)) {
            return Ok(None);
        }
        let mode = foreign::mask_mode(mode, self.umask);
        let _guard = self.locks.lock(&vp);
        self.before_replace();
        if !z.overwrite(&vp, content, mode, expect, &|st| self.own.has_writer(st))? {
            return Ok(None);
        }
        let bytes = content.len() as u64;
        self.record(&vp, "write", Some(bytes), None, origin);
        Ok(Some(WriteResult {
            path: vp.to_string(),
            bytes,
            created: false,
        }))
    }

    /// Removes the file or symlink at `path` only if it is still what the caller saw (compared
    /// under the path lock, right before the removal): a pull's deletion never removes a write
    /// acknowledged after its check. A directory gives `IS_DIR`; a changed entry `CONFLICT`.
    pub fn remove_entry(&self, path: &str, expect: Seen, origin: Origin) -> FsResult<()> {
        let vp = path::parse_entry(path)?;
        self.remove_at(&vp, Removal::File, Some(expect), Way::Plain, origin)
            .map(|_| ())
    }

    /// Creates the directory `path` and its missing parents as a pull or restore does: the way
    /// to it plain directories ([`Way::Plain`]), a directory already there fine.
    pub fn mkdir_entry(&self, path: &str, origin: Origin) -> FsResult<()> {
        let vp = path::parse_entry(path)?;
        self.mkdir_at(&vp, true, None, Way::Plain, origin)
    }

    /// Removes what is at `vp` as `how` allows (see [`store::Store::remove`]): the one removal of every
    /// entry point, under the read-only rule and the path lock, journaled. Returns whether
    /// something was removed (`false`: gone before an `expect` could be compared).
    pub fn remove_at(
        &self,
        vp: &VPath,
        how: Removal,
        expect: Option<Seen>,
        way: Way,
        origin: Origin,
    ) -> FsResult<bool> {
        self.check_writable(vp)?;
        let store = self.store(vp)?;
        let _guard = self.locks.lock(vp);
        if expect.is_some() {
            self.before_replace();
        }
        let removed = store.remove(vp, how, expect, way)?;
        if removed {
            self.record(vp, "delete", None, None, origin);
        }
        Ok(removed)
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
        self.store(&vp)?.readlink(&vp)
    }

    /// Deletes a file or symlink; a directory only with `recursive` (or when empty).
    pub fn delete(&self, path: &str, recursive: bool, origin: Origin) -> FsResult<()> {
        let vp = self.real_entry(path)?;
        self.remove_at(&vp, Removal::Any { recursive }, None, Way::Beneath, origin)
            .map(|_| ())
    }

    /// Returns whether a path exists (symlinks are not followed).
    pub fn exists(&self, path: &str) -> FsResult<ExistsResult> {
        let target = match path::parse(path) {
            // A path in a fork that does not exist (`/forks/gone/x`) does not exist either.
            Err(FsError::NotFound { .. }) => {
                return Ok(ExistsResult {
                    path: path.to_string(),
                    exists: false,
                    kind: None,
                })
            }
            other => other?,
        };
        let vp = match target {
            Target::Top => {
                return Ok(ExistsResult {
                    path: "/".into(),
                    exists: true,
                    kind: Some(EntryKind::Dir),
                })
            }
            Target::Zone(vp) => vp,
        };
        match self.store(&vp)?.stat(&vp, false, false) {
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
                        Zone::Sandbox(_) => Some(Entry {
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
                    skipped: Vec::new(),
                });
            }
            Target::Zone(vp) => vp,
        };
        let mut listing = self.store(&vp)?.list(&vp)?;
        listing.entries.sort_by(|a, b| a.name.cmp(&b.name));
        listing.skipped.sort();
        Ok(ListResult {
            path: vp.to_string(),
            entries: listing.entries,
            skipped: listing.skipped,
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
        let store = self.store(&vp)?;
        let meta = store.stat(&vp, true, false)?;
        Ok(StatResult {
            path: vp.to_string(),
            kind: meta.kind,
            size: meta.size,
            mode: meta.mode,
            mtime_ms: meta.mtime_ms,
            nlink: meta.nlink,
            target: meta.target,
            read_only: store.read_only(),
        })
    }

    /// Creates a directory; with `parents`, missing parents too and no error when it exists.
    pub fn mkdir(&self, path: &str, parents: bool, origin: Origin) -> FsResult<()> {
        let vp = self.real_entry(path)?;
        self.mkdir_at(&vp, parents, None, Way::Beneath, origin)
    }

    /// Creates the directory `vp` (see [`store::Store::mkdir`]): the one mkdir of every entry point,
    /// under the read-only rule and the path lock, journaled.
    pub fn mkdir_at(
        &self,
        vp: &VPath,
        parents: bool,
        mode: Option<u32>,
        way: Way,
        origin: Origin,
    ) -> FsResult<()> {
        self.check_writable(vp)?;
        let store = self.store(vp)?;
        let _guard = self.locks.lock(vp);
        store.mkdir(vp, parents, mode, way)?;
        self.record(vp, "mkdir", None, None, origin);
        Ok(())
    }

    /// Moves (renames) a file or directory; fails with `EXISTS` unless `overwrite`. Across zones on
    /// different filesystems or backends, regular files are copied and the source removed.
    pub fn rename(&self, from: &str, to: &str, overwrite: bool, origin: Origin) -> FsResult<()> {
        let src = self.real_entry(from)?;
        let dst = self.real_entry(to)?;
        if dst.starts_with(&src) {
            return Err(FsError::invalid(
                "to",
                format!("{dst} lies inside {src}; a directory cannot move into itself"),
            ));
        }
        let replace = if overwrite {
            Replace::Files
        } else {
            Replace::Never
        };
        self.rename_at(&src, &dst, replace, origin)
    }

    /// Renames `src` to `dst` (see [`store::Store::rename`]): the one rename of every entry point,
    /// under the read-only rule and both path locks, journaled; what the stores cannot rename
    /// between them is copied and removed.
    pub fn rename_at(
        &self,
        src: &VPath,
        dst: &VPath,
        replace: Replace,
        origin: Origin,
    ) -> FsResult<()> {
        self.check_writable(src)?;
        self.check_writable(dst)?;
        let (from, to) = (self.store(src)?, self.store(dst)?);
        let guards = self.locks.lock_two(src, dst);
        match from.rename(src, to, dst, replace)? {
            Moved::Done => {
                self.renamed();
                self.record(src, "move", None, Some(dst), origin);
                Ok(())
            }
            Moved::Across => {
                drop(guards);
                self.copy_across(src, dst, replace, origin)
            }
        }
    }

    /// Moves a regular file between filesystems or backends: atomic write at the destination,
    /// then removal of the source.
    fn copy_across(
        &self,
        src: &VPath,
        dst: &VPath,
        replace: Replace,
        origin: Origin,
    ) -> FsResult<()> {
        let from = self.store(src)?;
        if from.stat(src, false, true)?.kind != EntryKind::File {
            return Err(FsError::invalid(
                "from",
                format!("{src} is not a regular file; only files move between zones on different filesystems"),
            ));
        }
        if replace == Replace::Never && self.exists(&dst.to_string())?.exists {
            return Err(FsError::Exists {
                path: dst.to_string(),
            });
        }
        let mut file = from.open_read(self, src)?.file;
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
        {
            let _guard = self.locks.lock(src);
            from.remove(src, Removal::File, None, Way::Beneath)?;
        }
        self.record(src, "move", None, Some(dst), origin);
        Ok(())
    }

    /// `path` parsed as an entry, with the symlinks above its last component resolved (see
    /// [`store::Store::real`]): what the path lock and the journal of a change name.
    fn real_entry(&self, path: &str) -> FsResult<VPath> {
        let vp = path::parse_entry(path)?;
        self.store(&vp)?.real(&vp)
    }

    /// Returns the real path behind a virtual path, for tools that work outside wardfs.
    pub fn resolve(&self, path: &str) -> FsResult<ResolveResult> {
        let vp = path::parse_in_zone(path)?;
        self.store(&vp)?.resolve(&vp)
    }
}

/// The rule for a symlink's target made through wardfs: non-empty, no NUL.
pub(super) fn check_symlink_target(target: &str) -> FsResult<()> {
    if target.is_empty() || target.contains('\0') {
        return Err(FsError::invalid(
            "symlink target",
            "must be non-empty and contain no NUL",
        ));
    }
    Ok(())
}
