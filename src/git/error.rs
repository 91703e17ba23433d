//! Errors of git sync and their codes (chosen here, in [`GitError::code`], and nowhere else).

use crate::core::{ErrorCode, FsError};
use crate::state::StateError;

/// A failed git operation.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{op}: {source}")]
    Git {
        op: String,
        #[source]
        source: git2::Error,
    },
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} has no branch {branch:?}")]
    NoBranch { url: String, branch: String },
    #[error("{url} is not a git remote sandfs can use: {reason}")]
    BadRemote { url: String, reason: String },
    #[error("{url}: authentication failed: {reason}")]
    AuthFailed { url: String, reason: String },
    #[error(
        "no repository is pulled into {dir}; pull one first (`sandfs git pull URL --into {dir}`)"
    )]
    NoRepo { dir: String },
    #[error("{0}")]
    WhichRepo(String),
    #[error("no staged commit {id} (`sandfs staged list` shows them)")]
    NoStaged { id: String },
    #[error("invalid {name}: {rule}")]
    Invalid { name: String, rule: String },
    #[error("{0}")]
    Nothing(String),
    #[error("staged commit {id} was discarded already")]
    Discarded { id: String },
    #[error("{reason}: {}", paths.join(", "))]
    Conflict { reason: String, paths: Vec<String> },
    #[error("staged commit {id} is {state}: {rule}")]
    WrongState {
        id: String,
        state: String,
        rule: String,
    },
    #[error("{branch} moved on the remote during the push (expected {expected}, found {found}); nothing was pushed")]
    RemoteMoved {
        branch: String,
        expected: String,
        found: String,
    },
    #[error("staged commit {id} was rebased onto the moved remote branch, which changed the same files ({}); review it again (`sandfs staged show {id}`) and push again", paths.join(", "))]
    NeedsReview { id: String, paths: Vec<String> },
    #[error("the remote rejected the push of {refname}: {reason}")]
    Rejected { refname: String, reason: String },
    #[error("{url} {branch}: the tree holds {entry:?}, {rule}; nothing was written")]
    UnsafeTree {
        url: String,
        branch: String,
        entry: String,
        rule: String,
    },
    #[error("pull request: {0}")]
    PullRequest(String),
    #[error("pull request: GitHub refused the token: {0}")]
    PullRequestAuth(String),
}

impl GitError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            GitError::Fs(e) => e.code(),
            GitError::State(_) => ErrorCode::Internal,
            GitError::Git { source, .. } => match source.code() {
                git2::ErrorCode::Auth => ErrorCode::AuthFailed,
                git2::ErrorCode::NotFound => ErrorCode::NotFound,
                _ => ErrorCode::Internal,
            },
            GitError::Unreachable { .. } => ErrorCode::RemoteUnavailable,
            GitError::NoBranch { .. } => ErrorCode::NotFound,
            GitError::BadRemote { .. } => ErrorCode::InvalidArgument,
            GitError::AuthFailed { .. } | GitError::PullRequestAuth(_) => ErrorCode::AuthFailed,
            GitError::NoRepo { .. } | GitError::NoStaged { .. } => ErrorCode::NotFound,
            GitError::WhichRepo(_) | GitError::Invalid { .. } => ErrorCode::InvalidArgument,
            GitError::Nothing(_) => ErrorCode::NoMatch,
            GitError::Discarded { .. } => ErrorCode::Conflict,
            GitError::Conflict { .. } | GitError::WrongState { .. } => ErrorCode::Conflict,
            GitError::RemoteMoved { .. } | GitError::NeedsReview { .. } => ErrorCode::RemoteMoved,
            GitError::Rejected { .. } | GitError::UnsafeTree { .. } => ErrorCode::Rejected,
            GitError::PullRequest(_) => ErrorCode::RemoteUnavailable,
        }
    }

    /// Returns the virtual path the error is about, when it is about one.
    pub fn path(&self) -> Option<&str> {
        match self {
            GitError::Fs(e) => e.path(),
            GitError::NoRepo { dir } => Some(dir),
            _ => None,
        }
    }

    pub(crate) fn git(op: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
        let op = op.into();
        move |source| GitError::Git { op, source }
    }

    pub(crate) fn invalid(name: &str, rule: impl Into<String>) -> GitError {
        GitError::Invalid {
            name: name.into(),
            rule: rule.into(),
        }
    }
}

/// The result of a git operation.
pub type GitResult<T> = Result<T, GitError>;
