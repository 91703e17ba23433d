//! The review web page: a local HTTP server on 127.0.0.1 where a person reads the staged commits
//! and pushes or discards them, and follows a zone's checkpoints (who changed what, diffs) and
//! restores one ([`timeline`]) (`wardfs review`).
//!
//! It is an adapter like the CLI: every action goes to the running daemon through the socket
//! [`Client`], on the same routes the CLI uses (`GET /v1/git/staged`, `POST /v1/git/staged/show`,
//! `/v1/git/push`, `/v1/git/discard`, `GET /v1/forks` for the forks' overlaps on staged paths,
//! `GET /v1/checkpoints`, `GET /v1/log`, `POST /v1/checkpoints/diff`, `/v1/checkpoints/restore`,
//! `GET /v1/runs?output=true` for the runs in sandboxes beside the workspace's timeline).
//! It holds no state of its own besides its token.
//!
//! Who may use it: anyone who can reach a TCP port on loopback could, so every request must carry
//! the random per-start [`Token`] (in the `token` query parameter or the `X-Wardfs-Token`
//! header), compared in constant time; anything else is `403`. The `Host` must name the loopback
//! address the server listens on (DNS rebinding), and a `POST` must also come from the page's own
//! origin (`Origin`, and `Sec-Fetch-Site` when the browser sends it) with a JSON body: [`guard`],
//! in front of every route, push, discard and restore alike. Pages are
//! sent with a strict Content-Security-Policy (scripts and styles only from this server, no
//! inline script, no framing) and `Referrer-Policy: no-referrer`, so the token does not leak
//! through links; all content from the daemon is HTML-escaped by [`render`].
//!
//! Owns the review page. Reaches the daemon through `client`; may import `git`'s staged-commit
//! types and diff reader and `core`'s types (`tests/rules` checks the imports).

pub mod render;
pub mod runs;
pub mod timeline;

use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client::{Client, ClientError};
use crate::git::StagedCommit;
use render::{Header, Overlap, Tab, View};

const PAGE_CSS: &str = include_str!("assets/review.css");
const PAGE_JS: &str = include_str!("assets/review.js");
/// The header a script sends the token in (a custom header also forces a CORS preflight, which
/// this server never answers, on any cross-origin request).
pub const TOKEN_HEADER: &str = "x-wardfs-token";
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// How many pushed or discarded commits the page lists.
const DONE_SHOWN: usize = 30;

/// The secret in the page's URL: 16 random bytes as 32 lowercase hex digits.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// Returns a fresh token from the kernel's random source.
    pub fn generate() -> std::io::Result<Token> {
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Returns the token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is the token, in time that does not depend on where they differ.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// What the handlers share.
struct Shared {
    client: Client,
    token: Token,
    /// The address the server listens on: the only `Host` and origin it accepts.
    addr: SocketAddr,
}

/// Returns the page's URL, token included.
pub fn url(addr: SocketAddr, token: &Token) -> String {
    format!("http://{addr}/?token={}", token.as_str())
}

/// Serves the review page on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    client: Client,
    token: Token,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let app = router(Arc::new(Shared {
        client,
        token,
        addr,
    }));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/timeline", get(timeline_page))
        .route("/assets/review.css", get(css))
        .route("/assets/review.js", get(js))
        .route("/api/push", post(push))
        .route("/api/discard", post(discard))
        .route("/api/restore", post(restore))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

fn forbidden(why: &'static str) -> Response {
    (StatusCode::FORBIDDEN, format!("forbidden: {why}\n")).into_response()
}

/// Returns the `token` query parameter, if any.
fn query_token(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|kv| kv.strip_prefix("token="))
}

/// Checks the token, host and origin of every request, and adds the security headers: the one
/// gate of every route (pages, assets, and the POSTs that push, discard and restore).
async fn guard(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let port = s.addr.port();
    let host_ok = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|host| allowed_host(host, port));
    let token = h
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .or_else(|| query_token(req.uri().query()));
    // Evaluate the token first and always, so a wrong host and a wrong token take the same path.
    let token_ok = token.is_some_and(|t| s.token.matches(t));
    if !token_ok {
        return forbidden("wrong or missing token; use the URL `wardfs review` printed");
    }
    if !host_ok {
        return forbidden("the Host header does not name this server");
    }
    match *req.method() {
        Method::GET | Method::HEAD => {}
        Method::POST => {
            if let Some(why) = cross_origin(h, port) {
                return forbidden(why);
            }
        }
        _ => return StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn allowed_host(host: &str, port: u16) -> bool {
    host == format!("127.0.0.1:{port}") || host == format!("localhost:{port}")
}

/// Why a POST is not from the page itself, if it is not.
fn cross_origin(h: &HeaderMap, port: u16) -> Option<&'static str> {
    let origin = h.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    match origin {
        Some(o)
            if o.strip_prefix("http://")
                .is_some_and(|r| allowed_host(r, port)) => {}
        Some(_) => return Some("the request comes from another origin"),
        None => return Some("a POST must carry an Origin header"),
    }
    if let Some(site) = h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" {
            return Some("the request comes from another site (Sec-Fetch-Site)");
        }
    }
    let json = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !json {
        return Some("a POST must have Content-Type: application/json");
    }
    None
}

