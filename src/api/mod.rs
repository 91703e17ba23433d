//! The Unix-socket HTTP API: HTTP/1.1 + JSON under `/v1`, served by axum.
//!
//! Handlers are thin: they parse the request, run the core operation on the blocking pool, and
//! turn the result or the [`FsError`](crate::core::FsError) into JSON. Every route is a row of
//! one table (`routes`, gathered from the modules' own): the router serves it and the OpenAPI
//! document served at `/v1/openapi.json` is built from it (`openapi.rs`), so the two cannot
//! disagree.
//!
//! Owns the HTTP routes and their error codes. May import `core`, `git`, `sandbox`, `state` and
//! `config`; never `cli`, `fuse`, `mcp`, `review` or `daemon` (`tests/rules` checks the imports).

mod body;
mod checkpoint;
mod conn;
mod error;
mod events;
mod forks;
mod fs;
pub mod gc;
mod git;
mod json_string;
mod metrics;
mod openapi;
mod peer;
mod progress;
mod run;
mod sandbox;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::proto::{EditorDir, Status, StatusSandbox, ZoneStatus};
pub use error::{status_of, ApiError, ErrorBody};
pub use metrics::Metrics;
pub use peer::{BindError, Peer, PeerListener};

use crate::config::{Backing, Settings};
use crate::core::ErrorCode::{InvalidPath, NotFound, OutsideZone};
use crate::core::{FsError, NotLocal, Zones};
use crate::state::{JournalFilter, JournalRow};
use openapi::{route, Route};

/// What every handler can reach.
pub struct AppState {
    pub zones: Arc<Zones>,
    pub git: Arc<crate::git::Git>,
    /// Checkpoints of the zones and their restores.
    pub checkpoints: Arc<crate::checkpoint::Checkpoints>,
    /// The forks of the zones (served as zones of their own).
    pub forks: Arc<crate::fork::Forks>,
    /// The named sandboxes and their sessions.
    pub sandboxes: Arc<crate::sandbox::Registry>,
    pub metrics: Metrics,
    pub settings: Settings,
    pub started: Instant,
    /// Whether this daemon mounted the zones (false with `--no-mount`).
    pub mounted: bool,
    /// Set when the daemon starts to stop, so that endless answers (`/v1/events`) end.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// The one memory budget of the request bodies being read (`limits.body_memory_bytes`).
    pub(crate) bodies: body::Budget,
    /// git's file-system monitor (`GET /v1/git/fsmonitor`): this daemon's instance, and the
    /// watcher it asks what changed beside wardfs (handed over by the daemon once it watches).
    pub fsmonitor: crate::git::fsmonitor::Monitor,
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
        let forks = Arc::new(crate::fork::Forks::open(
            zones.clone(),
            checkpoints.clone(),
            &settings,
        )?);
        Ok(Arc::new(AppState {
            git: Arc::new(crate::git::Git::new(zones.clone(), &settings)),
            checkpoints,
            forks,
            sandboxes: Arc::new(
                crate::sandbox::Registry::new(zones.clone())
                    .with_policy(crate::sandbox::registry::AddPolicy::from_settings(
                        &settings,
                    ))
                    .with_provision_dir(settings.state_dir.join("provision")),
            ),
            bodies: body::Budget::new(
                settings.limits.body_memory_bytes,
                std::time::Duration::from_secs(settings.limits.body_memory_wait_secs),
            ),
            zones,
            metrics: Metrics::new(),
            settings,
            started: Instant::now(),
            mounted,
            stopping: tokio::sync::watch::Sender::new(false),
            fsmonitor: crate::git::fsmonitor::Monitor::new(),
        }))
    }
}

/// Every route of the API: the router serves them and the OpenAPI document describes them.
fn routes() -> Vec<Route> {
    let mut routes = vec![
        route!(
            /// Check that the daemon is up
            ///
            /// Answers as soon as the daemon serves requests. Never fails; use it as a liveness
            /// probe before other calls.
            "health": GET "/v1/health" => health
        ),
        route!(
            /// Get this OpenAPI document
            ///
            /// This OpenAPI 3.1 document, built from the daemon's route table, describing every
            /// route, field, default, limit and error code.
            "openapi": GET "/v1/openapi.json" => openapi_json
        )
        .content(
            "application/json",
            json!({ "type": "object", "required": ["openapi", "info", "paths"] }),
        ),
        route!(
            /// Describe the daemon: version, config, socket, zones, sandboxes
            ///
            /// The version, pid, uptime, the config file in use, the socket and mount paths, the
            /// state database and its journal size, the staged commits awaiting review, for each
            /// zone whether it is available, where it lives and whether it is read-only, the
            /// sandboxes' session status and the write-backs queued for a sandbox. INTERNAL when
            /// the state database cannot be read.
            "status": GET "/v1/status" => status
        ),
        route!(
            /// List recent changes from the journal
            ///
            /// The change journal, newest first: one row per write, edit, delete, mkdir or move,
            /// whoever made it (API, FUSE mount, …), with the client's pid and uid, and the git
            /// and sandbox events. Filter by zone, by path (the path itself and everything beneath
            /// it), by time and by a range of journal ids. Only the query parameters below are
            /// accepted; an unknown one, a bad `limit` or an unknown `zone` gives
            /// INVALID_ARGUMENT; a bad `path` INVALID_PATH or OUTSIDE_ZONE; a path in a fork
            /// that does not exist NOT_FOUND.
            "log": GET "/v1/log" => log
        )
        .errors(&[InvalidPath, OutsideZone, NotFound]),
        route!(
            /// Follow changes and checkpoints as they happen (NDJSON stream)
            ///
            /// Streams the change journal and the checkpoints, oldest first, as
            /// `application/x-ndjson`: one JSON object per line, each with `kind` and `cursor`
            /// (EventLine). The stream is long-lived: it ends when the client disconnects or the
            /// daemon stops, or with `follow=false` once it has sent what exists. A failure after
            /// the stream began is a last line of kind `error` (the status is already 200). Only
            /// the query parameters below are accepted; an unknown one gives INVALID_ARGUMENT, as
            /// do a malformed cursor, a cursor past the newest event, one whose next journal rows
            /// were pruned by `journal.keep_days`, and an unknown `zone`; a bad `path` gives
            /// INVALID_PATH or OUTSIDE_ZONE; a path in a fork that does not exist NOT_FOUND.
            "events": GET "/v1/events" => events::events
        )
        .ndjson::<events::EventLine<'static>>()
        .errors(&[InvalidPath, OutsideZone, NotFound]),
        route!(
            /// Prometheus metrics
            ///
            /// The Prometheus text exposition format (version 0.0.4):
            /// `wardfs_requests_total{route}`, `wardfs_request_duration_seconds{route}`
            /// (histogram) and `wardfs_errors_total{route,code}`. Routes are the matched route
            /// templates; requests that match no route are labelled `unmatched`.
            "metrics": GET "/metrics" => metrics_text
        )
        .content("text/plain", json!({ "type": "string" })),
    ];
    routes.extend(fs::routes());
    routes.extend(git::routes());
    routes.extend(gc::routes());
    routes.extend(sandbox::routes());
    routes.extend(run::routes());
    routes.extend(checkpoint::routes());
    routes.extend(forks::routes());
    routes
}

