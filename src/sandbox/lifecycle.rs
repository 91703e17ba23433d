//! The lifecycle of the sandboxes wardfs makes itself (`provider = "local"` or `"daytona"`):
//! the registry's side of [`super::provision`].
//!
//! Such a sandbox is a registry entry like an attached one (same session row, same lock, same
//! mirror runs), except that its URL and token come from its [`Provisioner`]: the first use
//! creates it (lazy), a use while it is paused resumes it, and one whose sandbox the provider
//! no longer has creates it again. The failure classes of [`ProvisionError`] decide what
//! happens: `Missing` → recreate; `Down` → the session stays `paused` for a later resume
//! (`SANDBOX_UNAVAILABLE`); anything else → `error`, not retried. A failed create leaves
//! nothing behind (the provider destroys what it made) and the session `error` with the reason.
//!
//! The state database holds the provider's id of the sandbox, its volume and snapshot, never
//! its token: a token lives in the attached connection only, and a restarted daemon gets a
//! fresh handle by resuming. Every lifecycle call runs under the sandbox's lock (the one mirror
//! runs take), so a mirror, a zone call and a pause never interleave.
//!
//! [`Registry::tend_provisioned`] (the daemon's cleanup loop) pauses a sandbox unused for its
//! `idle_pause_minutes` and destroys one paused for its `paused_ttl_minutes`;
//! [`Registry::reconcile`] (at start) adopts a running sandbox the last daemon left, marks a
//! session whose sandbox is gone `destroyed`, and destroys local sandboxes no session owns.
//! Each transition is logged with the sandbox's name and recorded in the journal (zone
//! `sandboxes`, path = the name, op `sandbox-created`, `-resumed`, `-paused`, `-down`,
//! `-destroyed`, `-gone`, `-adopted`, `-error`; the detail says which sandbox and why), so
//! `GET /v1/events` and `wardfs log --zone sandboxes` show a sandbox's life beside the files'.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::agent::SandboxAgent;
use super::provision::{
    daytona, local, Handle, Listed, ProviderState, ProvisionError, Provisioner, SandboxSpec,
    SnapshotSpec, VolumeMount,
};
use super::registry::{
    Attached, Registry, SandboxError, SandboxInfo, ACTIVE, CREATING, DESTROYED, ERROR, PAUSED,
    RESUMING,
};
use crate::config::{
    check_plain_name, ProvisionKind, ProvisionSettings, SandboxSettings, PROVIDER_LOCAL,
    PROVIDER_SANDBOX_AGENT,
};
use crate::core::provider::SandboxFs;
use crate::state::{JournalEntry, Origin, SandboxRow, SANDBOX_ZONE};

/// What makes the provisioned sandboxes: their settings (from the config file) and their
/// providers, opened on first use.
#[derive(Default)]
pub(super) struct Provisioned {
    /// `<state_dir>/provision`: the providers' state (the local provider's roots and volumes).
    pub(super) dir: Option<PathBuf>,
    settings: Mutex<HashMap<String, ProvisionSettings>>,
    open: Mutex<HashMap<String, Arc<dyn Provisioner>>>,
}

impl Provisioned {
    /// Takes the provisioned sandboxes of the config file.
    pub(super) fn set_settings(&self, sandboxes: &[SandboxSettings]) {
        let mut map = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        map.clear();
        for s in sandboxes {
            if let Some(p) = &s.provision {
                map.insert(s.name.clone(), (**p).clone());
            }
        }
    }

