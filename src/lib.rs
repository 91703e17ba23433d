//! wardfs: a local-first virtual filesystem daemon for AI agents and the people who supervise them.
//!
//! Rooms, by noun (the map with what each may import is `docs/architecture.md`):
//! [`core`] (zones, paths, the file operations and the mount's node operations, with every rule),
//! [`state`] (SQLite: journal and the rest), [`config`] (`config.toml`), [`git`] (pull, stage,
//! push), [`sandbox`] (sandbox providers, mirroring), [`fuse`] (the mount: decode, reply),
//! [`api`] (the Unix-socket HTTP API), [`client`] (the socket's client, shared by the CLI, MCP and
//! the review page), [`cli`] (the `wardfs` command), [`mcp`] (the MCP server), [`review`] (the
//! review page), [`daemon`] (start-up wiring and schedules). Dependencies point one way:
//! `daemon` → adapters (`api`, `cli`, `fuse`, `mcp`, `review`, `client`) → `git`/`sandbox` →
//! `core` → `state`/`config`.

pub mod api;
pub mod checkpoint;
pub mod cli;
pub mod client;
pub mod config;
pub mod core;
pub mod daemon;
pub mod fork;
pub mod fuse;
pub mod git;
pub mod mcp;
pub mod proto;
pub mod review;
pub mod sandbox;
pub mod state;
