//! `glob` and `grep`: ripgrep's own crates, run in the daemon on the backing directory.
//!
//! The walk is the `ignore` crate's parallel walker (the one ripgrep and fd use), with the same
//! defaults: hidden files skipped and `.gitignore`/`.ignore` honoured unless asked otherwise, symlinks
//! not followed. Files are opened beneath the zone's directory fd, so a directory swapped for a
//! symlink mid-walk cannot lead the search out of the zone. Results are capped and sorted (glob:
//! newest first; grep: by path and line) so an agent gets a stable, bounded answer.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use globset::GlobBuilder;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use ignore::{ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::error::{FsError, FsResult};
use super::path;
use super::sandbox_zone::SandboxZone;
use super::zone::{openat2_beneath, LocalZone};
use super::{EntryKind, Zones};

fn default_true() -> bool {
    true
}

/// What `glob` looks for.
#[derive(Debug, Clone, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "GlobRequest")]
pub struct GlobOptions {
    /// A glob (`*`, `?`, `[abc]`, `{a,b}`, `**`; `*` never crosses `/`; backslash escapes).
    /// Without `/` it matches file names at any depth (like `fd -g`): `*.rs`. With `/` it
    /// matches the path relative to the search directory: `src/**/*.rs` (a leading `./` is
    /// ignored).
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// Directory to search, a zone root or a directory inside a zone. Default (absent or null):
    /// `/workspace`. The directory itself is never returned; a file yields no matches.
    #[serde(default)]
    #[schemars(length(min = 1, max = 4096))]
    pub path: Option<String>,
    /// Honour `.gitignore`, `.ignore` and git excludes, as ripgrep and fd do.
    #[serde(default = "default_true")]
    pub gitignore: bool,
    /// Include hidden files and directories (names starting with `.`).
    #[serde(default)]
    pub hidden: bool,
    /// What to return: `file` (regular files; the default, also for null), `dir` (directories)
    /// or `any` (also symlinks and other kinds). Symlinks are never followed.
    #[serde(default)]
    #[schemars(extend("enum" = ["file", "dir", "any", null]))]
    pub kind: Option<String>,
    /// Most paths to return. Default (absent or null) and maximum: `limits.glob_max_results`
    /// (1000 by default); larger values are refused with INVALID_ARGUMENT.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
}

/// One path found by `glob`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct GlobMatch {
    /// The virtual path found.
    pub path: String,
    /// Modification time in milliseconds since the Unix epoch.
    pub mtime_ms: i64,
}

/// Paths matching a glob, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct GlobResult {
    /// Matches sorted by modification time, newest first (ties by path), at most `limit`.
    pub matches: Vec<GlobMatch>,
    /// Number of matches found before the cap.
    pub total: usize,
    /// True when `total` is larger than the number of matches returned.
    pub truncated: bool,
    /// What the walk could not look at, and why: a directory that could not be read (a path
    /// longer than the kernel takes), a name that is not UTF-8 (escaped, as git quotes it).
    /// At most 100 are named. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<GrepSkip>,
    /// Number of paths not looked at (all of them; `skipped` names the first 100).
    #[serde(default)]
    pub skipped_total: usize,
}

/// How grep reports: `content` (matching lines with optional context, in `lines`), `files`
/// (paths of files with a match, in `files`) or `count` (matching lines per file, in
/// `counts`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GrepMode {
    /// Matching lines (with context lines when asked).
    #[default]
    Content,
    /// Paths of files with at least one match.
    Files,
    /// Number of matching lines per file.
    Count,
}

