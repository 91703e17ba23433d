//! git's file-system monitor from the journal: the answers of `core.fsmonitor` (hook protocol 2)
//! for a checkout inside a zone, so that `git status` looks only at what changed.
//!
//! git runs the hook (`wardfs git fsmonitor-hook 2 TOKEN`, set up by `wardfs git watch`) in the
//! checkout's work tree with the token of its last answer; the hook asks the daemon
//! (`GET /v1/git/fsmonitor`), which answers from here: a new token and the paths changed since
//! the old one, relative to the work tree, or "everything" (`/`), after which git looks at every
//! file. A token is `wardfs:<instance>:<zone>:<journal position>`: the daemon's instance (new at
//! every start; the previous instance's tokens are answered too when it stopped cleanly and this
//! start-up journaled what changed in the zone since its newest checkpoint, see [`Starts`]; an
//! older one's, or after a crash, are everything), the zone it was given
//! for (`workspace`, `cache`, or `fork<id>` for the fork recorded with that id: a fork's files
//! were never journaled in it before it existed) and the journal's newest row when the answer
//! began.
//!
//! The answer must never hide a change. It is every path of the zone's journal rows after the
//! token's position that lies in the checkout (a move names both ends), the files written
//! through the mount and not journaled yet ([`crate::core::own::OwnChanges::open_writer_paths`]),
//! and what the watcher of the backing directories saw beside wardfs and has not journaled yet
//! ([`BesideWatch::settle`]: it first takes in every change made before the call). Anything
//! that cannot vouch for that answers everything, with a fresh token: a token that is not
//! wardfs's, of another instance or zone (but the previous instance's, as above, when the
//! start-up looked into every directory in and above the checkout), or ahead of the journal; rows missing after it
//! (`journal.keep_days` pruned them); changes beside wardfs the watcher lost, could not watch,
//! or has not taken in within [`SETTLE_WAIT`]; no watcher at all; a zone served from a sandbox;
//! a change to the checkout's directory itself or a directory above it; more than
//! [`MAX_PATHS`] paths or [`MAX_ROWS`] rows. Paths inside the checkout's `.git` are left out.
//!
//! A path is answered without a trailing slash even when it is (or was) a directory: git takes
//! such a name as its index entry or, when the index has none, as every entry beneath it, so one
//! form covers a file, a directory moved or deleted whole, and a file replaced by a directory.
//! A name the journal holds lossily (not UTF-8, journaled with U+FFFD) is answered as its
//! directory.
//!
//! May import `core`, `state` and `config`, like the rest of `git`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::{FsError, FsResult, NotLocal, VPath, ZoneId, Zones};
use crate::state::ZoneRow;

/// More paths than this in one answer: everything.
pub const MAX_PATHS: usize = 50_000;
/// More journal rows than this since the token (of every zone): everything (git then writes
/// its index with the new token, so the next answer starts from there).
pub const MAX_ROWS: usize = 200_000;
/// How long an answer waits for the watcher to take in the changes made beside wardfs before
/// the call; past it, everything.
pub const SETTLE_WAIT: Duration = Duration::from_secs(2);
/// What every token starts with.
const PREFIX: &str = "wardfs";

/// What the watcher of the backing directories knows and the journal does not yet hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Beside {
    /// Paths changed beside wardfs, seen and not journaled yet.
    pub pending: Vec<VPath>,
    /// The journal's newest row when the watcher last lost changes (more at once than it can
    /// hold, or the kernel's event queue overflowed): a token not newer than this answers
    /// everything.
    pub lost_at: Option<i64>,
    /// Directories the watcher could not watch (a zone's root: too many to name).
    pub unwatched: Vec<VPath>,
}

/// The watcher of the backing directories, as the monitor asks it (the daemon's `watch`).
pub trait BesideWatch: Send + Sync {
    /// Waits until every change made beside wardfs before the call has been taken in (at most
    /// `wait`), then tells what is not journaled yet; `None` when it did not catch up in time or
    /// no longer watches.
    fn settle(&self, wait: Duration) -> Option<Beside>;
}

