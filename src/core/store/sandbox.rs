//! The sandbox store: a zone's directory inside a sandbox, reached through its
//! [`SandboxZone`] (the provider's calls, attribute and listing caches, the spool). Files are
//! streamed through the spool both ways, never whole in memory. The sandbox offers no
//! compare-and-swap of its own: a replacement or removal compares the entry's kind, size and
//! mtime as the sandbox reports them right before the call, under the caller's path lock, so a
//! change made through wardfs is never lost; one made inside the sandbox in between may be.

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

use super::{
    Fingerprint, Identity, Listing, Meta, Moved, Opened, Put, Removal, Replace, Seen, Store, Way,
};
use crate::core::error::{FsError, FsResult};
use crate::core::ops::{Entry, ResolveResult};
use crate::core::path::VPath;
use crate::core::provider::{MetaUpdate, RemoteMeta};
use crate::core::sandbox_zone::{mtime_ms, SandboxZone};
use crate::core::{EntryKind, Limit, Zones};

/// The identity of a sandbox entry as the sandbox describes it.
fn identity(meta: &RemoteMeta) -> Seen {
    Seen::Entry(Identity(Fingerprint::Sandbox {
        kind: meta.kind,
        size: meta.size,
        mtime_ns: meta.mtime_ns,
    }))
}

