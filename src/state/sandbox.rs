//! Sandbox sessions: per sandbox name its definition and the state of its session.
//!
//! A `sandboxes` row holds how to reach the sandbox (provider, URL, the *name* of the token's
//! environment variable — never a token —, remote root, mode, timings), where the definition
//! came from (`config`: merged in from the config file at start; `added`: `wardfs sandbox add`)
//! and the session: `status` (`creating, active, resuming, paused, error, destroyed`),
//! `last_accessed_at`, `resume_fail_count` and `last_error`. A sandbox wardfs makes itself
//! (provider `local` or `daytona`) also keeps what its provider calls it (`provider_id`), the
//! volume and snapshot it was made with, when it was paused (`paused_at`) and how long a paused
//! one is kept (`paused_ttl_s`) — never its token, which lives in the daemon's memory only (a
//! restarted daemon gets a fresh one by resuming). Times come from the caller's clock; nothing
//! in here reads "now".

use rusqlite::{params, OptionalExtension};

use super::{Db, StateError};

/// The table (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION: &str = "CREATE TABLE sandboxes (
        name TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        url TEXT NOT NULL,
        token_env TEXT,
        root TEXT NOT NULL,
        mode TEXT NOT NULL,
        idle_ttl_s INTEGER NOT NULL,
        retries INTEGER NOT NULL,
        retry_backoff_ms INTEGER NOT NULL,
        request_timeout_s INTEGER NOT NULL,
        origin TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_accessed_at INTEGER,
        resume_fail_count INTEGER NOT NULL DEFAULT 0,
        last_error TEXT
    );";

/// The columns of provisioned sandboxes (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION_PROVISION: &str = "ALTER TABLE sandboxes ADD COLUMN provider_id TEXT;
    ALTER TABLE sandboxes ADD COLUMN volume TEXT;
    ALTER TABLE sandboxes ADD COLUMN snapshot TEXT;
    ALTER TABLE sandboxes ADD COLUMN paused_at INTEGER;
    ALTER TABLE sandboxes ADD COLUMN paused_ttl_s INTEGER NOT NULL DEFAULT 0;";

/// One sandbox: its definition and its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRow {
    pub name: String,
    pub provider: String,
    pub url: String,
    /// The environment variable holding the token.
    pub token_env: Option<String>,
    pub root: String,
    /// `lazy` or `warm`.
    pub mode: String,
    pub idle_ttl_s: u64,
    pub retries: u32,
    pub retry_backoff_ms: u64,
    pub request_timeout_s: u64,
    /// `config` or `added`.
    pub origin: String,
    /// `creating, active, resuming, paused, error, destroyed`.
    pub status: String,
    pub created_at: i64,
    pub last_accessed_at: Option<i64>,
    pub resume_fail_count: u32,
    pub last_error: Option<String>,
    /// Provisioned: the provider's id of the sandbox it runs now (none before the first create
    /// and after a destroy).
    pub provider_id: Option<String>,
    /// Provisioned: the volume id it was made with.
    pub volume: Option<String>,
    /// Provisioned: the snapshot id it was made from.
    pub snapshot: Option<String>,
    /// Provisioned: when it was last paused (cleared when it runs again).
    pub paused_at: Option<i64>,
    /// Provisioned: seconds a paused sandbox is kept before it is destroyed (0: forever).
    pub paused_ttl_s: u64,
}

const COLUMNS: &str = "name, provider, url, token_env, root, mode, idle_ttl_s, retries, \
    retry_backoff_ms, request_timeout_s, origin, status, created_at, last_accessed_at, \
    resume_fail_count, last_error, provider_id, volume, snapshot, paused_at, paused_ttl_s";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SandboxRow> {
    Ok(SandboxRow {
        name: r.get(0)?,
        provider: r.get(1)?,
        url: r.get(2)?,
        token_env: r.get(3)?,
        root: r.get(4)?,
        mode: r.get(5)?,
        idle_ttl_s: r.get::<_, i64>(6)? as u64,
        retries: r.get::<_, i64>(7)? as u32,
        retry_backoff_ms: r.get::<_, i64>(8)? as u64,
        request_timeout_s: r.get::<_, i64>(9)? as u64,
        origin: r.get(10)?,
        status: r.get(11)?,
        created_at: r.get(12)?,
        last_accessed_at: r.get(13)?,
        resume_fail_count: r.get::<_, i64>(14)? as u32,
        last_error: r.get(15)?,
        provider_id: r.get(16)?,
        volume: r.get(17)?,
        snapshot: r.get(18)?,
        paused_at: r.get(19)?,
        paused_ttl_s: r.get::<_, i64>(20)? as u64,
    })
}