    fn settings(&self, name: &str) -> Option<ProvisionSettings> {
        self.settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}

/// A provisioned sandbox to create now (`POST /v1/sandboxes/create`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "SandboxCreateRequest")]
pub struct CreateRequest {
    /// The sandbox's name (a `[sandboxes.<name>]` of provider `local` or `daytona`).
    pub name: String,
    /// Must match the config file's `provider` when given (`local`, `daytona`): a check, not a
    /// choice.
    #[serde(default)]
    pub provider: Option<String>,
    /// A snapshot id to start from, instead of the config's (letters, digits, `.`, `_`, `-`).
    #[serde(default)]
    pub snapshot: Option<String>,
    /// A volume to attach (made when missing), instead of the config's (letters, digits, `.`,
    /// `_`, `-`).
    #[serde(default)]
    pub volume: Option<String>,
}

/// A provisioned sandbox to destroy (`POST /v1/sandboxes/destroy`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "SandboxDestroyRequest")]
pub struct DestroyRequest {
    /// The sandbox's name.
    pub name: String,
    /// Keep the sandbox's volume (a volume named in the config is always kept).
    #[serde(default)]
    pub keep_volume: bool,
}

/// A snapshot built (or found) for a sandbox (`POST /v1/sandboxes/snapshot`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "SandboxSnapshot")]
pub struct SnapshotInfo {
    /// The sandbox's name.
    pub name: String,
    /// Its provider (`local` or `daytona`).
    pub provider: String,
    /// The snapshot's id; the sandbox's next create starts from it.
    pub snapshot: String,
}

/// Names a provider's key as the config file does (`local.agent_bin` → `sandboxes.dev.agent_bin`).
fn provision_error(name: &str, e: ProvisionError) -> SandboxError {
    let e = match e {
        ProvisionError::Invalid { key, rule } => {
            let key = key
                .strip_prefix("local.")
                .or_else(|| key.strip_prefix("daytona."))
                .map(|f| format!("sandboxes.{name}.{f}"))
                .unwrap_or(key);
            ProvisionError::Invalid { key, rule }
        }
        other => other,
    };
    SandboxError::Provision {
        name: name.to_string(),
        source: Box::new(e),
    }
}

fn is_provisioned(row: &SandboxRow) -> bool {
    row.provider != PROVIDER_SANDBOX_AGENT
}

impl Registry {
    /// Records a lifecycle transition of `name` in the journal. What it records has happened:
    /// a journal failure is logged, never the operation's error.
    fn journal_lifecycle(&self, name: &str, op: &str, detail: &str) {
        let entry = JournalEntry {
            time_ms: self.now(),
            zone: SANDBOX_ZONE,
            path: name,
            op,
            bytes: None,
            to_path: None,
            origin: Origin::INTERNAL,
            detail: Some(detail),
        };
        if let Err(e) = self.zones.db().journal_append(&entry) {
            tracing::warn!(sandbox = %name, op, "could not record in the journal: {e}");
        }
    }

    fn require_provisioned(&self, row: &SandboxRow, what: &str) -> Result<(), SandboxError> {
        if is_provisioned(row) {
            return Ok(());
        }
        Err(SandboxError::Invalid {
            key: "name".into(),
            rule: format!(
                "sandbox {:?} is attached (provider = \"{PROVIDER_SANDBOX_AGENT}\"): wardfs did not make it and cannot {what} it; only a sandbox with provider = \"local\" or \"daytona\" can",
                row.name
            ),
        })
    }

    /// Returns the provider of `name` (opened on first use) and its settings.
    fn provisioner(
        &self,
        name: &str,
    ) -> Result<(Arc<dyn Provisioner>, ProvisionSettings), SandboxError> {
        let settings =
            self.provisioned
                .settings(name)
                .ok_or_else(|| SandboxError::Invalid {
                    key: format!("sandboxes.{name}"),
                    rule: "a sandbox wardfs makes itself is defined in the config file ([sandboxes.NAME] provider = \"local\" or \"daytona\")".into(),
                })?;
        let mut open = self
            .provisioned
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(p) = open.get(name) {
            return Ok((p.clone(), settings));
        }
        let p: Arc<dyn Provisioner> = match &settings.kind {
            ProvisionKind::Local { agent_bin } => {
                let dir = self
                    .provisioned
                    .dir
                    .clone()
                    .ok_or_else(|| SandboxError::Invalid {
                        key: "state_dir".into(),
                        rule: "the daemon has no state directory for local sandboxes".into(),
                    })?;
                let mut config = local::LocalConfig::new(dir.join("local"));
                config.agent_bin = agent_bin.clone();
                Arc::new(
                    local::LocalProvisioner::open(config).map_err(|e| provision_error(name, e))?,
                )
            }
            ProvisionKind::Daytona {
                api_url,
                api_key_env,
            } => {
                let mut config = daytona::DaytonaConfig::new(api_key_env.clone());
                if let Some(url) = api_url {
                    config.api_url = url.clone();
                }
                Arc::new(daytona::Daytona::new(config).map_err(|e| provision_error(name, e))?)
            }
        };
        open.insert(name.to_string(), p.clone());
        Ok((p, settings))
    }

    /// Attaches a provisioned sandbox (under its lock): the held connection if it still
    /// answers, else a handle from its provider (resumed, or created) and a new connection.
    pub(super) async fn attach_provisioned(
        &self,
        name: &str,
        attached: &mut Option<Attached>,
        def: SandboxRow,
    ) -> Result<(Arc<SandboxAgent>, SandboxRow), SandboxError> {
        if let Some(a) = attached.as_ref() {
            match a.remote.check().await {
                Ok(()) => {
                    let remote = a.remote.clone();
                    self.zones.db().set_sandbox_status(
                        name,
                        ACTIVE,
                        None,
                        Some(false),
                        Some(self.now()),
                    )?;
                    return Ok((remote, self.row(name)?));
                }
                Err(e) => {
                    tracing::warn!(sandbox = %name, "the sandbox stopped answering ({e}); resuming it");
                    *attached = None;
                }
            }
        }
        let handle = self.ensure_running(name, &def).await?;
        self.connect(name, attached, handle).await
    }

