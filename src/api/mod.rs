//! The Unix-socket HTTP API: HTTP/1.1 + JSON under `/v1`, served by axum.
//!
//! Handlers are thin: they parse the request, run the core operation on the blocking pool, and
//! turn the result or the [`FsError`](crate::core::FsError) into JSON. The OpenAPI document in
//! `openapi.json` beside this file is served verbatim at `/v1/openapi.json`; a test keeps it and
//! the router in step.
//!
//! Owns the HTTP routes and their error codes. May import `core`, `git`, `sandbox`, `state` and
//! `config`; never `cli`, `fuse`, `mcp`, `review` or `daemon` (`tests/rules` checks the imports).

mod body;
mod checkpoint;
mod error;
mod events;
mod fs;
pub mod gc;
mod git;
mod metrics;
mod peer;
mod sandbox;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

pub use error::{status_of, ApiError, ErrorBody};
pub use gc::GcReport;
pub use metrics::Metrics;
pub use peer::{BindError, Peer, PeerListener};

use crate::config::{Backing, Settings};
use crate::core::{FsError, Zone, Zones};
use crate::state::JournalFilter;

/// The OpenAPI document, as kept in the repository.
pub const OPENAPI: &str = include_str!("openapi.json");

/// What every handler can reach.
pub struct AppState {
    pub zones: Arc<Zones>,
    pub git: Arc<crate::git::Git>,
    /// Checkpoints of the zones and their restores.
    pub checkpoints: Arc<crate::checkpoint::Checkpoints>,
    /// The named sandboxes and their sessions.
    pub sandboxes: Arc<crate::sandbox::Registry>,
    pub metrics: Metrics,
    pub settings: Settings,
    pub started: Instant,
    /// Whether this daemon mounted the zones (false with `--no-mount`).
    pub mounted: bool,
    /// Set when the daemon starts to stop, so that endless answers (`/v1/events`) end.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// The state of a daemon; fails when the checkpoint store cannot be opened.
    pub fn new(
        zones: Arc<Zones>,
        settings: Settings,
        mounted: bool,
    ) -> Result<Arc<AppState>, FsError> {
        let checkpoints = Arc::new(crate::checkpoint::Checkpoints::open(
            zones.clone(),
            &settings,
        )?);
        Ok(Arc::new(AppState {
            git: Arc::new(crate::git::Git::new(zones.clone(), &settings)),
            checkpoints,
            sandboxes: Arc::new(
                crate::sandbox::Registry::new(zones.clone())
                    .with_policy(crate::sandbox::registry::AddPolicy::from_settings(
                        &settings,
                    ))
                    .with_provision_dir(settings.state_dir.join("provision")),
            ),
            zones,
            metrics: Metrics::new(),
            settings,
            started: Instant::now(),
            mounted,
            stopping: tokio::sync::watch::Sender::new(false),
        }))
    }
}

/// Builds the router with every route.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/status", get(status))
        .route("/v1/log", get(log))
        .route("/v1/events", get(events::events))
        .route("/metrics", get(metrics_text))
        .merge(fs::routes())
        .merge(git::routes())
        .merge(checkpoint::routes())
        .merge(gc::routes())
        .merge(sandbox::routes())
        .fallback(not_found)
        .layer(axum::middleware::map_response(method_not_allowed_json))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}

/// Serves the router on `listener` until `shutdown` completes.
pub async fn serve(
    listener: PeerListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stopping = state.clone();
    let app = router(state).into_make_service_with_connect_info::<Peer>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            // Graceful shutdown waits for every answer to end, streams included.
            stopping.stopping.send_replace(true);
        })
        .await
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "ok": true, "version": env!("CARGO_PKG_VERSION") }))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

async fn metrics_text(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::Fs(FsError::invalid(
        "route",
        format!(
            "{} is not an API route; see GET /v1/openapi.json",
            uri.path()
        ),
    ))
}

