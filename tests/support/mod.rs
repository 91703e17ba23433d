//! The one test harness, shared by every area as `crate::support::…`:
//!
//! * [`daemon`]: [`Daemon`], the one starter of `wardfs serve` (with or without its mount,
//!   inherited or hermetic environment, tokens, fd limit), and [`daemon::serve_command`], the
//!   only place the tests build that command; the daemon driven by CLI, curl and the client.
//! * [`mount`]: FUSE checks, whether a path is mounted, the lazy unmount after a crash.
//! * [`inotify`]: a real recursive inotify watcher on a tree (as editors' watchers watch one),
//!   the events it hears and when.
//! * [`git_servers`]: bare repositories, `git daemon` and `git http-backend` behind lighttpd on
//!   loopback, and the hermetic `git` CLI.
//! * [`sandbox_agent`]: the real sandbox-agent, started safely (`--token`, `--no-telemetry`,
//!   127.0.0.1, temp HOME, cleared environment, loopback-only namespace checked first), and a
//!   hostile fake one.
//! * [`api`]: a blocking API client that survives a dead daemon; the code of an error body.
//! * [`faults`]: a connection-cutting TCP proxy and a size-limited tmpfs.
//! * [`gates`]: points where a debug daemon waits for the test (a race or a crash made exact).
//! * [`rng`]: seeded randomness and noise.
//! * [`files`]: snapshots and walks of what a daemon left on disk.
//! * [`page_cache`]: which pages of a file the page cache holds (also the unit tests', by path).
//! * [`tools`]: installed programs (`require_tool`, `which`), free ports, random tokens.
//! * [`wait`]: waiting for a condition, polled until a deadline, instead of a fixed sleep.
//!
//! `fs_model.rs` is no module of `support`: it is the reference model of a zone's tree shared by
//! the core's unit test and the mount's test (`fuse::test_model`), each including it by path.
//!
//! Every process a harness starts is killed and reaped when its handle drops, also when the
//! test panics; a missing tool fails the test, naming what to install: nothing is skipped.

pub mod api;
pub mod daemon;
pub mod faults;
pub mod files;
pub mod gates;
pub mod git_servers;
pub mod inotify;
pub mod mcp;
pub mod mount;
pub mod page_cache;
pub mod rng;
pub mod sandbox_agent;
pub mod tools;
pub mod wait;

pub use daemon::{Daemon, BIN};
