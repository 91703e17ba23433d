//! Walking a remote tree with `find -printf` through the exec endpoint.
//!
//! `sandbox-agent`'s listings follow symlinks (a link is a `file` with its target's size) and
//! carry no modes, so a walk that must see links, their targets and permission bits runs GNU
//! `find` in the sandbox instead: one request for the whole tree. Each entry is printed as
//! `TYPE MODE SIZE MTIME RELPATH\0TARGET\0` — the first four fields hold no spaces, so the
//! path (which may hold anything but NUL) is the rest of the record.
//!
//! A sandbox chooses what it prints, so the records are parsed as a stream ([`Records`]): the
//! daemon holds one unfinished record and the entries kept, each bounded ([`MAX_RECORD`]), and
//! stops past `limits.sandbox_walk_entries` entries — never the listing itself.

use crate::core::provider::{RemoteMeta, WalkEntry};
use crate::core::EntryKind;

/// Exit code of the walk script when the root does not exist.
pub(super) const EXIT_NOT_FOUND: i32 = 66;
/// Exit code of the walk script when the root is not a directory.
pub(super) const EXIT_NOT_DIR: i32 = 67;

/// The walk script: `sh -c WALK sh ROOT [OUT]`. Without OUT it prints the records; with OUT
/// (a temp file it then names on stdout) it writes them there, for trees whose listing is
/// too large for the exec output or holds names that are not UTF-8.
pub(super) const WALK_SCRIPT: &str = r#"if [ ! -d "$1" ]; then
  if [ -e "$1" ] || [ -L "$1" ]; then exit 67; fi
  exit 66
fi
if [ -z "$2" ]; then
  exec find -H "$1" -mindepth 1 -printf '%y %m %s %T@ %P\0%l\0'
fi
out=$(mktemp) || exit 70
find -H "$1" -mindepth 1 -printf '%y %m %s %T@ %P\0%l\0' > "$out" || { rm -f "$out"; exit 71; }
printf '%s' "$out""#;

/// The longest record of one entry kept (a relative path and a link target of up to 4,096
/// bytes each, Linux's `PATH_MAX`, and the fields before them). A longer record is skipped,
/// with a warning, without ever being held whole.
pub(super) const MAX_RECORD: usize = 2 * 4096 + 64;

/// Why a walk listing stopped being read.
#[derive(Debug)]
pub(super) enum Stop {
    /// The listing is not what the walk script prints.
    Malformed(String),
    /// More entries than `max_entries`.
    TooMany { limit: usize },
}

/// Parses the records the walk script prints as they arrive, in pieces of any size: it holds
/// one unfinished record (at most [`MAX_RECORD`] bytes) and the entries kept so far, never the
/// listing. Entries whose name is not UTF-8 or that [`super::admit`] refuses are skipped (with
/// a warning): remote paths are UTF-8 strings throughout wardfs. Past `max_entries` kept
/// entries it stops with [`Stop::TooMany`].
pub(super) struct Records {
    root: String,
    max_entries: usize,
    entries: Vec<WalkEntry>,
    /// The start of a record whose end has not come yet.
    partial: Vec<u8>,
    /// NULs still to skip before the next record, inside a record over [`MAX_RECORD`].
    skip_nuls: u8,
    /// Set once a piece could not be taken; every later piece is refused.
    stopped: Option<Stop>,
}

impl Records {
    /// Starts parsing the walk of `root`.
    pub fn new(root: &str, max_entries: usize) -> Records {
        Records {
            root: root.to_string(),
            max_entries,
            entries: Vec::new(),
            partial: Vec::new(),
            skip_nuls: 0,
            stopped: None,
        }
    }

    /// Takes the next piece of the listing.
    pub fn feed(&mut self, piece: &[u8]) -> Result<(), &Stop> {
        if self.stopped.is_none() {
            if let Err(stop) = self.take(piece) {
                self.stopped = Some(stop);
            }
        }
        self.stopped.as_ref().map_or(Ok(()), Err)
    }

    /// Returns why a piece was refused, if one was.
    pub fn take_stop(&mut self) -> Option<Stop> {
        self.stopped.take()
    }

    /// Returns the entries once the listing ended.
    pub fn finish(self) -> Result<Vec<WalkEntry>, Stop> {
        if let Some(stop) = self.stopped {
            return Err(stop);
        }
        if !self.partial.is_empty() {
            return Err(Stop::Malformed(format!(
                "the listing ends inside a record ({:?})",
                String::from_utf8_lossy(&self.partial[..self.partial.len().min(200)])
            )));
        }
        Ok(self.entries)
    }