#[derive(Deserialize)]
struct PageQuery {
    #[serde(default)]
    view: Option<String>,
}

#[derive(Deserialize)]
struct ListBody {
    staged: Vec<StagedCommit>,
}

/// `GET /v1/forks`, as far as the page reads it: each fork's overlaps.
#[derive(Deserialize)]
struct ForksBody {
    forks: Vec<ForkOverlaps>,
}

#[derive(Deserialize)]
struct ForkOverlaps {
    #[serde(default)]
    overlaps: Vec<Overlap>,
}

/// The overlaps of every fork now, each once (a fork lists those it is part of, so two forks
/// list the same one).
async fn overlaps(client: &Client) -> Result<Vec<Overlap>, ClientError> {
    let body: ForksBody = client.get("/v1/forks").await?;
    let mut all: Vec<Overlap> = body.forks.into_iter().flat_map(|f| f.overlaps).collect();
    all.sort_by(|a, b| (&a.path, &a.zones).cmp(&(&b.path, &b.zones)));
    all.dedup_by(|a, b| a.path == b.path && a.zones == b.zones);
    Ok(all)
}

/// Asks the daemon for the commits: open ones with their diffs, then the finished ones.
async fn commits(client: &Client) -> Result<(Vec<StagedCommit>, Vec<StagedCommit>), ClientError> {
    let list: ListBody = client.get("/v1/git/staged").await?;
    let mut open = Vec::new();
    let mut done = Vec::new();
    for c in list.staged {
        if render::is_open(&c.state) {
            let full: StagedCommit = client
                .post("/v1/git/staged/show", &json!({ "id": c.id }))
                .await?;
            open.push(full);
        } else if done.len() < DONE_SHOWN {
            done.push(c);
        }
    }
    Ok((open, done))
}

/// The `view` parameter, side by side unless it says otherwise.
fn view_of(v: Option<&str>) -> View {
    v.and_then(View::parse).unwrap_or(View::Split)
}

/// A refusal a page or an action shows: its HTTP status and its text (the daemon's code and
/// message, or what was wrong with the input).
pub struct Failure {
    pub status: StatusCode,
    pub text: String,
}

impl Failure {
    /// The daemon's refusal, or why it could not be asked.
    pub fn daemon(e: &ClientError) -> Failure {
        Failure {
            status: status_of(e),
            text: match e.code() {
                Some(code) => format!("{code}: {e}"),
                None => e.to_string(),
            },
        }
    }

    /// Bad input to the page itself.
    pub fn input(text: String) -> Failure {
        Failure {
            status: StatusCode::BAD_REQUEST,
            text,
        }
    }
}

/// The status the page answers with for a failed call to the daemon.
fn status_of(e: &ClientError) -> StatusCode {
    use crate::core::ErrorCode;
    match e {
        ClientError::Api { code, .. } => match code {
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::InvalidArgument | ErrorCode::InvalidPath | ErrorCode::OutsideZone => {
                StatusCode::BAD_REQUEST
            }
            _ => StatusCode::CONFLICT,
        },
        ClientError::NotRunning { .. } => StatusCode::SERVICE_UNAVAILABLE,
        ClientError::Transport(_) | ClientError::Local(_) => StatusCode::BAD_GATEWAY,
    }
}

fn html(status: StatusCode, page: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
}

async fn index(
    State(s): State<Arc<Shared>>,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    let view = view_of(q.ok().and_then(|Query(q)| q.view).as_deref());
    let socket = s.client.socket().display().to_string();
    let (status, page) = match commits(&s.client).await {
        Ok((open, done)) => {
            // Overlaps matter only beside a commit waiting for review.
            let found = match open.is_empty() {
                true => Ok(Vec::new()),
                false => overlaps(&s.client)
                    .await
                    .map_err(|e| Failure::daemon(&e).text),
            };
            (
                StatusCode::OK,
                render::page(&render::Page {
                    token: s.token.as_str(),
                    view,
                    socket: &socket,
                    open: &open,
                    done: &done,
                    overlaps: found.as_deref().map_err(String::as_str),
                    error: None,
                }),
            )
        }
        Err(e) => {
            let f = Failure::daemon(&e);
            (
                f.status,
                render::page(&render::Page {
                    token: s.token.as_str(),
                    view,
                    socket: &socket,
                    open: &[],
                    done: &[],
                    overlaps: Ok(&[]),
                    error: Some(&f.text),
                }),
            )
        }
    };
    html(status, page)
}

