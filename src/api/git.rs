//! The git routes under `/v1/git`: pull, status, stage, resolve, staged (list/show), push, discard,
//! and the answers of git's file-system monitor for a checkout in a zone (fsmonitor).
//!
//! Git work runs on the blocking pool. Pull and push can stream their progress: with
//! `"progress": true` the answer is NDJSON (`application/x-ndjson`), `{"progress": …}` lines
//! (at most ten a second) and then one `{"result": …}` or `{"error": {code, message, path}}`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use super::openapi::{route, Route, StreamLine};
use super::AppState;
use crate::core::ErrorCode::*;
use crate::core::{FsError, ZoneId};
use crate::git::fsmonitor::{checkout_at, FsmonitorAnswer};
use crate::git::{Git, GitFailure, Progress, PullRequest, PushRequest, StageRequest, StagedCommit};
use crate::git::{PullResult, PushResult};

/// The git routes.
pub(super) fn routes() -> Vec<Route> {
    [agent_routes(), review_routes(), vec![fsmonitor_route()]]
        .into_iter()
        .flatten()
        .collect()
}

/// The routes an agent uses on its checkout: pull, status, stage, and resolve a conflict.
fn agent_routes() -> Vec<Route> {
    vec![
        route!(
            /// Pull a repository branch into a workspace directory
            ///
            /// Fetches `branch` of `remote` (shallowly, into a mirror wardfs keeps under its state
            /// directory) and writes its files into `into` (default `/workspace/<repository
            /// name>`) through the normal file rules, recording each file's base; pass the
            /// answer's `repo` to the other git routes. Pulling again updates the directory: files
            /// the agent did not touch follow upstream (written or deleted), files the agent
            /// changed are never overwritten: when upstream changed them too they are left as they
            /// are and listed in `conflicts` (status shows them as `conflict`; merge the upstream
            /// change into the file, then POST /v1/git/resolve before staging). Submodules and
            /// symlinks pointing out of the repository are listed in `skipped`. A local zone is
            /// checkpointed first (POST /v1/checkpoints/restore undoes the pull). Credentials:
            /// the token in the environment variable named by `git.token_env` for https,
            /// ssh-agent or `git.ssh_key` for ssh; never put a password in the URL.
            ///
            /// With `"progress": true` the answer is NDJSON: `progress` lines (at most ten a
            /// second) and then exactly one `result` or `error` line.
            ///
            /// INVALID_ARGUMENT also for `into` not in /workspace, a bad branch name, a `paths`
            /// entry with `..`, a URL with a password, no default branch; AUTH_FAILED for missing
            /// or refused credentials; NOT_FOUND for no such branch, or a `paths` entry missing
            /// upstream; CONFLICT when `into` already holds a pull of another remote; REJECTED
            /// when the fetched tree holds an entry that must not be written (nothing is written);
            /// REMOTE_UNAVAILABLE when the remote cannot be reached; INTERNAL for a git failure.
            "gitPull": POST "/v1/git/pull" => pull
        )
        .reply::<PullResult>()
        .ndjson::<StreamLine<Progress, PullResult>>()
        .errors(&[
            InvalidPath,
            OutsideZone,
            AuthFailed,
            ReadOnly,
            PermissionDenied,
            Rejected,
            NotFound,
            Conflict,
            ZoneUnavailable,
            RemoteUnavailable,
            NoSpace,
            Internal,
        ]),
        route!(
            /// List what changed in the pulled repositories
            ///
            /// For each pulled repository (or only the one holding `repo`), every file that
            /// differs from its base, as `created`, `modified`, `deleted` or `conflict` (changed
            /// upstream and locally; see pull). Cheap to call often: it reads the journal and
            /// re-hashes only the paths changed through wardfs (API or mount) since the last look.
            /// Changes made directly in the backing directory, beside wardfs, are invisible to the
            /// journal: pass `rescan: true` to re-hash every file. Files ignored by the
            /// repository's root `.gitignore` are not reported as created. No repository pulled
            /// and no `repo`: no repositories. With `fork` (or a `repo` in a fork,
            /// `/forks/NAME/...`) the fork's files are compared with the same base, and the
            /// paths answered are the fork's. INVALID_ARGUMENT also for `repo` not in /workspace
            /// or a fork, or in another fork than `fork`; NOT_FOUND when no repository is pulled
            /// at `repo`, or no fork is named `fork`; CONFLICT for a fork made before the
            /// repository's base last moved (a pull or push in the workspace): update it first.
            "gitStatus": POST "/v1/git/status" => status
        )
        .errors(&[
            InvalidPath,
            OutsideZone,
            PermissionDenied,
            NotFound,
            Conflict,
        ]),
        route!(
            /// Stage changes as a commit for a person to review
            ///
            /// Builds a commit of the chosen changes (`files`, default: every change not already
            /// staged) on the repository's base, inside wardfs's mirror only: the workspace and
            /// anyone's checkout are untouched, and nothing is pushed. Answers the staged commit,
            /// state `staged`, its files without patches. This is where an agent stops: a person
            /// reviews the commit (POST /v1/git/staged/show) and decides to push it (POST
            /// /v1/git/push) or discard it. Author and committer are `git.author_name` and
            /// `git.author_email`. With `fork` (or a `repo` or file in a fork, `/forks/NAME/...`)
            /// the fork's changes are staged, read from the fork; the commit's `zone` says which
            /// (`forks/NAME`), and each file names its `writers` from the journal. Pushing a fork's
            /// commit leaves the workspace and its base as they are. INVALID_ARGUMENT also for a
            /// blank `message`, a bad `branch`, a file outside the repository or the zone staged
            /// from, several repositories pulled and no `repo`; NOT_FOUND when no repository is
            /// pulled there, or no fork is named `fork`; CONFLICT when a chosen file is in
            /// `conflict` state (merge and resolve it first), an identical commit is already
            /// staged, or the fork was made before the repository's base last moved; NO_MATCH
            /// when there is nothing to stage, or a named file has no changes.
            "gitStage": POST "/v1/git/stage" => stage
        )
        .errors(&[
            InvalidPath,
            OutsideZone,
            PermissionDenied,
            NotFound,
            Conflict,
            NoMatch,
        ]),
        route!(
            /// Mark a file a pull reported as conflicting as merged
            ///
            /// Clears the `conflict` mark that a pull put on a file changed both upstream and
            /// locally, so it can be staged; answers the file with state `modified`. It merges
            /// nothing: the file's base is already the upstream version, so whatever the file
            /// holds when it is staged replaces upstream's change — merge that change into the
            /// file first. INVALID_ARGUMENT also for a path not in /workspace; NOT_FOUND when no
            /// pulled repository holds it; NO_MATCH when the file is not in conflict.
            "gitResolve": POST "/v1/git/resolve" => resolve
        )
        .errors(&[InvalidPath, OutsideZone, NotFound, NoMatch]),
    ]
}