    /// Connects to a handle's server, confirms it answers, and records the session `active`.
    async fn connect(
        &self,
        name: &str,
        attached: &mut Option<Attached>,
        handle: Handle,
    ) -> Result<(Arc<SandboxAgent>, SandboxRow), SandboxError> {
        let def = self.row(name)?;
        let db = self.zones.db();
        let mut config = handle.agent_config().with_limits(self.zones.limits());
        config.request_timeout = Duration::from_secs(def.request_timeout_s.max(1));
        config.connect_timeout = config.request_timeout.min(Duration::from_secs(5));
        let checked = match SandboxAgent::with_token(&config, Some(handle.token.clone())) {
            Ok(remote) => remote.check().await.map(|()| remote),
            Err(e) => Err(e),
        };
        let remote = match checked {
            Ok(r) => Arc::new(r),
            Err(e) => {
                self.fail(name, ERROR, &e.to_string(), &def);
                return Err(SandboxError::Remote {
                    name: name.to_string(),
                    source: Box::new(e),
                });
            }
        };
        db.set_sandbox_status(name, ACTIVE, None, Some(false), Some(self.now()))?;
        db.set_sandbox_paused_at(name, None)?;
        *attached = Some(Attached {
            remote: remote.clone(),
            url: handle.url.clone(),
            token_env: None,
            request_timeout_s: def.request_timeout_s,
        });
        Ok((remote, self.row(name)?))
    }

    /// Returns a handle to the running sandbox of `name`: resumed when it has one, created
    /// when it has none (or its provider no longer has it).
    async fn ensure_running(&self, name: &str, def: &SandboxRow) -> Result<Handle, SandboxError> {
        let db = self.zones.db();
        let (p, settings) = self.provisioner(name).inspect_err(|e| {
            self.fail(name, ERROR, &e.to_string(), def);
        })?;
        if let Some(id) = def
            .provider_id
            .as_deref()
            .filter(|_| def.status != DESTROYED)
        {
            db.set_sandbox_status(name, RESUMING, None, None, None)?;
            match p.resume(id).await {
                Ok(h) => {
                    if def.status != ACTIVE {
                        tracing::info!(sandbox = %name, id, from = %def.status, "sandbox resumed");
                        self.journal_lifecycle(
                            name,
                            "sandbox-resumed",
                            &format!("{id}, was {}", def.status),
                        );
                    }
                    return Ok(h);
                }
                Err(ProvisionError::Missing { detail, .. }) => {
                    tracing::warn!(sandbox = %name, id, "the provider no longer has the sandbox ({detail}): creating it again");
                    self.journal_lifecycle(
                        name,
                        "sandbox-gone",
                        &format!("{id}: {detail}; creating it again"),
                    );
                    db.set_sandbox_provision(name, None, None, None)?;
                }
                Err(e @ ProvisionError::Down { .. }) => {
                    let reason = e.to_string();
                    tracing::warn!(sandbox = %name, id, "cannot resume: {reason}; it stays paused");
                    self.journal_lifecycle(name, "sandbox-down", &format!("{id}: {reason}"));
                    db.set_sandbox_status(name, PAUSED, Some(&reason), Some(true), None)?;
                    return Err(SandboxError::Unavailable {
                        name: name.to_string(),
                        attempts: 1,
                        reason,
                    });
                }
                Err(e) => {
                    let e = provision_error(name, e);
                    self.journal_lifecycle(name, "sandbox-error", &e.to_string());
                    self.fail(name, ERROR, &e.to_string(), def);
                    return Err(e);
                }
            }
        }
        self.create_sandbox(name, def, &p, &settings, None).await
    }

