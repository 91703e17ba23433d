//! The remote filesystem contract: what a directory inside a remote sandbox must offer.
//!
//! [`SandboxFs`] is implemented by the providers in `crate::sandbox` (the `sandbox-agent` HTTP
//! server first) and consumed by the mirror and by remote-backed zones, so it lives here, in the
//! core, which imports no provider. Paths are absolute paths *inside the sandbox* (`/home/user/x`),
//! UTF-8, never virtual paths; a relative path or a NUL byte is refused before any request.
//!
//! Seven operations are required (`stat, list, read, write, mkdir_p, remove, rename`); the rest
//! have default implementations built on those (or on [`SandboxFs::exec`]), so a minimal provider
//! works everywhere and a capable one overrides what it does better. [`SandboxFs::caps`] says
//! which of the overrides a provider really has, [`SandboxFs::limits`] what it accepts. The
//! trait is object-safe (`Arc<dyn SandboxFs>`): the daemon picks providers from its config.
//!
//! Every failure is a [`SandboxFsError`], whose [`ErrorCode`] is chosen in [`SandboxFsError::code`] and
//! nowhere else. An unreachable or hung sandbox is `SANDBOX_UNAVAILABLE` after the provider's
//! timeout, never a hang; a refused credential is `AUTH_FAILED`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::core::{EntryKind, ErrorCode};

/// A boxed, sendable future: what the methods of [`SandboxFs`] return, so the trait stays
/// object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The result of a remote operation.
pub type SandboxFsResult<T> = Result<T, SandboxFsError>;

/// What the remote side reports about one file, directory or link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteMeta {
    pub kind: EntryKind,
    /// Bytes (of the link itself for a symlink seen by [`SandboxFs::walk`]).
    pub size: u64,
    /// Modification time in nanoseconds since the epoch, as the remote clock saw it. Only ever
    /// compared with earlier remote readings (a fingerprint), never with local times.
    pub mtime_ns: Option<i64>,
    /// Permission bits (`0o755`), when the provider can see them.
    pub mode: Option<u32>,
    /// Where a symlink points, when the provider can see symlinks.
    pub link_target: Option<String>,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEntry {
    /// The name inside the listed directory.
    pub name: String,
    pub meta: RemoteMeta,
}

/// One entry found by [`SandboxFs::walk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkEntry {
    /// The path relative to the walked root, `/`-separated (`src/lib.rs`).
    pub path: String,
    pub meta: RemoteMeta,
}

/// One item of a [`SandboxFs::put_batch`], at a path relative to the batch's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchItem {
    /// A regular file with its content. `mtime` is in seconds since the epoch (`None`: now).
    File {
        path: String,
        data: Bytes,
        mode: u32,
        mtime: Option<u64>,
    },
    /// A directory (created if missing, so empty directories survive).
    Dir { path: String, mode: u32 },
    /// A symbolic link pointing at `target` (kept verbatim, never resolved).
    Symlink { path: String, target: String },
}

impl BatchItem {
    /// Returns the item's path relative to the batch root.
    pub fn path(&self) -> &str {
        match self {
            BatchItem::File { path, .. }
            | BatchItem::Dir { path, .. }
            | BatchItem::Symlink { path, .. } => path,
        }
    }
}

/// What a [`SandboxFs::put_batch`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Items written (files, directories and links).
    pub items: usize,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Requests it took (archives, chunk uploads, joins, single writes).
    pub requests: usize,
}

/// Metadata to set with [`SandboxFs::set_meta`]; `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaUpdate {
    /// Permission bits (`0o644`).
    pub mode: Option<u32>,
    /// Modification time in seconds since the epoch.
    pub mtime: Option<u64>,
}

/// A content hash algorithm [`SandboxFs::hash`] can compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgo {
    /// BLAKE3, what the mirror's manifest records.
    Blake3,
    /// SHA-256, what almost every sandbox can compute itself (`sha256sum`).
    Sha256,
}

impl HashAlgo {
    /// Returns the lowercase hex digest of `data`.
    pub fn digest(self, data: &[u8]) -> String {
        match self {
            HashAlgo::Blake3 => blake3::hash(data).to_hex().to_string(),
            HashAlgo::Sha256 => {
                use sha2::Digest as _;
                let digest = sha2::Sha256::digest(data);
                digest.iter().map(|b| format!("{b:02x}")).collect()
            }
        }
    }
}

