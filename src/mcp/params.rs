//! The MCP tools' inputs. Each struct is both the tool's JSON Schema (schemars reads the doc
//! comments as field descriptions) and, where the fields match, the body sent to the daemon's
//! route: optional fields left out by the model are left out of the body too, so the daemon
//! applies its own defaults and limits.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `read`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Virtual path of a UTF-8 text file, e.g. /workspace/src/main.rs
    pub path: String,
    /// 1-based number of the first line to return (default 1)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Most lines to return (default: to the end of the file)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

/// `write`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// Virtual path of the file to create or replace; missing parent directories are created
    pub path: String,
    /// The complete new contents of the file
    pub content: String,
    /// Sync to disk before answering, so the write survives a power loss (slower)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsync: Option<bool>,
}

/// `edit`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// Virtual path of the text file to edit
    pub path: String,
    /// The exact text to replace (not a regex); must occur exactly once unless replace_all
    pub old: String,
    /// The replacement text; must differ from old; may be empty to delete
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_all: Option<bool>,
}

/// `ls`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsParams {
    /// Virtual path of the directory to list (default /workspace; / lists the zones)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// What `glob` returns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GlobKind {
    File,
    Dir,
    Any,
}

/// `glob`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobParams {
    /// Glob pattern: *, ?, [abc], {a,b}, **; * never crosses /. Without / it matches file names at
    /// any depth (*.rs); with / it matches the path relative to the search directory (src/**/*.rs)
    pub pattern: String,
    /// Directory to search (default /workspace)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Honour .gitignore, .ignore and git excludes (default true)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitignore: Option<bool>,
    /// Include hidden files and directories (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<bool>,
    /// What to return: file (default), dir, or any (also symlinks)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<GlobKind>,
    /// Most paths to return (default and maximum: the daemon's limits.glob_max_results, 1000
    /// unless configured)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

/// What `grep` reports.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GrepMode {
    Content,
    Files,
    Count,
}

/// `grep`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    /// Regex in Rust regex syntax (like ripgrep), matched line by line
    pub pattern: String,
    /// File or directory to search (default /workspace)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Treat pattern as a plain string, not a regex (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub literal: Option<bool>,
    /// Case-insensitive search (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_case: Option<bool>,
    /// Globs selecting files, relative to the search directory, e.g. ["*.rs", "!target/**"]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<Vec<String>>,
    /// ripgrep file types, e.g. ["rust", "py", "md"]
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub file_type: Option<Vec<String>>,
    /// Lines of context before and after each match, 0 to 1000 (content mode; default 0)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub context: Option<u64>,
    /// Lines of context before each match (default: context)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub before: Option<u64>,
    /// Lines of context after each match (default: context)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub after: Option<u64>,
    /// content (matching lines, default), files (paths of matching files) or count (matches per
    /// file)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GrepMode>,
    /// Most results: lines in content mode, files in files and count modes (default and maximum:
    /// the daemon's limits.grep_max_results, 1000 unless configured)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// Honour .gitignore, .ignore and git excludes (default true)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitignore: Option<bool>,
    /// Search hidden files too (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<bool>,
}

/// `stat`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatParams {
    /// Virtual path to describe (a symlink itself, not its target)
    pub path: String,
}

/// `rm`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RmParams {
    /// Virtual path of the file, symlink or directory to delete; not a zone root
    pub path: String,
    /// Delete a non-empty directory with everything beneath it (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
}

/// `mv`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MvParams {
    /// Virtual path to move; must exist; not a zone root
    pub from: String,
    /// Virtual path to move to; missing parents are created; may be in the other zone
    pub to: String,
    /// Replace an existing file or empty directory at `to` (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
}

/// `git_status`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitStatusParams {
    /// A pulled repository's directory, or any path in it (default: every pulled repository)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Re-hash every file, also finding changes made beside wardfs (default false; slower)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescan: Option<bool>,
    /// A fork's name: list the changes its files hold instead of the workspace's (default: the
    /// fork repo lies in, else the workspace)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
}

/// `git_stage`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitStageParams {
    /// The commit message; its first line is the summary
    pub message: String,
    /// Files or directories to stage, as virtual paths or paths inside the repository (default:
    /// every change not already in a staged commit)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// The repository's directory; required when several repositories are pulled
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The branch it will be pushed to (default: the pulled branch)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A fork's name: stage the changes its files hold instead of the workspace's (default: the
    /// fork repo or the first virtual path in files lies in, else the workspace)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
}

/// A staged commit's state, for `staged_list`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StagedState {
    Staged,
    Rebased,
    Pushed,
    Conflicted,
    Rejected,
    Discarded,
}

impl StagedState {
    /// Returns the state as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            StagedState::Staged => "staged",
            StagedState::Rebased => "rebased",
            StagedState::Pushed => "pushed",
            StagedState::Conflicted => "conflicted",
            StagedState::Rejected => "rejected",
            StagedState::Discarded => "discarded",
        }
    }
}

