//! The file routes under `/v1/fs`: thin calls into the core on the blocking pool.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::body::{drain, expects_continue, not_json, JsonBody, JsonBytes};
use super::error::ApiError;
use super::json_string::decode_in_place;
use super::openapi::{route, Route};
use super::peer::Peer;
use super::AppState;
use crate::core::ErrorCode::{self, *};
use crate::core::{FsError, FsResult, GlobOptions, GrepOptions, Zones};
use crate::state::{Origin, Via};

type AppResult<T> = Result<Json<T>, ApiError>;

/// What every route naming a path can answer: a malformed path or one leaving its zone, the
/// system refusing, a zone switched off, or served from a sandbox that cannot be reached or
/// refuses the token.
const PATH: &[ErrorCode] = &[
    InvalidPath,
    OutsideZone,
    PermissionDenied,
    ZoneUnavailable,
    SandboxUnavailable,
    AuthFailed,
];

/// What a route changing a zone can answer besides [`PATH`].
const CHANGE: &[ErrorCode] = &[ReadOnly, NoSpace];

/// The file and search routes.
pub(super) fn routes() -> Vec<Route> {
    [content_reads(), content_writes(), entries(), lookups()]
        .into_iter()
        .flatten()
        .collect()
}

/// The routes reading a file's content: as text, or as raw bytes.
fn content_reads() -> Vec<Route> {
    vec![
        route!(
            /// Read a text file, whole or a window of lines
            ///
            /// Returns a UTF-8 text file's content with its line count. Without `offset`/`limit`
            /// the whole file is returned. With them, `content` holds `limit` lines starting at
            /// 1-based line `offset`; when `truncated` is true, continue with `offset` + `lines`.
            /// Files up to `limits.max_read_bytes` (10 MiB by default) can be read whole; a larger
            /// file needs `limit`, and the lines requested must themselves fit in
            /// `limits.max_read_bytes`, else TOO_LARGE. A file with a NUL byte in its first 8 KiB
            /// or with invalid UTF-8 gives BINARY: fetch its bytes with GET /v1/fs/raw instead.
            /// Symlinks are followed while they stay inside the zone. INVALID_ARGUMENT also for
            /// `offset` or `limit` of 0 and a path that is not a regular file.
            "read": POST "/v1/fs/read" => read
        )
        .errors(PATH)
        .errors(&[NotFound, IsDir, NotDir, Binary]),
        route!(
            /// Download a file's raw bytes
            ///
            /// Streams the bytes of any regular file (text or binary) as
            /// `application/octet-stream`, with `Content-Length` set. No size limit applies
            /// (`limits.max_read_bytes` is for the JSON read). Symlinks are followed while they
            /// stay inside the zone. INVALID_ARGUMENT for a bad or missing `?path=`, an unknown
            /// query parameter, or a path that is not a regular file.
            "readRaw": GET "/v1/fs/raw" => raw_get
        )
        .query::<RawRead>()
        .content(
            "application/octet-stream",
            json!({ "type": "string", "format": "binary" }),
        )
        .errors(PATH)
        .errors(&[InvalidArgument, NotFound, IsDir, NotDir]),
    ]
}

