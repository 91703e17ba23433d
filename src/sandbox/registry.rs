//! The sandbox registry: named sandboxes, their sessions, and the mirror runs against them.
//!
//! Definitions and sessions live in the state database (`state::sandbox`): sandboxes added at
//! run time are stored there, and those of the config file are merged in at start
//! ([`Registry::merge_config`]). The registry keeps, per sandbox, one in-process lock (a tokio
//! mutex) that serialises attaching and mirror runs, and the attached provider while it is in
//! use.
//!
//! Every use starts with a health check ([`SandboxFs::check`]). Recovery depends on the failure:
//! * unreachable or timed out: retried `retries` times with a doubling backoff, then the status
//!   is `error` with the reason and the call fails with `SANDBOX_UNAVAILABLE`;
//! * token rejected (or its variable unset): status `error`, `AUTH_FAILED`, never retried;
//! * the sandbox is gone (the server answers 404 or 410 to its health route): `destroyed`.
//!
//! A sandbox unused for its idle TTL is detached (status `paused`) by [`Registry::cleanup`],
//! which the daemon runs on a schedule; the next use resumes it. A starting daemon holds no
//! connection, so it marks sessions the last one left `active` as `paused`. Times come from the zones'
//! clock (`Zones::now_ms`), the project's one clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::agent::{SandboxAgent, SandboxAgentConfig};
use super::mirror::{
    self, Manifest, MirrorError, MirrorOptions, MirrorProgress, ProgressFn, PullSummary,
    PushSummary,
};
use crate::config::{SandboxSection, SandboxSettings, PROVIDER_SANDBOX_AGENT};
use crate::core::provider::{check_remote_path, SandboxFs, SandboxFsError};
use crate::core::{ErrorCode, ZoneId, Zones};
use crate::state::{SandboxRow, StateError};

/// Session statuses, as stored and reported.
pub const CREATING: &str = "creating";
pub const ACTIVE: &str = "active";
pub const RESUMING: &str = "resuming";
pub const PAUSED: &str = "paused";
pub const ERROR: &str = "error";
pub const DESTROYED: &str = "destroyed";

const ORIGIN_CONFIG: &str = "config";
const ORIGIN_ADDED: &str = "added";

/// A failed registry operation.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "no sandbox named {name:?} (see `wardfs sandbox list`; add one with `wardfs sandbox add`)"
    )]
    NotFound { name: String },
    #[error(
        "no run {id:?} is kept (the runs going on and the last 16 ended since the daemon started are; `wardfs runs` lists them all)"
    )]
    RunNotFound { id: String },
    #[error("invalid {key}: {rule}")]
    Invalid { key: String, rule: String },
    #[error("sandbox {name:?} is defined in the config file {what}; change it there")]
    FromConfig { name: String, what: &'static str },
    #[error("sandbox {name:?}: {source}")]
    Remote {
        name: String,
        source: Box<SandboxFsError>,
    },
    #[error("sandbox {name:?} is unavailable after {attempts} attempts: {reason}")]
    Unavailable {
        name: String,
        attempts: u32,
        reason: String,
    },
    #[error("sandbox {name:?} is gone (destroyed): {reason}")]
    Destroyed { name: String, reason: String },
    #[error("zone /{zone} is not available: {reason}")]
    Zone { zone: String, reason: String },
    #[error("zone /{zone} is read-only: a pull cannot write into it")]
    ReadOnly { zone: String },
    #[error("sandbox {name:?}: {source}")]
    Mirror {
        name: String,
        source: Box<MirrorError>,
    },
    #[error("sandbox {name:?}: {source}")]
    Provision {
        name: String,
        source: Box<super::provision::ProvisionError>,
    },
    #[error("sandbox {name:?} {rule}")]
    Lifecycle { name: String, rule: String },
    #[error(transparent)]
    State(#[from] StateError),
}

impl SandboxError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            SandboxError::NotFound { .. } | SandboxError::RunNotFound { .. } => ErrorCode::NotFound,
            SandboxError::Invalid { .. } | SandboxError::FromConfig { .. } => {
                ErrorCode::InvalidArgument
            }
            SandboxError::Remote { source, .. } => source.code(),
            SandboxError::Unavailable { .. } | SandboxError::Destroyed { .. } => {
                ErrorCode::SandboxUnavailable
            }
            SandboxError::Zone { .. } => ErrorCode::ZoneUnavailable,
            SandboxError::ReadOnly { .. } => ErrorCode::ReadOnly,
            SandboxError::Mirror { source, .. } => match source.as_ref() {
                MirrorError::Remote(e) => e.code(),
                MirrorError::Local { .. } | MirrorError::State(_) => ErrorCode::Internal,
            },
            SandboxError::Provision { source, .. } => {
                use super::provision::ProvisionError as P;
                match source.as_ref() {
                    P::Missing { .. } => ErrorCode::NotFound,
                    P::Down { .. } => ErrorCode::SandboxUnavailable,
                    P::Auth { .. } => ErrorCode::AuthFailed,
                    P::Invalid { .. } => ErrorCode::InvalidArgument,
                    P::Fatal { .. } => ErrorCode::Internal,
                }
            }
            SandboxError::Lifecycle { .. } => ErrorCode::Conflict,
            SandboxError::State(_) => ErrorCode::Internal,
        }
    }
}

