//! The MCP server (`wardfs mcp`): the daemon's file and git operations as Model Context Protocol
//! tools, over stdio, for agents that cannot use the mount.
//!
//! Every tool is a thin call to the daemon's socket API through the CLI's [`Client`]: the daemon
//! keeps the path rules, limits, journal and locks, so an agent sees the same files and errors
//! through MCP as through the API and the mount. A tool's result is the route's JSON answer, as
//! `structuredContent` and as text (`read` gives the file's text instead, followed by a note when
//! lines are left); every tool declares that answer's shape as its `outputSchema`
//! ([`replies`]). Paths in results are virtual (`/workspace/src/lib.rs`): the rows of the journal
//! and of the checkpoints, which the daemon gives relative to their zone, are rewritten
//! ([`rows`]). A failed call is a tool error (`isError: true`) whose content is the API's error
//! object, `{"code", "message", "path"}` (`path` left out when the error is not about one), with
//! the API's stable codes; two more codes say that the daemon could not be asked:
//! `DAEMON_NOT_RUNNING` and, for a broken connection, `INTERNAL`.
//!
//! Pushing is a person's decision: the `git_push` tool exists only when the config says
//! `[mcp] allow_push = true`; without it no tool reaches `/v1/git/push`. Likewise making and
//! destroying sandboxes (`sandbox_create`, `sandbox_list`, `sandbox_destroy`) needs
//! `[mcp] allow_sandboxes = true`. [`tools_help`] lists every tool for `wardfs mcp --help`
//! ([`TOOLS`], which a test holds equal to the server's own tool list).
//!
//! Owns the MCP tools and their descriptions. Reaches the daemon only through `client`; may
//! import `core`'s types besides (`tests/rules` checks the imports).

mod params;
mod replies;
mod rows;
mod scope;
mod transport;

use std::ops::ControlFlow;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::Serialize;
use serde_json::{json, Value};

use crate::client::encode;
use crate::client::{Client, ClientError};
pub use params::*;
use replies::*;
pub use scope::Fork;

/// Every tool a server can offer, sorted by name: those of its router
/// (`every_tool_is_in_the_list` checks). `wardfs mcp --help` lists these rather than building
/// the router, whose schemas would cost every `wardfs` command more than the rest of its start.
pub const TOOLS: [&str; 30] = [
    "changes",
    "checkpoint",
    "checkpoint_diff",
    "checkpoint_list",
    "edit",
    "events",
    "fork",
    "forks",
    "git_push",
    "git_stage",
    "git_status",
    "glob",
    "grep",
    "ls",
    "merge",
    "mirror_pull",
    "mirror_push",
    "mv",
    "read",
    "restore",
    "rm",
    "run",
    "sandbox_create",
    "sandbox_destroy",
    "sandbox_list",
    "staged_list",
    "staged_show",
    "stat",
    "update",
    "write",
];

/// The tool offered only with `[mcp] allow_push = true`.
pub const PUSH_TOOL: &str = "git_push";

/// The tools offered only with `[mcp] allow_sandboxes = true`.
pub const SANDBOX_TOOLS: [&str; 3] = ["sandbox_create", "sandbox_destroy", "sandbox_list"];

/// The tool offered only with `[mcp] allow_run = true`.
pub const RUN_TOOL: &str = "run";

/// The config switches that offer tools (`[mcp]`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Switches {
    /// `allow_push`: the `git_push` tool.
    pub allow_push: bool,
    /// `allow_sandboxes`: the sandbox lifecycle tools.
    pub allow_sandboxes: bool,
    /// `allow_run`: the `run` tool.
    pub allow_run: bool,
}

/// Why the MCP server stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("the MCP session could not start: {0}")]
    Start(String),
    #[error("the MCP session failed: {0}")]
    Session(String),
}

const INSTRUCTIONS: &str = "\
wardfs serves two zones of files: /workspace (the project, often a git checkout pulled by wardfs) \
and /cache (downloads and scratch). Every path is virtual and starts with its zone, e.g. \
/workspace/src/main.rs; a path may not leave its zone (OUTSIDE_ZONE). Read with `read` (line \
windows), change files with `write` (whole file) or `edit` (exact string), find them with `glob` \
and `grep`. In a pulled git repository, `git_status` lists your changes and `git_stage` turns them \
into a staged commit that a person reviews and pushes. To try something apart, `fork` makes a \
copy of the workspace of your own (/forks/NAME, the same tools work on its paths); \
`changes` lists what you changed there, `merge` brings it back and `update` brings the workspace's \
later changes into it. A failed call returns an error whose JSON \
has a stable `code` (NOT_FOUND, NOT_UNIQUE, ...) and a `message` saying what to fix.";

/// The MCP tools of one `wardfs mcp` process.
#[derive(Debug, Clone)]
pub struct Server {
    client: Client,
    tool_router: ToolRouter<Server>,
    /// The fork it is confined to (`wardfs mcp --fork NAME`, [`scope`]).
    fork: Option<Fork>,
}

/// Returns the successful answer of a route as a tool result.
fn answer(bytes: &[u8]) -> CallToolResult {
    answer_with(bytes, |_| {})
}

/// Returns the successful answer of a route as a tool result, changed by `fix` first.
fn answer_with(bytes: &[u8], fix: fn(&mut Value)) -> CallToolResult {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(mut v) => {
            fix(&mut v);
            CallToolResult::structured(v)
        }
        // Every JSON route answers JSON; anything else is shown as it came.
        Err(_) => CallToolResult::success(vec![ContentBlock::text(
            String::from_utf8_lossy(bytes).into_owned(),
        )]),
    }
}

/// A tool error's content: the API's error object, whose `path` is left out when the error is
/// not about one.
#[derive(Debug, Serialize)]
struct ToolError<'a> {
    code: &'a str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
}

impl ToolError<'_> {
    fn result(&self) -> CallToolResult {
        // A struct of strings always serializes.
        CallToolResult::structured_error(serde_json::to_value(self).unwrap_or(Value::Null))
    }
}

