//! The file routes under `/v1/fs`: thin calls into the core on the blocking pool.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::body::{drain, expects_continue, JsonBody};
use super::error::ApiError;
use super::peer::Peer;
use super::AppState;
use crate::core::{FsError, FsResult, GlobOptions, GrepOptions, Zones};
use crate::state::{Origin, Via};

type AppResult<T> = Result<Json<T>, ApiError>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/fs/read", post(read))
        .route("/v1/fs/raw", get(raw_get).put(raw_put))
        .route("/v1/fs/write", post(write))
        .route("/v1/fs/edit", post(edit))
        .route("/v1/fs/delete", post(delete))
        .route("/v1/fs/exists", post(exists))
        .route("/v1/fs/list", post(list))
        .route("/v1/fs/stat", post(stat))
        .route("/v1/fs/mkdir", post(mkdir))
        .route("/v1/fs/move", post(rename))
        .route("/v1/fs/glob", post(glob))
        .route("/v1/fs/grep", post(grep))
        .route("/v1/fs/resolve", post(resolve))
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadReq {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

async fn read(
    State(app): State<Arc<AppState>>,
    JsonBody(r): JsonBody<ReadReq>,
) -> AppResult<crate::core::ReadResult> {
    blocking(&app, move |z| z.read(&r.path, r.offset, r.limit)).await
}

/// Reads `?path=` strictly: percent-decoding that yields invalid UTF-8 is an error, not a silently
/// mangled name, and unknown parameters are refused.
fn path_query(q: RawQuery) -> Result<String, ApiError> {
    query(q, false).map(|(path, _)| path)
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
    let path = path_query(q)?;
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
    let (path, fsync) = match query(q, true) {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteReq {
    path: String,
    content: String,
    /// Sync the file and its directory before answering (survives a power loss).
    #[serde(default)]
    fsync: bool,
}

async fn write(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    JsonBody(r): JsonBody<WriteReq>,
) -> AppResult<crate::core::WriteResult> {
    blocking(&app, move |z| {
        z.write_synced(&r.path, r.content.as_bytes(), r.fsync, origin(peer))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditReq {
    path: String,
    old: String,
    new: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteReq {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Serialize)]
struct Done {
    path: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathReq {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MkdirReq {
    path: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveReq {
    from: String,
    to: String,
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