/// The routes replacing a file's content: raw bytes, text, or an exact string in it.
fn content_writes() -> Vec<Route> {
    vec![
        route!(
            /// Upload a file's raw bytes (atomic replace)
            ///
            /// Replaces (or creates) a file with the request body's bytes, streamed, whatever the
            /// Content-Type. The write is atomic: the bytes go to a temp file beside the
            /// destination, renamed over it once complete, so readers never see a partial file
            /// and a failed upload leaves the old file untouched. Missing parent directories are
            /// created; a symlink in the last component is followed while it stays inside the
            /// zone; an existing file keeps its permission bits. The body may be at most
            /// `limits.max_write_bytes` (100 MiB by default), else TOO_LARGE and nothing changes.
            /// `Expect: 100-continue` is honoured, so a refused upload is not sent. The change is
            /// recorded in the journal (GET /v1/log). NOT_FOUND is rare (a parent removed
            /// meanwhile).
            "writeRaw": PUT "/v1/fs/raw" => raw_put
        )
        .query::<RawWrite>()
        .body(
            "application/octet-stream",
            json!({ "type": "string", "format": "binary" }),
            "The file's complete new contents, any bytes. An empty (or absent) body writes an \
             empty file.",
        )
        .errors(PATH)
        .errors(CHANGE)
        .errors(&[InvalidArgument, NotFound, IsDir, NotDir, TooLarge]),
        route!(
            /// Write a whole text file (atomic replace)
            ///
            /// Replaces (or creates) a file with `content`. The write is atomic (temp file renamed
            /// over the destination): readers never see a partial file, and a failure leaves the
            /// old contents. Missing parent directories are created; a symlink in the last
            /// component is followed while it stays inside the zone; an existing file keeps its
            /// permission bits (new files get 0666 minus the daemon's umask). `content` may be at
            /// most `limits.max_write_bytes` bytes (100 MiB by default), else TOO_LARGE. For
            /// binary data use PUT /v1/fs/raw; to change part of a file use POST /v1/fs/edit. The
            /// change is recorded in the journal. NOT_FOUND is rare (a parent removed meanwhile).
            "write": POST "/v1/fs/write" => write
        )
        .errors(PATH)
        .errors(CHANGE)
        .errors(&[NotFound, IsDir, NotDir]),
        route!(
            /// Replace an exact string in a text file
            ///
            /// Replaces the exact text `old` with `new` in a UTF-8 text file. `old` must occur
            /// exactly once (NO_MATCH if it does not occur, NOT_UNIQUE with the count if it occurs
            /// more often) unless `replace_all` is true, which replaces every occurrence. Include
            /// enough surrounding text in `old` to make it unique. The edit is atomic against
            /// concurrent writers: if the file changes between reading and replacing it, nothing
            /// is written and CONFLICT is returned; read it again and retry. The file must be at
            /// most `limits.max_read_bytes` (10 MiB by default) and the result at most
            /// `limits.max_write_bytes`, else TOO_LARGE; a binary file gives BINARY.
            /// INVALID_ARGUMENT also for an empty `old` or `new` equal to `old`.
            "edit": POST "/v1/fs/edit" => edit
        )
        .errors(PATH)
        .errors(CHANGE)
        .errors(&[
            NotFound, IsDir, NotDir, Conflict, NoMatch, NotUnique, Binary,
        ]),
    ]
}

/// The routes on entries themselves: delete, look at, create and move them.
fn entries() -> Vec<Route> {
    vec![
        route!(
            /// Delete a file, symlink or directory
            ///
            /// Deletes the entry at `path`. A symlink is removed itself, never its target. A
            /// directory is deleted only when empty (else NOT_EMPTY), or with `recursive`
            /// (everything beneath it, never following symlinks). Zone roots cannot be deleted.
            /// The change is recorded in the journal.
            "delete": POST "/v1/fs/delete" => delete
        )
        .errors(PATH)
        .errors(&[ReadOnly, NotFound, NotEmpty, NotDir]),
        route!(
            /// Check whether a path exists
            ///
            /// `kind` is present only when the path exists. A symlink in the last component is
            /// not followed (a dangling symlink exists). `/` and the zone roots exist. A missing
            /// path, or one whose parent is a file, is not an error: `exists` is false.
            "exists": POST "/v1/fs/exists" => exists
        )
        .errors(PATH),
        route!(
            /// List a directory
            ///
            /// One entry per name, sorted by name, hidden entries included, not recursive (use
            /// POST /v1/fs/glob to find files in a tree). `/` lists the available zones. A symlink
            /// to a directory inside the zone can be listed; entries that are symlinks are
            /// reported as `symlink`.
            "list": POST "/v1/fs/list" => list
        )
        .errors(PATH)
        .errors(&[NotFound, NotDir]),
        route!(
            /// Get a path's metadata
            ///
            /// Does not follow a symlink in the last component; `target` (the link's stored
            /// target) is present only for symlinks. `/` is described as a read-only directory.
            "stat": POST "/v1/fs/stat" => stat
        )
        .errors(PATH)
        .errors(&[NotFound, NotDir]),
        route!(
            /// Create a directory
            ///
            /// Without `parents` the parent must exist (NOT_FOUND) and nothing may exist at the
            /// path (EXISTS). With `parents`, missing parents are created and an existing
            /// directory is success (like `mkdir -p`); an existing non-directory still gives
            /// EXISTS. The change is recorded in the journal.
            "mkdir": POST "/v1/fs/mkdir" => mkdir
        )
        .errors(PATH)
        .errors(CHANGE)
        .errors(&[NotFound, Exists, NotDir]),
        route!(
            /// Move or rename a file or directory
            ///
            /// Moves `from` to `to`. Missing parent directories of `to` are created. Without
            /// `overwrite`, an existing `to` gives EXISTS; with it, an existing file or empty
            /// directory is replaced (a non-empty directory still gives EXISTS). Within one
            /// filesystem the move is a single atomic rename. Between zones on different
            /// filesystems only regular files can move: they are copied atomically (subject to
            /// `limits.max_write_bytes`, else TOO_LARGE) and the source removed. A directory
            /// cannot move into itself. The change is recorded in the journal. INVALID_ARGUMENT
            /// also for a zone root, `to` inside `from`, or a non-file across filesystems;
            /// NOT_FOUND when `from` is missing.
            "move": POST "/v1/fs/move" => rename
        )
        .errors(PATH)
        .errors(CHANGE)
        .errors(&[NotFound, Exists, IsDir, NotDir]),
    ]
}