/// What `grep` looks for.
#[derive(Debug, Clone, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "GrepRequest")]
pub struct GrepOptions {
    /// A regular expression in Rust `regex` syntax (like ripgrep), matched line by line (a
    /// match never spans lines); with `literal`, a plain string.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// File or directory to search (a zone root or a path inside a zone). Default (absent or
    /// null): `/workspace`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 4096))]
    pub path: Option<String>,
    /// Treat `pattern` as a literal string, not a regex (ripgrep `-F`).
    #[serde(default)]
    pub literal: bool,
    /// Match case-insensitively (ripgrep `-i`).
    #[serde(default)]
    pub ignore_case: bool,
    /// Globs selecting the files to search, relative to the search directory, as ripgrep's
    /// `-g`: `*.rs` includes, `!target/**` excludes. null is refused; omit the field instead.
    #[serde(default)]
    pub glob: Vec<String>,
    /// ripgrep file types to search (`rust`, `py`, `js`, `md`, …), as `rg -t`. An unknown type
    /// is refused with INVALID_ARGUMENT. null is refused; omit the field instead.
    #[serde(default, rename = "type")]
    pub file_type: Vec<String>,
    /// Lines of context before and after each match (content mode only; `before`/`after`
    /// override it). At most 1000.
    #[serde(default)]
    #[schemars(range(max = 1000))]
    pub context: Option<usize>,
    /// Lines of context before each match (content mode only; overrides `context`). At most
    /// 1000.
    #[serde(default)]
    #[schemars(range(max = 1000))]
    pub before: Option<usize>,
    /// Lines of context after each match (content mode only; overrides `context`). At most
    /// 1000.
    #[serde(default)]
    #[schemars(range(max = 1000))]
    pub after: Option<usize>,
    /// Output mode (`content`, `files` or `count`); null is refused.
    #[serde(default)]
    pub mode: GrepMode,
    /// Most results: matching lines (content mode) or files (files and count modes). Default
    /// (absent or null) and maximum: `limits.grep_max_results` (1000 by default); larger values
    /// are refused with INVALID_ARGUMENT.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
    /// Honour `.gitignore`, `.ignore` and git excludes (ripgrep's default).
    #[serde(default = "default_true")]
    pub gitignore: bool,
    /// Search hidden files and directories too (ripgrep `--hidden`).
    #[serde(default)]
    pub hidden: bool,
}

/// Whether a grep line matched or is context around a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LineKind {
    Match,
    Context,
}

/// One line of `grep` output (content mode).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct GrepLine {
    /// Virtual path of the file.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line without its trailing newline (and `\r`); bytes that are not UTF-8 are replaced
    /// with U+FFFD. A line longer than 2048 bytes is cut there (never inside a UTF-8 character)
    /// and ends with `… [line cut: N more bytes]`.
    pub text: String,
    pub kind: LineKind,
}

/// Matching lines in one file (count mode).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct GrepCount {
    /// Virtual path of the file.
    pub path: String,
    /// Number of matching lines in the file.
    pub count: u64,
}

/// What grep found, sorted by path and line. Only the array of the requested mode is present,
/// and only when not empty.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema)]
pub struct GrepResult {
    pub mode: GrepMode,
    /// content mode: matching lines, with context lines when asked. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<GrepLine>,
    /// files mode: virtual paths of files with at least one match. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// count mode: matching lines per file. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<GrepCount>,
    /// Results in this answer: matching lines returned (content mode), files returned (files
    /// mode) or the sum of the returned counts (count mode). Counted after the cap, so it is not
    /// the number of matches in the whole tree when `truncated`.
    pub total: usize,
    /// Number of files opened and searched (binary files included; fewer than all when the cap
    /// stopped the search).
    pub files_searched: usize,
    /// True when the result cap (`limit`) stopped the search early: more matches may exist.
    /// Narrow the search or raise `limit` up to `limits.grep_max_results`.
    pub truncated: bool,
    /// Files not searched and the rule that kept each out: a file with a line longer than
    /// `limits.max_read_bytes`, a remote-zone file larger than `limits.max_read_bytes`, a
    /// directory that could not be read (a path longer than the kernel takes), a name that is
    /// not UTF-8 (escaped, as git quotes it). At most 100 are named. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<GrepSkip>,
    /// Number of files not searched (all of them; `skipped` names the first 100).
    #[serde(default)]
    pub skipped_total: usize,
}

/// A file `grep` did not search, and the rule that kept it out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct GrepSkip {
    /// Virtual path of the file.
    pub path: String,
    /// The rule that kept it out, naming its config key.
    pub reason: String,
}

/// Most skipped files named in one grep answer (the rest are only counted).
pub const MAX_SKIPPED_SHOWN: usize = 100;

/// Longest line text (bytes) one grep line carries; a longer line is cut and marked, so an
/// answer never holds a whole huge line.
pub const MAX_LINE_TEXT: usize = 2048;

/// Where a search starts: the zone, the start path, and their real paths.
struct Start<'z> {
    zone: &'z LocalZone,
    real: PathBuf,
}

