//! Commands run in a sandbox with the workspace in step (`wardfs run --sandbox`, `POST /v1/run`).
//!
//! A run makes or resumes the sandbox (as any use does), pushes what changed in the workspace
//! since the last push ([`Registry::push`]), starts the command in the mirrored directory
//! through sandbox-agent's process routes ([`crate::sandbox::agent::process`]), passes on what
//! it prints as it prints it (polled: a new chunk is seen within 50 ms) through the run's
//! [`log`], and once it ended pulls what it changed back ([`Registry::pull`]: each change
//! journaled `via sandbox`, conflicts kept on both sides), then records the run in the journal
//! (op `sandbox-run`, the command as its detail) and in the state database's `runs` (`wardfs
//! runs`).
//!
//! Phases: [`Registry::start_run`] checks the arguments (`plan_run`), takes the sandbox's run
//! slot, pushes, attaches and starts the command; a task of its own then follows it to its end
//! (`follow`), pulls and records (`finish_run`). Whoever started it follows its log, and may go
//! away and come back with the run's id ([`Registry::run_log`]).
//!
//! Bounds: one run per sandbox at a time (CONFLICT for the next: the mirror is one tree) unless
//! every run holding it asked for `parallel` (then at most [`MAX_PARALLEL`]); a deadline (the
//! run's `timeout_secs`, else `limits.run_timeout_secs`) at which the remote process is killed,
//! as it is when the run is cancelled or nobody followed it for `limits.run_reconnect_secs`; the output kept for the
//! result is the last `limits.run_output_bytes` of each stream, the rest counted; a log keeps
//! at most [`log::LOG_BYTES`] past what its followers read, and a follower that lags further
//! slows the polling rather than growing the daemon.
//!
//! Secrets: `env` names variables of the daemon's environment, each of which must be listed in
//! the sandbox's `run_env`; their values are read at the start of the run and travel only in
//! the request that starts the command, never into the journal, the state database, a log or
//! an error. In what the command prints, they are masked ([`output::Masker`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::agent::process::{Chunk, Stream};
use super::agent::SandboxAgent;
use super::mirror::{Conflict, ProgressFn};
use super::registry::{MirrorRequest, Registry, SandboxError};
use crate::core::provider::ExecRequest;
use crate::core::{text, VPath, ZoneId};

use crate::state::{Origin, RunRow, SandboxRow, Via, RUN_OUTPUT_KEPT};

pub mod log;
mod output;

pub use log::{Follower, Line, RunEnd, RunLog};
use output::{Masker, Output};

/// The shortest and longest pause between two polls of a running command.
const POLL_MIN: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);
/// How often a long run marks its sandbox used (so it is not taken for idle).
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// The journal op of a run.
pub const RUN_OP: &str = "sandbox-run";
/// Who the changes a run brings back are from.
const RUN_ORIGIN: Origin = Origin {
    via: Via::Sandbox,
    pid: None,
    uid: None,
};

/// A command to run in a sandbox.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The sandbox's name.
    pub sandbox: String,
    /// The command and its arguments (not through a shell: `["sh", "-c", "…"]` for one).
    pub command: Vec<String>,
    /// Where it runs, relative to the mirrored directory (default: that directory). It cannot
    /// climb out of it.
    #[serde(default)]
    pub cwd: Option<String>,
    /// NAMES of the daemon's environment variables passed to the command, each listed in the
    /// sandbox's `run_env`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds the command may run (default `limits.run_timeout_secs`; 1 to 86400); then it is
    /// killed.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Neither push before nor pull after: run on the sandbox's files as they are.
    #[serde(default)]
    pub no_sync: bool,
    /// May run while other `parallel` runs hold the sandbox (they share its mirrored tree:
    /// each pushes before and pulls after, one transfer at a time). Default: alone.
    #[serde(default)]
    pub parallel: bool,
}

