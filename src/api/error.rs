//! API errors: the JSON shape `{"code", "message", "path"}` and the one code → HTTP status map.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::core::{ErrorCode, FsError};

/// An error as the API sends it.
#[derive(Debug)]
pub struct ApiError(pub FsError);

impl From<FsError> for ApiError {
    fn from(e: FsError) -> Self {
        ApiError(e)
    }
}

/// The JSON body of every error response.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub code: ErrorCode,
    pub message: String,
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
        ZoneUnavailable | SandboxUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        NoSpace => StatusCode::INSUFFICIENT_STORAGE,
        Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.0.code();
        if code == ErrorCode::Internal {
            tracing::error!(error = %self.0, "internal error");
        }
        let body = ErrorBody {
            code,
            message: self.0.to_string(),
            path: self.0.path(),
        };
        let mut resp = (status_of(code), Json(body)).into_response();
        resp.extensions_mut().insert(code);
        resp
    }
}
