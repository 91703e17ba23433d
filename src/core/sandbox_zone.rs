//! A zone served from a directory inside a remote sandbox (`[zones.workspace] sandbox = "dev"`).
//!
//! [`SandboxZone`] reaches the directory through a [`SandboxFs`] provider. The core is synchronous
//! (the mount's request threads and the API's blocking tasks call it), the providers are async: each
//! call runs on the zone's own small tokio runtime and the caller waits for it with a hard deadline
//! (the provider's request timeout plus a margin, more for large transfers), so a sandbox that is
//! down or hung gives `SANDBOX_UNAVAILABLE` after that long and never a hang.
//!
//! Attributes and listings are cached for the zone's `attr_ttl` (a second by default), and every
//! change made through wardfs drops what it touched. Whole files go through a local spool
//! directory (under the state dir): the API's streamed writes are collected there and uploaded
//! on commit, and the mount keeps an open file's content there between open and close.
//!
//! A write-back that fails (the sandbox is down when a file written through the mount is closed)
//! is never dropped: the content is copied into a durable queue under the spool directory
//! (`pending/`, fsynced, with a small JSON record per file), the close reports `EIO`, and
//! [`spawn_write_back_retries`] sends it again with backoff until the sandbox takes it, also
//! after a daemon restart (the queue is read back at open). A later change of the same path
//! through wardfs supersedes the queued content. `wardfs status` lists what is queued.
//!
//! Remote paths are built only by [`SandboxZone::remote_path`] from a parsed [`VPath`] (no `..`,
//! no absolute part), so no request names anything outside the zone's directory; the provider
//! refuses relative paths and NUL bytes once more before each request.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::error::{ErrorCode, FsError, FsResult};
use super::path::{VPath, ZoneId};
use super::provider::{
    join_remote, MetaUpdate, RemoteEntry, RemoteMeta, SandboxFs, SandboxFsError, SandboxFsResult,
};

/// Entries kept in each cache before it is emptied (bounds memory on huge trees).
const CACHE_CAP: usize = 100_000;
/// Added to the provider's request timeout to get the hard deadline of one call.
const DEADLINE_MARGIN: Duration = Duration::from_secs(2);

/// Builds a provider for a sandbox named in the config (the daemon passes one in; the core knows
/// no provider).
pub type Connector<'a> =
    &'a dyn Fn(&crate::config::SandboxBacking) -> Result<Arc<dyn SandboxFs>, String>;

/// A zone backed by a directory inside a sandbox.
pub struct SandboxZone {
    id: ZoneId,
    sandbox: String,
    root: String,
    fs: Arc<dyn SandboxFs>,
    rt: Option<tokio::runtime::Runtime>,
    request_timeout: Duration,
    attr_ttl: Duration,
    read_only: bool,
    spool: PathBuf,
    /// Names spool files apart.
    spooled: std::sync::atomic::AtomicU64,
    attrs: Mutex<HashMap<String, (Instant, Option<RemoteMeta>)>>,
    lists: Mutex<HashMap<String, CachedList>>,
    /// Write-backs that failed, by path relative to the zone (their content is on disk).
    pending: Mutex<HashMap<String, Pending>>,
    /// Held while a queued write-back is sent, and by a change of a path that has one queued:
    /// a retry landing after a newer write would otherwise put the older content back.
    resend: Mutex<()>,
}

/// The durable record of one queued write-back (`pending/<hash>.json`; the content is
/// `pending/<hash>.data`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PendingRecord {
    /// Path relative to the zone.
    rel: String,
    bytes: u64,
    /// When the first write-back of this content failed (ms since the epoch).
    queued_ms: i64,
    /// Who wrote it through the mount, for the journal row of the eventual write.
    pid: Option<u32>,
    uid: Option<u32>,
}

/// A queued write-back in memory: its record, a generation (a newer queueing of the same path
/// replaces it), and its retry state.
#[derive(Debug, Clone)]
struct Pending {
    record: PendingRecord,
    generation: u64,
    attempts: u32,
    next_try: Instant,
    last_error: String,
}

