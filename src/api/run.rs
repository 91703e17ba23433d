//! `GET /v1/runs`: the recent runs. `POST /v1/run`: a command run in a sandbox with the
//! workspace in step, streamed as NDJSON (see [`crate::sandbox::run`] for what a run does and
//! its bounds). `GET /v1/runs/{id}/events`: the same stream again, for a client that lost it.
//! `POST /v1/runs/{id}/cancel`: stops a run's command now.
//!
//! The answer waits for the command to start: a run refused before that (a bad argument, an
//! unlisted variable, another run in the sandbox, the sandbox unreachable) is a plain JSON
//! error with its HTTP status. Then the body is `application/x-ndjson`: `started`, `stdout` and
//! `stderr` chunks as the command prints them, `synced` once what it changed is pulled back,
//! and last `exited` (or `error`); every line of the run's log has its `seq`. The stream reads
//! the run's log ([`crate::sandbox::run::log`]): a slow client slows the run's polling, it
//! never grows the daemon. A client that goes away leaves the run going for
//! `limits.run_reconnect_secs`, for it to come back with the run's id and the last `seq` it
//! read; then the remote process is stopped (what it changed until then is still pulled back).

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;

use super::body::JsonBody;
use super::error::{ApiError, StreamError};
use super::openapi::{route, Route};
use super::AppState;
use crate::core::ErrorCode::*;
use crate::core::FsError;
use crate::sandbox::run::{Follower, Line, RunEnd, RunEvent, RunRequest, RunResult};
use crate::sandbox::SandboxError;
use crate::state::RunRow;

/// How long the answer stays silent at most: then a `heartbeat` line is sent, so that a client
/// gone away (Ctrl-C) is noticed by the failed write even while the command prints nothing.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(500);

/// One line of `POST /v1/run`'s answer. Describes the lines; never built itself.
#[allow(dead_code)]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
enum RunLine {
    /// `started`, `stdout`, `stderr`, `synced`.
    Event(EventLine),
    /// Lines `from` to `to` were dropped before this client read them (it came back late,
    /// past what the run's log keeps).
    Skipped(SkippedLine),
    /// The last line of a run that ended.
    Exited(ExitedLine),
    /// Sent after 500 ms without another line; to be ignored.
    Heartbeat(HeartbeatLine),
    /// The last line of a run that failed after it started (the sandbox lost, the pull
    /// refused).
    Error(ErrorLine),
}

/// An event of the run and its place in the run's log.
#[derive(Serialize, schemars::JsonSchema)]
struct EventLine {
    /// Its place in the run's log, from 1: `GET /v1/runs/{id}/events?after=SEQ` goes on after
    /// it.
    seq: u64,
    #[serde(flatten)]
    event: RunEvent,
}

/// `{"event": "skipped", "from", "to"}`.
#[derive(Serialize, schemars::JsonSchema)]
struct SkippedLine {
    /// `skipped`.
    event: &'static str,
    from: u64,
    to: u64,
}

/// `{"event": "exited", …}`: how the run ended.
#[derive(Serialize, schemars::JsonSchema)]
struct ExitedLine {
    /// `exited`.
    event: &'static str,
    #[serde(flatten)]
    result: RunResult,
}

/// `{"event": "heartbeat"}`.
#[derive(Serialize, schemars::JsonSchema)]
struct HeartbeatLine {
    /// `heartbeat`.
    event: &'static str,
}

/// `{"event": "error", "error": {…}}`.
#[derive(Serialize, schemars::JsonSchema)]
struct ErrorLine {
    /// `error`.
    event: &'static str,
    error: StreamError,
}

/// Which runs `GET /v1/runs` lists.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    /// Only this sandbox's runs. Default: every sandbox's.
    sandbox: Option<String>,
    /// Most runs to list: default 20; a value outside 1 to 1,000 is taken as the nearer bound.
    limit: Option<usize>,
    /// Add the last 16 KiB of each run's stdout and stderr (`stdout_tail`, `stderr_tail`).
    output: Option<bool>,
}