/// The routes of a person's review of staged commits: list, show, push, discard.
fn review_routes() -> Vec<Route> {
    vec![
        route!(
            /// List staged commits
            ///
            /// Newest first, every state (or only `state`), with each file's line counts but no
            /// patches (POST /v1/git/staged/show has them). `state` is the only query parameter
            /// accepted; an unknown state or parameter gives INVALID_ARGUMENT.
            "gitStagedList": GET "/v1/git/staged" => list
        ),
        route!(
            /// Show a staged commit with its diff
            ///
            /// One staged commit with every file's git-format patch (`diff`, what GitHub will
            /// show) and its parsed `hunks` of numbered `context`/`add`/`delete` lines. Binary
            /// files and files over `git.max_diff_bytes` are flagged (`binary`, `oversized`)
            /// without a patch. After a push found the remote moved, the commit is `rebased`:
            /// `base` is the remote tip and the patch is against it, which is what must be
            /// reviewed before pushing again. NOT_FOUND when no staged commit has that id.
            "gitStagedShow": POST "/v1/git/staged/show" => show
        )
        .errors(&[NotFound]),
        route!(
            /// Push a staged commit (a person's decision)
            ///
            /// Pushes a reviewed staged commit (state `staged`, `rebased` or `rejected`) to its
            /// branch, or with `pr: true` to the branch `wardfs/<id>` and opens a GitHub pull
            /// request into its branch (token from the environment variable named by
            /// `git.token_env`; API `git.github_api`). Pushing is for the person who reviewed the
            /// commit: an agent stages and stops. The push carries a lease, so nothing on the
            /// remote is ever overwritten. When the remote branch moved since the commit's base,
            /// the commit is rebased onto it by a three-way merge: if the remote changed only
            /// other files it is pushed (`rebased: true`); if it also changed files the commit
            /// touches, nothing is pushed, the commit becomes `rebased` and the answer is
            /// REMOTE_MOVED — review it again with POST /v1/git/staged/show, then push again; if
            /// the same lines changed, nothing is pushed, the commit becomes `conflicted` (files in
            /// `conflicts`) and the answer is CONFLICT. A hook or branch protection refusing the
            /// push gives REJECTED and state `rejected` (push again once the remote accepts it). A
            /// direct push of a commit built on the workspace's base makes it the new base (its
            /// files are clean in status); after a rebase, pull to bring the upstream changes into
            /// the workspace.
            ///
            /// With `"progress": true` the answer is NDJSON: `progress` lines (at most ten a
            /// second) and then exactly one `result` or `error` line.
            ///
            /// INVALID_ARGUMENT also with `pr` for a remote that names no owner/repository;
            /// AUTH_FAILED for credentials missing or refused, by the remote or by GitHub;
            /// NOT_FOUND when no staged commit has that id; CONFLICT also when the commit is
            /// `pushed`, `conflicted` or `discarded`; REMOTE_MOVED also when the remote moved
            /// twice during the push; REMOTE_UNAVAILABLE when the remote or GitHub cannot be
            /// reached or failed.
            "gitPush": POST "/v1/git/push" => push
        )
        .reply::<PushResult>()
        .ndjson::<StreamLine<Progress, PushResult>>()
        .errors(&[
            AuthFailed,
            Rejected,
            NotFound,
            Conflict,
            RemoteMoved,
            RemoteUnavailable,
            Internal,
        ]),
        route!(
            /// Discard a staged commit
            ///
            /// Drops a staged commit that was not pushed (state becomes `discarded`). Its files in
            /// the zone it was staged from (the workspace, or a fork: its `zone`) stay as they
            /// are, unless `revert` is true: then that zone is checkpointed, and each file is put
            /// back to the commit's base (files it created are deleted), except files changed
            /// again since staging, which are left alone and listed in `kept`. NOT_FOUND when no
            /// staged commit has that id, or with `revert` when its fork was removed; CONFLICT
            /// when it was pushed or discarded already; READ_ONLY, PERMISSION_DENIED or NO_SPACE
            /// while reverting.
            "gitDiscard": POST "/v1/git/discard" => discard
        )
        .errors(&[NotFound, Conflict, ReadOnly, PermissionDenied, NoSpace]),
    ]
}