/// The routes finding files, by name or by content, and the host path behind one.
fn lookups() -> Vec<Route> {
    vec![
        route!(
            /// Find paths by glob pattern, newest first
            ///
            /// Walks a directory tree (the `ignore` crate, as fd and ripgrep) and returns the
            /// paths matching `pattern`, sorted by modification time, newest first. By default
            /// only regular files are returned, hidden files are skipped, `.gitignore`/`.ignore`
            /// are honoured and symlinks are not followed. At most `limit` paths are returned
            /// (default and maximum `limits.glob_max_results`, 1000 by default); `total` counts
            /// every match and `truncated` says some were left out. INVALID_ARGUMENT also for an
            /// empty or invalid pattern, a bad `kind`, a `limit` of 0 or over the maximum, and `/`
            /// as path; NOT_FOUND when the search directory is missing.
            "glob": POST "/v1/fs/glob" => glob
        )
        .errors(PATH)
        .errors(&[NotFound, NotDir]),
        route!(
            /// Search file contents with a regex (ripgrep)
            ///
            /// Searches file contents with ripgrep's engine, sorted by path and line number.
            /// `mode` chooses the output: `content` (matching lines, plus
            /// `context`/`before`/`after` lines), `files` (paths of files with a match) or `count`
            /// (matching lines per file). Like ripgrep, hidden files are skipped,
            /// `.gitignore`/`.ignore` are honoured, binary files (a NUL byte) are skipped and
            /// symlinks are not followed; a file with a line longer than `limits.max_read_bytes`
            /// is skipped (named in `skipped`); a reported line is cut at 2048 bytes; `glob` and
            /// `type` select files as `rg -g` and `rg -t`. Results are capped by `limit` (default
            /// and maximum `limits.grep_max_results`, 1000 by default), counting matching lines in
            /// content mode and files in files and count modes; when `truncated` is true the search
            /// stopped early and more matches exist: narrow `path`, `glob` or `pattern`.
            /// INVALID_ARGUMENT also for an empty or invalid regex, a bad glob or type, a `limit`
            /// of 0 or over the maximum, context over 1000, and `/` as path; NOT_FOUND when the
            /// search path is missing.
            "grep": POST "/v1/fs/grep" => grep
        )
        .errors(PATH)
        .errors(&[NotFound, NotDir]),
        route!(
            /// Get the host path behind a virtual path
            ///
            /// The absolute host path of a virtual path, for tools that run outside wardfs
            /// (compilers, editors). An existing path is resolved by the kernel beneath the zone
            /// (symlinks inside the zone followed); a missing path is reported with `exists:
            /// false` as long as its parent directory exists (else NOT_FOUND). A zone root is
            /// accepted; `/` is not.
            "resolve": POST "/v1/fs/resolve" => resolve
        )
        .errors(PATH)
        .errors(&[NotFound, NotDir]),
    ]
}

pub(super) fn origin(peer: Peer) -> Origin {
    Origin {
        via: Via::Api,
        pid: peer.pid,
        uid: Some(peer.uid),
    }
}

