//! A hostile sandbox against a real daemon (`wardfs serve --no-mount`): a fake sandbox-agent
//! (`HostileServer`) that answers a mirror pull with a listing of millions of entries, or drips
//! a file a byte a second. Each attack must fail in bounded memory and time, with an error that
//! names the limit; the daemon's own peak resident set (`VmHWM` in `/proc/<pid>/status`) is the
//! measure.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use wardfs::core::ErrorCode;

use crate::support::sandbox_agent::{Answer, HostileServer};
use crate::support::Daemon;

/// The daemon's peak resident set so far, in MiB.
fn peak_mib(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib >> 10
}

/// A daemon whose sandbox `dev` (root `/w`) is `server`, with `timeout_secs` per request and no
/// retries.
fn daemon_for(server: &HostileServer, timeout_secs: u64) -> Daemon {
    Daemon::start(&format!(
        "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\nroot = \"/w\"\n\
         retries = 0\nrequest_timeout_secs = {timeout_secs}\n",
        server.url
    ))
}

/// The walk's exec answers that its output was cut (so the listing is fetched as a file) and
/// names that file; the file is 50 MiB of records of distinct files, about 3 million entries.
fn huge_listing(line: &str) -> Answer {
    if line.contains("/v1/processes/run") {
        Answer::Json(r#"{"exitCode":0,"stdout":"/tmp/listing","stdoutTruncated":true}"#.into())
    } else if line.contains("/v1/fs/file") {
        Answer::Listing(50 << 20)
    } else {
        Answer::Json(r#"{"name":"w","entryType":"directory","size":0}"#.into())
    }
}

/// A sandbox answers a mirror pull's walk with a 50 MiB listing of 3 million entries (the attack
/// was 255 MiB, 12.7 M entries, and took the daemon to 2,583 MB; the listing was parsed whole).
/// The listing is parsed as it arrives and the walk stops past `limits.sandbox_walk_entries`
/// (1,000,000): the pull fails with TOO_LARGE naming that key, the daemon stops reading (the
/// server could not send it all), and its peak stays under 300 MB.
#[test]
fn a_listing_of_millions_of_entries_stops_at_the_entry_cap_in_bounded_memory() {
    let server = HostileServer::start(huge_listing);
    let d = daemon_for(&server, 30);
    let (code, message) = d.err("/v1/mirror/pull", json!({"sandbox": "dev"}));
    assert_eq!(code, ErrorCode::TooLarge, "{message}");
    assert!(
        message.contains("limits.sandbox_walk_entries") && message.contains("1000000"),
        "{message}"
    );
    let peak = peak_mib(&d);
    assert!(peak < 300, "the daemon's peak was {peak} MiB");
    // Must stay: time for the server to push on, were the daemon still reading.
    std::thread::sleep(Duration::from_millis(200));
    let sent = server.sent.load(Ordering::Relaxed);
    assert!(sent < 40 << 20, "the daemon read on: {sent} bytes sent");
}

/// The walk lists one 40-byte file; its download is dripped a byte a second.
fn dripped_file(line: &str) -> Answer {
    if line.contains("/v1/processes/run") {
        Answer::Json(r#"{"exitCode":0,"stdout":"f 644 40 1.0 a.txt\u0000\u0000"}"#.into())
    } else if line.contains("/v1/fs/file") {
        Answer::Drip("0123456789012345678901234567890123456789")
    } else {
        Answer::Json(r#"{"name":"w","entryType":"directory","size":0}"#.into())
    }
}

/// A sandbox drips a file's body a byte a second (each gap shorter than the timeout, which used
/// to bound only the gaps: `mirror pull` ran 29 s with `request_timeout_secs = 3`). The whole
/// download has one deadline: the pull fails SANDBOX_UNAVAILABLE, naming the timeout, within the
/// 3 s plus slack, and nothing is written.
#[test]
fn a_dripped_download_fails_at_the_request_deadline() {
    let server = HostileServer::start(dripped_file);
    let d = daemon_for(&server, 3);
    let started = Instant::now();
    let (code, message) = d.err("/v1/mirror/pull", json!({"sandbox": "dev"}));
    let took = started.elapsed();
    assert_eq!(code, ErrorCode::SandboxUnavailable, "{message}");
    assert!(message.contains("did not answer"), "{message}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(7),
        "the pull took {took:?}"
    );
    assert!(!d.zone_dir("workspace").join("a.txt").exists());
}