/// A sandbox to add (`POST /v1/sandboxes/add`): the keys of `[sandboxes.<name>]` (docs/config.md
/// has their ranges and defaults).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "SandboxAddRequest")]
pub struct AddRequest {
    /// The sandbox's name.
    pub name: String,
    /// Only `sandbox-agent` (a sandbox someone else started) can be added at run time.
    #[serde(default = "default_provider")]
    pub provider: String,
    /// The server's base URL (`http://127.0.0.1:2468`); plain http only to loopback and the
    /// hosts of `api.sandbox_http_hosts`.
    pub url: String,
    /// The environment variable holding the token (never the token); only one listed in
    /// `api.sandbox_token_envs`.
    #[serde(default)]
    pub token_env: Option<String>,
    /// The directory inside the sandbox that mirror push sends to and pull reads from
    /// (default `/workspace`).
    #[serde(default)]
    pub root: Option<String>,
    /// `lazy` (connect on first use, the default) or `warm` (when the daemon starts).
    #[serde(default)]
    pub mode: Option<String>,
    /// Minutes without use before the connection is dropped (0: never; default 30).
    #[serde(default)]
    pub idle_ttl_minutes: Option<u64>,
    /// Health-check attempts after the first fails (default 3).
    #[serde(default)]
    pub retries: Option<u32>,
    /// The first wait between attempts, doubling each time (default 500).
    #[serde(default)]
    pub retry_backoff_ms: Option<u64>,
    /// Longest time one request to the sandbox may take (default 30).
    #[serde(default)]
    pub request_timeout_secs: Option<u64>,
}

fn default_provider() -> String {
    PROVIDER_SANDBOX_AGENT.to_string()
}

/// What a sandbox added at run time may name. The config file is written by a person and may
/// name any variable and any URL; `sandbox add` comes through the API, that is possibly from an
/// agent, which must not be able to point the person's tokens at a server of its choosing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddPolicy {
    /// `api.sandbox_token_envs`: the token variables it may name (none by default).
    pub token_envs: Vec<String>,
    /// `api.sandbox_http_hosts`: hosts besides loopback it may reach over plain http.
    pub http_hosts: Vec<String>,
}

impl AddPolicy {
    /// The policy the settings give.
    pub fn from_settings(s: &crate::config::Settings) -> AddPolicy {
        AddPolicy {
            token_envs: s.sandbox_token_envs.clone(),
            http_hosts: s.sandbox_http_hosts.clone(),
        }
    }

    /// Checks a sandbox added at run time (its name, token variable and URL) against the policy.
    fn check(&self, name: &str, token_env: Option<&str>, url: &str) -> Result<(), SandboxError> {
        if let Some(var) = token_env {
            if !self.token_envs.iter().any(|v| v == var) {
                return Err(SandboxError::Invalid {
                    key: "token_env".into(),
                    rule: format!(
                        "{var} is not in api.sandbox_token_envs: a sandbox added through the API may name only the token variables listed there (none by default); define the sandbox in the config file's [sandboxes.{name}] to use another"
                    ),
                });
            }
        }
        match crate::config::Endpoint::parse(url) {
            Some(end) if end.plain_http_allowed(&self.http_hosts) => Ok(()),
            Some(end) => Err(SandboxError::Invalid {
                key: "url".into(),
                rule: end.plain_http_rule("api.sandbox_http_hosts"),
            }),
            None => Err(SandboxError::Invalid {
                key: "url".into(),
                rule: format!("{url:?} must be an http(s):// URL with a host"),
            }),
        }
    }
}