/// The monitor of one daemon: its instance, its watcher, and the record of starts that lets it
/// answer a previous instance's token ([`Starts`]).
pub struct Monitor {
    instance: String,
    beside: OnceLock<Arc<dyn BesideWatch>>,
    starts: OnceLock<Starts>,
    /// The directories this start's catch-up did not look into (see [`Monitor::started`]).
    unseen: OnceLock<Vec<VPath>>,
}

/// The answer to git's hook: its output is `token`, NUL, then each path and a NUL, or `/` for
/// everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsmonitorAnswer {
    /// The token git passes to the next call.
    pub token: String,
    /// Whether git must look at every file (the hook answers `/`); `paths` is then empty.
    pub everything: bool,
    /// Why everything, for people (`GIT_TRACE_FSMONITOR` does not show it; `wardfs git
    /// fsmonitor-hook` run by hand does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The paths changed since the token, relative to the checkout's work tree, each once, in
    /// byte order.
    pub paths: Vec<String>,
}

/// A token as the hook passes it back, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token<'a> {
    instance: &'a str,
    zone: &'a str,
    position: i64,
}

/// Reads a token; `None` when it is not one of ours (empty, a timestamp of git's own, …).
fn parse_token(s: &str) -> Option<Token<'_>> {
    let mut parts = s.split(':');
    let (prefix, instance, zone, position) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if prefix != PREFIX || parts.next().is_some() || instance.is_empty() || zone.is_empty() {
        return None;
    }
    if !position.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Token {
        instance,
        zone,
        position: position.parse().ok()?,
    })
}

/// An answer in the making: everything, or the paths so far.
enum Found {
    Everything(String),
    Paths(BTreeSet<String>),
}

impl Found {
    fn everything(why: impl Into<String>) -> Found {
        Found::Everything(why.into())
    }
}

impl Default for Monitor {
    fn default() -> Monitor {
        Monitor::new()
    }
}

impl Monitor {
    /// A monitor with a new instance id (random, 16 hex digits).
    pub fn new() -> Monitor {
        Monitor {
            instance: new_instance(),
            beside: OnceLock::new(),
            starts: OnceLock::new(),
            unseen: OnceLock::new(),
        }
    }

    /// This daemon's instance id, as tokens carry it.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Hands the monitor the watcher of the backing directories (once; without one every answer
    /// for a local zone is everything: changes beside wardfs would go unseen).
    pub fn watch(&self, beside: Arc<dyn BesideWatch>) {
        let _ = self.beside.set(beside);
    }

    /// The answer for the checkout whose work tree is `checkout`, to `token`.
    pub fn answer(
        &self,
        zones: &Zones,
        checkout: &VPath,
        token: &str,
    ) -> FsResult<FsmonitorAnswer> {
        let zone = checkout.zone();
        let tag = zone_tag(zones, zone)?;
        let db = zones.db();
        let head = db.journal_max_id().map_err(state_err)?;
        let fresh = format!("{PREFIX}:{}:{tag}:{head}", self.instance);
        let found = match zones.local(zone) {
            Ok(_) => self.find(zones, checkout, &tag, head, token),
            Err(NotLocal::Sandbox(_)) => Ok(Found::everything(
                "the zone is served from a sandbox, whose changes the journal does not hold",
            )),
            Err(NotLocal::Disabled(_)) => Ok(Found::everything("the zone is unavailable")),
        }?;
        Ok(match found {
            Found::Everything(why) => FsmonitorAnswer {
                token: fresh,
                everything: true,
                reason: Some(why),
                paths: Vec::new(),
            },
            Found::Paths(paths) => FsmonitorAnswer {
                token: fresh,
                everything: false,
                reason: None,
                paths: paths.into_iter().collect(),
            },
        })
    }

