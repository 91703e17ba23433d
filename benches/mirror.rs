//! Mirror benchmark driver for `benches/sandbox.sh` (not run on its own): pushes a local tree
//! into sandbox-agent (which the script started with --token and --no-telemetry) with the mirror
//! engine and prints one JSON object.
//!
//! Environment (set by the script):
//!   WARDFS_BENCH_AGENT_URL    the server's base URL (127.0.0.1 inside the script's namespace)
//!   WARDFS_BENCH_AGENT_TOKEN  the bearer token (read through its variable name, never printed)
//!   WARDFS_BENCH_TREE         the local 10,000-file tree
//!   WARDFS_BENCH_BIG          a directory holding one large file
//!   WARDFS_BENCH_REMOTE       the remote directory to push below (`<it>/tree-N`, `<it>/big`)
//!   WARDFS_BENCH_RUNS         first pushes of the tree to time (each into a fresh remote dir)
//!
//! Measures: the first push of the tree (files/s), the incremental push after one edit (time,
//! files sent, HTTP requests), a push with nothing changed, and the first push of the large file
//! (MB/s).

use std::path::PathBuf;
use std::time::Instant;

use wardfs::sandbox::mirror::{self, Manifest, MirrorOptions};
use wardfs::sandbox::{SandboxAgent, SandboxAgentConfig};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run benches/sandbox.sh"))
}

fn opts() -> MirrorOptions {
    MirrorOptions {
        sandbox: "bench".into(),
        now_ms: 0,
        progress: None,
        ..Default::default()
    }
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` runs bench targets too: there is no server to push to then, so
    // do nothing (as criterion does in test mode) unless the script set up the environment.
    if std::env::var_os("WARDFS_BENCH_AGENT_URL").is_none() {
        println!("mirror: not run under `cargo test`; use `bash benches/sandbox.sh`");
        return;
    }
    let mut config = SandboxAgentConfig::new(env("WARDFS_BENCH_AGENT_URL"));
    config.token_env = Some("WARDFS_BENCH_AGENT_TOKEN".into());
    let fs = SandboxAgent::connect(&config).expect("connect to the sandbox");
    let tree = PathBuf::from(env("WARDFS_BENCH_TREE"));
    let big = PathBuf::from(env("WARDFS_BENCH_BIG"));
    let remote = env("WARDFS_BENCH_REMOTE");
    let runs: usize = std::env::var("WARDFS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);

    // First pushes, each into a fresh remote directory with a fresh manifest.
    let mut first_ms = Vec::new();
    let mut manifest = Manifest::in_memory();
    let mut files = 0;
    let mut bytes = 0;
    let mut root = String::new();
    for run in 0..runs {
        root = format!("{remote}/tree-{run}");
        manifest = Manifest::in_memory();
        let t = Instant::now();
        let s = mirror::push(&tree, &fs, &root, &mut manifest, &opts())
            .await
            .expect("first push");
        first_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        files = s.files_sent;
        bytes = s.bytes_sent;
    }

    // A push with nothing changed, then one edit and an incremental push (the last tree's
    // manifest), several times.
    let mut idle_ms = Vec::new();
    let mut incr_ms = Vec::new();
    let mut incr_files = Vec::new();
    let mut incr_requests = Vec::new();
    let edited = tree.join("d000/f0000.txt");
    let original = std::fs::read(&edited).expect("the tree's first file");
    for round in 0..5 {
        let t = Instant::now();
        let s = mirror::push(&tree, &fs, &root, &mut manifest, &opts())
            .await
            .expect("idle push");
        idle_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(s.files_sent, 0, "nothing changed, yet files were sent");
        std::fs::write(&edited, format!("edit {round}\n")).unwrap();
        let before = fs.requests();
        let t = Instant::now();
        let s = mirror::push(&tree, &fs, &root, &mut manifest, &opts())
            .await
            .expect("incremental push");
        incr_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        incr_files.push(s.files_sent);
        incr_requests.push(fs.requests() - before);
    }
    std::fs::write(&edited, original).unwrap();

    // The large file.
    let mut big_manifest = Manifest::in_memory();
    let t = Instant::now();
    let s = mirror::push(
        &big,
        &fs,
        &format!("{remote}/big"),
        &mut big_manifest,
        &opts(),
    )
    .await
    .expect("push of the large file");
    let big_ms = t.elapsed().as_secs_f64() * 1000.0;

    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let out = serde_json::json!({
        "first_push_ms": first_ms.clone(),
        "first_push_median_ms": median(&mut first_ms),
        "first_push_files": files,
        "first_push_bytes": bytes,
        "idle_push_median_ms": median(&mut idle_ms),
        "incremental_push_ms": incr_ms.clone(),
        "incremental_push_median_ms": median(&mut incr_ms),
        "incremental_files_sent": incr_files,
        "incremental_requests": incr_requests,
        "big_push_ms": big_ms,
        "big_bytes": s.bytes_sent,
    });
    println!("{out}");
}