/// Returns a failed call as a tool error carrying the API's `code`, `message` and `path`.
fn failure(e: ClientError) -> CallToolResult {
    let (code, path) = match &e {
        ClientError::Api { code, path, .. } => (code.as_str(), path.as_deref()),
        ClientError::NotRunning { .. } => ("DAEMON_NOT_RUNNING", None),
        ClientError::Transport(_) => ("INTERNAL", None),
        ClientError::Local(_) => ("INVALID_ARGUMENT", None),
    };
    ToolError {
        code,
        message: e.to_string(),
        path,
    }
    .result()
}

/// Returns the schema of what a tool returns, for its `outputSchema`.
fn schema<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::tool::schema_for_output::<T>()
}

/// Returns the last `kib` KiB of `s` (whole characters).
fn tail_of(s: &str, kib: u64) -> String {
    crate::core::text::tail(s, (kib.clamp(1, 1024) * 1024) as usize).to_string()
}

/// Runs the `run` tool: `POST /v1/run`, its streamed output skipped (the `exited` line keeps
/// the tails), answered once the run ended.
async fn run_tool(client: &Client, p: RunParams) -> CallToolResult {
    let kib = p.tail_kib.unwrap_or(16);
    let mut last: Option<Value> = None;
    let read = client
        .post_lines("/v1/run", &p, |line| {
            if let Ok(v) = serde_json::from_slice::<Value>(line) {
                if matches!(v["event"].as_str(), Some("exited") | Some("error")) {
                    last = Some(v);
                }
            }
            ControlFlow::Continue(())
        })
        .await;
    if let Err(e) = read {
        return failure(e);
    }
    let Some(v) = last else {
        return failure(ClientError::Transport(
            "the daemon ended the run without its end".into(),
        ));
    };
    if v["event"] == "error" {
        let e = &v["error"];
        let code =
            serde_json::from_value(e["code"].clone()).unwrap_or(crate::core::ErrorCode::Internal);
        return failure(ClientError::Api {
            code,
            message: e["message"].as_str().unwrap_or_default().to_string(),
            path: e["path"].as_str().map(str::to_string),
        });
    }
    let r: crate::sandbox::run::RunResult = match serde_json::from_value(v) {
        Ok(r) => r,
        Err(e) => return failure(ClientError::Transport(format!("bad answer: {e}"))),
    };
    let reply = RunReply {
        run_id: r.run_id,
        exit_code: r.exit_code,
        timed_out: r.timed_out,
        duration_ms: r.duration_ms,
        stdout: tail_of(&r.stdout_tail, kib),
        stderr: tail_of(&r.stderr_tail, kib),
        stdout_bytes: r.stdout_bytes,
        stderr_bytes: r.stderr_bytes,
        changed: r.changed,
        conflicts: r.conflicts,
    };
    CallToolResult::structured(serde_json::to_value(reply).unwrap_or_default())
}

/// Returns a `read` answer with the file's text as the content a model reads.
fn read_answer(bytes: &[u8]) -> CallToolResult {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return answer(bytes);
    };
    let mut text = v["content"].as_str().unwrap_or_default().to_string();
    if v["truncated"].as_bool() == Some(true) {
        let offset = v["offset"].as_u64().unwrap_or(1);
        let lines = v["lines"].as_u64().unwrap_or(0);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[wardfs: lines {offset}-{} of {} shown; call read with offset={} for more]",
            offset + lines.saturating_sub(1),
            v["total_lines"].as_u64().unwrap_or(0),
            offset + lines
        ));
    }
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    r
}

impl Server {
    /// Returns the server for the daemon behind `client`; `allow_push` adds the `git_push` tool.
    pub fn new(client: Client, allow_push: bool) -> Server {
        Server::with_switches(client, allow_push, false)
    }

    /// Returns the server for the daemon behind `client`; `allow_push` adds the `git_push`
    /// tool, `allow_sandboxes` the sandbox lifecycle tools.
    pub fn with_switches(client: Client, allow_push: bool, allow_sandboxes: bool) -> Server {
        Server::with(
            client,
            Switches {
                allow_push,
                allow_sandboxes,
                allow_run: false,
            },
        )
    }

    /// Returns the server for the daemon behind `client` with the tools `switches` offer.
    pub fn with(client: Client, switches: Switches) -> Server {
        let mut tool_router = Server::tool_router();
        if !switches.allow_push {
            tool_router.remove_route(PUSH_TOOL);
        }
        if !switches.allow_sandboxes {
            for tool in SANDBOX_TOOLS {
                tool_router.remove_route(tool);
            }
        }
        if !switches.allow_run {
            tool_router.remove_route(RUN_TOOL);
        }
        Server {
            client,
            tool_router,
            fork: None,
        }
    }

    /// Returns the server confined to `fork` (its root is `/`): only the tools [`scope`]
    /// offers, each call and answer mapped by it.
    pub fn confined(client: Client, fork: Fork) -> Server {
        let mut tool_router = Server::tool_router();
        for tool in TOOLS {
            if !scope::offers(tool) {
                tool_router.remove_route(tool);
            }
        }
        Server {
            client,
            tool_router,
            fork: Some(fork),
        }
    }

    /// Confines a call to the fork before its tool runs: its arguments ([`Fork::arguments`])
    /// and the checkpoints it names, which must be the fork's.
    async fn confine(
        &self,
        fork: &Fork,
        request: &mut CallToolRequestParams,
    ) -> Result<(), CallToolResult> {
        let refused = |r: scope::Refusal| {
            ToolError {
                code: r.code,
                message: r.message,
                path: r.path.as_deref(),
            }
            .result()
        };
        let args = request.arguments.get_or_insert_with(JsonObject::new);
        let ids = fork.arguments(&request.name, args).map_err(refused)?;
        if ids.is_empty() {
            return Ok(());
        }
        let answer = self
            .client
            .get_raw(&fork.checkpoints_route())
            .await
            .map_err(failure)?;
        let own = Fork::checkpoint_ids(&answer).unwrap_or_default();
        match ids.into_iter().find(|id| !own.contains(id)) {
            Some(id) => Err(refused(fork.not_its_checkpoint(id))),
            None => Ok(()),
        }
    }