    /// The paths of a local zone's checkout changed after `token`, read in the order the module
    /// doc gives (writers through the mount, then the watcher, then the journal).
    fn find(
        &self,
        zones: &Zones,
        checkout: &VPath,
        tag: &str,
        head: i64,
        token: &str,
    ) -> FsResult<Found> {
        let zone = checkout.zone();
        let writing = zones.own().open_writer_paths(zone);
        let Some(watch) = self.beside.get() else {
            return Ok(Found::everything(
                "changes beside wardfs are not watched (journal.watch is off, or the watch failed)",
            ));
        };
        let Some(beside) = watch.settle(SETTLE_WAIT) else {
            return Ok(Found::everything(format!(
                "the watcher did not take in the changes made beside wardfs within {} s",
                SETTLE_WAIT.as_secs()
            )));
        };
        let position = match self.vouch(token, tag, head, &beside) {
            Ok(p) => p,
            Err(why) => return Ok(Found::everything(why)),
        };
        let earlier = parse_token(token).is_some_and(|t| t.instance != self.instance);
        let unseen = self.unseen.get().map(Vec::as_slice).unwrap_or_default();
        if let Some(d) = unseen
            .iter()
            .filter(|_| earlier)
            .find(|d| related(d, checkout))
        {
            return Ok(Found::everything(format!(
                "the token is of the previous daemon instance, and its start-up did not look \
                 into {d} (left out of checkpoints), where git may track files"
            )));
        }
        if let Some(d) = beside.unwatched.iter().find(|d| related(d, checkout)) {
            return Ok(Found::everything(format!(
                "the watcher could not watch {d}, so changes beside wardfs there go unseen"
            )));
        }
        let rows = zones
            .db()
            .journal_zone_rows_after(zone.name(), position, MAX_ROWS + 1)
            .map_err(state_err)?;
        if let Err(why) = complete(&rows, position, head) {
            return Ok(Found::everything(why));
        }
        let mut set = Checkout::new(checkout.rel());
        let journaled = rows.iter().filter_map(|r| r.change.as_ref());
        for c in journaled.filter(|c| !c.op.starts_with("git-")) {
            set.add(&c.path);
            if let Some(to) = &c.to_path {
                set.add(to);
            }
        }
        for p in &writing {
            set.add(p);
        }
        for p in beside.pending.iter().filter(|p| p.zone() == zone) {
            set.add(p.rel());
        }
        Ok(set.done())
    }

    /// The journal position of `token` when this monitor can answer from it, else why not.
    fn vouch(&self, token: &str, tag: &str, head: i64, beside: &Beside) -> Result<i64, String> {
        let Some(t) = parse_token(token) else {
            return Err(format!("{token:?} is not a wardfs token"));
        };
        if t.instance != self.instance && !self.continues(t.instance, tag) {
            return Err(
                "the token is of another daemon instance, and the journal may lack what changed \
                 since (a start that did not catch up with the zone, or a stop that was not clean)"
                    .into(),
            );
        }
        if t.zone != tag {
            return Err(format!("the token is of zone {}, not {tag}", t.zone));
        }
        if t.position > head {
            return Err(format!(
                "the token's position {} is ahead of the journal ({head})",
                t.position
            ));
        }
        if beside.lost_at.is_some_and(|lost| lost >= t.position) {
            return Err("the watcher lost changes made beside wardfs since the token".into());
        }
        Ok(t.position)
    }
}

/// Where a zone stands for [`Starts`]: its tag and its backing root's `(st_dev, st_ino)` (a
/// zone moved to another directory is another zone for the journal).
pub fn zone_mark(zones: &Zones, zone: ZoneId) -> Option<String> {
    let z = zones.local(zone).ok()?;
    let st = rustix::fs::stat(z.root()).ok()?;
    Some(format!(
        "{}={}.{}",
        zone_tag(zones, zone).ok()?,
        st.st_dev,
        st.st_ino
    ))
}

