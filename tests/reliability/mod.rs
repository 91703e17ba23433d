//! Reliability tests: a real `wardfs serve` (mounted, with a git remote served by `git daemon`
//! and a sandbox served by the real sandbox-agent) killed with SIGKILL at random points of a
//! mixed workload (`crash`), and faults injected under it (`faults`): a full disk, a git
//! connection dropped mid-push, a sandbox killed mid-transfer, a sandbox that stops answering;
//! and checkpoints and restores killed half way at a gate (`checkpoint`).
//!
//! Run with `make test`, or `cargo test --test main --no-run && .ci/netns cargo test
//! --offline --test main reliability::` (root: FUSE, tmpfs, and a loopback-only network namespace for
//! sandbox-agent). `WARDFS_RELIABILITY_SEED=<n>` replays a crash run.

mod bad_entry;
mod checkpoint;
mod crash;
mod faults;

/// `[sandboxes.<name>]` for a server at `url` whose root is `root`, its token in the variable
/// `var`, with no retry and a request timeout of `timeout_secs`.
pub fn sandbox_config(name: &str, url: &str, root: &str, var: &str, timeout_secs: u64) -> String {
    format!(
        "[sandboxes.{name}]\nprovider = \"sandbox-agent\"\nurl = \"{url}\"\ntoken_env = \"{var}\"\nroot = \"{root}\"\nretries = 0\nretry_backoff_ms = 100\nrequest_timeout_secs = {timeout_secs}\n"
    )
}

/// Puts a sandbox token in this process's environment, which the daemons started afterwards
/// inherit. Each test uses a variable of its own, as the tests run in parallel.
pub fn set_token(var: &str, token: &str) {
    std::env::set_var(var, token);
}
