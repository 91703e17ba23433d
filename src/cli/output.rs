//! Small helpers for human output.

use std::io::Write;

use serde::de::DeserializeOwned;

use crate::cli::ClientError;

/// Returns whether output to a stream may be coloured: the stream is a terminal, `NO_COLOR` is
/// unset or empty (no-color.org) and `TERM` is not `dumb`.
pub fn color(stream: &impl std::io::IsTerminal) -> bool {
    color_allowed(
        stream.is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

fn color_allowed(
    tty: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    tty && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn no_color_set_to_anything_turns_colour_off() {
        let xterm = Some(OsStr::new("xterm"));
        assert!(color_allowed(true, None, xterm));
        assert!(color_allowed(true, Some(OsStr::new("")), xterm));
        assert!(!color_allowed(true, Some(OsStr::new("1")), xterm));
        assert!(!color_allowed(true, Some(OsStr::new("0")), xterm));
        assert!(!color_allowed(false, None, xterm));
        assert!(!color_allowed(true, None, Some(OsStr::new("dumb"))));
    }
}