/// A sandbox and its session, as the API reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "Sandbox")]
pub struct SandboxInfo {
    /// The sandbox's name.
    pub name: String,
    /// `sandbox-agent`, `local` or `daytona`.
    pub provider: String,
    /// The server's base URL; for a provisioned sandbox the one its provider handed out while
    /// attached, else empty.
    pub url: String,
    /// The environment variable holding the token (never the token).
    pub token_env: Option<String>,
    /// The directory inside the sandbox that mirror push and pull use by default.
    pub root: String,
    /// `lazy` or `warm`.
    pub mode: String,
    /// Minutes without use before the connection is dropped (0: never).
    pub idle_ttl_minutes: u64,
    /// `config` (from the config file) or `added` (`wardfs sandbox add`).
    pub origin: String,
    /// The session's status: `creating`, `active`, `resuming`, `paused`, `error` or
    /// `destroyed`.
    pub status: String,
    /// When it was last used, milliseconds since the epoch.
    pub last_accessed_at: Option<i64>,
    /// Failed attempts to resume since the last success.
    pub resume_fail_count: u32,
    /// Why the last attach or check failed, when it did.
    pub last_error: Option<String>,
    /// Whether a connection is held now.
    pub attached: bool,
    /// Provisioned (`local`, `daytona`): the provider's id of the sandbox it runs now (null
    /// before the first create and after a destroy).
    #[serde(default)]
    pub provider_id: Option<String>,
    /// Provisioned: the volume it was made with.
    #[serde(default)]
    pub volume: Option<String>,
    /// Provisioned: the snapshot it was made from.
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Provisioned: when it was paused, milliseconds since the epoch.
    #[serde(default)]
    pub paused_at: Option<i64>,
    /// Provisioned: seconds without use before the cleanup loop pauses it (0: never; 0 for
    /// attached sandboxes).
    #[serde(default)]
    pub idle_pause_s: u64,
    /// Provisioned: seconds a paused sandbox is kept before it is destroyed (0: forever).
    #[serde(default)]
    pub paused_ttl_s: u64,
}

/// A mirror run to do: which zone, which sandbox, which remote directory.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MirrorRequest {
    /// The sandbox's name.
    pub sandbox: String,
    /// `workspace` (default) or `cache`.
    #[serde(default)]
    pub zone: Option<String>,
    /// Push only: the remote directory (default: the sandbox's root). A pull refuses it.
    #[serde(default)]
    pub to: Option<String>,
    /// Pull only: the remote directory (default: the sandbox's root). A push refuses it.
    #[serde(default)]
    pub from: Option<String>,
    /// Push only: hash every local file instead of trusting unchanged stats. A pull refuses
    /// it.
    #[serde(default)]
    pub full_hash: bool,
    /// Stream progress as NDJSON (`application/x-ndjson`) instead of answering with one JSON
    /// object.
    #[serde(default)]
    pub progress: bool,
}

/// One sandbox's lock and attached provider.
pub(super) struct Session {
    pub(super) attached: tokio::sync::Mutex<Option<Attached>>,
}

pub(super) struct Attached {
    pub(super) remote: Arc<SandboxAgent>,
    /// The definition it was built from; a changed one is reconnected. For a provisioned
    /// sandbox, the URL its provider handed out.
    pub(super) url: String,
    pub(super) token_env: Option<String>,
    pub(super) request_timeout_s: u64,
}

/// The named sandboxes and their sessions.
pub struct Registry {
    pub(super) zones: Arc<Zones>,
    pub(super) sessions: Mutex<HashMap<String, Arc<Session>>>,
    policy: AddPolicy,
    /// What makes the provisioned sandboxes (see `lifecycle`).
    pub(super) provisioned: super::lifecycle::Provisioned,
    /// The commands running in sandboxes (see `run`).
    pub(super) runs: super::run::Runs,
}

fn info(r: SandboxRow, attached: Option<String>) -> SandboxInfo {
    let provisioned = r.provider != PROVIDER_SANDBOX_AGENT;
    SandboxInfo {
        name: r.name,
        provider: r.provider,
        // A provisioned sandbox's URL is the one its provider handed out, while attached.
        url: if provisioned {
            attached.clone().unwrap_or_default()
        } else {
            r.url
        },
        token_env: r.token_env,
        root: r.root,
        mode: r.mode,
        idle_ttl_minutes: r.idle_ttl_s / 60,
        origin: r.origin,
        status: r.status,
        last_accessed_at: r.last_accessed_at,
        resume_fail_count: r.resume_fail_count,
        last_error: r.last_error,
        attached: attached.is_some(),
        provider_id: r.provider_id,
        volume: r.volume,
        snapshot: r.snapshot,
        paused_at: r.paused_at,
        idle_pause_s: if provisioned { r.idle_ttl_s } else { 0 },
        paused_ttl_s: r.paused_ttl_s,
    }
}

