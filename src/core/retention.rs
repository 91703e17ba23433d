//! Garbage collection of what the core leaves behind: journal rows past their retention, and the
//! `.wardfs-tmp-*` files an atomic write leaves when the daemon dies between writing and renaming.
//!
//! A temp file whose writer process is gone is removed at once (the daemon runs a pass at start-up,
//! so a crash leaves none behind); one whose writer may still run waits an hour.
//!
//! Both take "now" from the caller (the core's one clock); nothing here reads the system time
//! except the files' own modification times, which are compared with that "now".

use std::path::Path;

use super::{Zone, ZoneId, Zones};
use crate::state::StateError;

/// The name prefix of the temporary files atomic writes create beside their target.
pub const TMP_PREFIX: &str = ".wardfs-tmp-";

/// Temporary files younger than this may belong to a write still in progress.
pub const TMP_MAX_AGE_MS: i64 = 60 * 60 * 1000;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Returns the time before which rows kept for `keep_days` are old, or `None` for 0 (forever).
pub fn cutoff_ms(now_ms: i64, keep_days: u32) -> Option<i64> {
    (keep_days > 0).then(|| now_ms - i64::from(keep_days) * DAY_MS)
}

/// Deletes the journal rows older than `keep_days` (0 keeps all); returns how many went.
pub fn prune_journal(zones: &Zones, now_ms: i64, keep_days: u32) -> Result<u64, StateError> {
    match cutoff_ms(now_ms, keep_days) {
        Some(before) => zones.db().journal_prune(before),
        None => Ok(0),
    }
}

/// Deletes `.wardfs-tmp-*` files older than an hour, or whose writer process is gone, from every
/// local zone; returns their virtual paths, sorted. Symbolic links are never followed, so the
/// walk stays inside the zones.
pub fn sweep_temp_files(zones: &Zones, now_ms: i64) -> Vec<String> {
    let mut removed = Vec::new();
    for id in zones.zone_ids() {
        if let Zone::Local(z) = zones.zone(id) {
            sweep_dir(z.root(), z.root(), id, now_ms, &mut removed);
        }
    }
    removed.sort();
    removed
}

fn sweep_dir(root: &Path, dir: &Path, id: ZoneId, now_ms: i64, removed: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        let path = entry.path();
        if ft.is_dir() {
            sweep_dir(root, &path, id, now_ms, removed);
            continue;
        }
        let is_tmp = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(TMP_PREFIX));
        if !is_tmp || !ft.is_file() {
            continue;
        }
        let modified_ms = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64);
        let old = modified_ms.is_some_and(|m| now_ms - m > TMP_MAX_AGE_MS);
        let orphan = entry.file_name().to_str().is_some_and(writer_is_gone);
        if (old || orphan) && std::fs::remove_file(&path).is_ok() {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            removed.push(format!("/{}/{}", id.name(), rel.display()));
        }
    }
}

/// Returns whether the temp file `name` (`.wardfs-tmp-<pid>-<n>`) was left by a process that no
/// longer exists: a daemon killed between writing and renaming. Such a file can never be renamed,
/// so it need not wait the hour that protects a write still in progress. A pid that was reused
/// keeps the file until it is an hour old.
fn writer_is_gone(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix(TMP_PREFIX)
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<u32>().ok())
    else {
        return false;
    };
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_days_keeps_forever() {
        assert_eq!(cutoff_ms(10 * DAY_MS, 0), None);
        assert_eq!(cutoff_ms(10 * DAY_MS, 3), Some(7 * DAY_MS));
    }

    #[test]
    fn only_a_dead_writer_leaves_an_orphan() {
        let me = std::process::id();
        assert!(!writer_is_gone(&format!(".wardfs-tmp-{me}-3")));
        assert!(!writer_is_gone(".wardfs-tmp-notapid-3"));
        assert!(!writer_is_gone("notes.txt"));
        // Above the kernel's pid_max (at most 2^22), so never a live process.
        assert!(writer_is_gone(".wardfs-tmp-4294967-3"));
        assert!(writer_is_gone(".wardfs-tmp-4294967-m7"));
    }
}