impl Monitor {
    /// Records this start in `path` ([`Starts`]) with the zones whose changes since their newest
    /// checkpoint the start-up journaled (`caught`: their [`zone_mark`]s) but beneath the
    /// directories `unseen`, and where every local zone is (`roots`: theirs); answers may then
    /// vouch for the previous instance's tokens.
    pub fn started(&self, path: PathBuf, caught: &[String], roots: &[String], unseen: Vec<VPath>) {
        let _ = self.unseen.set(unseen);
        let starts = Starts { path };
        let line = format!(
            "start {} {} {}",
            self.instance,
            or_dash(&caught.join(",")),
            or_dash(&roots.join(","))
        );
        if let Err(e) = starts.append(&line) {
            tracing::warn!(
                "cannot record this start for git's monitor (tokens of earlier runs answer \
                 everything): {e}"
            );
            return;
        }
        let _ = self.starts.set(starts);
    }

    /// Records a clean stop: when the watcher has taken in every change made beside wardfs and
    /// never lost one, the journal holds all this instance saw, and a later instance may vouch
    /// for its tokens. Said of nothing otherwise (a later instance then answers everything).
    pub fn stopped(&self) {
        let (Some(starts), Some(watch)) = (self.starts.get(), self.beside.get()) else {
            return;
        };
        let clean = watch
            .settle(SETTLE_WAIT)
            .is_some_and(|b| b.lost_at.is_none() && b.unwatched.is_empty());
        if !clean {
            tracing::info!("git's monitor: the watcher lost or could not take in changes: tokens of this run will answer everything after a restart");
            return;
        }
        if let Err(e) = starts.append(&format!("end {}", self.instance)) {
            tracing::warn!("cannot record this stop for git's monitor: {e}");
        }
    }

    /// True when the record of starts vouches for the tokens of instance `old` in the zone
    /// `tag`: see [`continuous`].
    fn continues(&self, old: &str, tag: &str) -> bool {
        self.starts
            .get()
            .and_then(|s| s.read())
            .is_some_and(|text| continuous(&text, old, &self.instance, tag))
    }
}

/// `-` for an empty list (so that a line always has its words).
fn or_dash(list: &str) -> &str {
    if list.is_empty() {
        "-"
    } else {
        list
    }
}

/// The record of the daemon's starts and clean stops, in `<state_dir>/fsmonitor-starts`, one line
/// each, oldest first: `start <instance> <caught> <roots>` once the start-up has journaled what
/// changed in the zones `caught` since their newest checkpoint (`Checkpoints::catch_up`:
/// whatever changed while no daemon ran, or that a killed one had not journaled, is after that
/// checkpoint), with `roots` the [`zone_mark`]s of every local zone; and `end <instance>` when it
/// stopped with every change journaled. Written by the
/// daemon alone (the state directory is its own); at most [`Starts::KEEP`] lines are kept.
struct Starts {
    path: PathBuf,
}

impl Starts {
    /// Lines kept (older starts' tokens then answer everything).
    const KEEP: usize = 200;
    /// The most of the file read.
    const MAX_BYTES: u64 = 256 * 1024;

    /// The record, or `None` when it cannot be read or is too long.
    fn read(&self) -> Option<String> {
        let meta = std::fs::metadata(&self.path).ok()?;
        if meta.len() > Starts::MAX_BYTES {
            return None;
        }
        std::fs::read_to_string(&self.path).ok()
    }

