//! What a fork changed (`crate::fork`'s `changes`): the files added, modified, deleted, renamed
//! and re-moded from a checkpoint to a zone as it is now, with git's line counts and, when
//! asked, the patch in git's format.
//!
//! * **The present** is read as a checkpoint reads it (the paths the journal names since the
//!   zone's latest checkpoint, on that checkpoint's tree), and nothing is recorded. The tree
//!   read is kept ([`Memo`]): while the zone's latest checkpoint is the same, the next call
//!   builds on it instead, looking again only at the paths the journal names since (none: the
//!   same tree, no file read).
//! * **Renames.** A path deleted and another added with the same content (and kind: file or
//!   symlink) is one rename, found by blob id however many files moved (one with the same file
//!   name first). With few files added and deleted ([`SIMILAR_PAIRS`], [`SIMILAR_BYTES`]),
//!   git's similarity (half the content kept) finds the renames of files changed as they moved
//!   too.
//! * **Re-modes.** A file whose content stayed and whose mode changed: the executable bit (in
//!   the tree), or the exact permission bits checkpoints keep beside it (a `.env` made 0600).
//! * **Cost.** The trees are compared by subtree ids (what did not change is not walked). The
//!   line counts are git's, of the two blobs of each changed file, counted on several threads
//!   and kept by blob pair ([`Memo`]); the patch text is built only when asked for.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use git2::{Delta, Diff, DiffDelta, DiffFindOptions, DiffOptions, FileMode, Oid, Patch};
use git2::{Repository, Tree};

use super::{
    file_mode, in_scope, oid, state_err, status, store_err, threads_for, Builder, Checkpoints,
    DiffFile, DiffResult, Filter, Modes, MAX_INCREMENTAL, MAX_PATCH_BYTES,
};
use crate::core::{FsError, FsResult, ZoneId};
use crate::state::CheckpointRow;

/// Added × deleted files up to which renames of files changed as they moved are looked for by
/// similarity; past it, only renames that kept the content are.
const SIMILAR_PAIRS: usize = 40_000;
/// Bytes of added and deleted files up to which similarity is looked for (each file's content
/// is read and hashed for it).
const SIMILAR_BYTES: usize = 32 << 20;
/// Similarity, in percent, from which an added and a deleted file are a rename (git's).
const SIMILAR_PERCENT: u16 = 50;
/// Blob pairs whose line counts are kept at most (past it the memo starts again).
const MEMO_LINES: usize = 100_000;
/// Zones whose present is kept at most (forks come and go; past it the memo starts again).
const MEMO_PRESENTS: usize = 1024;

/// What `changes` keeps between calls (see the module doc): both are facts about objects, so a
/// kept entry is never wrong, only checked for being still the present.
#[derive(Default)]
pub(super) struct Memo {
    /// Lines added and deleted from one blob to another.
    lines: Mutex<HashMap<(Oid, Oid), (usize, usize)>>,
    /// By zone name, the present last read.
    presents: Mutex<HashMap<String, Present>>,
}

/// A zone's present as `changes` last read it.
#[derive(Clone)]
struct Present {
    /// The zone's latest checkpoint then.
    latest: Option<i64>,
    /// The journal position it was read at.
    journal_pos: i64,
    tree: Oid,
    modes: Option<Oid>,
}

/// One side of a comparison: a tree and its files' exact permission bits.
struct Side<'r> {
    tree: Tree<'r>,
    modes: Modes,
}

/// The answer being built.
#[derive(Default)]
struct Listing {
    files: BTreeMap<String, DiffFile>,
    /// `None`: no patch was asked for.
    patch: Option<String>,
    truncated: bool,
}

/// A file whose lines are counted from its two blobs (zero: none on that side).
struct Count {
    path: String,
    old: Oid,
    new: Oid,
}

