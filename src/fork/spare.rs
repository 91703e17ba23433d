//! Spares: a fork made ahead of each zone that has been forked, so the next fork of it takes
//! milliseconds whatever the tree's size (issue 30's target: under 10 ms for 25,000 files).
//!
//! Linking a tree's files into a fork's directory costs a system call per file (about 1.5 s for
//! 25,000 files on ext4). A spare is that work done in the background, after a fork is made
//! (and when the daemon starts, for a zone with forks): a directory under `<state_dir>/forks/`
//! filled from the zone as [`materialize::fill`] fills a fork, with the journal position read
//! just before the fill began. Making the next fork then takes the spare, brings it up to the
//! zone's present (every path the journal names since that position is made again from the
//! zone's directory, [`materialize::refill`]: the spare's cost follows what changed since it was
//! filled, like an incremental checkpoint's), renames it into place and puts back the fork
//! point's version of what changed after the fork point ([`super::Forks`] does that for a
//! fresh fill too). A fork asked for while the spare is still being filled waits for it.
//!
//! A spare holds a second link to each of the zone's files, so while it exists the mount copies
//! a file up before its first change (the hard-link rule every fork relies on). Spares are not
//! zones: nothing serves, journals or checkpoints them, and a daemon started again deletes the
//! spares it finds and fills new ones. `forks.spare = false` turns them off.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use super::materialize::{self, Filled};
use crate::core::{ZoneId, Zones};

/// The prefix of a spare's directory name (a fork's directory never starts with `.`).
const PREFIX: &str = ".spare-";

/// Journal paths past which a spare is thrown away rather than brought up to date: by then a
/// fresh fill costs less.
pub const MAX_CATCH_UP: usize = 5_000;

/// A filled spare of one zone.
#[derive(Debug)]
pub struct Spare {
    /// Its directory.
    pub dir: PathBuf,
    /// The journal position read just before its fill began: every later change of the zone
    /// may be missing from it.
    pub filled_at: i64,
    /// What its fill did.
    pub filled: Filled,
}

/// A zone's spare, as it stands.
#[derive(Debug)]
enum Slot {
    Filling,
    Ready(Spare),
}

/// The spares of this daemon, one per zone at most.
pub struct Spares {
    zones: Arc<Zones>,
    root: PathBuf,
    on: bool,
    slots: Mutex<HashMap<ZoneId, Slot>>,
    changed: Condvar,
}

/// The spares' state for one zone, as `forks` reports it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SpareInfo {
    pub zone: String,
    /// Whether it is filled (a fork of the zone made now takes it) or still being filled.
    pub ready: bool,
}

impl Spares {
    /// The spares kept under `root` (the forks' directory); `on` false keeps none. Spares a
    /// daemon left behind are deleted in the background.
    pub fn new(zones: Arc<Zones>, root: PathBuf, on: bool) -> Arc<Spares> {
        let spares = Arc::new(Spares {
            zones,
            root,
            on,
            slots: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
        });
        let left = spares.left_behind();
        if !left.is_empty() {
            background("wardfs-spare-rm", move || {
                left.iter().for_each(|d| delete(d))
            });
        }
        spares
    }

    /// Spare directories under the root (a daemon's before this one).
    fn left_behind(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
            .map(|e| e.path())
            .collect()
    }

    /// Starts filling a spare of `zone` in the background, unless one is filled or filling, the
    /// spares are off, or the zone is not local (or shares no files: a zone that allows hard
    /// links gets copies, which a spare would not save).
    pub fn prepare(self: &Arc<Self>, zone: ZoneId) {
        if !self.on || !self.shares(zone) {
            return;
        }
        {
            let mut slots = self.slots.lock().expect("not poisoned");
            if slots.contains_key(&zone) {
                return;
            }
            slots.insert(zone, Slot::Filling);
        }
        let me = self.clone();
        background("wardfs-spare", move || {
            let spare = me.fill(zone);
            let mut slots = me.slots.lock().expect("not poisoned");
            match spare {
                Ok(s) if me.zones.zone_ids().contains(&zone) => {
                    slots.insert(zone, Slot::Ready(s));
                }
                Ok(s) => {
                    slots.remove(&zone);
                    delete(&s.dir);
                }
                Err(e) => {
                    slots.remove(&zone);
                    tracing::warn!(zone = zone.name(), error = %e, "cannot fill a spare fork");
                }
            }
            me.changed.notify_all();
        });
    }

    fn shares(&self, zone: ZoneId) -> bool {
        self.zones.local(zone).is_ok_and(|z| !z.allows_hardlinks())
    }

