//! Provisioned sandboxes: the lifecycle of a sandbox wardfs makes itself.
//!
//! A [`Provisioner`] creates a sandbox from a snapshot (a prepared root with the dependencies
//! installed), pauses, resumes and destroys it, and keeps volumes that outlive a sandbox. What it
//! hands back is a [`Handle`]: the URL and token of the `sandbox-agent` server inside, which is
//! all the rest of wardfs (mirror, remote zones) ever sees. Providers:
//! * `local`: a process tree in its own namespaces on this machine (see `local`);
//! * `daytona`: Daytona's REST API (see [`daytona`]).
//!
//! Failures are classified the same way for every provider ([`ProvisionError`]), because the
//! session logic above acts on the class, not on the provider: a missing sandbox is recreated,
//! one that is down is paused for a later resume, anything else is an error that is not retried.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::core::provider::BoxFuture;
use crate::sandbox::agent::{ExtraHeader, SandboxAgentConfig, Token};

pub mod daytona;

pub mod local;

/// What a new sandbox is made from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The sandbox's name in wardfs (`[sandboxes.NAME]`); providers label the sandbox with it so
    /// that a restarted daemon can find it again ([`Provisioner::list`]).
    pub name: String,
    /// The snapshot to start from ([`Provisioner::snapshot`]); `None`: the provider's default.
    pub snapshot: Option<String>,
    /// A volume to attach, whose contents outlive the sandbox.
    pub volume: Option<VolumeMount>,
    /// Environment variables of the sandbox's processes (never a wardfs credential).
    pub env: BTreeMap<String, String>,
}

/// A volume and where it appears inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// The provider's id of the volume ([`Provisioner::create_volume`]).
    pub volume: String,
    /// An absolute path inside the sandbox.
    pub mount_path: String,
}

/// What a snapshot holds: a base and the commands that install dependencies into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSpec {
    /// The base: an image name (daytona), or for local a host directory to copy as the root
    /// or `minimal` (the host's `/usr` read-only and a few `/etc` files).
    pub base: String,
    /// Shell commands run once, in order, in a sandbox made from `base`.
    pub setup: Vec<String>,
    /// The setup commands reach the host's network (to download dependencies); a sandbox made
    /// from the snapshot never does. Local provider (a cloud provider's builds have their
    /// network anyway). Part of the key only when set, so older keys stay as they were.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
}

impl SnapshotSpec {
    /// The key of this spec: an unchanged spec gives the same key, so its snapshot is reused.
    pub fn key(&self) -> String {
        let canon = serde_json::to_vec(self).expect("a spec serialises");
        let hash = blake3::hash(&canon);
        format!("wardfs-{}", &hash.to_hex()[..16])
    }
}

/// How to reach the `sandbox-agent` server of a running sandbox.
#[derive(Clone)]
pub struct Handle {
    /// The provider's id of the sandbox.
    pub id: String,
    /// The server's base URL (`http://127.0.0.1:PORT` locally, a preview URL in the cloud).
    pub url: String,
    /// The server's bearer token (never logged; `Debug` masks it).
    pub token: Token,
    /// A header the way to the server wants besides the token (a cloud preview proxy's own
    /// credential, e.g. Daytona's `x-daytona-preview-token`); `None` locally. `Debug` masks it.
    pub extra_header: Option<ExtraHeader>,
}

impl Handle {
    /// Returns a handle to the server at `url` with `token` and no extra header.
    pub fn new(id: impl Into<String>, url: impl Into<String>, token: Token) -> Handle {
        Handle {
            id: id.into(),
            url: url.into(),
            token,
            extra_header: None,
        }
    }

    /// Returns the `sandbox-agent` config that reaches this server (default timeouts and
    /// limits; the token goes separately to [`crate::sandbox::SandboxAgent::with_token`]).
    pub fn agent_config(&self) -> SandboxAgentConfig {
        let mut config = SandboxAgentConfig::new(self.url.clone());
        config.extra_header = self.extra_header.clone();
        config
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("token", &self.token)
            .field("extra_header", &self.extra_header)
            .finish()
    }
}

/// The state a provider reports for one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderState {
    Creating,
    Running,
    Paused,
    /// Stopped, or in the provider's error state: a resume may bring it back.
    Stopped,
    /// The provider has no such sandbox.
    Missing,
    /// Anything else the provider says, as it says it.
    Other(String),
}

