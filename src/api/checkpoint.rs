//! Checkpoint routes: make one (`POST /v1/checkpoints`), list them (`GET /v1/checkpoints`),
//! compare two or one with now (`POST /v1/checkpoints/diff`), and restore one, all or some paths
//! (`POST /v1/checkpoints/restore`). The list also names the latest restores, so one a crash
//! cut short (and the daemon finished at its next start) is seen. The work is
//! `crate::checkpoint`'s, on the blocking pool.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use super::fs::origin;
use super::openapi::{route, Route};
use super::peer::Peer;
use super::AppState;
use crate::checkpoint::{Checkpoints, DiffResult, RestoreResult};
use crate::core::ErrorCode::*;
use crate::core::{FsError, FsResult, ZoneId};
use crate::state::{CheckpointRow, RestoreRow};

/// The checkpoint routes.
pub(super) fn routes() -> Vec<Route> {
    vec![
        route!(
            /// Checkpoint a zone or a directory now
            ///
            /// Snapshots the zone (default: workspace), or with `path` a directory in a zone (the
            /// tree is the zone's; the row names the directory, which its restore and diff cover),
            /// into the daemon's object store. Incremental: the paths the journal names since the
            /// previous checkpoint are looked at again, the rest is the previous snapshot. Files
            /// and their executable bit, symlinks and empty directories are kept;
            /// `checkpoints.exclude`, what the zone's `.gitignore` files ignore and `.git/` are
            /// left out; files over `checkpoints.max_file_bytes` are recorded by size only. A
            /// checkpoint asked for here is recorded even when nothing changed since the last one.
            /// INVALID_ARGUMENT also for an unknown zone, both `zone` and `path`, a path that is
            /// not a directory, a zone served from a sandbox, a bad message; NOT_FOUND when `path`
            /// does not exist; CONFLICT when a file kept changing while it was read.
            "checkpointCreate": POST "/v1/checkpoints" => create
        )
        .errors(&[
            InvalidPath,
            OutsideZone,
            PermissionDenied,
            NotFound,
            NotDir,
            Conflict,
            ZoneUnavailable,
        ]),
        route!(
            /// List checkpoints
            ///
            /// Newest first, of one zone or of all; with the latest restores (a `resumed` one was
            /// cut short by a crash and finished at the daemon's next start). `zone` and `limit`
            /// are the only query parameters accepted.
            "checkpointList": GET "/v1/checkpoints" => list
        ),
        route!(
            /// Compare a checkpoint with another or with now
            ///
            /// The changes from checkpoint `from` to checkpoint `to` (same zone) or, without `to`,
            /// to the zone as it is now: each file with its status and line counts, and the patch
            /// in git's format (cut at 4 MiB). INVALID_ARGUMENT also for checkpoints of two
            /// zones; NOT_FOUND when there is no such checkpoint.
            "checkpointDiff": POST "/v1/checkpoints/diff" => diff
        )
        .errors(&[NotFound, Conflict, ZoneUnavailable]),
        route!(
            /// Restore a checkpoint, all of it or some paths
            ///
            /// Puts the zone (or only `paths` and what is beneath them) back as it was at
            /// checkpoint `id`. The present is checkpointed first (`before` in the answer: restore
            /// it to undo this restore), so nothing is lost. Files are changed through the core:
            /// the journal records each change, the mount sees them at once, and a file that
            /// changed while the restore ran is left alone and listed in `conflicts`. Excluded
            /// paths and files recorded by size only are left as they are. INVALID_ARGUMENT also
            /// for a path outside the checkpoint's zone or more than 10,000 paths; NOT_FOUND when
            /// there is no such checkpoint.
            "checkpointRestore": POST "/v1/checkpoints/restore" => restore
        )
        .errors(&[
            InvalidPath,
            OutsideZone,
            PermissionDenied,
            ReadOnly,
            NotFound,
            Conflict,
            ZoneUnavailable,
            NoSpace,
        ]),
    ]
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

/// Which zone or directory to checkpoint, and why.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "CheckpointRequest")]
struct CreateReq {
    /// `workspace` (the default) or `cache`.
    #[serde(default)]
    zone: Option<String>,
    /// A directory to checkpoint instead of a whole zone (a virtual path such as
    /// /workspace/src); its zone is the checkpoint's. Not with `zone`. A restore or diff of the
    /// checkpoint covers that directory unless given paths.
    #[serde(default)]
    path: Option<String>,
    /// What the checkpoint is for (at most 4096 bytes, no NUL).
    #[serde(default)]
    #[schemars(length(max = 4096))]
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

/// Query of `GET /v1/checkpoints`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only this zone's checkpoints: `workspace` or `cache`. Default: both.
    zone: Option<String>,
    /// Most checkpoints to list: default 100; a value outside 1 to 10,000 is taken as the
    /// nearer bound.
    limit: Option<usize>,
}

/// Checkpoints, newest first, and the latest restores.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "CheckpointList")]
struct ListBody {
    /// Newest first.
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

/// The two moments to compare.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "CheckpointDiffRequest")]
struct DiffReq {
    /// The checkpoint to compare from.
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

/// The checkpoint to restore, and which of its paths.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "RestoreRequest")]
struct RestoreReq {
    /// The checkpoint to restore.
    id: i64,
    /// Virtual paths to restore (and what is beneath them), at most 10,000; absent or empty:
    /// the checkpoint's scope (its directory, or the whole zone).
    #[serde(default)]
    #[schemars(length(max = 10_000))]
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
/// discard with `revert`), so that `wardfs restore` can undo it; when nothing changed since the
/// zone's latest checkpoint, that one undoes it and none is recorded. A zone served from a
/// sandbox (checkpoints cover local zones) or switched off is skipped; any other failure stops
/// the operation before it changes anything.
pub(super) async fn before(
    app: &Arc<AppState>,
    zone: ZoneId,
    what: String,
) -> Result<(), ApiError> {
    if app.zones.local(zone).is_err() {
        return Ok(());
    }
    let cps = app.checkpoints.clone();
    tokio::task::spawn_blocking(move || {
        cps.create_if_changed(zone, &what, crate::state::Origin::INTERNAL)
    })
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
