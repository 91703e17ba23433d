//! Helpers of the reliability tests: an API client that never panics on a dead daemon, a seeded
//! random source, a fault-injecting TCP proxy, a size-limited tmpfs, and checks over zones.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandfs::client::{Client, ClientError};
use sandfs::core::ErrorCode;
use serde_json::Value;

/// An API error as the tests see it: the code and message, or `None` for a transport failure
/// (the daemon died or the socket is gone).
pub type ApiResult = Result<Value, (Option<ErrorCode>, String)>;

/// A blocking client of one daemon socket.
pub struct Api {
    socket: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Api {
    pub fn new(socket: &Path) -> Api {
        Api {
            socket: socket.to_path_buf(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// POSTs JSON; the answer, or the error's code (None when no answer came) and message.
    pub fn post(&self, route: &str, body: &Value) -> ApiResult {
        let c = Client::new(&self.socket);
        self.rt
            .block_on(c.post::<_, Value>(route, body))
            .map_err(|e| match e {
                ClientError::Api { code, message, .. } => (Some(code), message),
                other => (None, other.to_string()),
            })
    }

    /// Like `post`, but the call must succeed.
    pub fn ok(&self, route: &str, body: Value) -> Value {
        self.post(route, &body)
            .unwrap_or_else(|e| panic!("{route} {body}: {e:?}"))
    }

    /// Like `post`, but the call must fail with an API error; returns its code and message.
    pub fn err(&self, route: &str, body: Value) -> (ErrorCode, String) {
        match self.post(route, &body) {
            Ok(v) => panic!("{route} {body} succeeded: {v}"),
            Err((Some(code), msg)) => (code, msg),
            Err((None, msg)) => panic!("{route} {body}: no answer from the daemon: {msg}"),
        }
    }
}

/// xorshift64*: a seeded, reproducible random source.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    /// `len` printable bytes.
    pub fn text(&mut self, len: usize) -> String {
        (0..len)
            .map(|i| {
                if i % 64 == 63 {
                    '\n'
                } else {
                    (b'a' + (self.next() % 26) as u8) as char
                }
            })
            .collect()
    }
}

/// Returns a seed from `$SANDFS_RELIABILITY_SEED`, else from the clock.
pub fn seed() -> u64 {
    std::env::var("SANDFS_RELIABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// Every `.sandfs-tmp-*` file beneath `dir`.
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(".sandfs-tmp-") {
                out.push(e.path());
            }
        }
    }
    out
}

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