/// A command to run inside the sandbox. No shell is involved unless `command` is one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecRequest {
    pub command: String,
    pub args: Vec<String>,
    /// Working directory (absolute); the provider's default when `None`.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// How long the command may run; the provider's `limits().exec_timeout` when `None`.
    pub timeout: Option<Duration>,
}

impl ExecRequest {
    /// Builds a request for `command` with `args`.
    pub fn new<I, S>(command: impl Into<String>, args: I) -> ExecRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..ExecRequest::default()
        }
    }
}

/// How a command run with [`SandboxFs::exec`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code; `None` when it was killed (by a signal or the timeout).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Standard output as text (invalid UTF-8 replaced by the provider).
    pub stdout: String,
    pub stderr: String,
    /// True when the provider cut the output at its limit.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
}

impl ExecOutput {
    /// Returns true when the command exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// A change the remote side reported through [`SandboxFs::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteChange {
    /// The absolute remote path that changed.
    pub path: String,
}

/// Which optional operations a provider implements natively (not through the fallbacks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// [`SandboxFs::exec`] runs commands.
    pub exec: bool,
    /// [`SandboxFs::put_batch`] sends many items per request.
    pub batch: bool,
    /// [`SandboxFs::walk`] reports symlinks as symlinks, with targets and modes.
    pub walk_sees_links: bool,
    /// [`SandboxFs::list`] and [`SandboxFs::stat`] tell symlinks apart (rather than following them).
    pub stat_sees_links: bool,
    /// [`SandboxFs::watch`] delivers change events.
    pub watch: bool,
    /// Algorithms [`SandboxFs::hash`] computes inside the sandbox, without downloading.
    pub remote_hashes: Vec<HashAlgo>,
}

/// What a provider accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderLimits {
    /// Largest request body; larger files are sent in chunks.
    pub max_request_bytes: u64,
    /// Largest standard output [`SandboxFs::exec`] returns before truncating.
    pub max_exec_output_bytes: u64,
    /// Longest time one request may take before it fails as unavailable.
    pub request_timeout: Duration,
    /// Default time limit of a command run with [`SandboxFs::exec`].
    pub exec_timeout: Duration,
}

/// A failed remote operation.
#[derive(Debug, thiserror::Error)]
pub enum SandboxFsError {
    #[error("{path}: no such file or directory in the sandbox")]
    NotFound { path: String },
    #[error("{path}: already exists in the sandbox")]
    Exists { path: String },
    #[error("{path}: is a directory in the sandbox")]
    IsDir { path: String },
    #[error("{path}: not a directory in the sandbox")]
    NotDir { path: String },
    #[error("{path}: directory is not empty in the sandbox")]
    NotEmpty { path: String },
    #[error("{path}: permission denied in the sandbox")]
    PermissionDenied { path: String },
    #[error("{path}: no space left in the sandbox")]
    NoSpace { path: String },
    #[error("{path:?}: invalid remote path: {rule}")]
    InvalidPath { path: String, rule: String },
    #[error("{path}: {what} of {size} bytes is over the sandbox's limit of {limit} bytes")]
    TooLarge {
        path: String,
        what: &'static str,
        size: u64,
        limit: u64,
    },
    /// A listing or walk holds more entries than the daemon keeps; reading stopped there.
    #[error("{path}: the sandbox lists more than {limit} entries below it (limits.sandbox_walk_entries); stopped reading")]
    TooManyEntries { path: String, limit: usize },
    #[error("sandbox at {url} is unavailable: {reason}")]
    Unavailable { url: String, reason: String },
    #[error("sandbox at {url} did not answer {op} within {} ms", after.as_millis())]
    TimedOut {
        url: String,
        op: String,
        after: Duration,
    },
    #[error("sandbox at {url} refused the credentials ({status}): {reason}")]
    AuthFailed {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("no token for the sandbox at {url}: environment variable {var} is not set")]
    TokenMissing { url: String, var: String },
    #[error("invalid {name}: {rule}")]
    InvalidConfig { name: String, rule: String },
    #[error("{op} {path}: the sandbox answered {status}: {detail}")]
    Remote {
        op: &'static str,
        path: String,
        status: u16,
        detail: String,
    },
    #[error("{op} {path}: `{command}` in the sandbox failed ({status}): {stderr}")]
    CommandFailed {
        op: &'static str,
        path: String,
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{op} is not supported by the {provider} provider")]
    Unsupported {
        op: &'static str,
        provider: &'static str,
    },
    #[error("sandbox at {url} sent an answer wardfs cannot read ({op}): {reason}")]
    Protocol {
        url: String,
        op: &'static str,
        reason: String,
    },
    /// The local file a transfer streams to or from failed (disk full, I/O error).
    #[error("{path}: the local spool file failed: {source}")]
    Spool {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxFsError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            SandboxFsError::NotFound { .. } => ErrorCode::NotFound,
            SandboxFsError::Exists { .. } => ErrorCode::Exists,
            SandboxFsError::IsDir { .. } => ErrorCode::IsDir,
            SandboxFsError::NotDir { .. } => ErrorCode::NotDir,
            SandboxFsError::NotEmpty { .. } => ErrorCode::NotEmpty,
            SandboxFsError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            SandboxFsError::NoSpace { .. } => ErrorCode::NoSpace,
            SandboxFsError::InvalidPath { .. } => ErrorCode::InvalidPath,
            SandboxFsError::TooLarge { .. } | SandboxFsError::TooManyEntries { .. } => {
                ErrorCode::TooLarge
            }
            SandboxFsError::Unavailable { .. } | SandboxFsError::TimedOut { .. } => {
                ErrorCode::SandboxUnavailable
            }
            SandboxFsError::AuthFailed { .. } | SandboxFsError::TokenMissing { .. } => {
                ErrorCode::AuthFailed
            }
            SandboxFsError::InvalidConfig { .. } => ErrorCode::InvalidArgument,
            SandboxFsError::Remote { .. }
            | SandboxFsError::CommandFailed { .. }
            | SandboxFsError::Unsupported { .. }
            | SandboxFsError::Protocol { .. } => ErrorCode::Internal,
            SandboxFsError::Spool { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                ErrorCode::NoSpace
            }
            SandboxFsError::Spool { .. } => ErrorCode::Internal,
        }
    }

