//! The mirror: keeps a zone directory and a directory inside a sandbox in step, on demand.
//!
//! Per (zone, sandbox, remote root) a [`Manifest`] records what the remote holds as far as
//! wardfs knows: per path the BLAKE3 hash, size, mode and link target last transferred, the local
//! stat that hash was taken from (so an unchanged file is recognised without reading it) and the
//! remote fingerprint (size, remote mtime) right after the transfer. Local and remote mtimes are
//! never compared with each other: each side is only compared with its own earlier reading.
//!
//! [`push`] sends only what changed locally (in tar batches through [`SandboxFs::put_batch`]),
//! sends renames as renames (same hash, old path gone), deletes explicitly, and writes the
//! manifest after each batch the remote accepted: the manifest is never ahead of the remote, so a
//! push cut short by a dead sandbox is simply completed by the next one. (Files of a batch are
//! marked in flight — no hash — while it travels, so a torn file is overwritten, not taken for
//! a change made in the sandbox.) [`pull`] finds remote
//! changes by fingerprint, confirms them by hash, downloads only those and writes them atomically.
//! A path changed on both sides is a conflict: reported, never overwritten; on pull the remote
//! copy is kept beside the local one as `name.sandbox-<sandbox>`.

mod local;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Seek as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;

use crate::core::foreign::{self, GitDir, LinkResolver};
use crate::core::provider::{
    join_remote, BatchItem, HashAlgo, MetaUpdate, RemoteMeta, SandboxFs, SandboxFsError, WalkEntry,
};
use crate::core::retention::TMP_PREFIX;
use crate::core::{EntryKind, FsError, Replacement, Seen, VPath, ZoneId, Zones};
use crate::state::{Db, MirrorEntryRow, StateError};
use crate::state::{Origin, Via};
use local::{LocalItem, LocalKind, LocalTree};

const KIND_FILE: &str = "file";
const KIND_DIR: &str = "dir";
const KIND_LINK: &str = "symlink";

/// A failed push or pull. What was confirmed before the failure is in the manifest.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    Remote(#[from] SandboxFsError),
    #[error("{path}: {op} in the zone directory failed: {source}")]
    Local {
        path: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] StateError),
}

fn fs_err(path: &str, op: &'static str) -> impl FnOnce(FsError) -> MirrorError {
    let path = path.to_string();
    move |e| MirrorError::Local {
        path,
        op,
        source: std::io::Error::other(e.to_string()),
    }
}

fn local_err(path: &str, op: &'static str) -> impl FnOnce(std::io::Error) -> MirrorError {
    let path = path.to_string();
    move |source| MirrorError::Local { path, op, source }
}

/// What wardfs knows the remote holds, per path relative to the mirror's roots.
pub struct Manifest {
    entries: BTreeMap<String, MirrorEntryRow>,
    store: Option<(Arc<Db>, i64)>,
}

impl Manifest {
    /// Returns an empty manifest that lives only in memory.
    pub fn in_memory() -> Manifest {
        Manifest {
            entries: BTreeMap::new(),
            store: None,
        }
    }

    /// Loads the manifest of (zone, sandbox, remote root) from the state database, creating
    /// the mirror at `now_ms` when it is new; changes are written back as they are confirmed.
    pub fn load(
        db: Arc<Db>,
        zone: &str,
        sandbox: &str,
        remote_root: &str,
        now_ms: i64,
    ) -> Result<Manifest, MirrorError> {
        let id = db.mirror_id(zone, sandbox, remote_root, now_ms)?;
        let entries = db
            .mirror_entries(id)?
            .into_iter()
            .map(|e| (e.path.clone(), e))
            .collect();
        Ok(Manifest {
            entries,
            store: Some((db, id)),
        })
    }

    /// Returns the entries, by path.
    pub fn entries(&self) -> &BTreeMap<String, MirrorEntryRow> {
        &self.entries
    }

    /// Returns the entry of `path`.
    pub fn get(&self, path: &str) -> Option<&MirrorEntryRow> {
        self.entries.get(path)
    }

    /// Forgets (in memory only) the local stats the hashes were taken from, so the next push
    /// hashes every local file instead of trusting an unchanged size and mtime.
    pub fn forget_local_stats(&mut self) {
        for e in self.entries.values_mut() {
            e.local_size = None;
            e.local_mtime_ns = None;
        }
    }

    /// Records confirmed changes: the database first, then memory.
    fn commit(
        &mut self,
        upserts: Vec<MirrorEntryRow>,
        removed: Vec<String>,
    ) -> Result<(), MirrorError> {
        if upserts.is_empty() && removed.is_empty() {
            return Ok(());
        }
        if let Some((db, id)) = &self.store {
            db.update_mirror_entries(*id, &upserts, &removed)?;
        }
        for path in removed {
            self.entries.remove(&path);
        }
        for e in upserts {
            self.entries.insert(e.path.clone(), e);
        }
        Ok(())
    }

    fn touch(&self, pushed: bool, now_ms: i64) -> Result<(), MirrorError> {
        if let Some((db, id)) = &self.store {
            db.touch_mirror(*id, pushed, now_ms)?;
        }
        Ok(())
    }
}

/// How far a push or a pull has got: reported before the transfer starts and after every batch
/// (push) or file (pull). `files_total`/`bytes_total` are 0 when not known ahead (pull).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct MirrorProgress {
    /// `attach`, `scan`, `send` (push) or `receive`, `downloaded` and `delete` (pull).
    pub phase: &'static str,
    /// Files (and symlinks) sent or received so far.
    pub files_done: u64,
    /// Files to send (push; 0 for a pull, not known ahead).
    pub files_total: u64,
    /// Bytes of file content sent or received so far.
    pub bytes_done: u64,
    /// Bytes to send (push; 0 for a pull).
    pub bytes_total: u64,
}

impl MirrorProgress {
    /// A phase with no counts yet.
    pub fn phase(phase: &'static str) -> MirrorProgress {
        MirrorProgress {
            phase,
            ..Default::default()
        }
    }
}

/// Where progress goes: called on the task running the push or pull.
#[derive(Clone)]
pub struct ProgressFn(pub std::sync::Arc<dyn Fn(&MirrorProgress) + Send + Sync>);

impl std::fmt::Debug for ProgressFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressFn")
    }
}

/// How to run a push or a pull.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// The sandbox's name, for conflict copies (`name.sandbox-<sandbox>`).
    pub sandbox: String,
    /// The caller's clock, recorded as the time of the push or pull.
    pub now_ms: i64,
    /// Told how the transfer advances (none: not reported).
    pub progress: Option<ProgressFn>,
    /// Pull: larger remote files are skipped and reported (`limits.sandbox_file_bytes`).
    pub max_file_bytes: Option<u64>,
    /// The zone the local root serves, when run by the daemon: a pull then writes through the
    /// core ([`Zones::replace_entry`], compare-and-swap under the path lock), which
    /// journals each change as it happens and tells the mount.
    pub zone: Option<ZoneRef>,
    /// Who the changes a pull makes are journaled as coming from ([`ORIGIN`]: `via mirror`).
    pub origin: Origin,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            sandbox: String::new(),
            now_ms: 0,
            progress: None,
            max_file_bytes: None,
            zone: None,
            origin: ORIGIN,
        }
    }
}

/// A zone of the core, for [`MirrorOptions::zone`].
#[derive(Clone)]
pub struct ZoneRef {
    pub zones: Arc<Zones>,
    pub id: ZoneId,
}

impl std::fmt::Debug for ZoneRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZoneRef({})", self.id.name())
    }
}

impl ZoneRef {
    /// Returns the zone's path string of `rel` (`/workspace/rel`).
    fn path(&self, rel: &str) -> Result<VPath, MirrorError> {
        VPath::new(self.id, rel).map_err(|e| MirrorError::Local {
            path: rel.to_string(),
            op: "resolve",
            source: std::io::Error::other(e.to_string()),
        })
    }
}

/// Who the changes of a mirror pull are from, unless its options say otherwise.
pub const ORIGIN: Origin = Origin {
    via: Via::Mirror,
    pid: None,
    uid: None,
};

