//! Walking a remote tree with `find -printf` through the exec endpoint.
//!
//! `sandbox-agent`'s listings follow symlinks (a link is a `file` with its target's size) and
//! carry no modes, so a walk that must see links, their targets and permission bits runs GNU
//! `find` in the sandbox instead: one request for the whole tree. Each entry is printed as
//! `TYPE MODE SIZE MTIME RELPATH\0TARGET\0` — the first four fields hold no spaces, so the
//! path (which may hold anything but NUL) is the rest of the record.

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

/// Parses the records the walk script prints. Entries whose name is not UTF-8 are skipped (with
/// a warning): remote paths are UTF-8 strings throughout wardfs.
pub(super) fn parse(output: &[u8]) -> Result<Vec<WalkEntry>, String> {
    let mut fields = output.split(|&b| b == 0);
    let mut entries = Vec::new();
    while let Some(record) = fields.next() {
        if record.is_empty() {
            // The split yields one empty piece after the final NUL.
            break;
        }
        let target = fields
            .next()
            .ok_or_else(|| "a record has no link-target field".to_string())?;
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
        let (Ok(path), Ok(target)) = (std::str::from_utf8(path), std::str::from_utf8(target))
        else {
            tracing::warn!(
                path = %String::from_utf8_lossy(path),
                "skipping a remote entry whose name or link target is not UTF-8"
            );
            continue;
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
        let mtime_ns = parse_epoch_ns(&text(mtime));
        entries.push(WalkEntry {
            path: path.to_string(),
            meta: RemoteMeta {
                kind,
                size,
                mtime_ns,
                mode: Some(mode),
                link_target: (kind == EntryKind::Symlink).then(|| target.to_string()),
            },
        });
    }
    Ok(entries)
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

    #[test]
    fn records_parse_with_spaces_in_names_and_link_targets() {
        let out = b"d 755 4096 1700000000.5000000000 a dir\0\0\
                    f 644 3 1700000001.0000000001 a dir/x y.txt\0\0\
                    l 777 5 1700000002.0000000000 lnk\0a dir\0";
        let entries = parse(out).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].path, "a dir");
        assert_eq!(entries[0].meta.kind, EntryKind::Dir);
        assert_eq!(entries[0].meta.mtime_ns, Some(1_700_000_000_500_000_000));
        assert_eq!(entries[1].path, "a dir/x y.txt");
        assert_eq!(entries[1].meta.mode, Some(0o644));
        assert_eq!(entries[1].meta.mtime_ns, Some(1_700_000_001_000_000_000));
        assert_eq!(entries[2].meta.kind, EntryKind::Symlink);
        assert_eq!(entries[2].meta.link_target.as_deref(), Some("a dir"));
        assert!(parse(b"f 644 3\0\0").is_err());
        assert!(parse(b"").unwrap().is_empty());
    }
}