/// The recent runs.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "RunList")]
struct RunsBody {
    /// Newest first.
    runs: Vec<RunRow>,
}

/// Where `GET /v1/runs/{id}/events` starts.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// The last `seq` the client read: the answer starts after it. Default 0 (from the start).
    after: Option<u64>,
}

/// What `POST /v1/runs/{id}/cancel` did.
#[derive(Serialize, schemars::JsonSchema)]
struct CancelReply {
    /// The run's id.
    run_id: String,
    /// True when the run was still going (its command is stopped now, what it changed pulled
    /// back); false when it had ended.
    cancelled: bool,
}

async fn runs(
    State(app): State<Arc<AppState>>,
    q: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<RunsBody>, ApiError> {
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    let limit = q.limit.unwrap_or(20).clamp(1, 1000);
    Ok(Json(RunsBody {
        runs: app
            .sandboxes
            .runs(q.sandbox.as_deref(), limit, q.output.unwrap_or(false))?,
    }))
}

/// What the `{id}` of a run route is.
const ID: &str = "The run's id, as `started` and `GET /v1/runs` give it.";

/// The run routes.
pub(super) fn routes() -> Vec<Route> {
    let id_schema = || json!({ "type": "string", "maxLength": 200 });
    vec![
        route!(
            /// List recent runs in sandboxes
            ///
            /// The newest runs (of `sandbox` when given; the newest 1,000 are kept), newest first:
            /// the command, its directory, how it ended (exit code, `timed_out`, `cancelled`),
            /// how long it ran, the bytes of its output and the workspace paths it changed (the
            /// first 1,000; `changed_total` counts them all). With `output=true`, the last 16 KiB
            /// of each stream too (the values of the variables a run was given masked).
            "runList": GET "/v1/runs" => runs
        )
        .query::<RunsQuery>(),
        route!(
            /// Run a command in a sandbox, the workspace in step
            ///
            /// Makes or resumes the sandbox, pushes what changed in the workspace since the last
            /// push (unless `no_sync`), runs `command` (no shell) in the mirrored directory (or `cwd`
            /// beneath it) through sandbox-agent's process routes, and pulls back what it changed
            /// (conflicts keep both sides, as POST /v1/mirror/pull does). The run is recorded in
            /// the journal (op `sandbox-run` at its directory; the command, how it ended and what
            /// it changed as the detail), the files the pull changes with `via` `sandbox`.
            ///
            /// The answer is NDJSON once the command started: `{"event":"started","run_id",…}`,
            /// `stdout`/`stderr` lines with `data` as it prints it (polled: within 50 ms; the
            /// values of the `env` variables masked as `***`; a `heartbeat` line, to be ignored,
            /// after 500 ms without another), `synced` with the changed paths, then `exited` (exit
            /// code, duration, byte counts, the last `limits.run_output_bytes` of each stream,
            /// changed paths, conflicts) or `error`. Each line of the run's log has its `seq`. A
            /// refusal before the start is a plain error: INVALID_ARGUMENT for an empty command, a
            /// `cwd` climbing out, a `timeout_secs` out of range, or an `env` variable that the
            /// sandbox's `run_env` does not list or the daemon does not have (named; its value
            /// never appears); CONFLICT while another run holds the sandbox (unless both ask for
            /// `parallel`). The command is killed at its deadline (`timeout_secs`, default
            /// `limits.run_timeout_secs`: `timed_out`), on POST /v1/runs/{id}/cancel, and when
            /// the client went away and none came back (GET /v1/runs/{id}/events) within
            /// `limits.run_reconnect_secs` (`cancelled`).
            "run": POST "/v1/run" => run
        )
        .ndjson::<RunLine>()
        .errors(&[
            NotFound,
            AuthFailed,
            SandboxUnavailable,
            Conflict,
            ZoneUnavailable,
            Internal,
        ]),
        route!(
            /// Follow a run again
            ///
            /// The NDJSON answer of POST /v1/run for run `id`, from the line after `after` (a
            /// `seq`; default: from the start): what it printed since, then how it ended, as
            /// they come. For a client that lost its answer (a broken connection, a restart): a
            /// run with no client left waits `limits.run_reconnect_secs` for one to come back
            /// before its command is stopped. Lines dropped before they were read (the log keeps
            /// 256 KiB past what its clients read) are named by a `skipped` line. The runs going
            /// on and the last 16 ended since the daemon started are kept; another id is
            /// NOT_FOUND.
            "runEvents": GET "/v1/runs/{id}/events" => events
        )
        .param("id", ID, id_schema())
        .query::<EventsQuery>()
        .ndjson::<RunLine>()
        .errors(&[NotFound]),
        route!(
            /// Stop a run's command
            ///
            /// Kills the remote process of run `id` now (as Ctrl-C in `wardfs run` does); the
            /// run then pulls back what it changed and ends with `cancelled`. A run that had
            /// ended answers `cancelled: false`. NOT_FOUND for a run not kept (see GET
            /// /v1/runs/{id}/events).
            "runCancel": POST "/v1/runs/{id}/cancel" => cancel
        )
        .param("id", ID, id_schema())
        .errors(&[NotFound]),
    ]
}

/// Returns one line of the answer, its newline included.
fn line<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default() + "\n"
}

