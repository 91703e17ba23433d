//! grep's bounds: what one search may hold in the daemon's memory, whatever the files hold.
//! The figures come from the daemon's own `/proc/<pid>/status` (`VmHWM`, its peak resident set).

use std::io::Write;

use serde_json::json;

use crate::support::Daemon;

/// The daemon's peak resident set so far, in KiB.
fn peak_kib(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Writes `size` bytes made of `unit` repeated into `path`, without holding them.
fn fill(path: &std::path::Path, unit: &[u8], size: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let block = unit.repeat((1 << 20) / unit.len());
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len());
        f.write_all(&block[..n]).unwrap();
        left -= n;
    }
    f.flush().unwrap();
}

#[test]
fn grep_stops_collecting_at_the_limit_in_bounded_memory() {
    let d = Daemon::start("");
    // 64 MiB of `a\n`: 32 million matching lines; the answer holds ten.
    fill(&d.zone_dir("workspace").join("a.txt"), b"a\n", 64 << 20);
    let before = peak_kib(&d);
    let (status, v) = d.post("/v1/fs/grep", &json!({"pattern": "a", "limit": 10}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["lines"].as_array().unwrap().len(), 10, "{v}");
    assert_eq!(
        (v["total"].as_u64(), v["truncated"].as_bool()),
        (Some(10), Some(true))
    );
    // Count mode counts every line, in constant memory.
    let (_, c) = d.post("/v1/fs/grep", &json!({"pattern": "a", "mode": "count"}));
    assert_eq!(c["counts"][0]["count"], 32 << 20, "{c}");
    let grown = peak_kib(&d).saturating_sub(before);
    assert!(
        grown < 64 << 10,
        "grep grew the daemon's peak by {grown} KiB"
    );
}

#[test]
fn a_huge_line_is_skipped_and_a_long_one_is_cut_in_bounded_memory() {
    let d = Daemon::start("[limits]\nmax_read_bytes = 1048576\n");
    let ws = d.zone_dir("workspace");
    // 128 MiB without a newline: never one line in memory.
    fill(&ws.join("one-line.bin.txt"), b"a", 128 << 20);
    // 100 KiB line: reported, cut to a bounded text with a marker.
    let mut long = "x".repeat(100 << 10);
    long.push_str("needle\nshort needle\n");
    std::fs::write(ws.join("long.txt"), &long).unwrap();
    let before = peak_kib(&d);
    let (status, v) = d.post("/v1/fs/grep", &json!({"pattern": "a"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["total"], 0, "{v}");
    assert_eq!(
        v["skipped"][0]["path"], "/workspace/one-line.bin.txt",
        "{v}"
    );
    assert!(
        v["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("limits.max_read_bytes"),
        "{v}"
    );
    let grown = peak_kib(&d).saturating_sub(before);
    assert!(
        grown < 48 << 10,
        "grep grew the daemon's peak by {grown} KiB"
    );
    let (status, v) = d.post("/v1/fs/grep", &json!({"pattern": "needle"}));
    assert_eq!((status, v["total"].as_u64()), (200, Some(2)), "{v}");
    let first = v["lines"][0]["text"].as_str().unwrap();
    assert!(
        first.len() < 4096,
        "a line of {} bytes came back",
        first.len()
    );
    assert!(first.contains("line cut"), "{first:.80}");
    assert_eq!(v["lines"][1]["text"], "short needle");
}