/// How a run ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct RunResult {
    /// The run's id (as in `started`).
    pub run_id: String,
    /// The command's exit code; null when it was killed (the deadline, the caller gone) or
    /// ended by a signal.
    pub exit_code: Option<i32>,
    /// Killed at its deadline.
    pub timed_out: bool,
    /// Killed because it was cancelled (`POST /v1/runs/{id}/cancel`, Ctrl-C) or nobody followed
    /// it for `limits.run_reconnect_secs`.
    pub cancelled: bool,
    /// From the start of the command to its end, in milliseconds.
    pub duration_ms: u64,
    /// Bytes the command wrote to stdout and stderr (all of them, kept or not).
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// The last `limits.run_output_bytes` of each stream (invalid UTF-8 replaced).
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// Files sent to the sandbox before the run.
    pub files_pushed: u64,
    /// Paths of the workspace the pull after the run changed (written or deleted), relative to
    /// the zone.
    pub changed: Vec<String>,
    /// Paths changed on both sides, left as they are (the sandbox's copy saved beside).
    pub conflicts: Vec<Conflict>,
}

/// What a run reports as it goes, in order: `started`, `stdout`/`stderr` chunks, `synced`;
/// then its end ([`RunEnd`]: `exited` with the [`RunResult`], or `error`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum RunEvent {
    /// The command started.
    Started {
        run_id: String,
        sandbox: String,
        /// The remote directory it runs in.
        cwd: String,
        /// Files the push before it sent.
        files_pushed: u64,
    },
    /// A piece of its standard output (UTF-8; invalid bytes replaced).
    Stdout { data: String },
    /// A piece of its standard error.
    Stderr { data: String },
    /// The pull after it is done.
    Synced {
        /// Paths it changed, as the pull wrote or deleted them.
        changed: Vec<String>,
        conflicts: Vec<Conflict>,
    },
}

/// Parallel runs one sandbox takes at once.
const MAX_PARALLEL: usize = 16;
/// Logs of ended runs kept in memory, besides those of the runs going on.
const KEPT_ENDED: usize = 16;

/// The runs going on, the logs of the latest, and what each sandbox's runs may pass in.
#[derive(Default)]
pub(super) struct Runs {
    busy: Mutex<HashMap<String, Busy>>,
    run_env: Mutex<HashMap<String, Vec<String>>>,
    next: std::sync::atomic::AtomicU64,
    logs: Mutex<VecDeque<Arc<RunLog>>>,
}

/// How a sandbox's run slot is held.
enum Busy {
    /// By one run, alone.
    Alone,
    /// By this many runs that asked for `parallel`.
    Parallel(usize),
}

impl Runs {
    /// Sets the config file's `run_env` of each sandbox.
    pub(super) fn set_env(&self, sandboxes: &[crate::config::SandboxSettings]) {
        let mut m = self.run_env.lock().unwrap_or_else(|p| p.into_inner());
        *m = sandboxes
            .iter()
            .map(|s| (s.name.clone(), s.run_env.clone()))
            .collect();
    }

    /// Keeps a new run's log, dropping the oldest ended ones past [`KEPT_ENDED`].
    fn keep(&self, log: Arc<RunLog>) {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.push_back(log);
        let ended = logs.iter().filter(|l| l.is_ended()).count();
        let mut extra = ended.saturating_sub(KEPT_ENDED);
        logs.retain(|l| {
            let drop = extra > 0 && l.is_ended();
            extra -= usize::from(drop);
            !drop
        });
    }

    /// The kept logs, newest first.
    #[cfg(test)]
    fn logs(&self) -> Vec<Arc<RunLog>> {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.iter().rev().cloned().collect()
    }

    /// The kept log of run `id`.
    fn log(&self, id: &str) -> Option<Arc<RunLog>> {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.iter().find(|l| l.id == id).cloned()
    }
}

/// Holds a sandbox's run slot; frees it when dropped.
struct Slot {
    reg: Arc<Registry>,
    name: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut busy = self.reg.runs.busy.lock().unwrap_or_else(|p| p.into_inner());
        free_slot(&mut busy, &self.name);
    }
}

/// A run's arguments, checked.
struct Plan {
    cwd: String,
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    timeout: Duration,
}