    fn take(&mut self, piece: &[u8]) -> Result<(), Stop> {
        let piece = self.skip(piece);
        let mut joined = std::mem::take(&mut self.partial);
        let data: &[u8] = if joined.is_empty() {
            piece
        } else {
            joined.extend_from_slice(piece);
            &joined
        };
        let mut done = 0;
        while let Some(len) = record_len(&data[done..]) {
            let whole = &data[done..done + len];
            done += len;
            if len > MAX_RECORD {
                self.warn_long(whole);
                continue;
            }
            let (record, target) = split_record(whole);
            if let Some(entry) = parse_record(record, target).map_err(Stop::Malformed)? {
                self.keep(entry)?;
            }
        }
        let rest = &data[done..];
        if rest.len() > MAX_RECORD {
            self.skip_long(rest);
        } else {
            self.partial = rest.to_vec();
        }
        Ok(())
    }

    /// Returns what follows the end of a record being skipped in `piece`.
    fn skip<'p>(&mut self, mut piece: &'p [u8]) -> &'p [u8] {
        while self.skip_nuls > 0 {
            let Some(at) = memchr::memchr(0, piece) else {
                return &[];
            };
            self.skip_nuls -= 1;
            piece = &piece[at + 1..];
        }
        piece
    }

    /// Keeps `entry` when its path may be shown; fails past `max_entries`.
    fn keep(&mut self, entry: WalkEntry) -> Result<(), Stop> {
        if !super::admit(&self.root, &entry.path, true) {
            return Ok(());
        }
        if self.entries.len() >= self.max_entries {
            return Err(Stop::TooMany {
                limit: self.max_entries,
            });
        }
        self.entries.push(entry);
        Ok(())
    }

    fn warn_long(&self, record: &[u8]) {
        tracing::warn!(
            root = %self.root,
            start = %String::from_utf8_lossy(&record[..200]),
            "skipping a remote entry whose path or link target is longer than {MAX_RECORD} bytes"
        );
    }

    /// Skips the unfinished record `start`, longer than any kept, and what remains of it.
    fn skip_long(&mut self, start: &[u8]) {
        self.warn_long(start);
        // The start holds no whole record, so at most one of its two NULs.
        self.skip_nuls = if memchr::memchr(0, start).is_some() {
            1
        } else {
            2
        };
    }
}

