//! Small-file round trips over the daemon's socket, against the same operations done natively.
//!
//! ```text
//! cargo bench --bench api_load -- --socket S --dir /workspace/load [--seconds 10] [--clients 16]
//!     [--files 1024] [--size 4096] [--ops read,stat,write] [--client-threads 1] [--json OUT]
//! ```
//!
//! A running daemon (`wardfs serve`) is required; `benches/run.sh` starts one. The bench writes
//! `--files` text files of `--size` bytes under the virtual directory `--dir` through the API,
//! asks the daemon where that directory really is (`/v1/fs/resolve`), then for each operation runs
//! two phases of `--seconds` each, after a one-second warm-up:
//!
//! * **wardfs**: `--clients` concurrent clients, each with one keep-alive HTTP/1.1 connection to
//!   the socket, sending `POST /v1/fs/read {"path"}`, `/v1/fs/stat {"path"}` or
//!   `/v1/fs/write {"path","content"}` back to back (the next request when the previous answer has
//!   been read whole);
//! * **native**: `--clients` threads doing the same on the backing directory with `std::fs`:
//!   `read` of the same files, `symlink_metadata`, and a write to a temp name renamed over the
//!   destination (what the daemon does, minus its journal).
//!
//! It prints ops/s, p50 and p99 latency per phase, and wardfs/native ratios. With `--json` it
//! also writes the figures as JSON for run.sh's summary.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone)]
struct Opts {
    socket: PathBuf,
    dir: String,
    seconds: f64,
    warmup: f64,
    clients: usize,
    files: usize,
    size: usize,
    ops: Vec<Op>,
    client_threads: usize,
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Stat,
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Stat => "stat",
            Op::Write => "write",
        }
    }
}

/// Writes per client cycle over this many names, so the directory does not grow without bound.
const WRITE_NAMES: usize = 64;

