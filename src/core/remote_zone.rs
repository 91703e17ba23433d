//! A zone served from a directory inside a remote sandbox (`[zones.workspace] sandbox = "dev"`).
//!
//! [`RemoteZone`] reaches the directory through a [`RemoteFs`] provider. The core is synchronous
//! (the mount's request threads and the API's blocking tasks call it), the providers are async: each
//! call runs on the zone's own small tokio runtime and the caller waits for it with a hard deadline
//! (the provider's request timeout plus a margin, more for large transfers), so a sandbox that is
//! down or hung gives `SANDBOX_UNAVAILABLE` after that long and never a hang.
//!
//! Attributes and listings are cached for the zone's `attr_ttl` (a second by default), and every
//! change made through sandfs drops what it touched. Whole files go through a local spool
//! directory (under the state dir): the API's streamed writes are collected there and uploaded
//! on commit, and the mount keeps an open file's content there between open and close.
//!
//! Remote paths are built only by [`RemoteZone::remote_path`] from a parsed [`VPath`] (no `..`,
//! no absolute part), so no request names anything outside the zone's directory; the provider
//! refuses relative paths and NUL bytes once more before each request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::error::{ErrorCode, FsError, FsResult};
use super::path::{VPath, ZoneId};
use super::remote::{
    join_remote, MetaUpdate, RemoteEntry, RemoteError, RemoteFs, RemoteMeta, RemoteResult,
};

/// Entries kept in each cache before it is emptied (bounds memory on huge trees).
const CACHE_CAP: usize = 100_000;
/// Added to the provider's request timeout to get the hard deadline of one call.
const DEADLINE_MARGIN: Duration = Duration::from_secs(2);

/// Builds a provider for a sandbox named in the config (the daemon passes one in; the core knows
/// no provider).
pub type Connector<'a> =
    &'a dyn Fn(&crate::config::RemoteBacking) -> Result<Arc<dyn RemoteFs>, String>;

/// A zone backed by a directory inside a sandbox.
pub struct RemoteZone {
    id: ZoneId,
    sandbox: String,
    root: String,
    fs: Arc<dyn RemoteFs>,
    rt: Option<tokio::runtime::Runtime>,
    request_timeout: Duration,
    attr_ttl: Duration,
    read_only: bool,
    spool: PathBuf,
    /// Names spool files apart.
    spooled: std::sync::atomic::AtomicU64,
    attrs: Mutex<HashMap<String, (Instant, Option<RemoteMeta>)>>,
    lists: Mutex<HashMap<String, CachedList>>,
}

/// A listing and when it was taken.
type CachedList = (Instant, Arc<Vec<RemoteEntry>>);

impl std::fmt::Debug for RemoteZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteZone")
            .field("id", &self.id)
            .field("sandbox", &self.sandbox)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Drop for RemoteZone {
    fn drop(&mut self) {
        // The zones may be dropped inside the daemon's runtime, where a blocking shutdown panics.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl RemoteZone {
    /// Serves `root` inside the sandbox `sandbox` through `fs`; `spool` is a local directory for
    /// file contents in transit (created, and emptied of what a previous run left).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        id: ZoneId,
        sandbox: &str,
        root: &str,
        fs: Arc<dyn RemoteFs>,
        attr_ttl: Duration,
        read_only: bool,
        spool: &Path,
    ) -> std::io::Result<RemoteZone> {
        std::fs::create_dir_all(spool)?;
        for e in std::fs::read_dir(spool)?.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("sandfs-remote-{}", id.name()))
            .enable_all()
            .build()?;
        let request_timeout = fs.limits().request_timeout;
        Ok(RemoteZone {
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
        F: FnOnce(Arc<dyn RemoteFs>) -> super::remote::BoxFuture<'static, RemoteResult<T>>,
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
        F: FnOnce(Arc<dyn RemoteFs>) -> super::remote::BoxFuture<'static, RemoteResult<()>>,
    {
        let res = self.run(vp, op, deadline, call);
        self.forget(vp);
        res
    }

    /// Maps a provider error to the core's error, naming the virtual path.
    pub fn error(&self, vp: &VPath, e: RemoteError) -> FsError {
        let path = vp.to_string();
        match e {
            RemoteError::NotFound { .. } => FsError::NotFound { path },
            RemoteError::Exists { .. } => FsError::Exists { path },
            RemoteError::IsDir { .. } => FsError::IsDir { path },
            RemoteError::NotDir { .. } => FsError::NotDir { path },
            RemoteError::NotEmpty { .. } => FsError::NotEmpty { path },
            RemoteError::PermissionDenied { .. } => FsError::PermissionDenied { path },
            RemoteError::NoSpace { .. } => FsError::NoSpace { path },
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
    /// [`spool_file`]: RemoteZone::spool_file
    pub fn download(&self, vp: &VPath, out: &std::fs::File, size_hint: u64) -> FsResult<u64> {
        let path = self.remote_path(vp);
        let out = out
            .try_clone()
            .map_err(|e| FsError::from_io(&vp.to_string(), "spool", e))?;
        self.run(vp, "read", self.deadline(size_hint), move |fs| {
            Box::pin(async move { fs.download(&path, out).await })
        })
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
                format!("{vp} is the zone's root, which sandfs never removes"),
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
    pub fn walk(&self, vp: &VPath) -> FsResult<Vec<super::remote::WalkEntry>> {
        let path = self.remote_path(vp);
        self.run(vp, "walk", self.deadline(0) * 4, move |fs| {
            Box::pin(async move { fs.walk(&path).await })
        })
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