    /// Returns the remote path the error is about, when it is about one.
    pub fn path(&self) -> Option<&str> {
        match self {
            SandboxFsError::NotFound { path }
            | SandboxFsError::Exists { path }
            | SandboxFsError::IsDir { path }
            | SandboxFsError::NotDir { path }
            | SandboxFsError::NotEmpty { path }
            | SandboxFsError::PermissionDenied { path }
            | SandboxFsError::NoSpace { path }
            | SandboxFsError::InvalidPath { path, .. }
            | SandboxFsError::TooLarge { path, .. }
            | SandboxFsError::TooManyEntries { path, .. }
            | SandboxFsError::Remote { path, .. }
            | SandboxFsError::CommandFailed { path, .. }
            | SandboxFsError::Spool { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Returns true when the sandbox could not be reached (or did not answer in time): the
    /// failure a session retries with backoff, unlike a refused token or a missing file.
    pub fn is_unavailable(&self) -> bool {
        self.code() == ErrorCode::SandboxUnavailable
    }
}

/// Returns `path` when it is a usable remote path: absolute, no NUL, no `.`/`..` component.
pub fn check_remote_path(path: &str) -> SandboxFsResult<&str> {
    let rule = if !path.starts_with('/') {
        Some("it must be absolute (start with `/`)")
    } else if path.contains('\0') {
        Some("it contains a NUL byte")
    } else if path.split('/').any(|c| c == "." || c == "..") {
        Some("it contains a `.` or `..` component")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(SandboxFsError::InvalidPath {
            path: path.to_string(),
            rule: rule.to_string(),
        }),
        None => Ok(path),
    }
}

/// Returns `rel` when it is a usable path relative to a batch or walk root: not empty, not
/// absolute, no NUL, no `.`/`..` or empty component.
pub fn check_relative_path(rel: &str) -> SandboxFsResult<&str> {
    let rule = if rel.is_empty() {
        Some("it is empty")
    } else if rel.starts_with('/') {
        Some("it must be relative to the root")
    } else if rel.contains('\0') {
        Some("it contains a NUL byte")
    } else if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        Some("it contains an empty, `.` or `..` component")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(SandboxFsError::InvalidPath {
            path: rel.to_string(),
            rule: rule.to_string(),
        }),
        None => Ok(rel),
    }
}

/// Joins a remote directory and a relative path.
pub fn join_remote(dir: &str, rel: &str) -> String {
    if rel.is_empty() {
        dir.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{rel}")
    } else {
        format!("{dir}/{rel}")
    }
}

/// A directory inside a remote sandbox, reached through a provider.
///
/// Required: [`stat`](SandboxFs::stat), [`list`](SandboxFs::list), [`read`](SandboxFs::read),
/// [`write`](SandboxFs::write), [`mkdir_p`](SandboxFs::mkdir_p), [`remove`](SandboxFs::remove),
/// [`rename`](SandboxFs::rename). Everything else falls back to those, or to
/// [`exec`](SandboxFs::exec) where only a command can do it (modes, links, remote hashes).
pub trait SandboxFs: Send + Sync {
    /// Returns the provider's name (`sandbox-agent`), for messages.
    fn provider(&self) -> &'static str;

    /// Returns which optional operations this provider implements natively.
    fn caps(&self) -> Caps;

    /// Returns what this provider accepts.
    fn limits(&self) -> ProviderLimits;

    /// Returns the metadata of `path`. Providers whose [`Caps::stat_sees_links`] is false follow
    /// symlinks (a dangling one is `NotFound`).
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<RemoteMeta>>;

    /// Returns the entries of the directory `path`, sorted by name.
    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<Vec<RemoteEntry>>>;

    /// Returns the whole content of the file `path`.
    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<Bytes>>;

    /// Replaces the content of the file `path` with `data`, creating it and its missing parent
    /// directories. Files over [`ProviderLimits::max_request_bytes`] are sent in chunks and joined in the
    /// sandbox, so they appear whole or not at all.
    fn write<'a>(&'a self, path: &'a str, data: Bytes) -> BoxFuture<'a, SandboxFsResult<()>>;

    /// Streams the content of the file `path` into `sink`, at most `limit` bytes (`TooLarge`
    /// beyond), and returns its length. Providers that can stream override it so a download
    /// never sits whole in memory; the fallback reads it whole.
    fn read_into<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
        sink: &'a mut (dyn std::io::Write + Send),
    ) -> BoxFuture<'a, SandboxFsResult<u64>> {
        Box::pin(async move {
            let data = self.read(path).await?;
            if data.len() as u64 > limit {
                return Err(SandboxFsError::TooLarge {
                    path: path.to_string(),
                    what: "file",
                    size: data.len() as u64,
                    limit,
                });
            }
            sink.write_all(&data)
                .map_err(|source| SandboxFsError::Spool {
                    path: path.to_string(),
                    source,
                })?;
            Ok(data.len() as u64)
        })
    }