    /// Creates the sandbox of `name` (building its snapshot and volume when it names them).
    async fn create_sandbox(
        &self,
        name: &str,
        def: &SandboxRow,
        p: &Arc<dyn Provisioner>,
        settings: &ProvisionSettings,
        overrides: Option<&CreateRequest>,
    ) -> Result<Handle, SandboxError> {
        let db = self.zones.db();
        db.set_sandbox_status(name, CREATING, None, None, None)?;
        let made = async {
            let snapshot = match overrides
                .and_then(|o| o.snapshot.clone())
                .or_else(|| settings.snapshot.clone())
            {
                Some(s) => Some(s),
                None => match &settings.snapshot_base {
                    Some(base) => Some(
                        p.snapshot(&SnapshotSpec {
                            network: settings.snapshot_network,
                            base: base.clone(),
                            setup: settings.snapshot_setup.clone(),
                        })
                        .await?,
                    ),
                    None => None,
                },
            };
            let volume = match overrides
                .and_then(|o| o.volume.clone())
                .or_else(|| settings.volume.clone())
            {
                Some(v) => Some(p.create_volume(&v).await?),
                None => None,
            };
            let spec = SandboxSpec {
                name: name.to_string(),
                snapshot: snapshot.clone(),
                volume: volume.clone().map(|v| VolumeMount {
                    volume: v,
                    mount_path: settings.volume_path.clone(),
                }),
                env: Default::default(),
            };
            let h = p.create(&spec).await?;
            Ok::<_, ProvisionError>((h, volume, snapshot))
        }
        .await;
        match made {
            Ok((h, volume, snapshot)) => {
                db.set_sandbox_provision(
                    name,
                    Some(&h.id),
                    volume.as_deref(),
                    snapshot.as_deref(),
                )?;
                // What was pushed went to the sandbox before (or nowhere): the next push sends
                // everything, even onto a kept volume, rather than trust a manifest of another.
                let forgot = db.forget_mirrors_of(name)?;
                if forgot > 0 {
                    tracing::info!(sandbox = %name, mirrors = forgot, "a new sandbox: its mirrors' manifests are forgotten");
                }
                tracing::info!(sandbox = %name, id = %h.id, provider = p.kind(), "sandbox created");
                let mut detail = format!("{} ({})", h.id, p.kind());
                if let Some(s) = &snapshot {
                    detail.push_str(&format!(", snapshot {s}"));
                }
                if let Some(v) = &volume {
                    detail.push_str(&format!(", volume {v}"));
                }
                self.journal_lifecycle(name, "sandbox-created", &detail);
                Ok(h)
            }
            Err(e) => {
                let e = provision_error(name, e);
                self.journal_lifecycle(name, "sandbox-error", &e.to_string());
                self.fail(name, ERROR, &e.to_string(), def);
                Err(e)
            }
        }
    }

    /// Creates a provisioned sandbox now (instead of on first use) and attaches it.
    pub async fn create(&self, req: &CreateRequest) -> Result<SandboxInfo, SandboxError> {
        let name = req.name.as_str();
        let def = self.row(name)?;
        self.require_provisioned(&def, "create")?;
        if let Some(p) = &req.provider {
            if p != &def.provider {
                return Err(SandboxError::Invalid {
                    key: "provider".into(),
                    rule: format!(
                        "{p:?} is not the provider of sandbox {name:?} (its [sandboxes.{name}] says {:?})",
                        def.provider
                    ),
                });
            }
        }
        for (key, v) in [("snapshot", &req.snapshot), ("volume", &req.volume)] {
            if let Some(v) = v {
                check_plain_name(v).map_err(|rule| SandboxError::Invalid {
                    key: key.into(),
                    rule,
                })?;
            }
        }
        let session = self.session(name);
        let mut attached = session.attached.lock().await;
        let def = self.row(name)?;
        if let Some(id) = def
            .provider_id
            .as_deref()
            .filter(|_| def.status != DESTROYED)
        {
            return Err(SandboxError::Lifecycle {
                name: name.to_string(),
                rule: format!(
                    "already has a sandbox ({id}, status {}): resume it with `wardfs sandbox resume {name}`, or `wardfs sandbox destroy {name}` first",
                    def.status
                ),
            });
        }
        *attached = None;
        let (p, settings) = self.provisioner(name).inspect_err(|e| {
            self.fail(name, ERROR, &e.to_string(), &def);
        })?;
        let handle = self
            .create_sandbox(name, &def, &p, &settings, Some(req))
            .await?;
        self.connect(name, &mut attached, handle).await?;
        drop(attached);
        self.get(name)
    }

    /// Resumes a provisioned sandbox now (creating it when it has none) and attaches it.
    pub async fn resume(&self, name: &str) -> Result<SandboxInfo, SandboxError> {
        let def = self.row(name)?;
        self.require_provisioned(&def, "resume")?;
        self.check(name).await
    }

    /// Pauses a provisioned sandbox (its provider freezes or stops it; its files stay).
    pub async fn pause(&self, name: &str) -> Result<SandboxInfo, SandboxError> {
        let def = self.row(name)?;
        self.require_provisioned(&def, "pause")?;
        let session = self.session(name);
        let mut attached = session.attached.lock().await;
        let def = self.row(name)?;
        let Some(id) = def.provider_id.clone().filter(|_| def.status != DESTROYED) else {
            return Err(SandboxError::Lifecycle {
                name: name.to_string(),
                rule: format!(
                    "has no sandbox to pause (status {}): it is made on first use or by `wardfs sandbox create {name}`",
                    def.status
                ),
            });
        };
        self.pause_locked(name, &id, &mut attached, "asked").await?;
        drop(attached);
        self.get(name)
    }