    /// Adds `line`, keeping the newest [`Starts::KEEP`] lines (replaced whole, by a rename).
    fn append(&self, line: &str) -> std::io::Result<()> {
        let text = self.read().unwrap_or_default();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.push(line);
        let from = lines.len().saturating_sub(Starts::KEEP);
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, lines[from..].join("\n") + "\n")?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// True when `record` ([`Starts`]) shows the journal whole for the zone `tag` from the start of
/// instance `old` to the running instance `now`: `old` is the instance right before `now`, it
/// stopped cleanly, and `now` caught up with the zone at its start, under the root `old` had.
/// (Only the one before: what an earlier start-up did not look into is not known.)
fn continuous(record: &str, old: &str, now: &str, tag: &str) -> bool {
    let mark = |marks: &str| -> Option<String> {
        marks
            .split(',')
            .find(|m| m.split_once('=').is_some_and(|(t, _)| t == tag))
            .map(str::to_string)
    };
    let lines: Vec<Vec<&str>> = record.lines().map(|l| l.split(' ').collect()).collect();
    let [.., before, ended, current] = &lines[..] else {
        return false;
    };
    let (["start", a, _, old_roots], ["end", e], ["start", b, caught, roots]) =
        (&before[..], &ended[..], &current[..])
    else {
        return false;
    };
    *a == old
        && *e == old
        && *b == now
        && mark(caught).is_some()
        && mark(roots).is_some()
        && mark(roots) == mark(old_roots)
}

/// A new instance id: 16 hex digits from the kernel's random source (the time and pid when it
/// cannot be read: distinct per start all the same).
fn new_instance() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        bytes = (now ^ ((std::process::id() as u64) << 32)).to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The zone's part of a token: its name, or `fork<id>` for a fork (the id of its record, new
/// when a fork is made again under the same name).
fn zone_tag(zones: &Zones, zone: ZoneId) -> FsResult<String> {
    let Some(name) = zone.fork_name() else {
        return Ok(zone.name().to_string());
    };
    let rec = zones.db().fork_get(name).map_err(state_err)?;
    rec.map(|r| format!("fork{}", r.id))
        .ok_or_else(|| FsError::NotFound {
            path: format!("/{}", zone.name()),
        })
}

/// Whether the rows after `position` are all there up to `head` (ids follow one another: the
/// journal numbers its rows with AUTOINCREMENT and only pruning removes any) and few enough.
fn complete(rows: &[ZoneRow], position: i64, head: i64) -> Result<(), String> {
    if rows.len() > MAX_ROWS {
        return Err(format!("more than {MAX_ROWS} journal rows since the token"));
    }
    let mut want = position + 1;
    for r in rows {
        if r.id != want {
            return Err(format!(
                "the journal no longer holds rows {want} to {} (pruned: journal.keep_days)",
                r.id - 1
            ));
        }
        want += 1;
    }
    if want <= head {
        return Err(format!(
            "the journal no longer holds rows {want} to {head} (pruned: journal.keep_days)"
        ));
    }
    Ok(())
}

/// Whether the directory `dir` is the checkout's, lies above it or inside it.
fn related(dir: &VPath, checkout: &VPath) -> bool {
    dir.zone() == checkout.zone()
        && (within(dir.rel(), checkout.rel()) || within(checkout.rel(), dir.rel()))
}

/// Whether the zone-relative `path` is `dir` or lies beneath it (`dir` empty: the zone root).
fn within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// The paths of one checkout's answer, gathered from zone-relative paths.
struct Checkout<'a> {
    /// The work tree, relative to the zone root (empty: the zone root).
    rel: &'a str,
    paths: BTreeSet<String>,
    /// Why everything, once known.
    everything: Option<String>,
}