impl Db {
    /// Inserts or replaces the definition of `def.name` (origin included), keeping the session
    /// of an existing row (a changed URL, token variable or provider resets it to `creating`,
    /// with no error; what a provisioned sandbox runs on stays, for the start-up reconcile).
    pub fn put_sandbox(&self, def: &SandboxRow) -> Result<(), StateError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO sandboxes (name, provider, url, token_env, root, mode, idle_ttl_s, retries,
                retry_backoff_ms, request_timeout_s, origin, status, created_at, last_accessed_at,
                resume_fail_count, last_error, provider_id, volume, snapshot, paused_at,
                paused_ttl_s)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20, ?21)
             ON CONFLICT(name) DO UPDATE SET
                status = CASE WHEN url IS excluded.url AND token_env IS excluded.token_env
                    AND provider IS excluded.provider THEN status ELSE excluded.status END,
                resume_fail_count = CASE WHEN url IS excluded.url AND token_env IS excluded.token_env
                    AND provider IS excluded.provider THEN resume_fail_count ELSE 0 END,
                last_error = CASE WHEN url IS excluded.url AND token_env IS excluded.token_env
                    AND provider IS excluded.provider THEN last_error ELSE NULL END,
                paused_ttl_s = excluded.paused_ttl_s,
                provider = excluded.provider, url = excluded.url, token_env = excluded.token_env,
                root = excluded.root, mode = excluded.mode, idle_ttl_s = excluded.idle_ttl_s,
                retries = excluded.retries, retry_backoff_ms = excluded.retry_backoff_ms,
                request_timeout_s = excluded.request_timeout_s, origin = excluded.origin",
            params![
                def.name,
                def.provider,
                def.url,
                def.token_env,
                def.root,
                def.mode,
                def.idle_ttl_s as i64,
                def.retries as i64,
                def.retry_backoff_ms as i64,
                def.request_timeout_s as i64,
                def.origin,
                def.status,
                def.created_at,
                def.last_accessed_at,
                def.resume_fail_count as i64,
                def.last_error,
                def.provider_id,
                def.volume,
                def.snapshot,
                def.paused_at,
                def.paused_ttl_s as i64,
            ],
        )?;
        Ok(())
    }

    /// Returns every sandbox, by name.
    pub fn sandboxes(&self) -> Result<Vec<SandboxRow>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM sandboxes ORDER BY name"))?;
        let rows = stmt.query_map([], row)?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Returns the sandbox `name`.
    pub fn sandbox(&self, name: &str) -> Result<Option<SandboxRow>, StateError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM sandboxes WHERE name = ?1"),
                [name],
                row,
            )
            .optional()?)
    }

    /// Records a session's status; `failed`: `Some(true)` counts a failed resume, `Some(false)`
    /// resets the count, `None` keeps it. `error` replaces the last error (kept when `None`,
    /// cleared when the status is `active`).
    pub fn set_sandbox_status(
        &self,
        name: &str,
        status: &str,
        error: Option<&str>,
        failed: Option<bool>,
        at_ms: Option<i64>,
    ) -> Result<(), StateError> {
        let conn = self.lock();
        conn.execute(
            "UPDATE sandboxes SET status = ?2,
                last_error = CASE WHEN ?3 IS NOT NULL THEN ?3 WHEN ?2 = 'active' THEN NULL
                    ELSE last_error END,
                resume_fail_count = CASE WHEN ?4 IS NULL THEN resume_fail_count
                    WHEN ?4 THEN resume_fail_count + 1 ELSE 0 END,
                last_accessed_at = COALESCE(?5, last_accessed_at)
             WHERE name = ?1",
            params![name, status, error, failed, at_ms],
        )?;
        Ok(())
    }

    /// Records a use of the sandbox `name` at `at_ms` (its status and counts unchanged).
    pub fn touch_sandbox(&self, name: &str, at_ms: i64) -> Result<(), StateError> {
        let conn = self.lock();
        conn.execute(
            "UPDATE sandboxes SET last_accessed_at = MAX(COALESCE(last_accessed_at, 0), ?2)
             WHERE name = ?1",
            params![name, at_ms],
        )?;
        Ok(())
    }

    /// Records what a provisioned sandbox runs on (all `None` after a destroy).
    pub fn set_sandbox_provision(
        &self,
        name: &str,
        provider_id: Option<&str>,
        volume: Option<&str>,
        snapshot: Option<&str>,
    ) -> Result<(), StateError> {
        let conn = self.lock();
        conn.execute(
            "UPDATE sandboxes SET provider_id = ?2, volume = ?3, snapshot = ?4 WHERE name = ?1",
            params![name, provider_id, volume, snapshot],
        )?;
        Ok(())
    }

    /// Records when a provisioned sandbox was paused (`None`: it runs, or is gone).
    pub fn set_sandbox_paused_at(&self, name: &str, at_ms: Option<i64>) -> Result<(), StateError> {
        let conn = self.lock();
        conn.execute(
            "UPDATE sandboxes SET paused_at = ?2 WHERE name = ?1",
            params![name, at_ms],
        )?;
        Ok(())
    }

    /// Removes the sandbox `name`; false when there was none. Its mirrors' manifests stay.
    pub fn remove_sandbox(&self, name: &str) -> Result<bool, StateError> {
        let conn = self.lock();
        Ok(conn.execute("DELETE FROM sandboxes WHERE name = ?1", [name])? > 0)
    }

    /// Removes the rows that came from the config file but are no longer in it.
    pub fn drop_config_sandboxes_except(&self, keep: &[&str]) -> Result<Vec<String>, StateError> {
        let stale: Vec<String> = self
            .sandboxes()?
            .into_iter()
            .filter(|r| r.origin == "config" && !keep.contains(&r.name.as_str()))
            .map(|r| r.name)
            .collect();
        for name in &stale {
            self.remove_sandbox(name)?;
        }
        Ok(stale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str, url: &str) -> SandboxRow {
        SandboxRow {
            name: name.into(),
            provider: "sandbox-agent".into(),
            url: url.into(),
            token_env: Some("T".into()),
            root: "/w".into(),
            mode: "lazy".into(),
            idle_ttl_s: 60,
            retries: 1,
            retry_backoff_ms: 10,
            request_timeout_s: 5,
            origin: "added".into(),
            status: "creating".into(),
            created_at: 1,
            last_accessed_at: None,
            resume_fail_count: 0,
            last_error: None,
            provider_id: None,
            volume: None,
            snapshot: None,
            paused_at: None,
            paused_ttl_s: 0,
        }
    }

    #[test]
    fn sessions_keep_their_state_until_the_url_changes() {
        let db = Db::open_in_memory().unwrap();
        db.put_sandbox(&def("dev", "http://a")).unwrap();
        db.set_sandbox_status("dev", "error", Some("down"), Some(true), Some(5))
            .unwrap();
        let r = db.sandbox("dev").unwrap().unwrap();
        assert_eq!(
            (
                r.status.as_str(),
                r.resume_fail_count,
                r.last_error.as_deref()
            ),
            ("error", 1, Some("down"))
        );
        assert_eq!(r.last_accessed_at, Some(5));
        db.put_sandbox(&def("dev", "http://a")).unwrap();
        assert_eq!(db.sandbox("dev").unwrap().unwrap().status, "error");
        db.put_sandbox(&def("dev", "http://b")).unwrap();
        let r = db.sandbox("dev").unwrap().unwrap();
        assert_eq!((r.status.as_str(), r.resume_fail_count), ("creating", 0));
        db.set_sandbox_status("dev", "active", None, Some(false), Some(9))
            .unwrap();
        assert_eq!(db.sandbox("dev").unwrap().unwrap().last_error, None);
        assert!(db.remove_sandbox("dev").unwrap());
        assert!(!db.remove_sandbox("dev").unwrap());
    }
}