    /// Pauses `id` of `name` (its lock held) and records it.
    async fn pause_locked(
        &self,
        name: &str,
        id: &str,
        attached: &mut Option<Attached>,
        why: &str,
    ) -> Result<(), SandboxError> {
        let (p, _) = self.provisioner(name)?;
        let db = self.zones.db();
        match p.pause(id).await {
            Ok(()) => {}
            Err(ProvisionError::Missing { detail, .. }) => {
                *attached = None;
                self.mark_gone(name, &detail)?;
                return Err(SandboxError::Destroyed {
                    name: name.to_string(),
                    reason: detail,
                });
            }
            Err(e) => return Err(provision_error(name, e)),
        }
        *attached = None;
        db.set_sandbox_status(name, PAUSED, None, None, None)?;
        db.set_sandbox_paused_at(name, Some(self.now()))?;
        tracing::info!(sandbox = %name, id, why, "sandbox paused");
        self.journal_lifecycle(name, "sandbox-paused", &format!("{id}: {why}"));
        Ok(())
    }

    /// Records that the provider no longer has the sandbox of `name`.
    fn mark_gone(&self, name: &str, detail: &str) -> Result<(), SandboxError> {
        let db = self.zones.db();
        db.set_sandbox_provision(name, None, None, None)?;
        db.set_sandbox_paused_at(name, None)?;
        let reason = format!("its provider no longer has it: {detail}");
        db.set_sandbox_status(name, DESTROYED, Some(&reason), None, None)?;
        tracing::warn!(sandbox = %name, "sandbox gone: {reason}");
        self.journal_lifecycle(name, "sandbox-gone", &reason);
        Ok(())
    }

    /// Destroys a provisioned sandbox (its volume too, unless `keep_volume` or named in the
    /// config); the session stays, `destroyed`, and the next use creates a new one.
    pub async fn destroy(&self, req: &DestroyRequest) -> Result<SandboxInfo, SandboxError> {
        let name = req.name.as_str();
        let def = self.row(name)?;
        self.require_provisioned(&def, "destroy")?;
        let session = self.session(name);
        let mut attached = session.attached.lock().await;
        let def = self.row(name)?;
        self.destroy_locked(&def, &mut attached, req.keep_volume, "asked")
            .await?;
        drop(attached);
        self.get(name)
    }

    async fn destroy_locked(
        &self,
        def: &SandboxRow,
        attached: &mut Option<Attached>,
        keep_volume: bool,
        why: &str,
    ) -> Result<(), SandboxError> {
        let name = def.name.as_str();
        if let Some(id) = &def.provider_id {
            let (p, _) = self.provisioner(name)?;
            p.destroy(id, keep_volume)
                .await
                .map_err(|e| provision_error(name, e))?;
        }
        *attached = None;
        let db = self.zones.db();
        let volume = def.volume.as_deref().filter(|_| keep_volume);
        db.set_sandbox_provision(name, None, volume, None)?;
        db.set_sandbox_paused_at(name, None)?;
        db.set_sandbox_status(name, DESTROYED, None, Some(false), None)?;
        tracing::info!(sandbox = %name, id = ?def.provider_id, keep_volume, why, "sandbox destroyed");
        let mut detail = format!("{}: {why}", def.provider_id.as_deref().unwrap_or("none"));
        if let Some(v) = volume {
            detail.push_str(&format!(", volume {v} kept"));
        }
        self.journal_lifecycle(name, "sandbox-destroyed", &detail);
        Ok(())
    }

    /// Builds (or finds) the snapshot of `name`'s `snapshot_base` and `snapshot_setup`.
    pub async fn snapshot(&self, name: &str) -> Result<SnapshotInfo, SandboxError> {
        let def = self.row(name)?;
        self.require_provisioned(&def, "snapshot")?;
        let (p, settings) = self.provisioner(name)?;
        let Some(base) = settings.snapshot_base.clone() else {
            return Err(SandboxError::Invalid {
                key: format!("sandboxes.{name}.snapshot_base"),
                rule: match &settings.snapshot {
                    Some(s) => format!("is not set: the sandbox starts from the snapshot {s:?} already built; set snapshot_base (and snapshot_setup) instead to build one"),
                    None => "is not set: there is nothing to build a snapshot from".into(),
                },
            });
        };
        let id = p
            .snapshot(&SnapshotSpec {
                network: settings.snapshot_network,
                base,
                setup: settings.snapshot_setup.clone(),
            })
            .await
            .map_err(|e| provision_error(name, e))?;
        tracing::info!(sandbox = %name, snapshot = %id, "snapshot ready");
        Ok(SnapshotInfo {
            name: name.to_string(),
            provider: def.provider,
            snapshot: id,
        })
    }

