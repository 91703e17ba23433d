//! The way in: a port on the host's 127.0.0.1 that forwards to `127.0.0.1:AGENT_PORT` inside a
//! sandbox's loopback-only network namespace.
//!
//! No process is added to the sandbox for this (one there would share its pid namespace with
//! the sandbox's own processes): for each accepted connection a short-lived thread of the
//! daemon enters the sandbox's network namespace (`setns`, which binds only that thread),
//! opens the TCP socket there, and ends; the socket stays in the namespace it was made in, and
//! the daemon copies bytes between it and the accepted one. Holding the namespace's file
//! keeps the namespace (not the sandbox) alive while the bridge lives.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The port sandbox-agent listens on inside every sandbox (each has its own network
/// namespace, so they never collide).
pub const AGENT_PORT: u16 = 2468;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A running forwarder; dropping it closes the port.
pub struct Bridge {
    pub port: u16,
    task: JoinHandle<()>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Bridge {
    /// Opens a host port (`want`, if given and free, else any) forwarding into the network
    /// namespace `netns` (an open `/proc/PID/ns/net`).
    pub async fn start(netns: File, want: Option<u16>) -> std::io::Result<Bridge> {
        let listener = match want {
            Some(port) => match TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
                Ok(l) => l,
                Err(_) => TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?,
            },
            None => TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?,
        };
        let port = listener.local_addr()?.port();
        let netns = std::sync::Arc::new(netns);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut outside, _)) = listener.accept().await else {
                    continue;
                };
                let netns = netns.clone();
                tokio::spawn(async move {
                    let Ok(Ok(inside)) = connect_inside(netns).await else {
                        return;
                    };
                    let Ok(mut inside) = TcpStream::from_std(inside) else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut outside, &mut inside).await;
                });
            }
        });
        Ok(Bridge { port, task })
    }
}

/// Connects to the agent's port from inside the namespace, on a thread of its own.
async fn connect_inside(
    netns: std::sync::Arc<File>,
) -> Result<std::io::Result<std::net::TcpStream>, tokio::sync::oneshot::error::RecvError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(connect_in(&netns));
    });
    rx.await
}

fn connect_in(netns: &File) -> std::io::Result<std::net::TcpStream> {
    // SAFETY: setns on a valid namespace fd changes only this thread's network namespace; the
    // thread ends right after, so no other work ever runs in the sandbox's namespace.
    if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let stream = std::net::TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, AGENT_PORT)),
        CONNECT_TIMEOUT,
    )?;
    stream.set_nonblocking(true)?;
    Ok(stream)
}