/// The route answering git's file-system monitor.
fn fsmonitor_route() -> Route {
    route!(
        /// Answer git's file-system monitor for a checkout inside a zone
        ///
        /// What `wardfs git fsmonitor-hook` (git's `core.fsmonitor`, set by `wardfs git
        /// watch`) asks: the paths of the checkout whose work tree is `dir` (or `path`)
        /// changed since `token`, relative to the work tree, from the journal (every writer:
        /// the API, MCP, the mount, pulls, restores, and changes beside wardfs, which the
        /// answer first waits for the watcher to take in, at most 2 s), and the `token` to
        /// pass next time. `everything: true` (git then looks at every file) with a `reason`
        /// when the daemon cannot vouch for the list: an empty or foreign token, one of
        /// another daemon instance (every start is a new one) or zone, one ahead of the
        /// journal or whose next rows were pruned, changes beside wardfs the watcher lost or
        /// could not watch, a zone served from a sandbox, a change to the checkout's
        /// directory or one above it, more than 50,000 paths. Paths in the checkout's `.git`
        /// are left out. Only the query parameters below are accepted; INVALID_ARGUMENT for
        /// an unknown one or for both or neither of `dir` and `path`; INVALID_PATH or
        /// OUTSIDE_ZONE for a `dir` or `path` not in a zone; NOT_FOUND for a fork that does
        /// not exist.
        "gitFsmonitor": GET "/v1/git/fsmonitor" => fsmonitor
    )
    .errors(&[InvalidPath, OutsideZone, NotFound])
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
        let gate = super::progress::Gate::default();
        let report = |p: &Progress| {
            if gate.pass(p.phase, p.done as u64, p.total as u64) {
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

/// Which repositories to look at.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "StatusRequest")]
struct StatusReq {
    /// Only the pulled repository holding this virtual path (its directory or anything in it).
    /// Default: every pulled repository.
    #[serde(default)]
    repo: Option<String>,
    /// Re-hash every file instead of only those the journal says changed since the last look.
    /// Needed after changes made directly in the backing directory, beside wardfs, which the
    /// journal cannot see.
    #[serde(default)]
    rescan: bool,
    /// The files of this fork (its name, e.g. `a` for `/forks/a`) instead of the workspace's,
    /// compared with the same base. Default: the fork `repo` lies in, else the workspace.
    #[serde(default)]
    fork: Option<String>,
}

async fn status(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<StatusReq>,
) -> Result<Json<crate::git::StatusResult>, ApiError> {
    blocking(&app, move |g| {
        g.status_at(r.fork.as_deref(), r.repo.as_deref(), r.rescan)
    })
    .await
}

async fn stage(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<StageRequest>,
) -> Result<Json<StagedCommit>, ApiError> {
    blocking(&app, move |g| g.stage(&r)).await
}

/// The conflicted file to mark as merged.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ResolveRequest")]
struct PathReq {
    /// The file's virtual path, e.g. `/workspace/demo/src/lib.rs`.
    #[schemars(length(min = 1))]
    path: String,
}

async fn resolve(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<PathReq>,
) -> Result<Json<crate::git::Change>, ApiError> {
    blocking(&app, move |g| g.resolve(&r.path)).await
}

/// Query of `GET /v1/git/staged`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only commits in this state: `staged`, `rebased`, `pushed`, `conflicted`, `rejected` or
    /// `discarded`.
    #[schemars(extend("enum" = STATES))]
    state: Option<String>,
}

/// Staged commits, newest first.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "StagedList")]
struct ListBody {
    /// Newest first; files without `diff` and `hunks`.
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

/// A request naming one staged commit.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "IdRequest")]
struct IdReq {
    /// The staged commit's id (from stage or the list).
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

/// Which staged commit to discard.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "DiscardRequest")]
struct DiscardReq {
    /// The staged commit's id.
    id: String,
    /// Also put its files in the workspace back to the commit's base (files it created are
    /// deleted). A file changed again since it was staged is left as it is and reported in
    /// `kept`.
    #[serde(default)]
    revert: bool,
}

async fn discard(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<DiscardReq>,
) -> Result<Json<crate::git::DiscardResult>, ApiError> {
    if r.revert {
        let what = format!("before discarding staged commit {} with revert", r.id);
        let id = r.id.clone();
        let staged = blocking(&app, move |g| g.show(&id, false)).await?;
        let zone = ZoneId::from_name(&staged.zone).unwrap_or(ZoneId::Workspace);
        super::checkpoint::before(&app, zone, what).await?;
    }
    blocking(&app, move |g| g.discard(&r.id, r.revert)).await
}

/// Query of `GET /v1/git/fsmonitor`: the checkout (by `dir` or by `path`) and the token.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct FsmonitorQuery {
    /// The checkout's work tree as git runs the hook in it: an absolute path through the mount
    /// (`MOUNT/workspace/app`, `MOUNT/forks/NAME/app`) or in a zone's own directory.
    dir: Option<String>,
    /// The checkout's work tree as a virtual path (`/workspace/app`), instead of `dir`.
    path: Option<String>,
    /// The token of the last answer, as git passes it; empty (or anything else that is not a
    /// token of this daemon instance for this zone) answers everything.
    #[serde(default)]
    token: String,
}

async fn fsmonitor(
    State(app): State<Arc<AppState>>,
    q: Result<Query<FsmonitorQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<FsmonitorAnswer>, ApiError> {
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    tokio::task::spawn_blocking(move || {
        let checkout = match (&q.dir, &q.path) {
            (Some(dir), None) => checkout_at(&app.zones, &app.settings.mount, dir)?,
            (None, Some(path)) => crate::core::path::parse_in_zone(path)?,
            _ => {
                return Err(FsError::invalid(
                    "dir",
                    "give the checkout's `dir` (a path on this machine) or its `path` (a \
                     virtual path), one of them",
                ))
            }
        };
        app.fsmonitor.answer(&app.zones, &checkout, &q.token)
    })
    .await
    .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))?
    .map(Json)
    .map_err(ApiError::Fs)
}
