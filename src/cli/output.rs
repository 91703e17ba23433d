//! Small helpers for human output.

use std::io::Write;

use serde::de::DeserializeOwned;

use crate::cli::ClientError;

/// Prints raw JSON bytes followed by a newline.
pub fn print_json(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.write_all(b"\n");
}

/// Formats a millisecond timestamp as RFC 3339 (UTC, seconds).
pub fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Formats a byte count for people.
pub fn size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Decodes the daemon's JSON answer.
pub fn decode<T: DeserializeOwned>(raw: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(raw).map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
}