/// A command started, for the task that follows it to its end.
struct Started {
    req: RunRequest,
    timeout: Duration,
    cwd: String,
    remote: Arc<SandboxAgent>,
    process: String,
    secrets: Vec<String>,
    started_at: i64,
    files_pushed: u64,
    log: Arc<RunLog>,
}

/// What the polling loop saw.
struct Ended {
    exit_code: Option<i32>,
    timed_out: bool,
    cancelled: bool,
    duration_ms: u64,
    stdout: Output,
    stderr: Output,
}

/// Takes sandbox `name`'s run slot in `busy` (shared with other `parallel` runs when
/// `parallel`), or says which run holds it.
fn take_slot(
    busy: &mut HashMap<String, Busy>,
    name: &str,
    parallel: bool,
) -> Result<(), SandboxError> {
    match (busy.get_mut(name), parallel) {
        (None, false) => {
            busy.insert(name.to_string(), Busy::Alone);
        }
        (None, true) => {
            busy.insert(name.to_string(), Busy::Parallel(1));
        }
        (Some(Busy::Parallel(n)), true) if *n < MAX_PARALLEL => *n += 1,
        (Some(Busy::Parallel(_)), true) => {
            return Err(SandboxError::Lifecycle {
                name: name.to_string(),
                rule: format!(
                    "has {MAX_PARALLEL} parallel runs already (the most one sandbox takes); \
                     wait for one to end"
                ),
            })
        }
        (Some(_), _) => {
            return Err(SandboxError::Lifecycle {
                name: name.to_string(),
                rule: "is running a command already (one run per sandbox at a time: its \
                       mirror is one tree); wait for it to end, or start both with \
                       --parallel (`parallel`)"
                    .into(),
            })
        }
    }
    Ok(())
}

/// Gives back one hold of sandbox `name`'s run slot in `busy` (see [`take_slot`]).
fn free_slot(busy: &mut HashMap<String, Busy>, name: &str) {
    if let Some(Busy::Parallel(n)) = busy.get_mut(name) {
        if *n > 1 {
            *n -= 1;
            return;
        }
    }
    busy.remove(name);
}

fn invalid(key: &str, rule: String) -> SandboxError {
    SandboxError::Invalid {
        key: key.to_string(),
        rule,
    }
}

