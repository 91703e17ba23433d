//! Faults to inject under a daemon: [`Proxy`], a TCP proxy on 127.0.0.1 that can cut its
//! connections mid-stream ([`Fault`]) and move to another target, and [`Tmpfs`], a size-limited
//! tmpfs (root only) to fill a disk. Both are undone on drop. Used by the reliability tests.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a [`Proxy`] does to the connections it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forwards everything.
    None,
    /// Closes both sides once this many bytes went from the client to the server.
    CutAfter(u64),
}

/// A TCP proxy on 127.0.0.1 forwarding to a target that can change, injecting a [`Fault`].
pub struct Proxy {
    port: u16,
    target: Arc<Mutex<SocketAddr>>,
    fault: Arc<Mutex<Fault>>,
    /// Connections cut by a fault so far.
    cuts: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let p = Proxy {
            port,
            target: Arc::new(Mutex::new(target)),
            fault: Arc::new(Mutex::new(Fault::None)),
            cuts: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (target, fault, cuts, stop) = (
            p.target.clone(),
            p.fault.clone(),
            p.cuts.clone(),
            p.stop.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let to = *target.lock().unwrap();
                let f = *fault.lock().unwrap();
                let cuts = cuts.clone();
                std::thread::spawn(move || forward(client, to, f, cuts));
            }
        });
        p
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn set_target(&self, to: SocketAddr) {
        *self.target.lock().unwrap() = to;
    }

    /// Sets the fault of the connections accepted from now on.
    pub fn set_fault(&self, f: Fault) {
        *self.fault.lock().unwrap() = f;
    }

    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

fn forward(client: TcpStream, to: SocketAddr, fault: Fault, cuts: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect_timeout(&to, Duration::from_secs(2)) else {
        return;
    };
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (mut s_read, mut c_write) = (server, client);
    let back = std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match s_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if c_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = c_write.shutdown(Shutdown::Write);
    });
    let limit = match fault {
        Fault::None => u64::MAX,
        Fault::CutAfter(n) => n,
    };
    let mut sent = 0u64;
    let mut buf = [0u8; 16 * 1024];
    loop {
        match c_read.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = s_write.shutdown(Shutdown::Write);
                break;
            }
            Ok(n) => {
                let room = (limit - sent).min(n as u64) as usize;
                if s_write.write_all(&buf[..room]).is_err() {
                    break;
                }
                sent += room as u64;
                if room < n {
                    // The fault: both sides see the connection drop mid-stream.
                    cuts.fetch_add(1, Ordering::SeqCst);
                    let _ = s_write.shutdown(Shutdown::Both);
                    let _ = c_read.shutdown(Shutdown::Both);
                    break;
                }
            }
        }
    }
    let _ = back.join();
}

/// A tmpfs of a fixed size mounted at a directory; unmounted on drop.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. "2m") at `dir` (root only; fails loudly otherwise).
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount -t tmpfs at {} failed (the disk-full test runs as root, e.g. under \
             `make test`): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}
