//! Remote sandboxes: the providers that reach a directory inside a sandbox.
//!
//! A provider implements [`RemoteFs`] (defined in `core::remote`, re-exported here, because
//! the core's remote-backed zones consume it and the core imports no provider). The first and so
//! far only provider is [`agent::SandboxAgent`], for any sandbox running the open-source
//! `sandbox-agent` server. [`mirror`] keeps a zone and a sandbox directory in step;
//! [`registry`] names the sandboxes, keeps their sessions (in the state database) and
//! serialises the runs against each.

pub mod agent;
pub mod mirror;
pub mod registry;

pub use crate::core::remote::{
    BatchItem, BatchReport, BoxFuture, Caps, ExecOutput, ExecRequest, HashAlgo, Limits, MetaUpdate,
    RemoteChange, RemoteEntry, RemoteError, RemoteFs, RemoteMeta, RemoteResult, WalkEntry,
};
pub use agent::{SandboxAgent, SandboxAgentConfig, Token};
pub use registry::{Registry, SandboxError, SandboxInfo};