fn row_of(s: &SandboxSettings, origin: &str, now_ms: i64) -> SandboxRow {
    SandboxRow {
        name: s.name.clone(),
        provider: s.provider.clone(),
        url: s.url.clone(),
        token_env: s.token_env.clone(),
        root: s.root.clone(),
        mode: s.mode.as_str().to_string(),
        idle_ttl_s: s.idle_ttl.as_secs(),
        retries: s.retries,
        retry_backoff_ms: s.retry_backoff.as_millis() as u64,
        request_timeout_s: s.request_timeout.as_secs(),
        origin: origin.to_string(),
        status: CREATING.to_string(),
        created_at: now_ms,
        last_accessed_at: None,
        resume_fail_count: 0,
        last_error: None,
        provider_id: None,
        volume: None,
        snapshot: None,
        paused_at: None,
        paused_ttl_s: s.provision.as_ref().map_or(0, |p| p.paused_ttl.as_secs()),
    }
}

impl Registry {
    /// Returns a registry over the zones' state database and clock, with the strictest
    /// [`AddPolicy`] (no token variable, no plain http beyond loopback for added sandboxes).
    pub fn new(zones: Arc<Zones>) -> Registry {
        Registry {
            zones,
            sessions: Mutex::new(HashMap::new()),
            policy: AddPolicy::default(),
            provisioned: Default::default(),
            runs: Default::default(),
        }
    }

    /// Sets the directory provisioned sandboxes keep their provider state in
    /// (`<state_dir>/provision`).
    pub fn with_provision_dir(mut self, dir: std::path::PathBuf) -> Registry {
        self.provisioned.dir = Some(dir);
        self
    }

    /// Sets what sandboxes added at run time may name.
    pub fn with_policy(mut self, policy: AddPolicy) -> Registry {
        self.policy = policy;
        self
    }

    pub(super) fn now(&self) -> i64 {
        self.zones.now_ms()
    }

    /// Stores the config file's sandboxes (their sessions are kept) and forgets config
    /// sandboxes no longer in it. Returns the names of `warm` ones, to attach at start.
    pub fn merge_config(&self, sandboxes: &[SandboxSettings]) -> Result<Vec<String>, SandboxError> {
        let db = self.zones.db();
        let now = self.now();
        for s in sandboxes {
            db.put_sandbox(&row_of(s, ORIGIN_CONFIG, now))?;
        }
        self.provisioned.set_settings(sandboxes);
        self.runs.set_env(sandboxes);
        let names: Vec<&str> = sandboxes.iter().map(|s| s.name.as_str()).collect();
        for gone in db.drop_config_sandboxes_except(&names)? {
            tracing::info!(sandbox = %gone, "sandbox no longer in the config file: forgotten");
        }
        // A new daemon holds no connection: sessions left attached by the last one are paused.
        // A provisioned sandbox may still run: `reconcile` asks its provider.
        for r in db.sandboxes()? {
            if r.provider == PROVIDER_SANDBOX_AGENT && (r.status == ACTIVE || r.status == RESUMING)
            {
                db.set_sandbox_status(&r.name, PAUSED, None, None, None)?;
            }
        }
        Ok(sandboxes
            .iter()
            .filter(|s| s.mode == crate::config::SandboxMode::Warm)
            .map(|s| s.name.clone())
            .collect())
    }

    /// Records a use of `name` at `now_ms` (a call of a zone served from it), which keeps the
    /// cleanup loop from taking it for idle.
    pub(super) fn mark_used(&self, name: &str, now_ms: i64) -> Result<(), SandboxError> {
        Ok(self.zones.db().touch_sandbox(name, now_ms)?)
    }