impl Zones {
    fn search_start(&self, path: Option<&str>) -> FsResult<Start<'_>> {
        let vp = path::parse_in_zone(path.unwrap_or("/workspace"))?;
        let zone = self.local_of(&vp)?;
        // Resolve through the kernel, beneath the zone, then walk the real path it names.
        let fd = zone.open(&vp, OFlags::PATH)?;
        let real = LocalZone::fd_real_path(&fd)
            .map_err(|e| FsError::from_io(&vp.to_string(), "resolve", e))?;
        if !real.starts_with(zone.root()) {
            return Err(FsError::OutsideZone {
                path: vp.to_string(),
                rule: "it resolves outside the zone".into(),
            });
        }
        Ok(Start { zone, real })
    }

    /// Returns the virtual path of a real path found by a walk under the zone root.
    fn vpath_of(zone: &LocalZone, real: &Path) -> Option<String> {
        let rel = real.strip_prefix(zone.root()).ok()?.to_str()?;
        Some(if rel.is_empty() {
            format!("/{}", zone.id().name())
        } else {
            format!("/{}/{}", zone.id().name(), rel)
        })
    }

    /// Finds paths matching a glob, newest first.
    pub fn glob(&self, opts: &GlobOptions) -> FsResult<GlobResult> {
        let cap = self.limits.glob_max_results;
        let limit = checked_limit(opts.limit, cap, "limit")?;
        if opts.pattern.is_empty() {
            return Err(FsError::invalid("pattern", "must not be empty"));
        }
        let want = match opts.kind.as_deref() {
            None | Some("file") => Some(EntryKind::File),
            Some("dir") => Some(EntryKind::Dir),
            Some("any") => None,
            Some(other) => {
                return Err(FsError::invalid(
                    "kind",
                    format!("{other:?} is not one of file, dir, any"),
                ))
            }
        };
        let full_path = opts.pattern.contains('/');
        let skips = Skips::default();
        let pattern = opts.pattern.trim_start_matches("./");
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| FsError::invalid("pattern", format!("{:?}: {}", opts.pattern, e.kind())))?
            .compile_matcher();
        let vp = path::parse_in_zone(opts.path.as_deref().unwrap_or("/workspace"))?;
        let mut matches = if let Some(r) = self.remote(&vp) {
            remote_entries(r, &vp, opts.hidden)?
                .into_iter()
                .filter(|(rel, meta)| {
                    want.is_none_or(|w| w == meta.kind)
                        && if full_path {
                            matcher.is_match(rel)
                        } else {
                            matcher.is_match(rel.rsplit('/').next().unwrap_or(rel))
                        }
                })
                .map(|(rel, meta)| GlobMatch {
                    path: format!("{}/{rel}", vp.to_string().trim_end_matches('/')),
                    mtime_ms: super::sandbox_zone::mtime_ms(&meta),
                })
                .collect()
        } else {
            self.local_glob(opts, &matcher, want, full_path, &skips)?
        };
        let (skipped, skipped_total) = skips.take();
        let total = matches.len();
        matches.sort_unstable_by(|a, b| {
            b.mtime_ms
                .cmp(&a.mtime_ms)
                .then_with(|| a.path.cmp(&b.path))
        });
        matches.truncate(limit);
        Ok(GlobResult {
            truncated: total > matches.len(),
            matches,
            total,
            skipped,
            skipped_total,
        })
    }

    fn local_glob(
        &self,
        opts: &GlobOptions,
        matcher: &globset::GlobMatcher,
        want: Option<EntryKind>,
        full_path: bool,
        skips: &Skips,
    ) -> FsResult<Vec<GlobMatch>> {
        let start = self.search_start(opts.path.as_deref())?;
        let found: Mutex<Vec<GlobMatch>> = Mutex::new(Vec::new());
        let walker = walker(&start.real, opts.gitignore, opts.hidden).build_parallel();
        let mut builder = GlobVisitors {
            found: &found,
            skips,
            matcher,
            start: &start,
            want,
            full_path,
        };
        walker.visit(&mut builder);
        Ok(found.into_inner().expect("not poisoned"))
    }

    /// Searches file contents with a regex or literal.
    pub fn grep(&self, opts: &GrepOptions) -> FsResult<GrepResult> {
        let limit = checked_limit(opts.limit, self.limits.grep_max_results, "limit")?;
        if opts.pattern.is_empty() {
            return Err(FsError::invalid("pattern", "must not be empty"));
        }
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(opts.ignore_case)
            .fixed_strings(opts.literal)
            .line_terminator(Some(b'\n'))
            .build(&opts.pattern)
            .map_err(|e| FsError::invalid("pattern", e.to_string()))?;
        for (name, v) in [
            ("context", opts.context),
            ("before", opts.before),
            ("after", opts.after),
        ] {
            if v.is_some_and(|v| v > 1000) {
                return Err(FsError::invalid(name, "must be at most 1000 lines"));
            }
        }
        let before = opts.before.or(opts.context).unwrap_or(0);
        let after = opts.after.or(opts.context).unwrap_or(0);
        let mode = opts.mode;
        // The searcher's line buffer grows to hold the longest line; `max_read_bytes` bounds it
        // (a 1 GiB file without a newline is skipped, not held), so each search thread holds at
        // most that much.
        let heap = usize::try_from(self.limits.max_read_bytes)
            .unwrap_or(usize::MAX)
            .max(MIN_LINE_BUFFER);
        let searcher = || {
            SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .line_number(true)
                .heap_limit(Some(heap))
                .before_context(if mode == GrepMode::Content { before } else { 0 })
                .after_context(if mode == GrepMode::Content { after } else { 0 })
                .build()
        };
        let shared = Shared::new(limit, self.limits.max_read_bytes as usize);
        let vp = path::parse_in_zone(opts.path.as_deref().unwrap_or("/workspace"))?;
        if let Some(r) = self.remote(&vp) {
            self.remote_grep(r, &vp, opts, &matcher, searcher(), &shared)?;
            return Ok(assemble(shared, opts.mode));
        }
        let start = self.search_start(opts.path.as_deref())?;
        let mut wb = walker(&start.real, opts.gitignore, opts.hidden);
        let filter = file_filter(&start.real, opts)?;
        let (overrides, types) = filter;
        if let Some(o) = overrides {
            wb.overrides(o);
        }
        if let Some(t) = types {
            wb.types(t);
        }
        wb.build_parallel().run(|| {
            let mut searcher = searcher();
            let matcher = matcher.clone();
            let shared = &shared;
            let zone = start.zone;
            Box::new(move |entry| {
                if shared.stopped() {
                    return WalkState::Quit;
                }
                let Some((entry, vpath)) = shared.skips.check(zone, entry) else {
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let rel = &vpath[zone.id().name().len() + 2..];
                let fd = match openat2_beneath(
                    zone.dirfd(),
                    rel,
                    OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
                    Mode::empty(),
                ) {
                    Ok(fd) => fd,
                    // Gone meanwhile: nothing to name.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return WalkState::Continue
                    }
                    Err(e) => {
                        shared.skip(vpath, format!("could not be opened: {e}"));
                        return WalkState::Continue;
                    }
                };
                let file = std::fs::File::from(fd);
                shared.searched.fetch_add(1, Ordering::Relaxed);
                match search_one(&mut searcher, &matcher, &file, vpath, mode, shared) {
                    true => WalkState::Continue,
                    false => WalkState::Quit,
                }
            })
        });
        Ok(assemble(shared, mode))
    }

    /// Greps a remote zone: its walk, then each file streamed into a local spool file and
    /// searched there (never a whole file in memory); files over `limits.max_read_bytes` are
    /// skipped and named.
    fn remote_grep(
        &self,
        r: &SandboxZone,
        vp: &super::VPath,
        opts: &GrepOptions,
        matcher: &grep_regex::RegexMatcher,
        mut searcher: Searcher,
        shared: &Shared,
    ) -> FsResult<()> {
        let base = Path::new("/");
        let (overrides, types) = file_filter(base, opts)?;
        let meta = r.stat(vp)?;
        let files: Vec<(String, u64)> = if meta.kind == EntryKind::File {
            vec![(String::new(), meta.size)]
        } else {
            remote_entries(r, vp, opts.hidden)?
                .into_iter()
                .filter(|(rel, m)| {
                    m.kind == EntryKind::File
                        && overrides
                            .as_ref()
                            .is_none_or(|o| !o.matched(base.join(rel), false).is_ignore())
                        && types
                            .as_ref()
                            .is_none_or(|t| !t.matched(base.join(rel), false).is_ignore())
                })
                .map(|(rel, m)| (rel, m.size))
                .collect()
        };
        // In path order, so a capped answer is the same whatever order the sandbox listed.
        let mut files = files;
        files.sort_unstable();
        for (rel, size) in files {
            let fvp = if rel.is_empty() {
                vp.clone()
            } else {
                vp.join(&rel)?
            };
            if size > self.limits.max_read_bytes {
                shared.skip(
                    fvp.to_string(),
                    format!(
                        "the remote file is {size} bytes, over limits.max_read_bytes ({})",
                        self.limits.max_read_bytes
                    ),
                );
                continue;
            }
            let spool = r
                .spool_file()
                .map_err(|e| FsError::from_io(&fvp.to_string(), "spool", e))?;
            match r.download(&fvp, &spool, size) {
                Ok(_) => {}
                Err(FsError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            }
            shared.searched.fetch_add(1, Ordering::Relaxed);
            if !search_one(
                &mut searcher,
                matcher,
                &spool,
                fvp.to_string(),
                opts.mode,
                shared,
            ) {
                break;
            }
        }
        Ok(())
    }
}

