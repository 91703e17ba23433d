//! Errors of the core and their stable codes.
//!
//! Every failure of a core operation is an [`FsError`]. Its [`ErrorCode`] is chosen in exactly one
//! place ([`FsError::code`]); the API maps codes to HTTP statuses, the CLI to exit codes and the FUSE
//! adapter to errno values, always by code and never by message text. Messages name the input (the
//! path, the field, the config key) and the rule it broke.

use std::io;

use serde::{Deserialize, Serialize};

/// Stable, machine-readable error code. Branch on this, never on `message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// The path (or a parent directory of it) does not exist. git: no repository is pulled into
    /// the directory, no staged commit has that id, or the remote has no such branch or path.
    /// Sandboxes: no sandbox of that name, or a provisioned sandbox, its volume or its snapshot
    /// is gone at the provider.
    NotFound,
    /// Something already exists at the path (mkdir, move without overwrite, replacing a
    /// non-empty directory).
    Exists,
    /// The path is a directory where a file is needed (read, write, edit, raw).
    IsDir,
    /// A component of the path is not a directory, or list was given a file.
    NotDir,
    /// delete of a non-empty directory without `recursive`.
    NotEmpty,
    /// A file, a requested window or a request body is over `limits.max_read_bytes`,
    /// `limits.max_write_bytes` or (a zone served from a sandbox) `limits.sandbox_file_bytes`;
    /// the message names the limit and its config key.
    TooLarge,
    /// The path is malformed: empty, contains a NUL byte, unknown zone, a name over 255 bytes,
    /// over 4096 bytes, names `/` or a zone root where an entry is needed, or a symlink target
    /// that is not UTF-8.
    InvalidPath,
    /// The path leaves its zone: `..` above the zone root, a symlink pointing outside (absolute
    /// or climbing out), or a /proc magic link.
    OutsideZone,
    /// The zone is disabled by configuration (e.g. /cache in single mode without
    /// `cache_subdir`); the message says why.
    ZoneUnavailable,
    /// The zone is configured `read_only` (or its backing filesystem is mounted read-only);
    /// nothing was changed.
    ReadOnly,
    /// edit: `old` does not occur in the file. git: nothing to stage (no changes, or all of them
    /// already staged), a named file has no changes, or resolve of a file that is not in
    /// conflict.
    NoMatch,
    /// edit: `old` occurs more than once and `replace_all` is false; the message gives the
    /// count.
    NotUnique,
    /// edit: the file changed between reading and replacing it; read it again and retry. git:
    /// pull into a directory holding another remote's pull; stage of files that changed
    /// upstream too (resolve them first); an identical commit already staged; push or discard
    /// of a staged commit in a state that does not allow it; a push whose rebase onto the moved
    /// remote hit conflicting lines (the commit is now `conflicted`). Sandboxes: a lifecycle
    /// step the sandbox's state does not allow (create of one that has a sandbox, pause of one
    /// that has none).
    Conflict,
    /// git: the remote wants credentials wardfs does not have or refused them (the token in
    /// the environment variable named by `git.token_env`, sent as the password of user
    /// `git.token_user`; for ssh: ssh-agent, then `git.ssh_key`), or GitHub refused the token
    /// while opening a pull request. Sandboxes: the sandbox (or its provider) refused the token,
    /// or the variable naming it is not set. The token is never logged or stored.
    AuthFailed,
    /// git push: the remote branch had moved; the staged commit was rebased onto it (three-way
    /// merge) but touches files the remote also changed, so it was not pushed and is now
    /// `rebased`: review it again (POST /v1/git/staged/show) and push again. Also when the
    /// remote moved twice during one push.
    RemoteMoved,
    /// git push: the remote refused the push (a pre-receive or update hook, branch protection);
    /// the message carries what the remote said. Nothing was pushed and the staged commit is now
    /// `rejected`; it can be pushed again once the remote accepts it. git pull: the fetched tree
    /// holds an entry that must not be written (`..`, `.git`, a path leaving the directory);
    /// nothing was written.
    Rejected,
    /// A sandbox could not be reached after its retries (`sandboxes.<name>.retries`), did not
    /// answer within `request_timeout_secs`, or is gone (destroyed): the sandbox and mirror
    /// routes, and the file routes on a zone served from a sandbox.
    SandboxUnavailable,
    /// git: the remote (or GitHub's API, for a pull request) could not be reached or failed.
    RemoteUnavailable,
    /// The daemon is busy: the request bodies being read take all of `limits.body_memory_bytes`
    /// and this one's turn did not come within `limits.body_memory_wait_secs`. Nothing was done;
    /// retry later.
    Busy,
    /// read or edit of a file that is not UTF-8 text (a NUL byte in the first 8 KiB, or invalid
    /// UTF-8); use GET /v1/fs/raw for bytes.
    Binary,
    /// A request field, query parameter or body is invalid (malformed JSON, unknown or missing
    /// field, wrong type, out-of-range number, bad regex or glob, unknown route, a method the
    /// route does not take); for git also a bad remote, branch name or repository path,
    /// `into`/`repo` outside /workspace, an empty commit message, several repositories pulled
    /// and none named, or a remote that names no owner/repository for a pull request. The
    /// message names the field and the rule.
    InvalidArgument,
    /// The operating system refused the operation (EACCES/EPERM) on the backing file.
    PermissionDenied,
    /// The zone's filesystem is full (ENOSPC) or over quota (EDQUOT).
    NoSpace,
    /// An unexpected failure (an I/O error with no better code, the state database, a worker
    /// crash, a git failure, a sandbox failing an operation). The message has details.
    Internal,
}

