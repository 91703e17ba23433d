//! Remote sandboxes: the providers that reach a directory inside a sandbox.
//!
//! A provider implements [`RemoteFs`] (defined in `core::remote`, re-exported here, because
//! the core's remote-backed zones consume it and the core imports no provider). The first and so
//! far only provider is [`agent::SandboxAgent`], for any sandbox running the open-source
//! `sandbox-agent` server. Sessions, the mirror and remote-backed zones build on this room;
//! nothing here keeps state beyond one provider's connection pool and request counters.

pub mod agent;
pub mod mirror;

pub use crate::core::remote::{
    BatchItem, BatchReport, BoxFuture, Caps, ExecOutput, ExecRequest, HashAlgo, Limits, MetaUpdate,
    RemoteChange, RemoteEntry, RemoteError, RemoteFs, RemoteMeta, RemoteResult, WalkEntry,
};
pub use agent::{SandboxAgent, SandboxAgentConfig, Token};
