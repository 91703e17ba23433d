//! The failures git operations share, and [`GitFailure`], what the API asks of every git error.
//!
//! Each operation has its own error type beside it (`PullError` in `pull.rs`, `PushError` in
//! `push.rs`, …) whose variants are the failures of that operation alone; what several share
//! lives here and is wrapped whole: [`CommonError`] (the workspace, the state database, a
//! mirror, a request's fields, which repository), [`RemoteError`] (talking to a remote), and
//! their parts [`Libgit2Error`] and [`InvalidArg`]. An operation that fails only in the shared
//! ways names [`CommonError`] under its own name (`StatusError`, `ListError`, `GcError`).
//! Every error's code is chosen in its type's [`GitFailure::code`] and nowhere else, and errors
//! are told apart by their variant, never by their message text.

use crate::core::{ErrorCode, FsError};
use crate::state::StateError;

/// An error of a git operation as the API reports it: a stable code and, when the error is about
/// one, a virtual path.
pub trait GitFailure: std::error::Error + Send + Sync + 'static {
    /// Returns the stable code of this error.
    fn code(&self) -> ErrorCode;

    /// Returns the virtual path the error is about, when it is about one.
    fn path(&self) -> Option<&str> {
        None
    }
}

/// A libgit2 call that failed, named by what it was doing.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct Libgit2Error {
    pub op: String,
    #[source]
    pub source: git2::Error,
}

impl GitFailure for Libgit2Error {
    fn code(&self) -> ErrorCode {
        match self.source.code() {
            git2::ErrorCode::Auth => ErrorCode::AuthFailed,
            git2::ErrorCode::NotFound => ErrorCode::NotFound,
            _ => ErrorCode::Internal,
        }
    }
}

/// Names a failing libgit2 call: `.map_err(libgit2("read tree"))?`.
pub(crate) fn libgit2(op: impl Into<String>) -> impl FnOnce(git2::Error) -> Libgit2Error {
    let op = op.into();
    move |source| Libgit2Error { op, source }
}

/// A request field that breaks a rule.
#[derive(Debug, thiserror::Error)]
#[error("invalid {name}: {rule}")]
pub struct InvalidArg {
    pub name: String,
    pub rule: String,
}

/// Returns the error of field `name` breaking `rule`.
pub(crate) fn invalid(name: &str, rule: impl Into<String>) -> InvalidArg {
    InvalidArg {
        name: name.into(),
        rule: rule.into(),
    }
}

/// A failure any operation on a pulled repository can meet: in the workspace, the state
/// database or a mirror, in a request's fields, or in telling which repository is meant.
#[derive(Debug, thiserror::Error)]
pub enum CommonError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Git(#[from] Libgit2Error),
    #[error(transparent)]
    Invalid(#[from] InvalidArg),
    #[error(
        "no repository is pulled into {dir}; pull one first (`wardfs git pull URL --into {dir}`)"
    )]
    NoRepo { dir: String },
    #[error("{0}")]
    WhichRepo(String),
    /// `fork` (or a path) names a fork that does not exist.
    #[error(
        "no fork {} exists (`wardfs forks` lists them)",
        crate::core::text::name(name)
    )]
    NoFork {
        name: String,
        /// `/forks/NAME`, the path the error names.
        path: String,
    },
    /// The fork's files were taken before the repository's base last moved (a pull or a push
    /// in the workspace): staged on that base, they would undo what it brought.
    #[error(
        "fork {fork}'s files of {repo} are older than the repository's base, which a pull or a          push in the workspace moved after the fork was made: staged on it, they would undo          that change; update the fork first (`wardfs update {fork}`), or stage from the workspace"
    )]
    StaleFork { fork: String, repo: String },
}

impl GitFailure for CommonError {
    fn code(&self) -> ErrorCode {
        match self {
            CommonError::Fs(e) => e.code(),
            CommonError::State(_) => ErrorCode::Internal,
            CommonError::Git(e) => e.code(),
            CommonError::Invalid(_) | CommonError::WhichRepo(_) => ErrorCode::InvalidArgument,
            CommonError::NoRepo { .. } | CommonError::NoFork { .. } => ErrorCode::NotFound,
            CommonError::StaleFork { .. } => ErrorCode::Conflict,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            CommonError::Fs(e) => e.path(),
            CommonError::NoRepo { dir } => Some(dir),
            CommonError::NoFork { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// A remote that could not be talked to (fetch, ls-remote, push).
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} is not a git remote wardfs can use: {reason}")]
    BadRemote { url: String, reason: String },
    #[error("{url}: authentication failed: {reason}")]
    AuthFailed { url: String, reason: String },
    /// One object of what the remote sent needs more memory at once than the fetch's cap
    /// (`crate::git::memory`): a delta bomb, or a file far over `limits.git_blob_bytes`.
    #[error(
        "{url}: one object it sent needs {bytes} bytes in memory at once (a delta expanding to \
         that size, or a file that big), over the cap of {cap} bytes (limits.git_blob_bytes + \
         16 MiB); refused before inflating it, nothing was fetched"
    )]
    ObjectTooBig { url: String, bytes: u64, cap: u64 },
    /// A failure libgit2 gives no class wardfs knows.
    #[error(transparent)]
    Git(#[from] Libgit2Error),
}

impl GitFailure for RemoteError {
    fn code(&self) -> ErrorCode {
        match self {
            RemoteError::Unreachable { .. } => ErrorCode::RemoteUnavailable,
            RemoteError::BadRemote { .. } => ErrorCode::InvalidArgument,
            RemoteError::AuthFailed { .. } => ErrorCode::AuthFailed,
            RemoteError::ObjectTooBig { .. } => ErrorCode::TooLarge,
            RemoteError::Git(e) => e.code(),
        }
    }
}

/// Lets `?` lift the shared failures into an operation's error (through its `Common` variant).
macro_rules! lift_common {
    ($($op:ty),+ $(,)?) => {$(
        impl From<$crate::core::FsError> for $op {
            fn from(e: $crate::core::FsError) -> Self {
                $crate::git::error::CommonError::from(e).into()
            }
        }
        impl From<$crate::state::StateError> for $op {
            fn from(e: $crate::state::StateError) -> Self {
                $crate::git::error::CommonError::from(e).into()
            }
        }
        impl From<$crate::git::error::Libgit2Error> for $op {
            fn from(e: $crate::git::error::Libgit2Error) -> Self {
                $crate::git::error::CommonError::from(e).into()
            }
        }
        impl From<$crate::git::error::InvalidArg> for $op {
            fn from(e: $crate::git::error::InvalidArg) -> Self {
                $crate::git::error::CommonError::from(e).into()
            }
        }
    )+};
}
pub(crate) use lift_common;
