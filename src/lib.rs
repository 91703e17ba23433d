//! sandfs: a local-first virtual filesystem daemon for AI agents and the people who supervise them.
//!
//! Rooms, by noun: [`core`] (zones, paths, operations), [`state`] (SQLite: journal and the rest),
//! [`fuse`] (the mount), [`git`] (pull, stage, push), [`api`] (the Unix-socket HTTP API), [`cli`]
//! (the `sandfs` command), [`mcp`] (the MCP server), [`config`] (`config.toml`), [`sandbox`]
//! (remote sandbox providers). Dependencies point one way: adapters (`api`, `cli`, `fuse`, `mcp`)
//! → `git`/`sandbox` → `core` → `state`.

pub mod api;
pub mod cli;
pub mod config;
pub mod core;
pub mod fuse;
pub mod git;
pub mod mcp;
pub mod review;
pub mod sandbox;
pub mod state;
