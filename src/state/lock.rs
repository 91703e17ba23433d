//! One daemon per state directory.
//!
//! Two daemons on one state database journal each other's files as deleted, race their
//! checkpoints and sandboxes, and each believes its rows are the truth. The first daemon holds an
//! exclusive `flock` on `daemon.lock` in the state directory for its whole life (the kernel
//! drops it when the process ends, however it ends, so a crash leaves no stale lock); the file
//! holds its pid, so the refusal a second daemon gets names the first.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::Path;

use super::StateError;

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "daemon.lock";

/// The state directory's lock, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of the state directory `dir` (creating both, the directory mode 0700), or
    /// says which daemon holds it.
    pub fn take(dir: &Path) -> Result<DirLock, StateError> {
        let io = |e: std::io::Error| StateError::Dir {
            path: dir.display().to_string(),
            source: e,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let mut text = String::new();
                let _ = file.take(32).read_to_string(&mut text);
                return Err(StateError::InUse {
                    path: dir.display().to_string(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(e) => return Err(io(e.into())),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_holders_pid_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = DirLock::take(&state).unwrap();
        // flock locks belong to the open file description: a second open in this process
        // conflicts just as another process's would.
        match DirLock::take(&state) {
            Err(StateError::InUse { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("a second lock was not refused: {other:?}"),
        }
        drop(first);
        // A child another test of this process forks holds a copy of the descriptor (and so
        // the lock) until it execs, where the descriptor closes: try for a second.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match DirLock::take(&state) {
                Ok(_) => break,
                Err(e) if std::time::Instant::now() > deadline => {
                    panic!("free again once the first is dropped: {e:?}")
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }
}
