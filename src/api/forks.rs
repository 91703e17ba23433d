//! Fork routes: make a fork (`POST /v1/forks`), list them (`GET /v1/forks`), remove one
//! (`DELETE /v1/forks/{name}`), list what one changed (`GET /v1/forks/{name}/changes`),
//! merge it into its parent (`POST /v1/forks/{name}/merge`) and move it onto its parent's
//! present (`POST /v1/forks/{name}/update`). A fork is a zone of its own
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
use crate::checkpoint::Settle;
use crate::core::path::{parse, Target, VPath};
use crate::core::ErrorCode::*;
use crate::core::{FsError, FsResult, ZoneId};
use crate::fork::{ForkInfo, ForkMade, ForkRemoved, Forks, MergeResult, Source, UpdateResult};

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
            /// The fork's changes against its fork point, or with `since` against another zone
            /// or fork as it is now (`workspace`, `cache`, a fork's name or `forks/NAME`: it is
            /// checkpointed, as a merge checkpoints it) or a checkpoint (its id); `from` of the
            /// answer is the checkpoint compared with. Each file added, modified, deleted,
            /// type-changed, `renamed` (`old_path`: the same content, or with few files moved,
            /// half of it, under another path) or `re-moded` (only its mode changed: the
            /// executable bit or the exact permission bits; `old_mode`, `new_mode` in octal,
            /// also beside a change of content), paths relative to the fork, with line counts;
            /// with `patch=true` the patch in git's format too (cut at 4 MiB: `truncated`), else
            /// `patch` is empty. The fork's present is read as a checkpoint reads it (excluded
            /// paths left out; nothing recorded). NOT_FOUND when there is no such fork or
            /// checkpoint; INVALID_ARGUMENT for a bad name or `since`; ZONE_UNAVAILABLE for a
            /// `since` zone served from a sandbox or switched off.
            "forkChanges": GET "/v1/forks/{name}/changes" => changes
        )
        .param("name", NAME, name_schema())
        .query::<ChangesQuery>()
        .errors(&[NotFound, Conflict, ZoneUnavailable]),
        route!(
            /// Merge a fork into its parent
            ///
            /// Brings the fork's changes since its fork point (all, or only `paths` and what is
            /// beneath them) into the zone or fork it was made from. Per file a three-way merge
            /// against the fork point: text as git merges it; the parent's own changes since
            /// the fork point are kept. All or nothing: when any path conflicts (both sides
            /// changed it in ways that cannot be joined, binary files, modes, a delete against
            /// a change) nothing is applied, `applied` is false and `conflicts` lists each
            /// path. A conflicting path listed in `ours` keeps the parent's version, one in
            /// `theirs` takes the fork's (`settled` lists them); a path listed there that does
            /// not conflict, or in both, is INVALID_ARGUMENT and nothing is applied. Otherwise the parent is checkpointed first (`before`: restore it to undo
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
        route!(
            /// Update a fork from its parent
            ///
            /// Moves the fork onto its parent's present, keeping its own changes: both are
            /// checkpointed, and the parent's changes since the fork point are merged into the
            /// fork three-way against the fork point (the fork's side as "ours"), as git merges.
            /// The parent is not changed. The fork is checkpointed first (`before`: restore it
            /// to undo the update's writes) and the merged paths are written as a restore writes
            /// them (under the path locks, journaled; `changed`); a file another writer changed
            /// meanwhile is left alone (`left_alone`). Not all or nothing: a path both sides
            /// changed in ways that cannot be joined keeps both versions, the fork's at the path
            /// and the parent's beside it at `PATH.parent` (`PATH.parent.2`, … when taken;
            /// none when the parent deleted it), and is listed in `conflicts` (`kind` as a merge
            /// names it, the parent's side first; `parent_copy`). Then the fork's fork point
            /// (`base`) moves to the parent as brought in (`onto`, the parent's checkpoint), so
            /// `changes` and the next merge compare with it. Body: `{}`. NOT_FOUND when there
            /// is no such fork; INVALID_ARGUMENT for a bad name; CONFLICT, nothing written, for
            /// a file in the fork where the parent has a directory (the fork cannot hold both);
            /// ZONE_UNAVAILABLE when the fork has no zone to update from (made from a
            /// checkpoint, or its parent fork was removed).
            "forkUpdate": POST "/v1/forks/{name}/update" => update
        )
        .param("name", NAME, name_schema())
        .errors(&[
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
    /// The forks made ahead (`forks.spare`), one per zone that has been forked: `ready` when the
    /// next fork of that zone takes it (milliseconds), else it is being filled.
    spares: Vec<crate::fork::spare::SpareInfo>,
}

async fn list(State(app): State<Arc<AppState>>) -> Result<Json<ListBody>, ApiError> {
    blocking(&app, |f| {
        Ok(ListBody {
            forks: f.list()?,
            spares: f.spares(),
        })
    })
    .await
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
    /// Compare with this instead of the fork point: `workspace`, `cache`, a fork (`NAME`, or
    /// `forks/NAME` for a name that is a number) as it is now, or a checkpoint id.
    since: Option<String>,
}

async fn changes(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    name: Result<Path<String>, PathRejection>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<DiffResult>, ApiError> {
    let name = fork_name(name)?;
    crate::fork::check_name(&name)?;
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    let patch = q.patch.unwrap_or(false);
    let Some(since) = q.since else {
        return blocking(&app, move |f| f.changes(&name, patch)).await;
    };
    let since = Source::parse_as("since", &since)?;
    blocking(&app, move |f| {
        f.changes_since(&name, &since, patch, origin(peer))
    })
    .await
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
    /// Conflicting paths that keep the parent's version (written as `paths` are), at most
    /// 10,000. A path that does not conflict is INVALID_ARGUMENT.
    #[serde(default)]
    #[schemars(length(max = 10_000))]
    ours: Vec<String>,
    /// Conflicting paths that take the fork's version, as `ours`.
    #[serde(default)]
    #[schemars(length(max = 10_000))]
    theirs: Vec<String>,
}

async fn merge(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    name: Result<Path<String>, PathRejection>,
    JsonBody(r): JsonBody<MergeReq>,
) -> Result<Json<MergeResult>, ApiError> {
    let name = fork_name(name)?;
    for (field, given) in [
        ("paths", &r.paths),
        ("ours", &r.ours),
        ("theirs", &r.theirs),
    ] {
        if given.len() > MAX_MERGE_PATHS {
            return Err(FsError::invalid(field, "at most 10,000 paths").into());
        }
    }
    blocking(&app, move |f| {
        let paths = merge_paths(f, &name, &r.paths)?;
        let settle = Settle {
            ours: settle_paths(f, &name, "ours", &r.ours)?,
            theirs: settle_paths(f, &name, "theirs", &r.theirs)?,
            beside: None,
        };
        f.merge_settling(&name, &paths, &settle, origin(peer))
    })
    .await
}

/// An update's body: nothing to give yet.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ForkUpdateRequest")]
struct UpdateReq {}

async fn update(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    name: Result<Path<String>, PathRejection>,
    JsonBody(_): JsonBody<UpdateReq>,
) -> Result<Json<UpdateResult>, ApiError> {
    let name = fork_name(name)?;
    blocking(&app, move |f| f.update(&name, origin(peer))).await
}

/// The conflicting paths `given` for `field` (`ours`, `theirs`) of a merge of the fork `name`,
/// relative to the zones ([`fork_rel`]); the whole fork or parent is refused.
fn settle_paths(forks: &Forks, name: &str, field: &str, given: &[String]) -> FsResult<Vec<String>> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let (fork, parent) = fork_and_parent(forks, name)?;
    given
        .iter()
        .map(|p| match fork_rel(fork, &parent, field, p)? {
            rel if rel.is_empty() => Err(FsError::invalid(
                field,
                format!(
                    "{} names the whole zone; give the conflicting files",
                    crate::core::text::name(p)
                ),
            )),
            rel => Ok(rel),
        })
        .collect()
}

/// The paths of a merge of the fork `name`, relative to the zones: each given relative to the
/// fork, or as a virtual path in the fork or in its parent. A path naming the whole fork or
/// parent means every change: then none is returned.
fn merge_paths(forks: &Forks, name: &str, given: &[String]) -> FsResult<Vec<String>> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let (fork, parent) = fork_and_parent(forks, name)?;
    let mut out = Vec::with_capacity(given.len());
    for p in given {
        let rel = fork_rel(fork, &parent, "paths", p)?;
        if rel.is_empty() {
            return Ok(Vec::new());
        }
        out.push(rel);
    }
    Ok(out)
}

/// The zone of the fork `name` and the name of its parent (`workspace`, `forks/a`).
fn fork_and_parent(forks: &Forks, name: &str) -> FsResult<(ZoneId, String)> {
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
    Ok((fork, info.parent))
}

/// The one rule for a path a merge is given (`field`: `paths`, `ours`, `theirs`): relative to
/// the fork `fork`, or a virtual path in the fork or in its `parent`; folded as every path is
/// (`.` and repeated slashes dropped, `..` folded), and refused when it climbs above the zone
/// (OUTSIDE_ZONE), holds a NUL or an over-long name (INVALID_PATH), or is in another zone
/// (INVALID_ARGUMENT). Returns it relative to the zones, empty for the whole zone.
fn fork_rel(fork: ZoneId, parent: &str, field: &str, p: &str) -> FsResult<String> {
    let vp = if p.starts_with('/') {
        match parse(p)? {
            Target::Zone(vp) => vp,
            Target::Top => VPath::root(fork),
        }
    } else {
        VPath::new(fork, p)?
    };
    if vp.zone() != fork && vp.zone().name() != parent {
        return Err(FsError::invalid(
            field,
            format!(
                "{} is neither in the fork (/{}) nor in its parent (/{parent})",
                crate::core::text::name(p),
                fork.name()
            ),
        ));
    }
    Ok(vp.rel().to_string())
}
