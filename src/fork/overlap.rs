//! Overlaps: a path a fork changed that its parent, or a sibling fork (made from the same
//! parent), also changed since the fork point. Found from the journal (every writer reaches it),
//! so they are known while the agents still work, not at the merge: `wardfs forks` lists them,
//! the daemon sends an `overlap` event the moment one appears ([`Forks::new_overlaps`]), and an
//! agent can ask before it writes (`wardfs changes NAME --overlaps`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use super::{state_err, Forks};
use crate::core::{FsResult, VPath, ZoneId};
use crate::state::{ForkRecord, JournalFilter, Origin};

/// Changed paths a side lists at most for overlaps (past it, that side is left out and logged).
const MAX_PATHS: usize = 20_000;

/// Overlaps reported at most.
const MAX_OVERLAPS: usize = 1_000;

/// A path changed on two sides or more since the fork point.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub struct Overlap {
    /// Relative to the zones.
    pub path: String,
    /// The zones that changed it (`workspace`, `forks/a`, …), sorted.
    pub zones: Vec<String>,
    /// Who changed it in each zone, as `zone: via pid N` (the latest change in each).
    pub writers: Vec<String>,
}

/// One side's changes since a fork point.
struct Side {
    zone: String,
    after: i64,
    paths: BTreeSet<String>,
}

impl Forks {
    /// The overlaps of every fork now (at most 1,000).
    pub fn overlaps(&self) -> FsResult<Vec<Overlap>> {
        let recs = self.zones.db().fork_list().map_err(state_err)?;
        let mut found: BTreeMap<(String, Vec<String>), ()> = BTreeMap::new();
        let sides: Vec<(ForkRecord, Side)> = recs
            .into_iter()
            .filter_map(|r| self.fork_side(&r).map(|s| (r, s)))
            .collect();
        for (i, (rec, mine)) in sides.iter().enumerate() {
            if let Some(parent) = self.parent_side(rec, mine.after) {
                for p in mine.paths.intersection(&parent.paths) {
                    found.insert((p.clone(), sorted(&[&mine.zone, &parent.zone])), ());
                }
            }
            for (other_rec, other) in &sides[i + 1..] {
                if other_rec.parent != rec.parent {
                    continue;
                }
                for p in mine.paths.intersection(&other.paths) {
                    found.insert((p.clone(), sorted(&[&mine.zone, &other.zone])), ());
                }
            }
            if found.len() >= MAX_OVERLAPS {
                break;
            }
        }
        let afters: BTreeMap<String, i64> = sides
            .iter()
            .map(|(r, s)| (s.zone.clone(), s.after.min(self.base_pos(r).unwrap_or(0))))
            .collect();
        Ok(found
            .into_keys()
            .take(MAX_OVERLAPS)
            .map(|(path, zones)| {
                let writers = self.writers(&path, &zones, &afters);
                Overlap {
                    path,
                    zones,
                    writers,
                }
            })
            .collect())
    }

    /// The overlaps of the fork `name` (with its parent and its siblings).
    pub fn overlaps_of(&self, name: &str) -> FsResult<Vec<Overlap>> {
        let zone = format!("forks/{name}");
        self.get(name)?;
        Ok(self
            .overlaps()?
            .into_iter()
            .filter(|o| o.zones.contains(&zone))
            .collect())
    }

    /// The overlaps not seen by an earlier call (`seen` keeps them), each journaled as an
    /// `overlap` event in every fork it involves, so the events stream and MCP `events` carry
    /// it. Called by the daemon every second.
    pub fn new_overlaps(&self, seen: &mut HashSet<Overlap>) -> FsResult<Vec<Overlap>> {
        let mut new = Vec::new();
        for o in self.overlaps()? {
            let key = Overlap {
                writers: Vec::new(),
                ..o.clone()
            };
            if seen.insert(key) {
                self.announce(&o);
                new.push(o);
            }
        }
        Ok(new)
    }

    fn announce(&self, o: &Overlap) {
        let detail = serde_json::json!({ "zones": o.zones, "writers": o.writers }).to_string();
        for zone in o.zones.iter().filter(|z| z.starts_with("forks/")) {
            let Some(id) = ZoneId::from_name(zone) else {
                continue;
            };
            if let Ok(vp) = VPath::new(id, &o.path) {
                self.zones
                    .record_event(&vp, "overlap", &detail, Origin::INTERNAL);
            }
        }
    }

    /// The journal position of the fork's fork point.
    fn base_pos(&self, rec: &ForkRecord) -> Option<i64> {
        let db = self.zones.db();
        db.checkpoint_get(rec.base)
            .ok()
            .flatten()
            .map(|b| b.journal_pos)
    }

    /// What the fork `rec` changed since its fork point.
    fn fork_side(&self, rec: &ForkRecord) -> Option<Side> {
        let after = self.base_pos(rec)?;
        self.side(&format!("forks/{}", rec.name), after)
    }

    /// What the fork's parent zone changed since the fork point (`None` for a fork of a
    /// checkpoint: no parent changes). The fork's own merges into the parent are not the
    /// parent's changes.
    fn parent_side(&self, rec: &ForkRecord, after: i64) -> Option<Side> {
        ZoneId::from_name(&rec.parent)?;
        let db = self.zones.db();
        let paths = db.fork_parent_paths_since(rec.id, &rec.parent, after, MAX_PATHS);
        side_of(&rec.parent, after, paths)
    }

    fn side(&self, zone: &str, after: i64) -> Option<Side> {
        let paths = self
            .zones
            .db()
            .journal_zone_paths_since(zone, after, MAX_PATHS);
        side_of(zone, after, paths)
    }

    /// Who last changed `path` in each of `zones` (after their fork points).
    fn writers(&self, path: &str, zones: &[String], afters: &BTreeMap<String, i64>) -> Vec<String> {
        let db = self.zones.db();
        let lowest = afters.values().copied().min().unwrap_or(0);
        zones
            .iter()
            .filter_map(|z| {
                let rows = db
                    .journal_query(&JournalFilter {
                        zone: Some(z.clone()),
                        path_prefix: Some(path.to_string()),
                        after_id: Some(*afters.get(z).unwrap_or(&lowest)),
                        limit: 8,
                        ..Default::default()
                    })
                    .ok()?;
                let row = rows
                    .into_iter()
                    .find(|r| r.path == path && r.op != "overlap")?;
                Some(match row.pid {
                    Some(pid) => format!("{z}: {} pid {pid}", row.via),
                    None => format!("{z}: {}", row.via),
                })
            })
            .collect()
    }
}

fn sorted(zones: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = zones.iter().map(|z| z.to_string()).collect();
    v.sort();
    v.dedup();
    v
}

/// A side of `zone` from the paths its journal names after `after` (`None`: over
/// [`MAX_PATHS`], or the journal unreadable; logged).
fn side_of(
    zone: &str,
    after: i64,
    paths: Result<Option<Vec<String>>, crate::state::StateError>,
) -> Option<Side> {
    match paths {
        Ok(Some(paths)) => Some(Side {
            zone: zone.to_string(),
            after,
            paths: paths.into_iter().filter(|p| !p.is_empty()).collect(),
        }),
        Ok(None) => {
            tracing::warn!(zone, "over {MAX_PATHS} paths changed: left out of overlaps");
            None
        }
        Err(e) => {
            tracing::warn!(zone, error = %e, "cannot read the journal for overlaps");
            None
        }
    }
}
