//! Commands run in a sandbox with the workspace in step (`wardfs run --sandbox`, `POST /v1/run`).
//!
//! A run makes or resumes the sandbox (as any use does), pushes what changed in the workspace
//! since the last push ([`Registry::push`]), starts the command in the mirrored directory
//! through sandbox-agent's process routes ([`crate::sandbox::agent::process`]), passes on what
//! it prints as it prints it (polled: a new chunk is seen within 50 ms), and once it ended pulls
//! what it changed back ([`Registry::pull`]: journaled, conflicts kept on both sides), then
//! records the run in the journal (op `sandbox-run`, the command as its detail) and in the
//! state database's `runs` (`wardfs runs`).
//!
//! Bounds: one run per sandbox at a time (CONFLICT for the next: the mirror is one tree); a
//! deadline (the run's `timeout_secs`, else `limits.run_timeout_secs`) at which the remote
//! process is killed, as it is when the caller stops listening; the output kept for the result
//! is the last `limits.run_output_bytes` of each stream, the rest counted. What streams to the
//! caller goes through a small bounded channel, so a slow reader slows the polling rather than
//! growing the daemon.
//!
//! Secrets: `env` names variables of the daemon's environment, each of which must be listed in
//! the sandbox's `run_env`; their values are read at the start of the run and travel only in
//! the request that starts the command, never into the journal, the state database, a log or
//! an error.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::agent::process::{Chunk, Stream};
use super::agent::SandboxAgent;
use super::mirror::{Conflict, ProgressFn};
use super::registry::{MirrorRequest, Registry, SandboxError};
use crate::core::provider::ExecRequest;
use crate::core::{text, VPath, ZoneId};
use crate::state::{Origin, RunRow, SandboxRow};

/// The shortest and longest pause between two polls of a running command.
const POLL_MIN: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);
/// How often a long run marks its sandbox used (so it is not taken for idle).
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// The journal op of a run.
pub const RUN_OP: &str = "sandbox-run";

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
    /// Killed because the caller stopped listening.
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

/// What a run reports as it goes, in order: `started`, `stdout`/`stderr` chunks, `synced`,
/// then the caller sends `exited` (the [`RunResult`]).
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

/// The runs in progress and what each sandbox's runs may pass in.
#[derive(Default)]
pub(super) struct Runs {
    busy: Mutex<HashSet<String>>,
    run_env: Mutex<HashMap<String, Vec<String>>>,
    next: std::sync::atomic::AtomicU64,
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
}

/// Holds a sandbox's run slot; frees it when dropped.
struct Slot<'a> {
    runs: &'a Runs,
    name: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut busy = self.runs.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.remove(&self.name);
    }
}

/// The last bytes of a stream and how many there were.
struct Tail {
    keep: usize,
    bytes: VecDeque<u8>,
    total: u64,
}

impl Tail {
    fn new(keep: usize) -> Tail {
        Tail {
            keep,
            bytes: VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let data = &data[data.len().saturating_sub(self.keep)..];
        let over = (self.bytes.len() + data.len()).saturating_sub(self.keep);
        self.bytes.drain(..over);
        self.bytes.extend(data);
    }

    fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        String::from_utf8_lossy(&[a, b].concat()).into_owned()
    }
}

/// Turns chunks into text without splitting a character across two chunks.
#[derive(Default)]
struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    fn feed(&mut self, data: &[u8]) -> String {
        self.pending.extend_from_slice(data);
        let keep = match std::str::from_utf8(&self.pending) {
            Ok(_) => 0,
            // An incomplete character at the end waits for the next chunk.
            Err(e) if e.error_len().is_none() => self.pending.len() - e.valid_up_to(),
            Err(_) => 0,
        };
        let rest = self.pending.split_off(self.pending.len() - keep);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
}