impl MirrorOptions {
    fn report(&self, p: MirrorProgress) {
        if let Some(f) = &self.progress {
            (f.0)(&p);
        }
    }
}

/// A path changed on both sides, left as it is on both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[schemars(rename = "MirrorConflict")]
pub struct Conflict {
    /// The path, relative to the zone and the remote directory.
    pub path: String,
    /// What happened on each side.
    pub reason: String,
    /// Where the remote copy was saved locally (pull only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_copy: Option<String>,
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MirrorPushResult")]
pub struct PushSummary {
    /// Files and symlinks sent.
    pub files_sent: u64,
    /// Bytes of file content sent.
    pub bytes_sent: u64,
    /// Remote entries deleted (gone locally since the last run).
    pub deleted: u64,
    /// Remote entries renamed instead of sent again.
    pub renamed: u64,
    /// Paths changed on both sides since the last run, left as they are.
    pub conflicts: Vec<Conflict>,
    /// Local entries not sent, with why: a name that is not UTF-8 (escaped as git quotes it,
    /// `"d/caf\351.txt"`), a symlink whose target is not UTF-8. The first 1,000 are named.
    pub skipped: Vec<Skipped>,
    /// Number of local entries not sent (all of them; `skipped` names the first 1,000).
    pub skipped_total: u64,
    /// How long the push took, in milliseconds.
    pub duration_ms: u64,
}

/// An entry a push or pull left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MirrorSkipped")]
pub struct Skipped {
    /// The path, relative to the zone and the remote directory.
    pub path: String,
    /// Why it was left alone.
    pub reason: String,
}

impl PullSummary {
    /// Notes a deletion; through the core's journal at once when the pull runs for a zone (a
    /// pull that fails later still leaves what it did in the journal and the mount's caches).
    fn note_delete(&mut self, opts: &MirrorOptions, path: &str) {
        self.changed.push((path.to_string(), "delete", None));
        if let Some(z) = &opts.zone {
            if let Ok(vp) = VPath::new(z.id, path) {
                z.zones
                    .record_change(&vp, "delete", None, None, opts.origin);
            }
        }
    }

    fn skip(&mut self, path: &str, reason: String) {
        tracing::warn!(path, reason = %reason, "mirror pull: skipped");
        self.skipped.push(Skipped {
            path: path.to_string(),
            reason,
        });
    }
}

/// What a pull did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MirrorPullResult")]
pub struct PullSummary {
    /// Files and symlinks written locally.
    pub files_received: u64,
    /// Bytes of file content written locally.
    pub bytes_received: u64,
    /// Local entries deleted (gone in the sandbox since the last run).
    pub deleted: u64,
    /// Paths changed on both sides since the last run, left as they are; `remote_copy` names
    /// where the sandbox's version was saved.
    pub conflicts: Vec<Conflict>,
    /// Remote entries left alone (a bad name, an escaping link, a file over the size limit, a
    /// local error at that path), with why.
    pub skipped: Vec<Skipped>,
    /// How long the pull took, in milliseconds.
    pub duration_ms: u64,
    /// What changed locally, in order (path, `write`/`symlink`/`delete`, bytes), for the journal.
    #[serde(skip)]
    pub changed: Vec<(String, &'static str, Option<u64>)>,
}

/// How one manifest path stands on one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Same,
    Changed,
    Gone,
}

fn is_provider_temp(path: &str) -> bool {
    let name = local::split(path).1;
    name.starts_with(TMP_PREFIX) || (name.starts_with('.') && name.contains(".wardfs-"))
}

fn fingerprint_same(m: &MirrorEntryRow, r: &RemoteMeta) -> bool {
    m.remote_size == Some(r.size) && m.remote_mtime_ns.is_some() && m.remote_mtime_ns == r.mtime_ns
}

/// Returns the BLAKE3 of a remote file, hashed in the sandbox when it can, else streamed
/// through the hasher (never whole in memory).
async fn remote_blake3(remote: &dyn SandboxFs, path: &str) -> Result<String, SandboxFsError> {
    if remote.caps().remote_hashes.contains(&HashAlgo::Blake3) {
        return remote.hash(path, HashAlgo::Blake3).await;
    }
    struct HashSink(blake3::Hasher);
    impl std::io::Write for HashSink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut sink = HashSink(blake3::Hasher::new());
    remote.read_into(path, u64::MAX, &mut sink).await?;
    Ok(sink.0.finalize().to_hex().to_string())
}

/// Classifies the remote side of a manifest entry; `refresh` gets entries whose fingerprint
/// moved while the content stayed (a touch in the sandbox).
async fn remote_side(
    remote: &dyn SandboxFs,
    remote_root: &str,
    m: &MirrorEntryRow,
    r: Option<&RemoteMeta>,
    refresh: &mut Vec<MirrorEntryRow>,
) -> Result<Side, MirrorError> {
    let Some(r) = r else { return Ok(Side::Gone) };
    if m.kind == KIND_FILE && m.hash.is_none() {
        // In flight when a push was cut short: whatever is there is a torn copy of ours.
        return Ok(Side::Same);
    }
    Ok(match m.kind.as_str() {
        KIND_DIR if r.kind == EntryKind::Dir => Side::Same,
        KIND_LINK if r.kind == EntryKind::Symlink && r.link_target == m.link_target => Side::Same,
        KIND_FILE if r.kind == EntryKind::File => {
            if fingerprint_same(m, r) {
                Side::Same
            } else {
                let hash = remote_blake3(remote, &join_remote(remote_root, &m.path)).await?;
                if Some(&hash) == m.hash.as_ref() {
                    let mut e = m.clone();
                    e.remote_size = Some(r.size);
                    e.remote_mtime_ns = r.mtime_ns;
                    refresh.push(e);
                    Side::Same
                } else {
                    Side::Changed
                }
            }
        }
        _ => Side::Changed,
    })
}

/// A local file hashed for a push.
/// (The content itself is read only when its batch is built, so a push holds one batch in
/// memory, not every new file.)
struct Read {
    hash: String,
    item: LocalItem,
}

/// Classifies the local side of a manifest entry, reading the file only when its stat moved.
fn local_side(
    tree: &LocalTree,
    m: &MirrorEntryRow,
    l: Option<&LocalItem>,
    refresh: &mut Vec<MirrorEntryRow>,
) -> Result<(Side, Option<Read>), MirrorError> {
    let Some(l) = l else {
        return Ok((Side::Gone, None));
    };
    Ok(match (&l.kind, m.kind.as_str()) {
        (LocalKind::Dir, KIND_DIR) => (Side::Same, None),
        (LocalKind::Symlink(t), KIND_LINK) if Some(t) == m.link_target.as_ref() => {
            (Side::Same, None)
        }
        (LocalKind::File, KIND_FILE) => {
            if m.local_size == Some(l.size)
                && m.local_mtime_ns == Some(l.mtime_ns)
                && m.mode == l.mode
            {
                return Ok((Side::Same, None));
            }
            // Hashed as a stream; a push reads a changed file's content when it sends it.
            let (hash, item) = tree.hash(&m.path).map_err(local_err(&m.path, "read"))?;
            if Some(&hash) == m.hash.as_ref() && item.mode == m.mode {
                let mut e = m.clone();
                e.local_size = Some(item.size);
                e.local_mtime_ns = Some(item.mtime_ns);
                refresh.push(e);
                (Side::Same, None)
            } else {
                (Side::Changed, None)
            }
        }
        _ => (Side::Changed, None),
    })
}

/// Returns the manifest row for a file with this content that the remote now holds.
fn file_row(path: &str, read: &Read, remote_mtime_ns: Option<i64>) -> MirrorEntryRow {
    MirrorEntryRow {
        path: path.to_string(),
        kind: KIND_FILE.into(),
        hash: Some(read.hash.clone()),
        size: read.item.size,
        mode: read.item.mode,
        link_target: None,
        local_size: Some(read.item.size),
        local_mtime_ns: Some(read.item.mtime_ns),
        remote_size: Some(read.item.size),
        remote_mtime_ns,
    }
}

fn other_row(path: &str, item: &LocalItem) -> MirrorEntryRow {
    let (kind, target) = match &item.kind {
        LocalKind::Dir => (KIND_DIR, None),
        LocalKind::Symlink(t) => (KIND_LINK, Some(t.clone())),
        LocalKind::File => (KIND_FILE, None),
    };
    MirrorEntryRow {
        path: path.to_string(),
        kind: kind.into(),
        hash: None,
        size: item.size,
        mode: item.mode,
        link_target: target,
        local_size: Some(item.size),
        local_mtime_ns: Some(item.mtime_ns),
        remote_size: None,
        remote_mtime_ns: None,
    }
}

/// Walks the remote root; a missing root is an empty tree.
async fn remote_tree(
    remote: &dyn SandboxFs,
    remote_root: &str,
) -> Result<SandboxTree, MirrorError> {
    match remote.walk(remote_root).await {
        Ok(entries) => Ok(SandboxTree::new(entries)),
        Err(SandboxFsError::NotFound { .. }) => Ok(SandboxTree::new(Vec::new())),
        Err(e) => Err(e.into()),
    }
}

/// A remote walk's entries sorted by path, without the provider's own temporary files, found
/// by binary search. It is the walk's own vector, sorted in place: a map built beside it cost
/// two to three times the walk again (a million entries took a push to 428 MB).
struct SandboxTree(Vec<WalkEntry>);

impl SandboxTree {
    fn new(mut entries: Vec<WalkEntry>) -> SandboxTree {
        entries.retain(|e| !is_provider_temp(&e.path));
        entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        entries.dedup_by(|a, b| a.path == b.path);
        SandboxTree(entries)
    }

