//! The integration tests, one binary: a module per area, each driving a real `wardfs serve` (and
//! where the area needs them a real mount, real git servers on loopback, the real sandbox-agent).
//! One binary links the dependency tree once. `make test` runs it one area at a time
//! (`.ci/test-areas`: areas that mount, kill daemons or time servers disturb each other when run
//! side by side on two cores); one area by hand with
//! `cargo test --test main --no-run && .ci/netns cargo test --offline --test main <area>::`
//! (root: FUSE, tmpfs, and the loopback-only network namespace sandbox-agent needs).
//!
//! The harness is one module, `support`, used by every area as `crate::support::…`: the one
//! daemon starter (`support::daemon::Daemon`, mounted or not), git servers, sandbox-agent
//! started safely, fault injection and small tools; see `support/mod.rs` for what each file owns.
//! The area modules hold tests only.

mod api;
mod fuse;
mod git;
mod load;
mod mcp;
mod reliability;
mod review;
mod rules;
mod sandbox;
mod security;
mod support;