const USAGE: &str = "usage: api_load --socket PATH --dir /workspace/DIR [--seconds N] [--warmup N] \
[--clients N] [--files N] [--size BYTES] [--ops read,stat,write] [--client-threads N] [--json PATH]";

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        socket: PathBuf::new(),
        dir: String::new(),
        seconds: 10.0,
        warmup: 1.0,
        clients: 16,
        files: 1024,
        size: 4096,
        ops: vec![Op::Read, Op::Stat, Op::Write],
        client_threads: 1,
        json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        // `cargo bench` appends `--bench` (and may pass a filter); neither means anything here.
        if a == "--bench" {
            continue;
        }
        let mut val = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let num = |name: &str, v: String| {
            v.parse::<f64>()
                .map_err(|_| format!("{name}: {v:?} is not a number"))
        };
        match a.as_str() {
            "--socket" => o.socket = PathBuf::from(val("--socket")?),
            "--dir" => o.dir = val("--dir")?.trim_end_matches('/').to_string(),
            "--seconds" => o.seconds = num("--seconds", val("--seconds")?)?,
            "--warmup" => o.warmup = num("--warmup", val("--warmup")?)?,
            "--clients" => o.clients = num("--clients", val("--clients")?)? as usize,
            "--files" => o.files = num("--files", val("--files")?)? as usize,
            "--size" => o.size = num("--size", val("--size")?)? as usize,
            "--client-threads" => {
                o.client_threads = num("--client-threads", val("--client-threads")?)? as usize
            }
            "--json" => o.json = Some(PathBuf::from(val("--json")?)),
            "--ops" => {
                o.ops = val("--ops")?
                    .split(',')
                    .map(|s| match s.trim() {
                        "read" => Ok(Op::Read),
                        "stat" => Ok(Op::Stat),
                        "write" => Ok(Op::Write),
                        other => Err(format!("--ops: {other:?} is not read, stat or write")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other if other.starts_with('-') => {
                return Err(format!("unknown option {other}\n{USAGE}"))
            }
            _ => {} // a cargo bench name filter
        }
    }
    if o.socket.as_os_str().is_empty() || o.dir.is_empty() {
        return Err(format!("--socket and --dir are required\n{USAGE}"));
    }
    if o.clients == 0 || o.files == 0 || o.seconds <= 0.0 || o.client_threads == 0 {
        return Err("--clients, --files, --seconds and --client-threads must be positive".into());
    }
    Ok(o)
}

/// One phase's figures.
#[derive(Debug, Clone)]
struct Figures {
    ops: u64,
    errors: u64,
    elapsed: Duration,
    /// Latencies in nanoseconds, sorted.
    lat: Vec<u64>,
}

impl Figures {
    fn merge(parts: Vec<(u64, Vec<u64>)>, elapsed: Duration) -> Figures {
        let errors = parts.iter().map(|p| p.0).sum();
        let mut lat: Vec<u64> = parts.into_iter().flat_map(|p| p.1).collect();
        lat.sort_unstable();
        Figures {
            ops: lat.len() as u64,
            errors,
            elapsed,
            lat,
        }
    }

    fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn pct_us(&self, p: f64) -> f64 {
        if self.lat.is_empty() {
            return f64::NAN;
        }
        let i = ((self.lat.len() as f64 - 1.0) * p).round() as usize;
        self.lat[i] as f64 / 1000.0
    }

    fn to_json(&self) -> Value {
        json!({
            "ops": self.ops,
            "errors": self.errors,
            "seconds": self.elapsed.as_secs_f64(),
            "ops_per_s": self.ops_per_s(),
            "p50_us": self.pct_us(0.50),
            "p99_us": self.pct_us(0.99),
        })
    }
}

/// The text every file holds: `size` bytes of source-like lines.
fn file_text(size: usize, seed: usize) -> String {
    let mut s = String::with_capacity(size + 64);
    let mut i = 0usize;
    while s.len() < size {
        s.push_str(&format!(
            "let value_{seed}_{i} = compute(\"{i:08}\"); // line {i}\n"
        ));
        i += 1;
    }
    s.truncate(size - 1);
    s.push('\n');
    s
}

fn file_name(i: usize) -> String {
    format!("f{i:05}.txt")
}

fn write_name(client: usize, k: usize) -> String {
    format!("w/c{client:02}-{:02}.txt", k % WRITE_NAMES)
}

// ---------------------------------------------------------------------------------------------
// The socket side

struct Conn {
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    async fn open(socket: &Path) -> Result<Conn, BoxError> {
        let stream = UnixStream::connect(socket).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn { sender })
    }

    /// Sends one POST with a prepared JSON body; returns the status and the whole answer.
    async fn post(
        &mut self,
        route: &'static str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), BoxError> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(route)
            .header(hyper::header::HOST, "wardfs")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

fn route(op: Op) -> &'static str {
    match op {
        Op::Read => "/v1/fs/read",
        Op::Stat => "/v1/fs/stat",
        Op::Write => "/v1/fs/write",
    }
}

/// The request bodies one client cycles through, serialized once up front.
fn bodies(o: &Opts, op: Op, client: usize, content: &str) -> Vec<Bytes> {
    match op {
        Op::Read | Op::Stat => (0..o.files)
            .map(|i| {
                let i = (i + client * o.files / o.clients) % o.files;
                Bytes::from(json!({ "path": format!("{}/{}", o.dir, file_name(i)) }).to_string())
            })
            .collect(),
        Op::Write => (0..WRITE_NAMES)
            .map(|k| {
                Bytes::from(
                    json!({ "path": format!("{}/{}", o.dir, write_name(client, k)), "content": content })
                        .to_string(),
                )
            })
            .collect(),
    }
}

/// Checks one answer fully (status and JSON shape).
fn check_answer(op: Op, size: usize, status: StatusCode, body: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(body);
    if status != StatusCode::OK {
        return Err(format!("{} answered HTTP {status}: {text}", route(op)));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("{}: bad JSON ({e}): {text}", route(op)))?;
    let ok = match op {
        Op::Read => v["content"].as_str().map(str::len) == Some(size),
        Op::Stat => v["size"].as_u64() == Some(size as u64) && v["kind"] == "file",
        Op::Write => v["bytes"].as_u64() == Some(size as u64),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{}: unexpected answer: {}",
            route(op),
            &text[..text.len().min(300)]
        ))
    }
}