    /// Returns the names of the tools this server offers.
    pub fn tool_names(&self) -> Vec<String> {
        self.tool_router
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    async fn post<T: Serialize>(&self, route: &str, body: &T) -> CallToolResult {
        match self.client.post_raw(route, body).await {
            Ok(bytes) => answer(&bytes),
            Err(e) => failure(e),
        }
    }
}

/// Returns the list of tools for `wardfs mcp --help`: every tool of [`TOOLS`], by the config
/// switch that offers it, each group's names on indented lines.
pub fn tools_help() -> String {
    let (push, rest): (Vec<&str>, Vec<&str>) = TOOLS.into_iter().partition(|n| *n == PUSH_TOOL);
    let (sandboxes, rest): (Vec<&str>, Vec<&str>) =
        rest.into_iter().partition(|n| SANDBOX_TOOLS.contains(n));
    let (run, always): (Vec<&str>, Vec<&str>) = rest.into_iter().partition(|n| *n == RUN_TOOL);
    [
        (
            "Tools (each calls the running daemon, `wardfs serve`, through its socket):",
            always,
        ),
        ("Only with `[mcp] allow_push = true` in the config:", push),
        (
            "Only with `[mcp] allow_sandboxes = true` in the config:",
            sandboxes,
        ),
        ("Only with `[mcp] allow_run = true` in the config:", run),
    ]
    .iter()
    .map(|(title, names)| format!("{title}\n{}", indented_list(names)))
    .collect::<Vec<_>>()
    .join("\n")
}

/// Returns `names` comma-separated on lines of at most 80 columns, each indented by two.
fn indented_list(names: &[&str]) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for (i, name) in names.iter().enumerate() {
        let item = if i + 1 < names.len() {
            format!("{name},")
        } else {
            name.to_string()
        };
        if !line.is_empty() && line.len() + 1 + item.len() > 78 {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&item);
    }
    lines.push(line);
    lines.iter().map(|l| format!("  {l}\n")).collect()
}

type ToolResult = Result<CallToolResult, ErrorData>;