/// A sandbox the provider knows of, for reconciling with the sessions at daemon start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// The wardfs name it was created for (its label), if it carries one.
    pub name: Option<String>,
    pub state: ProviderState,
}

/// A failed lifecycle call, classified for the session logic.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The sandbox (or volume, or snapshot) does not exist: HTTP 404, or no such process tree.
    /// The session is recreated.
    #[error("{what} not found: {detail}")]
    Missing { what: String, detail: String },
    /// The provider or the sandbox cannot be reached now: connection refused, timed out, HTTP
    /// 5xx. The session is paused and resumed on its next use.
    #[error("{what} is unavailable: {detail}")]
    Down { what: String, detail: String },
    /// The credentials were refused (HTTP 401/403) or are missing; never retried.
    #[error("{what}: credentials refused: {detail}")]
    Auth { what: String, detail: String },
    /// A bad spec or config value: names the key and the rule it broke.
    #[error("invalid {key}: {rule}")]
    Invalid { key: String, rule: String },
    /// Anything else: not recoverable, not retried.
    #[error("{what}: {detail}")]
    Fatal { what: String, detail: String },
}

/// The result of a lifecycle call.
pub type ProvisionResult<T> = Result<T, ProvisionError>;

/// One provider of sandboxes. Every call is idempotent where the provider allows it (pausing a
/// paused sandbox, destroying a missing one succeed).
pub trait Provisioner: Send + Sync {
    /// The provider's kind, as in `provider = "..."` (`local`, `daytona`).
    fn kind(&self) -> &'static str;

    /// Creates and starts a sandbox, waits until its `sandbox-agent` answers, and returns how
    /// to reach it. A failed create destroys whatever it had made.
    fn create<'a>(&'a self, spec: &'a SandboxSpec) -> BoxFuture<'a, ProvisionResult<Handle>>;

    /// Pauses a running sandbox (its processes frozen or the machine stopped; its files kept).
    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<()>>;

    /// Resumes a paused or stopped sandbox, restarts its `sandbox-agent` if needed, waits for
    /// it to answer, and returns how to reach it (the URL or token may have changed).
    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<Handle>>;

    /// Destroys a sandbox; its volume is kept when `keep_volume` (else deleted with it, if the
    /// sandbox owned it). A missing sandbox is not an error.
    fn destroy<'a>(&'a self, id: &'a str, keep_volume: bool) -> BoxFuture<'a, ProvisionResult<()>>;

    /// The provider's state of one sandbox.
    fn state<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<ProviderState>>;

    /// Every sandbox this provider holds for wardfs (those carrying wardfs's label).
    fn list(&self) -> BoxFuture<'_, ProvisionResult<Vec<Listed>>>;

    /// Builds (or finds, by [`SnapshotSpec::key`]) the snapshot of `spec`; returns its id.
    fn snapshot<'a>(&'a self, spec: &'a SnapshotSpec) -> BoxFuture<'a, ProvisionResult<String>>;

    /// Creates (or finds) the volume `name`; returns its id.
    fn create_volume<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ProvisionResult<String>>;

    /// Deletes a volume; a missing one is not an error.
    fn delete_volume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<()>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_snapshot_spec_keeps_its_key_and_any_change_moves_it() {
        let a = SnapshotSpec {
            network: false,
            base: "debian:12".into(),
            setup: vec!["apt-get install -y ripgrep".into()],
        };
        assert_eq!(a.key(), a.clone().key());
        let mut b = a.clone();
        b.setup.push("true".into());
        assert_ne!(a.key(), b.key());
        assert!(a.key().starts_with("wardfs-") && a.key().len() == 23);
        // The network switch moves the key only when on: keys made before it existed hold.
        let mut c = a.clone();
        c.network = true;
        assert_ne!(a.key(), c.key());
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"base":"debian:12","setup":["apt-get install -y ripgrep"]}"#
        );
    }

    #[test]
    fn a_handle_never_prints_its_token() {
        let mut h = Handle::new("x", "http://127.0.0.1:1", Token::new("s3cret"));
        h.extra_header = Some(ExtraHeader {
            name: "x-preview-token".into(),
            value: Token::new("pr3view"),
        });
        let shown = format!("{h:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("pr3view"),
            "{shown}"
        );
        assert!(shown.contains("x-preview-token"), "{shown}");
    }
}