/// What the polling loop saw.
struct Ended {
    exit_code: Option<i32>,
    timed_out: bool,
    cancelled: bool,
    duration_ms: u64,
    stdout: Tail,
    stderr: Tail,
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
    /// Runs `req` (see the module): events go to `events` as they happen; returns how it
    /// ended once the pull after it is done. A failure before the command started leaves
    /// the sandbox's files pushed at most; a sandbox lost while the command runs ends the run
    /// with its error and nothing pulled.
    pub async fn run(
        &self,
        req: &RunRequest,
        events: mpsc::Sender<RunEvent>,
    ) -> Result<RunResult, SandboxError> {
        let def = self.row(&req.sandbox)?;
        let cwd = relative_cwd(req.cwd.as_deref())?;
        let env = self.run_env(req)?;
        let timeout = self.run_timeout(req)?;
        let (program, args) = match req.command.split_first() {
            Some((p, a)) if !p.is_empty() => (p.clone(), a.to_vec()),
            _ => return Err(invalid("command", "is empty: name a program to run".into())),
        };
        let _slot = self.claim_run(&req.sandbox)?;
        let files_pushed = if req.no_sync {
            0
        } else {
            self.push(&self.mirror_request(&req.sandbox), quiet())
                .await?
                .files_sent
        };
        let (remote, def) = self.attached_agent(&req.sandbox, def).await?;
        let remote_cwd = if cwd.is_empty() {
            def.root.clone()
        } else {
            format!("{}/{cwd}", def.root.trim_end_matches('/'))
        };
        let exec = ExecRequest {
            command: program,
            args,
            cwd: Some(remote_cwd.clone()),
            env,
            timeout: None,
        };
        let started_at = self.now();
        let id = remote
            .spawn(&exec)
            .await
            .map_err(|e| self.lost(&req.sandbox, e))?;
        drop(exec);
        let n = self
            .runs
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let run_id = format!("{}-{:x}-{n}", req.sandbox, self.now());
        let started = RunEvent::Started {
            run_id: run_id.clone(),
            sandbox: req.sandbox.clone(),
            cwd: remote_cwd,
            files_pushed,
        };
        let _ = events.send(started).await;
        let ended = self
            .follow(&req.sandbox, &remote, &id, timeout, &events)
            .await;
        if let Err(e) = remote.forget(&id).await {
            tracing::debug!(sandbox = %req.sandbox, "could not forget process {id}: {e}");
        }
        let ended = ended?;
        let mut result = RunResult {
            run_id,
            exit_code: ended.exit_code,
            timed_out: ended.timed_out,
            cancelled: ended.cancelled,
            duration_ms: ended.duration_ms,
            stdout_bytes: ended.stdout.total,
            stderr_bytes: ended.stderr.total,
            stdout_tail: ended.stdout.text(),
            stderr_tail: ended.stderr.text(),
            files_pushed,
            ..RunResult::default()
        };
        if !req.no_sync {
            let pulled = self
                .pull(&self.mirror_request(&req.sandbox), quiet())
                .await?;
            result.changed = pulled.changed.iter().map(|(p, _, _)| p.clone()).collect();
            result.conflicts = pulled.conflicts;
            let _ = events
                .send(RunEvent::Synced {
                    changed: result.changed.clone(),
                    conflicts: result.conflicts.clone(),
                })
                .await;
        }
        self.journal_run(req, &cwd, &result);
        self.record_run(req, &cwd, started_at, &result);
        self.mark_used(&req.sandbox, self.now())?;
        tracing::info!(sandbox = %req.sandbox, run = %result.run_id, exit_code = ?result.exit_code, timed_out = result.timed_out, cancelled = result.cancelled, ms = result.duration_ms, changed = result.changed.len(), "run");
        Ok(result)
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

    /// Takes the sandbox's run slot, or says a run holds it.
    fn claim_run(&self, name: &str) -> Result<Slot<'_>, SandboxError> {
        let mut busy = self.runs.busy.lock().unwrap_or_else(|p| p.into_inner());
        if !busy.insert(name.to_string()) {
            return Err(SandboxError::Lifecycle {
                name: name.to_string(),
                rule: "is running a command already (one run per sandbox at a time: its mirror is one tree); wait for it to end".into(),
            });
        }
        Ok(Slot {
            runs: &self.runs,
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
        _def: SandboxRow,
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

    /// Passes on what the process `id` prints until it ends, its deadline passes (killed) or
    /// the caller stops listening (killed).
    async fn follow(
        &self,
        name: &str,
        remote: &SandboxAgent,
        id: &str,
        timeout: Duration,
        events: &mpsc::Sender<RunEvent>,
    ) -> Result<Ended, SandboxError> {
        let keep = self.zones.limits().run_output_bytes as usize;
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut ended = Ended {
            exit_code: None,
            timed_out: false,
            cancelled: false,
            duration_ms: 0,
            stdout: Tail::new(keep),
            stderr: Tail::new(keep),
        };
        let (mut out_text, mut err_text) = (Utf8Carry::default(), Utf8Carry::default());
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
                let (tail, carry) = match stream {
                    Stream::Stdout => (&mut ended.stdout, &mut out_text),
                    Stream::Stderr => (&mut ended.stderr, &mut err_text),
                };
                tail.push(&data);
                let text = carry.feed(&data);
                if ended.cancelled || text.is_empty() {
                    continue;
                }
                let event = match stream {
                    Stream::Stdout => RunEvent::Stdout { data: text },
                    Stream::Stderr => RunEvent::Stderr { data: text },
                };
                match tokio::time::timeout_at(deadline, events.send(event)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => ended.cancelled = true,
                    Err(_) => break,
                }
            }
            if !state.running {
                ended.exit_code = state.exit_code;
                break;
            }
            if events.is_closed() {
                ended.cancelled = true;
            }
            let late = tokio::time::Instant::now() >= deadline;
            if late || ended.cancelled {
                ended.timed_out = late && !ended.cancelled;
                remote.kill(id).await.map_err(|e| self.lost(name, e))?;
                break;
            }
            if kept_alive.elapsed() >= KEEP_ALIVE {
                self.mark_used(name, self.now())?;
                kept_alive = Instant::now();
            }
            tokio::time::sleep(
                pause.min(deadline.saturating_duration_since(tokio::time::Instant::now())),
            )
            .await;
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
        };
        if let Err(e) = self.zones.db().record_run(&row) {
            tracing::warn!(sandbox = %req.sandbox, run = %r.run_id, "could not record the run: {e}");
        }
    }

    /// Returns the newest `limit` runs (of `sandbox` when given), newest first.
    pub fn runs(&self, sandbox: Option<&str>, limit: usize) -> Result<Vec<RunRow>, SandboxError> {
        Ok(self.zones.db().runs(sandbox, limit)?)
    }

    /// Records the run in the journal: op `sandbox-run` at its directory, the command (its
    /// names escaped, cut at 1,000 bytes) and how it ended as the detail.
    fn journal_run(&self, req: &RunRequest, cwd: &str, r: &RunResult) {
        let Ok(vp) = VPath::new(ZoneId::Workspace, cwd) else {
            return;
        };
        let command = req
            .command
            .iter()
            .map(|a| text::name(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let ended = match (r.exit_code, r.timed_out, r.cancelled) {
            (_, true, _) => "timed out".to_string(),
            (_, _, true) => "cancelled".to_string(),
            (Some(c), _, _) => format!("exit {c}"),
            (None, _, _) => "killed".to_string(),
        };
        let detail = format!(
            "sandbox {} run {}: {ended} in {} ms, {} changed: {}",
            req.sandbox,
            r.run_id,
            r.duration_ms,
            text::count(r.changed.len() as u64, "file"),
            text::head(&command, 1000)
        );
        self.zones
            .record_event(&vp, RUN_OP, &detail, Origin::INTERNAL);
    }
}

/// Progress nobody reads.
fn quiet() -> ProgressFn {
    ProgressFn(Arc::new(|_| {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_stays_beneath_the_mirrored_directory() {
        assert_eq!(relative_cwd(None).unwrap(), "");
        assert_eq!(relative_cwd(Some("./a//b/")).unwrap(), "a/b");
        for bad in ["/etc", "..", "a/../../b", "a/.."] {
            let e = relative_cwd(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("cwd"), "{bad}: {e}");
        }
    }

    #[test]
    fn tails_keep_the_last_bytes_and_count_all() {
        let mut t = Tail::new(4);
        t.push(b"abc");
        t.push(b"defgh");
        t.push(b"i");
        assert_eq!(t.text(), "fghi");
        assert_eq!(t.total, 9);
        t.push(b"0123456789");
        assert_eq!(t.text(), "6789");
    }

    #[test]
    fn characters_split_across_chunks_are_joined() {
        let mut c = Utf8Carry::default();
        let e = "é".as_bytes();
        assert_eq!(c.feed(&[b'a', e[0]]), "a");
        assert_eq!(c.feed(&[e[1], b'b']), "éb");
        assert_eq!(c.feed(&[0xff, b'c']), "\u{fffd}c");
    }
}
