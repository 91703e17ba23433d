//! Request bodies: JSON read within the size limit, whatever the content type.
//!
//! `curl -d '{...}'` sends `application/x-www-form-urlencoded`; agents and people should not have
//! to remember a header, so the body is parsed as JSON regardless. A body over the limit is
//! answered with `TOO_LARGE` (never a dropped connection), a malformed one with
//! `INVALID_ARGUMENT` naming serde's complaint.
//!
//! Answering before the client has finished sending makes the client see a broken pipe instead
//! of the answer, so a refused body is read to its end and thrown away ([`drain`]), up to
//! [`DRAIN_CAP`] bytes. A client that announced `Expect: 100-continue` is answered at once: it
//! has not sent the body yet and will not once it sees the refusal.

use axum::extract::{FromRef, FromRequest, Request};
use axum::http::HeaderMap;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::AppState;
use crate::core::FsError;
use std::sync::Arc;

/// A JSON request body.
pub struct JsonBody<T>(pub T);

/// Extra room over `max_write_bytes` for JSON framing and escapes.
const JSON_SLACK: u64 = 64 * 1024;

/// How much of a refused body is read and discarded so the client sees the answer; past this the
/// connection is closed instead (a client sending gigabytes after a refusal is not worth serving).
pub const DRAIN_CAP: u64 = 256 * 1024 * 1024;

/// Whether the client waits for `100 Continue` before sending its body.
pub fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// Reads the rest of a refused body and throws it away, up to [`DRAIN_CAP`] bytes in all
/// (`already` counts what was read before).
pub async fn drain(mut stream: axum::body::BodyDataStream, mut already: u64) {
    while already <= DRAIN_CAP {
        match stream.next().await {
            Some(Ok(chunk)) => already += chunk.len() as u64,
            _ => return,
        }
    }
}

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
            ApiError::Fs(FsError::TooLarge {
                path: req_path(),
                what: "the request body",
                size,
                limit,
                key: "limits.max_write_bytes",
            })
        };
        let waits = expects_continue(req.headers());
        let mut stream = req.into_body().into_data_stream();
        if let Some(n) = declared.filter(|n| *n > limit) {
            if !waits && n <= DRAIN_CAP {
                drain(stream, 0).await;
            }
            return Err(too_large(n));
        }
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::Fs(FsError::invalid(
                    "request body",
                    format!("upload interrupted: {e}"),
                ))
            })?;
            if (bytes.len() + chunk.len()) as u64 > limit {
                let seen = (bytes.len() + chunk.len()) as u64;
                drop(bytes);
                drain(stream, seen).await;
                return Err(too_large(seen));
            }
            bytes.extend_from_slice(&chunk);
        }
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::Fs(FsError::invalid(
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