#[tool_router]
impl Server {
    /// Read a UTF-8 text file, whole or a window of lines. The content returned is the text itself
    /// (lines with their line endings). structuredContent has `content`, `offset` (first line
    /// returned), `lines` (lines returned), `total_lines`, `truncated` (more lines follow: call
    /// again with offset = offset + lines) and `size` (bytes). Limits: a file over the daemon's
    /// limits.max_read_bytes (10 MiB by default) can only be read with `limit`, and the window must
    /// fit that limit (TOO_LARGE otherwise). Errors: NOT_FOUND, IS_DIR, BINARY (not UTF-8 text),
    /// TOO_LARGE, OUTSIDE_ZONE, INVALID_PATH, INVALID_ARGUMENT (offset or limit of 0),
    /// PERMISSION_DENIED, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<ReadResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn read(&self, Parameters(p): Parameters<ReadParams>) -> ToolResult {
        Ok(match self.client.post_raw("/v1/fs/read", &p).await {
            Ok(bytes) => read_answer(&bytes),
            Err(e) => failure(e),
        })
    }

    /// Create or replace a text file with the given content, atomically (readers never see half a
    /// file); missing parent directories are created and an existing file keeps its permissions.
    /// Returns {path, bytes (new size), created (true when it did not exist)}. Errors: IS_DIR,
    /// NOT_DIR, TOO_LARGE (over limits.max_write_bytes, 100 MiB by default), READ_ONLY,
    /// OUTSIDE_ZONE, INVALID_PATH, PERMISSION_DENIED, NO_SPACE, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<WriteResult>(),
        annotations(destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn write(&self, Parameters(p): Parameters<WriteParams>) -> ToolResult {
        Ok(self.post("/v1/fs/write", &p).await)
    }

    /// Replace an exact string in a text file, atomically against concurrent writers. `old` must
    /// occur exactly once unless replace_all is true. Returns {path, replacements, bytes (new
    /// size)}. Errors: NO_MATCH (old does not occur: read the file again and copy the text
    /// exactly), NOT_UNIQUE (old occurs several times: include more surrounding text, or set
    /// replace_all), CONFLICT (the file changed meanwhile: read it again and retry), NOT_FOUND,
    /// BINARY, TOO_LARGE, INVALID_ARGUMENT (empty old, or new equal to old), READ_ONLY,
    /// OUTSIDE_ZONE, INVALID_PATH.
    #[tool(
        output_schema = schema::<EditResult>(),
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn edit(&self, Parameters(p): Parameters<EditParams>) -> ToolResult {
        Ok(self.post("/v1/fs/edit", &p).await)
    }

    /// List one directory (not recursive; use glob to walk a tree). Returns {path, entries: [{name,
    /// kind (file, dir, symlink, other), size, mtime_ms}]} sorted by name, hidden entries
    /// included. Path / lists the zones. Errors: NOT_FOUND, NOT_DIR, OUTSIDE_ZONE, INVALID_PATH,
    /// PERMISSION_DENIED, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<ListResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn ls(&self, Parameters(p): Parameters<LsParams>) -> ToolResult {
        let path = p.path.as_deref().unwrap_or("/workspace");
        Ok(self.post("/v1/fs/list", &json!({ "path": path })).await)
    }

    /// Find files by glob pattern, newest first. Like fd: hidden files are skipped and .gitignore
    /// is honoured unless told otherwise. Returns {matches: [{path, mtime_ms}], total (matches
    /// found), truncated (true when the cap left some out)}. Limit: at most the daemon's
    /// limits.glob_max_results paths (1000 by default); a larger limit is INVALID_ARGUMENT.
    /// Errors: INVALID_ARGUMENT (bad pattern or limit), NOT_FOUND, NOT_DIR, OUTSIDE_ZONE,
    /// INVALID_PATH, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<GlobResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn glob(&self, Parameters(p): Parameters<GlobParams>) -> ToolResult {
        Ok(self.post("/v1/fs/glob", &p).await)
    }

    /// Search file contents with ripgrep's engine. Hidden and binary files are skipped and
    /// .gitignore is honoured unless told otherwise. Returns {mode, then lines: [{path, line,
    /// text, kind (match or context)}] (content mode), files: [path] (files mode) or counts:
    /// [{path, count}] (count mode), total, files_searched, truncated, skipped_total, skipped:
    /// [{path, reason}] (files a rule kept out, e.g. a line over the read limit)}; the array is left out
    /// when nothing matched; a line over 2048 bytes is cut with a marker. Results are sorted by
    /// path and line. Limit: at most the daemon's
    /// limits.grep_max_results results (1000 by default); truncated is true when more matches
    /// exist: narrow the path, glob or pattern. Errors: INVALID_ARGUMENT (bad regex, glob, type or
    /// limit), NOT_FOUND, NOT_DIR, OUTSIDE_ZONE, INVALID_PATH, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<GrepResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn grep(&self, Parameters(p): Parameters<GrepParams>) -> ToolResult {
        Ok(self.post("/v1/fs/grep", &p).await)
    }

    /// Describe one path without following a symlink in its last component. Returns {path, kind
    /// (file, dir, symlink, other), size, mode (permission bits as a decimal number: 420 is
    /// 0o644), mtime_ms, nlink, read_only (the zone refuses changes), target (symlinks only)}.
    /// Errors: NOT_FOUND, NOT_DIR, OUTSIDE_ZONE, INVALID_PATH, PERMISSION_DENIED,
    /// ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<StatResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn stat(&self, Parameters(p): Parameters<StatParams>) -> ToolResult {
        Ok(self.post("/v1/fs/stat", &p).await)
    }

    /// Delete a file, a symlink (never its target) or a directory. Returns {path, ok: true}.
    /// Errors: NOT_FOUND, NOT_EMPTY (a non-empty directory without recursive), NOT_DIR, READ_ONLY,
    /// OUTSIDE_ZONE, INVALID_PATH (a zone root), PERMISSION_DENIED, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<DoneReply>(),
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn rm(&self, Parameters(p): Parameters<RmParams>) -> ToolResult {
        Ok(self.post("/v1/fs/delete", &p).await)
    }

    /// Move or rename a file, symlink or directory, also between /workspace and /cache. Returns
    /// {path (the destination), ok: true}. Errors: NOT_FOUND (from is missing), EXISTS (to exists
    /// and overwrite is false, or is a non-empty directory), INVALID_ARGUMENT (to is inside from),
    /// IS_DIR, NOT_DIR, TOO_LARGE, READ_ONLY, OUTSIDE_ZONE, INVALID_PATH, ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<DoneReply>(),
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn mv(&self, Parameters(p): Parameters<MvParams>) -> ToolResult {
        Ok(self.post("/v1/fs/move", &p).await)
    }

    /// List the changed files of the git repositories pulled into /workspace. Returns {repos:
    /// [{repo, url, branch, base, changes: [{path, state (created, modified, deleted, conflict)}],
    /// examined}]}; repos is empty when nothing is pulled. Cheap: call it after every step.
    /// Changes made beside wardfs are found only with rescan. A file in conflict changed upstream
    /// too: merge the upstream version into it before staging. With fork (or a repo in
    /// /forks/NAME): the fork's files, paths in the fork. Errors: NOT_FOUND (no repository pulled
    /// at repo, no such fork), INVALID_ARGUMENT (repo not in /workspace or a fork), CONFLICT (a
    /// fork made before the repository was pulled or pushed again: update it), INVALID_PATH.
    #[tool(
        output_schema = schema::<StatusResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn git_status(&self, Parameters(p): Parameters<GitStatusParams>) -> ToolResult {
        Ok(self.post("/v1/git/status", &p).await)
    }

    /// Turn changes of a pulled repository into a staged commit for a person to review. Nothing is
    /// pushed and the workspace is not touched; the person pushes or discards it. Returns the
    /// staged commit: {id, repo, url, branch, message, base, commit, state: "staged", additions,
    /// deletions, files: [{path, operation (create, update, delete), additions, deletions,
    /// writers}]}. With fork (or a repo or file in /forks/NAME) the fork's changes are staged
    /// (zone: forks/NAME); each file names its writers. Errors: NO_MATCH (nothing to stage, or a
    /// named file has no changes), CONFLICT (files in conflict, an identical commit is already
    /// staged, or a fork made before the repository was pulled or pushed again), NOT_FOUND (no
    /// repository pulled there, no such fork), INVALID_ARGUMENT (blank message, bad branch,
    /// several repositories pulled and no repo).
    #[tool(
        output_schema = schema::<StagedCommit>(),
        annotations(destructive_hint = false, open_world_hint = false)
    )]
    async fn git_stage(&self, Parameters(p): Parameters<GitStageParams>) -> ToolResult {
        Ok(self.post("/v1/git/stage", &p).await)
    }

    /// Checkpoint a zone now (the workspace unless zone says cache): a snapshot to go back to
    /// with restore, holding every writer's changes (these tools, the mount, shell commands,
    /// pulls, an editor). Cheap: only what changed since the previous checkpoint is read. Take
    /// one before a risky change. Returns {id, zone, message, time_ms, files, scope (the
    /// directory checkpointed, null for the whole zone), …}. Errors: INVALID_ARGUMENT,
    /// ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<Checkpoint>(),
        annotations(destructive_hint = false, open_world_hint = false)
    )]
    async fn checkpoint(&self, Parameters(p): Parameters<CheckpointParams>) -> ToolResult {
        Ok(match self.client.post_raw("/v1/checkpoints", &p).await {
            Ok(bytes) => answer_with(&bytes, rows::checkpoint_row),
            Err(e) => failure(e),
        })
    }

    /// List checkpoints, newest first. Returns {checkpoints: [{id, zone, message, via (who
    /// asked), time_ms, files, parent, scope}], restores: [{checkpoint, before, paths, state,
    /// …}] (the latest restores)}. Errors: INVALID_ARGUMENT.
    #[tool(
        output_schema = schema::<CheckpointListReply>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn checkpoint_list(&self, Parameters(p): Parameters<CheckpointListParams>) -> ToolResult {
        let mut route = format!("/v1/checkpoints?limit={}", p.limit.unwrap_or(100));
        if let Some(z) = &p.zone {
            route.push_str(&format!("&zone={}", encode(z)));
        }
        Ok(match self.client.get_raw(&route).await {
            Ok(bytes) => answer_with(&bytes, rows::checkpoint_list),
            Err(e) => failure(e),
        })
    }

    /// What changed since `since`: every change (API, mount, git, mirror, edits beside wardfs)
    /// and checkpoint, in order, at most `limit` (default 200, at most 1000). Without `since`
    /// only the cursor to start from is returned. Returns {events: [{kind (change, checkpoint),
    /// cursor, ...the row: a change has zone, path (virtual, like every tool's), op, to_path,
    /// via, …}], cursor (resume from it: nothing repeated, nothing missed), more
    /// (true when cut at the limit)}. Errors: INVALID_ARGUMENT (a cursor the journal no longer
    /// keeps, or one from another daemon).
    #[tool(
        output_schema = schema::<EventsReply>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn events(&self, Parameters(p): Parameters<EventsParams>) -> ToolResult {
        let limit = p.limit.unwrap_or(200).clamp(1, 1000) as usize;
        let mut route = "/v1/events?follow=false".to_string();
        for (key, value) in [("since", &p.since), ("zone", &p.zone), ("path", &p.path)] {
            if let Some(v) = value {
                route.push_str(&format!("&{key}={}", encode(v)));
            }
        }
        let mut events: Vec<Value> = Vec::new();
        let mut cursor: Option<String> = None;
        let mut more = false;
        let mut failed: Option<Value> = None;
        let read = self
            .client
            .get_lines(&route, |line| {
                let Ok(v) = serde_json::from_slice::<Value>(line) else {
                    return ControlFlow::Continue(());
                };
                match v.get("kind").and_then(Value::as_str) {
                    Some("error") => {
                        failed = Some(v);
                        return ControlFlow::Break(());
                    }
                    Some("heartbeat") => {}
                    _ if events.len() == limit => {
                        more = true;
                        return ControlFlow::Break(());
                    }
                    Some("checkpoint") => {
                        let mut row = v.clone();
                        rows::checkpoint_row(&mut row);
                        events.push(row);
                    }
                    _ => {
                        let mut row = v.clone();
                        rows::change_row(&mut row);
                        events.push(row);
                    }
                }
                if let Some(c) = v.get("cursor").and_then(Value::as_str) {
                    cursor = Some(c.to_string());
                }
                ControlFlow::Continue(())
            })
            .await;
        Ok(match (read, failed) {
            (Err(e), _) => failure(e),
            (Ok(()), Some(err)) => ToolError {
                code: err["code"].as_str().unwrap_or("INTERNAL"),
                message: err["message"].as_str().unwrap_or_default().to_string(),
                path: err["path"].as_str(),
            }
            .result(),
            (Ok(()), None) => CallToolResult::structured(json!({
                "events": events,
                "cursor": cursor,
                "more": more,
            })),
        })
    }

    /// What changed from checkpoint `from` to checkpoint `to`, or to now when `to` is left out.
    /// Returns {files: [{path, status (added, deleted, modified, type-changed), additions,
    /// deletions}], patch (git's unified format, cut at 4 MiB: truncated)}. Errors: NOT_FOUND,
    /// INVALID_ARGUMENT.
    #[tool(
        output_schema = schema::<DiffResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn checkpoint_diff(&self, Parameters(p): Parameters<CheckpointDiffParams>) -> ToolResult {
        Ok(self.post("/v1/checkpoints/diff", &p).await)
    }

    /// Put the zone back as it was at a checkpoint: all of it, or only `paths`. The present is
    /// checkpointed first: `before` in the answer is that checkpoint, so restoring it undoes this.
    /// Files that changed while the restore ran are left alone (conflicts). Returns {checkpoint,
    /// before, restored, removed, conflicts, not_kept, refused}. Errors: NOT_FOUND, INVALID_ARGUMENT,
    /// READ_ONLY.
    #[tool(
        output_schema = schema::<RestoreResult>(),
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn restore(&self, Parameters(p): Parameters<RestoreParams>) -> ToolResult {
        Ok(self.post("/v1/checkpoints/restore", &p).await)
    }

    /// Make a fork: a copy-on-write copy of the workspace (or of `from`: cache, another fork's
    /// name, or a checkpoint id) of your own, at /forks/NAME (its files shared with the parent
    /// until written: no data copied). Every tool works on its paths (/forks/NAME/src/main.rs); nothing written
    /// there reaches the workspace, and nothing written in the workspace reaches the fork,
    /// until `merge`. Use one to try an approach you may throw away, or to work beside another
    /// agent. Returns {fork: {name, path, parent, base (the fork point: a checkpoint), created_ms,
    /// via, changed}, linked (files shared with the parent), copied, dirs, symlinks, fixed,
    /// skipped, skipped_total, took_ms}. Errors: EXISTS (a fork has that name), INVALID_ARGUMENT
    /// (a bad name or from), NOT_FOUND (no such checkpoint), CONFLICT (256 forks exist),
    /// ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<ForkMade>(),
        annotations(destructive_hint = false, open_world_hint = false)
    )]
    async fn fork(&self, Parameters(p): Parameters<ForkParams>) -> ToolResult {
        Ok(self.post("/v1/forks", &p).await)
    }

    /// List the forks, oldest first. Returns {forks: [{name, path (/forks/NAME), parent (the
    /// zone or fork it was made from, or `checkpoint N`), base (its fork point, a checkpoint),
    /// created_ms, via, pid, uid (who made it), changed (paths changed since the fork point;
    /// null past 10,000), overlaps: [{path, zones, writers}] (paths it changed that its parent or
    /// a sibling fork changed too: a conflict in the making, check before you write)}]}.
    #[tool(
        output_schema = schema::<ForksReply>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn forks(&self, Parameters(_p): Parameters<ForksParams>) -> ToolResult {
        Ok(match self.client.get_raw("/v1/forks").await {
            Ok(bytes) => answer(&bytes),
            Err(e) => failure(e),
        })
    }

    /// What a fork changed since its fork point, or with since against another zone or fork
    /// as it is now, or a checkpoint. Returns {from (the checkpoint compared with), files:
    /// [{path (relative to the fork: src/a.rs is /forks/NAME/src/a.rs), status (added,
    /// deleted, modified, type-changed, renamed, re-moded), additions, deletions, old_path (of a
    /// rename), old_mode and new_mode (octal permission bits, when they changed)}], patch (git's
    /// unified format, only with patch: true; cut at 4 MiB: truncated)}. Excluded paths
    /// (node_modules/, .venv/, build outputs, what .gitignore ignores) are not listed. Errors:
    /// NOT_FOUND (no such fork or checkpoint), INVALID_ARGUMENT (a bad name or since),
    /// ZONE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<DiffResult>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn changes(&self, Parameters(p): Parameters<ChangesParams>) -> ToolResult {
        let mut route = format!(
            "/v1/forks/{}/changes?patch={}",
            encode(&p.name),
            p.patch == Some(true)
        );
        if let Some(since) = &p.since {
            route.push_str(&format!("&since={}", encode(since)));
        }
        Ok(match self.client.get_raw(&route).await {
            Ok(bytes) => answer(&bytes),
            Err(e) => failure(e),
        })
    }

    /// Merge a fork's changes (all, or only `paths`) into the zone or fork it was made from,
    /// three-way against the fork point as git merges: the parent's own changes are kept. All
    /// or nothing: when a path conflicts (both sides changed the same lines, a binary file or a
    /// mode on both sides, a delete against a change) nothing is applied, applied is false and
    /// conflicts lists each path: settle them in the fork (or merge other paths) and call
    /// again. Otherwise the parent is checkpointed first: restore with id = before undoes the
    /// merge. Returns {fork, parent, applied, conflicts: [{path, kind}], before, changed,
    /// left_alone (changed by another writer meanwhile, not overwritten)}; paths are relative to
    /// the parent. After a merge of all its changes the fork's fork point moves to the fork as
    /// merged. To settle a conflict, call again naming a side for it: ours (keep the parent's
    /// version) or theirs (take the fork's); a path named there that does not conflict is
    /// refused. Errors: NOT_FOUND (no such fork), INVALID_ARGUMENT (a bad name or path),
    /// ZONE_UNAVAILABLE (no zone to merge into: made from a checkpoint), READ_ONLY.
    #[tool(
        output_schema = schema::<MergeResult>(),
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn merge(&self, Parameters(p): Parameters<MergeParams>) -> ToolResult {
        let route = format!("/v1/forks/{}/merge", encode(&p.name));
        let body = json!({ "paths": p.paths, "ours": p.ours, "theirs": p.theirs });
        Ok(self.post(&route, &body).await)
    }

    /// Update a fork from its parent: bring the parent's changes since the fork point into the
    /// fork, keeping the fork's own (three-way, as git merges; the parent is not changed). A
    /// file both changed in ways that cannot be joined keeps both: the fork's version stays at
    /// the path and the parent's is written beside it as PATH.parent; settle each (keep what
    /// should stay at the path, delete PATH.parent) before a merge. The fork is checkpointed
    /// first: restore with id = before undoes the update. Then its fork point moves to the
    /// parent as brought in, so `changes` lists only your own changes. Returns {fork, parent,
    /// onto (the parent's checkpoint brought in), base (the new fork point), before, changed
    /// (paths written in the fork), conflicts: [{path, kind, parent_copy}], left_alone}; paths
    /// are relative to the fork. Errors: NOT_FOUND (no such fork), INVALID_ARGUMENT (a bad
    /// name), ZONE_UNAVAILABLE (no zone to update from: made from a checkpoint).
    #[tool(
        output_schema = schema::<UpdateResult>(),
        annotations(destructive_hint = true, open_world_hint = false)
    )]
    async fn update(&self, Parameters(p): Parameters<UpdateParams>) -> ToolResult {
        let route = format!("/v1/forks/{}/update", encode(&p.name));
        Ok(self.post(&route, &json!({})).await)
    }

    /// List staged commits, newest first. Returns {staged: [{id, repo, branch, message, state,
    /// reason (why the last push failed, when it did), additions, deletions, files, created_at,
    /// updated_at, …}]}. States: staged (awaiting review), rebased (review again), pushed,
    /// conflicted, rejected, discarded. Errors: INVALID_ARGUMENT.
    #[tool(
        output_schema = schema::<StagedListReply>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn staged_list(&self, Parameters(p): Parameters<StagedListParams>) -> ToolResult {
        let route = match p.state {
            Some(s) => format!("/v1/git/staged?state={}", encode(s.as_str())),
            None => "/v1/git/staged".to_string(),
        };
        Ok(match self.client.get_raw(&route).await {
            Ok(bytes) => answer(&bytes),
            Err(e) => failure(e),
        })
    }

    /// Show one staged commit with its diffs. Returns the staged commit (as in staged_list) whose
    /// files also have `diff` (the git-format unified patch GitHub will show) and `hunks`
    /// ([{header, lines: [{kind (context, add, delete), old_line, new_line, text}]}]); binary
    /// files and files over git.max_diff_bytes are flagged binary or oversized instead. Errors:
    /// NOT_FOUND (no staged commit with that id), INVALID_ARGUMENT.
    #[tool(
        output_schema = schema::<StagedCommit>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn staged_show(&self, Parameters(p): Parameters<StagedShowParams>) -> ToolResult {
        Ok(self.post("/v1/git/staged/show", &p).await)
    }

    /// Push a staged commit to its remote branch (or, with pr, to wardfs/<id> with a pull
    /// request). Offered only because the daemon's config sets [mcp] allow_push = true. The push
    /// never overwrites the remote: when the branch moved, the commit is rebased first. Returns
    /// {id, state: "pushed", commit_sha, pushed_ref, url (pull request, with pr), rebased,
    /// duration_ms}. Errors: REMOTE_MOVED (rebased onto a moved branch that changed the same
    /// files: review it with staged_show, then push again), CONFLICT (conflicting lines, or the
    /// commit is already pushed or discarded), REJECTED (a hook or branch protection refused it),
    /// AUTH_FAILED, NOT_FOUND, REMOTE_UNAVAILABLE.
    #[tool(
        output_schema = schema::<PushResult>(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn git_push(&self, Parameters(p): Parameters<GitPushParams>) -> ToolResult {
        Ok(self.post("/v1/git/push", &p).await)
    }

    /// Push a zone's changes into a remote sandbox (only what changed since the last mirror push,
    /// deletions included). Returns {files_sent, bytes_sent, deleted, renamed, conflicts: [{path,
    /// reason}], duration_ms}; a path changed on both sides is reported in conflicts and left
    /// alone. Errors: NOT_FOUND (no such sandbox), SANDBOX_UNAVAILABLE (the sandbox cannot be
    /// reached or is gone), AUTH_FAILED, INVALID_ARGUMENT (bad zone or directory),
    /// ZONE_UNAVAILABLE, INTERNAL.
    #[tool(
        output_schema = schema::<PushSummary>(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn mirror_push(&self, Parameters(p): Parameters<MirrorPushParams>) -> ToolResult {
        Ok(self.post("/v1/mirror/push", &p).await)
    }

    /// Pull a remote sandbox's changes back into the zone mirrored there. Returns
    /// {files_received, bytes_received, deleted, conflicts: [{path, reason, remote_copy}],
    /// duration_ms}; a path changed on both sides is not overwritten: the sandbox's copy is saved
    /// beside it (remote_copy). Errors: NOT_FOUND (no such sandbox), SANDBOX_UNAVAILABLE (the
    /// sandbox cannot be reached or is gone), AUTH_FAILED, INVALID_ARGUMENT (bad zone or
    /// directory), READ_ONLY (the zone refuses changes), ZONE_UNAVAILABLE, INTERNAL.
    #[tool(
        output_schema = schema::<PullSummary>(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn mirror_pull(&self, Parameters(p): Parameters<MirrorPullParams>) -> ToolResult {
        Ok(self.post("/v1/mirror/pull", &p).await)
    }

    /// List the sandboxes with their sessions. Offered only because the daemon's config sets
    /// [mcp] allow_sandboxes = true. Returns {sandboxes: [{name, provider, status (creating,
    /// active, resuming, paused, error, destroyed), provider_id, root, last_accessed_at,
    /// paused_at, idle_pause_s, paused_ttl_s, last_error, ...}]}.
    #[tool(
        output_schema = schema::<SandboxListReply>(),
        annotations(read_only_hint = true)
    )]
    async fn sandbox_list(&self, Parameters(_p): Parameters<SandboxListParams>) -> ToolResult {
        Ok(match self.client.get_raw("/v1/sandboxes").await {
            Ok(bytes) => answer(&bytes),
            Err(e) => failure(e),
        })
    }

    /// Create a sandbox the daemon's config defines with provider local or daytona, now (it is
    /// otherwise made on its first mirror_push). Offered only because the daemon's config sets
    /// [mcp] allow_sandboxes = true. Returns the sandbox as sandbox_list shows it (status
    /// active). Errors: CONFLICT (it already has a sandbox), INVALID_ARGUMENT (an attached
    /// sandbox, or a bad snapshot or volume name), NOT_FOUND, SANDBOX_UNAVAILABLE.
    #[tool(
        output_schema = schema::<SandboxInfo>(),
        annotations(destructive_hint = false, open_world_hint = true)
    )]
    async fn sandbox_create(&self, Parameters(p): Parameters<SandboxCreateParams>) -> ToolResult {
        Ok(self.post("/v1/sandboxes/create", &p).await)
    }

    /// Destroy a sandbox the daemon made (provider local or daytona); its files are lost unless
    /// on a kept volume. Offered only because the daemon's config sets [mcp] allow_sandboxes =
    /// true. Returns the sandbox (status destroyed); the next mirror_push makes a new one.
    #[tool(
        output_schema = schema::<SandboxInfo>(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn sandbox_destroy(&self, Parameters(p): Parameters<SandboxDestroyParams>) -> ToolResult {
        Ok(self.post("/v1/sandboxes/destroy", &p).await)
    }

    /// Run a command in a sandbox with the workspace in step: use it to run tests, builds or
    /// scripts on the files you edited (through the mount, write or edit), in the sandbox
    /// rather than on this machine. What changed in /workspace is pushed first; the command
    /// (no shell: ["sh", "-c", "..."] for one) runs in the sandbox's mirrored directory (or cwd
    /// beneath it); what it changed is pulled back into /workspace (a path changed on both
    /// sides keeps both: conflicts). env names variables the daemon passes in (only those the
    /// sandbox's run_env lists; their values show as *** in the output). Offered only because
    /// the daemon's config sets [mcp] allow_run = true. Returns {exit_code (null when killed),
    /// timed_out, duration_ms, stdout, stderr (the last tail_kib KiB of each, default 16),
    /// stdout_bytes, stderr_bytes, changed (paths of /workspace), conflicts}. Errors:
    /// INVALID_ARGUMENT (empty command, cwd climbing out, an env variable not listed), CONFLICT
    /// (another run holds the sandbox; parallel=true shares it with other parallel runs),
    /// NOT_FOUND, SANDBOX_UNAVAILABLE, AUTH_FAILED.
    #[tool(
        output_schema = schema::<RunReply>(),
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn run(&self, Parameters(p): Parameters<RunParams>) -> ToolResult {
        Ok(run_tool(&self.client, p).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let instructions = match &self.fork {
            Some(fork) => scope::instructions(fork),
            None => INSTRUCTIONS.to_string(),
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("wardfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    /// Runs a tool; confined to a fork, its call is confined before and its answer rewritten
    /// after ([`scope`]), whichever tool it is.
    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(fork) = &self.fork else {
            let call = ToolCallContext::new(self, request, context);
            return self.tool_router.call(call).await;
        };
        let tool = request.name.to_string();
        if let Err(refused) = self.confine(fork, &mut request).await {
            return Ok(refused.into());
        }
        let call = ToolCallContext::new(self, request, context);
        let mut response = self.tool_router.call(call).await?;
        if let CallToolResponse::Complete(result) = &mut response {
            fork.answer(&tool, result);
        }
        Ok(response)
    }
}

/// Serves MCP on stdin/stdout until the client closes the session. A message longer than
/// twice `max_write_bytes` plus 64 KiB is answered with a JSON-RPC error and not read
/// ([`transport`]).
pub async fn serve_stdio(server: Server, max_write_bytes: u64) -> Result<(), McpError> {
    let limit = transport::max_message_bytes(max_write_bytes);
    let running = server
        .serve(transport::Bounded::stdio(limit))
        .await
        .map_err(|e| McpError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::Session(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ErrorCode;

    /// The tools offered whatever the config says.
    fn always() -> Vec<&'static str> {
        TOOLS
            .into_iter()
            .filter(|t| *t != PUSH_TOOL && *t != RUN_TOOL && !SANDBOX_TOOLS.contains(t))
            .collect()
    }

    fn names(allow_push: bool) -> Vec<String> {
        let mut n = Server::new(Client::new("/nonexistent.sock"), allow_push).tool_names();
        n.sort();
        n
    }

    #[test]
    fn git_push_is_a_tool_only_when_allowed() {
        assert_eq!(names(false), always());
        let mut with_push = always();
        with_push.push(PUSH_TOOL);
        with_push.sort();
        assert_eq!(names(true), with_push);
    }

    #[test]
    fn every_tool_is_in_the_list() {
        let mut routed: Vec<String> = Server::tool_router()
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        routed.sort();
        assert_eq!(routed, TOOLS);
    }

    #[test]
    fn a_confined_server_offers_only_the_tools_that_stay_in_its_fork() {
        let fork = Fork::new("try-a").unwrap();
        let mut offered = Server::confined(Client::new("/nonexistent.sock"), fork).tool_names();
        offered.sort();
        let want: Vec<&str> = TOOLS.into_iter().filter(|t| scope::offers(t)).collect();
        assert_eq!(offered, want);
        for other in [
            "fork",
            "merge",
            "update",
            "git_push",
            "staged_list",
            "mirror_push",
        ] {
            assert!(!offered.iter().any(|t| t == other), "{other} is offered");
        }
        assert!(offered.len() >= 16, "{offered:?}");
    }

    #[test]
    fn sandbox_tools_are_offered_only_when_allowed() {
        let mut all: Vec<String> =
            Server::with_switches(Client::new("/nonexistent.sock"), false, true).tool_names();
        all.sort();
        let mut want: Vec<&str> = always().into_iter().chain(SANDBOX_TOOLS).collect();
        want.sort();
        assert_eq!(all, want);
    }

    #[test]
    fn run_is_offered_only_when_allowed() {
        let switches = Switches {
            allow_run: true,
            ..Switches::default()
        };
        let mut all: Vec<String> =
            Server::with(Client::new("/nonexistent.sock"), switches).tool_names();
        all.sort();
        let mut want: Vec<&str> = always().into_iter().chain([RUN_TOOL]).collect();
        want.sort();
        assert_eq!(all, want);
    }

    #[test]
    fn api_errors_keep_their_code_message_and_path() {
        let r = failure(ClientError::Api {
            code: ErrorCode::NotUnique,
            message: "/workspace/a: occurs 2 times".into(),
            path: Some("/workspace/a".into()),
        });
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.structured_content,
            Some(
                json!({"code": "NOT_UNIQUE", "message": "/workspace/a: occurs 2 times",
                        "path": "/workspace/a"})
            )
        );
        let r = failure(ClientError::NotRunning {
            socket: "/run/s.sock".into(),
            reason: "connection refused".into(),
        });
        let err = r.structured_content.unwrap();
        assert_eq!(err["code"], json!("DAEMON_NOT_RUNNING"));
        assert!(err.get("path").is_none(), "{err}");
    }

    #[test]
    fn an_error_about_no_path_has_no_path_field() {
        let r = failure(ClientError::Api {
            code: ErrorCode::InvalidArgument,
            message: "limit: must be between 1 and 1000".into(),
            path: None,
        });
        assert_eq!(
            r.structured_content,
            Some(
                json!({"code": "INVALID_ARGUMENT", "message": "limit: must be between 1 and 1000"})
            )
        );
    }

    #[test]
    fn the_help_names_every_tool_once() {
        let help = tools_help();
        let mut listed: Vec<&str> = help
            .lines()
            .filter(|l| l.starts_with("  "))
            .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
            .filter(|w| !w.is_empty())
            .collect();
        listed.sort();
        assert_eq!(listed, TOOLS, "{help}");
        assert!(help.contains("allow_push = true`"), "{help}");
        assert!(help.lines().all(|l| l.len() <= 80), "{help}");
    }

    #[test]
    fn every_tool_declares_an_object_output_schema() {
        let router = Server::tool_router();
        for tool in router.list_all() {
            let schema = tool
                .output_schema
                .unwrap_or_else(|| panic!("{} has no outputSchema", tool.name));
            assert_eq!(schema.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(
                schema
                    .get("properties")
                    .is_some_and(|p| p.as_object().is_some_and(|o| !o.is_empty())),
                "{}: {schema:?}",
                tool.name
            );
        }
    }

    #[test]
    fn a_truncated_read_says_where_to_go_on() {
        let r = read_answer(
            br#"{"path":"/workspace/a","content":"b\n","offset":2,"lines":1,"total_lines":3,"truncated":true,"size":6}"#,
        );
        let text = r.content[0].as_text().unwrap().text.clone();
        assert_eq!(
            text,
            "b\n[wardfs: lines 2-2 of 3 shown; call read with offset=3 for more]"
        );
        assert_eq!(r.structured_content.unwrap()["total_lines"], json!(3));
    }
}