impl<'a> Checkout<'a> {
    fn new(rel: &'a str) -> Checkout<'a> {
        Checkout {
            rel,
            paths: BTreeSet::new(),
            everything: None,
        }
    }

    /// Adds the zone-relative `path` if it lies in the checkout (and not in its `.git`).
    fn add(&mut self, path: &str) {
        if self.everything.is_some() {
            return;
        }
        if within(self.rel, path) {
            self.everything = Some(format!(
                "{} changed: the checkout's directory itself or one above it",
                if path.is_empty() {
                    "the zone's root"
                } else {
                    path
                }
            ));
            return;
        }
        let Some(inner) = self.inner(path) else {
            return;
        };
        if inner == ".git" || inner.starts_with(".git/") {
            return;
        }
        let answered = match inner.find('\u{FFFD}') {
            // Journaled lossily: its real name is unknown, its directory is not.
            Some(at) => match inner[..at].rfind('/') {
                Some(slash) => inner[..slash].to_string(),
                None => {
                    self.everything = Some(format!(
                        "{inner:?} (a name that is not UTF-8) changed at the checkout's top"
                    ));
                    return;
                }
            },
            None => inner.to_string(),
        };
        self.paths.insert(answered);
        if self.paths.len() > MAX_PATHS {
            self.everything = Some(format!("more than {MAX_PATHS} paths changed"));
        }
    }

    /// The part of `path` beneath the checkout, when it lies beneath it.
    fn inner<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.rel.is_empty() {
            return Some(path);
        }
        path.strip_prefix(self.rel)?.strip_prefix('/')
    }

    fn done(self) -> Found {
        match self.everything {
            Some(why) => Found::Everything(why),
            None => Found::Paths(self.paths),
        }
    }
}

/// The checkout whose work tree is `dir`, an absolute path as git gives the hook: through the
/// mount at `mount` (`MOUNT/workspace/app`, `MOUNT/forks/NAME/app`) or in a zone's own
/// directory (the deepest that holds it, as a zone's directory may hold another's).
pub fn checkout_at(zones: &Zones, mount: &Path, dir: &str) -> FsResult<VPath> {
    let invalid = |rule: &str| FsError::InvalidPath {
        path: dir.to_string(),
        rule: rule.to_string(),
    };
    let p = Path::new(dir);
    if !p.is_absolute() {
        return Err(invalid("the checkout's directory must be an absolute path"));
    }
    let p = crate::core::path::fold(p);
    if let Some(rest) = forms(mount, false)
        .iter()
        .find_map(|m| p.strip_prefix(m).ok())
    {
        return in_mount(rest, dir);
    }
    let mut best: Option<(usize, ZoneId, PathBuf)> = None;
    for id in zones.zone_ids() {
        let Ok(z) = zones.local(id) else {
            continue;
        };
        for root in forms(z.root(), true) {
            if let Ok(rest) = p.strip_prefix(&root) {
                let depth = root.components().count();
                if best.as_ref().is_none_or(|(d, ..)| depth > *d) {
                    best = Some((depth, id, rest.to_path_buf()));
                }
            }
        }
    }
    let Some((_, id, rest)) = best else {
        return Err(FsError::OutsideZone {
            path: dir.to_string(),
            rule: "not under the mount nor in a zone's directory".into(),
        });
    };
    let rest = rest
        .to_str()
        .ok_or_else(|| invalid("the path is not UTF-8"))?;
    VPath::new(id, rest)
}

/// The zone and path of `rest`, a path beneath the mount point (`workspace/app`,
/// `forks/NAME/app`).
fn in_mount(rest: &Path, dir: &str) -> FsResult<VPath> {
    let rest = rest.to_str().ok_or_else(|| FsError::InvalidPath {
        path: dir.to_string(),
        rule: "the path is not UTF-8".into(),
    })?;
    let (first, after) = rest.split_once('/').unwrap_or((rest, ""));
    let (zone, inner) = if first == crate::core::path::FORKS_DIR {
        let (name, inner) = after.split_once('/').unwrap_or((after, ""));
        let id = ZoneId::fork(name).ok_or_else(|| FsError::NotFound {
            path: format!("/{first}/{name}"),
        })?;
        (id, inner)
    } else {
        let id = ZoneId::ALL
            .into_iter()
            .find(|z| z.name() == first)
            .ok_or_else(|| FsError::OutsideZone {
                path: dir.to_string(),
                rule: "the mount's top level holds the zones and `forks`, not a checkout".into(),
            })?;
        (id, after)
    };
    VPath::new(zone, inner)
}

