//! Gates: named points where a test can hold the daemon still, to make a race or a crash happen
//! at one exact moment (an edit holding its path lock, a restore half done, a checkpoint whose
//! objects are written but whose row is not).
//!
//! A gate exists only in debug builds, which is what the integration tests run; in a release
//! build [`hold`] is an empty inline function. A test arms gate `NAME` by creating the file
//! `$WARDFS_TEST_GATES/NAME` before the daemon reaches it. The daemon, reaching an armed gate,
//! creates `NAME.held` beside it (the test waits for that file: the daemon is now inside the
//! critical section) and waits until the test removes `NAME` (at most 60 s, so a broken test
//! cannot wedge a daemon), then removes `NAME.held` and goes on. A test may also kill the daemon
//! while it is held.
//!
//! Owns nothing but the wait; may import nothing of wardfs.

/// The armed file of gate `name` and the file saying it is held, when a test armed it.
#[cfg(debug_assertions)]
fn armed(name: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| std::env::var_os("WARDFS_TEST_GATES").map(PathBuf::from))
        .as_ref()?;
    let armed = dir.join(name);
    if !armed.exists() {
        return None;
    }
    let held = dir.join(format!("{name}.held"));
    let _ = std::fs::write(&held, std::process::id().to_string());
    Some((armed, held))
}

/// How long a gate holds at most, so a broken test cannot wedge a daemon.
#[cfg(debug_assertions)]
const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits at gate `name` while a test holds it armed (debug builds only).
#[cfg(debug_assertions)]
pub fn hold(name: &str) {
    let Some((armed, held)) = armed(name) else {
        return;
    };
    let deadline = std::time::Instant::now() + HOLD_AT_MOST;
    while armed.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&held);
}

/// [`hold`] for async code: waits without blocking the runtime's worker, so the daemon's other
/// tasks (its API) go on while one task is held.
#[cfg(debug_assertions)]
pub async fn hold_async(name: &str) {
    let Some((armed, held)) = armed(name) else {
        return;
    };
    let deadline = std::time::Instant::now() + HOLD_AT_MOST;
    while armed.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_file(&held);
}

/// Waits at gate `name` while a test holds it armed (debug builds only).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn hold(_name: &str) {}

/// [`hold`] for async code (debug builds only).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub async fn hold_async(_name: &str) {}
