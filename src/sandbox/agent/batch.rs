//! Packing batch items into tar archives for `POST /v1/fs/upload-batch`.
//!
//! The server unpacks a plain (uncompressed) tar below the `path` it is given, keeping modes,
//! modification times and symlinks, replacing files and links that are in the way (but never a
//! directory), and never deleting anything else. Its request bodies are capped (2 MiB on
//! 0.4.2), so items are packed greedily into archives that each fit; a file too large for any
//! archive is left to the chunked write. Hard links are never sent as such (the server resolves
//! their targets against its own working directory), and directories go last, deepest first,
//! so a read-only directory is never created before what goes inside it.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::core::provider::{BatchItem, SandboxFsError, SandboxFsResult};

/// The size of a tar block.
const BLOCK: u64 = 512;
/// The two zero blocks that end an archive.
const TRAILER: u64 = 2 * BLOCK;
/// Names up to this length fit in the header itself; longer ones take GNU long-name blocks.
const SHORT_NAME: usize = 99;

/// How the items of one batch are sent.
pub(super) struct Plan {
    /// Archives, each under the body limit, with the items they hold.
    pub archives: Vec<Vec<BatchItem>>,
    /// Files too large for an archive: written one by one, in chunks.
    pub large: Vec<BatchItem>,
}

/// Returns the bytes `item` takes in an archive, an upper bound.
fn archived_size(item: &BatchItem) -> u64 {
    let long = |len: usize| {
        if len > SHORT_NAME {
            BLOCK + (len as u64 + 1).div_ceil(BLOCK) * BLOCK
        } else {
            0
        }
    };
    let data = match item {
        BatchItem::File { data, .. } => (data.len() as u64).div_ceil(BLOCK) * BLOCK,
        _ => 0,
    };
    let target = match item {
        BatchItem::Symlink { target, .. } => long(target.len()),
        _ => 0,
    };
    // One byte more for the slash a directory name may get.
    BLOCK + long(item.path().len() + 1) + target + data
}

/// Splits `items` into archives of at most `limit` bytes each, plus the files too large for one.
pub(super) fn plan(items: Vec<BatchItem>, limit: u64) -> Plan {
    let room = limit.saturating_sub(TRAILER);
    let (mut dirs, others): (Vec<_>, Vec<_>) = items
        .into_iter()
        .partition(|i| matches!(i, BatchItem::Dir { .. }));
    dirs.sort_by_key(|d| std::cmp::Reverse(d.path().matches('/').count()));
    let mut archives: Vec<Vec<BatchItem>> = Vec::new();
    let mut large = Vec::new();
    let mut current = Vec::new();
    let mut used = 0u64;
    for item in others.into_iter().chain(dirs) {
        let size = archived_size(&item);
        if size > room {
            large.push(item);
            continue;
        }
        if used + size > room {
            archives.push(std::mem::take(&mut current));
            used = 0;
        }
        used += size;
        current.push(item);
    }
    if !current.is_empty() {
        archives.push(current);
    }
    Plan { archives, large }
}

/// Returns the seconds since the epoch now, for items that carry no time of their own.
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Builds one archive of `items` (paths already checked to be plain relative paths).
pub(super) fn archive(items: &[BatchItem]) -> SandboxFsResult<Vec<u8>> {
    let now = now_secs();
    let mut builder = tar::Builder::new(Vec::new());
    let fail = |path: &str, e: std::io::Error| SandboxFsError::InvalidPath {
        path: path.to_string(),
        rule: format!("it cannot go into a tar archive: {e}"),
    };
    for item in items {
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        match item {
            BatchItem::File {
                path,
                data,
                mode,
                mtime,
            } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(mode & 0o7777);
                header.set_mtime(mtime.unwrap_or(now));
                header.set_size(data.len() as u64);
                builder
                    .append_data(&mut header, path, &data[..])
                    .map_err(|e| fail(path, e))?;
            }
            BatchItem::Dir { path, mode } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(mode & 0o7777);
                header.set_mtime(now);
                header.set_size(0);
                builder
                    .append_data(&mut header, path, std::io::empty())
                    .map_err(|e| fail(path, e))?;
            }
            BatchItem::Symlink { path, target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_mtime(now);
                header.set_size(0);
                builder
                    .append_link(&mut header, path, target)
                    .map_err(|e| fail(path, e))?;
            }
        }
    }
    builder.into_inner().map_err(|e| fail("(archive)", e))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn file(path: &str, len: usize) -> BatchItem {
        BatchItem::File {
            path: path.into(),
            data: Bytes::from(vec![7u8; len]),
            mode: 0o644,
            mtime: Some(1_700_000_000),
        }
    }

    #[test]
    fn archives_stay_under_the_limit_and_large_files_are_set_aside() {
        let limit = 64 * 1024;
        let mut items: Vec<BatchItem> = (0..40).map(|i| file(&format!("d/f{i}"), 5000)).collect();
        items.push(file("big", 100_000));
        items.push(BatchItem::Dir {
            path: "d".into(),
            mode: 0o755,
        });
        items.push(BatchItem::Dir {
            path: "d/e/f".into(),
            mode: 0o700,
        });
        items.push(BatchItem::Symlink {
            path: format!("{}/link", "long".repeat(40)),
            target: "t".repeat(300),
        });
        let plan = plan(items, limit);
        assert_eq!(plan.large.len(), 1);
        assert_eq!(plan.large[0].path(), "big");
        assert!(plan.archives.len() >= 4, "{}", plan.archives.len());
        let mut names = Vec::new();
        for items in &plan.archives {
            let bytes = archive(items).unwrap();
            assert!(bytes.len() as u64 <= limit, "{} > {limit}", bytes.len());
            let mut ar = tar::Archive::new(&bytes[..]);
            for entry in ar.entries().unwrap() {
                let entry = entry.unwrap();
                let name = entry.path().unwrap().to_string_lossy().into_owned();
                names.push(name.trim_end_matches('/').to_string());
                if entry.header().entry_type() == tar::EntryType::Symlink {
                    assert_eq!(
                        entry.link_name().unwrap().unwrap().to_str().unwrap().len(),
                        300
                    );
                }
            }
        }
        assert_eq!(names.len(), 43);
        // Directories come last, the deepest first.
        assert_eq!(&names[names.len() - 2..], ["d/e/f", "d"]);
    }
}