    /// Replaces the content of the file `path` with the content of the local file `src`, like
    /// [`write`](SandboxFs::write). Providers that send large files in pieces override this to
    /// read one piece at a time; the fallback reads `src` whole.
    fn upload<'a>(
        &'a self,
        path: &'a str,
        src: std::fs::File,
    ) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            let spool = |source| SandboxFsError::Spool {
                path: path.to_string(),
                source,
            };
            let len = src.metadata().map_err(spool)?.len();
            let mut data = vec![0u8; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&src, &mut data, 0).map_err(spool)?;
            self.write(path, Bytes::from(data)).await
        })
    }

    /// Creates the directory `path` and its missing parents; an existing directory is fine.
    fn mkdir_p<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<()>>;

    /// Removes `path`: a file, a symlink (never what it points to), or a directory — with its
    /// contents when `recursive`, otherwise only when empty.
    fn remove<'a>(&'a self, path: &'a str, recursive: bool) -> BoxFuture<'a, SandboxFsResult<()>>;

    /// Renames `from` to `to` like rename(2): an existing file at `to` is replaced, an existing
    /// directory at `to` is never replaced (`Exists`), missing parents of `to` are created.
    fn rename<'a>(&'a self, from: &'a str, to: &'a str) -> BoxFuture<'a, SandboxFsResult<()>>;

    /// Checks that the sandbox answers and accepts the credentials.
    fn check(&self) -> BoxFuture<'_, SandboxFsResult<()>> {
        Box::pin(async move { self.stat("/").await.map(|_| ()) })
    }

    /// Writes many items below the directory `root` (created if missing), keeping modes and
    /// symlinks. Never deletes anything. The fallback writes them one by one.
    fn put_batch<'a>(
        &'a self,
        root: &'a str,
        items: Vec<BatchItem>,
    ) -> BoxFuture<'a, SandboxFsResult<BatchReport>> {
        Box::pin(async move {
            check_remote_path(root)?;
            let mut report = BatchReport::default();
            for item in items {
                let path = join_remote(root, check_relative_path(item.path())?);
                match item {
                    BatchItem::Dir { mode, .. } => {
                        self.mkdir_p(&path).await?;
                        self.set_meta(
                            &path,
                            MetaUpdate {
                                mode: Some(mode),
                                mtime: None,
                            },
                        )
                        .await?;
                        report.requests += 2;
                    }
                    BatchItem::File {
                        data, mode, mtime, ..
                    } => {
                        report.bytes += data.len() as u64;
                        self.write(&path, data).await?;
                        self.set_meta(
                            &path,
                            MetaUpdate {
                                mode: Some(mode),
                                mtime,
                            },
                        )
                        .await?;
                        report.requests += 2;
                    }
                    BatchItem::Symlink { target, .. } => {
                        self.symlink(&target, &path).await?;
                        report.requests += 1;
                    }
                }
                report.items += 1;
            }
            Ok(report)
        })
    }

    /// Returns every entry below `root` (not `root` itself), in no particular order. The
    /// fallback lists directories recursively, so it sees what [`SandboxFs::list`] sees.
    fn walk<'a>(&'a self, root: &'a str) -> BoxFuture<'a, SandboxFsResult<Vec<WalkEntry>>> {
        Box::pin(walk_by_listing(self, root, WalkCap::NONE))
    }

    /// Sets the mode and/or modification time of `path` (not following a symlink for the time).
    /// The fallback runs `chmod`/`touch` through [`SandboxFs::exec`].
    fn set_meta<'a>(
        &'a self,
        path: &'a str,
        meta: MetaUpdate,
    ) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            if meta.mode.is_none() && meta.mtime.is_none() {
                return Ok(());
            }
            // Paths are absolute, so none can be taken for an option.
            let script = "set -e\n[ -z \"$2\" ] || chmod \"$2\" \"$1\"\n[ -z \"$3\" ] || touch -h -c -d \"@$3\" \"$1\"";
            let mode = meta.mode.map(|m| format!("{:o}", m & 0o7777));
            let mtime = meta.mtime.map(|t| t.to_string());
            let args = [
                "-c",
                script,
                "sh",
                path,
                mode.as_deref().unwrap_or(""),
                mtime.as_deref().unwrap_or(""),
            ];
            let out = self.exec(ExecRequest::new("sh", args)).await?;
            command_result("set_meta", path, "chmod/touch", &out)
        })
    }

    /// Creates (or replaces) the symlink `path` pointing at `target`. The fallback runs `ln`
    /// through [`SandboxFs::exec`]; an existing directory at `path` is never replaced.
    fn symlink<'a>(&'a self, target: &'a str, path: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            let script = "if [ -d \"$2\" ] && [ ! -L \"$2\" ]; then echo \"$2: is a directory\" >&2; exit 21; fi\n\
                          mkdir -p -- \"$(dirname -- \"$2\")\" && ln -sfn -- \"$1\" \"$2\"";
            let out = self
                .exec(ExecRequest::new("sh", ["-c", script, "sh", target, path]))
                .await?;
            if out.exit_code == Some(21) {
                return Err(SandboxFsError::Exists {
                    path: path.to_string(),
                });
            }
            command_result("symlink", path, "ln", &out)
        })
    }

    /// Returns the lowercase hex digest of the file `path`. The fallback downloads the file and
    /// hashes it here; see [`Caps::remote_hashes`] for what a provider hashes in place.
    fn hash<'a>(&'a self, path: &'a str, algo: HashAlgo) -> BoxFuture<'a, SandboxFsResult<String>> {
        Box::pin(async move {
            let data = self.read(path).await?;
            Ok(algo.digest(&data))
        })
    }

    /// Runs a command inside the sandbox and waits for it. No fallback.
    fn exec(&self, req: ExecRequest) -> BoxFuture<'_, SandboxFsResult<ExecOutput>> {
        let _ = req;
        let provider = self.provider();
        Box::pin(async move {
            Err(SandboxFsError::Unsupported {
                op: "exec",
                provider,
            })
        })
    }

    /// Streams changes below `root` until the receiver is dropped. No fallback: callers that get
    /// `Unsupported` poll with [`SandboxFs::walk`].
    fn watch<'a>(
        &'a self,
        root: &'a str,
    ) -> BoxFuture<'a, SandboxFsResult<mpsc::Receiver<RemoteChange>>> {
        let _ = root;
        let provider = self.provider();
        Box::pin(async move {
            Err(SandboxFsError::Unsupported {
                op: "watch",
                provider,
            })
        })
    }
}