/// A download streams into the parser. A refused piece fails the write; the cause stays in the
/// parser, for [`Records::finish`].
impl std::io::Write for Records {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.feed(buf) {
            Ok(()) => Ok(buf.len()),
            Err(stop) => Err(std::io::Error::other(format!("{stop:?}"))),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Returns the length of the first whole record in `data` (both its NUL-ended fields).
fn record_len(data: &[u8]) -> Option<usize> {
    let first = memchr::memchr(0, data)?;
    let second = memchr::memchr(0, &data[first + 1..])?;
    Some(first + 1 + second + 1)
}

/// Splits a whole record into its fields, without their NULs.
fn split_record(record: &[u8]) -> (&[u8], &[u8]) {
    let first = memchr::memchr(0, record).unwrap_or(record.len());
    let target = &record[(first + 1).min(record.len())..];
    (
        &record[..first],
        target.strip_suffix(&[0]).unwrap_or(target),
    )
}

/// Parses a whole listing at once (the exec output of a small tree).
pub(super) fn parse(output: &[u8], root: &str, max_entries: usize) -> Result<Vec<WalkEntry>, Stop> {
    let mut records = Records::new(root, max_entries);
    // A refused piece is reported by `finish`.
    let _ = records.feed(output);
    records.finish()
}

/// Parses one record (`TYPE MODE SIZE MTIME RELPATH` and the link target); `None` when its
/// path or target is not UTF-8.
fn parse_record(record: &[u8], target: &[u8]) -> Result<Option<WalkEntry>, String> {
    let mut parts = record.splitn(5, |&b| b == b' ');
    let (Some(kind), Some(mode), Some(size), Some(mtime), Some(path)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(format!(
            "malformed record {:?}",
            String::from_utf8_lossy(record)
        ));
    };
    let (Ok(path), Ok(target)) = (std::str::from_utf8(path), std::str::from_utf8(target)) else {
        tracing::warn!(
            path = %String::from_utf8_lossy(path),
            "skipping a remote entry whose name or link target is not UTF-8"
        );
        return Ok(None);
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let kind = match kind {
        b"f" => EntryKind::File,
        b"d" => EntryKind::Dir,
        b"l" => EntryKind::Symlink,
        _ => EntryKind::Other,
    };
    let mode = u32::from_str_radix(&text(mode), 8)
        .map_err(|_| format!("bad mode {:?} for {path}", text(mode)))?;
    let size = text(size)
        .parse::<u64>()
        .map_err(|_| format!("bad size {:?} for {path}", text(size)))?;
    Ok(Some(WalkEntry {
        path: path.to_string(),
        meta: RemoteMeta {
            kind,
            size,
            mtime_ns: parse_epoch_ns(&text(mtime)),
            mode: Some(mode),
            link_target: (kind == EntryKind::Symlink).then(|| target.to_string()),
        },
    }))
}

/// Parses `find`'s `%T@` (`1700000000.1234567890`) into nanoseconds.
fn parse_epoch_ns(s: &str) -> Option<i64> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: i64 = secs.parse().ok()?;
    let mut nanos = 0i64;
    for (i, c) in frac.bytes().take(9).enumerate() {
        if !c.is_ascii_digit() {
            return None;
        }
        nanos += i64::from(c - b'0') * 10i64.pow(8 - i as u32);
    }
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(out: &[u8]) -> Result<Vec<WalkEntry>, Stop> {
        parse(out, "/r", usize::MAX)
    }

    #[test]
    fn records_parse_with_spaces_in_names_and_link_targets() {
        let out = b"d 755 4096 1700000000.5000000000 a dir\0\0\
                    f 644 3 1700000001.0000000001 a dir/x y.txt\0\0\
                    l 777 5 1700000002.0000000000 lnk\0a dir\0";
        let entries = whole(out).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].path, "a dir");
        assert_eq!(entries[0].meta.kind, EntryKind::Dir);
        assert_eq!(entries[0].meta.mtime_ns, Some(1_700_000_000_500_000_000));
        assert_eq!(entries[1].path, "a dir/x y.txt");
        assert_eq!(entries[1].meta.mode, Some(0o644));
        assert_eq!(entries[1].meta.mtime_ns, Some(1_700_000_001_000_000_000));
        assert_eq!(entries[2].meta.kind, EntryKind::Symlink);
        assert_eq!(entries[2].meta.link_target.as_deref(), Some("a dir"));
        assert!(whole(b"f 644 3\0\0").is_err());
        assert!(whole(b"f 644 3 1.0 a\0").is_err(), "ends inside a record");
        assert!(whole(b"").unwrap().is_empty());
    }

    #[test]
    fn pieces_of_any_size_give_the_same_entries() {
        let mut out = Vec::new();
        for i in 0..50 {
            out.extend_from_slice(
                format!("f 644 {i} 1.5 d/f{i}\0\0l 777 1 2.0 d/l{i}\0f{i}\0").as_bytes(),
            );
        }
        let all = whole(&out).unwrap();
        assert_eq!(all.len(), 100);
        for size in [1, 2, 3, 7, 64, 1000] {
            let mut records = Records::new("/r", usize::MAX);
            for piece in out.chunks(size) {
                records.feed(piece).unwrap();
            }
            assert_eq!(records.finish().unwrap(), all, "pieces of {size}");
        }
    }

    #[test]
    fn a_record_over_the_bound_is_skipped_and_the_rest_kept() {
        let long = "x".repeat(MAX_RECORD);
        let out = format!(
            "f 644 1 1.0 a\0\0f 644 1 1.0 {long}\0\0l 777 1 1.0 b\0{long}\0f 644 1 1.0 c\0\0"
        );
        for size in [5, 4096, out.len()] {
            let mut records = Records::new("/r", usize::MAX);
            for piece in out.as_bytes().chunks(size) {
                records.feed(piece).unwrap();
            }
            let paths: Vec<String> = records
                .finish()
                .unwrap()
                .into_iter()
                .map(|e| e.path)
                .collect();
            assert_eq!(paths, ["a", "c"], "pieces of {size}");
        }
    }

    #[test]
    fn past_the_entry_cap_the_parser_stops() {
        let unique: String = (0..3).map(|i| format!("f 644 1 1.0 n{i}\0\0")).collect();
        assert_eq!(parse(unique.as_bytes(), "/r", 3).unwrap().len(), 3);
        assert!(matches!(
            parse(unique.as_bytes(), "/r", 2),
            Err(Stop::TooMany { limit: 2 })
        ));
        let mut records = Records::new("/r", 1);
        assert!(records.feed(unique.as_bytes()).is_err());
        assert!(records.feed(b"f 644 1 1.0 z\0\0").is_err(), "stays stopped");
    }
}
