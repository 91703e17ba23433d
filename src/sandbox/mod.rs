//! Remote sandboxes: the providers that reach a directory inside a sandbox.
//!
//! A provider implements [`SandboxFs`] (defined in `core::provider`, re-exported here, because
//! the core's remote-backed zones consume it and the core imports no provider). The first and so
//! far only provider is [`agent::SandboxAgent`], for any sandbox running the open-source
//! `sandbox-agent` server (with `--token` and `--no-telemetry`). [`mirror`] keeps a zone and a sandbox directory in step;
//! [`registry`] names the sandboxes, keeps their sessions (in the state database) and
//! serialises the runs against each; for the sandboxes wardfs makes itself ([`provision`]) it
//! also drives their lifecycle (create, pause, resume, destroy; `lifecycle`). [`run`] runs a
//! command in a sandbox with the workspace pushed before and pulled back after.
//!
//! May import `core`, `state` and `config`; never an adapter or `git` (`tests/rules` checks the
//! imports).

pub mod agent;
mod lifecycle;
pub mod mirror;
pub mod provision;
mod provisioned_fs;
pub mod registry;
pub mod run;

pub use crate::core::provider::{
    BatchItem, BatchReport, BoxFuture, Caps, ExecOutput, ExecRequest, HashAlgo, MetaUpdate,
    ProviderLimits, RemoteChange, RemoteEntry, RemoteMeta, SandboxFs, SandboxFsError,
    SandboxFsResult, WalkEntry,
};
pub use agent::{ExtraHeader, SandboxAgent, SandboxAgentConfig, Token};
pub use lifecycle::{CreateRequest, DestroyRequest, SnapshotInfo};
pub use provisioned_fs::{ProvisionedSandboxFs, RegistrySlot};
pub use registry::{Registry, SandboxError, SandboxInfo};

/// Builds the provider of a remote-backed zone (what the daemon hands to
/// [`crate::core::Zones::open_with`]). Nothing is contacted yet: a sandbox that is down gives
/// `SANDBOX_UNAVAILABLE` on use, not a daemon that cannot start. A sandbox wardfs makes itself
/// is reached through the registry `slot` will hold ([`ProvisionedSandboxFs`]), made or resumed on
/// the zone's first use.
pub fn zone_provider(
    b: &crate::config::SandboxBacking,
    slot: &std::sync::Arc<RegistrySlot>,
) -> Result<std::sync::Arc<dyn SandboxFs>, String> {
    let s = &b.sandbox;
    if s.provision.is_some() {
        return Ok(std::sync::Arc::new(ProvisionedSandboxFs::new(
            s,
            &b.path,
            slot.clone(),
        )));
    }
    let mut config = SandboxAgentConfig::new(s.url.clone());
    config.token_env = s.token_env.clone();
    config.request_timeout = s.request_timeout.max(std::time::Duration::from_secs(1));
    config.connect_timeout = config
        .request_timeout
        .min(std::time::Duration::from_secs(5));
    SandboxAgent::connect(&config)
        .map(|a| std::sync::Arc::new(a) as std::sync::Arc<dyn SandboxFs>)
        .map_err(|e| e.to_string())
}
