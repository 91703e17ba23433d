//! The JSON documents `sandbox-agent` 0.4.2 sends and accepts, as measured against the real
//! server, and their conversion to the provider-neutral types of `core::provider`.
//!
//! * `GET /v1/fs/stat?path=` → `{path, entryType, size, modified}`; `entryType` is `file` or
//!   `directory` — symlinks are followed, a dangling one is "path not found".
//! * `GET /v1/fs/entries?path=` → `[{name, path, entryType, size, modified}]`, unsorted; a
//!   symlink is listed as `file` (with its target's size, or its own when dangling).
//! * `modified` is RFC 3339 with nanoseconds (`2026-11-23T02:14:10.646888515+00:00`).
//! * `POST /v1/processes/run` `{command, args, cwd, env, timeoutMs}` → `{exitCode, timedOut,
//!   stdout, stderr, stdoutTruncated, stderrTruncated, durationMs}`; output is text (invalid
//!   UTF-8 replaced) and cut at 1 MiB per stream.
//!
//! A listing is read one entry at a time ([`parse_listing`]): each is turned into the
//! [`RemoteEntry`] kept for it at once, so the daemon never holds the parsed document beside the
//! entries, and reading stops past `limits.sandbox_walk_entries` entries.

use std::cell::Cell;

use serde::de::{Deserializer as _, Error as _, SeqAccess, Visitor};
use serde::Deserialize;

use crate::core::provider::{ExecOutput, RemoteEntry, RemoteMeta};
use crate::core::EntryKind;

/// An entry as `stat` and `entries` report it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FsEntry {
    #[serde(default)]
    pub name: Option<String>,
    pub entry_type: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub modified: Option<String>,
}

impl FsEntry {
    pub fn meta(&self) -> RemoteMeta {
        RemoteMeta {
            kind: match self.entry_type.as_str() {
                "file" => EntryKind::File,
                "directory" => EntryKind::Dir,
                "symlink" => EntryKind::Symlink,
                _ => EntryKind::Other,
            },
            size: self.size,
            mtime_ns: self.modified.as_deref().and_then(parse_rfc3339_ns),
            mode: None,
            link_target: None,
        }
    }

    pub fn into_entry(self) -> Option<RemoteEntry> {
        let meta = self.meta();
        Some(RemoteEntry {
            name: self.name?,
            meta,
        })
    }
}

/// Why a listing could not be read.
#[derive(Debug)]
pub(super) enum ListingError {
    /// The answer is not a JSON list of entries.
    Json(serde_json::Error),
    /// It holds more entries than the cap.
    TooMany,
}

/// Reads the answer of `GET /v1/fs/entries` one entry at a time. Entries without a name or whose
/// name `admit` refuses are dropped; past `max_entries` kept entries reading stops with
/// [`ListingError::TooMany`].
pub(super) fn parse_listing(
    body: &[u8],
    max_entries: usize,
    admit: &dyn Fn(&str) -> bool,
) -> Result<Vec<RemoteEntry>, ListingError> {
    let too_many = Cell::new(false);
    let visitor = Entries {
        max_entries,
        admit,
        too_many: &too_many,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = de.deserialize_seq(visitor).and_then(|entries| {
        de.end()?;
        Ok(entries)
    });
    parsed.map_err(|e| {
        if too_many.get() {
            ListingError::TooMany
        } else {
            ListingError::Json(e)
        }
    })
}

/// The visitor of [`parse_listing`].
struct Entries<'a> {
    max_entries: usize,
    admit: &'a dyn Fn(&str) -> bool,
    /// Set when reading stopped at the cap (the error serde reports is then this one).
    too_many: &'a Cell<bool>,
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = Vec<RemoteEntry>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut kept = Vec::new();
        while let Some(entry) = seq.next_element::<FsEntry>()? {
            let Some(entry) = entry.into_entry() else {
                continue;
            };
            if !(self.admit)(&entry.name) {
                continue;
            }
            if kept.len() >= self.max_entries {
                self.too_many.set(true);
                return Err(A::Error::custom("too many entries"));
            }
            kept.push(entry);
        }
        Ok(kept)
    }
}

/// The answer of `POST /v1/processes/run`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunOutput {
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub stdout_truncated: bool,
    #[serde(default)]
    pub stderr_truncated: bool,
    #[serde(default)]
    pub duration_ms: u64,
}

impl From<RunOutput> for ExecOutput {
    fn from(o: RunOutput) -> ExecOutput {
        ExecOutput {
            exit_code: o.exit_code,
            timed_out: o.timed_out,
            stdout: o.stdout,
            stderr: o.stderr,
            stdout_truncated: o.stdout_truncated,
            stderr_truncated: o.stderr_truncated,
            duration_ms: o.duration_ms,
        }
    }
}

/// Returns the nanoseconds since the epoch of an RFC 3339 timestamp
/// (`2026-11-23T02:14:10.646888515+00:00`, `…Z`, any offset, 0–9 fraction digits).
pub(super) fn parse_rfc3339_ns(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (i, c) in frac[..digits].bytes().enumerate() {
            if i < 9 {
                nanos = nanos * 10 + i64::from(c - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        rest = &frac[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let rb = rest.as_bytes();
            if rest.len() != 6 || rb[3] != b':' {
                return None;
            }
            let h: i64 = rest[1..3].parse().ok()?;
            let m: i64 = rest[4..6].parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_timestamps_parse_to_nanoseconds() {
        assert_eq!(parse_rfc3339_ns("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ns("2026-11-23T02:14:10.646888515+00:00"),
            Some(1_795_400_050_646_888_515)
        );
        assert_eq!(
            parse_rfc3339_ns("2026-11-23T04:14:10.5+02:00"),
            Some(1_795_400_050_500_000_000)
        );
        assert_eq!(
            parse_rfc3339_ns("2000-02-29T12:00:00-01:30"),
            Some((951_825_600 + 5_400) * 1_000_000_000)
        );
        for bad in [
            "",
            "2026-11-23",
            "2026-13-01T00:00:00Z",
            "2026-11-23T02:14:10+0000",
        ] {
            assert_eq!(parse_rfc3339_ns(bad), None, "{bad}");
        }
    }

    #[test]
    fn listings_are_read_entry_by_entry_up_to_the_cap() {
        let body = br#"[{"name":"a","path":"/w/a","entryType":"file","size":1},
            {"entryType":"file"},{"name":"..","entryType":"directory"},
            {"name":"b\u0041","entryType":"directory","modified":"1970-01-01T00:00:02Z"}]"#;
        let admit = |name: &str| name != "..";
        let entries = parse_listing(body, 2, &admit).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "bA"]);
        assert_eq!(entries[1].meta.mtime_ns, Some(2_000_000_000));
        assert!(matches!(
            parse_listing(body, 1, &admit),
            Err(ListingError::TooMany)
        ));
        for bad in [&b"{}"[..], b"[1]", b"[] x", b"[{\"name\":\"a\"}"] {
            assert!(
                matches!(parse_listing(bad, 9, &admit), Err(ListingError::Json(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn listing_kinds_map_to_entry_kinds() {
        let e: FsEntry = serde_json::from_str(
            r#"{"name":"b","path":"/w/b","entryType":"directory","size":4096,"modified":"1970-01-01T00:00:01Z"}"#,
        )
        .unwrap();
        let entry = e.into_entry().unwrap();
        assert_eq!(entry.name, "b");
        assert_eq!(entry.meta.kind, EntryKind::Dir);
        assert_eq!(entry.meta.mtime_ns, Some(1_000_000_000));
    }
}