/// The OpenAPI document of the route table, built at its first use.
pub fn openapi_document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| openapi::document(&routes()).to_string())
}

/// Builds the router with every route.
pub fn router(state: Arc<AppState>) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |router, r| r.serve_on(router))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(body::hold))
        .layer(axum::middleware::map_response(method_not_allowed_json))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}

pub use conn::SHUTDOWN_DEADLINE;

/// Serves the router on `listener` (within the connection limits of `api.max_connections` and
/// `api.idle_timeout_secs`, see `conn`) until `shutdown` completes, then lets open answers end
/// for at most [`SHUTDOWN_DEADLINE`].
pub async fn serve(
    listener: PeerListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let policy = conn::Policy::of(state.settings.connections);
    let stopping = state.clone();
    let shutdown = async move {
        shutdown.await;
        // Endless answers (`/v1/events`) end when they see this.
        stopping.stopping.send_replace(true);
    };
    conn::serve(listener, router(state), policy, shutdown).await;
    Ok(())
}

/// Liveness answer.
#[derive(Serialize, schemars::JsonSchema)]
struct Health {
    /// Always true.
    ok: bool,
    /// The daemon's version (Cargo package version).
    version: &'static str,
}

async fn health() -> Json<Health> {
    Json(Health {
        ok: true,
        version: env!("CARGO_PKG_VERSION"),
    })
}

async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        openapi_document(),
    )
        .into_response()
}

async fn metrics_text(State(app): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
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
        .flat_map(|id| {
            app.zones
                .sandbox_zone(*id)
                .map(|r| r.pending_write_backs())
                .unwrap_or_default()
        })
        .collect();
    let zones = s
        .zones
        .iter()
        .map(|zs| {
            let root = app.zones.location(zs.id);
            ZoneStatus {
                name: zs.id.name().into(),
                available: root.is_some(),
                root,
                reason: match &zs.backing {
                    Backing::Disabled(r) => Some(r.clone()),
                    Backing::Dir { .. } | Backing::Sandbox(_) => None,
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
        editor: editor_dir(&app),
        state_db: app.zones.db().path(),
        journal_rows,
        staged_awaiting_review,
        sandboxes,
        pending_write_backs,
        zones,
    }))
}

/// The directory to open in an editor (see [`EditorDir`]).
fn editor_dir(app: &AppState) -> Option<EditorDir> {
    let ws = crate::core::ZoneId::Workspace;
    let mounted = app.settings.mount.join(ws.name());
    let (dir, every_change) = match (app.zones.local(ws), app.mounted) {
        (Ok(_), true) => (mounted, true),
        (Ok(z), false) => (z.root().to_path_buf(), true),
        (Err(NotLocal::Sandbox(_)), true) => (mounted, false),
        _ => return None,
    };
    Some(EditorDir {
        dir: dir.display().to_string(),
        every_change,
    })
}

/// Query of `/v1/log`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    /// Most rows to return, 1 to 100000. Default 100.
    #[schemars(range(min = 1, max = 100_000), extend("default" = 100))]
    limit: Option<usize>,
    /// Only rows of this zone (`workspace`, `cache`, or `sandboxes` for the sandboxes'
    /// lifecycle). Ignored when `path` names a place inside a zone (the path's zone is used).
    zone: Option<String>,
    /// Only rows about this virtual path or paths beneath it, e.g. `/workspace/src`. `/` (or a
    /// zone root) means no path filter.
    #[schemars(length(min = 1, max = 4096))]
    path: Option<String>,
    /// Only rows with `time_ms` at or after this time (milliseconds since the Unix epoch).
    since_ms: Option<i64>,
    /// Only rows whose `id` is greater than this journal id. With `until_id` and a checkpoint's
    /// `journal_pos` and its predecessor's, the changes that went into that checkpoint.
    after_id: Option<i64>,
    /// Only rows whose `id` is at most this journal id.
    until_id: Option<i64>,
}

/// Journal rows, newest first.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "LogResult")]
struct LogBody {
    /// Matching rows, newest first, at most `limit`.
    entries: Vec<JournalRow>,
}

async fn log(
    State(app): State<Arc<AppState>>,
    q: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<LogBody>, ApiError> {
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
    Ok(Json(LogBody { entries: rows }))
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
