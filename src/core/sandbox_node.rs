//! The node operations of a zone served from a sandbox that only the mount needs: open files.
//!
//! A sandbox-backed zone has no backing descriptors, so its nodes are paths ([`VPath`]); the
//! mount keeps the inode numbers and lookup counts. Its changes of names (mkdir, unlink/rmdir,
//! symlink, rename) are the core's one operations of every entry point (`Zones::mkdir_at`,
//! `remove_at`, `symlink_at`, `rename_at`) over the zone's [`super::store::Store`]; what is here
//! is what a kernel's open file asks of such a zone, under the same rules:
//! - read-only: [`Zones::check_writable`];
//! - one writer per path: the path locks (`Zones::locks`), held from the check to the change;
//! - sizes: [`Zones::check_size`] with [`Limit::SandboxFile`] (`limits.sandbox_file_bytes`), for
//!   what is downloaded at open and what a write through the mount would make of a file;
//! - the journal: `Zones::record`, right after the sandbox took the change.
//!
//! Errors are [`FsError`]s; the mount answers with [`FsError::errno`].
//!
//! An open file's content is a [`SandboxFile`]: an unnamed file in the zone's spool directory,
//! streamed from the sandbox at open (never whole in memory), written back (streamed) by
//! [`Zones::sandbox_write_back`] when it changed. A write-back the sandbox does not take is
//! queued durably ([`SandboxZone::queue_write_back`]) and reported as `EIO`.
//!
//! Owns the semantics of create, truncate, chmod/utimes and open/write/write-back on a sandbox
//! zone. May not import `fuser` or any adapter.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::error::{FsError, FsResult};
use super::path::VPath;
use super::provider::{MetaUpdate, RemoteEntry, RemoteMeta};
use super::sandbox_zone::SandboxZone;
use super::{EntryKind, Limit, Zones};
use crate::state::Origin;

pub use super::store::{Removal, Replace};

/// The content of an open sandbox file: a local copy and whether it differs from the sandbox's.
pub struct SandboxFile {
    file: std::fs::File,
    dirty: bool,
    /// Who last changed it (named in the journal at write-back).
    origin: Option<Origin>,
}

impl SandboxFile {
    /// Reads into `buf` at `offset` from the local copy, as much as it holds (fewer bytes only
    /// at the end of the file).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            let r = self.file.read_at(&mut buf[n..], offset + n as u64)?;
            if r == 0 {
                break;
            }
            n += r;
        }
        Ok(n)
    }

    /// The local copy's metadata (its length is the file's size while it is open).
    pub fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        self.file.metadata()
    }
}

fn spool_err(vp: &VPath) -> impl Fn(std::io::Error) -> FsError + '_ {
    move |e| FsError::from_io(&vp.to_string(), "spool", e)
}

/// An errno of the local copy (the spool's disk) as the core's error.
fn eio(vp: &VPath, op: &'static str) -> FsError {
    FsError::Io {
        path: vp.to_string(),
        op,
        source: std::io::Error::from_raw_os_error(libc::EIO),
    }
}

impl Zones {
    /// The sandbox zone `vp` is in.
    fn sandbox(&self, vp: &VPath) -> FsResult<&SandboxZone> {
        self.remote(vp).ok_or_else(|| {
            FsError::invalid(
                "path",
                format!("{vp} is not in a zone served from a sandbox"),
            )
        })
    }

    /// What the sandbox says is at `vp` (cached for the zone's `attr_ttl`).
    pub fn sandbox_stat(&self, vp: &VPath) -> FsResult<RemoteMeta> {
        self.sandbox(vp)?.stat(vp)
    }

    /// What the sandbox says is at `vp` now.
    pub fn sandbox_stat_fresh(&self, vp: &VPath) -> FsResult<RemoteMeta> {
        self.sandbox(vp)?.stat_fresh(vp)
    }

