//! A zone served from a sandbox wardfs makes itself (`[zones.workspace] sandbox = "dev"` with
//! `[sandboxes.dev] provider = "local"` or `"daytona"`).
//!
//! Such a sandbox has no URL or token until its provider hands them out, and a new pair after
//! each pause, resume or re-create, so the zone cannot hold one connection made at start.
//! [`ProvisionedSandboxFs`] implements the core's [`SandboxFs`] by asking the [`Registry`] for the
//! sandbox's connection: the first call attaches it under the sandbox's lock exactly as a
//! mirror run does (creating the sandbox lazily, or resuming it when paused), and later calls
//! reuse that connection for as long as the registry holds it. The zone keeps only a weak
//! reference: a pause, destroy or re-create drops the registry's connection, and the next call
//! attaches again (resuming or re-creating).
//!
//! Every call records the sandbox as used (at most once a second), so the idle-pause loop
//! (`Registry::tend_provisioned`) leaves a sandbox the zone keeps using alone and pauses it once
//! the zone has been idle for `idle_pause_minutes`. A failure to provision comes back as a
//! [`SandboxFsError`] of the matching class (`SANDBOX_UNAVAILABLE`, `AUTH_FAILED`,
//! `INVALID_ARGUMENT`), which the core turns into the API's code and the mount's errno; the
//! core's own deadline bounds a slow create, so a caller never hangs.
//!
//! The zones are opened before the registry exists (the registry is built over them), so the
//! zone reaches it through a [`RegistrySlot`] the daemon fills once the registry holds the
//! config's sandboxes; until then calls are `SANDBOX_UNAVAILABLE`. Lifecycle work runs on the
//! runtime the slot names (the daemon's), where mirror runs and the cleanup loop run too.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::agent::{SandboxAgent, SandboxAgentConfig};
use super::provision::ProvisionError;
use super::registry::{Registry, SandboxError};
use crate::core::provider::{
    BatchItem, BatchReport, BoxFuture, Caps, ExecOutput, ExecRequest, HashAlgo, MetaUpdate,
    ProviderLimits, RemoteChange, RemoteEntry, RemoteMeta, SandboxFs, SandboxFsError,
    SandboxFsResult, WalkEntry,
};
use crate::core::ErrorCode;

/// The shortest time between two records of a zone's use in the state database.
const MARK_EVERY_MS: i64 = 1000;

/// Where a [`ProvisionedSandboxFs`] finds the registry, filled by the daemon once it exists.
#[derive(Default)]
pub struct RegistrySlot {
    filled: OnceLock<(Weak<Registry>, tokio::runtime::Handle)>,
}

impl RegistrySlot {
    /// Hands the registry (held weakly: the registry holds the zones) and the runtime its
    /// lifecycle work runs on to every zone built with this slot. Only the first call counts.
    pub fn fill(&self, registry: &Arc<Registry>, rt: tokio::runtime::Handle) {
        let _ = self.filled.set((Arc::downgrade(registry), rt));
    }

    fn get(&self) -> Option<(Arc<Registry>, tokio::runtime::Handle)> {
        let (reg, rt) = self.filled.get()?;
        Some((reg.upgrade()?, rt.clone()))
    }
}

/// The provider of a zone served from a provisioned sandbox: the registry's connection to it,
/// attached on first use.
pub struct ProvisionedSandboxFs {
    /// The sandbox's name in `[sandboxes]`.
    name: String,
    /// The zone's directory inside the sandbox, made after each attach.
    root: String,
    slot: Arc<RegistrySlot>,
    limits: ProviderLimits,
    /// The connection the registry holds (weak: dropped by the registry, it is not used again).
    current: Mutex<Weak<SandboxAgent>>,
    /// When this zone last recorded a use (ms, the zones' clock).
    marked_ms: AtomicI64,
}

impl ProvisionedSandboxFs {
    /// Serves `root` inside the provisioned sandbox `sandbox`, through the registry `slot` will
    /// hold; nothing is made or contacted until the first call.
    pub fn new(
        sandbox: &crate::config::SandboxSettings,
        root: &str,
        slot: Arc<RegistrySlot>,
    ) -> ProvisionedSandboxFs {
        let request_timeout = sandbox.request_timeout.max(Duration::from_secs(1));
        let exec_timeout = SandboxAgentConfig::new("").exec_timeout;
        ProvisionedSandboxFs {
            name: sandbox.name.clone(),
            root: root.to_string(),
            slot,
            limits: SandboxAgent::limits_of(request_timeout, exec_timeout),
            current: Mutex::new(Weak::new()),
            marked_ms: AtomicI64::new(i64::MIN),
        }
    }

    fn unavailable(&self, reason: String) -> SandboxFsError {
        SandboxFsError::Unavailable {
            url: format!("sandboxes.{}", self.name),
            reason,
        }
    }