impl ErrorCode {
    /// Every code, in documentation order.
    pub const ALL: [ErrorCode; 24] = [
        ErrorCode::NotFound,
        ErrorCode::Exists,
        ErrorCode::IsDir,
        ErrorCode::NotDir,
        ErrorCode::NotEmpty,
        ErrorCode::TooLarge,
        ErrorCode::InvalidPath,
        ErrorCode::OutsideZone,
        ErrorCode::ZoneUnavailable,
        ErrorCode::ReadOnly,
        ErrorCode::NoMatch,
        ErrorCode::NotUnique,
        ErrorCode::Conflict,
        ErrorCode::AuthFailed,
        ErrorCode::RemoteMoved,
        ErrorCode::Rejected,
        ErrorCode::SandboxUnavailable,
        ErrorCode::RemoteUnavailable,
        ErrorCode::Busy,
        ErrorCode::Binary,
        ErrorCode::InvalidArgument,
        ErrorCode::PermissionDenied,
        ErrorCode::NoSpace,
        ErrorCode::Internal,
    ];

    /// Returns the code as it appears on the wire (`NOT_FOUND`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::Exists => "EXISTS",
            ErrorCode::IsDir => "IS_DIR",
            ErrorCode::NotDir => "NOT_DIR",
            ErrorCode::NotEmpty => "NOT_EMPTY",
            ErrorCode::TooLarge => "TOO_LARGE",
            ErrorCode::InvalidPath => "INVALID_PATH",
            ErrorCode::OutsideZone => "OUTSIDE_ZONE",
            ErrorCode::ZoneUnavailable => "ZONE_UNAVAILABLE",
            ErrorCode::ReadOnly => "READ_ONLY",
            ErrorCode::NoMatch => "NO_MATCH",
            ErrorCode::NotUnique => "NOT_UNIQUE",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::RemoteMoved => "REMOTE_MOVED",
            ErrorCode::Rejected => "REJECTED",
            ErrorCode::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            ErrorCode::RemoteUnavailable => "REMOTE_UNAVAILABLE",
            ErrorCode::Busy => "BUSY",
            ErrorCode::Binary => "BINARY",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::NoSpace => "NO_SPACE",
            ErrorCode::Internal => "INTERNAL",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every core operation.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path}: no such file or directory")]
    NotFound { path: String },
    #[error("{path}: already exists")]
    Exists { path: String },
    #[error("{path}: is a directory")]
    IsDir { path: String },
    #[error("{path}: not a directory")]
    NotDir { path: String },
    #[error("{path}: directory is not empty (pass recursive to delete it with its contents)")]
    NotEmpty { path: String },
    #[error(
        "{path}: {what} is {size} bytes, over the limit of {limit} bytes (config key `{key}`)"
    )]
    TooLarge {
        path: String,
        what: &'static str,
        size: u64,
        limit: u64,
        key: &'static str,
    },
    #[error("{path:?}: invalid path: {rule}")]
    InvalidPath { path: String, rule: String },
    #[error("{path}: outside its zone: {rule}")]
    OutsideZone { path: String, rule: String },
    #[error("{path}: zone `{zone}` is unavailable: {reason}")]
    ZoneUnavailable {
        path: String,
        zone: String,
        reason: String,
    },
    #[error("{path}: zone `{zone}` is read-only")]
    ReadOnly { path: String, zone: String },
    #[error("{path}: the text to replace does not occur in the file")]
    NoMatch { path: String },
    #[error(
        "{path}: the text to replace occurs {count} times; make it unique or pass replace_all"
    )]
    NotUnique { path: String, count: usize },
    #[error("{path}: conflict: {reason}")]
    Conflict { path: String, reason: String },
    #[error("{path}: not UTF-8 text ({reason}); read it as binary (`wardfs cat`, GET /v1/fs/raw)")]
    Binary { path: String, reason: String },
    #[error("invalid {name}: {rule}")]
    InvalidArgument { name: String, rule: String },
    #[error("{path}: permission denied")]
    PermissionDenied { path: String },
    #[error("{path}: no space left on the zone's device")]
    NoSpace { path: String },
    #[error("{path}: {op} failed: {source}")]
    Io {
        path: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// A remote zone's sandbox failed (unreachable, credentials refused, an odd answer); `code`
    /// is chosen from the provider's error (`SANDBOX_UNAVAILABLE`, `AUTH_FAILED`, …).
    #[error("{path}: sandbox `{sandbox}`: {reason}")]
    Sandbox {
        path: String,
        sandbox: String,
        code: ErrorCode,
        reason: String,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl FsError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::NotFound { .. } => ErrorCode::NotFound,
            FsError::Exists { .. } => ErrorCode::Exists,
            FsError::IsDir { .. } => ErrorCode::IsDir,
            FsError::NotDir { .. } => ErrorCode::NotDir,
            FsError::NotEmpty { .. } => ErrorCode::NotEmpty,
            FsError::TooLarge { .. } => ErrorCode::TooLarge,
            FsError::InvalidPath { .. } => ErrorCode::InvalidPath,
            FsError::OutsideZone { .. } => ErrorCode::OutsideZone,
            FsError::ZoneUnavailable { .. } => ErrorCode::ZoneUnavailable,
            FsError::ReadOnly { .. } => ErrorCode::ReadOnly,
            FsError::NoMatch { .. } => ErrorCode::NoMatch,
            FsError::NotUnique { .. } => ErrorCode::NotUnique,
            FsError::Conflict { .. } => ErrorCode::Conflict,
            FsError::Binary { .. } => ErrorCode::Binary,
            FsError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            FsError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            FsError::NoSpace { .. } => ErrorCode::NoSpace,
            FsError::Sandbox { code, .. } => *code,
            FsError::Io { .. } | FsError::Internal(_) => ErrorCode::Internal,
        }
    }

    /// Returns the errno the mount answers with for this error (the one place that maps them).
    pub fn errno(&self) -> i32 {
        if let FsError::Io { source, .. } = self {
            if let Some(n) = source.raw_os_error() {
                return n;
            }
        }
        match self.code() {
            ErrorCode::NotFound => libc::ENOENT,
            ErrorCode::Exists => libc::EEXIST,
            ErrorCode::IsDir => libc::EISDIR,
            ErrorCode::NotDir => libc::ENOTDIR,
            ErrorCode::NotEmpty => libc::ENOTEMPTY,
            ErrorCode::TooLarge => libc::EFBIG,
            ErrorCode::InvalidPath => libc::EINVAL,
            ErrorCode::OutsideZone => libc::EXDEV,
            ErrorCode::ReadOnly => libc::EROFS,
            ErrorCode::PermissionDenied | ErrorCode::AuthFailed => libc::EACCES,
            ErrorCode::NoSpace => libc::ENOSPC,
            ErrorCode::InvalidArgument => libc::EINVAL,
            _ => libc::EIO,
        }
    }

    /// Returns the virtual path the error is about, when it is about one.
    pub fn path(&self) -> Option<&str> {
        match self {
            FsError::NotFound { path }
            | FsError::Exists { path }
            | FsError::IsDir { path }
            | FsError::NotDir { path }
            | FsError::NotEmpty { path }
            | FsError::TooLarge { path, .. }
            | FsError::InvalidPath { path, .. }
            | FsError::OutsideZone { path, .. }
            | FsError::ZoneUnavailable { path, .. }
            | FsError::ReadOnly { path, .. }
            | FsError::NoMatch { path }
            | FsError::NotUnique { path, .. }
            | FsError::Conflict { path, .. }
            | FsError::Binary { path, .. }
            | FsError::PermissionDenied { path }
            | FsError::NoSpace { path }
            | FsError::Io { path, .. }
            | FsError::Sandbox { path, .. } => Some(path),
            FsError::InvalidArgument { .. } | FsError::Internal(_) => None,
        }
    }

    /// Builds the error for a failed system call on `path`, classifying the errno.
    pub fn from_io(path: &str, op: &'static str, err: io::Error) -> FsError {
        let path = path.to_string();
        match err.raw_os_error() {
            Some(libc::ENOENT) => FsError::NotFound { path },
            Some(libc::EEXIST) => FsError::Exists { path },
            Some(libc::EISDIR) => FsError::IsDir { path },
            Some(libc::ENOTDIR) => FsError::NotDir { path },
            Some(libc::ENOTEMPTY) => FsError::NotEmpty { path },
            // openat2(RESOLVE_BENEATH) answers EXDEV when resolution would leave the zone.
            Some(libc::EXDEV) => FsError::OutsideZone {
                path,
                rule: "resolving it leaves the zone (a `..` or a symlink pointing out)".into(),
            },
            Some(libc::ELOOP) => FsError::OutsideZone {
                path,
                rule: "it goes through a /proc magic link or too many symlinks".into(),
            },
            Some(libc::EACCES) | Some(libc::EPERM) => FsError::PermissionDenied { path },
            Some(libc::ENAMETOOLONG) => FsError::InvalidPath {
                path,
                rule: "a name is longer than the filesystem allows".into(),
            },
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => FsError::NoSpace { path },
            Some(libc::EROFS) => FsError::ReadOnly {
                path,
                zone: "(backing filesystem)".into(),
            },
            _ => FsError::Io {
                path,
                op,
                source: err,
            },
        }
    }

    /// Builds an [`FsError::InvalidArgument`] naming the field and the rule it broke.
    pub fn invalid(name: impl Into<String>, rule: impl Into<String>) -> FsError {
        FsError::InvalidArgument {
            name: name.into(),
            rule: rule.into(),
        }
    }
}

/// Shorthand for results of core operations.
pub type FsResult<T> = Result<T, FsError>;
