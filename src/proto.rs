//! The daemon's answers that its clients print as they come (`GET /v1/status`, `POST /v1/gc`):
//! one definition, serialized by `api` and decoded by `cli` (or anyone who talks to the daemon
//! through `client`), so that the command line needs nothing of the server to read them. Types
//! only: what they mean is documented on each field, how they are made is the API's business.

use serde::{Deserialize, Serialize};

/// The directory to open in an editor, in `/v1/status`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EditorDir {
    /// The mounted workspace (`<mount>/workspace`); without a mount, the workspace's own
    /// directory.
    pub dir: String,
    /// True when a watcher on `dir` (inotify: editors, build tools, test runners) hears every
    /// change, whoever makes it (the API, MCP, pulls, restores, merges, programs beside the
    /// mount; see docs/architecture.md); false for a workspace served from a sandbox, whose
    /// watchers hear only the changes made through the mount.
    pub every_change: bool,
}

/// One zone in `/v1/status`, as configured and served.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ZoneStatus {
    /// `cache` or `workspace`.
    pub name: String,
    /// True when the zone is served; false when disabled by configuration (requests to it fail
    /// with ZONE_UNAVAILABLE).
    pub available: bool,
    /// The host directory backing the zone (`<sandbox>:<directory>` for a zone served from a
    /// sandbox). Present only when `available` is true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Why the zone is disabled. Present only when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// True when the zone refuses changes (READ_ONLY).
    pub read_only: bool,
}

/// The body of `/v1/status`: the daemon's state.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Status {
    /// The daemon's version.
    pub version: String,
    /// The daemon's process id.
    pub pid: u32,
    /// Seconds since the daemon started serving.
    pub uptime_s: u64,
    /// Path of the config file in use, or `(embedded default)`.
    pub config: String,
    /// Path of the API's Unix socket.
    pub socket: String,
    /// Where the FUSE filesystem is (or would be) mounted.
    pub mount: String,
    /// Whether this daemon mounted the zones at `mount` with FUSE (false when started with
    /// `serve --no-mount`).
    pub mounted: bool,
    /// The directory to open in an editor; absent when the workspace is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub editor: Option<EditorDir>,
    /// Path of the SQLite state database (journal).
    pub state_db: String,
    /// Number of rows in the change journal (see GET /v1/log).
    pub journal_rows: u64,
    /// Staged commits waiting for a human: in state staged, rebased, conflicted or rejected
    /// (see GET /v1/git/staged).
    pub staged_awaiting_review: u64,
    /// Both zones, `cache` first.
    pub zones: Vec<ZoneStatus>,
    /// The named sandboxes (from config and `sandbox add`) and their session status
    /// (`GET /v1/sandboxes` has the details).
    #[serde(default)]
    pub sandboxes: Vec<StatusSandbox>,
    /// Files written through the mount in a remote zone that the sandbox has not taken yet:
    /// their content is queued on disk under the state dir (`remote-spool/<zone>/pending/`) and
    /// sent again with backoff (0.5 s doubling to 60 s), also after a restart. Until then
    /// `fsync` and `close` of a writable descriptor of the file fail with EIO. Empty when
    /// nothing is queued.
    #[serde(default)]
    pub pending_write_backs: Vec<crate::core::sandbox_zone::PendingWriteBack>,
}

/// One sandbox in `/v1/status`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusSandbox {
    /// The sandbox's name.
    pub name: String,
    /// Its session's status: `creating`, `active`, `resuming`, `paused`, `error` or
    /// `destroyed`.
    pub status: String,
    /// Why the last attach or check failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What one garbage collection pass removed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "GcResult")]
pub struct GcReport {
    /// The retention in force (`[journal] keep_days`; 0 keeps rows forever).
    pub keep_days: u32,
    /// Rows older than this time (ms since the epoch) were deleted; `null` when kept forever.
    pub before_ms: Option<i64>,
    /// Journal rows deleted.
    pub journal_rows: u64,
    /// Ids of discarded staged commits whose rows were deleted.
    pub staged_commits: Vec<String>,
    /// Staged refs deleted, as `<mirror path>:<ref>`.
    pub refs: Vec<String>,
    /// Leftover temporary files deleted, as virtual paths.
    pub temp_files: Vec<String>,
    /// Checkpoints deleted (past `[checkpoints] keep` or `keep_days`).
    pub checkpoints: u64,
    /// Objects deleted from the checkpoint store (held by no kept checkpoint).
    pub checkpoint_objects: u64,
}