/// Searches one open file and hands its results over; returns false once the search should
/// stop (the cap is reached).
fn search_one(
    searcher: &mut Searcher,
    matcher: &grep_regex::RegexMatcher,
    file: &std::fs::File,
    vpath: String,
    mode: GrepMode,
    shared: &Shared,
) -> bool {
    let mut sink = FileSink {
        mode,
        path: vpath,
        lines: Vec::new(),
        count: 0,
        binary: false,
        cap: shared.limit,
        guard: shared.guard.clone(),
    };
    if let Err(e) = searcher.search_file(matcher, file, &mut sink) {
        // grep-searcher reports its heap limit only as an `io::Error` with this text.
        let reason = if e.to_string().contains("allocation limit") {
            format!(
                "a line is longer than limits.max_read_bytes ({} bytes)",
                sink.guard.text_cap
            )
        } else {
            format!("cannot be read: {e}")
        };
        shared.skip(sink.path, reason);
        return !shared.stopped();
    }
    if sink.binary || sink.count == 0 {
        return !shared.stopped();
    }
    shared.add(sink)
}

/// Smallest line buffer the searcher gets, whatever `max_read_bytes` says.
const MIN_LINE_BUFFER: usize = 64 << 10;

/// The glob and type filters of a grep, for paths under `root`.
type FileFilter = (
    Option<ignore::overrides::Override>,
    Option<ignore::types::Types>,
);