    /// Returns the sandbox's connection: the one the registry holds, or a new one attached
    /// under the sandbox's lock (creating or resuming the sandbox).
    async fn agent(&self) -> SandboxFsResult<Arc<SandboxAgent>> {
        let held = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade();
        let Some((reg, rt)) = self.slot.get() else {
            return Err(self.unavailable(
                "the daemon is starting (its sandbox registry is not ready yet); try again".into(),
            ));
        };
        if let Some(agent) = held {
            self.mark_used(&reg);
            return Ok(agent);
        }
        let name = self.name.clone();
        let root = self.root.clone();
        let attaching = reg.clone();
        let attached = rt
            .spawn(async move {
                let session = attaching.session(&name);
                let mut held = session.attached.lock().await;
                let (agent, _) = attaching.attach(&name, &mut held).await?;
                // A sandbox made just now has no zone directory yet.
                agent
                    .mkdir_p(&root)
                    .await
                    .map_err(|e| SandboxError::Remote {
                        name: name.clone(),
                        source: Box::new(e),
                    })?;
                Ok::<_, SandboxError>(agent)
            })
            .await;
        match attached {
            Ok(Ok(agent)) => {
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&agent);
                self.marked_ms.store(reg.now(), Ordering::Relaxed);
                Ok(agent)
            }
            Ok(Err(e)) => Err(self.remote_error(e)),
            Err(e) => Err(self.unavailable(format!("attaching it failed: {e}"))),
        }
    }

    /// Records a use, so the idle-pause loop counts the zone's calls; at most once a second.
    fn mark_used(&self, reg: &Registry) {
        let now = reg.now();
        let last = self.marked_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < MARK_EVERY_MS
            || self
                .marked_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Err(e) = reg.mark_used(&self.name, now) {
            tracing::warn!(sandbox = %self.name, "cannot record the zone's use: {e}");
        }
    }

    /// Forgets the connection after a failure that says the sandbox is down or refuses it, so
    /// the next call asks the registry (which health-checks, resumes or re-creates).
    fn after<T>(&self, r: SandboxFsResult<T>) -> SandboxFsResult<T> {
        if let Err(e) = &r {
            if matches!(
                e.code(),
                ErrorCode::SandboxUnavailable | ErrorCode::AuthFailed
            ) {
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Weak::new();
            }
        }
        r
    }

    /// Maps a failed attach to the [`SandboxFsError`] class the core turns into a code and errno.
    fn remote_error(&self, e: SandboxError) -> SandboxFsError {
        match e {
            SandboxError::Remote { source, .. } => *source,
            SandboxError::Invalid { key, rule } => {
                SandboxFsError::InvalidConfig { name: key, rule }
            }
            SandboxError::Provision { source, .. } => match *source {
                ProvisionError::Invalid { key, rule } => {
                    SandboxFsError::InvalidConfig { name: key, rule }
                }
                e @ ProvisionError::Auth { .. } => SandboxFsError::AuthFailed {
                    url: format!("sandboxes.{}", self.name),
                    status: 401,
                    reason: e.to_string(),
                },
                e => self.unavailable(e.to_string()),
            },
            e => self.unavailable(e.to_string()),
        }
    }
}

/// Runs `op` on the sandbox's connection and forgets the connection when the sandbox failed.
macro_rules! through {
    ($self:ident, |$a:ident| $call:expr) => {
        Box::pin(async move {
            let $a = $self.agent().await?;
            let r = $call.await;
            $self.after(r)
        })
    };
}

impl SandboxFs for ProvisionedSandboxFs {
    fn provider(&self) -> &'static str {
        "sandbox-agent"
    }

    fn caps(&self) -> Caps {
        SandboxAgent::caps_of()
    }

    fn limits(&self) -> ProviderLimits {
        self.limits.clone()
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<RemoteMeta>> {
        through!(self, |a| a.stat(path))
    }

    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<Vec<RemoteEntry>>> {
        through!(self, |a| a.list(path))
    }

    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<Bytes>> {
        through!(self, |a| a.read(path))
    }

    fn write<'a>(&'a self, path: &'a str, data: Bytes) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.write(path, data))
    }

    fn read_into<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
        sink: &'a mut (dyn std::io::Write + Send),
    ) -> BoxFuture<'a, SandboxFsResult<u64>> {
        through!(self, |a| a.read_into(path, limit, sink))
    }

    fn upload<'a>(
        &'a self,
        path: &'a str,
        src: std::fs::File,
    ) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.upload(path, src))
    }

    fn mkdir_p<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.mkdir_p(path))
    }

    fn remove<'a>(&'a self, path: &'a str, recursive: bool) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.remove(path, recursive))
    }

    fn rename<'a>(&'a self, from: &'a str, to: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.rename(from, to))
    }

    fn check(&self) -> BoxFuture<'_, SandboxFsResult<()>> {
        through!(self, |a| a.check())
    }

    fn put_batch<'a>(
        &'a self,
        root: &'a str,
        items: Vec<BatchItem>,
    ) -> BoxFuture<'a, SandboxFsResult<BatchReport>> {
        through!(self, |a| a.put_batch(root, items))
    }

    fn walk<'a>(&'a self, root: &'a str) -> BoxFuture<'a, SandboxFsResult<Vec<WalkEntry>>> {
        through!(self, |a| a.walk(root))
    }

    fn set_meta<'a>(
        &'a self,
        path: &'a str,
        meta: MetaUpdate,
    ) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.set_meta(path, meta))
    }

    fn symlink<'a>(&'a self, target: &'a str, path: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        through!(self, |a| a.symlink(target, path))
    }

    fn hash<'a>(&'a self, path: &'a str, algo: HashAlgo) -> BoxFuture<'a, SandboxFsResult<String>> {
        through!(self, |a| a.hash(path, algo))
    }

    fn exec(&self, req: ExecRequest) -> BoxFuture<'_, SandboxFsResult<ExecOutput>> {
        through!(self, |a| a.exec(req))
    }

    fn watch<'a>(
        &'a self,
        root: &'a str,
    ) -> BoxFuture<'a, SandboxFsResult<tokio::sync::mpsc::Receiver<RemoteChange>>> {
        through!(self, |a| a.watch(root))
    }
}