    fn get(&self, path: &str) -> Option<&RemoteMeta> {
        let at = self
            .0
            .binary_search_by(|e| e.path.as_str().cmp(path))
            .ok()?;
        Some(&self.0[at].meta)
    }

    fn contains_key(&self, path: &str) -> bool {
        self.get(path).is_some()
    }
}

impl<'a> IntoIterator for &'a SandboxTree {
    type Item = (&'a String, &'a RemoteMeta);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, WalkEntry>, fn(&'a WalkEntry) -> Self::Item>;

    /// The entries in path order.
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|e| (&e.path, &e.meta))
    }
}

/// One item waiting to be sent, with the manifest row to record once the remote has it.
struct Pending {
    item: BatchItem,
    row: MirrorEntryRow,
    bytes: u64,
}

/// What every phase of one push shares: both trees as the push found them.
struct PushCtx<'a> {
    tree: &'a LocalTree,
    remote: &'a dyn SandboxFs,
    remote_root: &'a str,
    opts: &'a MirrorOptions,
    /// The local walk, by path.
    local: BTreeMap<String, LocalItem>,
    /// The remote walk.
    remote_map: SandboxTree,
}

/// Pushes what changed in the zone directory `local_root` to `remote_root` in the sandbox.
///
/// Compares the local tree with `manifest` (stat first, hash to confirm), walks the remote once
/// to see what the sandbox changed since the last push, then deletes, renames and sends (tar
/// batches no larger than the provider's body limit) what changed locally only. A path changed
/// on both sides is reported in [`PushSummary::conflicts`] and left alone.
pub async fn push(
    local_root: &Path,
    remote: &dyn SandboxFs,
    remote_root: &str,
    manifest: &mut Manifest,
    opts: &MirrorOptions,
) -> Result<PushSummary, MirrorError> {
    let started = Instant::now();
    let mut summary = PushSummary::default();
    let root_shown = local_root.display().to_string();
    let tree = LocalTree::open(local_root).map_err(local_err(&root_shown, "open"))?;
    let walked = tree.walk().map_err(local_err(&root_shown, "walk"))?;
    let local = walked.items;
    summary.skipped_total = walked.left_out_total as u64;
    summary.skipped = walked
        .left_out
        .into_iter()
        .map(|(path, reason)| Skipped { path, reason })
        .collect();
    let remote_map = remote_tree(remote, remote_root).await?;
    let ctx = PushCtx {
        tree: &tree,
        remote,
        remote_root,
        opts,
        local,
        remote_map,
    };
    let compared = ctx.compare(manifest, &mut summary).await?;
    let to_send = ctx
        .plan_sends(manifest, compared.changed, &mut summary)
        .await?;
    let mut gone_locally = compared.gone_locally;
    let renames = plan_renames(
        &ctx.local,
        &ctx.remote_map,
        manifest,
        &to_send,
        &mut gone_locally,
    );
    ctx.delete_gone(manifest, gone_locally, &mut summary)
        .await?;
    let renamed_to = ctx
        .apply_renames(manifest, renames, &to_send, &mut summary)
        .await?;
    let pending = pending_sends(&ctx.local, to_send, &renamed_to);
    ctx.send_pending(manifest, pending, &mut summary).await?;
    manifest.touch(true, opts.now_ms)?;
    summary.duration_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

/// What changed on each side of the manifest's paths (the first phase of a push).
struct Compared {
    /// Paths gone locally (or whose kind changed) and not changed in the sandbox, with how
    /// they stand there.
    gone_locally: Vec<(MirrorEntryRow, Side)>,
    /// Paths changed locally only, with the file read while comparing (if it was).
    changed: BTreeMap<String, Option<Read>>,
}

/// A path to send, with its file's hash (files only).
type ToSend = (String, Option<Read>);

impl PushCtx<'_> {
    /// Compares each manifest path with both sides: a path changed on both is a conflict, one
    /// changed locally only is to send, one gone locally is to delete. Rows whose content
    /// turned out unchanged get their fingerprints refreshed.
    async fn compare(
        &self,
        manifest: &mut Manifest,
        summary: &mut PushSummary,
    ) -> Result<Compared, MirrorError> {
        let mut refresh = Vec::new();
        let mut gone_locally: Vec<(MirrorEntryRow, Side)> = Vec::new();
        let mut changed: BTreeMap<String, Option<Read>> = BTreeMap::new();
        let entries: Vec<MirrorEntryRow> = manifest.entries.values().cloned().collect();
        for m in &entries {
            let (lside, read) = local_side(self.tree, m, self.local.get(&m.path), &mut refresh)?;
            if lside == Side::Same {
                continue;
            }
            let rside = remote_side(
                self.remote,
                self.remote_root,
                m,
                self.remote_map.get(&m.path),
                &mut refresh,
            )
            .await?;
            if rside == Side::Changed {
                summary.conflicts.push(Conflict {
                    path: m.path.clone(),
                    reason: if lside == Side::Gone {
                        "deleted locally and changed in the sandbox".into()
                    } else {
                        "changed locally and in the sandbox".into()
                    },
                    remote_copy: None,
                });
                continue;
            }
            let type_changed = self
                .local
                .get(&m.path)
                .is_some_and(|l| kind_name(&l.kind) != m.kind);
            if lside == Side::Gone || type_changed {
                gone_locally.push((m.clone(), rside));
            }
            if lside == Side::Changed {
                changed.insert(m.path.clone(), read);
            }
        }
        manifest.commit(std::mem::take(&mut refresh), Vec::new())?;
        Ok(Compared {
            gone_locally,
            changed,
        })
    }

    /// Lists what to send, in local path order: new local paths (a file hashed; one the
    /// sandbox created too with other content is a conflict) and the `changed` ones.
    async fn plan_sends(
        &self,
        manifest: &Manifest,
        mut changed: BTreeMap<String, Option<Read>>,
        summary: &mut PushSummary,
    ) -> Result<Vec<ToSend>, MirrorError> {
        let conflicted: std::collections::HashSet<String> =
            summary.conflicts.iter().map(|c| c.path.clone()).collect();
        let mut to_send: Vec<ToSend> = Vec::new();
        for (path, l) in &self.local {
            if conflicted.contains(path) {
                continue;
            }
            if manifest.get(path).is_none() {
                let mut read = None;
                if l.kind == LocalKind::File {
                    let (hash, item) = self.tree.hash(path).map_err(local_err(path, "read"))?;
                    read = Some(Read { hash, item });
                }
                if self.created_both_sides(path, read.as_ref()).await? {
                    summary.conflicts.push(Conflict {
                        path: path.clone(),
                        reason: "created locally and in the sandbox with different content".into(),
                        remote_copy: None,
                    });
                    continue;
                }
                to_send.push((path.clone(), read));
            } else if let Some(read) = changed.remove(path) {
                let read = match (read, &l.kind) {
                    (None, LocalKind::File) => {
                        let (hash, item) = self.tree.hash(path).map_err(local_err(path, "read"))?;
                        Some(Read { hash, item })
                    }
                    (r, _) => r,
                };
                to_send.push((path.clone(), read));
            }
        }
        Ok(to_send)
    }

    /// Returns true when the sandbox created something at the new local file `path` too, with
    /// other content (the same content is adopted: false).
    async fn created_both_sides(
        &self,
        path: &str,
        read: Option<&Read>,
    ) -> Result<bool, MirrorError> {
        if let (Some(r), Some(rd)) = (self.remote_map.get(path), read) {
            if r.kind != EntryKind::Dir {
                let same = r.kind == EntryKind::File
                    && r.size == rd.item.size
                    && remote_blake3(self.remote, &join_remote(self.remote_root, path)).await?
                        == rd.hash;
                return Ok(!same);
            }
        }
        Ok(false)
    }

    /// Deletes in the sandbox what is gone locally (and unchanged there): files and links
    /// first, then directories, deepest first. A directory the sandbox added files to is a
    /// conflict; each path leaves the manifest as it is done.
    async fn delete_gone(
        &self,
        manifest: &mut Manifest,
        mut gone_locally: Vec<(MirrorEntryRow, Side)>,
        summary: &mut PushSummary,
    ) -> Result<(), MirrorError> {
        gone_locally.sort_by_key(|(m, _)| deletion_order(m));
        for (m, rside) in &gone_locally {
            if *rside == Side::Same {
                let full = join_remote(self.remote_root, &m.path);
                match self.remote.remove(&full, false).await {
                    Ok(()) | Err(SandboxFsError::NotFound { .. }) => {}
                    Err(SandboxFsError::NotEmpty { .. }) => {
                        summary.conflicts.push(Conflict {
                            path: m.path.clone(),
                            reason: "deleted locally; the sandbox added files to the directory"
                                .into(),
                            remote_copy: None,
                        });
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                summary.deleted += 1;
            }
            manifest.commit(Vec::new(), vec![m.path.clone()])?;
        }
        Ok(())
    }

    /// Renames in the sandbox each file of `renames` to its new path (an index in `to_send`),
    /// each confirmed before it is recorded. Returns the indexes renamed (not to send).
    async fn apply_renames(
        &self,
        manifest: &mut Manifest,
        renames: Vec<(MirrorEntryRow, usize)>,
        to_send: &[ToSend],
        summary: &mut PushSummary,
    ) -> Result<HashSet<usize>, MirrorError> {
        let mut renamed_to = HashSet::new();
        for (m, i) in renames {
            let (new_path, read) = &to_send[i];
            let read = read.as_ref().expect("renames are files");
            self.remote
                .rename(
                    &join_remote(self.remote_root, &m.path),
                    &join_remote(self.remote_root, new_path),
                )
                .await?;
            let mut row = file_row(new_path, read, m.remote_mtime_ns);
            row.remote_size = m.remote_size;
            manifest.commit(vec![row], vec![m.path.clone()])?;
            summary.renamed += 1;
            renamed_to.insert(i);
        }
        Ok(renamed_to)
    }

    /// Sends `pending` in batches no larger than the provider takes in one request (a file
    /// too large for any batch streamed on its own), reporting progress after each.
    async fn send_pending(
        &self,
        manifest: &mut Manifest,
        pending: Vec<Pending>,
        summary: &mut PushSummary,
    ) -> Result<(), MirrorError> {
        let (tree, remote, remote_root) = (self.tree, self.remote, self.remote_root);
        let mut progress = MirrorProgress {
            phase: "send",
            files_done: summary.files_sent,
            files_total: summary.files_sent
                + pending
                    .iter()
                    .filter(|p| !matches!(p.item, BatchItem::Dir { .. }))
                    .count() as u64,
            bytes_done: summary.bytes_sent,
            bytes_total: summary.bytes_sent + pending.iter().map(|p| p.bytes).sum::<u64>(),
        };
        self.opts.report(progress.clone());
        let budget = remote.limits().max_request_bytes;
        let mut batch: Vec<Pending> = Vec::new();
        let mut batch_bytes = 0u64;
        let mut iter = pending.into_iter().peekable();
        while let Some(p) = iter.next() {
            let cost = 512 + p.bytes.div_ceil(512) * 512;
            let large = matches!(p.item, BatchItem::File { .. }) && cost + 1024 > budget;
            if !batch.is_empty() && (large || batch_bytes + cost + 1024 > budget) {
                // (What is batched goes first: directories before what they hold.)
                let sent = std::mem::take(&mut batch);
                send_batch(tree, remote, remote_root, manifest, sent, summary).await?;
                batch_bytes = 0;
                self.report_sent(&mut progress, summary);
            }
            if large {
                // Too large for any batch: streamed on its own, never whole in memory.
                send_large(tree, remote, remote_root, manifest, p, summary).await?;
                self.report_sent(&mut progress, summary);
                continue;
            }
            batch_bytes += cost;
            batch.push(p);
            if iter.peek().is_none() {
                let sent = std::mem::take(&mut batch);
                send_batch(tree, remote, remote_root, manifest, sent, summary).await?;
                self.report_sent(&mut progress, summary);
            }
        }
        Ok(())
    }

    /// Reports what the push has sent so far.
    fn report_sent(&self, progress: &mut MirrorProgress, summary: &PushSummary) {
        progress.files_done = summary.files_sent;
        progress.bytes_done = summary.bytes_sent;
        self.opts.report(progress.clone());
    }
}

/// Where a path gone on the other side stands in the order of deletions: files and links
/// first, then directories, deepest first.
fn deletion_order(m: &MirrorEntryRow) -> (bool, std::cmp::Reverse<usize>) {
    (
        m.kind == KIND_DIR,
        std::cmp::Reverse(m.path.matches('/').count()),
    )
}

/// Finds the renames among a push's changes: a file gone locally (and unchanged in the
/// sandbox) whose content and mode reappeared at a new path, one the manifest and the sandbox
/// do not have, in `to_send`. Takes those out of `gone_locally` and returns each with the
/// index of its new path in `to_send`.
fn plan_renames(
    local: &BTreeMap<String, LocalItem>,
    remote_map: &SandboxTree,
    manifest: &Manifest,
    to_send: &[ToSend],
    gone_locally: &mut Vec<(MirrorEntryRow, Side)>,
) -> Vec<(MirrorEntryRow, usize)> {
    let mut renames: Vec<(MirrorEntryRow, usize)> = Vec::new();
    let mut by_hash: HashMap<(String, u32), usize> = HashMap::new();
    for (i, (path, read)) in to_send.iter().enumerate() {
        if let Some(rd) = read {
            if manifest.get(path).is_none() && !remote_map.contains_key(path) {
                by_hash.entry((rd.hash.clone(), rd.item.mode)).or_insert(i);
            }
        }
    }
    gone_locally.retain(|(m, rside)| {
        if *rside != Side::Same || m.kind != KIND_FILE || local.contains_key(&m.path) {
            return true;
        }
        let Some(hash) = m.hash.clone() else {
            return true;
        };
        match by_hash.remove(&(hash, m.mode)) {
            Some(i) => {
                renames.push((m.clone(), i));
                false
            }
            None => true,
        }
    });
    renames
}

/// Turns what is left to send (not in `renamed_to`) into batch items with the rows to record,
/// directories first so parents exist before what they hold. A file's content is read only
/// when its batch is built.
fn pending_sends(
    local: &BTreeMap<String, LocalItem>,
    to_send: Vec<ToSend>,
    renamed_to: &HashSet<usize>,
) -> Vec<Pending> {
    let mut pending: Vec<Pending> = Vec::new();
    for (i, (path, read)) in to_send.into_iter().enumerate() {
        if renamed_to.contains(&i) {
            continue;
        }
        let l = &local[&path];
        let p = match (&l.kind, read) {
            (LocalKind::Dir, _) => Pending {
                item: BatchItem::Dir {
                    path: path.clone(),
                    mode: l.mode,
                },
                row: other_row(&path, l),
                bytes: 0,
            },
            (LocalKind::Symlink(t), _) => Pending {
                item: BatchItem::Symlink {
                    path: path.clone(),
                    target: t.clone(),
                },
                row: other_row(&path, l),
                bytes: 0,
            },
            (LocalKind::File, Some(read)) => {
                // The tar carries whole seconds: that is the mtime the remote will have.
                let secs = read.item.mtime_ns.div_euclid(1_000_000_000).max(0);
                let row = file_row(&path, &read, Some(secs * 1_000_000_000));
                Pending {
                    bytes: read.item.size,
                    // Filled from the file when its batch is built.
                    item: BatchItem::File {
                        path: path.clone(),
                        data: Bytes::new(),
                        mode: read.item.mode,
                        mtime: Some(secs as u64),
                    },
                    row,
                }
            }
            (LocalKind::File, None) => unreachable!("files are read before sending"),
        };
        pending.push(p);
    }
    pending.sort_by_key(|p| !matches!(p.item, BatchItem::Dir { .. }));
    pending
}

fn kind_name(k: &LocalKind) -> &'static str {
    match k {
        LocalKind::File => KIND_FILE,
        LocalKind::Dir => KIND_DIR,
        LocalKind::Symlink(_) => KIND_LINK,
    }
}

/// Returns a file's row as in flight: no hash, no fingerprint, nothing claimed about the remote
/// content, so a torn file left by a cut-short push is overwritten by the next push rather
/// than taken for a change made in the sandbox.
fn in_flight(r: &MirrorEntryRow) -> MirrorEntryRow {
    MirrorEntryRow {
        hash: None,
        local_size: None,
        local_mtime_ns: None,
        remote_size: None,
        remote_mtime_ns: None,
        ..r.clone()
    }
}

/// Sends one file too large for a tar batch: uploaded from the local file one part at a time
/// ([`SandboxFs::upload`]), then its mode and mtime set.
async fn send_large(
    tree: &LocalTree,
    remote: &dyn SandboxFs,
    remote_root: &str,
    manifest: &mut Manifest,
    p: Pending,
    summary: &mut PushSummary,
) -> Result<(), MirrorError> {
    let BatchItem::File { path, .. } = &p.item else {
        unreachable!("only files are sent on their own");
    };
    let mut row = p.row;
    manifest.commit(vec![in_flight(&row)], Vec::new())?;
    let (file, item) = tree.open_file(path).map_err(local_err(path, "read"))?;
    // Hashed from the same open file that is uploaded (the upload reads it by offset).
    let mut hasher = blake3::Hasher::new();
    hasher
        .update_reader(&file)
        .map_err(local_err(path, "read"))?;
    let full = join_remote(remote_root, path);
    remote.upload(&full, file).await?;
    let secs = item.mtime_ns.div_euclid(1_000_000_000).max(0);
    remote
        .set_meta(
            &full,
            MetaUpdate {
                mode: Some(item.mode),
                mtime: Some(secs as u64),
            },
        )
        .await?;
    row.hash = Some(hasher.finalize().to_hex().to_string());
    row.size = item.size;
    row.mode = item.mode;
    row.local_size = Some(item.size);
    row.local_mtime_ns = Some(item.mtime_ns);
    row.remote_size = Some(item.size);
    row.remote_mtime_ns = Some(secs * 1_000_000_000);
    manifest.commit(vec![row], Vec::new())?;
    summary.files_sent += 1;
    summary.bytes_sent += item.size;
    Ok(())
}

/// Sends one batch and records its rows once the remote accepted it.
async fn send_batch(
    tree: &LocalTree,
    remote: &dyn SandboxFs,
    remote_root: &str,
    manifest: &mut Manifest,
    batch: Vec<Pending>,
    summary: &mut PushSummary,
) -> Result<(), MirrorError> {
    let mut items = Vec::with_capacity(batch.len());
    let mut rows = Vec::with_capacity(batch.len());
    let mut files = 0;
    let mut bytes = 0;
    for mut p in batch {
        if !matches!(p.item, BatchItem::Dir { .. }) {
            files += 1;
        }
        if let BatchItem::File {
            path,
            data,
            mode,
            mtime,
        } = &mut p.item
        {
            // Read now, one batch at a time; the row describes what is really sent (the file
            // may have changed since it was hashed).
            let (content, item) = tree.read(path).map_err(local_err(path, "read"))?;
            let hash = blake3::hash(&content).to_hex().to_string();
            if p.row.hash.as_deref() != Some(hash.as_str()) || item.mode != *mode {
                p.row.hash = Some(hash);
                p.row.size = item.size;
                p.row.remote_size = Some(item.size);
                p.row.mode = item.mode;
                *mode = item.mode;
            }
            let secs = item.mtime_ns.div_euclid(1_000_000_000).max(0);
            *mtime = Some(secs as u64);
            p.row.remote_mtime_ns = Some(secs * 1_000_000_000);
            p.row.local_size = Some(item.size);
            p.row.local_mtime_ns = Some(item.mtime_ns);
            p.bytes = content.len() as u64;
            *data = Bytes::from(content);
        }
        bytes += p.bytes;
        items.push(p.item);
        rows.push(p.row);
    }
    // Files are marked in flight first (no hash, no fingerprint: nothing claimed about the
    // remote content), so a torn file left by a cut-short batch is overwritten by the next push
    // rather than taken for a change made in the sandbox.
    let flying: Vec<MirrorEntryRow> = rows
        .iter()
        .filter(|r| r.kind == KIND_FILE)
        .map(in_flight)
        .collect();
    manifest.commit(flying, Vec::new())?;
    remote.put_batch(remote_root, items).await?;
    manifest.commit(rows, Vec::new())?;
    summary.files_sent += files;
    summary.bytes_sent += bytes;
    Ok(())
}

/// Pulls what changed in the sandbox below `remote_root` into the zone directory `local_root`.
///
/// Walks the remote, takes paths whose fingerprint moved since the manifest, confirms the change
/// by hash and downloads only those, writing each atomically. A path also changed locally is a
/// conflict: the remote copy is saved beside it as `name.sandbox-<sandbox>`. Paths deleted in
/// the sandbox are deleted locally only when unchanged locally. A missing remote root is an
/// error (never "everything was deleted").
pub async fn pull(
    local_root: &Path,
    remote: &dyn SandboxFs,
    remote_root: &str,
    manifest: &mut Manifest,
    opts: &MirrorOptions,
) -> Result<PullSummary, MirrorError> {
    let started = Instant::now();
    let mut summary = PullSummary::default();
    let root_shown = local_root.display().to_string();
    let tree = LocalTree::open(local_root).map_err(local_err(&root_shown, "open"))?;
    // Unlike a push, a missing remote root is an error here (never "everything was deleted").
    let remote_map = SandboxTree::new(remote.walk(remote_root).await?);
    // Links are judged by where they resolve through all the links of the remote tree.
    let mut links = LinkResolver::new();
    for (path, r) in &remote_map {
        if let (EntryKind::Symlink, Some(t)) = (r.kind, &r.link_target) {
            links.add(path, t);
        }
    }
    let ctx = PullCtx {
        tree: &tree,
        remote,
        remote_root,
        opts,
        links,
        suffix: format!(".sandbox-{}", opts.sandbox),
        umask: crate::core::process_umask(),
        max_file: opts.max_file_bytes.unwrap_or(u64::MAX),
    };

    for (path, r) in &remote_map {
        if path.ends_with(&ctx.suffix) && manifest.get(path).is_none() {
            continue;
        }
        // A bad entry is skipped and reported; the rest of the tree still comes. A `.git` in any
        // spelling is one: its config and hooks would run the sandbox's commands on this host
        // at the next `git status` here.
        if let Err(e) = foreign::check_rel(path, GitDir::Refuse) {
            summary.skip(path, e.to_string());
            continue;
        }
        match pull_entry(&ctx, path, r, manifest, &mut summary).await {
            Ok(()) => {}
            Err(MirrorError::Local { path, op, source }) => {
                summary.skip(
                    &path,
                    format!("{op} in the zone directory failed: {source}"),
                );
            }
            Err(e) => return Err(e),
        }
    }

    // Deleted in the sandbox: deleted here only when unchanged here. Directories last, deepest
    // first.
    let mut gone: Vec<MirrorEntryRow> = manifest
        .entries
        .values()
        .filter(|m| !remote_map.contains_key(&m.path))
        .cloned()
        .collect();
    gone.sort_by_key(|m| {
        (
            m.kind == KIND_DIR,
            std::cmp::Reverse(m.path.matches('/').count()),
        )
    });
    for m in gone {
        let l = tree.lstat(&m.path).map_err(local_err(&m.path, "stat"))?;
        if l.is_some() {
            if m.kind == KIND_DIR {
                if l.as_ref().is_some_and(|l| l.kind == LocalKind::Dir) {
                    // Files of its own keep it (and are pushed next time).
                    if tree.remove(&m.path, true).is_ok() {
                        summary.deleted += 1;
                        summary.note_delete(opts, &m.path);
                    }
                }
            } else {
                let removed = match opts.zone.as_ref() {
                    // Through the core: what is there now is compared again under the path lock
                    // right before the unlink, so a write acknowledged after this check is kept
                    // (and the core journals the removal).
                    Some(z) => {
                        let vp = z.path(&m.path)?.to_string();
                        let seen = z.zones.seen(&vp).map_err(fs_err(&m.path, "stat"))?;
                        let unchanged = local_unchanged(&tree, Some(&m), l.as_ref())?;
                        opts.report(MirrorProgress {
                            phase: "delete",
                            files_done: summary.deleted,
                            ..Default::default()
                        });
                        unchanged
                            && match z.zones.remove_entry(&vp, seen, opts.origin) {
                                Ok(()) => true,
                                Err(FsError::Conflict { .. }) => false,
                                Err(e) => return Err(fs_err(&m.path, "delete")(e)),
                            }
                    }
                    None => {
                        let unchanged = local_unchanged(&tree, Some(&m), l.as_ref())?;
                        if unchanged {
                            tree.remove(&m.path, false)
                                .map_err(local_err(&m.path, "delete"))?;
                        }
                        unchanged
                    }
                };
                if removed {
                    summary.deleted += 1;
                    summary.changed.push((m.path.clone(), "delete", None));
                } else {
                    summary.conflicts.push(Conflict {
                        path: m.path.clone(),
                        reason:
                            "deleted in the sandbox and changed locally (kept; the next push sends it)"
                                .into(),
                        remote_copy: None,
                    });
                }
            }
        }
        manifest.commit(Vec::new(), vec![m.path.clone()])?;
    }
    manifest.touch(false, opts.now_ms)?;
    summary.duration_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

/// What every entry of one pull shares.
struct PullCtx<'a> {
    tree: &'a LocalTree,
    remote: &'a dyn SandboxFs,
    remote_root: &'a str,
    opts: &'a MirrorOptions,
    links: LinkResolver,
    suffix: String,
    umask: u32,
    max_file: u64,
}

/// Pulls one remote entry (its path already checked).
async fn pull_entry(
    ctx: &PullCtx<'_>,
    path: &String,
    r: &RemoteMeta,
    manifest: &mut Manifest,
    summary: &mut PullSummary,
) -> Result<(), MirrorError> {
    let m = manifest.get(path).cloned();
    // What is there now, as the core will compare it right before it replaces the entry: a
    // write made after this check (API, mount) turns the pull's write into a conflict.
    let seen = match ctx.opts.zone.as_ref() {
        Some(z) => Some(
            z.zones
                .seen(&z.path(path)?.to_string())
                .map_err(fs_err(path, "stat"))?,
        ),
        None => None,
    };
    let l = ctx.tree.lstat(path).map_err(local_err(path, "stat"))?;
    let entry = EntryPull {
        ctx,
        path,
        r,
        m,
        l,
        seen,
    };
    match r.kind {
        EntryKind::Dir => entry.dir(manifest, summary),
        EntryKind::Symlink => entry.link(manifest, summary),
        EntryKind::File => entry.file(manifest, summary).await,
        EntryKind::Other => Ok(()),
    }
}

/// One remote entry being pulled, with what the manifest and the zone directory hold at its
/// path.
struct EntryPull<'a, 'c> {
    ctx: &'a PullCtx<'c>,
    path: &'a String,
    r: &'a RemoteMeta,
    /// The manifest's row of the path.
    m: Option<MirrorEntryRow>,
    /// What the zone directory holds at the path.
    l: Option<LocalItem>,
    /// What the core saw at the path (a pull for a zone), compared again before a write.
    seen: Option<Seen>,
}

impl EntryPull<'_, '_> {
    /// Returns the path of the conflict copy (`name.sandbox-<sandbox>`).
    fn copy_path(&self) -> String {
        format!("{}{}", self.path, self.ctx.suffix)
    }

    /// Pulls a directory: made locally when missing (a local non-directory there is a
    /// conflict), recorded when the manifest did not have it as one.
    fn dir(&self, manifest: &mut Manifest, summary: &mut PullSummary) -> Result<(), MirrorError> {
        let (tree, path) = (self.ctx.tree, self.path);
        match &self.l {
            None => tree
                .mkdir_p(
                    path,
                    foreign::mask_mode(self.r.mode.unwrap_or(0o755), self.ctx.umask),
                )
                .map_err(local_err(path, "mkdir"))?,
            Some(l) if l.kind == LocalKind::Dir => {}
            Some(_) => {
                summary.conflicts.push(Conflict {
                    path: path.clone(),
                    reason: "a directory in the sandbox, not one locally".into(),
                    remote_copy: None,
                });
                return Ok(());
            }
        }
        if self.m.as_ref().is_none_or(|m| m.kind != KIND_DIR) {
            let item = tree
                .lstat(path)
                .map_err(local_err(path, "stat"))?
                .expect("just made");
            manifest.commit(vec![other_row(path, &item)], Vec::new())?;
        }
        Ok(())
    }

    /// Pulls a symlink: skipped when it resolves outside the tree, written when the local
    /// path is unchanged since the manifest, else kept beside the local one as a conflict.
    fn link(&self, manifest: &mut Manifest, summary: &mut PullSummary) -> Result<(), MirrorError> {
        let (tree, path) = (self.ctx.tree, self.path);
        let target = self.r.link_target.clone().unwrap_or_default();
        if self
            .m
            .as_ref()
            .is_some_and(|m| m.kind == KIND_LINK && m.link_target.as_ref() == Some(&target))
        {
            return Ok(());
        }
        if let Err(e) = self.ctx.links.resolve(path, &target) {
            summary.skip(path, e.to_string());
            return Ok(());
        }
        let local_same = local_unchanged(tree, self.m.as_ref(), self.l.as_ref())?;
        let already =
            matches!(&self.l, Some(LocalItem { kind: LocalKind::Symlink(t), .. }) if *t == target);
        let reason = if already {
            let item = self.l.clone().expect("present");
            manifest.commit(vec![other_row(path, &item)], Vec::new())?;
            return Ok(());
        } else if local_same {
            if let Some(item) = self.write_link(&target)? {
                manifest.commit(vec![other_row(path, &item)], Vec::new())?;
                summary.files_received += 1;
                summary.changed.push((path.clone(), "symlink", None));
                return Ok(());
            }
            // Written locally after the check: both kept, as a conflict.
            "changed locally while the pull ran"
        } else {
            "changed locally and in the sandbox"
        };
        let copy = self.copy_path();
        save_link_copy(
            self.ctx.opts.zone.as_ref(),
            self.ctx.opts.origin,
            tree,
            &copy,
            &target,
        )?;
        summary.conflicts.push(Conflict {
            path: path.clone(),
            reason: reason.into(),
            remote_copy: Some(copy),
        });
        Ok(())
    }

    /// Writes the symlink (through the core, compared with what it saw, when the pull runs
    /// for a zone). Returns its stat; `None` when the core found the path changed since.
    fn write_link(&self, target: &str) -> Result<Option<LocalItem>, MirrorError> {
        let (tree, path) = (self.ctx.tree, self.path);
        Ok(match self.ctx.opts.zone.as_ref() {
            Some(z) => {
                let vp = z.path(path)?.to_string();
                match z.zones.replace_entry(
                    &vp,
                    Replacement::Symlink(target),
                    self.seen,
                    self.ctx.opts.origin,
                ) {
                    Ok(_) => tree.lstat(path).map_err(local_err(path, "stat"))?,
                    Err(FsError::Conflict { .. }) => None,
                    Err(e) => return Err(fs_err(path, "symlink")(e)),
                }
            }
            None => Some(
                tree.symlink_atomic(path, target)
                    .map_err(local_err(path, "symlink"))?,
            ),
        })
    }

    /// Pulls a file: nothing when its fingerprint (or, hashed, its content) is unchanged or
    /// both sides already hold it; else downloaded (skipped over the size limit) and placed.
    async fn file(
        &self,
        manifest: &mut Manifest,
        summary: &mut PullSummary,
    ) -> Result<(), MirrorError> {
        let (ctx, tree, path, r) = (self.ctx, self.ctx.tree, self.path, self.r);
        if let Some(m) = &self.m {
            // Unchanged, or in flight from a cut-short push (the next push settles it).
            if m.kind == KIND_FILE && (fingerprint_same(m, r) || m.hash.is_none()) {
                return Ok(());
            }
        }
        if r.size > ctx.max_file {
            summary.skip(
                path,
                format!(
                    "{} bytes, over limits.sandbox_file_bytes ({})",
                    r.size, ctx.max_file
                ),
            );
            return Ok(());
        }
        let full = join_remote(ctx.remote_root, path);
        // Hashed in the sandbox when it can: a touched file is then never downloaded.
        let remote_hash = if ctx.remote.caps().remote_hashes.contains(&HashAlgo::Blake3) {
            Some(ctx.remote.hash(&full, HashAlgo::Blake3).await?)
        } else {
            None
        };
        if let Some(hash) = &remote_hash {
            if self.touched(hash, manifest)? {
                return Ok(());
            }
        }
        let local_same = local_unchanged(tree, self.m.as_ref(), self.l.as_ref())?;
        let local_file = match &self.l {
            Some(LocalItem {
                kind: LocalKind::File,
                ..
            }) => Some(tree.hash(path).map_err(local_err(path, "read"))?),
            _ => None,
        };
        if let Some(hash) = &remote_hash {
            if self.both_hold(hash, local_file.as_ref(), manifest)? {
                return Ok(());
            }
        }
        let Some(mut spool) = self.download(&full, summary).await? else {
            return Ok(());
        };
        let hash = spool.hash();
        if self.touched(&hash, manifest)? || self.both_hold(&hash, local_file.as_ref(), manifest)? {
            return Ok(());
        }
        self.place(&mut spool, &hash, local_same, manifest, summary)
    }

    /// Returns the manifest row `row` with the remote fingerprint of this entry.
    fn fresh(&self, mut row: MirrorEntryRow) -> MirrorEntryRow {
        row.remote_size = Some(self.r.size);
        row.remote_mtime_ns = self.r.mtime_ns;
        row
    }

    /// Returns true (and records the new fingerprint) when the remote file still has the
    /// manifest's content `hash`: touched, not changed.
    fn touched(&self, hash: &str, manifest: &mut Manifest) -> Result<bool, MirrorError> {
        match &self.m {
            Some(m) if m.kind == KIND_FILE && m.hash.as_deref() == Some(hash) => {
                manifest.commit(vec![self.fresh(m.clone())], Vec::new())?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Returns true (and records the file) when the local file, `local_file` as hashed, already
    /// has the remote content `hash`.
    fn both_hold(
        &self,
        hash: &str,
        local_file: Option<&(String, LocalItem)>,
        manifest: &mut Manifest,
    ) -> Result<bool, MirrorError> {
        match local_file {
            Some((h, item)) if h == hash => {
                let row = self.fresh(pulled_row(self.path, hash, item.size, item));
                manifest.commit(vec![row], Vec::new())?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Streams the remote file `full` into a temp file beside the destination (never whole in
    /// memory). `None`: over the size limit after all (skipped and reported).
    async fn download(
        &self,
        full: &str,
        summary: &mut PullSummary,
    ) -> Result<Option<local::Spool>, MirrorError> {
        let path = self.path;
        let mut spool = self
            .ctx
            .tree
            .spool(path)
            .map_err(local_err(path, "write"))?;
        match self
            .ctx
            .remote
            .read_into(full, self.ctx.max_file, &mut spool)
            .await
        {
            Ok(_) => Ok(Some(spool)),
            Err(e @ SandboxFsError::TooLarge { .. }) => {
                summary.skip(path, e.to_string());
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Places a downloaded file with content `hash`: written over the local path when it is
    /// unchanged (`local_same`) and the core finds it as it saw it, else saved beside it as
    /// a conflict.
    fn place(
        &self,
        spool: &mut local::Spool,
        hash: &str,
        local_same: bool,
        manifest: &mut Manifest,
        summary: &mut PullSummary,
    ) -> Result<(), MirrorError> {
        let (opts, path) = (self.ctx.opts, self.path);
        let len = spool.len();
        let mode = foreign::mask_mode(self.r.mode.unwrap_or(0o644), self.ctx.umask);
        // Downloaded: the moment a test hook (the progress callback) may write in between.
        opts.report(MirrorProgress {
            phase: "downloaded",
            files_done: summary.files_received,
            bytes_done: summary.bytes_received + len,
            ..Default::default()
        });
        let written = if local_same {
            self.write_file(spool, mode)?
        } else {
            None
        };
        if let Some(item) = written {
            summary.files_received += 1;
            summary.bytes_received += len;
            summary.changed.push((path.clone(), "write", Some(len)));
            opts.report(MirrorProgress {
                phase: "receive",
                files_done: summary.files_received,
                bytes_done: summary.bytes_received,
                ..Default::default()
            });
            let row = self.fresh(pulled_row(path, hash, len, &item));
            manifest.commit(vec![row], Vec::new())?;
        } else {
            let copy = self.save_file_copy(spool, mode)?;
            summary.bytes_received += len;
            summary.conflicts.push(Conflict {
                path: path.clone(),
                reason: if local_same {
                    "changed locally while the pull ran".into()
                } else {
                    "changed locally and in the sandbox".into()
                },
                remote_copy: Some(copy),
            });
        }
        Ok(())
    }

    /// Writes the downloaded file over the path (through the core, compared with what it saw,
    /// when the pull runs for a zone). Returns its stat; `None` when the core found the path
    /// changed since.
    fn write_file(
        &self,
        spool: &mut local::Spool,
        mode: u32,
    ) -> Result<Option<LocalItem>, MirrorError> {
        let (tree, path) = (self.ctx.tree, self.path);
        let Some(z) = self.ctx.opts.zone.as_ref() else {
            let name = local::split(path).1;
            return Ok(Some(
                spool.commit(name, mode).map_err(local_err(path, "write"))?,
            ));
        };
        let vp = z.path(path)?.to_string();
        spool
            .file
            .seek(std::io::SeekFrom::Start(0))
            .map_err(local_err(path, "write"))?;
        let new = Replacement::File {
            content: &mut spool.file,
            mode,
        };
        match z
            .zones
            .replace_entry(&vp, new, self.seen, self.ctx.opts.origin)
        {
            Ok(_) => Ok(Some(
                tree.lstat(path)
                    .map_err(local_err(path, "stat"))?
                    .ok_or_else(|| MirrorError::Local {
                        path: path.clone(),
                        op: "write",
                        source: std::io::Error::other("gone right after the write"),
                    })?,
            )),
            Err(FsError::Conflict { .. }) => Ok(None),
            Err(e) => Err(fs_err(path, "write")(e)),
        }
    }

    /// Saves the downloaded file beside the local one as the conflict copy (through the core
    /// when the pull runs for a zone: journaled and seen by the mount like any write). Returns
    /// the copy's path.
    fn save_file_copy(&self, spool: &mut local::Spool, mode: u32) -> Result<String, MirrorError> {
        let copy = self.copy_path();
        match self.ctx.opts.zone.as_ref() {
            Some(z) => {
                spool
                    .file
                    .seek(std::io::SeekFrom::Start(0))
                    .map_err(local_err(&copy, "write"))?;
                let new = Replacement::File {
                    content: &mut spool.file,
                    mode,
                };
                z.zones
                    .replace_entry(&z.path(&copy)?.to_string(), new, None, self.ctx.opts.origin)
                    .map_err(fs_err(&copy, "write"))?;
            }
            None => {
                let name = local::split(self.path).1;
                spool
                    .commit(&format!("{name}{}", self.ctx.suffix), mode)
                    .map_err(local_err(&copy, "write"))?;
            }
        }
        Ok(copy)
    }
}

/// Saves the sandbox's side of a conflicting symlink beside the local one (through the core
/// when the pull runs for a zone).
fn save_link_copy(
    zone: Option<&ZoneRef>,
    origin: Origin,
    tree: &LocalTree,
    copy: &str,
    target: &str,
) -> Result<(), MirrorError> {
    match zone {
        Some(z) => z
            .zones
            .replace_entry(
                &z.path(copy)?.to_string(),
                Replacement::Symlink(target),
                None,
                origin,
            )
            .map(|_| ())
            .map_err(fs_err(copy, "symlink")),
        None => tree
            .symlink_atomic(copy, target)
            .map(|_| ())
            .map_err(local_err(copy, "symlink")),
    }
}

/// Returns the manifest row of a file both sides now hold with this content.
fn pulled_row(path: &str, hash: &str, size: u64, item: &LocalItem) -> MirrorEntryRow {
    MirrorEntryRow {
        path: path.to_string(),
        kind: KIND_FILE.into(),
        hash: Some(hash.to_string()),
        size,
        mode: item.mode,
        link_target: None,
        local_size: Some(item.size),
        local_mtime_ns: Some(item.mtime_ns),
        remote_size: Some(size),
        remote_mtime_ns: None,
    }
}

/// Returns true when the local path still is what the manifest says (or is absent and the
/// manifest has nothing there).
fn local_unchanged(
    tree: &LocalTree,
    m: Option<&MirrorEntryRow>,
    l: Option<&LocalItem>,
) -> Result<bool, MirrorError> {
    match (m, l) {
        (None, None) => Ok(true),
        (None, Some(_)) | (Some(_), None) => Ok(false),
        (Some(m), Some(l)) => {
            let mut refresh = Vec::new();
            Ok(local_side(tree, m, Some(l), &mut refresh)?.0 == Side::Same)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64, mode: u32, mtime_ns: i64) -> LocalItem {
        LocalItem {
            kind: LocalKind::File,
            size,
            mtime_ns,
            mode,
        }
    }

    fn read(hash: &str, item: LocalItem) -> Option<Read> {
        Some(Read {
            hash: hash.into(),
            item,
        })
    }

    fn row(path: &str, hash: &str, mode: u32) -> MirrorEntryRow {
        file_row(path, &read(hash, file(3, mode, 0)).unwrap(), None)
    }

    #[test]
    fn a_file_gone_locally_whose_content_reappeared_is_a_rename() {
        let local: BTreeMap<String, LocalItem> = [
            ("moved".to_string(), file(3, 0o644, 0)),
            ("also".to_string(), file(3, 0o644, 0)),
            ("remote-has".to_string(), file(3, 0o600, 0)),
            ("kept".to_string(), file(3, 0o644, 0)),
        ]
        .into();
        let remote_map = SandboxTree::new(vec![WalkEntry {
            path: "remote-has".into(),
            meta: RemoteMeta {
                kind: EntryKind::File,
                size: 3,
                mtime_ns: None,
                mode: None,
                link_target: None,
            },
        }]);
        let mut manifest = Manifest::in_memory();
        manifest
            .commit(vec![row("kept", "k", 0o644)], Vec::new())
            .unwrap();
        let to_send = vec![
            ("also".to_string(), read("h1", file(3, 0o644, 0))),
            ("kept".to_string(), read("h3", file(3, 0o644, 0))),
            ("moved".to_string(), read("h1", file(3, 0o644, 0))),
            ("remote-has".to_string(), read("h2", file(3, 0o600, 0))),
        ];
        let mut gone = vec![
            (row("old", "h1", 0o644), Side::Same),
            (row("old2", "h1", 0o644), Side::Same),
            (row("changed-mode", "h1", 0o600), Side::Same),
            (row("gone-there", "h3", 0o644), Side::Gone),
            (row("over-remote", "h2", 0o600), Side::Same),
            (row("over-kept", "h3", 0o644), Side::Same),
        ];
        let renames = plan_renames(&local, &remote_map, &manifest, &to_send, &mut gone);
        let renames: Vec<(&str, usize)> =
            renames.iter().map(|(m, i)| (m.path.as_str(), *i)).collect();
        // The first new path with the content takes it; the next gone one is deleted.
        assert_eq!(renames, [("old", 0)]);
        let left: Vec<&str> = gone.iter().map(|(m, _)| m.path.as_str()).collect();
        assert_eq!(
            left,
            [
                "old2",
                "changed-mode",
                "gone-there",
                "over-remote",
                "over-kept"
            ]
        );
    }

    #[test]
    fn pending_sends_put_directories_first_and_skip_renamed_paths() {
        let local: BTreeMap<String, LocalItem> = [
            (
                "d".to_string(),
                LocalItem {
                    kind: LocalKind::Dir,
                    size: 0,
                    mtime_ns: 0,
                    mode: 0o755,
                },
            ),
            ("d/f".to_string(), file(5, 0o640, 2_700_000_000)),
            ("d/g".to_string(), file(7, 0o644, 0)),
            (
                "l".to_string(),
                LocalItem {
                    kind: LocalKind::Symlink("d/f".into()),
                    size: 3,
                    mtime_ns: 0,
                    mode: 0o777,
                },
            ),
        ]
        .into();
        let to_send = vec![
            ("d/f".to_string(), read("hf", file(5, 0o640, 2_700_000_000))),
            ("d/g".to_string(), read("hg", file(7, 0o644, 0))),
            ("l".to_string(), None),
            ("d".to_string(), None),
        ];
        let pending = pending_sends(&local, to_send, &HashSet::from([1]));
        let items: Vec<&BatchItem> = pending.iter().map(|p| &p.item).collect();
        assert_eq!(
            items,
            [
                &BatchItem::Dir {
                    path: "d".into(),
                    mode: 0o755
                },
                &BatchItem::File {
                    path: "d/f".into(),
                    data: Bytes::new(),
                    mode: 0o640,
                    mtime: Some(2)
                },
                &BatchItem::Symlink {
                    path: "l".into(),
                    target: "d/f".into()
                },
            ]
        );
        assert_eq!(
            pending.iter().map(|p| p.bytes).collect::<Vec<_>>(),
            [0, 5, 0]
        );
        // The file's row claims the whole seconds the tar carries.
        assert_eq!(pending[1].row.hash.as_deref(), Some("hf"));
        assert_eq!(pending[1].row.remote_mtime_ns, Some(2_000_000_000));
        assert_eq!(pending[2].row.link_target.as_deref(), Some("d/f"));
    }

    #[test]
    fn deletions_go_files_first_then_directories_deepest_first() {
        let dir = |path: &str| MirrorEntryRow {
            kind: KIND_DIR.into(),
            ..row(path, "", 0o755)
        };
        let mut gone = [
            dir("a"),
            dir("a/b"),
            row("a/b/f", "h", 0o644),
            row("g", "h", 0o644),
            dir("a/b/c"),
        ];
        gone.sort_by_key(deletion_order);
        let order: Vec<&str> = gone.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(order, ["a/b/f", "g", "a/b/c", "a/b", "a"]);
    }
}