impl Checkpoints {
    /// The changes from checkpoint `from` to the zone `zone` as it is now (read as a checkpoint
    /// reads it; nothing recorded): added, modified, deleted, type-changed, renamed and re-moded
    /// files with their line counts, and with `patch` the patch in git's format (cut at 4 MiB).
    /// A checkpoint of a directory (`scope`) is compared within that directory.
    pub fn changes(&self, from: &CheckpointRow, zone: ZoneId, patch: bool) -> FsResult<DiffResult> {
        let repo = self.repo.lock().expect("not poisoned");
        let now = self.present_tree(&repo, zone)?;
        let old = Side {
            tree: repo.find_tree(oid(&from.tree)?).map_err(store_err)?,
            modes: Modes::of(&repo, from)?,
        };
        let new = Side {
            tree: repo.find_tree(now.tree).map_err(store_err)?,
            modes: modes_of_blob(&repo, now.modes)?,
        };
        let scope: Vec<String> = from.scope.iter().cloned().collect();
        let mut out = Listing {
            patch: patch.then(String::new),
            ..Listing::default()
        };
        let counts = list_changes(&repo, (&old, &new), &scope, &mut out)?;
        self.count_lines(&repo, &counts, &mut out.files)?;
        Ok(DiffResult {
            from: from.id,
            to: None,
            files: out.files.into_values().collect(),
            patch: out.patch.unwrap_or_default(),
            truncated: out.truncated,
        })
    }

    /// The tree of `zone` as it is now: built on the one read last time while the zone's latest
    /// checkpoint is the same ([`Checkpoints::present_onto`]), else a snapshot; kept for the next
    /// call unless a file is open for writing through the mount.
    fn present_tree(&self, repo: &Repository, zone: ZoneId) -> FsResult<Present> {
        let db = self.zones.db();
        let name = zone.name();
        let latest = db.checkpoint_last(name).map_err(state_err)?.map(|c| c.id);
        let writing = !self.zones.own().open_writer_paths(zone).is_empty();
        let kept = self
            .memo
            .presents
            .lock()
            .expect("not poisoned")
            .get(name)
            .cloned();
        // Checkpoint pruning may have taken a tree no checkpoint holds.
        let kept = kept.filter(|p| p.latest == latest && repo.find_tree(p.tree).is_ok());
        let onto = match &kept {
            Some(p) => self.present_onto(repo, zone, p)?,
            None => None,
        };
        let present = match onto {
            Some(p) => p,
            None => {
                let snap = self.snapshot(repo, zone)?;
                Present {
                    latest: snap.parent.map(|c| c.id),
                    journal_pos: snap.journal_pos,
                    tree: snap.tree,
                    modes: snap.modes,
                }
            }
        };
        let mut presents = self.memo.presents.lock().expect("not poisoned");
        if writing {
            presents.remove(name);
        } else {
            if presents.len() >= MEMO_PRESENTS {
                presents.clear();
            }
            presents.insert(name.to_string(), present.clone());
        }
        Ok(present)
    }

    /// The present of `zone` built onto `kept` (the present read last time), as a checkpoint is
    /// built onto the zone's latest one: `kept` itself while the journal names no change since,
    /// else with the paths it names looked at again. `None` when the journal no longer holds
    /// them all, or names too many.
    fn present_onto(
        &self,
        repo: &Repository,
        zone: ZoneId,
        kept: &Present,
    ) -> FsResult<Option<Present>> {
        let Ok(local) = self.zones.local(zone) else {
            return Ok(None);
        };
        let db = self.zones.db();
        // Taken before anything is read, as a snapshot takes it.
        let journal_pos = db.journal_last_id().map_err(state_err)?;
        let open = self.zones.own().open_writer_paths(zone);
        let first = db.journal_first_id().map_err(state_err)?;
        if first.is_some_and(|f| f > kept.journal_pos + 1) {
            return Ok(None);
        }
        let Some(mut paths) = db
            .journal_zone_paths_since(zone.name(), kept.journal_pos, MAX_INCREMENTAL)
            .map_err(state_err)?
        else {
            return Ok(None);
        };
        if paths.is_empty() && open.is_empty() {
            return Ok(Some(kept.clone()));
        }
        paths.extend(open);
        let filter = Filter::new(local.root(), &self.cfg)?;
        let mut b = Builder {
            zones: &self.zones,
            repo,
            zone,
            filter: &filter,
            max: self.cfg.max_file_bytes,
            not_kept: Default::default(),
            hashed: Default::default(),
            prefetched: Default::default(),
            modes: std::cell::RefCell::new(modes_of_blob(repo, kept.modes)?),
        };
        let base = repo.find_tree(kept.tree).map_err(store_err)?;
        let tree = b.apply(&base, paths)?;
        Ok(Some(Present {
            latest: kept.latest,
            journal_pos,
            tree,
            modes: b.modes.take().save(repo, tree)?,
        }))
    }