/// Runs a core call on the blocking pool.
async fn blocking<T, F>(app: &Arc<AppState>, f: F) -> AppResult<T>
where
    T: Send + 'static,
    F: FnOnce(&Zones) -> FsResult<T> + Send + 'static,
{
    let zones = app.zones.clone();
    tokio::task::spawn_blocking(move || f(&zones))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(format!("worker failed: {e}"))))?
        .map(Json)
        .map_err(ApiError::Fs)
}

/// What to read: a whole text file, or a window of its lines.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ReadRequest")]
struct ReadReq {
    /// The file's virtual path, e.g. `/workspace/notes.md`. Symlinks inside the zone are
    /// followed.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// 1-based number of the first line to return. Default (absent or null): 1. 0 is refused
    /// with INVALID_ARGUMENT.
    #[schemars(range(min = 1))]
    offset: Option<u64>,
    /// Most lines to return. Default (absent or null): every line to the end of the file. 0 is
    /// refused with INVALID_ARGUMENT. Required to read a file larger than
    /// `limits.max_read_bytes`.
    #[schemars(range(min = 1))]
    limit: Option<u64>,
}

async fn read(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<ReadReq>,
) -> AppResult<crate::core::ReadResult> {
    blocking(&app, move |z| z.read(&r.path, r.offset, r.limit)).await
}

/// The query of `GET /v1/fs/raw`.
#[derive(schemars::JsonSchema)]
struct RawRead {
    /// The file's virtual path, percent-encoded (`+` decodes to a space), e.g.
    /// `/workspace/images/logo.png`. It must be valid UTF-8 after decoding. `path` is the only
    /// parameter accepted; any other gives INVALID_ARGUMENT.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
}

/// The query of `PUT /v1/fs/raw`.
#[derive(schemars::JsonSchema)]
struct RawWrite {
    /// The file's virtual path, percent-encoded (`+` decodes to a space), e.g.
    /// `/workspace/images/logo.png`. It must be valid UTF-8 after decoding. `path` and `fsync`
    /// are the only parameters accepted; any other gives INVALID_ARGUMENT.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// `true` syncs the file and its directory to disk before answering, so the upload survives
    /// a power loss (not only a crash of the daemon).
    #[schemars(default)]
    fsync: bool,
}

/// Reads `?path=` strictly: percent-decoding that yields invalid UTF-8 is an error, not a silently
/// mangled name, and unknown parameters are refused.
fn read_query(q: RawQuery) -> Result<RawRead, ApiError> {
    query(q, false).map(|(path, _)| RawRead { path })
}

/// Reads `?path=...&fsync=true|false` as [`read_query`] reads `?path=`.
fn write_query(q: RawQuery) -> Result<RawWrite, ApiError> {
    query(q, true).map(|(path, fsync)| RawWrite { path, fsync })
}

/// Reads `?path=...` (and, where `allow_fsync`, `&fsync=true|false`) from a query string.
fn query(RawQuery(q): RawQuery, allow_fsync: bool) -> Result<(String, bool), ApiError> {
    let bad = |rule: String| ApiError::Fs(FsError::invalid("query", rule));
    let mut path = None;
    let mut fsync = false;
    for pair in q
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "path" => {}
            "fsync" if allow_fsync => {
                fsync = match v {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(bad(format!("fsync={v:?}; expected true or false"))),
                };
                continue;
            }
            _ => {
                let known = if allow_fsync {
                    "path and fsync"
                } else {
                    "path"
                };
                return Err(bad(format!(
                    "unknown parameter {k:?}; the known ones are {known}"
                )));
            }
        }
        let plus_decoded = v.replace('+', " ");
        let decoded = percent_encoding::percent_decode_str(&plus_decoded)
            .decode_utf8()
            .map_err(|_| bad("path is not UTF-8 after percent-decoding".into()))?;
        path = Some(decoded.into_owned());
    }
    let path = path.ok_or_else(|| bad("missing ?path=/workspace/...".into()))?;
    Ok((path, fsync))
}