    /// Fills a spare of `zone` (blocking).
    fn fill(&self, zone: ZoneId) -> std::io::Result<Spare> {
        let filled_at = self
            .zones
            .db()
            .journal_last_id()
            .map_err(std::io::Error::other)?;
        let name = zone.name().replace('/', "_");
        let dir = self
            .root
            .join(format!("{PREFIX}{name}-{}", self.zones.now_ms()));
        std::fs::create_dir_all(&dir)?;
        let filled = match self.zones.local(zone) {
            Ok(z) => materialize::fill(z.dirfd(), open_dir(&dir)?.as_fd(), true),
            Err(_) => Err(std::io::Error::other("the zone is not local")),
        };
        match filled {
            Ok(filled) => Ok(Spare {
                dir,
                filled_at,
                filled,
            }),
            Err(e) => {
                delete(&dir);
                Err(e)
            }
        }
    }

    /// Takes `zone`'s spare, waiting while one is being filled; `None` when there is none.
    pub fn take(&self, zone: ZoneId) -> Option<Spare> {
        let mut slots = self.slots.lock().expect("not poisoned");
        loop {
            match slots.remove(&zone) {
                Some(Slot::Ready(s)) => return Some(s),
                Some(Slot::Filling) => {
                    slots.insert(zone, Slot::Filling);
                    slots = self.changed.wait(slots).expect("not poisoned");
                }
                None => return None,
            }
        }
    }

    /// Waits until no spare is being filled (tests, and a daemon shutting down).
    pub fn settle(&self) {
        let mut slots = self.slots.lock().expect("not poisoned");
        while slots.values().any(|s| matches!(s, Slot::Filling)) {
            slots = self.changed.wait(slots).expect("not poisoned");
        }
    }

    /// Each zone's spare, as it stands.
    pub fn info(&self) -> Vec<SpareInfo> {
        let slots = self.slots.lock().expect("not poisoned");
        let mut out: Vec<SpareInfo> = slots
            .iter()
            .map(|(z, s)| SpareInfo {
                zone: z.name().to_string(),
                ready: matches!(s, Slot::Ready(_)),
            })
            .collect();
        out.sort_by(|a, b| a.zone.cmp(&b.zone));
        out
    }

    /// Brings `spare` (of `zone`, now renamed to `dst`) up to the zone's present: each path the
    /// journal names since its fill is made again from the zone's directory. `None` when more
    /// than [`MAX_CATCH_UP`] paths changed (a fresh fill is cheaper). Returns the paths redone.
    pub fn catch_up(
        &self,
        zone: ZoneId,
        spare: &mut Spare,
        dst: &OwnedFd,
    ) -> std::io::Result<Option<u64>> {
        let Some(paths) = self
            .zones
            .db()
            .journal_zone_paths_since(zone.name(), spare.filled_at, MAX_CATCH_UP)
            .map_err(std::io::Error::other)?
        else {
            return Ok(None);
        };
        let Ok(z) = self.zones.local(zone) else {
            return Err(std::io::Error::other("the zone is no longer local"));
        };
        let tops = topmost(paths);
        for rel in &tops {
            materialize::refill(z.dirfd(), dst.as_fd(), rel, &mut spare.filled)?;
        }
        Ok(Some(tops.len() as u64))
    }
}

/// `paths` without those beneath another of them (making a directory again makes all of it),
/// and without the zone's root.
fn topmost(mut paths: Vec<String>) -> Vec<String> {
    paths.retain(|p| !p.trim_matches('/').is_empty());
    paths.sort();
    paths.dedup();
    let mut kept = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let under = p.match_indices('/').any(|(i, _)| kept.contains(&p[..i]));
        if !under {
            kept.insert(p.clone());
            out.push(p);
        }
    }
    out
}

/// Opens the directory `dir` as a path fd.
pub fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// Deletes a spare's (or a fork's) directory, logging what it cannot.
pub fn delete(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot delete a fork's directory");
        }
    }
}

/// Runs `f` on a thread of its own.
fn background(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(f) {
        tracing::warn!(error = %e, "cannot start a thread for spare forks");
    }
}

#[cfg(test)]
mod tests {
    use super::topmost;

    #[test]
    fn topmost_keeps_only_the_paths_no_other_contains() {
        let paths = ["a/b", "a", "ab", "a-x", "a/b/c", "", "d/e", "d/e", "d/ef"];
        let got = topmost(paths.iter().map(|s| s.to_string()).collect());
        assert_eq!(got, ["a", "a-x", "ab", "d/e", "d/ef"]);
    }
}
