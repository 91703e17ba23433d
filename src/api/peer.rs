//! The socket's listener: accepts only peers whose uid is allowed (checked with SO_PEERCRED).
//!
//! A refused peer is logged and its connection closed before a byte of HTTP is read.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tokio::net::{UnixListener, UnixStream};

/// The credentials of a connected client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<u32>,
}

/// A Unix listener that admits only allowed uids.
pub struct PeerListener {
    inner: UnixListener,
    own_uid: u32,
    allowed: Vec<u32>,
}

/// A socket that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "another wardfs daemon{} is already serving {path} (stop it, or set `socket` in the config)",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    InUse { path: String, pid: Option<i32> },
    #[error("socket {path}: {source}")]
    Io { path: String, source: io::Error },
}

impl PeerListener {
    /// Binds `path` (mode 0600, in a 0700 directory), replacing a stale socket left by a crash.
    pub async fn bind(path: &Path, allowed: Vec<u32>) -> Result<PeerListener, BindError> {
        let io_err = |e| BindError::Io {
            path: path.display().to_string(),
            source: e,
        };
        if let Some(dir) = path.parent() {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(io_err)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io_err)?;
            }
        }
        if path.exists() {
            if let Some(pid) = still_listening(path).await {
                return Err(BindError::InUse {
                    path: path.display().to_string(),
                    pid,
                });
            }
            std::fs::remove_file(path).map_err(io_err)?;
        }
        // Bind under a private umask so the socket is never reachable by others, even briefly.
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
        let bound = UnixListener::bind(path);
        rustix::process::umask(old);
        let inner = bound.map_err(io_err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
        Ok(PeerListener {
            inner,
            own_uid: rustix::process::getuid().as_raw(),
            allowed,
        })
    }

    fn admits(&self, uid: u32) -> bool {
        uid == self.own_uid || self.allowed.contains(&uid)
    }
}

/// How long a listener found on the socket may take to go away before it counts as a live
/// daemon: a daemon killed while the kernel held a thread of it behind its own hung mount keeps
/// its socket until that mount is aborted (which this start-up does first) and it finishes dying.
const DYING_OWNER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether a daemon still serves `path`: `Some(its pid)` if one answers a health request, or if
/// the socket keeps accepting connections for the whole grace period; `None` once connecting is
/// refused (a stale socket file, safe to replace).
async fn still_listening(path: &Path) -> Option<Option<i32>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = tokio::time::Instant::now() + DYING_OWNER_GRACE;
    loop {
        let mut conn = UnixStream::connect(path).await.ok()?;
        let pid = conn.peer_cred().ok().and_then(|c| c.pid());
        let probe = async {
            conn.write_all(b"GET /v1/health HTTP/1.0\r\n\r\n").await?;
            let mut byte = [0u8; 1];
            conn.read(&mut byte).await
        };
        let answered = tokio::time::timeout(std::time::Duration::from_millis(250), probe).await;
        if matches!(answered, Ok(Ok(n)) if n > 0) || tokio::time::Instant::now() >= deadline {
            return Some(pid);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

impl PeerListener {
    /// Accepts one connection: `Ok(None)` when its peer was refused (logged, and closed before a
    /// byte of HTTP is read); an error when `accept` failed (the caller backs off).
    pub async fn accept_peer(&mut self) -> io::Result<Option<(UnixStream, Peer)>> {
        let (stream, _) = self.inner.accept().await?;
        match stream.peer_cred() {
            Ok(c) if self.admits(c.uid()) => Ok(Some((
                stream,
                Peer {
                    uid: c.uid(),
                    pid: c.pid().and_then(|p| u32::try_from(p).ok()),
                },
            ))),
            Ok(c) => {
                tracing::warn!(
                    uid = c.uid(),
                    pid = c.pid(),
                    "refused a connection from a uid that is neither the daemon's nor in api.allowed_uids"
                );
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(error = %e, "refused a connection whose credentials could not be read");
                Ok(None)
            }
        }
    }
}