async fn raw_get(State(app): State<Arc<AppState>>, q: RawQuery) -> Result<Response, ApiError> {
    let RawRead { path } = read_query(q)?;
    let zones = app.zones.clone();
    let (file, size) = tokio::task::spawn_blocking(move || zones.read_binary(&path))
        .await
        .map_err(|e| ApiError::Fs(FsError::Internal(e.to_string())))??;
    let stream =
        tokio_util::io::ReaderStream::with_capacity(tokio::fs::File::from_std(file), 256 * 1024);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

async fn raw_put(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    q: RawQuery,
    headers: HeaderMap,
    body: Body,
) -> AppResult<crate::core::WriteResult> {
    let mut stream = body.into_data_stream();
    // Refusals are answered after the body has been read (see `body::drain`), so the client sees
    // the error instead of a broken pipe.
    let refuse = |stream, seen, e: ApiError| async move {
        if !expects_continue(&headers) {
            drain(stream, seen).await;
        }
        Err(e)
    };
    let RawWrite { path, fsync } = match write_query(q) {
        Ok(p) => p,
        Err(e) => return refuse(stream, 0, e).await,
    };
    let zones = app.zones.clone();
    let mut w = match zones.begin_write(&path) {
        Ok(w) => w,
        Err(e) => return refuse(stream, 0, e.into()).await,
    };
    w.set_sync(fsync);
    let mut seen = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| FsError::invalid("body", format!("upload interrupted: {e}")))?;
        seen += chunk.len() as u64;
        // A page-cache write of one chunk; cheap enough not to leave the runtime thread.
        if let Err(e) = tokio::task::block_in_place(|| w.write_chunk(&chunk)) {
            drop(w);
            return refuse(stream, seen, e.into()).await;
        }
    }
    let res = tokio::task::block_in_place(|| w.commit(origin(peer)))?;
    Ok(Json(res))
}

/// A whole text file to write.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "WriteRequest")]
struct WriteReq<'a> {
    /// The file's virtual path. Missing parent directories are created; a symlink in the last
    /// component is followed while it stays inside the zone.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// The complete new contents (UTF-8 text). At most `limits.max_write_bytes` bytes once
    /// encoded (100 MiB by default). For bytes that are not text, use PUT /v1/fs/raw.
    #[serde(borrow)]
    #[schemars(with = "String")]
    content: &'a serde_json::value::RawValue,
    /// Sync the file and its directory to disk before answering, so the write survives a power
    /// loss, not only a crash of the daemon (slower: one fsync of each). Without it an
    /// acknowledged write survives the daemon being killed, not the machine losing power.
    #[serde(default)]
    fsync: bool,
}

/// A write's body with its `content` decoded where it lies (`json_string`), so a write holds
/// its body in memory once, never a second copy of the content.
struct Write {
    path: String,
    fsync: bool,
    body: Vec<u8>,
    /// Where the decoded content lies in `body`.
    content: std::ops::Range<usize>,
}

impl Write {
    fn parse(mut body: Vec<u8>) -> Result<Write, ApiError> {
        let (path, fsync, raw) = {
            let r: WriteReq = serde_json::from_slice(&body).map_err(not_json)?;
            let raw = r.content.get();
            let start = raw.as_ptr() as usize - body.as_ptr() as usize;
            (r.path, r.fsync, start..start + raw.len())
        };
        let len = decode_in_place(&mut body[raw.clone()])
            .map_err(|rule| FsError::invalid("content", rule))?;
        Ok(Write {
            path,
            fsync,
            body,
            content: raw.start..raw.start + len,
        })
    }

    fn content(&self) -> &[u8] {
        &self.body[self.content.clone()]
    }
}

async fn write(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: JsonBytes<WriteReq<'static>>,
) -> AppResult<crate::core::WriteResult> {
    let w = Write::parse(body.bytes)?;
    blocking(&app, move |z| {
        z.write_synced(&w.path, w.content(), w.fsync, origin(peer))
    })
    .await
}

/// An exact-string replacement in a text file.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "EditRequest")]
struct EditReq {
    /// The file's virtual path (a symlink in the last component is followed inside the zone).
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// The exact text to replace (not a regex; whitespace and line endings matter). Must not be
    /// empty. Must occur exactly once unless `replace_all`.
    #[schemars(length(min = 1))]
    old: String,
    /// The replacement text; must differ from `old` (INVALID_ARGUMENT otherwise). May be empty
    /// to delete `old`.
    new: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    replace_all: bool,
}

