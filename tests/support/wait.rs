//! Waiting for a condition rather than for a fixed time: a test polls what it waits for until it
//! holds or a deadline passes, so it goes on as soon as it can and fails, naming what it waited
//! for, only when the wait was far longer than it should ever be.

use std::time::{Duration, Instant};

/// How often a condition is checked again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it answers `Some`, and returns that answer; panics naming `what` once
/// `timeout` has passed.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(POLL);
    }
}

/// Polls `check` until it holds; panics naming `what` once `timeout` has passed.
pub fn wait_until(what: &str, timeout: Duration, check: impl FnMut() -> bool) {
    assert!(eventually(timeout, check), "{what}: not within {timeout:?}");
}

/// Polls `check` until it holds or `timeout` has passed; answers whether it held, for a test
/// that says more than [`wait_until`] when it does not.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
    true
}