    /// Pauses provisioned sandboxes unused for their idle pause and destroys those paused for
    /// their paused TTL; an `active` one its provider reports stopped (killed outside wardfs)
    /// is recorded `paused` (down) for the next use to resume, one it no longer has
    /// `destroyed`. Returns `(name, "paused" | "destroyed" | "down" | "gone")`. A sandbox whose
    /// lock is held (a run in progress) is in use and left alone.
    pub async fn tend_provisioned(&self) -> Vec<(String, &'static str)> {
        let mut done = Vec::new();
        let rows = match self.zones.db().sandboxes() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("cannot read the sandbox sessions: {e}");
                return done;
            }
        };
        for row in rows.into_iter().filter(is_provisioned) {
            let session = self.session(&row.name);
            let Ok(mut attached) = session.attached.try_lock() else {
                continue;
            };
            let Ok(Some(row)) = self.zones.db().sandbox(&row.name) else {
                continue;
            };
            let Some(id) = row.provider_id.clone() else {
                continue;
            };
            let now = self.now();
            let name = row.name.clone();
            if row.status == ACTIVE {
                if let Some(what) = self.probe_active(&row, &id, &mut attached).await {
                    done.push((name, what));
                    continue;
                }
            }
            if row.status == ACTIVE && row.idle_ttl_s > 0 {
                let idle_ms = now - row.last_accessed_at.unwrap_or(row.created_at);
                if idle_ms >= row.idle_ttl_s as i64 * 1000 {
                    match self.pause_locked(&name, &id, &mut attached, "idle").await {
                        Ok(()) => done.push((name, "paused")),
                        Err(e) => {
                            tracing::warn!(sandbox = %name, "cannot pause the idle sandbox: {e}")
                        }
                    }
                }
            } else if row.status == PAUSED && row.paused_ttl_s > 0 {
                let since = row
                    .paused_at
                    .or(row.last_accessed_at)
                    .unwrap_or(row.created_at);
                if now - since >= row.paused_ttl_s as i64 * 1000 {
                    match self
                        .destroy_locked(&row, &mut attached, false, "paused past its TTL")
                        .await
                    {
                        Ok(()) => done.push((name, "destroyed")),
                        Err(e) => {
                            tracing::warn!(sandbox = %name, "cannot destroy the paused sandbox: {e}")
                        }
                    }
                }
            }
        }
        done
    }

    /// Asks the provider whether the `active` sandbox `id` of `row` still runs (its lock held):
    /// one stopped outside wardfs (its processes killed, the machine restarted) is recorded
    /// `paused` with the reason, for the next use to resume (`"down"`); one the provider no
    /// longer has is `destroyed` (`"gone"`). `None`: it runs, or the provider did not say.
    async fn probe_active(
        &self,
        row: &SandboxRow,
        id: &str,
        attached: &mut Option<Attached>,
    ) -> Option<&'static str> {
        let name = row.name.as_str();
        let (p, _) = self.provisioner(name).ok()?;
        let state = match p.state(id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(sandbox = %name, id, "cannot ask the provider for its state: {e}");
                return None;
            }
        };
        let db = self.zones.db();
        match state {
            ProviderState::Stopped | ProviderState::Paused => {
                let reason = format!(
                    "it was {} outside wardfs; the next use resumes it",
                    if state == ProviderState::Stopped {
                        "stopped"
                    } else {
                        "paused"
                    }
                );
                tracing::warn!(sandbox = %name, id, "sandbox down: {reason}");
                *attached = None;
                self.journal_lifecycle(name, "sandbox-down", &format!("{id}: {reason}"));
                let recorded = db
                    .set_sandbox_status(name, PAUSED, Some(&reason), Some(false), None)
                    .and_then(|()| db.set_sandbox_paused_at(name, Some(self.now())));
                if let Err(e) = recorded {
                    tracing::warn!(sandbox = %name, "cannot record the session: {e}");
                }
                Some("down")
            }
            ProviderState::Missing => {
                *attached = None;
                match self.mark_gone(name, "found missing by the cleanup loop") {
                    Ok(()) => Some("gone"),
                    Err(e) => {
                        tracing::warn!(sandbox = %name, "cannot record the session: {e}");
                        None
                    }
                }
            }
            _ => None,
        }
    }

    /// Matches the sessions with what the providers hold, at daemon start: a running sandbox
    /// is adopted (`active`, resumed on next use for a fresh handle), a stopped one is
    /// `paused`, a session whose sandbox is gone is `destroyed`; a local sandbox no session
    /// owns is destroyed (a create a crash cut short). A Daytona sandbox no session owns is
    /// left alone and logged: another daemon may share the account.
    pub async fn reconcile(&self) {
        let rows = match self.zones.db().sandboxes() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("cannot read the sandbox sessions: {e}");
                return;
            }
        };
        let mut local_names = HashSet::new();
        let mut local: Option<Arc<dyn Provisioner>> = None;
        for row in rows.into_iter().filter(is_provisioned) {
            let name = row.name.clone();
            if row.provider == PROVIDER_LOCAL {
                local_names.insert(name.clone());
            }
            let p = match self.provisioner(&name) {
                Ok((p, _)) => p,
                Err(e) => {
                    tracing::warn!(sandbox = %name, "cannot reconcile: {e}");
                    continue;
                }
            };
            if row.provider == PROVIDER_LOCAL && local.is_none() {
                local = Some(p.clone());
            }
            self.reconcile_session(&name, p.as_ref()).await;
        }
        if let Some(p) = local {
            destroy_unowned_local(p.as_ref(), &local_names).await;
        }
    }

    /// Reconciles the session `name` under its lock: reads its row again, lists what the
    /// provider `p` holds, adopts a running sandbox made for the name but never recorded,
    /// settles the session by its sandbox's state and deals with the strays made for the name.
    async fn reconcile_session(&self, name: &str, p: &dyn Provisioner) {
        let session = self.session(name);
        let _held = session.attached.lock().await;
        let Ok(Some(row)) = self.zones.db().sandbox(name) else {
            return;
        };
        let listed = match p.list().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(sandbox = %name, "cannot list the provider's sandboxes: {e}");
                return;
            }
        };
        let mut id = row.provider_id.clone();
        let mut adopted = false;
        if id.is_none() {
            // Made for this name but never recorded (the daemon died inside create):
            // adopt the first that runs.
            if let Some(l) = unrecorded_to_adopt(&listed, name) {
                self.adopt_unrecorded(name, l);
                id = Some(l.id.clone());
                adopted = true;
            }
        }
        if let Some(id) = &id {
            if let Err(e) = self.settle_session(&row, id, adopted, p).await {
                tracing::warn!(sandbox = %name, "cannot reconcile: {e}");
            }
        }
        self.destroy_strays(&row, p, &listed, id.as_deref()).await;
    }

    /// Records `l`, a running sandbox made for `name` by a create cut short, as the session's.
    fn adopt_unrecorded(&self, name: &str, l: &Listed) {
        tracing::info!(sandbox = %name, id = %l.id, "adopting a sandbox made for this name");
        self.journal_lifecycle(
            name,
            "sandbox-adopted",
            &format!("{}: made for this name by a create cut short", l.id),
        );
        let _ = self
            .zones
            .db()
            .set_sandbox_provision(name, Some(&l.id), None, None);
    }

    /// Sets the session of `row` by what the provider says of its sandbox `id` (`adopted`: just
    /// adopted by [`Self::adopt_unrecorded`], already journaled): gone → `destroyed`, running →
    /// `active`, paused or stopped → `paused`, not running after a create or resume cut short
    /// → `paused` with the reason; anything else is left as it is.
    async fn settle_session(
        &self,
        row: &SandboxRow,
        id: &str,
        adopted: bool,
        p: &dyn Provisioner,
    ) -> Result<(), SandboxError> {
        let name = row.name.as_str();
        let db = self.zones.db();
        match p.state(id).await {
            Ok(ProviderState::Missing) if row.status == DESTROYED => Ok(()),
            Ok(ProviderState::Missing) => self.mark_gone(name, "found missing at daemon start"),
            Ok(ProviderState::Running) => {
                tracing::info!(sandbox = %name, id, "running sandbox adopted");
                if row.status != ACTIVE && !adopted {
                    self.journal_lifecycle(
                        name,
                        "sandbox-adopted",
                        &format!("{id}: running at daemon start, was {}", row.status),
                    );
                }
                db.set_sandbox_status(name, ACTIVE, None, None, Some(self.now()))
                    .and_then(|()| db.set_sandbox_paused_at(name, None))
                    .map_err(SandboxError::from)
            }
            Ok(state @ (ProviderState::Paused | ProviderState::Stopped)) => {
                let at = row.paused_at.unwrap_or_else(|| self.now());
                if row.status != PAUSED {
                    self.journal_lifecycle(
                        name,
                        "sandbox-paused",
                        &format!(
                            "{id}: {state:?} at daemon start, was {}; the next use resumes it",
                            row.status
                        ),
                    );
                }
                db.set_sandbox_status(name, PAUSED, None, None, None)
                    .and_then(|()| db.set_sandbox_paused_at(name, Some(at)))
                    .map_err(SandboxError::from)
            }
            Ok(other) if row.status == CREATING || row.status == RESUMING => {
                self.pause_cut_short(row, id, &other)
            }
            Ok(other) => {
                tracing::info!(sandbox = %name, id, state = ?other, "sandbox left as its provider reports it");
                Ok(())
            }
            Err(e) => Err(provision_error(name, e)),
        }
    }

    /// Records `paused` the session of `row`, whose create or resume the last daemon's end cut
    /// short and whose sandbox `id` is not running now (`other`): the next use resumes it (a
    /// local tree that never came up is started again).
    fn pause_cut_short(
        &self,
        row: &SandboxRow,
        id: &str,
        other: &ProviderState,
    ) -> Result<(), SandboxError> {
        let name = row.name.as_str();
        let db = self.zones.db();
        let reason = format!(
            "its {} was cut short (the provider reports {other:?}); the next use resumes it",
            if row.status == CREATING {
                "create"
            } else {
                "resume"
            }
        );
        tracing::warn!(sandbox = %name, id, "{reason}");
        self.journal_lifecycle(name, "sandbox-paused", &format!("{id}: {reason}"));
        db.set_sandbox_status(name, PAUSED, Some(&reason), None, None)
            .and_then(|()| db.set_sandbox_paused_at(name, Some(self.now())))
            .map_err(SandboxError::from)
    }

    /// Deals with the other sandboxes made for the name of `row` (not `id`), left over from a
    /// create or destroy cut short: a local one is destroyed, another provider's left alone.
    async fn destroy_strays(
        &self,
        row: &SandboxRow,
        p: &dyn Provisioner,
        listed: &[Listed],
        id: Option<&str>,
    ) {
        let name = row.name.as_str();
        for l in strays(listed, name, id) {
            if row.provider == PROVIDER_LOCAL {
                tracing::info!(sandbox = %name, id = %l.id, "destroying a stray sandbox made for this name");
                self.journal_lifecycle(
                    name,
                    "sandbox-destroyed",
                    &format!(
                        "{}: made for this name by a create or destroy cut short",
                        l.id
                    ),
                );
                if let Err(e) = p.destroy(&l.id, false).await {
                    tracing::warn!(sandbox = %name, id = %l.id, "cannot destroy it: {e}");
                }
            } else {
                tracing::warn!(sandbox = %name, id = %l.id, "the provider holds another sandbox made for this name; left alone");
            }
        }
    }
}

