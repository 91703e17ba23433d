//! Checkpoint routes: make one (`POST /v1/checkpoints`), list them (`GET /v1/checkpoints`),
//! compare two or one with now (`POST /v1/checkpoints/diff`), and restore one, all or some paths
//! (`POST /v1/checkpoints/restore`). The list also names the latest restores, so one a crash
//! cut short (and the daemon finished at its next start) is seen. The work is
//! `crate::checkpoint`'s, on the blocking pool.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use super::fs::origin;
use super::peer::Peer;
use super::AppState;
use crate::checkpoint::{Checkpoints, DiffResult, RestoreResult};
use crate::core::{FsError, FsResult, ZoneId};
use crate::state::{CheckpointRow, RestoreRow};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/checkpoints", post(create).get(list))
        .route("/v1/checkpoints/diff", post(diff))
        .route("/v1/checkpoints/restore", post(restore))
}

async fn blocking<T, F>(app: &Arc<AppState>, f: F) -> Result<Json<T>, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Checkpoints) -> FsResult<T> + Send + 'static,
{
    let cps = app.checkpoints.clone();
    tokio::task::spawn_blocking(move || f(&cps))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))?
        .map(Json)
        .map_err(ApiError::Fs)
}

fn zone(name: Option<&str>) -> FsResult<ZoneId> {
    let name = name.unwrap_or("workspace").trim_start_matches('/');
    ZoneId::from_name(name).ok_or_else(|| {
        FsError::invalid(
            "zone",
            format!("{name:?} is not a zone (workspace or cache)"),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateReq {
    /// `workspace` (the default) or `cache`.
    #[serde(default)]
    zone: Option<String>,
    /// A directory to checkpoint (a virtual path); its zone is the checkpoint's. Not with `zone`.
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

async fn create(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<CreateReq>,
) -> Result<Json<CheckpointRow>, ApiError> {
    let message = r.message.unwrap_or_default();
    match (r.path, r.zone) {
        (Some(_), Some(_)) => Err(FsError::invalid(
            "zone",
            "give a path or a zone, not both (a path names its zone)",
        )
        .into()),
        (Some(path), None) => {
            blocking(&app, move |c| c.create_at(&path, &message, origin(peer))).await
        }
        (None, z) => {
            let zone = zone(z.as_deref())?;
            blocking(&app, move |c| c.create(zone, &message, origin(peer))).await
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    zone: Option<String>,
    limit: Option<usize>,
}

#[derive(Serialize)]
struct ListBody {
    checkpoints: Vec<CheckpointRow>,
    /// The latest restores (at most 20), newest first: a `resumed` one was cut short by a crash
    /// and finished at the daemon's next start.
    restores: Vec<RestoreRow>,
}

async fn list(
    State(app): State<Arc<AppState>>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListBody>, ApiError> {
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    let zone = match q.zone.as_deref() {
        Some(z) => Some(zone(Some(z))?),
        None => None,
    };
    let limit = q.limit.unwrap_or(100);
    blocking(&app, move |c| {
        Ok(ListBody {
            checkpoints: c.list(zone, limit)?,
            restores: c.restores(20)?,
        })
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffReq {
    from: i64,
    /// Another checkpoint of the same zone; absent: the zone as it is now.
    #[serde(default)]
    to: Option<i64>,
}

async fn diff(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<DiffReq>,
) -> Result<Json<DiffResult>, ApiError> {
    blocking(&app, move |c| c.diff(r.from, r.to)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreReq {
    id: i64,
    /// Virtual paths to restore (and what is beneath them); absent or empty: the whole zone.
    #[serde(default)]
    paths: Vec<String>,
}

async fn restore(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<RestoreReq>,
) -> Result<Json<RestoreResult>, ApiError> {
    if r.paths.len() > 10_000 {
        return Err(FsError::invalid("paths", "at most 10,000 paths").into());
    }
    blocking(&app, move |c| c.restore(r.id, &r.paths, origin(peer))).await
}

/// Checkpoints `zone` before an operation that overwrites many files (a git or mirror pull, a
/// discard with `revert`), so that `wardfs restore` can undo it. A zone served from a sandbox
/// (checkpoints cover local zones) or switched off is skipped; any other failure stops the
/// operation before it changes anything.
pub(super) async fn before(
    app: &Arc<AppState>,
    zone: ZoneId,
    what: String,
) -> Result<(), ApiError> {
    if !matches!(app.zones.zone(zone), crate::core::Zone::Local(_)) {
        return Ok(());
    }
    let cps = app.checkpoints.clone();
    tokio::task::spawn_blocking(move || cps.create(zone, &what, crate::state::Origin::INTERNAL))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))?
        .map(|_| ())
        .map_err(ApiError::Fs)
}

/// The zone a virtual path names (the workspace when there is none or it does not parse: the
/// operation itself reports a bad path).
pub(super) fn zone_of(path: Option<&str>) -> ZoneId {
    path.and_then(|p| crate::core::path::parse_entry(p).ok())
        .map(|vp| vp.zone())
        .unwrap_or(ZoneId::Workspace)
}
