//! Runs in sandboxes (`wardfs run --sandbox`, `POST /v1/run`): what ran, how it ended, what it
//! changed and the last [`RUN_OUTPUT_KEPT`] bytes of each of its streams, for `wardfs runs`, `GET
//! /v1/runs` and the review page. The newest [`KEEP`] are kept. Never the values of the
//! variables a run passed in: they are masked in its output before it reaches here
//! (`sandbox::run::output::Masker`).

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{Db, StateError};

/// How many runs are kept (older ones are dropped as new ones are recorded).
pub const KEEP: i64 = 1000;
/// How many changed paths a run's row names (`changed_total` counts them all).
const CHANGED_NAMED: usize = 1000;
/// Bytes of each of a run's streams kept with its row (the last ones).
pub const RUN_OUTPUT_KEPT: usize = 16 * 1024;

/// The table (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION: &str = "CREATE TABLE runs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        sandbox TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        command TEXT NOT NULL,
        cwd TEXT NOT NULL,
        exit_code INTEGER,
        timed_out INTEGER NOT NULL,
        cancelled INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        stdout_bytes INTEGER NOT NULL,
        stderr_bytes INTEGER NOT NULL,
        changed TEXT NOT NULL,
        changed_total INTEGER NOT NULL
    );
    CREATE INDEX runs_sandbox ON runs(sandbox, seq);";

/// The last bytes of each stream (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION_OUTPUT: &str = "ALTER TABLE runs ADD COLUMN stdout_tail TEXT;
    ALTER TABLE runs ADD COLUMN stderr_tail TEXT;";

/// One run, as `GET /v1/runs` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct RunRow {
    /// The run's id.
    pub id: String,
    /// The sandbox it ran in.
    pub sandbox: String,
    /// When it started, milliseconds since the epoch.
    pub started_at: i64,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Its directory, relative to the mirrored one (empty: that directory).
    pub cwd: String,
    /// Its exit code; null when it was killed.
    pub exit_code: Option<i32>,
    /// Killed at its deadline.
    pub timed_out: bool,
    /// Killed because its client went away.
    pub cancelled: bool,
    /// How long the command ran, in milliseconds.
    pub duration_ms: u64,
    /// Bytes it wrote to stdout and stderr.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// The workspace paths the pull after it changed (the first 1,000).
    pub changed: Vec<String>,
    /// How many paths it changed.
    pub changed_total: u64,
    /// The last 16 KiB ([`RUN_OUTPUT_KEPT`]) of its stdout and stderr (the values of the variables
    /// it was given masked as `***`; the recorder cuts them); only when asked for
    /// (`output=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_tail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
}

impl Db {
    /// Records a run, dropping the oldest past [`KEEP`].
    pub fn record_run(&self, r: &RunRow) -> Result<(), StateError> {
        let named: Vec<&String> = r.changed.iter().take(CHANGED_NAMED).collect();
        let command = serde_json::to_string(&r.command).unwrap_or_default();
        let changed = serde_json::to_string(&named).unwrap_or_default();
        let conn = self.lock();
        conn.execute(
            "INSERT INTO runs (id, sandbox, started_at, command, cwd, exit_code, timed_out, \
             cancelled, duration_ms, stdout_bytes, stderr_bytes, changed, changed_total, \
             stdout_tail, stderr_tail) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                r.id,
                r.sandbox,
                r.started_at,
                command,
                r.cwd,
                r.exit_code,
                r.timed_out,
                r.cancelled,
                r.duration_ms as i64,
                r.stdout_bytes as i64,
                r.stderr_bytes as i64,
                changed,
                r.changed_total as i64,
                r.stdout_tail,
                r.stderr_tail
            ],
        )?;
        conn.execute(
            "DELETE FROM runs WHERE seq <= (SELECT MAX(seq) FROM runs) - ?1",
            [KEEP],
        )?;
        Ok(())
    }

    /// Returns the newest `limit` runs (of `sandbox` when given), newest first; with their
    /// output when `output`.
    pub fn runs(
        &self,
        sandbox: Option<&str>,
        limit: usize,
        output: bool,
    ) -> Result<Vec<RunRow>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT id, sandbox, started_at, command, cwd, exit_code, timed_out, cancelled, \
             duration_ms, stdout_bytes, stderr_bytes, changed, changed_total, \
             CASE WHEN ?3 THEN coalesce(stdout_tail, '') END, \
             CASE WHEN ?3 THEN coalesce(stderr_tail, '') END FROM runs \
             WHERE ?1 IS NULL OR sandbox = ?1 ORDER BY seq DESC LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(params![sandbox, limit as i64, output], |row| {
                let list = |i: usize| -> rusqlite::Result<Vec<String>> {
                    let s: String = row.get(i)?;
                    Ok(serde_json::from_str(&s).unwrap_or_default())
                };
                Ok(RunRow {
                    id: row.get(0)?,
                    sandbox: row.get(1)?,
                    started_at: row.get(2)?,
                    command: list(3)?,
                    cwd: row.get(4)?,
                    exit_code: row.get(5)?,
                    timed_out: row.get(6)?,
                    cancelled: row.get(7)?,
                    duration_ms: row.get::<_, i64>(8)? as u64,
                    stdout_bytes: row.get::<_, i64>(9)? as u64,
                    stderr_bytes: row.get::<_, i64>(10)? as u64,
                    changed: list(11)?,
                    changed_total: row.get::<_, i64>(12)? as u64,
                    stdout_tail: row.get(13)?,
                    stderr_tail: row.get(14)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}