/// Returns the sandbox to adopt for `name` when its session recorded none: the first listed
/// one made for the name that runs.
fn unrecorded_to_adopt<'a>(listed: &'a [Listed], name: &str) -> Option<&'a Listed> {
    listed
        .iter()
        .find(|l| l.name.as_deref() == Some(name) && l.state == ProviderState::Running)
}

/// Returns the listed sandboxes made for `name` other than the session's own `id`.
fn strays<'a>(
    listed: &'a [Listed],
    name: &'a str,
    id: Option<&'a str>,
) -> impl Iterator<Item = &'a Listed> {
    listed
        .iter()
        .filter(move |l| l.name.as_deref() == Some(name) && Some(l.id.as_str()) != id)
}

/// Destroys the local sandboxes named for no session in `local_names`. Local sandboxes live in
/// this daemon's own state directory: one named for no session here is nobody's.
async fn destroy_unowned_local(p: &dyn Provisioner, local_names: &HashSet<String>) {
    if let Ok(listed) = p.list().await {
        for l in listed {
            let owned = l.name.as_ref().is_some_and(|n| local_names.contains(n));
            if !owned {
                tracing::info!(id = %l.id, name = ?l.name, "destroying a local sandbox no session owns");
                if let Err(e) = p.destroy(&l.id, false).await {
                    tracing::warn!(id = %l.id, "cannot destroy it: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, name: Option<&str>, state: ProviderState) -> Listed {
        Listed {
            id: id.into(),
            name: name.map(str::to_string),
            state,
        }
    }

    #[test]
    fn the_first_running_sandbox_made_for_the_name_is_adopted() {
        let all = [
            listed("a", Some("other"), ProviderState::Running),
            listed("b", Some("dev"), ProviderState::Stopped),
            listed("c", None, ProviderState::Running),
            listed("d", Some("dev"), ProviderState::Running),
            listed("e", Some("dev"), ProviderState::Running),
        ];
        assert_eq!(
            unrecorded_to_adopt(&all, "dev").map(|l| l.id.as_str()),
            Some("d")
        );
        assert!(unrecorded_to_adopt(&all[..3], "dev").is_none());
    }

    #[test]
    fn strays_are_the_others_made_for_the_name() {
        let all = [
            listed("a", Some("dev"), ProviderState::Running),
            listed("b", Some("dev"), ProviderState::Stopped),
            listed("c", Some("other"), ProviderState::Running),
            listed("d", None, ProviderState::Running),
        ];
        let ids = |id| {
            strays(&all, "dev", id)
                .map(|l| l.id.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(Some("a")), ["b"]);
        assert_eq!(ids(None), ["a", "b"]);
        assert_eq!(ids(Some("zz")), ["a", "b"]);
    }
}