fn file_filter(root: &Path, opts: &GrepOptions) -> FsResult<FileFilter> {
    let overrides = if opts.glob.is_empty() {
        None
    } else {
        let mut ob = OverrideBuilder::new(root);
        for g in &opts.glob {
            ob.add(g)
                .map_err(|e| FsError::invalid("glob", format!("{g:?}: {e}")))?;
        }
        Some(
            ob.build()
                .map_err(|e| FsError::invalid("glob", e.to_string()))?,
        )
    };
    let types = if opts.file_type.is_empty() {
        None
    } else {
        let mut tb = TypesBuilder::new();
        tb.add_defaults();
        for t in &opts.file_type {
            tb.select(t);
        }
        Some(
            tb.build()
                .map_err(|e| FsError::invalid("type", e.to_string()))?,
        )
    };
    Ok((overrides, types))
}

/// Everything beneath a remote directory, as (path relative to it, metadata); hidden entries
/// (a component starting with `.`) are left out unless asked for. `.gitignore` files are not read
/// in a remote zone.
fn remote_entries(
    r: &SandboxZone,
    vp: &super::VPath,
    hidden: bool,
) -> FsResult<Vec<(String, super::provider::RemoteMeta)>> {
    Ok(r.walk(vp)?
        .into_iter()
        .filter(|e| !e.path.is_empty())
        .filter(|e| hidden || !e.path.split('/').any(|c| c.starts_with('.')))
        .map(|e| (e.path, e.meta))
        .collect())
}