    pub(super) fn session(&self, name: &str) -> Arc<Session> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Session {
                    attached: tokio::sync::Mutex::new(None),
                })
            })
            .clone()
    }

    pub(super) fn row(&self, name: &str) -> Result<SandboxRow, SandboxError> {
        self.zones
            .db()
            .sandbox(name)?
            .ok_or_else(|| SandboxError::NotFound {
                name: name.to_string(),
            })
    }

    /// Returns the URL of the attached connection of `name`, if one is held.
    fn attached_url(&self, name: &str) -> Option<String> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let session = sessions.get(name)?;
        let url = match session.attached.try_lock() {
            Ok(a) => a.as_ref().map(|a| a.url.clone()),
            // Locked: a run holds it, so it is attached (its URL is not read while it runs).
            Err(_) => Some(String::new()),
        };
        url
    }

    /// Returns every sandbox with its session.
    pub fn list(&self) -> Result<Vec<SandboxInfo>, SandboxError> {
        Ok(self
            .zones
            .db()
            .sandboxes()?
            .into_iter()
            .map(|r| {
                let attached = self.attached_url(&r.name);
                info(r, attached)
            })
            .collect())
    }

    /// Returns one sandbox with its session.
    pub fn get(&self, name: &str) -> Result<SandboxInfo, SandboxError> {
        let r = self.row(name)?;
        let attached = self.attached_url(name);
        Ok(info(r, attached))
    }

    /// Adds (or redefines) a sandbox at run time, within the registry's [`AddPolicy`]; nothing
    /// is contacted until it is used.
    pub fn add(&self, req: &AddRequest) -> Result<SandboxInfo, SandboxError> {
        let mode = match req.mode.as_deref() {
            None => crate::config::SandboxMode::Lazy,
            Some(m) => {
                crate::config::SandboxMode::from_name(m).ok_or_else(|| SandboxError::Invalid {
                    key: "mode".into(),
                    rule: format!("{m:?} is not \"lazy\" or \"warm\""),
                })?
            }
        };
        let section = SandboxSection {
            provider: req.provider.clone(),
            url: Some(req.url.clone()),
            token_env: req.token_env.clone(),
            root: req.root.clone(),
            mode,
            idle_ttl_minutes: req.idle_ttl_minutes,
            retries: req.retries,
            retry_backoff_ms: req.retry_backoff_ms,
            request_timeout_secs: req.request_timeout_secs,
            ..SandboxSection::default()
        };
        let settings =
            SandboxSettings::validate(&req.name, &section, "").map_err(|(key, rule)| {
                // Keys come back as `.url` (or `` for the name): the API's field names.
                let key = match key.trim_start_matches('.') {
                    "" => "name".to_string(),
                    k => k.to_string(),
                };
                SandboxError::Invalid { key, rule }
            })?;
        self.policy
            .check(&settings.name, settings.token_env.as_deref(), &settings.url)?;
        if let Some(existing) = self.zones.db().sandbox(&req.name)? {
            if existing.origin == ORIGIN_CONFIG {
                return Err(SandboxError::FromConfig {
                    name: req.name.clone(),
                    what: "and cannot be redefined by `sandbox add`",
                });
            }
        }
        self.zones
            .db()
            .put_sandbox(&row_of(&settings, ORIGIN_ADDED, self.now()))?;
        tracing::info!(sandbox = %req.name, url = %settings.url, "sandbox added");
        self.get(&req.name)
    }

    /// Removes a sandbox added at run time (its mirrors' manifests stay, for a later re-add).
    pub async fn remove(&self, name: &str) -> Result<SandboxInfo, SandboxError> {
        let r = self.row(name)?;
        if r.origin == ORIGIN_CONFIG {
            return Err(SandboxError::FromConfig {
                name: name.to_string(),
                what: "and cannot be removed with `sandbox remove`",
            });
        }
        let session = self.session(name);
        let mut attached = session.attached.lock().await;
        *attached = None;
        self.zones.db().remove_sandbox(name)?;
        drop(attached);
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        tracing::info!(sandbox = %name, "sandbox removed");
        Ok(info(r, None))
    }

    /// Health-checks a sandbox now (attaching it), and returns its session.
    pub async fn check(&self, name: &str) -> Result<SandboxInfo, SandboxError> {
        let session = self.session(name);
        let mut attached = session.attached.lock().await;
        self.attach(name, &mut attached).await?;
        drop(attached);
        self.get(name)
    }

    /// Attaches `name` (under its lock): builds the provider when needed and health-checks it,
    /// with the recovery the module documents.
    pub(super) async fn attach(
        &self,
        name: &str,
        attached: &mut Option<Attached>,
    ) -> Result<(Arc<SandboxAgent>, SandboxRow), SandboxError> {
        let def = self.row(name)?;
        if def.provider != PROVIDER_SANDBOX_AGENT {
            return self.attach_provisioned(name, attached, def).await;
        }
        let db = self.zones.db();
        let same = attached.as_ref().is_some_and(|a| {
            a.url == def.url
                && a.token_env == def.token_env
                && a.request_timeout_s == def.request_timeout_s
        });
        if !same {
            *attached = None;
        }
        let resuming = def.status != CREATING;
        if attached.is_none() {
            db.set_sandbox_status(
                name,
                if resuming { RESUMING } else { CREATING },
                None,
                None,
                None,
            )?;
        }
        let remote = match attached {
            Some(a) => a.remote.clone(),
            None => {
                // Added by an older daemon, or before the config's policy changed: the
                // policy holds for every use, not only at `add`.
                if def.origin == ORIGIN_ADDED {
                    if let Err(e) = self.policy.check(name, def.token_env.as_deref(), &def.url) {
                        self.fail(name, ERROR, &e.to_string(), &def);
                        return Err(e);
                    }
                }
                let mut config =
                    SandboxAgentConfig::new(def.url.clone()).with_limits(self.zones.limits());
                config.token_env = def.token_env.clone();
                config.request_timeout = Duration::from_secs(def.request_timeout_s.max(1));
                config.connect_timeout = config.request_timeout.min(Duration::from_secs(5));
                match SandboxAgent::connect(&config) {
                    Ok(r) => Arc::new(r),
                    Err(e) => {
                        self.fail(name, ERROR, &e.to_string(), &def);
                        return Err(SandboxError::Remote {
                            name: name.to_string(),
                            source: Box::new(e),
                        });
                    }
                }
            }
        };
        let mut attempt: u32 = 0;
        loop {
            match remote.check().await {
                Ok(()) => {
                    db.set_sandbox_status(name, ACTIVE, None, Some(false), Some(self.now()))?;
                    *attached = Some(Attached {
                        remote: remote.clone(),
                        url: def.url.clone(),
                        token_env: def.token_env.clone(),
                        request_timeout_s: def.request_timeout_s,
                    });
                    if attempt > 0 || resuming && def.status != ACTIVE {
                        tracing::info!(sandbox = %name, attempts = attempt + 1, "sandbox attached");
                    }
                    return Ok((remote, def));
                }
                Err(SandboxFsError::Remote { status, detail, .. })
                    if status == 404 || status == 410 =>
                {
                    *attached = None;
                    let reason =
                        format!("the server answered {status} to its health check: {detail}");
                    self.fail(name, DESTROYED, &reason, &def);
                    return Err(SandboxError::Destroyed {
                        name: name.to_string(),
                        reason,
                    });
                }
                Err(e) if e.code() == ErrorCode::SandboxUnavailable && attempt < def.retries => {
                    let wait = Duration::from_millis(def.retry_backoff_ms.max(1))
                        .saturating_mul(1 << attempt.min(16));
                    tracing::warn!(sandbox = %name, attempt = attempt + 1, "{e}; retrying in {} ms", wait.as_millis());
                    attempt += 1;
                    tokio::time::sleep(wait).await;
                }
                Err(e) if e.code() == ErrorCode::SandboxUnavailable => {
                    *attached = None;
                    let reason = e.to_string();
                    self.fail(name, ERROR, &reason, &def);
                    return Err(SandboxError::Unavailable {
                        name: name.to_string(),
                        attempts: attempt + 1,
                        reason,
                    });
                }
                Err(e) => {
                    // A refused token is not retried: another attempt would be refused too.
                    *attached = None;
                    self.fail(name, ERROR, &e.to_string(), &def);
                    return Err(SandboxError::Remote {
                        name: name.to_string(),
                        source: Box::new(e),
                    });
                }
            }
        }
    }

    /// Records a failed attach or run.
    pub(super) fn fail(&self, name: &str, status: &str, reason: &str, def: &SandboxRow) {
        tracing::warn!(sandbox = %name, url = %def.url, status, "{reason}");
        if let Err(e) =
            self.zones
                .db()
                .set_sandbox_status(name, status, Some(reason), Some(true), None)
        {
            tracing::warn!(sandbox = %name, "cannot record the session: {e}");
        }
    }

    fn zone_root(
        &self,
        zone: Option<&str>,
        write: bool,
    ) -> Result<(ZoneId, std::path::PathBuf), SandboxError> {
        let name = zone.unwrap_or("workspace");
        let id = ZoneId::from_name(name).ok_or_else(|| SandboxError::Invalid {
            key: "zone".into(),
            rule: format!("{name:?} is not cache or workspace"),
        })?;
        match self.zones.local(id) {
            Ok(z) if write && z.read_only() => Err(SandboxError::ReadOnly {
                zone: name.to_string(),
            }),
            Ok(z) => Ok((id, z.root().to_path_buf())),
            Err(n) => Err(SandboxError::Zone {
                zone: name.to_string(),
                reason: n.reason("mirror a local zone"),
            }),
        }
    }

    fn remote_dir(
        given: Option<&str>,
        key: &str,
        def: &SandboxRow,
    ) -> Result<String, SandboxError> {
        match given {
            None => Ok(def.root.clone()),
            Some(d) => {
                check_remote_path(d).map_err(|e| SandboxError::Invalid {
                    key: key.to_string(),
                    rule: e.to_string(),
                })?;
                Ok(if d.len() > 1 {
                    d.trim_end_matches('/').to_string()
                } else {
                    d.to_string()
                })
            }
        }
    }

    /// Records the end of a mirror run: the use, or a failure that says the sandbox is down.
    fn after_run<T>(
        &self,
        name: &str,
        def: &SandboxRow,
        attached: &mut Option<Attached>,
        r: Result<T, MirrorError>,
    ) -> Result<T, SandboxError> {
        match r {
            Ok(v) => {
                self.zones.db().set_sandbox_status(
                    name,
                    ACTIVE,
                    None,
                    Some(false),
                    Some(self.now()),
                )?;
                Ok(v)
            }
            Err(e) => {
                if let MirrorError::Remote(re) = &e {
                    if matches!(
                        re.code(),
                        ErrorCode::SandboxUnavailable | ErrorCode::AuthFailed
                    ) {
                        *attached = None;
                        self.fail(name, ERROR, &re.to_string(), def);
                    }
                }
                Err(SandboxError::Mirror {
                    name: name.to_string(),
                    source: Box::new(e),
                })
            }
        }
    }

    /// Pushes a zone to a directory of the sandbox (see [`mirror::push`]).
    pub async fn push(
        &self,
        req: &MirrorRequest,
        progress: ProgressFn,
    ) -> Result<PushSummary, SandboxError> {
        let (zone, local_root) = self.zone_root(req.zone.as_deref(), false)?;
        let def = self.row(&req.sandbox)?;
        let to = Self::remote_dir(req.to.as_deref(), "to", &def)?;
        let session = self.session(&req.sandbox);
        let mut attached = session.attached.lock().await;
        (progress.0)(&MirrorProgress::phase("attach"));
        let (remote, def) = self.attach(&req.sandbox, &mut attached).await?;
        let now = self.now();
        let mut manifest =
            Manifest::load(self.zones.db().clone(), zone.name(), &req.sandbox, &to, now).map_err(
                |e| SandboxError::Mirror {
                    name: req.sandbox.clone(),
                    source: Box::new(e),
                },
            )?;
        if req.full_hash {
            manifest.forget_local_stats();
        }
        let opts = MirrorOptions {
            sandbox: req.sandbox.clone(),
            now_ms: now,
            progress: Some(progress.clone()),
            max_file_bytes: Some(self.zones.limits().sandbox_file_bytes),
            zone: Some(mirror::ZoneRef {
                zones: self.zones.clone(),
                id: zone,
            }),
            origin: mirror::ORIGIN,
        };
        (progress.0)(&MirrorProgress::phase("scan"));
        let r = mirror::push(
            &local_root,
            remote.as_ref() as &dyn SandboxFs,
            &to,
            &mut manifest,
            &opts,
        )
        .await;
        let r = self.after_run(&req.sandbox, &def, &mut attached, r);
        if let Ok(s) = &r {
            tracing::info!(sandbox = %req.sandbox, zone = zone.name(), to = %to, files = s.files_sent, bytes = s.bytes_sent, deleted = s.deleted, renamed = s.renamed, conflicts = s.conflicts.len(), ms = s.duration_ms, "mirror push");
        }
        r
    }

    /// Pulls what changed in a directory of the sandbox into a zone (see [`mirror::pull`]).
    pub async fn pull(
        &self,
        req: &MirrorRequest,
        progress: ProgressFn,
    ) -> Result<PullSummary, SandboxError> {
        self.pull_as(req, progress, mirror::ORIGIN).await
    }

    /// [`Registry::pull`], each change journaled as coming from `origin`.
    pub(super) async fn pull_as(
        &self,
        req: &MirrorRequest,
        progress: ProgressFn,
        origin: crate::state::Origin,
    ) -> Result<PullSummary, SandboxError> {
        let (zone, local_root) = self.zone_root(req.zone.as_deref(), true)?;
        let def = self.row(&req.sandbox)?;
        let from = Self::remote_dir(req.from.as_deref(), "from", &def)?;
        let session = self.session(&req.sandbox);
        let mut attached = session.attached.lock().await;
        (progress.0)(&MirrorProgress::phase("attach"));
        let (remote, def) = self.attach(&req.sandbox, &mut attached).await?;
        let now = self.now();
        let mut manifest = Manifest::load(
            self.zones.db().clone(),
            zone.name(),
            &req.sandbox,
            &from,
            now,
        )
        .map_err(|e| SandboxError::Mirror {
            name: req.sandbox.clone(),
            source: Box::new(e),
        })?;
        let opts = MirrorOptions {
            sandbox: req.sandbox.clone(),
            now_ms: now,
            progress: Some(progress.clone()),
            max_file_bytes: Some(self.zones.limits().sandbox_file_bytes),
            zone: Some(mirror::ZoneRef {
                zones: self.zones.clone(),
                id: zone,
            }),
            origin,
        };
        (progress.0)(&MirrorProgress::phase("scan"));
        let r = mirror::pull(
            &local_root,
            remote.as_ref() as &dyn SandboxFs,
            &from,
            &mut manifest,
            &opts,
        )
        .await;
        let r = self.after_run(&req.sandbox, &def, &mut attached, r);
        if let Ok(s) = &r {
            // Each change reached the journal (which `wardfs log`, git status and the next push
            // read) and the mount's caches as the pull made it, through the core.
            tracing::info!(sandbox = %req.sandbox, zone = zone.name(), from = %from, files = s.files_received, bytes = s.bytes_received, deleted = s.deleted, conflicts = s.conflicts.len(), ms = s.duration_ms, "mirror pull");
        }
        r
    }

    /// Detaches sandboxes unused for their idle TTL (status `paused`); returns their names.
    /// A sandbox whose lock is held (a run in progress) is in use and left alone.
    pub fn cleanup(&self) -> Vec<String> {
        let now = self.now();
        let sessions: Vec<(String, Arc<Session>)> = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut detached = Vec::new();
        for (name, session) in sessions {
            let Ok(mut attached) = session.attached.try_lock() else {
                continue;
            };
            if attached.is_none() {
                continue;
            }
            let Ok(Some(row)) = self.zones.db().sandbox(&name) else {
                *attached = None;
                continue;
            };
            if row.provider != PROVIDER_SANDBOX_AGENT {
                // Paused for real by `tend_provisioned`, which also stops its provider's sandbox.
                continue;
            }
            let idle_ms = now - row.last_accessed_at.unwrap_or(row.created_at);
            if row.idle_ttl_s > 0 && idle_ms >= (row.idle_ttl_s as i64) * 1000 {
                *attached = None;
                if row.status == ACTIVE {
                    let _ = self
                        .zones
                        .db()
                        .set_sandbox_status(&name, PAUSED, None, None, None);
                }
                tracing::info!(sandbox = %name, idle_s = idle_ms / 1000, "sandbox idle: detached");
                detached.push(name);
            }
        }
        detached
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    #[test]
    fn idle_sandboxes_are_detached_and_paused() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::config::Settings::from_str(
            "[zones]\nroot = \"z\"\n[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://127.0.0.1:9\"\nidle_ttl_minutes = 1\n",
            "test",
            dir.path(),
            None,
        )
        .unwrap();
        let now = Arc::new(AtomicI64::new(1_000_000));
        let clock_now = now.clone();
        let db = Arc::new(crate::state::Db::open_in_memory().unwrap());
        let zones = Arc::new(
            Zones::open(
                &settings,
                db.clone(),
                Arc::new(move || clock_now.load(Ordering::SeqCst)),
            )
            .unwrap(),
        );
        let reg = Registry::new(zones);
        assert!(reg.merge_config(&settings.sandboxes).unwrap().is_empty());
        // Attached and used at 1_000_000 (no request is sent to attach it here).
        let remote =
            SandboxAgent::with_token(&SandboxAgentConfig::new("http://127.0.0.1:9"), None).unwrap();
        *reg.session("dev").attached.try_lock().unwrap() = Some(Attached {
            remote: Arc::new(remote),
            url: "http://127.0.0.1:9".into(),
            token_env: None,
            request_timeout_s: 30,
        });
        db.set_sandbox_status("dev", ACTIVE, None, Some(false), Some(1_000_000))
            .unwrap();
        assert!(reg.get("dev").unwrap().attached);
        now.store(1_000_000 + 59_000, Ordering::SeqCst);
        assert!(reg.cleanup().is_empty(), "not idle for a minute yet");
        now.store(1_000_000 + 60_000, Ordering::SeqCst);
        assert_eq!(reg.cleanup(), ["dev"]);
        let dev = reg.get("dev").unwrap();
        assert_eq!((dev.status.as_str(), dev.attached), (PAUSED, false));
        // A restart pauses what the last daemon left active.
        db.set_sandbox_status("dev", ACTIVE, None, Some(false), None)
            .unwrap();
        reg.merge_config(&settings.sandboxes).unwrap();
        assert_eq!(reg.get("dev").unwrap().status, PAUSED);
    }
}
