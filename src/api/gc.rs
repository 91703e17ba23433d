//! `POST /v1/gc`: the daemon's garbage collection, also run on a schedule by `wardfs serve`.
//!
//! One pass deletes journal rows older than `[journal] keep_days`, the rows of discarded staged
//! commits older than that, staged refs no live commit owns, and `.wardfs-tmp-*` files older
//! than an hour, or left by a process that is gone (a killed daemon), in the zones. "Now" is the core's clock, read once per pass.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::body::JsonBody;
use super::error::ApiError;
use super::openapi::{route, Route};
use super::AppState;
use crate::core::{retention, FsError};
use crate::proto::GcReport;

/// The body of `POST /v1/gc`: no fields, `{}`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "GcRequest")]
struct GcReq {}

pub(super) fn routes() -> Vec<Route> {
    vec![route!(
        /// Collect garbage now
        ///
        /// Deletes journal rows older than `[journal] keep_days` (0 keeps them forever), the rows
        /// of discarded staged commits last changed before that, `refs/wardfs/staged/*` refs in
        /// the mirrors that no live staged commit owns, `.wardfs-tmp-*` files older than an hour
        /// in the zones (left by a write interrupted between writing and renaming; at once when
        /// the process that wrote one is gone, so the pass at start-up clears what a killed
        /// daemon left), the checkpoints past `[checkpoints] keep` or `keep_days`, and the objects
        /// no kept checkpoint holds. The daemon also does this at start and every hour. "Now" is
        /// the daemon's clock. Returns what was removed.
        "gc": POST "/v1/gc" => run_route
    )]
}

async fn run_route(
    State(app): State<Arc<AppState>>,
    JsonBody(_): JsonBody<GcReq>,
) -> Result<Json<GcReport>, ApiError> {
    let report = tokio::task::spawn_blocking(move || collect(&app))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))??;
    Ok(Json(report))
}

/// Runs one garbage collection pass (blocking: call it on the blocking pool).
pub fn collect(app: &AppState) -> Result<GcReport, ApiError> {
    let keep_days = app.settings.journal.keep_days;
    let now = app.zones.now_ms();
    let before_ms = retention::cutoff_ms(now, keep_days);
    let journal_rows = retention::prune_journal(&app.zones, now, keep_days)
        .map_err(|e| FsError::Internal(e.to_string()))?;
    let git = app.git.gc(before_ms)?;
    let temp_files = retention::sweep_temp_files(&app.zones, now);
    let (checkpoints, checkpoint_objects) = app.checkpoints.prune(now)?;
    Ok(GcReport {
        keep_days,
        before_ms,
        journal_rows,
        staged_commits: git.staged_commits,
        refs: git.refs,
        temp_files,
        checkpoints,
        checkpoint_objects,
    })
}

impl GcReport {
    /// Returns whether the pass removed nothing.
    pub fn is_empty(&self) -> bool {
        self.journal_rows == 0
            && self.staged_commits.is_empty()
            && self.refs.is_empty()
            && self.temp_files.is_empty()
            && self.checkpoints == 0
            && self.checkpoint_objects == 0
    }
}