/// Sorts and trims the per-file results of a grep into its answer.
fn assemble(shared: Shared, mode: GrepMode) -> GrepResult {
    let limit = shared.limit;
    let (skipped, skipped_total) = shared.skips.take();
    let mut files = shared.results.into_inner().expect("not poisoned");
    files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let mut out = GrepResult {
        mode,
        total: 0,
        files_searched: shared.searched.load(Ordering::Relaxed),
        truncated: shared.guard.stop.load(Ordering::Relaxed),
        skipped,
        skipped_total,
        ..Default::default()
    };
    {
        // Trim to the cap deterministically (the walk may have overshot in parallel).
        let mut budget = limit;
        for f in files {
            if budget == 0 {
                out.truncated = true;
                break;
            }
            match mode {
                GrepMode::Files => {
                    out.files.push(f.path);
                    budget -= 1;
                    out.total += 1;
                }
                GrepMode::Count => {
                    out.counts.push(GrepCount {
                        path: f.path,
                        count: f.count,
                    });
                    budget -= 1;
                    out.total += f.count as usize;
                }
                GrepMode::Content => {
                    let mut kept = Vec::with_capacity(f.lines.len());
                    for l in f.lines {
                        if l.kind == LineKind::Match {
                            if budget == 0 {
                                out.truncated = true;
                                break;
                            }
                            budget -= 1;
                            out.total += 1;
                        }
                        kept.push(l);
                    }
                    // Drop trailing context of a match that was cut.
                    while kept.last().is_some_and(|l| l.kind == LineKind::Context)
                        && budget == 0
                        && out.truncated
                    {
                        kept.pop();
                    }
                    out.lines.extend(kept);
                }
            }
        }
    }
    out
}

/// Builds one glob visitor per walker thread.
struct GlobVisitors<'a> {
    found: &'a Mutex<Vec<GlobMatch>>,
    skips: &'a Skips,
    matcher: &'a globset::GlobMatcher,
    start: &'a Start<'a>,
    want: Option<EntryKind>,
    full_path: bool,
}

impl<'s> ParallelVisitorBuilder<'s> for GlobVisitors<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(GlobVisitor {
            found: self.found,
            skips: self.skips,
            matcher: self.matcher,
            start: self.start,
            want: self.want,
            full_path: self.full_path,
            local: Vec::new(),
        })
    }
}

/// One walker thread's glob matching; its matches are handed over when the thread is done.
struct GlobVisitor<'a> {
    found: &'a Mutex<Vec<GlobMatch>>,
    skips: &'a Skips,
    matcher: &'a globset::GlobMatcher,
    start: &'a Start<'a>,
    want: Option<EntryKind>,
    full_path: bool,
    local: Vec<GlobMatch>,
}

impl Drop for GlobVisitor<'_> {
    fn drop(&mut self) {
        self.found
            .lock()
            .expect("not poisoned")
            .append(&mut self.local);
    }
}

impl ParallelVisitor for GlobVisitor<'_> {
    fn visit(&mut self, entry: Result<ignore::DirEntry, ignore::Error>) -> WalkState {
        use std::os::unix::fs::MetadataExt;
        let Some((entry, path)) = self.skips.check(self.start.zone, entry) else {
            return WalkState::Continue;
        };
        if entry.depth() == 0 {
            return WalkState::Continue;
        }
        let kind = match entry.file_type() {
            Some(t) if t.is_file() => EntryKind::File,
            Some(t) if t.is_dir() => EntryKind::Dir,
            Some(t) if t.is_symlink() => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        if self.want.is_some_and(|w| w != kind) {
            return WalkState::Continue;
        }
        let hit = if self.full_path {
            entry
                .path()
                .strip_prefix(&self.start.real)
                .is_ok_and(|rel| self.matcher.is_match(rel))
        } else {
            self.matcher.is_match(Path::new(entry.file_name()))
        };
        if hit {
            if let Ok(md) = entry.metadata() {
                self.local.push(GlobMatch {
                    path,
                    mtime_ms: md.mtime() * 1000 + md.mtime_nsec() / 1_000_000,
                });
            }
        }
        WalkState::Continue
    }
}

/// What a search or glob did not look at: the first [`MAX_SKIPPED_SHOWN`] named, all counted.
#[derive(Default)]
struct Skips {
    named: Mutex<Vec<GrepSkip>>,
    total: AtomicUsize,
}

impl Skips {
    fn add(&self, path: String, reason: String) {
        if self.total.fetch_add(1, Ordering::Relaxed) < MAX_SKIPPED_SHOWN {
            self.named
                .lock()
                .expect("not poisoned")
                .push(GrepSkip { path, reason });
        }
    }