/// Gives axum's bare 405 (a known route asked with another method) the JSON error body every
/// other error has, so a client can always read a `code`; the `Allow` header is kept.
async fn method_not_allowed_json(resp: axum::response::Response) -> axum::response::Response {
    if resp.status() != axum::http::StatusCode::METHOD_NOT_ALLOWED {
        return resp;
    }
    let (mut parts, _) = resp.into_parts();
    let body = ErrorBody {
        code: crate::core::ErrorCode::InvalidArgument,
        message: "method: this route does not take this method (see the Allow header)".into(),
        path: None,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Streams the lines sent on `rx` as an `application/x-ndjson` body (progress lines, then one
/// `result` or `error` line), ending when every sender is gone.
pub(crate) fn ndjson(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> axum::response::Response {
    let body = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|o| o.map(|s| Ok::<_, std::convert::Infallible>(bytes::Bytes::from(s))))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// One zone in `/v1/status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ZoneStatus {
    pub name: String,
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub read_only: bool,
}

/// The body of `/v1/status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub uptime_s: u64,
    pub config: String,
    pub socket: String,
    pub mount: String,
    pub mounted: bool,
    pub state_db: String,
    pub journal_rows: u64,
    /// Staged commits waiting for a human (staged, rebased, conflicted or rejected).
    pub staged_awaiting_review: u64,
    pub zones: Vec<ZoneStatus>,
    /// The named sandboxes and their session status (`wardfs sandbox list` has the details).
    #[serde(default)]
    pub sandboxes: Vec<StatusSandbox>,
    /// Files written through the mount that a remote zone's sandbox has not taken yet (queued
    /// on disk, retried with backoff).
    #[serde(default)]
    pub pending_write_backs: Vec<crate::core::remote_zone::PendingWriteBack>,
}

/// One sandbox in `/v1/status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusSandbox {
    pub name: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

async fn status(State(app): State<Arc<AppState>>) -> Result<Json<Status>, ApiError> {
    let s = &app.settings;
    let journal_rows = app
        .zones
        .db()
        .journal_len()
        .map_err(|e| FsError::Internal(e.to_string()))?;
    let staged_awaiting_review = app
        .zones
        .db()
        .staged_awaiting_review()
        .map_err(|e| FsError::Internal(e.to_string()))?;
    let sandboxes = app
        .sandboxes
        .list()
        .map_err(ApiError::Sandbox)?
        .into_iter()
        .map(|i| StatusSandbox {
            name: i.name,
            status: i.status,
            last_error: i.last_error,
        })
        .collect();
    let pending_write_backs = crate::core::ZoneId::ALL
        .iter()
        .flat_map(|id| match app.zones.zone(*id) {
            Zone::Remote(r) => r.pending_write_backs(),
            Zone::Local(_) | Zone::Disabled(_) => Vec::new(),
        })
        .collect();
    let zones = s
        .zones
        .iter()
        .map(|zs| {
            let zone = app.zones.zone(zs.id);
            ZoneStatus {
                name: zs.id.name().into(),
                available: matches!(zone, Zone::Local(_) | Zone::Remote(_)),
                root: match zone {
                    Zone::Local(z) => Some(z.root().display().to_string()),
                    Zone::Remote(r) => Some(format!("{}:{}", r.sandbox(), r.root())),
                    Zone::Disabled(_) => None,
                },
                reason: match &zs.backing {
                    Backing::Disabled(r) => Some(r.clone()),
                    Backing::Dir { .. } | Backing::Remote(_) => None,
                },
                read_only: zs.read_only,
            }
        })
        .collect();
    Ok(Json(Status {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_s: app.started.elapsed().as_secs(),
        config: s
            .source
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(embedded default)".into()),
        socket: s.socket.display().to_string(),
        mount: s.mount.display().to_string(),
        mounted: app.mounted,
        state_db: app.zones.db().path().to_string(),
        journal_rows,
        staged_awaiting_review,
        sandboxes,
        pending_write_backs,
        zones,
    }))
}

/// Query of `/v1/log`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    limit: Option<usize>,
    zone: Option<String>,
    path: Option<String>,
    since_ms: Option<i64>,
    after_id: Option<i64>,
    until_id: Option<i64>,
}

async fn log(
    State(app): State<Arc<AppState>>,
    q: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    let scope = journal_filter(q.zone.as_deref(), q.path.as_deref())?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > 100_000 {
        return Err(FsError::invalid("limit", "must be between 1 and 100000").into());
    }
    let rows = tokio::task::spawn_blocking(move || {
        app.zones.db().journal_query(&JournalFilter {
            since_ms: q.since_ms,
            after_id: q.after_id,
            until_id: q.until_id,
            limit,
            ..scope
        })
    })
    .await
    .map_err(|e| FsError::Internal(e.to_string()))?
    .map_err(|e| FsError::Internal(e.to_string()))?;
    Ok(Json(serde_json::json!({ "entries": rows })))
}

/// Returns the rows a `zone` and a `path` query parameter select (of `/v1/log` and
/// `/v1/events`): a path inside a zone names its zone, whatever `zone` says.
fn journal_filter(zone: Option<&str>, path: Option<&str>) -> Result<JournalFilter, FsError> {
    let known = |z: &str| {
        if z == crate::state::SANDBOX_ZONE {
            return Ok(());
        }
        crate::core::ZoneId::from_name(z)
            .map(|_| ())
            .ok_or_else(|| {
                FsError::invalid(
                    "zone",
                    format!(
                        "{z:?} is not cache, workspace or {:?} (the sandboxes' lifecycle)",
                        crate::state::SANDBOX_ZONE
                    ),
                )
            })
    };
    if let Some(z) = zone {
        known(z)?;
    }
    let (zone, path_prefix) = match path {
        Some(p) => match crate::core::path::parse(p)? {
            crate::core::Target::Top => (zone.map(str::to_string), None),
            crate::core::Target::Zone(vp) => (
                Some(vp.zone().name().to_string()),
                (!vp.is_root()).then(|| vp.rel().to_string()),
            ),
        },
        None => (zone.map(str::to_string), None),
    };
    Ok(JournalFilter {
        zone,
        path_prefix,
        ..JournalFilter::default()
    })
}
