//! The sandbox routes: `/v1/sandboxes` (list, add, remove, check; and for the sandboxes wardfs
//! makes itself: create, pause, resume, destroy, snapshot) and `/v1/mirror` (push, pull).
//!
//! Handlers hand the work to the [`Registry`](crate::sandbox::Registry), which serialises runs
//! per sandbox. Push and pull can stream their progress like the git routes: with
//! `"progress": true` the answer is NDJSON (`application/x-ndjson`), `{"progress": {phase,
//! sandbox}}` lines and then one `{"result": …}` or `{"error": {code, message, path}}`.

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use super::AppState;
use crate::core::ZoneId;
use crate::sandbox::mirror::{MirrorProgress, ProgressFn};
use crate::sandbox::registry::{AddRequest, MirrorRequest};
use crate::sandbox::{
    CreateRequest, DestroyRequest, Registry, SandboxError, SandboxInfo, SnapshotInfo,
};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/sandboxes", get(list))
        .route("/v1/sandboxes/add", post(add))
        .route("/v1/sandboxes/remove", post(remove))
        .route("/v1/sandboxes/check", post(check))
        .route("/v1/sandboxes/create", post(create))
        .route("/v1/sandboxes/pause", post(pause))
        .route("/v1/sandboxes/resume", post(resume))
        .route("/v1/sandboxes/destroy", post(destroy))
        .route("/v1/sandboxes/snapshot", post(snapshot))
        .route("/v1/mirror/push", post(push))
        .route("/v1/mirror/pull", post(pull))
}

#[derive(Serialize)]
struct ListBody {
    sandboxes: Vec<SandboxInfo>,
}

async fn list(State(app): State<Arc<AppState>>) -> Result<Json<ListBody>, ApiError> {
    let reg = app.sandboxes.clone();
    let sandboxes = tokio::task::spawn_blocking(move || reg.list())
        .await
        .map_err(|e| crate::core::FsError::Internal(format!("worker failed: {e}")))??;
    Ok(Json(ListBody { sandboxes }))
}

async fn add(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<AddRequest>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.add(&r)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameReq {
    name: String,
}

async fn remove(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<NameReq>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.remove(&r.name).await?))
}

async fn check(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<NameReq>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.check(&r.name).await?))
}

async fn create(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<CreateRequest>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.create(&r).await?))
}

async fn pause(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<NameReq>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.pause(&r.name).await?))
}

async fn resume(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<NameReq>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.resume(&r.name).await?))
}

async fn destroy(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<DestroyRequest>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.sandboxes.destroy(&r).await?))
}

async fn snapshot(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<NameReq>,
) -> Result<Json<SnapshotInfo>, ApiError> {
    Ok(Json(app.sandboxes.snapshot(&r.name).await?))
}

/// Runs a mirror operation, as one JSON answer or streamed as NDJSON when asked.
async fn run<T, F, Fut>(app: &Arc<AppState>, req: MirrorRequest, f: F) -> Response
where
    T: Serialize + Send + 'static,
    F: FnOnce(Arc<Registry>, MirrorRequest, ProgressFn) -> Fut,
    Fut: Future<Output = Result<T, SandboxError>> + Send + 'static,
{
    let reg = app.sandboxes.clone();
    if !req.progress {
        return match f(reg, req, ProgressFn(Arc::new(|_| {}))).await {
            Ok(v) => Json(v).into_response(),
            Err(e) => ApiError::Sandbox(e).into_response(),
        };
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let sandbox = req.sandbox.clone();
    let progress_tx = tx.clone();
    let report = ProgressFn(Arc::new(move |p: &MirrorProgress| {
        let mut v = serde_json::to_value(p).unwrap_or_default();
        v["sandbox"] = serde_json::Value::String(sandbox.clone());
        let line = serde_json::json!({ "progress": v });
        let _ = progress_tx.send(line.to_string() + "\n");
    }));
    let fut = f(reg, req, report);
    tokio::spawn(async move {
        let line = match fut.await {
            Ok(v) => serde_json::json!({ "result": v }),
            Err(e) => serde_json::json!({ "error": ApiError::Sandbox(e).body() }),
        };
        let _ = tx.send(line.to_string() + "\n");
    });
    super::ndjson(rx)
}

async fn push(State(app): State<Arc<AppState>>, JsonBody(r): JsonBody<MirrorRequest>) -> Response {
    if r.from.is_some() {
        return ApiError::Sandbox(SandboxError::Invalid {
            key: "from".into(),
            rule: "is for pull; a push names its remote directory with `to`".into(),
        })
        .into_response();
    }
    run(&app, r, |reg, r, p| async move { reg.push(&r, p).await }).await
}

async fn pull(State(app): State<Arc<AppState>>, JsonBody(r): JsonBody<MirrorRequest>) -> Response {
    if r.to.is_some() || r.full_hash {
        return ApiError::Sandbox(SandboxError::Invalid {
            key: if r.to.is_some() { "to" } else { "full_hash" }.into(),
            rule: "is for push; a pull names its remote directory with `from`".into(),
        })
        .into_response();
    }
    let zone = r
        .zone
        .as_deref()
        .and_then(|z| ZoneId::from_name(z.trim_start_matches('/')))
        .unwrap_or(ZoneId::Workspace);
    let what = format!("before mirror pull from sandbox {}", r.sandbox);
    if let Err(e) = super::checkpoint::before(&app, zone, what).await {
        return e.into_response();
    }
    run(&app, r, |reg, r, p| async move { reg.pull(&r, p).await }).await
}