    /// Notes what a walk entry that could not be looked at is: an error (a directory that could
    /// not be read) or a name that is not UTF-8. Returns the entry's virtual path otherwise.
    fn check(
        &self,
        zone: &LocalZone,
        entry: Result<ignore::DirEntry, ignore::Error>,
    ) -> Option<(ignore::DirEntry, String)> {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = error_path(&e).map_or_else(String::new, |p| shown_path(zone, p));
                self.add(path, format!("could not be read: {e}"));
                return None;
            }
        };
        match Zones::vpath_of(zone, entry.path()) {
            Some(vpath) => Some((entry, vpath)),
            None => {
                self.add(
                    shown_path(zone, entry.path()),
                    "a name that is not UTF-8 (every wardfs path is)".into(),
                );
                None
            }
        }
    }

    /// The named skips, sorted, and the count.
    fn take(self) -> (Vec<GrepSkip>, usize) {
        let mut named = self.named.into_inner().expect("not poisoned");
        named.sort_by(|a, b| a.path.cmp(&b.path));
        (named, self.total.into_inner())
    }
}

/// The path a walk error names, if any.
fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        ignore::Error::Loop { child, .. } => Some(child),
        _ => None,
    }
}

/// `real` (beneath `zone`'s root) as a person reads it: its virtual path, with a name that is
/// not UTF-8 escaped as git quotes it.
fn shown_path(zone: &LocalZone, real: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let rel = real.strip_prefix(zone.root()).unwrap_or(real).as_os_str();
    let rel = super::text::name_bytes(rel.as_bytes());
    format!("/{}/{rel}", zone.id().name())
}

/// State shared by the search threads.
struct Shared {
    results: Mutex<Vec<FileSink>>,
    total: AtomicUsize,
    searched: AtomicUsize,
    skips: Skips,
    guard: Arc<Guard>,
    limit: usize,
}

/// What every sink checks before it keeps a line: whether the search was stopped, and how much
/// line text the answer already holds (context lines are not counted by `limit`, so without
/// this a wide context could hold millions of lines).
struct Guard {
    stop: AtomicBool,
    text: AtomicUsize,
    text_cap: usize,
}