/// Returns `cwd` as a relative path beneath the mirrored directory (`""` for itself), or why
/// it is refused.
fn relative_cwd(cwd: Option<&str>) -> Result<String, SandboxError> {
    let Some(cwd) = cwd else {
        return Ok(String::new());
    };
    if cwd.starts_with('/') {
        return Err(invalid(
            "cwd",
            format!(
                "{} is absolute; give a directory relative to the mirrored one",
                text::name(cwd)
            ),
        ));
    }
    let mut parts = Vec::new();
    for part in cwd.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(invalid(
                    "cwd",
                    format!("{} climbs out of the mirrored directory", text::name(cwd)),
                ))
            }
            p if p.contains('\0') => {
                return Err(invalid("cwd", "holds a NUL byte".into()));
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

impl Registry {
    /// Starts `req` (see the module) and returns once its command started, with a follower of
    /// its log (`started` first); the rest goes on in a task of its own, whether anyone follows
    /// or not (for a while: `limits.run_reconnect_secs`). A failure before the command started
    /// is the error, and leaves the sandbox's files pushed at most.
    pub async fn start_run(self: &Arc<Self>, req: RunRequest) -> Result<Follower, SandboxError> {
        self.row(&req.sandbox)?;
        let plan = self.plan_run(&req)?;
        let slot = self.claim_run(&req.sandbox, req.parallel)?;
        let files_pushed = if req.no_sync {
            0
        } else {
            self.push(&self.mirror_request(&req.sandbox), quiet())
                .await?
                .files_sent
        };
        let (remote, def) = self.attached_agent(&req.sandbox).await?;
        let remote_cwd = if plan.cwd.is_empty() {
            def.root.clone()
        } else {
            format!("{}/{}", def.root.trim_end_matches('/'), plan.cwd)
        };
        let secrets = plan.env.iter().map(|(_, v)| v.clone()).collect();
        let exec = ExecRequest {
            command: plan.program,
            args: plan.args,
            cwd: Some(remote_cwd.clone()),
            env: plan.env,
            timeout: None,
        };
        let started_at = self.now();
        let process = remote
            .spawn(&exec)
            .await
            .map_err(|e| self.lost(&req.sandbox, e))?;
        drop(exec);
        let n = self
            .runs
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = RunLog::new(
            format!("{}-{:x}-{n}", req.sandbox, self.now()),
            req.sandbox.clone(),
        );
        log.push(RunEvent::Started {
            run_id: log.id.clone(),
            sandbox: req.sandbox.clone(),
            cwd: remote_cwd,
            files_pushed,
        });
        let follower = log.follow(0);
        self.runs.keep(log.clone());
        let started = Started {
            req,
            timeout: plan.timeout,
            cwd: plan.cwd,
            remote,
            process,
            secrets,
            started_at,
            files_pushed,
            log,
        };
        let reg = self.clone();
        tokio::spawn(async move {
            let end = reg.finish_run(&started).await;
            // Free the sandbox before anyone hears the end: the next run may start at once.
            drop(slot);
            started.log.end(end);
        });
        Ok(follower)
    }

    /// The log of run `id`, while it is kept (the runs going on and the latest ended ones,
    /// since the daemon started).
    pub fn run_log(&self, id: &str) -> Option<Arc<RunLog>> {
        self.runs.log(id)
    }

    /// Checks a run's arguments.
    fn plan_run(&self, req: &RunRequest) -> Result<Plan, SandboxError> {
        let cwd = relative_cwd(req.cwd.as_deref())?;
        let env = self.run_env(req)?;
        let timeout = self.run_timeout(req)?;
        let (program, args) = match req.command.split_first() {
            Some((p, a)) if !p.is_empty() => (p.clone(), a.to_vec()),
            _ => return Err(invalid("command", "is empty: name a program to run".into())),
        };
        Ok(Plan {
            cwd,
            program,
            args,
            env,
            timeout,
        })
    }

    /// Follows a started command to its end, pulls what it changed and records the run.
    async fn finish_run(&self, s: &Started) -> RunEnd {
        let name = &s.req.sandbox;
        let ended = self.follow(s).await;
        if let Err(e) = s.remote.forget(&s.process).await {
            tracing::debug!(sandbox = %name, "could not forget process {}: {e}", s.process);
        }
        let failed = |e: SandboxError| {
            tracing::warn!(sandbox = %name, run = %s.log.id, "run failed: {e}");
            RunEnd::Failed {
                code: e.code(),
                message: e.to_string(),
            }
        };
        let ended = match ended {
            Ok(e) => e,
            Err(e) => return failed(e),
        };
        let mut result = RunResult {
            run_id: s.log.id.clone(),
            exit_code: ended.exit_code,
            timed_out: ended.timed_out,
            cancelled: ended.cancelled,
            duration_ms: ended.duration_ms,
            stdout_bytes: ended.stdout.tail.total,
            stderr_bytes: ended.stderr.tail.total,
            stdout_tail: ended.stdout.tail.text(),
            stderr_tail: ended.stderr.tail.text(),
            files_pushed: s.files_pushed,
            ..RunResult::default()
        };
        if !s.req.no_sync {
            let pulled = match self.pull_for_run(s).await {
                Ok(p) => p,
                Err(e) => return failed(e),
            };
            result.changed = pulled.changed.iter().map(|(p, _, _)| p.clone()).collect();
            result.conflicts = pulled.conflicts;
            s.log.push(RunEvent::Synced {
                changed: result.changed.clone(),
                conflicts: result.conflicts.clone(),
            });
        }
        self.journal_run(&s.req, &s.cwd, &result);
        self.record_run(&s.req, &s.cwd, s.started_at, &result);
        if let Err(e) = self.mark_used(name, self.now()) {
            tracing::warn!(sandbox = %name, "could not mark the sandbox used: {e}");
        }
        tracing::info!(sandbox = %name, run = %result.run_id, exit_code = ?result.exit_code, timed_out = result.timed_out, cancelled = result.cancelled, ms = result.duration_ms, changed = result.changed.len(), "run");
        RunEnd::Exited(result)
    }

    /// Pulls what a run changed, each change journaled `via sandbox`.
    async fn pull_for_run(&self, s: &Started) -> Result<super::mirror::PullSummary, SandboxError> {
        self.pull_as(&self.mirror_request(&s.req.sandbox), quiet(), RUN_ORIGIN)
            .await
    }

    /// Checks the variables a run names against the sandbox's `run_env` and reads them.
    fn run_env(&self, req: &RunRequest) -> Result<Vec<(String, String)>, SandboxError> {
        let allowed = {
            let m = self.runs.run_env.lock().unwrap_or_else(|p| p.into_inner());
            m.get(&req.sandbox).cloned().unwrap_or_default()
        };
        let mut env = Vec::with_capacity(req.env.len());
        for name in &req.env {
            if !crate::config::is_env_name(name) {
                return Err(invalid(
                    "env",
                    "must list NAMES of environment variables (letters, digits, _)".into(),
                ));
            }
            if !allowed.contains(name) {
                return Err(invalid(
                    "env",
                    format!(
                        "{name} is not in sandboxes.{}.run_env of the config file (a run passes only the variables listed there)",
                        req.sandbox
                    ),
                ));
            }
            let value = std::env::var(name).map_err(|_| {
                invalid(
                    "env",
                    format!("{name} is not set in the daemon's environment"),
                )
            })?;
            env.push((name.clone(), value));
        }
        Ok(env)
    }

    fn run_timeout(&self, req: &RunRequest) -> Result<Duration, SandboxError> {
        match req.timeout_secs {
            None => Ok(Duration::from_secs(
                self.zones.limits().run_timeout_secs.max(1),
            )),
            Some(s) if (1..=86_400).contains(&s) => Ok(Duration::from_secs(s)),
            Some(s) => Err(invalid(
                "timeout_secs",
                format!("{s} must be between 1 and 86400"),
            )),
        }
    }

    /// Takes the sandbox's run slot (shared with other `parallel` runs when `parallel`), or
    /// says a run holds it.
    fn claim_run(self: &Arc<Self>, name: &str, parallel: bool) -> Result<Slot, SandboxError> {
        let mut busy = self.runs.busy.lock().unwrap_or_else(|p| p.into_inner());
        take_slot(&mut busy, name, parallel)?;
        Ok(Slot {
            reg: self.clone(),
            name: name.to_string(),
        })
    }

    fn mirror_request(&self, sandbox: &str) -> MirrorRequest {
        MirrorRequest {
            sandbox: sandbox.to_string(),
            zone: None,
            to: None,
            from: None,
            full_hash: false,
            progress: false,
        }
    }

    /// Attaches the sandbox (under its lock, released before the command starts).
    async fn attached_agent(
        &self,
        name: &str,
    ) -> Result<(Arc<SandboxAgent>, SandboxRow), SandboxError> {
        let session = self.session(name);
        let mut attached = session.attached.lock().await;
        self.attach(name, &mut attached).await
    }

    /// The error of a sandbox that failed while a command ran in it.
    fn lost(&self, name: &str, e: crate::core::provider::SandboxFsError) -> SandboxError {
        SandboxError::Remote {
            name: name.to_string(),
            source: Box::new(e),
        }
    }

    /// Passes on what the process prints until it ends, its deadline passes (killed) or the
    /// run is cancelled or abandoned (killed).
    async fn follow(&self, s: &Started) -> Result<Ended, SandboxError> {
        let name = &s.req.sandbox;
        let (remote, id, log) = (&s.remote, &s.process, &s.log);
        let keep = self.zones.limits().run_output_bytes as usize;
        let grace = Duration::from_secs(self.zones.limits().run_reconnect_secs);
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + s.timeout;
        let secrets = || s.secrets.iter().map(String::as_str);
        let mut ended = Ended {
            exit_code: None,
            timed_out: false,
            cancelled: false,
            duration_ms: 0,
            stdout: Output::new(keep, Masker::new(secrets())),
            stderr: Output::new(keep, Masker::new(secrets())),
        };
        let mut since = 0u64;
        let mut pause = POLL_MIN;
        let mut kept_alive = Instant::now();
        loop {
            let state = remote
                .process_state(id)
                .await
                .map_err(|e| self.lost(name, e))?;
            let chunks = remote
                .process_output(id, since)
                .await
                .map_err(|e| self.lost(name, e))?;
            pause = if chunks.is_empty() {
                (pause * 2).min(POLL_MAX)
            } else {
                POLL_MIN
            };
            for Chunk {
                sequence,
                stream,
                data,
            } in chunks
            {
                since = since.max(sequence);
                let text = ended.output(stream).feed(&data);
                log_output(log, stream, text);
            }
            if !state.running {
                for stream in [Stream::Stdout, Stream::Stderr] {
                    let text = ended.output(stream).finish();
                    log_output(log, stream, text);
                }
                ended.exit_code = state.exit_code;
                break;
            }
            let now = tokio::time::Instant::now();
            ended.cancelled = log.stop(grace).is_some();
            ended.timed_out = now >= deadline && !ended.cancelled;
            if ended.cancelled || ended.timed_out {
                remote.kill(id).await.map_err(|e| self.lost(name, e))?;
                break;
            }
            if kept_alive.elapsed() >= KEEP_ALIVE {
                self.mark_used(name, self.now())?;
                kept_alive = Instant::now();
            }
            let left = deadline.saturating_duration_since(now);
            log.room(left).await;
            tokio::time::sleep(pause.min(left)).await;
        }
        ended.duration_ms = start.elapsed().as_millis() as u64;
        Ok(ended)
    }

    /// Records the run in the state database (`wardfs runs`); a failure is logged, never the
    /// run's error.
    fn record_run(&self, req: &RunRequest, cwd: &str, started_at: i64, r: &RunResult) {
        let row = RunRow {
            id: r.run_id.clone(),
            sandbox: req.sandbox.clone(),
            started_at,
            command: req.command.clone(),
            cwd: cwd.to_string(),
            exit_code: r.exit_code,
            timed_out: r.timed_out,
            cancelled: r.cancelled,
            duration_ms: r.duration_ms,
            stdout_bytes: r.stdout_bytes,
            stderr_bytes: r.stderr_bytes,
            changed: r.changed.clone(),
            changed_total: r.changed.len() as u64,
            stdout_tail: Some(text::tail(&r.stdout_tail, RUN_OUTPUT_KEPT).to_string()),
            stderr_tail: Some(text::tail(&r.stderr_tail, RUN_OUTPUT_KEPT).to_string()),
        };
        if let Err(e) = self.zones.db().record_run(&row) {
            tracing::warn!(sandbox = %req.sandbox, run = %r.run_id, "could not record the run: {e}");
        }
    }

    /// Returns the newest `limit` runs (of `sandbox` when given), newest first; with the last
    /// bytes of their output when `output`.
    pub fn runs(
        &self,
        sandbox: Option<&str>,
        limit: usize,
        output: bool,
    ) -> Result<Vec<RunRow>, SandboxError> {
        Ok(self.zones.db().runs(sandbox, limit, output)?)
    }

    /// Records the run in the journal: op `sandbox-run` at its directory, the command (its
    /// names escaped, cut at 1,000 bytes) and how it ended as the detail.
    fn journal_run(&self, req: &RunRequest, cwd: &str, r: &RunResult) {
        let Ok(vp) = VPath::new(ZoneId::Workspace, cwd) else {
            return;
        };
        let detail = format!(
            "sandbox {} run {}: {} in {} ms, {} changed: {}",
            req.sandbox,
            r.run_id,
            how_it_ended(r),
            r.duration_ms,
            text::count(r.changed.len() as u64, "file"),
            text::head(&shown_command(&req.command), 1000)
        );
        self.zones
            .record_event(&vp, RUN_OP, &detail, Origin::INTERNAL);
    }
}

/// The command as a person reads it: its words, each escaped, joined by spaces.
pub fn shown_command(command: &[String]) -> String {
    command
        .iter()
        .map(|a| text::name(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a run ended, in a few words: `exit 0`, `timed out`, `cancelled`, `killed`.
pub fn how_it_ended(r: &RunResult) -> String {
    match (r.exit_code, r.timed_out, r.cancelled) {
        (_, true, _) => "timed out".to_string(),
        (_, _, true) => "cancelled".to_string(),
        (Some(c), _, _) => format!("exit {c}"),
        (None, _, _) => "killed".to_string(),
    }
}

impl Ended {
    fn output(&mut self, stream: Stream) -> &mut Output {
        match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        }
    }
}

/// Appends what a stream printed to the log (nothing when it is empty).
fn log_output(log: &RunLog, stream: Stream, text: String) {
    if text.is_empty() {
        return;
    }
    log.push(match stream {
        Stream::Stdout => RunEvent::Stdout { data: text },
        Stream::Stderr => RunEvent::Stderr { data: text },
    });
}

/// Progress nobody reads.
fn quiet() -> ProgressFn {
    ProgressFn(Arc::new(|_| {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_runs_share_a_sandbox_up_to_a_bound_and_never_with_one_alone() {
        let slots = || Mutex::new(HashMap::<String, Busy>::new());
        let busy = slots();
        let take = |parallel: bool| take_slot(&mut busy.lock().unwrap(), "dev", parallel);
        assert!(take(true).is_ok());
        assert!(take(false).is_err(), "alone, while a parallel run holds it");
        for _ in 1..MAX_PARALLEL {
            assert!(take(true).is_ok());
        }
        let e = take(true).unwrap_err().to_string();
        assert!(e.contains("parallel runs already"), "{e}");
        let alone = slots();
        assert!(take_slot(&mut alone.lock().unwrap(), "dev", false).is_ok());
        assert!(take_slot(&mut alone.lock().unwrap(), "dev", true).is_err());
        // Given back: each parallel hold, then the last frees the sandbox for a run alone.
        for _ in 1..MAX_PARALLEL {
            free_slot(&mut busy.lock().unwrap(), "dev");
        }
        assert!(take(false).is_err(), "one parallel run holds it still");
        free_slot(&mut busy.lock().unwrap(), "dev");
        assert!(take(false).is_ok());
    }

    #[test]
    fn the_latest_ended_logs_are_kept_with_every_run_going_on() {
        let runs = Runs::default();
        let going = RunLog::new("going".into(), "dev".into());
        runs.keep(going.clone());
        for n in 0..KEPT_ENDED + 5 {
            let log = RunLog::new(format!("r{n}"), "dev".into());
            log.end(RunEnd::Failed {
                code: crate::core::ErrorCode::Internal,
                message: String::new(),
            });
            runs.keep(log);
        }
        let kept: Vec<String> = runs.logs().iter().map(|l| l.id.clone()).collect();
        assert_eq!(kept.len(), KEPT_ENDED + 1, "{kept:?}");
        assert_eq!(kept[0], format!("r{}", KEPT_ENDED + 4), "newest first");
        assert!(kept.contains(&"going".to_string()), "{kept:?}");
        assert!(!kept.contains(&"r4".to_string()), "{kept:?}");
    }

    #[test]
    fn cwd_stays_beneath_the_mirrored_directory() {
        assert_eq!(relative_cwd(None).unwrap(), "");
        assert_eq!(relative_cwd(Some("./a//b/")).unwrap(), "a/b");
        for bad in ["/etc", "..", "a/../../b", "a/.."] {
            let e = relative_cwd(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("cwd"), "{bad}: {e}");
        }
    }
}
