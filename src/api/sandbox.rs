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
use axum::Json;
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use super::openapi::{route, Route, StreamLine};
use super::AppState;
use crate::core::ErrorCode::{self, *};
use crate::core::ZoneId;
use crate::sandbox::mirror::{MirrorProgress, ProgressFn, PullSummary, PushSummary};
use crate::sandbox::registry::{AddRequest, MirrorRequest};
use crate::sandbox::{
    CreateRequest, DestroyRequest, Registry, SandboxError, SandboxInfo, SnapshotInfo,
};

/// What a call reaching a sandbox can answer: no such sandbox (or the provider lost it), its
/// token refused or unset, the sandbox or its provider unreachable.
const REACH: &[ErrorCode] = &[NotFound, AuthFailed, SandboxUnavailable];

/// What a mirror run can answer besides [`REACH`]: the zone switched off, and what the
/// sandbox's filesystem refuses.
const MIRROR: &[ErrorCode] = &[
    ZoneUnavailable,
    InvalidPath,
    PermissionDenied,
    Exists,
    IsDir,
    NotDir,
    NotEmpty,
    TooLarge,
    NoSpace,
    Internal,
];

/// What the lifecycle routes have in common.
const PROVISIONED: &str = "Only a sandbox wardfs makes itself (`provider = \"local\"` or \
                           `\"daytona\"` in the config file's `[sandboxes.NAME]`); an attached \
                           one (`sandbox-agent`) is INVALID_ARGUMENT.";

