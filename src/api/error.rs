//! API errors: the JSON shape `{"code", "message", "path"}` and the one code → HTTP status map.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::core::{ErrorCode, FsError};
use crate::git::GitFailure;
use crate::sandbox::SandboxError;

/// An error as the API sends it: the error of whichever room failed.
#[derive(Debug)]
pub enum ApiError {
    Fs(FsError),
    /// The error of one git operation (`PullError`, `PushError`, …).
    Git(Box<dyn GitFailure>),
    Sandbox(SandboxError),
    /// BUSY: the request bodies in flight take the whole body budget; says which limit.
    Busy(String),
}

impl From<SandboxError> for ApiError {
    fn from(e: SandboxError) -> Self {
        ApiError::Sandbox(e)
    }
}

impl From<FsError> for ApiError {
    fn from(e: FsError) -> Self {
        ApiError::Fs(e)
    }
}

impl<E: GitFailure> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError::Git(Box::new(e))
    }
}

impl ApiError {
    /// Returns the stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Fs(e) => e.code(),
            ApiError::Git(e) => e.code(),
            ApiError::Sandbox(e) => e.code(),
            ApiError::Busy(_) => ErrorCode::Busy,
        }
    }

    /// Returns the virtual path the error is about.
    pub fn path(&self) -> Option<&str> {
        match self {
            ApiError::Fs(e) => e.path(),
            ApiError::Git(e) => e.path(),
            ApiError::Sandbox(_) | ApiError::Busy(_) => None,
        }
    }

    /// Returns the message.
    pub fn message(&self) -> String {
        match self {
            ApiError::Fs(e) => e.to_string(),
            ApiError::Git(e) => e.to_string(),
            ApiError::Sandbox(e) => e.to_string(),
            ApiError::Busy(m) => m.clone(),
        }
    }

    /// The error as the last line of an NDJSON stream carries it.
    pub fn body(&self) -> StreamError {
        StreamError {
            code: self.code(),
            message: self.message(),
            path: self.path().map(str::to_string),
        }
    }
}

/// An error inside an NDJSON stream: the fields of Error, but `path` is always present (null
/// when the error is not about a path).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StreamError {
    pub code: ErrorCode,
    /// For people; do not parse it.
    pub message: String,
    /// The virtual path the error is about, or null.
    pub path: Option<String>,
}

/// The body of every error response.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody<'a> {
    pub code: ErrorCode,
    /// Human-readable explanation naming the input (path, field or config key) and the rule it
    /// broke. Not stable; do not parse it.
    pub message: String,
    /// The virtual path the error is about, as given or as normalized. Absent when the error is
    /// not about a path (INVALID_ARGUMENT, INTERNAL without a path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'a str>,
}

/// Returns the HTTP status for an error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode::*;
    match code {
        NotFound => StatusCode::NOT_FOUND,
        Exists | IsDir | NotDir | NotEmpty | Conflict | RemoteMoved => StatusCode::CONFLICT,
        TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        InvalidPath | InvalidArgument => StatusCode::BAD_REQUEST,
        OutsideZone | ReadOnly | PermissionDenied | Rejected => StatusCode::FORBIDDEN,
        NoMatch | NotUnique | Binary => StatusCode::UNPROCESSABLE_ENTITY,
        AuthFailed => StatusCode::UNAUTHORIZED,
        ZoneUnavailable | SandboxUnavailable | Busy => StatusCode::SERVICE_UNAVAILABLE,
        RemoteUnavailable => StatusCode::BAD_GATEWAY,
        NoSpace => StatusCode::INSUFFICIENT_STORAGE,
        Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        let message = self.message();
        if code == ErrorCode::Internal {
            tracing::error!(error = %message, "internal error");
        }
        let body = ErrorBody {
            code,
            message,
            path: self.path(),
        };
        let mut resp = (status_of(code), Json(body)).into_response();
        resp.extensions_mut().insert(code);
        resp
    }
}
