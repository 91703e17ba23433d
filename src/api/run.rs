//! `GET /v1/runs`: the recent runs. `POST /v1/run`: a command run in a sandbox with the workspace in step, streamed as NDJSON
//! (see [`crate::sandbox::run`] for what a run does and its bounds).
//!
//! The answer waits for the command to start: a run refused before that (a bad argument, an
//! unlisted variable, another run in the sandbox, the sandbox unreachable) is a plain JSON
//! error with its HTTP status. Then the body is `application/x-ndjson`: `started`, `stdout` and
//! `stderr` chunks as the command prints them, `synced` once what it changed is pulled back,
//! and last `exited` (or `error`). Both channels between the run and the socket are small and
//! bounded: a slow client slows the run's polling, it never grows the daemon. A client that
//! goes away stops the remote process (what it changed until then is still pulled back).

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tokio::sync::mpsc;

use super::body::JsonBody;
use super::error::{ApiError, StreamError};
use super::openapi::{route, Route};
use super::AppState;
use crate::core::ErrorCode::*;
use crate::sandbox::run::{RunEvent, RunRequest, RunResult};
use crate::sandbox::SandboxError;
use crate::state::RunRow;

/// Events waiting for the client, at most (each at most one poll's chunk).
const QUEUE: usize = 16;
/// How long the answer stays silent at most: then a `heartbeat` line is sent, so that a client
/// gone away (Ctrl-C) is noticed by the failed write even while the command prints nothing.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(500);

/// One line of `POST /v1/run`'s answer. Describes the lines; never built itself.
#[allow(dead_code)]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
enum RunLine {
    /// `started`, `stdout`, `stderr`, `synced`.
    Event(RunEvent),
    /// The last line of a run that ended.
    Exited(ExitedLine),
    /// Sent after 500 ms without another line; to be ignored.
    Heartbeat(HeartbeatLine),
    /// The last line of a run that failed after it started (the sandbox lost, the pull
    /// refused).
    Error(ErrorLine),
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
}

/// The recent runs.
#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "RunList")]
struct RunsBody {
    /// Newest first.
    runs: Vec<RunRow>,
}

async fn runs(
    State(app): State<Arc<AppState>>,
    q: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<RunsBody>, ApiError> {
    let Query(q) = q.map_err(|e| {
        ApiError::Sandbox(SandboxError::Invalid {
            key: "query".into(),
            rule: e.body_text(),
        })
    })?;
    let limit = q.limit.unwrap_or(20).clamp(1, 1000);
    Ok(Json(RunsBody {
        runs: app.sandboxes.runs(q.sandbox.as_deref(), limit)?,
    }))
}

/// The run routes.
pub(super) fn routes() -> Vec<Route> {
    vec![
        route!(
            /// List recent runs in sandboxes
            ///
            /// The newest runs (of `sandbox` when given; the newest 1,000 are kept), newest first:
            /// the command, its directory, how it ended (exit code, `timed_out`, `cancelled`),
            /// how long it ran, the bytes of its output (not the output) and the workspace paths
            /// it changed (the first 1,000; `changed_total` counts them all).
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
            /// it changed as the detail), the files the pull changes as usual (via `mirror`).
            ///
            /// The answer is NDJSON once the command started: `{"event":"started","run_id",…}`,
            /// `stdout`/`stderr` lines with `data` as it prints it (polled: within 50 ms; a
        /// `heartbeat` line, to be ignored, after 500 ms without another), `synced`
            /// with the changed paths, then `exited` (exit code, duration, byte counts, the last
            /// `limits.run_output_bytes` of each stream, changed paths, conflicts) or `error`. A
            /// refusal before the start is a plain error: INVALID_ARGUMENT for an empty command, a
            /// `cwd` climbing out, a `timeout_secs` out of range, or an `env` variable that the
            /// sandbox's `run_env` does not list or the daemon does not have (named; its value
            /// never appears); CONFLICT while another run holds the sandbox. The command is killed
            /// at its deadline (`timeout_secs`, default `limits.run_timeout_secs`: `timed_out`) and
            /// when the client goes away (`cancelled`).
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
    ]
}

fn line<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default() + "\n"
}

async fn run(State(app): State<Arc<AppState>>, JsonBody(req): JsonBody<RunRequest>) -> Response {
    let reg = app.sandboxes.clone();
    let (events_tx, mut events) = mpsc::channel::<RunEvent>(QUEUE);
    let mut task = tokio::spawn(async move { reg.run(&req, events_tx).await });
    let Some(first) = events.recv().await else {
        // Ended before the command started: a plain error (or, never, a result).
        return match (&mut task).await {
            Ok(Ok(r)) => axum::Json(r).into_response(),
            Ok(Err(e)) => ApiError::Sandbox(e).into_response(),
            Err(e) => ApiError::Sandbox(SandboxError::Invalid {
                key: "run".into(),
                rule: format!("the run's task failed: {e}"),
            })
            .into_response(),
        };
    };
    let (lines_tx, mut lines) = mpsc::channel::<String>(QUEUE);
    tokio::spawn(async move {
        let mut next = Some(line(&first));
        while let Some(text) = next {
            if lines_tx.send(text).await.is_err() {
                // The client is gone: dropping `events` makes the run kill the command.
                break;
            }
            next = match tokio::time::timeout(HEARTBEAT, events.recv()).await {
                Ok(ev) => ev.map(|ev| line(&ev)),
                // A silent command: a line the client ignores, whose failed write tells that
                // the client is gone.
                Err(_) => Some(line(&HeartbeatLine { event: "heartbeat" })),
            };
        }
        drop(events);
        let last = match task.await {
            Ok(Ok(result)) => line(&ExitedLine {
                event: "exited",
                result,
            }),
            Ok(Err(e)) => line(&ErrorLine {
                event: "error",
                error: ApiError::Sandbox(e).body(),
            }),
            Err(e) => line(&serde_json::json!({
                "event": "error",
                "error": {"code": "INTERNAL", "message": format!("the run's task failed: {e}"), "path": null},
            })),
        };
        let _ = lines_tx.send(last).await;
    });
    let body = futures_util::stream::poll_fn(move |cx| {
        lines
            .poll_recv(cx)
            .map(|o| o.map(|s| Ok::<_, std::convert::Infallible>(bytes::Bytes::from(s))))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}