/// The timeline tab: checkpoints of a zone with who changed what, and the diff asked for.
async fn timeline_page(
    State(s): State<Arc<Shared>>,
    q: Result<Query<timeline::Params>, QueryRejection>,
) -> Response {
    let params = q.map(|Query(p)| p).unwrap_or_default();
    let view = view_of(params.view.as_deref());
    let socket = s.client.socket().display().to_string();
    let token = s.token.as_str();
    let (status, keep, body) = match params.check() {
        Err(why) => (
            StatusCode::BAD_REQUEST,
            String::new(),
            timeline::body(token, view, None, Some(&why)),
        ),
        Ok(r) => match timeline::load(&s.client, &r).await {
            Ok(t) => (
                t.status(),
                r.keep(),
                timeline::body(token, view, Some(&t), None),
            ),
            Err(e) => {
                let f = Failure::daemon(&e);
                (
                    f.status,
                    r.keep(),
                    timeline::body(token, view, None, Some(&f.text)),
                )
            }
        },
    };
    let header = Header {
        token,
        view,
        socket: &socket,
        tab: Tab::Timeline,
        keep: &keep,
    };
    html(status, render::document(&header, &body))
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        PAGE_CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        PAGE_JS,
    )
        .into_response()
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct PushReq {
    id: String,
    #[serde(default)]
    pr: bool,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct DiscardReq {
    id: String,
    #[serde(default)]
    revert: bool,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RestoreReq {
    id: i64,
    /// Virtual paths to restore; absent or empty: the whole zone.
    #[serde(default)]
    paths: Vec<String>,
}

/// The refusal of an action's malformed body: `INVALID_ARGUMENT` in the daemon's error shape,
/// saying what was wrong with it.
fn bad_body(e: &JsonRejection) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "code": "INVALID_ARGUMENT", "message": e.body_text(), "path": null })),
    )
        .into_response()
}

/// The daemon's answer, or its error as `{code, message, path}` with a fitting status.
fn relay(r: Result<serde_json::Value, ClientError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => {
            let status = status_of(&e);
            let body = match e {
                ClientError::Api {
                    code,
                    message,
                    path,
                } => json!({ "code": code, "message": message, "path": path }),
                e => json!({ "code": null, "message": e.to_string() }),
            };
            (status, Json(body)).into_response()
        }
    }
}

/// Sends a checked action body to the daemon's `route` as it is, and relays the answer.
async fn forward<T: Serialize>(
    s: &Shared,
    route: &str,
    b: Result<Json<T>, JsonRejection>,
) -> Response {
    match b {
        Ok(Json(r)) => relay(s.client.post(route, &r).await),
        Err(e) => bad_body(&e),
    }
}

async fn push(State(s): State<Arc<Shared>>, b: Result<Json<PushReq>, JsonRejection>) -> Response {
    forward(&s, "/v1/git/push", b).await
}

async fn discard(
    State(s): State<Arc<Shared>>,
    b: Result<Json<DiscardReq>, JsonRejection>,
) -> Response {
    forward(&s, "/v1/git/discard", b).await
}

/// Restores a checkpoint (the whole zone, or the paths of the diff on the page); the answer
/// names the checkpoint of the present that undoes it (`before`).
async fn restore(
    State(s): State<Arc<Shared>>,
    b: Result<Json<RestoreReq>, JsonRejection>,
) -> Response {
    forward(&s, "/v1/checkpoints/restore", b).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_digits_and_differ() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), b.as_str());
    }

    #[test]
    fn token_comparison() {
        let t = Token("00ff".into());
        assert!(t.matches("00ff"));
        assert!(!t.matches("00fe"));
        assert!(!t.matches("00ff0"));
        assert!(!t.matches(""));
    }

    #[test]
    fn query_token_is_found_among_other_parameters() {
        assert_eq!(query_token(Some("view=split&token=ab")), Some("ab"));
        assert_eq!(query_token(Some("view=split")), None);
        assert_eq!(query_token(None), None);
    }

    #[test]
    fn posts_must_be_same_origin_json() {
        let mut h = HeaderMap::new();
        assert!(cross_origin(&h, 8080).is_some());
        h.insert(header::ORIGIN, HeaderValue::from_static("http://evil.test"));
        assert!(cross_origin(&h, 8080).is_some());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(cross_origin(&h, 8080).is_some(), "no content type");
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert_eq!(cross_origin(&h, 8080), None);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_origin(&h, 8080).is_some());
    }
}