async fn edit(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<EditReq>,
) -> AppResult<crate::core::EditResult> {
    blocking(&app, move |z| {
        z.edit(&r.path, &r.old, &r.new, r.replace_all, origin(peer))
    })
    .await
}

/// What to delete.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "DeleteRequest")]
struct DeleteReq {
    /// The virtual path of a file, symlink or directory inside a zone (not a zone root). A
    /// symlink is removed itself, never its target.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// Delete a non-empty directory with everything beneath it (symlinks inside are removed,
    /// never followed). Without it, only files, symlinks and empty directories are deleted.
    #[serde(default)]
    recursive: bool,
}

/// A completed delete, mkdir or move.
#[derive(Serialize, schemars::JsonSchema)]
struct Done {
    /// The path as given in the request (`path`, or `to` for move), not normalized.
    path: String,
    /// Always true.
    ok: bool,
}

async fn delete(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<DeleteReq>,
) -> AppResult<Done> {
    blocking(&app, move |z| {
        z.delete(&r.path, r.recursive, origin(peer))?;
        Ok(Done {
            path: r.path,
            ok: true,
        })
    })
    .await
}

/// A request naming one path.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "PathRequest")]
struct PathReq {
    /// The virtual path, e.g. `/workspace/src/main.rs`. Virtual paths start with `/workspace`
    /// or `/cache` (a missing leading slash is tolerated; repeated slashes and `.` are dropped;
    /// `..` is folded but may never climb above the zone root).
    #[schemars(length(min = 1, max = 4096))]
    path: String,
}

async fn exists(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<PathReq>,
) -> AppResult<crate::core::ExistsResult> {
    blocking(&app, move |z| z.exists(&r.path)).await
}

async fn list(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<PathReq>,
) -> AppResult<crate::core::ListResult> {
    blocking(&app, move |z| z.list(&r.path)).await
}

async fn stat(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<PathReq>,
) -> AppResult<crate::core::StatResult> {
    blocking(&app, move |z| z.stat(&r.path)).await
}

async fn resolve(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<PathReq>,
) -> AppResult<crate::core::ResolveResult> {
    blocking(&app, move |z| z.resolve(&r.path)).await
}

/// The directory to create.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "MkdirRequest")]
struct MkdirReq {
    /// The new directory's virtual path (not a zone root).
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// Create missing parent directories too, and succeed when the directory already exists
    /// (like `mkdir -p`). Without it the parent must exist (else NOT_FOUND) and the path must
    /// not (else EXISTS).
    #[serde(default)]
    parents: bool,
}

async fn mkdir(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<MkdirReq>,
) -> AppResult<Done> {
    blocking(&app, move |z| {
        z.mkdir(&r.path, r.parents, origin(peer))?;
        Ok(Done {
            path: r.path,
            ok: true,
        })
    })
    .await
}

/// What to move and where.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "MoveRequest")]
struct MoveReq {
    /// The virtual path to move (file, symlink or directory; not a zone root). It must exist.
    #[schemars(length(min = 1, max = 4096))]
    from: String,
    /// The new virtual path (not a zone root; not inside `from`). Missing parent directories are
    /// created. May be in the other zone.
    #[schemars(length(min = 1, max = 4096))]
    to: String,
    /// Replace an existing file (or empty directory) at `to`. Without it an existing `to` gives
    /// EXISTS.
    #[serde(default)]
    overwrite: bool,
}

async fn rename(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<MoveReq>,
) -> AppResult<Done> {
    blocking(&app, move |z| {
        z.rename(&r.from, &r.to, r.overwrite, origin(peer))?;
        Ok(Done {
            path: r.to,
            ok: true,
        })
    })
    .await
}

async fn glob(
    State(app): State<Arc<AppState>>,
    JsonBody(o): JsonBody<GlobOptions>,
) -> AppResult<crate::core::GlobResult> {
    blocking(&app, move |z| z.glob(&o)).await
}

async fn grep(
    State(app): State<Arc<AppState>>,
    JsonBody(o): JsonBody<GrepOptions>,
) -> AppResult<crate::core::GrepResult> {
    blocking(&app, move |z| z.grep(&o)).await
}