/// The most one walk may keep in memory: entries, and bytes of their paths and link targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkCap {
    pub entries: usize,
    pub bytes: u64,
}

impl WalkCap {
    /// No bound (providers whose trees are not chosen by someone else).
    pub const NONE: WalkCap = WalkCap {
        entries: usize::MAX,
        bytes: u64::MAX,
    };
}

/// Returns every entry below `root` by listing directories recursively: the fallback of
/// [`SandboxFs::walk`], for providers whose own walk cannot run. Past `cap` it stops, with
/// [`SandboxFsError::TooManyEntries`] or [`SandboxFsError::TooLarge`] (the bytes of the paths), so a
/// tree a sandbox makes up — millions of entries, or directories nested ever deeper — cannot
/// grow the answer without bound.
pub async fn walk_by_listing<F: SandboxFs + ?Sized>(
    fs: &F,
    root: &str,
    cap: WalkCap,
) -> SandboxFsResult<Vec<WalkEntry>> {
    check_remote_path(root)?;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut pending = vec![String::new()];
    while let Some(rel) = pending.pop() {
        let listed = fs.list(&join_remote(root, &rel)).await?;
        if out.len() + listed.len() > cap.entries {
            return Err(SandboxFsError::TooManyEntries {
                path: root.to_string(),
                limit: cap.entries,
            });
        }
        for entry in listed {
            let path = if rel.is_empty() {
                entry.name.clone()
            } else {
                format!("{rel}/{}", entry.name)
            };
            bytes += path.len() as u64;
            if bytes > cap.bytes {
                return Err(SandboxFsError::TooLarge {
                    path: root.to_string(),
                    what: "walk listing (limits.sandbox_listing_bytes)",
                    size: bytes,
                    limit: cap.bytes,
                });
            }
            if entry.meta.kind == EntryKind::Dir {
                pending.push(path.clone());
            }
            out.push(WalkEntry {
                path,
                meta: entry.meta,
            });
        }
    }
    Ok(out)
}