/// What is at `vp` now (`None`: nothing), checked against `expect`.
fn check_seen(r: &SandboxZone, vp: &VPath, expect: Option<Seen>) -> FsResult<Option<RemoteMeta>> {
    let now = match r.stat_fresh(vp) {
        Ok(m) => Some(m),
        Err(FsError::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    if let Some(exp) = expect {
        let current = now.as_ref().map(identity).unwrap_or(Seen::Absent);
        if exp != Seen::Unknown && current != exp {
            return Err(super::changed(vp));
        }
    }
    Ok(now)
}

fn is_dir(vp: &VPath) -> FsError {
    FsError::IsDir {
        path: vp.to_string(),
    }
}

impl Store for SandboxZone {
    fn read_only(&self) -> bool {
        SandboxZone::read_only(self)
    }

    fn stat(&self, vp: &VPath, _target: bool, fresh: bool) -> FsResult<Meta> {
        let meta = if fresh {
            self.stat_fresh(vp)?
        } else {
            SandboxZone::stat(self, vp)?
        };
        Ok(Meta {
            kind: meta.kind,
            size: meta.size,
            mode: meta.mode.unwrap_or(if meta.kind == EntryKind::Dir {
                0o755
            } else {
                0o644
            }),
            mtime_ms: mtime_ms(&meta),
            nlink: 1,
            target: meta.link_target,
        })
    }

    fn follow(&self, vp: &VPath) -> FsResult<VPath> {
        Ok(vp.clone())
    }

    fn real(&self, vp: &VPath) -> FsResult<VPath> {
        Ok(vp.clone())
    }

    fn plain_way(&self, _vp: &VPath) -> bool {
        true
    }

    fn seen(&self, vp: &VPath) -> FsResult<Seen> {
        Ok(check_seen(self, vp, None)?
            .as_ref()
            .map(identity)
            .unwrap_or(Seen::Absent))
    }

    fn list(&self, vp: &VPath) -> FsResult<Listing> {
        if SandboxZone::stat(self, vp)?.kind != EntryKind::Dir {
            return Err(FsError::NotDir {
                path: vp.to_string(),
            });
        }
        // The provider already left out (and logged) a name a path cannot hold.
        let entries = SandboxZone::list(self, vp)?
            .iter()
            .map(|e| Entry {
                name: e.name.clone(),
                kind: e.meta.kind,
                size: e.meta.size,
                mtime_ms: mtime_ms(&e.meta),
            })
            .collect();
        Ok(Listing {
            entries,
            skipped: Vec::new(),
        })
    }

    fn readlink(&self, vp: &VPath) -> FsResult<String> {
        self.stat_fresh(vp)?.link_target.ok_or_else(|| {
            FsError::invalid(
                "path",
                format!(
                    "{vp} is not a symlink (or the sandbox follows symlinks when it describes them)"
                ),
            )
        })
    }

    fn open_read(&self, zones: &Zones, vp: &VPath) -> FsResult<Opened> {
        let meta = self.stat_fresh(vp)?;
        match meta.kind {
            EntryKind::File => {}
            EntryKind::Dir => return Err(is_dir(vp)),
            _ => {
                return Err(FsError::InvalidArgument {
                    name: "path".into(),
                    rule: format!("{vp} is not a regular file"),
                })
            }
        }
        zones.check_size(Limit::SandboxFile, vp, "the sandbox's file", meta.size)?;
        // Streamed into the spool: never whole in memory, whatever the sandbox sends.
        let file = self
            .spool_file()
            .map_err(|e| FsError::from_io(&vp.to_string(), "create spool file", e))?;
        let size = self.download(vp, &file, meta.size)?;
        Ok(Opened {
            file,
            size,
            seen: identity(&meta),
        })
    }

    fn write_dir(&self, vp: &VPath, _follow: bool, _way: Way) -> FsResult<(VPath, OwnedFd)> {
        if vp.is_root() {
            return Err(is_dir(vp));
        }
        let spool = rustix::fs::open(
            self.spool(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::from_io(&vp.to_string(), "open spool", e.into()))?;
        Ok((vp.clone(), spool))
    }

    fn put(&self, put: Put<'_>) -> FsResult<bool> {
        let vp = put.vp;
        let existing = check_seen(self, vp, put.expect)?;
        if existing.as_ref().is_some_and(|m| m.kind == EntryKind::Dir) {
            return Err(is_dir(vp));
        }
        // Streamed from the spool: never whole in memory. The temp file goes when the write
        // is dropped.
        self.upload(vp, &put.file)?;
        drop(put.file);
        if let Some(mode) = put.mode {
            self.set_meta(
                vp,
                MetaUpdate {
                    mode: Some(mode),
                    mtime: None,
                },
            )?;
        }
        Ok(existing.is_none())
    }

    fn symlink(
        &self,
        vp: &VPath,
        target: &str,
        replace: bool,
        expect: Option<Seen>,
        _way: Way,
    ) -> FsResult<bool> {
        let now = check_seen(self, vp, expect)?;
        match &now {
            Some(m) if m.kind == EntryKind::Dir => return Err(is_dir(vp)),
            Some(_) if !replace => {
                return Err(FsError::Exists {
                    path: vp.to_string(),
                })
            }
            _ => {}
        }
        SandboxZone::symlink(self, vp, target)?;
        Ok(now.is_none())
    }

    fn mkdir(&self, vp: &VPath, parents: bool, mode: Option<u32>, _way: Way) -> FsResult<()> {
        match self.stat_fresh(vp) {
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
            if !parent.is_root() && self.stat_fresh(&parent)?.kind != EntryKind::Dir {
                return Err(FsError::NotDir {
                    path: parent.to_string(),
                });
            }
        }
        self.mkdir_p(vp)?;
        if let Some(mode) = mode.map(|m| m & 0o7777).filter(|m| *m != 0o755) {
            // The directory exists either way; a sandbox that keeps no modes keeps its own.
            let _ = self.set_meta(
                vp,
                MetaUpdate {
                    mode: Some(mode),
                    mtime: None,
                },
            );
        }
        Ok(())
    }

    fn remove(&self, vp: &VPath, how: Removal, expect: Option<Seen>, _way: Way) -> FsResult<bool> {
        let meta = match check_seen(self, vp, expect)? {
            Some(m) => m,
            None if expect.is_some() => return Ok(false),
            None => {
                return Err(FsError::NotFound {
                    path: vp.to_string(),
                })
            }
        };
        let dir = meta.kind == EntryKind::Dir;
        let recursive = match how {
            Removal::File if dir => return Err(is_dir(vp)),
            Removal::EmptyDir if !dir => {
                return Err(FsError::NotDir {
                    path: vp.to_string(),
                })
            }
            Removal::Any { recursive } => recursive,
            _ => false,
        };
        if dir && !recursive && !SandboxZone::list(self, vp)?.is_empty() {
            return Err(FsError::NotEmpty {
                path: vp.to_string(),
            });
        }
        SandboxZone::remove(self, vp, recursive)?;
        Ok(true)
    }

    fn rename(
        &self,
        from: &VPath,
        _to_store: &dyn Store,
        to: &VPath,
        replace: Replace,
    ) -> FsResult<Moved> {
        if from.zone() != to.zone() {
            return Ok(Moved::Across);
        }
        let src = self.stat_fresh(from)?;
        let exists = || FsError::Exists {
            path: to.to_string(),
        };
        match self.stat_fresh(to) {
            Ok(_) if replace == Replace::Never => return Err(exists()),
            Ok(dst) if dst.kind == EntryKind::Dir && replace == Replace::Files => {
                return Err(exists())
            }
            Ok(dst) if dst.kind == EntryKind::Dir && src.kind != EntryKind::Dir => {
                return Err(is_dir(to))
            }
            Ok(dst) if dst.kind != EntryKind::Dir && src.kind == EntryKind::Dir => {
                return Err(FsError::NotDir {
                    path: to.to_string(),
                })
            }
            Ok(dst) if dst.kind == EntryKind::Dir => {
                if !SandboxZone::list(self, to)?.is_empty() {
                    return Err(FsError::NotEmpty {
                        path: to.to_string(),
                    });
                }
                SandboxZone::remove(self, to, false)?;
            }
            Ok(_) | Err(FsError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        SandboxZone::rename(self, from, to)?;
        Ok(Moved::Done)
    }

    fn resolve(&self, vp: &VPath) -> FsResult<ResolveResult> {
        let exists = match SandboxZone::stat(self, vp) {
            Ok(_) => true,
            Err(FsError::NotFound { .. }) => false,
            Err(e) => return Err(e),
        };
        Ok(ResolveResult {
            path: vp.to_string(),
            real_path: format!("{}:{}", self.sandbox(), self.remote_path(vp)),
            exists,
            zone_root: format!("{}:{}", self.sandbox(), self.root()),
        })
    }
}
