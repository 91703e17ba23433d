//! The git routes under `/v1/git`: pull, status, stage, resolve, staged (list/show), push, discard.
//!
//! Git work runs on the blocking pool. Pull and push can stream their progress: with
//! `"progress": true` the answer is NDJSON (`application/x-ndjson`), `{"progress": …}` lines
//! (at most ten a second) and then one `{"result": …}` or `{"error": {code, message, path}}`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use super::AppState;
use crate::core::{FsError, ZoneId};
use crate::git::{Git, GitFailure, Progress, PullRequest, PushRequest, StageRequest, StagedCommit};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/git/pull", post(pull))
        .route("/v1/git/status", post(status))
        .route("/v1/git/stage", post(stage))
        .route("/v1/git/resolve", post(resolve))
        .route("/v1/git/staged", get(list))
        .route("/v1/git/staged/show", post(show))
        .route("/v1/git/push", post(push))
        .route("/v1/git/discard", post(discard))
}

/// Runs a git call on the blocking pool.
async fn blocking<T, E, F>(app: &Arc<AppState>, f: F) -> Result<Json<T>, ApiError>
where
    T: Send + 'static,
    E: GitFailure,
    F: FnOnce(&Git) -> Result<T, E> + Send + 'static,
{
    let git = app.git.clone();
    tokio::task::spawn_blocking(move || f(&git))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))?
        .map(Json)
        .map_err(ApiError::from)
}

/// Runs a long git call, streaming its progress as NDJSON when asked.
async fn with_progress<T, E, F>(app: &Arc<AppState>, stream: bool, f: F) -> Response
where
    T: Serialize + Send + 'static,
    E: GitFailure,
    F: FnOnce(&Git, &(dyn Fn(&Progress) + Sync)) -> Result<T, E> + Send + 'static,
{
    if !stream {
        return blocking(app, move |g| f(g, &|_| {})).await.into_response();
    }
    let git = app.git.clone();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::task::spawn_blocking(move || {
        let last = Mutex::new(Instant::now() - Duration::from_secs(1));
        let report = |p: &Progress| {
            let mut last = last.lock().expect("not poisoned");
            if last.elapsed() >= Duration::from_millis(100) || (p.total > 0 && p.done == p.total) {
                *last = Instant::now();
                let _ = tx.send(serde_json::json!({ "progress": p }).to_string() + "\n");
            }
        };
        let line = match f(&git, &report) {
            Ok(v) => serde_json::json!({ "result": v }),
            Err(e) => serde_json::json!({ "error": ApiError::from(e).body() }),
        };
        let _ = tx.send(line.to_string() + "\n");
    });
    super::ndjson(rx)
}

async fn pull(State(app): State<Arc<AppState>>, JsonBody(r): JsonBody<PullRequest>) -> Response {
    let zone = super::checkpoint::zone_of(r.into.as_deref());
    let what = format!("before git pull of {}", r.remote);
    if let Err(e) = super::checkpoint::before(&app, zone, what).await {
        return e.into_response();
    }
    let stream = r.progress;
    with_progress(&app, stream, move |g, p| g.pull(&r, p)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusReq {
    /// A path in the repository's directory (default: every pulled repository).
    #[serde(default)]
    repo: Option<String>,
    /// Re-hash every file instead of only those the journal mentions.
    #[serde(default)]
    rescan: bool,
}

async fn status(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<StatusReq>,
) -> Result<Json<crate::git::StatusResult>, ApiError> {
    blocking(&app, move |g| g.status(r.repo.as_deref(), r.rescan)).await
}

async fn stage(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<StageRequest>,
) -> Result<Json<StagedCommit>, ApiError> {
    blocking(&app, move |g| g.stage(&r)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathReq {
    path: String,
}

async fn resolve(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<PathReq>,
) -> Result<Json<crate::git::Change>, ApiError> {
    blocking(&app, move |g| g.resolve(&r.path)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
}

#[derive(Serialize)]
struct ListBody {
    staged: Vec<StagedCommit>,
}

const STATES: [&str; 6] = [
    "staged",
    "rebased",
    "pushed",
    "conflicted",
    "rejected",
    "discarded",
];

async fn list(
    State(app): State<Arc<AppState>>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListBody>, ApiError> {
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    if let Some(s) = &q.state {
        if !STATES.contains(&s.as_str()) {
            return Err(FsError::invalid(
                "state",
                format!("{s:?} is not one of {}", STATES.join(", ")),
            )
            .into());
        }
    }
    blocking(&app, move |g| {
        g.list(q.state.as_deref()).map(|staged| ListBody { staged })
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdReq {
    id: String,
}

async fn show(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<IdReq>,
) -> Result<Json<StagedCommit>, ApiError> {
    blocking(&app, move |g| g.show(&r.id, true)).await
}

async fn push(State(app): State<Arc<AppState>>, JsonBody(r): JsonBody<PushRequest>) -> Response {
    let stream = r.progress;
    with_progress(&app, stream, move |g, p| g.push(&r, p)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardReq {
    id: String,
    #[serde(default)]
    revert: bool,
}

async fn discard(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<DiscardReq>,
) -> Result<Json<crate::git::DiscardResult>, ApiError> {
    if r.revert {
        let what = format!("before discarding staged commit {} with revert", r.id);
        super::checkpoint::before(&app, ZoneId::Workspace, what).await?;
    }
    blocking(&app, move |g| g.discard(&r.id, r.revert)).await
}
