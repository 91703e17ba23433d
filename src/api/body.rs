//! Request bodies: JSON read within the size limit and the memory budget, whatever the content
//! type.
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
//!
//! **One memory budget for all bodies** ([`Budget`], `limits.body_memory_bytes`): a body is
//! charged as it is read (its declared `Content-Length` up front, else as it arrives), twice
//! its size for [`JsonBody`] (the bytes, then the values parsed from them) and once for
//! [`JsonBytes`] (parsed in place), and the charge is held until the handler returns ([`hold`]).
//! A request that finds no room waits for `limits.body_memory_wait_secs`, then gets BUSY. Bodies
//! up to [`FREE_BYTES`] are not charged, so small requests never queue behind big ones; a body
//! larger than the whole budget takes all of it and is read alone.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{FromRef, FromRequest, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::error::ApiError;
use super::AppState;
use crate::core::FsError;

/// A JSON request body.
pub struct JsonBody<T>(pub T);

/// A JSON request body read whole and left unparsed, for a route that parses it in place
/// (`POST /v1/fs/write` decodes its `content` where it lies): documented as a `T`, charged once
/// its size.
pub struct JsonBytes<T> {
    pub bytes: Vec<u8>,
    of: PhantomData<fn() -> T>,
}

/// Bodies up to this size are not charged to the budget.
pub const FREE_BYTES: u64 = 64 * 1024;

/// The least a growing body (no `Content-Length`) takes from the budget at a time.
const STEP_KIB: u32 = 1024;

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

/// The one memory budget of request bodies across all clients (`limits.body_memory_bytes`),
/// counted in KiB.
pub struct Budget {
    permits: Arc<Semaphore>,
    kib: u32,
    wait: Duration,
}

impl Budget {
    /// A budget of `bytes` (at least 1 KiB), a request waiting at most `wait` for room.
    pub fn new(bytes: u64, wait: Duration) -> Budget {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        Budget {
            permits: Arc::new(Semaphore::new(kib as usize)),
            kib,
            wait,
        }
    }

    fn busy(&self) -> ApiError {
        ApiError::Busy(format!(
            "the request bodies being read take all of limits.body_memory_bytes ({} bytes) and \
             this one's turn did not come within limits.body_memory_wait_secs ({} s); retry later",
            u64::from(self.kib) * 1024,
            self.wait.as_secs()
        ))
    }
}

/// What a request's body holds of the budget, until its handler has returned: [`hold`] puts it
/// in the request and keeps a clone while the handler runs.
#[derive(Clone, Default)]
pub struct Held(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl Held {
    fn add(&self, permit: OwnedSemaphorePermit) {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(p) => p.merge(permit),
            None => *held = Some(permit),
        }
    }
}

/// Middleware: gives each request a [`Held`] and releases what its body took once the handler
/// has returned (the parsed values die with the handler, not with the extractor).
pub async fn hold(mut req: Request, next: Next) -> Response {
    let held = Held::default();
    req.extensions_mut().insert(held.clone());
    let resp = next.run(req).await;
    drop(held);
    resp
}

/// What one body has taken from the budget so far.
struct Charge<'a> {
    budget: &'a Budget,
    held: Held,
    kib: u32,
    /// The budget per byte of body: 2 for a body parsed into values, 1 for one parsed in place.
    factor: u64,
    deadline: Instant,
}

impl<'a> Charge<'a> {
    fn new(budget: &'a Budget, held: Held, factor: u64) -> Charge<'a> {
        Charge {
            budget,
            held,
            kib: 0,
            factor,
            deadline: Instant::now() + budget.wait,
        }
    }

    /// Makes sure `bytes` of body are paid for, waiting for room until the deadline.
    async fn cover(&mut self, bytes: u64) -> Result<(), ApiError> {
        if bytes <= FREE_BYTES {
            return Ok(());
        }
        let want = u32::try_from(bytes.saturating_mul(self.factor).div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.budget.kib);
        if want <= self.kib {
            return Ok(());
        }
        let more = (want - self.kib)
            .max(STEP_KIB)
            .min(self.budget.kib - self.kib);
        let permits = self.budget.permits.clone().acquire_many_owned(more);
        match tokio::time::timeout_at(self.deadline, permits).await {
            Ok(Ok(p)) => {
                self.held.add(p);
                self.kib += more;
                Ok(())
            }
            _ => Err(self.budget.busy()),
        }
    }
}

/// Answers a refusal after reading the rest of the body (see [`drain`]), unless the client
/// waits for `100 Continue` and has sent none of it.
async fn refuse(
    stream: axum::body::BodyDataStream,
    seen: u64,
    waits: bool,
    e: ApiError,
) -> ApiError {
    if !(waits && seen == 0) {
        drain(stream, seen).await;
    }
    e
}

/// Reads a whole body within the size limit (2 × `limits.max_write_bytes` + 64 KiB) and the
/// budget, charged `factor` times its size.
async fn read_whole(req: Request, app: &AppState, factor: u64) -> Result<Vec<u8>, ApiError> {
    let limit = app.zones.limits().max_write_bytes.saturating_mul(2) + JSON_SLACK;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let waits = expects_continue(req.headers());
    let held = req.extensions().get::<Held>().cloned().unwrap_or_default();
    let mut charge = Charge::new(&app.bodies, held, factor);
    let stream = req.into_body().into_data_stream();
    if let Some(n) = declared.filter(|n| *n > limit) {
        if !waits && n <= DRAIN_CAP {
            drain(stream, 0).await;
        }
        return Err(too_large(n, limit));
    }
    if let Err(e) = charge.cover(declared.unwrap_or(0)).await {
        return Err(refuse(stream, 0, waits, e).await);
    }
    let capacity = declared.unwrap_or(0) as usize;
    collect(stream, capacity, limit, &mut charge, waits).await
}

/// Reads a body's chunks into one buffer; refuses it past `limit`, or when the budget has no
/// room for what arrived beyond what was charged.
async fn collect(
    mut stream: axum::body::BodyDataStream,
    capacity: usize,
    limit: u64,
    charge: &mut Charge<'_>,
    waits: bool,
) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::with_capacity(capacity);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::Fs(FsError::invalid(
                "request body",
                format!("upload interrupted: {e}"),
            ))
        })?;
        let seen = (bytes.len() + chunk.len()) as u64;
        let covered = if seen > limit {
            Err(too_large(seen, limit))
        } else {
            charge.cover(seen).await
        };
        if let Err(e) = covered {
            drop(bytes);
            return Err(refuse(stream, seen, waits, e).await);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The refusal of a body of `size` bytes over `limit`.
fn too_large(size: u64, limit: u64) -> ApiError {
    ApiError::Fs(FsError::TooLarge {
        path: "(request)".to_string(),
        what: "the request body",
        size,
        limit,
        key: "limits.max_write_bytes",
    })
}

/// The error of a body that is not the JSON a route expects.
pub fn not_json(e: serde_json::Error) -> ApiError {
    ApiError::Fs(FsError::invalid(
        "request body",
        format!("not the expected JSON: {e}"),
    ))
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
        let bytes = read_whole(req, &app, 2).await?;
        Ok(JsonBody(serde_json::from_slice(&bytes).map_err(not_json)?))
    }
}

impl<S, T> FromRequest<S> for JsonBytes<T>
where
    S: Send + Sync,
    Arc<AppState>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let app = Arc::<AppState>::from_ref(state);
        Ok(JsonBytes {
            bytes: read_whole(req, &app, 1).await?,
            of: PhantomData,
        })
    }
}