/// Returns a line of the run's log as the client reads it.
fn shown(l: Line) -> String {
    match l {
        Line::Event { seq, event } => line(&EventLine { seq, event }),
        Line::Skipped { from, to } => line(&SkippedLine {
            event: "skipped",
            from,
            to,
        }),
        Line::End(RunEnd::Exited(result)) => line(&ExitedLine {
            event: "exited",
            result,
        }),
        Line::End(RunEnd::Failed { code, message }) => line(&ErrorLine {
            event: "error",
            error: StreamError {
                code,
                message,
                path: None,
            },
        }),
    }
}

/// The NDJSON answer that follows a run's log to its end. When the client goes away, the body
/// (and the follower in it) is dropped: the run is left alone.
fn stream(follower: Follower) -> Response {
    let lines = futures_util::stream::unfold(follower, |mut f| async move {
        let text = match tokio::time::timeout(HEARTBEAT, f.next()).await {
            Ok(Some(l)) => shown(l),
            Ok(None) => return None,
            // A silent command: a line the client ignores, whose failed write tells that the
            // client is gone.
            Err(_) => line(&HeartbeatLine { event: "heartbeat" }),
        };
        Some((
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text)),
            f,
        ))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response()
}

async fn run(State(app): State<Arc<AppState>>, JsonBody(req): JsonBody<RunRequest>) -> Response {
    let reg = app.sandboxes.clone();
    // In a task of its own: a client gone before the command started does not stop the push
    // half-way (the run then finds nobody following, and stops after its grace).
    let started = tokio::spawn(async move { reg.start_run(req).await }).await;
    match started {
        Ok(Ok(follower)) => stream(follower),
        Ok(Err(e)) => ApiError::Sandbox(e).into_response(),
        Err(e) => {
            ApiError::Fs(FsError::Internal(format!("the run's task failed: {e}"))).into_response()
        }
    }
}

/// The kept log of run `id`, or NOT_FOUND.
fn run_log(
    app: &AppState,
    id: Result<Path<String>, PathRejection>,
) -> Result<Arc<crate::sandbox::run::RunLog>, ApiError> {
    let Path(id) = id.map_err(|e| FsError::invalid("id", e.body_text()))?;
    app.sandboxes
        .run_log(&id)
        .ok_or_else(|| ApiError::Sandbox(SandboxError::RunNotFound { id }))
}

async fn events(
    State(app): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Response {
    let after = match q {
        Ok(Query(q)) => q.after.unwrap_or(0),
        Err(e) => return ApiError::from(FsError::invalid("query", e.body_text())).into_response(),
    };
    match run_log(&app, id) {
        Ok(log) => stream(log.follow(after)),
        Err(e) => e.into_response(),
    }
}

async fn cancel(
    State(app): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<CancelReply>, ApiError> {
    let log = run_log(&app, id)?;
    Ok(Json(CancelReply {
        run_id: log.id.clone(),
        cancelled: log.cancel(),
    }))
}