    /// The entries of the directory `vp` (cached for the zone's `attr_ttl`).
    pub fn sandbox_list(&self, vp: &VPath) -> FsResult<Arc<Vec<RemoteEntry>>> {
        self.sandbox(vp)?.list(vp)
    }

    /// Sets the permission bits and/or the modification time (seconds since the epoch).
    pub fn sandbox_set_meta(
        &self,
        vp: &VPath,
        mode: Option<u32>,
        mtime: Option<u64>,
        origin: Origin,
    ) -> FsResult<()> {
        let r = self.sandbox(vp)?;
        self.check_writable(vp)?;
        let _guard = self.locks.lock(vp);
        r.set_meta(
            vp,
            MetaUpdate {
                mode: mode.map(|m| m & 0o7777),
                mtime,
            },
        )?;
        self.record(vp, "chmod", None, None, origin);
        Ok(())
    }

    /// Truncates or extends the file at `vp` to `size` bytes when nobody has it open through the
    /// mount (an open one is changed through its [`SandboxFile`]).
    pub fn sandbox_truncate(&self, vp: &VPath, size: u64, origin: Origin) -> FsResult<()> {
        let r = self.sandbox(vp)?;
        self.check_writable(vp)?;
        self.check_size(Limit::SandboxFile, vp, "the file", size)?;
        let _guard = self.locks.lock(vp);
        let file = r.spool_file().map_err(spool_err(vp))?;
        if size > 0 {
            let meta = r.stat_fresh(vp)?;
            let keep = meta.size.min(size);
            if keep > 0 {
                self.check_size(Limit::SandboxFile, vp, "the file", meta.size)?;
                r.download(vp, &file, meta.size)?;
            }
            file.set_len(size).map_err(spool_err(vp))?;
        }
        r.upload(vp, &file)?;
        self.record(vp, "truncate", Some(size), None, origin);
        Ok(())
    }

