//! Gates of the daemon under test (`wardfs::core::gate`, debug builds): [`Gates`] is a directory
//! a daemon is started with (`WARDFS_TEST_GATES`, through [`Gates::env`]); a test arms a named
//! point, waits until the daemon is held there, acts (a concurrent change, a SIGKILL), and
//! releases it. Used by the tests of path locks through the mount and of crashes mid-checkpoint.

use std::time::{Duration, Instant};

/// A directory of armed gates, removed on drop.
pub struct Gates {
    dir: tempfile::TempDir,
}

impl Gates {
    pub fn new() -> Gates {
        Gates {
            dir: tempfile::Builder::new()
                .prefix("wardfs-gates")
                .tempdir()
                .unwrap(),
        }
    }

    /// The variable and value to start a daemon with.
    pub fn env(&self) -> (&'static str, String) {
        ("WARDFS_TEST_GATES", self.dir.path().display().to_string())
    }

    /// Arms gate `name`: the next time the daemon reaches it, it waits there.
    pub fn arm(&self, name: &str) {
        std::fs::write(self.dir.path().join(name), b"").unwrap();
    }

    /// Whether the daemon is held at gate `name` now.
    pub fn is_held(&self, name: &str) -> bool {
        self.dir.path().join(format!("{name}.held")).exists()
    }

    /// Waits until the daemon is held at gate `name`; panics after `timeout`.
    pub fn wait_held(&self, name: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.is_held(name) {
            assert!(
                Instant::now() < deadline,
                "the daemon did not reach gate {name} within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Lets a daemon held at gate `name` go on (and disarms it).
    pub fn release(&self, name: &str) {
        let _ = std::fs::remove_file(self.dir.path().join(name));
    }
}