async fn wardfs_phase(
    o: &Opts,
    op: Op,
    secs: f64,
    content: &Arc<String>,
) -> Result<Figures, BoxError> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut conns = Vec::with_capacity(o.clients);
    for _ in 0..o.clients {
        conns.push(Conn::open(&o.socket).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(o.clients);
    for (client, mut conn) in conns.into_iter().enumerate() {
        let bodies = bodies(o, op, client, content);
        let stop = stop.clone();
        let size = o.size;
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let body = bodies[k % bodies.len()].clone();
                let t = Instant::now();
                let (status, answer) = conn.post(route(op), body).await?;
                let dt = t.elapsed();
                // Check the first answers whole; then the status and a cheap size check.
                let ok = if k < 4 {
                    check_answer(op, size, status, &answer)
                        .map_err(|e| eprintln!("api_load: {e}"))
                        .is_ok()
                } else {
                    status == StatusCode::OK && (op != Op::Read || answer.len() > size)
                };
                if ok {
                    lat.push(dt.as_nanos() as u64);
                } else {
                    errors += 1;
                    if errors > 100 {
                        return Err::<_, BoxError>(
                            format!("{}: over 100 failed requests", route(op)).into(),
                        );
                    }
                }
                k += 1;
            }
            Ok((errors, lat))
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut parts = Vec::with_capacity(tasks.len());
    for t in tasks {
        parts.push(t.await??);
    }
    Ok(Figures::merge(parts, start.elapsed()))
}

// ---------------------------------------------------------------------------------------------
// The native side

fn native_phase(o: &Opts, real: &Path, op: Op, secs: f64, content: &Arc<String>) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..o.clients)
        .map(|client| {
            let stop = stop.clone();
            let content = content.clone();
            let (files, clients, size) = (o.files, o.clients, o.size);
            let paths: Vec<PathBuf> = match op {
                Op::Read | Op::Stat => (0..files)
                    .map(|i| real.join(file_name((i + client * files / clients) % files)))
                    .collect(),
                Op::Write => (0..WRITE_NAMES)
                    .map(|k| real.join(write_name(client, k)))
                    .collect(),
            };
            let tmp = real.join(format!("w/.native-tmp-{client}"));
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(1 << 16);
                let mut errors = 0u64;
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let p = &paths[k % paths.len()];
                    let t = Instant::now();
                    let ok = match op {
                        Op::Read => std::fs::read(p).is_ok_and(|b| b.len() == size),
                        Op::Stat => {
                            std::fs::symlink_metadata(p).is_ok_and(|m| m.len() == size as u64)
                        }
                        Op::Write => {
                            std::fs::write(&tmp, content.as_bytes()).is_ok()
                                && std::fs::rename(&tmp, p).is_ok()
                        }
                    };
                    let dt = t.elapsed();
                    if ok {
                        lat.push(dt.as_nanos() as u64);
                    } else {
                        errors += 1;
                    }
                    k += 1;
                }
                (errors, lat)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let parts = handles
        .into_iter()
        .map(|h| h.join().expect("native thread"))
        .collect();
    Figures::merge(parts, start.elapsed())
}

// ---------------------------------------------------------------------------------------------