    /// Creates an empty file at `vp` with permission bits `mode` unless one is there (then
    /// `EXISTS` with `exclusive`); returns whether it was created.
    pub fn sandbox_create(
        &self,
        vp: &VPath,
        mode: u32,
        exclusive: bool,
        origin: Origin,
    ) -> FsResult<bool> {
        let r = self.sandbox(vp)?;
        self.check_writable(vp)?;
        let _guard = self.locks.lock(vp);
        match r.stat_fresh(vp) {
            Ok(_) if exclusive => Err(FsError::Exists {
                path: vp.to_string(),
            }),
            Ok(m) if m.kind == EntryKind::Dir => Err(FsError::IsDir {
                path: vp.to_string(),
            }),
            Ok(_) => Ok(false),
            Err(FsError::NotFound { .. }) => {
                r.write(vp, bytes::Bytes::new())?;
                if mode & 0o111 != 0 {
                    r.set_meta(
                        vp,
                        MetaUpdate {
                            mode: Some(mode & 0o7777),
                            mtime: None,
                        },
                    )?;
                }
                self.record(vp, "create", Some(0), None, origin);
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens the file at `vp`: its content is streamed into a local copy, unless `truncate`
    /// empties it or `created` says the sandbox's file was just made empty. A write-back still
    /// queued for the file is newer than what the sandbox holds, so it is what is opened.
    /// Files over `limits.sandbox_file_bytes` are `TOO_LARGE`.
    pub fn sandbox_open(
        &self,
        vp: &VPath,
        write: bool,
        truncate: bool,
        created: bool,
        origin: Origin,
    ) -> FsResult<SandboxFile> {
        let r = self.sandbox(vp)?;
        if write {
            self.check_writable(vp)?;
        }
        let queued = if truncate {
            None
        } else {
            r.pending_content(vp).map_err(spool_err(vp))?
        };
        let fresh = queued.is_none();
        let file = match queued {
            Some(f) => f,
            None => r.spool_file().map_err(|e| {
                tracing::error!(path = %vp, error = %e, "cannot create a spool file for a sandbox file");
                spool_err(vp)(e)
            })?,
        };
        if fresh && !truncate && !created && !r.has_pending(vp) {
            let meta = r.stat_fresh(vp)?;
            if meta.kind == EntryKind::Dir {
                return Err(FsError::IsDir {
                    path: vp.to_string(),
                });
            }
            self.check_size(Limit::SandboxFile, vp, "the file", meta.size)?;
            r.download(vp, &file, meta.size)?;
        }
        Ok(SandboxFile {
            file,
            dirty: truncate,
            origin: truncate.then_some(origin),
        })
    }

    /// Writes `data` into the open file's local copy at `offset` (at its end with `append`);
    /// it reaches the sandbox at the next write-back.
    pub fn sandbox_write(
        &self,
        vp: &VPath,
        f: &mut SandboxFile,
        data: &[u8],
        offset: u64,
        append: bool,
        origin: Origin,
    ) -> FsResult<u64> {
        let at = if append {
            f.file.metadata().map_err(spool_err(vp))?.len()
        } else {
            offset
        };
        let end = at.saturating_add(data.len() as u64);
        self.check_size(Limit::SandboxFile, vp, "the file", end)?;
        f.file.write_all_at(data, at).map_err(spool_err(vp))?;
        f.dirty = true;
        f.origin = Some(origin);
        Ok(data.len() as u64)
    }

    /// Truncates or extends the open file's local copy.
    pub fn sandbox_set_len(
        &self,
        vp: &VPath,
        f: &mut SandboxFile,
        size: u64,
        origin: Origin,
    ) -> FsResult<()> {
        self.check_writable(vp)?;
        self.check_size(Limit::SandboxFile, vp, "the file", size)?;
        f.file.set_len(size).map_err(spool_err(vp))?;
        f.dirty = true;
        f.origin = Some(origin);
        Ok(())
    }

    /// Sends the open file's local copy to the sandbox when it changed, and journals it. A
    /// failure queues the copy durably (it must outlive this close and the daemon) and is an
    /// `EIO`. `settle` (fsync, the close of a writable handle): with a clean copy, a write-back
    /// of the file still queued is sent now, and while it stays queued that is an `EIO` too.
    pub fn sandbox_write_back(
        &self,
        vp: &VPath,
        f: &mut SandboxFile,
        settle: bool,
    ) -> FsResult<()> {
        let r = self.sandbox(vp)?;
        if !f.dirty {
            if !settle || !r.has_pending(vp) {
                return Ok(());
            }
            return match r.retry_write_back(vp) {
                Ok(Some(w)) => {
                    self.record(&w.path, "write", Some(w.bytes), None, w.origin);
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(e) => {
                    tracing::warn!(path = %vp, error = %e, "the file's write-back is still queued");
                    Err(eio(vp, "write back"))
                }
            };
        }
        let len = f.file.metadata().map_err(spool_err(vp))?.len();
        let _guard = self.locks.lock(vp);
        if let Err(e) = r.upload(vp, &f.file) {
            let now = self.now_ms();
            return match r.queue_write_back(vp, &f.file, f.origin, now, &e) {
                Ok(()) => {
                    f.dirty = false;
                    let origin = f.origin.unwrap_or(Origin::INTERNAL);
                    self.record_event(
                        vp,
                        "write-back-queued",
                        &format!("{len} bytes queued for the sandbox: {e}"),
                        origin,
                    );
                    Err(eio(vp, "write back"))
                }
                Err(qe) => {
                    tracing::error!(path = %vp, error = %e, queue_error = %qe, "could not write a file back to the sandbox nor queue it; it stays dirty while open");
                    Err(eio(vp, "write back"))
                }
            };
        }
        f.dirty = false;
        if let Some(o) = f.origin.take() {
            self.record(vp, "write", Some(len), None, o);
        }
        Ok(())
    }
}