/// The sandbox and mirror routes.
pub(super) fn routes() -> Vec<Route> {
    vec![
        route!(
            /// List the sandboxes with their sessions
            ///
            /// Every sandbox of the config file and every one added with POST /v1/sandboxes/add,
            /// with its session status, last use, failed resumes and last error.
            "sandboxList": GET "/v1/sandboxes" => list
        ),
        route!(
            /// Add (or redefine) a sandbox
            ///
            /// Stores a sandbox in the state database; nothing is contacted (use POST
            /// /v1/sandboxes/check). Redefining one added before keeps its session unless the URL
            /// or token variable changed. `token_env` is the NAME of an environment variable of
            /// the daemon holding the token; the token itself never travels through the API, and
            /// it is sent only to this sandbox's URL. Only a variable listed in the config's
            /// `api.sandbox_token_envs` (none by default) may be named here; plain http goes only
            /// to loopback or `api.sandbox_http_hosts`. INVALID_ARGUMENT names the field breaking
            /// its rule, or says the sandbox is defined in the config file.
            "sandboxAdd": POST "/v1/sandboxes/add" => add
        ),
        route!(
            /// Remove a sandbox added at run time
            ///
            /// Forgets a sandbox added with POST /v1/sandboxes/add (its mirror manifests are
            /// kept). NOT_FOUND when there is no such sandbox; INVALID_ARGUMENT when it is defined
            /// in the config file.
            "sandboxRemove": POST "/v1/sandboxes/remove" => remove
        )
        .errors(&[NotFound]),
        route!(
            /// Health-check (attach) a sandbox now
            ///
            /// Attaches the sandbox: a health check, retried with a doubling backoff while the
            /// server is unreachable (a provisioned sandbox is resumed, or created, first). The
            /// session records the outcome. AUTH_FAILED (token refused or its variable unset) is
            /// never retried; SANDBOX_UNAVAILABLE after the retries, or when it was destroyed.
            "sandboxCheck": POST "/v1/sandboxes/check" => check
        )
        .errors(REACH),
        route!(
            /// Create a provisioned sandbox now
            ///
            /// Makes the sandbox now instead of on its first use (building its snapshot and volume
            /// when the config names them), health-checks it and attaches it; status `active`.
            /// `provider`, when given, must match the config's; `snapshot` and `volume` replace
            /// the config's for this create. A failed create leaves nothing behind and the status
            /// `error` with the reason. INVALID_ARGUMENT also for a provider key breaking its
            /// rule, named as `sandboxes.NAME.KEY`; NOT_FOUND also for no such snapshot; CONFLICT
            /// when it already has a sandbox (resume or destroy it); AUTH_FAILED when the provider
            /// refused its key; SANDBOX_UNAVAILABLE when the provider is down. Runs under the
            /// sandbox's lock, so it never interleaves with a mirror run or another lifecycle
            /// call.
            "sandboxCreate": POST "/v1/sandboxes/create" => create
        )
        .errors(REACH)
        .errors(&[Conflict])
        .describe(PROVISIONED),
        route!(
            /// Pause a provisioned sandbox
            ///
            /// Freezes (local) or stops (daytona) the sandbox; its files stay. Status `paused`
            /// with `paused_at`; the next use resumes it, and the cleanup loop destroys it once
            /// paused for its `paused_ttl_minutes`. CONFLICT when it has no sandbox to pause;
            /// SANDBOX_UNAVAILABLE when its provider no longer has it (the status is then
            /// `destroyed`). Runs under the sandbox's lock.
            "sandboxPause": POST "/v1/sandboxes/pause" => pause
        )
        .errors(REACH)
        .errors(&[Conflict])
        .describe(PROVISIONED),
        route!(
            /// Resume a provisioned sandbox
            ///
            /// Resumes the sandbox (or creates it, when it has none or its provider no longer has
            /// it), health-checks it and attaches it with a fresh handle; status `active`. A
            /// provider that is down leaves it `paused` (SANDBOX_UNAVAILABLE). Runs under the
            /// sandbox's lock.
            "sandboxResume": POST "/v1/sandboxes/resume" => resume
        )
        .errors(REACH)
        .describe(PROVISIONED),
        route!(
            /// Destroy a provisioned sandbox
            ///
            /// Destroys the sandbox and, unless `keep_volume`, the volume made for it (a volume
            /// named in the config is always kept). The session stays with status `destroyed`;
            /// the next use creates a new sandbox (and the next mirror push sends everything).
            /// Destroying one that is already gone succeeds. Runs under the sandbox's lock.
            "sandboxDestroy": POST "/v1/sandboxes/destroy" => destroy
        )
        .errors(REACH)
        .describe(PROVISIONED),
        route!(
            /// Build the snapshot of a provisioned sandbox
            ///
            /// Builds (or finds: an unchanged spec keeps its id) the snapshot of the sandbox's
            /// `snapshot_base` and `snapshot_setup`, and returns its id; the sandbox's next create
            /// starts from it. INVALID_ARGUMENT also when the config has no `snapshot_base` (named
            /// as `sandboxes.NAME.snapshot_base`) or a setup command failed. Runs under the
            /// sandbox's lock.
            "sandboxSnapshot": POST "/v1/sandboxes/snapshot" => snapshot
        )
        .errors(REACH)
        .describe(PROVISIONED),
        route!(
            /// Push a zone to a sandbox
            ///
            /// Sends what changed in the zone since the last push to the remote directory (tar
            /// batches; deletes explicitly; renames as renames). The manifest per (zone, sandbox,
            /// remote directory) is never ahead of the remote. A path changed in the sandbox too
            /// is a conflict: reported, left alone. INVALID_ARGUMENT also for a bad `zone` or `to`,
            /// or `from` (a pull's); INTERNAL when the sandbox failed an operation.
            ///
            /// With `"progress": true` the answer is NDJSON: `progress` lines (phase `attach`,
            /// `scan`, then `send` after every batch) naming the sandbox, then exactly one
            /// `result` or `error` line.
            "mirrorPush": POST "/v1/mirror/push" => push
        )
        .reply::<PushSummary>()
        .ndjson::<StreamLine<SandboxProgress, PushSummary>>()
        .errors(REACH)
        .errors(MIRROR),
        route!(
            /// Pull what a sandbox changed into a zone
            ///
            /// Finds remote changes since the last push or pull by fingerprint, confirms them by
            /// hash, downloads only those and writes them atomically. A local zone is checkpointed
            /// first (POST /v1/checkpoints/restore undoes the pull). A path changed on both sides
            /// is a conflict: the sandbox's copy is saved beside the local one as
            /// `NAME.sandbox-<sandbox>`. READ_ONLY for a read-only zone; INVALID_ARGUMENT also for
            /// a bad `zone` or `from`, or `to` or `full_hash` (a push's); INTERNAL when the
            /// sandbox failed an operation.
            ///
            /// With `"progress": true` the answer is NDJSON: `progress` lines (phase `attach`,
            /// `scan`, then `downloaded` after each download and `receive` after every file
            /// written; a pull's totals are 0) naming the sandbox, then exactly one `result` or
            /// `error` line.
            "mirrorPull": POST "/v1/mirror/pull" => pull
        )
        .reply::<PullSummary>()
        .ndjson::<StreamLine<SandboxProgress, PullSummary>>()
        .errors(REACH)
        .errors(MIRROR)
        .errors(&[ReadOnly]),
    ]
}

/// How far a mirror push or pull has got, and of which sandbox.
// Describes the progress lines `run` writes as JSON values; never built itself.
#[allow(dead_code)]
#[derive(schemars::JsonSchema)]
struct SandboxProgress {
    #[serde(flatten)]
    progress: MirrorProgress,
    /// The sandbox's name.
    sandbox: String,
}

/// The sandboxes.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "SandboxList")]
struct ListBody {
    /// Every sandbox of the config file and every one added at run time.
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

/// A request naming one sandbox.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "SandboxNameRequest")]
struct NameReq {
    /// The sandbox's name.
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
    let gate = super::progress::Gate::default();
    let report = ProgressFn(Arc::new(move |p: &MirrorProgress| {
        if !gate.pass(p.phase, p.files_done, p.files_total) {
            return;
        }
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