/// Turns the output of a helper command into `Ok` or a [`SandboxFsError::CommandFailed`].
pub fn command_result(
    op: &'static str,
    path: &str,
    command: &str,
    out: &ExecOutput,
) -> SandboxFsResult<()> {
    if out.success() {
        return Ok(());
    }
    let status = if out.timed_out {
        "timed out".to_string()
    } else {
        match out.exit_code {
            Some(code) => format!("exit code {code}"),
            None => "killed".to_string(),
        }
    };
    Err(SandboxFsError::CommandFailed {
        op,
        path: path.to_string(),
        command: command.to_string(),
        status,
        stderr: out.stderr.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_must_be_absolute_and_plain() {
        assert!(check_remote_path("/home/u/x").is_ok());
        for bad in ["x", "", "/a/../b", "/a/./b", "/a\0b"] {
            let err = check_remote_path(bad).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidPath, "{bad:?}");
        }
        assert!(check_relative_path("a/b c/d").is_ok());
        for bad in ["", "/a", "a//b", "a/../b", "./a", "a/"] {
            assert!(check_relative_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn codes_are_chosen_by_variant() {
        let unavailable = SandboxFsError::Unavailable {
            url: "http://127.0.0.1:1".into(),
            reason: "connection refused".into(),
        };
        assert_eq!(unavailable.code(), ErrorCode::SandboxUnavailable);
        assert!(unavailable.is_unavailable());
        let timed_out = SandboxFsError::TimedOut {
            url: "u".into(),
            op: "stat".into(),
            after: Duration::from_secs(1),
        };
        assert_eq!(timed_out.code(), ErrorCode::SandboxUnavailable);
        let auth = SandboxFsError::AuthFailed {
            url: "u".into(),
            status: 401,
            reason: "token invalid".into(),
        };
        assert_eq!(auth.code(), ErrorCode::AuthFailed);
        assert!(!auth.is_unavailable());
        let missing = SandboxFsError::TokenMissing {
            url: "u".into(),
            var: "SANDBOX_TOKEN".into(),
        };
        assert_eq!(missing.code(), ErrorCode::AuthFailed);
        assert!(missing.to_string().contains("SANDBOX_TOKEN"));
    }

    #[test]
    fn digests_match_known_values() {
        assert_eq!(
            HashAlgo::Sha256.digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            HashAlgo::Blake3.digest(b""),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }
}