async fn setup(o: &Opts) -> Result<PathBuf, BoxError> {
    let mut conn = Conn::open(&o.socket).await?;
    for i in 0..o.files {
        let path = format!("{}/{}", o.dir, file_name(i));
        let body = json!({ "path": path, "content": file_text(o.size, i) }).to_string();
        let (status, answer) = conn.post("/v1/fs/write", Bytes::from(body)).await?;
        check_answer(Op::Write, o.size, status, &answer)?;
    }
    let probe = format!("{}/{}", o.dir, file_name(0));
    let (status, answer) = conn
        .post(
            "/v1/fs/resolve",
            Bytes::from(json!({ "path": probe }).to_string()),
        )
        .await?;
    if status != StatusCode::OK {
        return Err(format!(
            "resolve {probe}: HTTP {status}: {}",
            String::from_utf8_lossy(&answer)
        )
        .into());
    }
    let v: Value = serde_json::from_slice(&answer)?;
    let real = PathBuf::from(v["real_path"].as_str().ok_or("resolve: no real_path")?);
    let dir = real.parent().ok_or("resolve: no parent")?.to_path_buf();
    std::fs::create_dir_all(dir.join("w"))?;
    Ok(dir)
}

fn main() -> std::process::ExitCode {
    // `cargo test --all-targets` runs bench targets without `--bench`: there is no daemon to load
    // then, so do nothing (as criterion does in test mode) unless a socket was named explicitly.
    let argv: Vec<String> = std::env::args().collect();
    if !argv.iter().any(|a| a == "--bench" || a == "--socket") {
        println!("api_load: not run under `cargo test`; use `cargo bench --bench api_load -- --socket S --dir D`");
        return std::process::ExitCode::SUCCESS;
    }
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("api_load: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = if o.client_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(o.client_threads)
            .enable_all()
            .build()
    }
    .expect("tokio runtime");
    match rt.block_on(run(&o)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("api_load: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn run(o: &Opts) -> Result<(), BoxError> {
    let real = setup(o).await?;
    let content = Arc::new(file_text(o.size, 999_999));
    println!(
        "api_load: {} files of {} B under {} ({}), {} clients, {} s per phase, client runtime threads: {}",
        o.files,
        o.size,
        o.dir,
        real.display(),
        o.clients,
        o.seconds,
        o.client_threads
    );
    println!(
        "{:<6} {:<7} {:>11} {:>10} {:>10} {:>9} {:>7}",
        "op", "side", "ops/s", "p50 µs", "p99 µs", "ops", "errors"
    );
    let mut out = serde_json::Map::new();
    for &op in &o.ops {
        if o.warmup > 0.0 {
            wardfs_phase(o, op, o.warmup, &content).await?;
        }
        let s = wardfs_phase(o, op, o.seconds, &content).await?;
        let (o2, real2, content2) = (o.clone(), real.clone(), content.clone());
        let n = tokio::task::spawn_blocking(move || {
            if o2.warmup > 0.0 {
                native_phase(&o2, &real2, op, o2.warmup, &content2);
            }
            native_phase(&o2, &real2, op, o2.seconds, &content2)
        })
        .await?;
        for (side, f) in [("wardfs", &s), ("native", &n)] {
            println!(
                "{:<6} {:<7} {:>11.0} {:>10.1} {:>10.1} {:>9} {:>7}",
                op.name(),
                side,
                f.ops_per_s(),
                f.pct_us(0.5),
                f.pct_us(0.99),
                f.ops,
                f.errors
            );
        }
        let ratio = s.ops_per_s() / n.ops_per_s();
        println!(
            "{:<6} {:<7} {:>11} (wardfs/native ops/s: {:.3}; p50 ×{:.1})",
            op.name(),
            "ratio",
            "",
            ratio,
            s.pct_us(0.5) / n.pct_us(0.5)
        );
        if s.errors > 0 || n.errors > 0 {
            return Err(format!(
                "{}: {} wardfs and {} native operations failed",
                op.name(),
                s.errors,
                n.errors
            )
            .into());
        }
        out.insert(
            op.name().into(),
            json!({ "wardfs": s.to_json(), "native": n.to_json(), "ratio_ops": ratio }),
        );
    }
    let doc = json!({
        "clients": o.clients,
        "files": o.files,
        "size": o.size,
        "seconds": o.seconds,
        "client_threads": o.client_threads,
        "ops": out,
    });
    if let Some(p) = &o.json {
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(())
}
