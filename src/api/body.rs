//! Request bodies: JSON read within the size limit, whatever the content type.
//!
//! `curl -d '{...}'` sends `application/x-www-form-urlencoded`; agents and people should not have
//! to remember a header, so the body is parsed as JSON regardless. A body over the limit is
//! answered with `TOO_LARGE` (never a dropped connection), a malformed one with
//! `INVALID_ARGUMENT` naming serde's complaint.

use axum::body::Body;
use axum::extract::{FromRef, FromRequest, Request};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::AppState;
use crate::core::FsError;
use std::sync::Arc;

/// A JSON request body.
pub struct JsonBody<T>(pub T);

/// Extra room over `max_write_bytes` for JSON framing and escapes.
const JSON_SLACK: u64 = 64 * 1024;

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
    Arc<AppState>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let app = Arc::<AppState>::from_ref(state);
        let limit = app.zones.limits().max_write_bytes.saturating_mul(2) + JSON_SLACK;
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let too_large = |size: u64| {
            ApiError(FsError::TooLarge {
                path: req_path(),
                what: "the request body",
                size,
                limit,
                key: "limits.max_write_bytes",
            })
        };
        if let Some(n) = declared.filter(|n| *n > limit) {
            return Err(too_large(n));
        }
        let body: Body = req.into_body();
        let bytes = axum::body::to_bytes(body, limit as usize)
            .await
            .map_err(|_| too_large(limit + 1))?;
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError(FsError::invalid(
                "request body",
                format!("not the expected JSON: {e}"),
            ))
        })?;
        Ok(JsonBody(value))
    }
}

fn req_path() -> String {
    "(request)".to_string()
}