    /// Sets the line counts of `counts` in `files`: kept ones from the memo, the others counted
    /// (on several threads when many) and kept.
    fn count_lines(
        &self,
        repo: &Repository,
        counts: &[Count],
        files: &mut BTreeMap<String, DiffFile>,
    ) -> FsResult<()> {
        let mut todo: Vec<&Count> = Vec::new();
        {
            let memo = self.memo.lines.lock().expect("not poisoned");
            for c in counts {
                match (memo.get(&(c.old, c.new)), files.get_mut(&c.path)) {
                    (Some(&(a, d)), Some(f)) => (f.additions, f.deletions) = (a, d),
                    _ => todo.push(c),
                }
            }
        }
        let found = count_all(repo, &todo)?;
        let mut memo = self.memo.lines.lock().expect("not poisoned");
        if memo.len() + found.len() > MEMO_LINES {
            memo.clear();
        }
        for (c, (a, d)) in todo.iter().zip(found) {
            memo.insert((c.old, c.new), (a, d));
            if let Some(f) = files.get_mut(&c.path) {
                (f.additions, f.deletions) = (a, d);
            }
        }
        Ok(())
    }
}

/// The lines added and deleted of each of `todo`, in order: on one thread, or on several (each
/// with its own handle on the store) when there are many.
fn count_all(repo: &Repository, todo: &[&Count]) -> FsResult<Vec<(usize, usize)>> {
    let threads = threads_for(todo.len());
    if threads == 1 {
        return todo.iter().map(|c| count_one(repo, c)).collect();
    }
    let store = repo.path().to_path_buf();
    let chunk = todo.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = todo
            .chunks(chunk)
            .map(|part| {
                let store = &store;
                scope.spawn(move || -> FsResult<Vec<(usize, usize)>> {
                    let repo = Repository::open_bare(store).map_err(store_err)?;
                    part.iter().map(|c| count_one(&repo, c)).collect()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(todo.len());
        for w in workers {
            all.extend(w.join().expect("a line-counting thread panicked")?);
        }
        Ok(all)
    })
}

/// The lines added and deleted from one blob to the other (a side with none: empty), as git
/// counts them (none for a binary file).
fn count_one(repo: &Repository, c: &Count) -> FsResult<(usize, usize)> {
    let blob = |id: Oid| {
        if id.is_zero() {
            Ok(None)
        } else {
            repo.find_blob(id).map(Some).map_err(store_err)
        }
    };
    let (a, b) = (blob(c.old)?, blob(c.new)?);
    let p = Patch::from_buffers(content(&a), None, content(&b), None, None).map_err(store_err)?;
    let (_, added, deleted) = p.line_stats().map_err(store_err)?;
    Ok((added, deleted))
}

/// A blob's content; none is empty.
fn content<'a>(b: &'a Option<git2::Blob<'_>>) -> &'a [u8] {
    b.as_ref().map_or(&[], |b| b.content())
}

/// The exact permission bits stored in the blob `id` (none: every file has its tree's bits).
fn modes_of_blob(repo: &Repository, id: Option<Oid>) -> FsResult<Modes> {
    let Some(id) = id else {
        return Ok(Modes::default());
    };
    let blob = repo.find_blob(id).map_err(store_err)?;
    serde_json::from_slice(blob.content())
        .map_err(|e| FsError::Internal(format!("the present's permission bits: {e}")))
}

/// Lists in `out` what changed from `old` to `new`, within `scope` (everything when empty).
/// With a patch asked for, each file's lines are counted as its patch is made; else the files
/// whose lines are still to count are returned.
fn list_changes(
    repo: &Repository,
    (old, new): (&Side<'_>, &Side<'_>),
    scope: &[String],
    out: &mut Listing,
) -> FsResult<Vec<Count>> {
    let mut opts = DiffOptions::new();
    opts.include_typechange(true).disable_pathspec_match(true);
    for p in scope {
        opts.pathspec(p);
    }
    let mut diff = repo
        .diff_tree_to_tree(Some(&old.tree), Some(&new.tree), Some(&mut opts))
        .map_err(store_err)?;
    let exact = if similar_is_cheap(repo, &diff) {
        let mut find = DiffFindOptions::new();
        find.renames(true)
            .rename_threshold(SIMILAR_PERCENT)
            .rename_limit(SIMILAR_PAIRS);
        diff.find_similar(Some(&mut find)).map_err(store_err)?;
        HashMap::new()
    } else {
        exact_renames(&diff)
    };
    let moved: HashSet<usize> = exact.values().copied().collect();
    let mut counts = Vec::new();
    for (i, d) in diff.deltas().enumerate() {
        if moved.contains(&i) {
            continue;
        }
        let file = match exact.get(&i).and_then(|&j| diff.get_delta(j)) {
            Some(g) => renamed_exactly(&g, &d, (old, new), out),
            None => {
                let mut file = changed(&d, (old, new));
                let same = d.old_file().id() == d.new_file().id();
                if same && d.status() != Delta::Typechange {
                    // A rename or a re-mode alone: no line changed.
                    if out.patch.is_some() {
                        add_patch(out, &git_header(&d.old_file(), &d.new_file()));
                    }
                } else if out.patch.is_some() {
                    (file.additions, file.deletions) = patch_of(&diff, i, out)?;
                } else {
                    counts.push(Count {
                        path: file.path.clone(),
                        old: d.old_file().id(),
                        new: d.new_file().id(),
                    });
                }
                file
            }
        };
        out.files.insert(file.path.clone(), file);
    }
    remoded_in_place((old, new), scope, out);
    Ok(counts)
}

/// The `i`th file's patch added to the answer's; its lines added and deleted.
fn patch_of(diff: &Diff<'_>, i: usize, out: &mut Listing) -> FsResult<(usize, usize)> {
    let Some(mut p) = Patch::from_diff(diff, i).map_err(store_err)? else {
        return Ok((0, 0));
    };
    let (_, added, deleted) = p.line_stats().map_err(store_err)?;
    if !out.truncated {
        let text = p.to_buf().map_err(store_err)?;
        add_patch(out, &String::from_utf8_lossy(&text));
    }
    Ok((added, deleted))
}

/// Whether looking for renames by similarity is cheap enough: a few files both added and
/// deleted, of a few MiB in all.
fn similar_is_cheap(repo: &Repository, diff: &Diff<'_>) -> bool {
    let count = |s: Delta| diff.deltas().filter(|d| d.status() == s).count();
    let (added, deleted) = (count(Delta::Added), count(Delta::Deleted));
    if added == 0 || deleted == 0 || added.saturating_mul(deleted) > SIMILAR_PAIRS {
        return false;
    }
    let Ok(odb) = repo.odb() else {
        return false;
    };
    let mut bytes = 0usize;
    for d in diff.deltas() {
        let f = match d.status() {
            Delta::Added => d.new_file(),
            Delta::Deleted => d.old_file(),
            _ => continue,
        };
        bytes += odb
            .read_header(f.id())
            .map_or(SIMILAR_BYTES, |(size, _)| size);
        if bytes > SIMILAR_BYTES {
            return false;
        }
    }
    true
}

/// Exact renames: each added file paired with a deleted one of the same content and kind (the
/// one with the same file name first, else the first by path), by delta index (added to
/// deleted).
fn exact_renames(diff: &Diff<'_>) -> HashMap<usize, usize> {
    let key = |f: &git2::DiffFile<'_>| (f.id(), f.mode() == FileMode::Link);
    let mut deleted: HashMap<(Oid, bool), Vec<usize>> = HashMap::new();
    for (i, d) in diff.deltas().enumerate() {
        if d.status() == Delta::Deleted && is_blob(d.old_file().mode()) {
            deleted.entry(key(&d.old_file())).or_default().push(i);
        }
    }
    let name = |f: &git2::DiffFile<'_>| f.path().and_then(Path::file_name).map(|n| n.to_owned());
    let mut pairs = HashMap::new();
    for (i, d) in diff.deltas().enumerate() {
        if d.status() != Delta::Added || !is_blob(d.new_file().mode()) {
            continue;
        }
        let Some(from) = deleted.get_mut(&key(&d.new_file())) else {
            continue;
        };
        let same_name = from.iter().position(|&j| {
            diff.get_delta(j)
                .is_some_and(|g| name(&g.old_file()) == name(&d.new_file()))
        });
        if let Some(k) = same_name.or((!from.is_empty()).then_some(0)) {
            pairs.insert(i, from.remove(k));
        }
    }
    pairs
}

/// A regular file or a symlink.
fn is_blob(mode: FileMode) -> bool {
    matches!(
        mode,
        FileMode::Blob | FileMode::BlobExecutable | FileMode::Link
    )
}

fn path_of(f: &git2::DiffFile<'_>) -> String {
    f.path()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One changed path of the diff, its lines not counted yet.
fn changed(d: &DiffDelta<'_>, sides: (&Side<'_>, &Side<'_>)) -> DiffFile {
    let (o, n) = (d.old_file(), d.new_file());
    let mut file = DiffFile {
        path: path_of(if d.status() == Delta::Deleted { &o } else { &n }),
        status: match d.status() {
            Delta::Renamed => "renamed",
            Delta::Modified if o.id() == n.id() => "re-moded",
            s => status(s),
        }
        .into(),
        additions: 0,
        deletions: 0,
        old_path: (d.status() == Delta::Renamed).then(|| path_of(&o)),
        old_mode: None,
        new_mode: None,
    };
    note_modes(&mut file, &o, &n, sides);
    file
}

/// The deleted file `g` and the added file `d` of the same content, as one rename.
fn renamed_exactly(
    g: &DiffDelta<'_>,
    d: &DiffDelta<'_>,
    sides: (&Side<'_>, &Side<'_>),
    out: &mut Listing,
) -> DiffFile {
    let (o, n) = (g.old_file(), d.new_file());
    let mut file = DiffFile {
        path: path_of(&n),
        status: "renamed".into(),
        additions: 0,
        deletions: 0,
        old_path: Some(path_of(&o)),
        old_mode: None,
        new_mode: None,
    };
    note_modes(&mut file, &o, &n, sides);
    if out.patch.is_some() {
        add_patch(out, &git_header(&o, &n));
    }
    file
}

/// Sets `old_mode` and `new_mode` of `file` when the permission bits of the regular file it was
/// (`o`) and is (`n`) differ.
fn note_modes(
    file: &mut DiffFile,
    o: &git2::DiffFile<'_>,
    n: &git2::DiffFile<'_>,
    (old, new): (&Side<'_>, &Side<'_>),
) {
    let regular = |m: FileMode| matches!(m, FileMode::Blob | FileMode::BlobExecutable);
    if !regular(o.mode()) || !regular(n.mode()) {
        return;
    }
    let was = old.modes.perm(&path_of(o), o.mode());
    let is = new.modes.perm(&path_of(n), n.mode());
    if was != is {
        file.old_mode = Some(format!("{was:04o}"));
        file.new_mode = Some(format!("{is:04o}"));
    }
}

/// Git's header of a change with no line changed: a mode change, a rename, or both.
fn git_header(o: &git2::DiffFile<'_>, n: &git2::DiffFile<'_>) -> String {
    let (a, b) = (path_of(o), path_of(n));
    let mut h = format!("diff --git a/{a} b/{b}\n");
    if o.mode() != n.mode() {
        let raw = |m: FileMode| i32::from(m);
        h.push_str(&format!(
            "old mode {:o}\nnew mode {:o}\n",
            raw(o.mode()),
            raw(n.mode())
        ));
    }
    if a != b {
        h.push_str(&format!(
            "similarity index 100%\nrename from {a}\nrename to {b}\n"
        ));
    }
    h
}

/// Adds one file's patch to the answer's (when a patch was asked for), unless that would pass
/// 4 MiB: then the patch is cut there, no later file's added either.
fn add_patch(out: &mut Listing, text: &str) {
    let Some(patch) = out.patch.as_mut() else {
        return;
    };
    if out.truncated || patch.len() + text.len() > MAX_PATCH_BYTES {
        out.truncated = true;
        return;
    }
    patch.push_str(text);
}

/// The files whose content and git mode stayed but whose exact permission bits changed
/// (`chmod 600 .env`): in neither tree's diff, only in the bits kept beside them.
fn remoded_in_place((old, new): (&Side<'_>, &Side<'_>), scope: &[String], out: &mut Listing) {
    let listed: BTreeSet<&String> = old.modes.0.keys().chain(new.modes.0.keys()).collect();
    for rel in listed {
        if out.files.contains_key(rel) || !in_scope(scope, rel) {
            continue;
        }
        let at = |t: &Tree<'_>| {
            t.get_path(Path::new(rel))
                .ok()
                .map(|e| (e.id(), file_mode(e.filemode())))
        };
        let (Some((a, mode)), Some(b)) = (at(&old.tree), at(&new.tree)) else {
            continue;
        };
        if (a, mode) != b || mode == FileMode::Link {
            continue;
        }
        let (was, is) = (old.modes.perm(rel, mode), new.modes.perm(rel, mode));
        if was == is {
            continue;
        }
        out.files.insert(
            rel.clone(),
            DiffFile {
                path: rel.clone(),
                status: "re-moded".into(),
                additions: 0,
                deletions: 0,
                old_path: None,
                old_mode: Some(format!("{was:04o}")),
                new_mode: Some(format!("{is:04o}")),
            },
        );
    }
}
