//! Fork routes: make a fork (`POST /v1/forks`), list them (`GET /v1/forks`), remove one
//! (`DELETE /v1/forks/{name}`), list what one changed (`GET /v1/forks/{name}/changes`) and
//! merge it into its parent (`POST /v1/forks/{name}/merge`). A fork is a zone of its own
//! (`/forks/NAME/...`), so the file, checkpoint and event routes already serve its files. The
//! work is `crate::fork`'s, on the blocking pool.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::body::JsonBody;
use super::error::ApiError;
use super::fs::origin;
use super::openapi::{route, Route};
use super::peer::Peer;
use super::AppState;
use crate::checkpoint::DiffResult;
use crate::core::path::{parse, Target, VPath};
use crate::core::ErrorCode::*;
use crate::core::{FsError, FsResult, ZoneId};
use crate::fork::{ForkInfo, ForkMade, ForkRemoved, Forks, MergeResult, Source};

/// What the `{name}` of a fork route is.
const NAME: &str = "The fork's name: 1 to 64 letters, digits, `.`, `_` or `-`, not starting \
                    with `.` or `-`.";

/// The values a fork's name can take, for the document.
fn name_schema() -> serde_json::Value {
    json!({ "type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$" })
}

/// The most paths a merge may name.
const MAX_MERGE_PATHS: usize = 10_000;

/// The fork routes.
pub(super) fn routes() -> Vec<Route> {
    vec![
        route!(
            /// Make a fork
            ///
            /// Makes the fork `name`, a copy-on-write zone of its own served at `/forks/NAME`
            /// (and `MOUNT/forks/NAME` through the mount), of `from` as it is now: the workspace
            /// (the default), `cache`, another fork (its name, or `forks/NAME`), or a checkpoint
            /// (its id). The parent is checkpointed first (incrementally); that checkpoint is the
            /// fork point, the fork's first checkpoint, which `changes` and `merge` compare
            /// with. The fork's files are hard links to the parent's (no data copied; a write
            /// on either side replaces the file, so neither sees the other's writes), or, from
            /// a checkpoint, written from its objects. Excluded paths (`node_modules/`, …) are
            /// shared as they are but are in no checkpoint, so not in `changes` or a merge.
            /// EXISTS when a fork of that name exists; INVALID_ARGUMENT for a bad name or
            /// `from`; NOT_FOUND for no such checkpoint; CONFLICT when 256 forks exist or the
            /// parent changed too much while it was filled; ZONE_UNAVAILABLE for a zone served
            /// from a sandbox or switched off.
            "forkCreate": POST "/v1/forks" => create
        )
        .errors(&[Exists, NotFound, Conflict, ZoneUnavailable, NoSpace]),
        route!(
            /// List the forks
            ///
            /// Every fork this daemon serves, oldest first: its name and path, its parent, its
            /// fork point (`base`, a checkpoint), who made it and when, how many paths it
            /// changed since its fork point (`changed`, from the journal; `null` past 10,000), and
            /// its `overlaps`: the paths it changed that its parent or a sibling fork (made from
            /// the same parent) changed too since the fork point, with who changed each side.
            "forkList": GET "/v1/forks" => list
        ),
        route!(
            /// Remove a fork
            ///
            /// Checkpoints the fork as it is (`checkpoint` in the answer: its changes are kept
            /// there until checkpoint retention drops them, and a new fork can be made from
            /// it), stops serving it (its paths are NOT_FOUND from then on) and deletes its
            /// directory; its name can be used again. NOT_FOUND when there is no such fork;
            /// INVALID_ARGUMENT for a bad name.
            "forkRemove": DELETE "/v1/forks/{name}" => remove
        )
        .param("name", NAME, name_schema())
        .errors(&[NotFound, Conflict]),
        route!(
            /// List what a fork changed
            ///
            /// The fork's changes against its fork point: each file added, modified, deleted or
            /// type-changed (paths relative to the fork), with line counts; with `patch=true`
            /// the patch in git's format too (cut at 4 MiB: `truncated`), else `patch` is
            /// empty. The fork's present is read as a checkpoint reads it (excluded paths left
            /// out). NOT_FOUND when there is no such fork; INVALID_ARGUMENT for a bad name.
            "forkChanges": GET "/v1/forks/{name}/changes" => changes
        )
        .param("name", NAME, name_schema())
        .errors(&[NotFound, Conflict]),
        route!(
            /// Merge a fork into its parent
            ///
            /// Brings the fork's changes since its fork point (all, or only `paths` and what is
            /// beneath them) into the zone or fork it was made from. Per file a three-way merge
            /// against the fork point: text as git merges it; the parent's own changes since
            /// the fork point are kept. All or nothing: when any path conflicts (both sides
            /// changed it in ways that cannot be joined, binary files, modes, a delete against
            /// a change) nothing is applied, `applied` is false and `conflicts` lists each
            /// path. Otherwise the parent is checkpointed first (`before`: restore it to undo
            /// the merge) and the merged paths are written as a restore writes them (under the
            /// path locks, journaled); a file another writer changed while the merge ran is
            /// left alone and listed in `left_alone`. The fork's files stay as they are; after a
            /// merge of all its changes with none left alone, its fork point (`base`) moves to
            /// the fork as merged, as git's merge base moves. NOT_FOUND when there is no such fork; INVALID_ARGUMENT for a bad name or path, or more than
            /// 10,000 paths; ZONE_UNAVAILABLE when the fork has no zone to merge into (made from
            /// a checkpoint, or its parent fork was removed); READ_ONLY for a read-only parent.
            "forkMerge": POST "/v1/forks/{name}/merge" => merge
        )
        .param("name", NAME, name_schema())
        .errors(&[
            InvalidPath,
            OutsideZone,
            NotFound,
            Conflict,
            ReadOnly,
            PermissionDenied,
            ZoneUnavailable,
            NoSpace,
        ]),
    ]
}