impl Guard {
    /// Reserves `n` bytes of line text; false (and the search stops) when the answer is full.
    fn take_text(&self, n: usize) -> bool {
        if self.text.fetch_add(n, Ordering::Relaxed) + n > self.text_cap {
            self.stop.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

impl Shared {
    fn new(limit: usize, text_cap: usize) -> Shared {
        Shared {
            results: Mutex::new(Vec::new()),
            total: AtomicUsize::new(0),
            searched: AtomicUsize::new(0),
            skips: Skips::default(),
            guard: Arc::new(Guard {
                stop: AtomicBool::new(false),
                text: AtomicUsize::new(0),
                text_cap,
            }),
            limit,
        }
    }

    fn stopped(&self) -> bool {
        self.guard.stop.load(Ordering::Relaxed)
    }

    /// Counts a file that was not searched; the first few are named.
    fn skip(&self, path: String, reason: String) {
        self.skips.add(path, reason);
    }

    /// Adds one file's results; returns false once the cap is reached.
    fn add(&self, sink: FileSink) -> bool {
        let n = match sink.mode {
            GrepMode::Content => sink.count as usize,
            GrepMode::Files | GrepMode::Count => 1,
        };
        let before = self.total.fetch_add(n, Ordering::Relaxed);
        if before >= self.limit {
            self.guard.stop.store(true, Ordering::Relaxed);
            return false;
        }
        self.results.lock().expect("not poisoned").push(sink);
        if before + n >= self.limit {
            self.guard.stop.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// Collects one file's results; discards them when the file turns out to be binary. It stops
/// the file's search once it holds `cap` matching lines (the answer never needs more) or the
/// search was stopped, so a file of a million matches costs `cap` lines, not a million.
struct FileSink {
    mode: GrepMode,
    path: String,
    lines: Vec<GrepLine>,
    count: u64,
    binary: bool,
    cap: usize,
    guard: Arc<Guard>,
}

/// The text of a line as reported: its terminator dropped, invalid UTF-8 replaced, and cut at
/// [`MAX_LINE_TEXT`] bytes with a marker saying how much was left out.
fn line_text(bytes: &[u8]) -> String {
    let b = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let b = b.strip_suffix(b"\r").unwrap_or(b);
    if b.len() <= MAX_LINE_TEXT {
        return String::from_utf8_lossy(b).into_owned();
    }
    // Cut before a UTF-8 continuation byte, so a character is not split.
    let mut cut = MAX_LINE_TEXT;
    while cut > 0 && b[cut] & 0xC0 == 0x80 {
        cut -= 1;
    }
    format!(
        "{}… [line cut: {} more bytes]",
        String::from_utf8_lossy(&b[..cut]),
        b.len() - cut
    )
}

impl FileSink {
    /// Keeps a line when the answer has room for its text; false stops this file's search.
    fn keep(&mut self, line: u64, bytes: &[u8], kind: LineKind) -> bool {
        let text = line_text(bytes);
        if !self.guard.take_text(text.len()) {
            return false;
        }
        self.lines.push(GrepLine {
            path: self.path.clone(),
            line,
            text,
            kind,
        });
        true
    }
}

impl Sink for FileSink {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.guard.stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        match self.mode {
            GrepMode::Files => {
                self.count += 1;
                Ok(false)
            }
            GrepMode::Count => {
                self.count += 1;
                Ok(true)
            }
            GrepMode::Content => {
                if !self.keep(m.line_number().unwrap_or(0), m.bytes(), LineKind::Match) {
                    return Ok(false);
                }
                self.count += 1;
                Ok((self.count as usize) < self.cap)
            }
        }
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        Ok(self.keep(c.line_number().unwrap_or(0), c.bytes(), LineKind::Context))
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

fn checked_limit(given: Option<usize>, cap: usize, name: &str) -> FsResult<usize> {
    match given {
        None => Ok(cap),
        Some(0) => Err(FsError::invalid(name, "must be at least 1")),
        Some(n) if n > cap => Err(FsError::invalid(
            name,
            format!("{n} is over the configured maximum of {cap}"),
        )),
        Some(n) => Ok(n),
    }
}

fn walker(root: &Path, gitignore: bool, hidden: bool) -> WalkBuilder {
    let mut wb = WalkBuilder::new(root);
    wb.hidden(!hidden)
        .git_ignore(gitignore)
        .git_global(gitignore)
        .git_exclude(gitignore)
        .ignore(gitignore)
        .parents(gitignore)
        .follow_links(false)
        .threads(std::thread::available_parallelism().map_or(2, |n| n.get()));
    wb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_with_a_marker_and_never_inside_a_character() {
        assert_eq!(line_text(b"short\r\n"), "short");
        let long = "é".repeat(MAX_LINE_TEXT); // 2 bytes each
        let text = line_text(long.as_bytes());
        assert!(text.len() < MAX_LINE_TEXT + 64, "{}", text.len());
        assert!(text.ends_with(&format!("… [line cut: {} more bytes]", MAX_LINE_TEXT)));
        assert!(!text.contains('\u{fffd}'), "a character was split");
    }

    #[test]
    fn a_sink_stops_at_its_cap_and_at_the_text_budget() {
        // Fresh each time, at offset 0 (a search reads from the file's offset).
        let lines = || {
            let file = tempfile::tempfile().unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, "a\n".repeat(10_000).as_bytes(), 0)
                .unwrap();
            file
        };
        let matcher = RegexMatcherBuilder::new().build("a").unwrap();
        let mut searcher = SearcherBuilder::new().line_number(true).build();
        let shared = Shared::new(5, 1 << 20);
        assert!(!search_one(
            &mut searcher,
            &matcher,
            &lines(),
            "/workspace/a".into(),
            GrepMode::Content,
            &shared
        ));
        let r = assemble(shared, GrepMode::Content);
        assert_eq!((r.lines.len(), r.total, r.truncated), (5, 5, true));
        // Text budget of 3 bytes: three one-byte lines fit, the fourth stops the search.
        let shared = Shared::new(100, 3);
        search_one(
            &mut searcher,
            &matcher,
            &lines(),
            "/workspace/a".into(),
            GrepMode::Content,
            &shared,
        );
        let r = assemble(shared, GrepMode::Content);
        assert_eq!((r.lines.len(), r.truncated), (3, true));
    }
}
