//! Errors of the core and their stable codes.
//!
//! Every failure of a core operation is an [`FsError`]. Its [`ErrorCode`] is chosen in exactly one
//! place ([`FsError::code`]); the API maps codes to HTTP statuses, the CLI to exit codes and the FUSE
//! adapter to errno values, always by code and never by message text. Messages name the input (the
//! path, the field, the config key) and the rule it broke.

use std::io;

use serde::{Deserialize, Serialize};

/// Stable, machine-readable error codes shared by the API, the CLI and (later) FUSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    NotFound,
    Exists,
    IsDir,
    NotDir,
    NotEmpty,
    TooLarge,
    InvalidPath,
    OutsideZone,
    ZoneUnavailable,
    ReadOnly,
    NoMatch,
    NotUnique,
    Conflict,
    AuthFailed,
    RemoteMoved,
    Rejected,
    SandboxUnavailable,
    RemoteUnavailable,
    Binary,
    InvalidArgument,
    PermissionDenied,
    NoSpace,
    Internal,
}

impl ErrorCode {
    /// Every code, in documentation order.
    pub const ALL: [ErrorCode; 23] = [
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