/// `p` as configured and, when they differ, with the symlinks of its parent resolved (the form
/// `getcwd` gives) and, for a directory that is not the mount point (`whole`), with its own
/// resolved too. The mount point itself is never looked at: the daemon would ask its own mount.
fn forms(p: &Path, whole: bool) -> Vec<PathBuf> {
    let mut out = vec![crate::core::path::fold(p)];
    let mut add = |real: PathBuf| {
        if !out.contains(&real) {
            out.push(real);
        }
    };
    if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
        if let Ok(real) = std::fs::canonicalize(parent) {
            add(real.join(name));
        }
    }
    if whole {
        if let Ok(real) = std::fs::canonicalize(p) {
            add(real);
        }
    }
    out
}

fn state_err(e: crate::state::StateError) -> FsError {
    FsError::Internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ZoneChange;

    fn row(id: i64, path: Option<&str>) -> ZoneRow {
        ZoneRow {
            id,
            change: path.map(|p| ZoneChange {
                op: "write".into(),
                path: p.into(),
                to_path: None,
            }),
        }
    }

    #[test]
    fn a_previous_instances_token_is_vouched_for_only_across_a_clean_stop_and_a_caught_up_start() {
        let (ws, both) = ("workspace=1.2", "workspace=1.2,cache=1.3");
        // The previous start had no checkpoint to catch up from: its own tokens still count.
        let ok = format!("start a - {both}\nend a\nstart b {ws} {both}\n");
        assert!(continuous(&ok, "a", "b", "workspace"));
        // Unknown instance, a zone not caught up, the running instance's own start line missing.
        assert!(!continuous(&ok, "z", "b", "workspace"));
        assert!(!continuous(&ok, "a", "b", "cache"));
        assert!(!continuous(&ok, "a", "c", "workspace"));
        // Not the instance right before, or a stop that was not clean (no `end`).
        let two = format!("{ok}end b\nstart c {ws} {ws}\n");
        assert!(!continuous(&two, "a", "c", "workspace"));
        assert!(continuous(&two, "b", "c", "workspace"));
        let crash = format!("start a {ws} {ws}\nstart b {ws} {ws}\n");
        assert!(!continuous(&crash, "a", "b", "workspace"));
        // The zone under another root, or a previous start that did not know it.
        let moved = format!("start a {ws} {ws}\nend a\nstart c workspace=1.9 workspace=1.9\n");
        assert!(!continuous(&moved, "a", "c", "workspace"));
        let unknown = format!("start a - cache=1.3\nend a\nstart c {ws} {ws}\n");
        assert!(!continuous(&unknown, "a", "c", "workspace"));
        // A fork's tag is its own, and must be the whole tag.
        let fork = "start a - fork7=1.5\nend a\nstart c fork7=1.5 fork7=1.5\n";
        assert!(continuous(fork, "a", "c", "fork7"));
        assert!(!continuous(fork, "a", "c", "fork"));
    }

    #[test]
    fn tokens_are_read_only_in_their_own_shape() {
        assert_eq!(
            parse_token("wardfs:00ff:workspace:42"),
            Some(Token {
                instance: "00ff",
                zone: "workspace",
                position: 42
            })
        );
        assert_eq!(
            parse_token("wardfs:ab:fork7:0").map(|t| t.zone),
            Some("fork7")
        );
        for bad in [
            "",
            "1732000000000000000",
            "wardfs",
            "wardfs:ab:workspace",
            "wardfs::workspace:1",
            "wardfs:ab::1",
            "wardfs:ab:workspace:-1",
            "wardfs:ab:workspace:+1",
            "wardfs:ab:workspace:1:2",
            "wardfs:ab:workspace:99999999999999999999",
            "builtin:fake",
        ] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rows_missing_after_the_token_or_too_many_are_not_vouched_for() {
        assert_eq!(complete(&[], 5, 5), Ok(()));
        assert_eq!(complete(&[row(6, Some("a")), row(7, None)], 5, 7), Ok(()));
        // Rows after the head (journaled while the answer was made) are welcome.
        assert_eq!(complete(&[row(6, None), row(7, None)], 5, 6), Ok(()));
        let gap = complete(&[row(6, None), row(8, None)], 5, 8).unwrap_err();
        assert!(gap.contains("rows 7 to 7"), "{gap}");
        let pruned = complete(&[row(9, None)], 5, 9).unwrap_err();
        assert!(pruned.contains("rows 6 to 8"), "{pruned}");
        let all_gone = complete(&[], 5, 9).unwrap_err();
        assert!(all_gone.contains("rows 6 to 9"), "{all_gone}");
        let many: Vec<ZoneRow> = (1..=MAX_ROWS as i64 + 1).map(|i| row(i, None)).collect();
        assert!(complete(&many, 0, MAX_ROWS as i64 + 1)
            .unwrap_err()
            .contains("more than"));
    }

    fn answer(rel: &str, paths: &[&str]) -> Result<Vec<String>, String> {
        let mut c = Checkout::new(rel);
        for p in paths {
            c.add(p);
        }
        match c.done() {
            Found::Paths(p) => Ok(p.into_iter().collect()),
            Found::Everything(why) => Err(why),
        }
    }

    #[test]
    fn a_checkouts_paths_are_its_own_relative_without_git_internals() {
        assert_eq!(
            answer(
                "app",
                &[
                    "app/src/lib.rs",
                    "other/x",
                    "apple/y",
                    "app/.git/index",
                    "app/.gitignore",
                    "app/src/lib.rs",
                    "app/d/.git/config"
                ]
            ),
            Ok(vec![
                ".gitignore".to_string(),
                "d/.git/config".to_string(),
                "src/lib.rs".to_string()
            ])
        );
        // A checkout at the zone's root.
        assert_eq!(
            answer("", &["a", "b/c", ".git/HEAD"]),
            Ok(vec!["a".to_string(), "b/c".to_string()])
        );
    }

    #[test]
    fn the_checkout_itself_or_a_directory_above_it_changing_is_everything() {
        for p in ["app", "", "a"] {
            let rel = if p == "a" { "a/app" } else { "app" };
            let why = answer(rel, &["app/x", p]).unwrap_err();
            assert!(why.contains("the checkout's directory itself"), "{why}");
        }
    }

    #[test]
    fn a_lossy_name_is_answered_as_its_directory_and_at_the_top_as_everything() {
        assert_eq!(
            answer("app", &["app/src/bad\u{FFFD}.rs", "app/src/sub/x\u{FFFD}"]),
            Ok(vec!["src".to_string(), "src/sub".to_string()])
        );
        let why = answer("app", &["app/d\u{FFFD}/x"]).unwrap_err();
        assert!(why.contains("not UTF-8"), "{why}");
    }

    #[test]
    fn more_paths_than_the_bound_are_everything() {
        let many: Vec<String> = (0..=MAX_PATHS).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(answer("", &refs).unwrap_err().contains("more than"));
        assert_eq!(answer("", &refs[..MAX_PATHS]).unwrap().len(), MAX_PATHS);
    }

    #[test]
    fn unwatched_directories_matter_above_and_inside_the_checkout_only() {
        let ws = |rel: &str| VPath::new(ZoneId::Workspace, rel).unwrap();
        let app = ws("app");
        assert!(related(&ws("app/src"), &app));
        assert!(related(&ws(""), &app));
        assert!(related(&ws("app"), &app));
        assert!(!related(&ws("apple"), &app));
        assert!(!related(&VPath::root(ZoneId::Cache), &app));
    }
}