/// Runs a fork operation on the blocking pool.
async fn blocking<T, F>(app: &Arc<AppState>, f: F) -> Result<Json<T>, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Forks) -> FsResult<T> + Send + 'static,
{
    let forks = app.forks.clone();
    tokio::task::spawn_blocking(move || f(&forks))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))?
        .map(Json)
        .map_err(ApiError::Fs)
}

/// The `{name}` of a fork route.
fn fork_name(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(name)| name)
        .map_err(|e| FsError::invalid("name", e.body_text()).into())
}

/// The fork to make.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ForkRequest")]
struct CreateReq {
    /// The fork's name: 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.` or
    /// `-`. Its files are at `/forks/NAME`.
    #[schemars(length(min = 1, max = 64))]
    name: String,
    /// What to fork: `workspace` (the default), `cache`, a fork (`NAME`, or `forks/NAME` for a
    /// name that is a number) or a checkpoint id.
    #[serde(default)]
    from: Option<String>,
}

async fn create(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<CreateReq>,
) -> Result<Json<ForkMade>, ApiError> {
    crate::fork::check_name(&r.name)?;
    let from = Source::parse(r.from.as_deref().unwrap_or("workspace"))?;
    blocking(&app, move |f| f.create(&r.name, &from, origin(peer))).await
}

/// The forks.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "ForkList")]
struct ListBody {
    /// Oldest first.
    forks: Vec<ForkInfo>,
}

async fn list(State(app): State<Arc<AppState>>) -> Result<Json<ListBody>, ApiError> {
    blocking(&app, |f| Ok(ListBody { forks: f.list()? })).await
}

async fn remove(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<ForkRemoved>, ApiError> {
    let name = fork_name(name)?;
    blocking(&app, move |f| f.remove(&name, origin(peer))).await
}

/// Query of `GET /v1/forks/{name}/changes`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ChangesQuery {
    /// `true`: the patch in git's format too (cut at 4 MiB). Default `false`: `patch` empty.
    patch: Option<bool>,
}

async fn changes(
    State(app): State<Arc<AppState>>,
    name: Result<Path<String>, PathRejection>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<DiffResult>, ApiError> {
    let name = fork_name(name)?;
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    let patch = q.patch.unwrap_or(false);
    blocking(&app, move |f| f.changes(&name, patch)).await
}

/// Which of the fork's changes to merge.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ForkMergeRequest")]
struct MergeReq {
    /// Only these paths and what is beneath them, at most 10,000: relative to the fork
    /// (`src/a.rs`), or virtual paths in the fork (`/forks/NAME/src/a.rs`) or in its parent
    /// (`/workspace/src/a.rs`). Absent or empty: every change.
    #[serde(default)]
    #[schemars(length(max = 10_000))]
    paths: Vec<String>,
}

async fn merge(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    name: Result<Path<String>, PathRejection>,
    JsonBody(r): JsonBody<MergeReq>,
) -> Result<Json<MergeResult>, ApiError> {
    let name = fork_name(name)?;
    if r.paths.len() > MAX_MERGE_PATHS {
        return Err(FsError::invalid("paths", "at most 10,000 paths").into());
    }
    blocking(&app, move |f| {
        let paths = merge_paths(f, &name, &r.paths)?;
        f.merge(&name, &paths, origin(peer))
    })
    .await
}

/// The paths of a merge of the fork `name`, relative to the zones: each given relative to the
/// fork, or as a virtual path in the fork or in its parent. A path naming the whole fork or
/// parent means every change: then none is returned.
fn merge_paths(forks: &Forks, name: &str, given: &[String]) -> FsResult<Vec<String>> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    crate::fork::check_name(name)?;
    let not_found = || FsError::NotFound {
        path: format!("/forks/{name}"),
    };
    let info = forks
        .list()?
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(not_found)?;
    let fork = ZoneId::fork(name).ok_or_else(not_found)?;
    let mut out = Vec::with_capacity(given.len());
    for p in given {
        let vp = if p.starts_with('/') {
            match parse(p)? {
                Target::Zone(vp) => vp,
                Target::Top => VPath::root(fork),
            }
        } else {
            VPath::new(fork, p)?
        };
        if vp.zone() != fork && vp.zone().name() != info.parent {
            return Err(FsError::invalid(
                "paths",
                format!(
                    "{} is neither in the fork (/forks/{name}) nor in its parent (/{})",
                    crate::core::text::name(p),
                    info.parent
                ),
            ));
        }
        if vp.is_root() {
            return Ok(Vec::new());
        }
        out.push(vp.rel().to_string());
    }
    Ok(out)
}