/// `staged_list`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StagedListParams {
    /// Only commits in this state (default: every state)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StagedState>,
}

/// `staged_show`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StagedShowParams {
    /// The staged commit's id (10 hex digits, from git_stage or staged_list)
    pub id: String,
}

/// `git_push` (offered only with `[mcp] allow_push = true`).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitPushParams {
    /// The staged commit's id (state staged, rebased or rejected)
    pub id: String,
    /// Push to the branch wardfs/<id> and open a GitHub pull request instead of pushing to the
    /// commit's branch (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr: Option<bool>,
}

/// `mirror_push`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MirrorPushParams {
    /// The sandbox's name, as configured in the daemon
    pub sandbox: String,
    /// The zone to mirror: workspace (default) or cache
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The directory inside the sandbox to mirror into (default: the sandbox's configured root)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Hash every local file instead of trusting unchanged sizes and times (default false;
    /// slower, for after changes made beside wardfs)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_hash: Option<bool>,
}

/// `mirror_pull`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MirrorPullParams {
    /// The sandbox's name, as configured in the daemon
    pub sandbox: String,
    /// The zone to pull into: workspace (default) or cache
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The directory inside the sandbox to pull from (default: the sandbox's configured root)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// `checkpoint`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    /// What the checkpoint is for (shown in checkpoint_list)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The zone: workspace (the default) or cache
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// A directory to checkpoint instead of a whole zone, e.g. /workspace/src (not with zone);
    /// restoring the checkpoint then puts back that directory only
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `checkpoint_list`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointListParams {
    /// Only this zone's checkpoints (workspace or cache)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// At most this many (default 100)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `events`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsParams {
    /// Resume after this cursor (the `cursor` of an earlier answer); left out: the newest
    /// events are not sent, only the cursor to resume from
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only this zone's changes (workspace or cache)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Only changes at or beneath this path (`/workspace/src`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// At most this many events (default 200, at most 1000)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `checkpoint_diff`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointDiffParams {
    /// The checkpoint to compare from (an id from checkpoint or checkpoint_list)
    pub from: i64,
    /// Another checkpoint of the same zone; left out: the zone as it is now
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
}

/// `restore`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreParams {
    /// The checkpoint to go back to
    pub id: i64,
    /// Virtual paths to restore, with what is beneath them (default: the whole zone)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// `sandbox_list` (offered only with `[mcp] allow_sandboxes = true`).
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxListParams {}

/// `sandbox_create` (offered only with `[mcp] allow_sandboxes = true`).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxCreateParams {
    /// The sandbox's name, as configured in the daemon (provider local or daytona)
    pub name: String,
    /// A snapshot id to start from instead of the configured one
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// A volume (made when missing) instead of the configured one
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

/// `sandbox_destroy` (offered only with `[mcp] allow_sandboxes = true`).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxDestroyParams {
    /// The sandbox's name
    pub name: String,
    /// Keep the volume made for the sandbox (default false)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_volume: Option<bool>,
}

/// `fork`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    /// The fork's name: 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.` or `-`;
    /// its files are at /forks/NAME
    pub name: String,
    /// What to fork: workspace (the default), cache, another fork's name (forks/NAME for a name
    /// that is a number), or a checkpoint id
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// `forks`.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForksParams {}

/// `changes`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangesParams {
    /// The fork's name (see forks)
    pub name: String,
    /// true: the patch in git's format too (default false: only the files and line counts)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<bool>,
    /// Compare with this instead of the fork point: workspace, cache or another fork as it is
    /// now (its name, or forks/NAME for a name that is a number), or a checkpoint id
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// `merge`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeParams {
    /// The fork's name (see forks)
    pub name: String,
    /// Only these paths, with what is beneath them: relative to the fork (src/a.rs) or virtual
    /// paths in the fork or its parent (default: every change)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Conflicting paths that keep the parent's version, written as paths are (default: none)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ours: Vec<String>,
    /// Conflicting paths that take the fork's version, written as paths are (default: none)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub theirs: Vec<String>,
}

/// `update`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateParams {
    /// The fork's name (see forks)
    pub name: String,
}

/// `run` (offered only with `[mcp] allow_run = true`).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// The sandbox's name, as configured in the daemon
    pub sandbox: String,
    /// The program and its arguments, not through a shell: ["npm", "test"], or ["sh", "-c", "make && ./check"]
    pub command: Vec<String>,
    /// Where it runs, relative to the mirrored directory (the workspace's root there)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Names of the daemon's environment variables to pass in (only those the sandbox's run_env lists)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Seconds it may run before it is killed (default: the daemon's limits.run_timeout_secs)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Run beside other parallel runs in the same sandbox (they share its files); default: alone, CONFLICT while another run holds it
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parallel: bool,
    /// KiB of the end of each stream to return (default 16, at most 1024)
    #[serde(default, skip_serializing)]
    pub tail_kib: Option<u64>,
}