/// A queued write-back to a remote zone's sandbox, as `wardfs status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct PendingWriteBack {
    /// The virtual path (`/workspace/a.txt`).
    pub path: String,
    /// Size of the queued content.
    pub bytes: u64,
    /// When the first write-back failed (ms since the epoch).
    pub queued_ms: i64,
    /// Failed attempts so far (the close that queued it included).
    pub attempts: u32,
    /// Why the last attempt failed.
    pub last_error: String,
}

/// A queued write-back that reached the sandbox.
#[derive(Debug, Clone)]
pub struct WrittenBack {
    pub path: VPath,
    pub bytes: u64,
    pub origin: crate::state::Origin,
}

/// First wait before a failed write-back is tried again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

fn backoff(attempts: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << attempts.min(16))
        .min(RETRY_MAX)
}

/// A listing and when it was taken.
type CachedList = (Instant, Arc<Vec<RemoteEntry>>);

impl std::fmt::Debug for SandboxZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxZone")
            .field("id", &self.id)
            .field("sandbox", &self.sandbox)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Drop for SandboxZone {
    fn drop(&mut self) {
        // The zones may be dropped inside the daemon's runtime, where a blocking shutdown panics.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl SandboxZone {
    /// Serves `root` inside the sandbox `sandbox` through `fs`; `spool` is a local directory for
    /// file contents in transit (created, and emptied of what a previous run left).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        id: ZoneId,
        sandbox: &str,
        root: &str,
        fs: Arc<dyn SandboxFs>,
        attr_ttl: Duration,
        read_only: bool,
        spool: &Path,
    ) -> std::io::Result<SandboxZone> {
        std::fs::create_dir_all(spool)?;
        for e in std::fs::read_dir(spool)?.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("wardfs-remote-{}", id.name()))
            .enable_all()
            .build()?;
        let request_timeout = fs.limits().request_timeout;
        let pending = load_pending(&spool.join(PENDING_DIR), id)?;
        if !pending.is_empty() {
            tracing::warn!(
                zone = id.name(),
                sandbox,
                count = pending.len(),
                "write-backs queued by a previous run will be sent to the sandbox"
            );
        }
        Ok(SandboxZone {
            id,
            sandbox: sandbox.to_string(),
            root: root.to_string(),
            fs,
            rt: Some(rt),
            request_timeout,
            attr_ttl,
            read_only,
            spool: spool.to_path_buf(),
            spooled: std::sync::atomic::AtomicU64::new(0),
            attrs: Mutex::new(HashMap::new()),
            lists: Mutex::new(HashMap::new()),
            pending: Mutex::new(pending),
            resend: Mutex::new(()),
        })
    }

    /// Returns the zone id.
    pub fn id(&self) -> ZoneId {
        self.id
    }

    /// Returns the sandbox's name.
    pub fn sandbox(&self) -> &str {
        &self.sandbox
    }

    /// Returns the directory inside the sandbox.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Returns true when the zone refuses changes.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Returns how long attributes and listings are trusted.
    pub fn attr_ttl(&self) -> Duration {
        self.attr_ttl
    }

    /// Returns the local directory for contents in transit.
    pub fn spool(&self) -> &Path {
        &self.spool
    }

    /// Returns the longest time one call waits for the sandbox (`bytes`: how much it moves).
    pub fn deadline(&self, bytes: u64) -> Duration {
        let chunks = bytes / (2 << 20);
        self.request_timeout * (1 + chunks.min(1000) as u32) + DEADLINE_MARGIN
    }

    /// Fails with `READ_ONLY` when the zone refuses changes.
    pub fn check_writable(&self, vp: &VPath) -> FsResult<()> {
        super::zone::refuse_if_read_only(self.read_only, vp)
    }

    /// Creates an unnamed read-write file in the spool (named only until it is open), for a
    /// file's content in transit.
    pub fn spool_file(&self) -> std::io::Result<std::fs::File> {
        let n = self
            .spooled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self
            .spool
            .join(format!(".spool-{}-{n}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let _ = std::fs::remove_file(&path);
        Ok(file)
    }

    /// Returns the absolute path inside the sandbox of a path of this zone.
    pub fn remote_path(&self, vp: &VPath) -> String {
        join_remote(&self.root, vp.rel())
    }

    /// Runs a provider call on the zone's runtime and waits for it at most `deadline`.
    fn run<T, F>(&self, vp: &VPath, op: &str, deadline: Duration, call: F) -> FsResult<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn SandboxFs>) -> super::provider::BoxFuture<'static, SandboxFsResult<T>>,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = call(self.fs.clone());
        self.rt
            .as_ref()
            .expect("open until dropped")
            .spawn(async move {
                let _ = tx.send(fut.await);
            });
        match rx.recv_timeout(deadline) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(vp, e)),
            Err(_) => {
                tracing::warn!(
                    sandbox = %self.sandbox, path = %vp, op,
                    after_ms = deadline.as_millis() as u64,
                    "the sandbox did not answer in time"
                );
                Err(FsError::Sandbox {
                    path: vp.to_string(),
                    sandbox: self.sandbox.clone(),
                    code: ErrorCode::SandboxUnavailable,
                    reason: format!("it did not answer {op} within {} ms", deadline.as_millis()),
                })
            }
        }
    }

    /// Runs a call that changes `vp` in the sandbox, then drops what the caches knew about it
    /// (whether or not the call succeeded: a timed-out change may still have happened).
    fn change<F>(&self, vp: &VPath, op: &str, deadline: Duration, call: F) -> FsResult<()>
    where
        F: FnOnce(Arc<dyn SandboxFs>) -> super::provider::BoxFuture<'static, SandboxFsResult<()>>,
    {
        let supersedes = matches!(op, "write" | "remove" | "symlink");
        let _resend =
            (supersedes && self.has_pending(vp)).then(|| self.resend.lock().expect("not poisoned"));
        let res = self.run(vp, op, deadline, call);
        self.forget(vp);
        if res.is_ok() && supersedes {
            // What wardfs just put there is newer than a queued write-back of the same path.
            self.drop_pending(vp.rel(), None);
        }
        res
    }

    /// Maps a provider error to the core's error, naming the virtual path.
    pub fn error(&self, vp: &VPath, e: SandboxFsError) -> FsError {
        let path = vp.to_string();
        match e {
            SandboxFsError::NotFound { .. } => FsError::NotFound { path },
            SandboxFsError::Exists { .. } => FsError::Exists { path },
            SandboxFsError::IsDir { .. } => FsError::IsDir { path },
            SandboxFsError::NotDir { .. } => FsError::NotDir { path },
            SandboxFsError::NotEmpty { .. } => FsError::NotEmpty { path },
            SandboxFsError::PermissionDenied { .. } => FsError::PermissionDenied { path },
            SandboxFsError::NoSpace { .. } => FsError::NoSpace { path },
            e => {
                if e.is_unavailable() {
                    tracing::warn!(sandbox = %self.sandbox, path = %vp, error = %e, "sandbox unavailable");
                }
                FsError::Sandbox {
                    path,
                    sandbox: self.sandbox.clone(),
                    code: e.code(),
                    reason: e.to_string(),
                }
            }
        }
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.attr_ttl
    }

    /// Describes `vp` (symlinks followed: the provider's stat follows them), from the cache
    /// when it is younger than the TTL.
    pub fn stat(&self, vp: &VPath) -> FsResult<RemoteMeta> {
        let key = vp.rel().to_string();
        if let Some((at, meta)) = self.attrs.lock().expect("not poisoned").get(&key) {
            if self.fresh(*at) {
                return meta.clone().ok_or_else(|| FsError::NotFound {
                    path: vp.to_string(),
                });
            }
        }
        self.stat_fresh(vp)
    }

    /// Describes `vp`, asking the sandbox.
    pub fn stat_fresh(&self, vp: &VPath) -> FsResult<RemoteMeta> {
        let path = self.remote_path(vp);
        let res = self.run(vp, "stat", self.deadline(0), move |fs| {
            Box::pin(async move { fs.stat(&path).await })
        });
        let cached = match &res {
            Ok(m) => Some(m.clone()),
            Err(FsError::NotFound { .. }) => None,
            Err(_) => return res,
        };
        self.put_attr(vp.rel(), cached);
        res
    }

    fn put_attr(&self, rel: &str, meta: Option<RemoteMeta>) {
        let mut attrs = self.attrs.lock().expect("not poisoned");
        if attrs.len() >= CACHE_CAP {
            attrs.clear();
        }
        attrs.insert(rel.to_string(), (Instant::now(), meta));
    }

    /// Lists a directory (sorted by name), from the cache when younger than the TTL.
    pub fn list(&self, vp: &VPath) -> FsResult<Arc<Vec<RemoteEntry>>> {
        let key = vp.rel().to_string();
        if let Some((at, entries)) = self.lists.lock().expect("not poisoned").get(&key) {
            if self.fresh(*at) {
                return Ok(entries.clone());
            }
        }
        let path = self.remote_path(vp);
        let entries = Arc::new(self.run(vp, "list", self.deadline(0), move |fs| {
            Box::pin(async move { fs.list(&path).await })
        })?);
        let now = Instant::now();
        {
            let mut attrs = self.attrs.lock().expect("not poisoned");
            if attrs.len() >= CACHE_CAP {
                attrs.clear();
            }
            for e in entries.iter() {
                let rel = if key.is_empty() {
                    e.name.clone()
                } else {
                    format!("{key}/{}", e.name)
                };
                attrs.insert(rel, (now, Some(e.meta.clone())));
            }
        }
        let mut lists = self.lists.lock().expect("not poisoned");
        if lists.len() >= CACHE_CAP {
            lists.clear();
        }
        lists.insert(key, (now, entries.clone()));
        Ok(entries)
    }

    /// Downloads a whole file.
    pub fn read(&self, vp: &VPath, size_hint: u64) -> FsResult<Bytes> {
        let path = self.remote_path(vp);
        self.run(vp, "read", self.deadline(size_hint), move |fs| {
            Box::pin(async move { fs.read(&path).await })
        })
    }

    /// Streams a whole file into `out` (an empty local file, usually a [`spool_file`]) and
    /// returns its length: the content never sits in memory whole (when the provider streams).
    ///
    /// [`spool_file`]: SandboxZone::spool_file
    pub fn download(&self, vp: &VPath, out: &std::fs::File, size_hint: u64) -> FsResult<u64> {
        let path = self.remote_path(vp);
        let spool = |e| FsError::from_io(&vp.to_string(), "spool", e);
        let file = out.try_clone().map_err(spool)?;
        let n = self.run(vp, "read", self.deadline(size_hint), move |fs| {
            Box::pin(async move {
                // Written from its start: the spool file is new and empty.
                let mut out = std::io::BufWriter::new(file);
                let n = fs.read_into(&path, u64::MAX, &mut out).await?;
                std::io::Write::flush(&mut out).map_err(|source| SandboxFsError::Spool {
                    path: path.clone(),
                    source,
                })?;
                Ok(n)
            })
        })?;
        // The clone shares the file offset: rewind it for readers that read from the offset.
        std::io::Seek::seek(&mut &*out, std::io::SeekFrom::Start(0)).map_err(spool)?;
        Ok(n)
    }

    /// Replaces (or creates) a whole file with the content of the local file `src`, streamed;
    /// its parent directories are created.
    pub fn upload(&self, vp: &VPath, src: &std::fs::File) -> FsResult<()> {
        let path = self.remote_path(vp);
        let len = src
            .metadata()
            .map_err(|e| FsError::from_io(&vp.to_string(), "spool", e))?
            .len();
        let src = src
            .try_clone()
            .map_err(|e| FsError::from_io(&vp.to_string(), "spool", e))?;
        self.change(vp, "write", self.deadline(len), move |fs| {
            Box::pin(async move { fs.upload(&path, src).await })
        })
    }

    /// Replaces (or creates) a whole file; its parent directories are created.
    pub fn write(&self, vp: &VPath, data: Bytes) -> FsResult<()> {
        let path = self.remote_path(vp);
        let deadline = self.deadline(data.len() as u64);
        self.change(vp, "write", deadline, move |fs| {
            Box::pin(async move { fs.write(&path, data).await })
        })
    }

    /// Creates a directory and its missing parents.
    pub fn mkdir_p(&self, vp: &VPath) -> FsResult<()> {
        let path = self.remote_path(vp);
        self.change(vp, "mkdir", self.deadline(0), move |fs| {
            Box::pin(async move { fs.mkdir_p(&path).await })
        })
    }

    /// Removes a file, a symlink or (with `recursive`, or when empty) a directory.
    pub fn remove(&self, vp: &VPath, recursive: bool) -> FsResult<()> {
        if vp.is_root() {
            return Err(FsError::invalid(
                "path",
                format!("{vp} is the zone's root, which wardfs never removes"),
            ));
        }
        let path = self.remote_path(vp);
        self.change(vp, "remove", self.deadline(0), move |fs| {
            Box::pin(async move { fs.remove(&path, recursive).await })
        })
    }

    /// Renames `from` to `to` (a file in the way is replaced, a directory is not).
    pub fn rename(&self, from: &VPath, to: &VPath) -> FsResult<()> {
        let (src, dst) = (self.remote_path(from), self.remote_path(to));
        let res = self.change(from, "rename", self.deadline(0), move |fs| {
            Box::pin(async move { fs.rename(&src, &dst).await })
        });
        self.forget(to);
        if res.is_ok() {
            self.drop_pending(to.rel(), None);
        }
        res
    }

    /// Sets the permission bits and/or modification time.
    pub fn set_meta(&self, vp: &VPath, meta: MetaUpdate) -> FsResult<()> {
        let path = self.remote_path(vp);
        self.change(vp, "set metadata", self.deadline(0), move |fs| {
            Box::pin(async move { fs.set_meta(&path, meta).await })
        })
    }

    /// Creates (or replaces) a symlink at `vp` pointing at `target`.
    pub fn symlink(&self, vp: &VPath, target: &str) -> FsResult<()> {
        let path = self.remote_path(vp);
        let target = target.to_string();
        self.change(vp, "symlink", self.deadline(0), move |fs| {
            Box::pin(async move { fs.symlink(&target, &path).await })
        })
    }

    /// Returns every entry beneath `vp` (relative to it), for glob and grep.
    pub fn walk(&self, vp: &VPath) -> FsResult<Vec<super::provider::WalkEntry>> {
        let path = self.remote_path(vp);
        self.run(vp, "walk", self.deadline(0) * 4, move |fs| {
            Box::pin(async move { fs.walk(&path).await })
        })
    }

    fn pending_dir(&self) -> PathBuf {
        self.spool.join(PENDING_DIR)
    }

    /// Queues the content of `src` as the write-back of `vp` that just failed with `error`:
    /// copied into the durable queue (synced) before this returns, replacing an older queued
    /// content of the same path.
    pub fn queue_write_back(
        &self,
        vp: &VPath,
        src: &std::fs::File,
        origin: Option<crate::state::Origin>,
        now_ms: i64,
        error: &FsError,
    ) -> std::io::Result<()> {
        let dir = self.pending_dir();
        std::fs::create_dir_all(&dir)?;
        let stem = pending_stem(vp.rel());
        let mut pending = self.pending.lock().expect("not poisoned");
        // Copy, sync, then rename into place: a crash leaves the old entry or the new, whole.
        let tmp = dir.join(format!("{stem}.data.tmp"));
        let mut out = std::fs::File::create(&tmp)?;
        let mut from = src.try_clone()?;
        std::io::Seek::seek(&mut from, std::io::SeekFrom::Start(0))?;
        let bytes = std::io::copy(&mut from, &mut out)?;
        out.sync_all()?;
        std::fs::rename(&tmp, dir.join(format!("{stem}.data")))?;
        let record = PendingRecord {
            rel: vp.rel().to_string(),
            bytes,
            queued_ms: pending.get(vp.rel()).map_or(now_ms, |p| p.record.queued_ms),
            pid: origin.and_then(|o| o.pid),
            uid: origin.and_then(|o| o.uid),
        };
        let tmp = dir.join(format!("{stem}.json.tmp"));
        let mut out = std::fs::File::create(&tmp)?;
        out.write_all(&serde_json::to_vec(&record).map_err(std::io::Error::other)?)?;
        out.sync_all()?;
        std::fs::rename(&tmp, dir.join(format!("{stem}.json")))?;
        std::fs::File::open(&dir)?.sync_all()?;
        let (generation, attempts) = pending
            .get(vp.rel())
            .map_or((0, 0), |p| (p.generation + 1, p.attempts));
        tracing::warn!(
            sandbox = %self.sandbox, path = %vp, bytes, error = %error,
            "write-back failed; the content is queued and will be sent when the sandbox answers"
        );
        pending.insert(
            vp.rel().to_string(),
            Pending {
                record,
                generation,
                attempts: attempts + 1,
                next_try: Instant::now() + backoff(attempts),
                last_error: error.to_string(),
            },
        );
        Ok(())
    }

    /// Returns a copy of the queued content of `vp` (in a spool file), when a write-back of it
    /// is pending: what a new open must see rather than the sandbox's older content.
    pub fn pending_content(&self, vp: &VPath) -> std::io::Result<Option<std::fs::File>> {
        if !self
            .pending
            .lock()
            .expect("not poisoned")
            .contains_key(vp.rel())
        {
            return Ok(None);
        }
        let data = self
            .pending_dir()
            .join(format!("{}.data", pending_stem(vp.rel())));
        let mut from = match std::fs::File::open(data) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut copy = self.spool_file()?;
        std::io::copy(&mut from, &mut copy)?;
        Ok(Some(copy))
    }

    /// Returns true when a write-back of `vp` is queued.
    pub fn has_pending(&self, vp: &VPath) -> bool {
        self.pending
            .lock()
            .expect("not poisoned")
            .contains_key(vp.rel())
    }

    /// Lists the queued write-backs.
    pub fn pending_write_backs(&self) -> Vec<PendingWriteBack> {
        let pending = self.pending.lock().expect("not poisoned");
        let mut out: Vec<PendingWriteBack> = pending
            .values()
            .map(|p| PendingWriteBack {
                path: VPath::new(self.id, &p.record.rel)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| p.record.rel.clone()),
                bytes: p.record.bytes,
                queued_ms: p.record.queued_ms,
                attempts: p.attempts,
                last_error: p.last_error.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// Forgets the queued write-back of `rel` (only generation `generation`, when given) and
    /// deletes its files.
    fn drop_pending(&self, rel: &str, generation: Option<u64>) {
        let mut pending = self.pending.lock().expect("not poisoned");
        match pending.get(rel) {
            Some(p) if generation.is_none_or(|g| g == p.generation) => {}
            _ => return,
        }
        pending.remove(rel);
        let stem = pending_stem(rel);
        let dir = self.pending_dir();
        // The record goes first: a data file without one is an orphan, removed at the next open.
        let _ = std::fs::remove_file(dir.join(format!("{stem}.json")));
        let _ = std::fs::remove_file(dir.join(format!("{stem}.data")));
    }

    /// Sends the queued write-backs that are due (all of them with `force`), returning those the
    /// sandbox took; each failure pushes its next try further out.
    pub fn retry_write_backs(&self, force: bool) -> Vec<WrittenBack> {
        let due: Vec<(String, u64)> = {
            let now = Instant::now();
            self.pending
                .lock()
                .expect("not poisoned")
                .iter()
                .filter(|(_, p)| force || p.next_try <= now)
                .map(|(rel, p)| (rel.clone(), p.generation))
                .collect()
        };
        let mut done = Vec::new();
        for (rel, generation) in due {
            if let Some(w) = self.retry_one(&rel, generation) {
                done.push(w);
            }
        }
        done
    }

    /// Sends the queued write-back of `vp` now; Ok when none is queued or the sandbox took it.
    pub fn retry_write_back(&self, vp: &VPath) -> FsResult<Option<WrittenBack>> {
        let generation = match self.pending.lock().expect("not poisoned").get(vp.rel()) {
            Some(p) => p.generation,
            None => return Ok(None),
        };
        match self.retry_one(vp.rel(), generation) {
            Some(w) => Ok(Some(w)),
            None if !self.has_pending(vp) => Ok(None),
            None => Err(FsError::Sandbox {
                path: vp.to_string(),
                sandbox: self.sandbox.clone(),
                code: ErrorCode::SandboxUnavailable,
                reason: format!(
                    "the write-back is still queued: {}",
                    self.pending
                        .lock()
                        .expect("not poisoned")
                        .get(vp.rel())
                        .map(|p| p.last_error.clone())
                        .unwrap_or_default()
                ),
            }),
        }
    }

    fn retry_one(&self, rel: &str, generation: u64) -> Option<WrittenBack> {
        let vp = VPath::new(self.id, rel).ok()?;
        let _resend = self.resend.lock().expect("not poisoned");
        if self
            .pending
            .lock()
            .expect("not poisoned")
            .get(rel)
            .is_none_or(|p| p.generation != generation)
        {
            // Superseded or re-queued while this waited for its turn.
            return None;
        }
        let data = self
            .pending_dir()
            .join(format!("{}.data", pending_stem(rel)));
        let res = std::fs::File::open(&data)
            .map_err(|e| FsError::from_io(&vp.to_string(), "open queued write-back", e))
            .and_then(|f| {
                let len = f
                    .metadata()
                    .map_err(|e| FsError::from_io(&vp.to_string(), "spool", e))?
                    .len();
                let path = self.remote_path(&vp);
                let res = self.run(&vp, "write", self.deadline(len), move |fs| {
                    Box::pin(async move { fs.upload(&path, f).await })
                });
                self.forget(&vp);
                res.map(|()| len)
            });
        let mut pending = self.pending.lock().expect("not poisoned");
        let p = pending.get_mut(rel)?;
        match res {
            Ok(bytes) if p.generation == generation => {
                let record = p.record.clone();
                drop(pending);
                self.drop_pending(rel, Some(generation));
                tracing::info!(sandbox = %self.sandbox, path = %vp, bytes, "queued write-back sent");
                Some(WrittenBack {
                    path: vp,
                    bytes,
                    origin: crate::state::Origin {
                        via: crate::state::Via::Fuse,
                        pid: record.pid,
                        uid: record.uid,
                    },
                })
            }
            // A newer content was queued meanwhile: it goes on the next round.
            Ok(_) => None,
            Err(e) => {
                p.last_error = e.to_string();
                p.next_try = Instant::now() + backoff(p.attempts);
                p.attempts = p.attempts.saturating_add(1);
                None
            }
        }
    }

    /// Drops what the caches know about `vp`, beneath it, and about its ancestors (a write may
    /// have created them, and their listings now hold a new name).
    pub fn forget(&self, vp: &VPath) {
        let rel = vp.rel();
        let under = format!("{rel}/");
        let ancestors: Vec<&str> = std::iter::once("")
            .chain(rel.match_indices('/').map(|(i, _)| &rel[..i]))
            .collect();
        let hit = |k: &String| {
            k == rel || rel.is_empty() || k.starts_with(&under) || ancestors.contains(&k.as_str())
        };
        self.attrs
            .lock()
            .expect("not poisoned")
            .retain(|k, _| !hit(k));
        self.lists
            .lock()
            .expect("not poisoned")
            .retain(|k, _| !hit(k));
    }
}

/// A remote modification time in milliseconds (0 when the provider gives none).
pub fn mtime_ms(meta: &RemoteMeta) -> i64 {
    meta.mtime_ns.map(|ns| ns / 1_000_000).unwrap_or(0)
}

/// The queue of failed write-backs, beneath the spool directory (never emptied at open).
const PENDING_DIR: &str = "pending";

/// The file name stem of a queued write-back: a hash, so any path fits in one name.
fn pending_stem(rel: &str) -> String {
    super::provider::HashAlgo::Sha256.digest(rel.as_bytes())
}

/// Reads the queue a previous run left; half-written entries (a crash mid-queue) are removed.
fn load_pending(dir: &Path, id: ZoneId) -> std::io::Result<HashMap<String, Pending>> {
    let mut out = HashMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for e in entries {
        names.push(e?.file_name().to_string_lossy().into_owned());
    }
    for name in &names {
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let record: Option<PendingRecord> = std::fs::read(dir.join(name))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        match record {
            Some(r)
                if names.contains(&format!("{stem}.data"))
                    && pending_stem(&r.rel) == stem
                    && VPath::new(id, &r.rel).is_ok() =>
            {
                out.insert(
                    r.rel.clone(),
                    Pending {
                        record: r,
                        generation: 0,
                        attempts: 0,
                        next_try: Instant::now(),
                        last_error: "queued by a previous run of the daemon".into(),
                    },
                );
            }
            _ => {
                tracing::error!(file = %dir.join(name).display(), "unreadable queued write-back record; left in place");
            }
        }
    }
    // Temp files of an interrupted queueing, and data whose record never got written.
    for name in &names {
        let stem = name
            .strip_suffix(".data")
            .filter(|s| !names.contains(&format!("{s}.json")));
        if name.ends_with(".tmp") || stem.is_some() {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    Ok(out)
}

/// Sends the zones' queued write-backs in the background, with backoff, and journals each one
/// the sandbox takes; the thread ends when the zones are dropped.
pub fn spawn_write_back_retries(zones: &Arc<super::Zones>) -> std::io::Result<()> {
    if !ZoneId::ALL
        .iter()
        .any(|id| matches!(zones.zone(*id), super::Zone::Sandbox(_)))
    {
        return Ok(());
    }
    let weak: Weak<super::Zones> = Arc::downgrade(zones);
    std::thread::Builder::new()
        .name("wardfs-write-back".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(250));
            let Some(zones) = weak.upgrade() else {
                return;
            };
            for id in [ZoneId::Cache, ZoneId::Workspace] {
                if let super::Zone::Sandbox(r) = zones.zone(id) {
                    for w in r.retry_write_backs(false) {
                        zones.record_change(&w.path, "write", Some(w.bytes), None, w.origin);
                    }
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_left_by_a_crash_is_read_back_and_its_debris_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let rec = |rel: &str| PendingRecord {
            rel: rel.into(),
            bytes: 3,
            queued_ms: 7,
            pid: Some(1),
            uid: None,
        };
        let put = |stem: &str, r: &PendingRecord| {
            std::fs::write(
                d.join(format!("{stem}.json")),
                serde_json::to_vec(r).unwrap(),
            )
            .unwrap()
        };
        // Whole: record and content.
        let good = pending_stem("a/b.txt");
        put(&good, &rec("a/b.txt"));
        std::fs::write(d.join(format!("{good}.data")), "abc").unwrap();
        // Content whose record was never written, and temp files of an interrupted queueing.
        let orphan = pending_stem("orphan.txt");
        std::fs::write(d.join(format!("{orphan}.data")), "x").unwrap();
        std::fs::write(d.join(format!("{orphan}.json.tmp")), "{").unwrap();
        // A record under another path's name, and one that climbs out of the zone: not trusted.
        let other = pending_stem("other.txt");
        put(&other, &rec("not-other.txt"));
        std::fs::write(d.join(format!("{other}.data")), "y").unwrap();
        let out = pending_stem("../out.txt");
        put(&out, &rec("../out.txt"));
        std::fs::write(d.join(format!("{out}.data")), "z").unwrap();

        let loaded = load_pending(d, ZoneId::Workspace).unwrap();
        assert_eq!(loaded.keys().collect::<Vec<_>>(), ["a/b.txt"]);
        assert_eq!(loaded["a/b.txt"].record.bytes, 3);
        assert!(!d.join(format!("{orphan}.data")).exists());
        assert!(!d.join(format!("{orphan}.json.tmp")).exists());
        assert!(d.join(format!("{good}.data")).exists());
        // A missing queue is an empty one.
        assert!(load_pending(&d.join("none"), ZoneId::Workspace)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn retries_back_off_up_to_a_minute() {
        assert_eq!(backoff(0), RETRY_FIRST);
        assert_eq!(backoff(1), RETRY_FIRST * 2);
        assert_eq!(backoff(40), RETRY_MAX);
    }
}
