//! The security suite: who may use the socket, every way out of a zone, and where secrets must
//! never show up. Also runs schemathesis against the API (`fuzz_api`).
//!
//! Path escapes through the API and the CLI are covered by tests/api/escape.rs (a corpus of
//! `..`, absolute paths, symlink chains, magic links, hard links, NUL bytes, overlong names),
//! and git pull of a repository holding symlinks that point out by tests/git/scenarios.rs
//! (`symlinks_pointing_out_of_the_repository_are_not_written`); this binary covers the socket,
//! the MCP server, the mount, mirror pulls from a real sandbox, and secrets.
//!
//! Run as root inside the loopback-only namespace (`make test`, or
//! `cargo test --test main --no-run && .ci/netns cargo test --offline --test main security::`).

mod creds;
mod escape;
mod fuzz_api;
mod races;
mod secrets;
mod socket;
mod terminal;
