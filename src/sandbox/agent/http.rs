//! The HTTP transport to one `sandbox-agent` server (started with --token and --no-telemetry),
//! and the one place its answers become [`SandboxFsError`]s.
//!
//! Every request carries the bearer token (a header marked sensitive, so it never appears in
//! debug output) and runs under one [`Deadline`] for the whole exchange — connecting, sending,
//! the answer's head and its whole body: a server that is down answers `Unavailable` at once,
//! one that hangs or drips its answer answers `TimedOut` when the deadline passes — never a
//! hang. The deadline is the request timeout plus one second per [`MIN_RATE`] bytes received, so
//! a large download at any real link's pace runs as long as it needs while a body dripped a byte
//! at a time ends at the request timeout. Connections are pooled (HTTP/1.1 keep-alive); `https`
//! URLs use the system's root certificates.
//!
//! The server reports errors as `application/problem+json` (`{type, title, status, detail}`)
//! whose only machine-readable part beyond the status is the text of `detail`. So, and only
//! here, errors are classified from that text: `path not found:` (HTTP 400, sandbox-agent never
//! answers 404 for a path), `path is not a file:`, `path is not a directory:`, `destination
//! already exists:`, and `(os error N)` in a 502 (the errno of the failed system call).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;

use crate::core::provider::{SandboxFsError, SandboxFsResult};

/// Characters of a query value sent as they are (the rest is percent-encoded).
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Returns `value` encoded for a query string.
pub(super) fn query_value(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE).to_string()
}

/// A body to send and its content type.
pub(super) struct Body {
    pub data: Bytes,
    pub content_type: &'static str,
}

impl Body {
    pub fn json(value: &serde_json::Value) -> Body {
        Body {
            data: Bytes::from(value.to_string()),
            content_type: "application/json",
        }
    }

    pub fn bytes(data: Bytes) -> Body {
        Body {
            data,
            content_type: "application/octet-stream",
        }
    }

    pub fn tar(data: Vec<u8>) -> Body {
        Body {
            data: Bytes::from(data),
            content_type: "application/x-tar",
        }
    }
}

/// How long one exchange may take (its [`Deadline`]'s base), how large its answer may be, and
/// what the answer is (which names the limit that refuses a larger one).
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub timeout: Duration,
    pub limit: u64,
    pub what: Payload,
}

/// What an answer is, for the error naming the limit a larger one breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Payload {
    /// A JSON answer (stat, a listing, a command's output): `limits.sandbox_answer_bytes`.
    Answer,
    /// A whole file read at once: `limits.sandbox_file_bytes`.
    File,
}

/// How a file over `limits.sandbox_file_bytes` is named in [`SandboxFsError::TooLarge`], read whole
/// or streamed.
pub(super) const FILE_LIMIT: &str = "file (limits.sandbox_file_bytes)";

/// The slowest pace an answer may keep once the request timeout is spent: each byte received
/// moves the deadline on by 1/`MIN_RATE` s (32 KiB/s, 256 kbit/s). A body dripped at a byte a
/// second thus earns 31 µs a second and ends at the request timeout; a 4 GiB download may
/// take 36 hours at this pace, never longer.
const MIN_RATE: u64 = 32 * 1024;

/// When one exchange must be over: `base` after it started, plus one second for every
/// [`MIN_RATE`] bytes of answer received so far. It covers connecting, sending the request,
/// waiting for the answer's head and reading its whole body, whatever the transport.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    start: Instant,
    base: Duration,
}

impl Deadline {
    /// Starts the clock of an exchange that may take `base`, plus the time its bytes earn.
    pub fn start(base: Duration) -> Deadline {
        Deadline {
            start: Instant::now(),
            base,
        }
    }

    /// Returns the instant the exchange must be over by, once `received` bytes came.
    pub fn at(&self, received: u64) -> Instant {
        let earned = Duration::from_micros(received.saturating_mul(1_000_000) / MIN_RATE);
        self.start + self.base.saturating_add(earned)
    }

    /// Returns how long the exchange has run.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// An answer with a success status.
pub(super) struct Reply {
    pub body: Bytes,
}

/// Counts of what went over the wire, for tests and progress reports.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub requests: AtomicU64,
    pub bytes_sent: AtomicU64,
}

/// A client bound to one server (base URL and token).
pub(super) struct Transport {
    base: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    auth: Option<HeaderValue>,
    /// A proxy's own credential, sent beside `auth` (see `SandboxAgentConfig::extra_header`).
    extra: Option<(HeaderName, HeaderValue)>,
    pub timeout: Duration,
    pub counters: Counters,
}

impl Transport {
    /// Builds a transport for `url` (`http://host:port` or `https://…`, optionally with a path
    /// prefix). Nothing is sent yet.
    pub fn new(
        url: &str,
        token: Option<&str>,
        extra: Option<&super::ExtraHeader>,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> SandboxFsResult<Transport> {
        let invalid = |rule: &str| SandboxFsError::InvalidConfig {
            name: format!("sandbox url {url:?}"),
            rule: rule.to_string(),
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| invalid(&format!("not a URL ({e})")))?;
        let scheme = uri.scheme_str().unwrap_or("");
        if scheme != "http" && scheme != "https" {
            return Err(invalid("it must start with http:// or https://"));
        }
        if uri.host().is_none() {
            return Err(invalid("it names no host"));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(invalid(
                "it must not hold credentials; put the token in the environment variable named by token_env",
            ));
        }
        if uri.query().is_some() {
            return Err(invalid("it must not have a query string"));
        }
        let base = url.trim_end_matches('/').to_string();

        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let connector = if scheme == "https" {
            builder
                .with_native_roots()
                .map_err(|e| SandboxFsError::Unavailable {
                    url: base.clone(),
                    reason: format!("no root certificates for https: {e}"),
                })?
                .https_or_http()
                .enable_http1()
                .wrap_connector(http)
        } else {
            // Plain http never reaches the TLS layer, so no root certificates are needed.
            let config = rustls_config_without_roots();
            builder
                .with_tls_config(config)
                .https_or_http()
                .enable_http1()
                .wrap_connector(http)
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .build(connector);

        let auth = match token {
            Some(token) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        SandboxFsError::InvalidConfig {
                            name: "sandbox token".into(),
                            rule: "it must be printable ASCII".into(),
                        }
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let extra = match extra {
            Some(header) => {
                let invalid = |rule: &str| SandboxFsError::InvalidConfig {
                    name: format!("sandbox extra header {:?}", header.name),
                    rule: rule.to_string(),
                };
                let name = HeaderName::from_bytes(header.name.as_bytes())
                    .map_err(|_| invalid("its name must be a valid HTTP header name"))?;
                if name == AUTHORIZATION {
                    return Err(invalid("it must not be Authorization (the token's header)"));
                }
                let mut value = HeaderValue::from_str(header.value.expose())
                    .map_err(|_| invalid("its value must be printable ASCII"))?;
                value.set_sensitive(true);
                Some((name, value))
            }
            None => None,
        };
        Ok(Transport {
            base,
            client,
            auth,
            extra,
            timeout,
            counters: Counters::default(),
        })
    }

    /// Returns the server's base URL (never with credentials: the token travels in a header).
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Sends one request to `path_and_query` (`/v1/fs/stat?path=…`) and returns the answer when
    /// its status is a success; otherwise the classified error. `path` names the remote path the
    /// request is about, for error messages.
    pub async fn send(
        &self,
        op: &'static str,
        path: &str,
        method: Method,
        path_and_query: &str,
        body: Option<Body>,
        bounds: Bounds,
    ) -> SandboxFsResult<Reply> {
        let deadline = Deadline::start(bounds.timeout);
        let (req, sent) = self.request(op, method, path_and_query, body)?;
        let resp = self.answer(op, req, deadline).await?;
        let status = resp.status();
        // Never more than `limit` bytes of an answer in memory, whatever the server sends: an
        // endless body ends at the limit with an error, not with the daemon's memory.
        let limit = if status.is_success() {
            bounds.limit
        } else {
            bounds.limit.min(MAX_ERROR_BYTES)
        };
        let body = match self
            .read_body(op, resp.into_body(), limit, deadline)
            .await?
        {
            Ok(body) => body,
            Err(seen) if status.is_success() => {
                return Err(self.too_large(op, path, (limit, bounds.what), seen))
            }
            // An error whose text is too long: the status alone still classifies it.
            Err(_) => Bytes::new(),
        };
        if status.is_success() {
            tracing::trace!(op, path, status = status.as_u16(), "sandbox-agent");
            return Ok(Reply { body });
        }
        let err = self.classify(op, path, status, &body, sent);
        tracing::debug!(op, path, status = status.as_u16(), error = %err, "sandbox-agent");
        Err(err)
    }

    /// Sends a GET for a file and streams its body into `sink`, at most `limit` bytes (`what`
    /// names the limit in the error past it), never holding more than one frame in memory. The
    /// whole transfer runs under one [`Deadline`]. Returns the bytes written.
    pub async fn download(
        &self,
        op: &'static str,
        path: &str,
        path_and_query: &str,
        cap: (u64, &'static str),
        sink: &mut (dyn std::io::Write + Send),
    ) -> SandboxFsResult<u64> {
        let (limit, what) = cap;
        let deadline = Deadline::start(self.timeout);
        let (req, _) = self.request(op, Method::GET, path_and_query, None)?;
        let resp = self.answer(op, req, deadline).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            // The error's text only explains the status: read as much as comes in time.
            let text = self.read_body(op, body, MAX_ERROR_BYTES, deadline).await;
            let text = text.ok().and_then(Result::ok).unwrap_or_default();
            return Err(self.classify(op, path, status, &text, 0));
        }
        let mut written = 0u64;
        while let Some(chunk) = self.next_data(op, &mut body, deadline, written).await? {
            written += chunk.len() as u64;
            if written > limit {
                return Err(SandboxFsError::TooLarge {
                    path: path.to_string(),
                    what,
                    size: written,
                    limit,
                });
            }
            sink.write_all(&chunk)
                .map_err(|e| SandboxFsError::Protocol {
                    url: self.base.clone(),
                    op,
                    reason: format!("cannot store the download of {path} locally: {e}"),
                })?;
        }
        Ok(written)
    }

    /// Builds a request with the credentials and `body`; returns it and the bytes it carries.
    fn request(
        &self,
        op: &'static str,
        method: Method,
        path_and_query: &str,
        body: Option<Body>,
    ) -> SandboxFsResult<(Request<Full<Bytes>>, u64)> {
        let uri = format!("{}{}", self.base, path_and_query);
        let mut req = Request::builder().method(method).uri(&uri);
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        if let Some((name, value)) = &self.extra {
            req = req.header(name, value.clone());
        }
        let data = match body {
            Some(body) => {
                req = req.header(CONTENT_TYPE, body.content_type);
                body.data
            }
            None => Bytes::new(),
        };
        let sent = data.len() as u64;
        let req = req
            .body(Full::new(data))
            .map_err(|e| SandboxFsError::Protocol {
                url: self.base.clone(),
                op,
                reason: format!("cannot build the request: {e}"),
            })?;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_sent.fetch_add(sent, Ordering::Relaxed);
        Ok((req, sent))
    }

    /// Sends `req` and waits for the answer's head until `deadline`: a timeout or a failed
    /// connection is `Unavailable`, never a hang.
    async fn answer(
        &self,
        op: &'static str,
        req: Request<Full<Bytes>>,
        deadline: Deadline,
    ) -> SandboxFsResult<hyper::Response<Incoming>> {
        match tokio::time::timeout_at(deadline.at(0), self.client.request(req)).await {
            Err(_) => Err(self.timed_out(op, deadline)),
            Ok(Err(e)) => Err(SandboxFsError::Unavailable {
                url: self.base.clone(),
                reason: chain(&e),
            }),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// Reads `body` whole within `deadline`; `Err(n)` when it is longer than `limit`: reading
    /// stopped there, `n` bytes having come.
    async fn read_body(
        &self,
        op: &'static str,
        mut body: Incoming,
        limit: u64,
        deadline: Deadline,
    ) -> SandboxFsResult<Result<Bytes, u64>> {
        let mut data = Vec::new();
        while let Some(chunk) = self
            .next_data(op, &mut body, deadline, data.len() as u64)
            .await?
        {
            let seen = (data.len() + chunk.len()) as u64;
            if seen > limit {
                return Ok(Err(seen));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(Ok(Bytes::from(data)))
    }

    /// Returns the next data of `body` (`None` at its end), waiting no later than `deadline`
    /// allows once `received` bytes came.
    async fn next_data(
        &self,
        op: &'static str,
        body: &mut Incoming,
        deadline: Deadline,
        received: u64,
    ) -> SandboxFsResult<Option<Bytes>> {
        loop {
            let frame = match tokio::time::timeout_at(deadline.at(received), body.frame()).await {
                Err(_) => return Err(self.timed_out(op, deadline)),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => {
                    return Err(SandboxFsError::Unavailable {
                        url: self.base.clone(),
                        reason: chain(&e),
                    })
                }
                Ok(Some(Ok(frame))) => frame,
            };
            // Trailers carry no data.
            if let Ok(data) = frame.into_data() {
                return Ok(Some(data));
            }
        }
    }

    fn timed_out(&self, op: &'static str, deadline: Deadline) -> SandboxFsError {
        SandboxFsError::TimedOut {
            url: self.base.clone(),
            op: op.to_string(),
            after: deadline.elapsed(),
        }
    }

    /// The error of an answer larger than `cap` (its limit, and what it is) allows, `seen`
    /// bytes having come when reading stopped: a file read whole is `TOO_LARGE` naming
    /// `limits.sandbox_file_bytes`, any other answer a protocol error naming
    /// `limits.sandbox_answer_bytes`.
    fn too_large(
        &self,
        op: &'static str,
        path: &str,
        (limit, what): (u64, Payload),
        seen: u64,
    ) -> SandboxFsError {
        match what {
            Payload::File => SandboxFsError::TooLarge {
                path: path.to_string(),
                what: FILE_LIMIT,
                size: seen,
                limit,
            },
            Payload::Answer => SandboxFsError::Protocol {
                url: self.base.clone(),
                op,
                reason: format!(
                    "the answer about {path} is larger than {limit} bytes \
                     (limits.sandbox_answer_bytes); stopped reading it"
                ),
            },
        }
    }

    /// Turns a failed answer into the error it means.
    fn classify(
        &self,
        op: &'static str,
        path: &str,
        status: StatusCode,
        body: &[u8],
        sent: u64,
    ) -> SandboxFsError {
        let detail = problem_detail(body);
        let path_or = |named: &str| {
            let named = named.trim();
            if named.is_empty() { path } else { named }.to_string()
        };
        match status.as_u16() {
            401 | 403 => SandboxFsError::AuthFailed {
                url: self.base.clone(),
                status: status.as_u16(),
                reason: detail,
            },
            413 => SandboxFsError::TooLarge {
                path: path.to_string(),
                what: "request body",
                size: sent,
                limit: super::MAX_BODY_BYTES,
            },
            400 => {
                let text = detail.strip_prefix("invalid request: ").unwrap_or(&detail);
                if let Some(named) = text.strip_prefix("path not found:") {
                    SandboxFsError::NotFound {
                        path: path_or(named),
                    }
                } else if let Some(named) = text.strip_prefix("path is not a file:") {
                    SandboxFsError::IsDir {
                        path: path_or(named),
                    }
                } else if let Some(named) = text.strip_prefix("path is not a directory:") {
                    SandboxFsError::NotDir {
                        path: path_or(named),
                    }
                } else if let Some(named) = text.strip_prefix("destination already exists:") {
                    SandboxFsError::Exists {
                        path: path_or(named),
                    }
                } else if let Some(named) = text.strip_prefix("invalid relative path:") {
                    SandboxFsError::InvalidPath {
                        path: path_or(named),
                        rule: "the sandbox refused it as a relative path".into(),
                    }
                } else {
                    self.other(op, path, status, detail)
                }
            }
            502 => match os_errno(&detail) {
                Some(errno) => from_errno(errno, path).unwrap_or_else(|| SandboxFsError::Remote {
                    op,
                    path: path.to_string(),
                    status: status.as_u16(),
                    detail,
                }),
                None => self.other(op, path, status, detail),
            },
            _ => self.other(op, path, status, detail),
        }
    }

    fn other(
        &self,
        op: &'static str,
        path: &str,
        status: StatusCode,
        detail: String,
    ) -> SandboxFsError {
        SandboxFsError::Remote {
            op,
            path: path.to_string(),
            status: status.as_u16(),
            detail,
        }
    }
}

/// The most of an error answer read (its text only explains the status).
const MAX_ERROR_BYTES: u64 = 64 * 1024;

/// The error document of sandbox-agent (RFC 9457 problem details).
#[derive(Deserialize)]
struct Problem {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    detail: Option<String>,
}

/// Returns the human text of an error body: the problem's `detail` (or `title`), or the body
/// itself when it is not a problem document (413 and 422 answers are plain text).
fn problem_detail(body: &[u8]) -> String {
    if let Ok(problem) = serde_json::from_slice::<Problem>(body) {
        if let Some(text) = problem.detail.or(problem.title) {
            return text;
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.len() > 500 {
        format!("{}…", crate::core::text::head(text, 500))
    } else {
        text.to_string()
    }
}

/// `str::floor_char_boundary` is not stable on the crate's minimum Rust.
/// Returns N from the first `(os error N)` in `text` (how Rust's `io::Error` prints an errno).
fn os_errno(text: &str) -> Option<i32> {
    let start = text.find("(os error ")? + "(os error ".len();
    let digits: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Returns the error an errno means for `path`, when it has a code of its own.
pub(super) fn from_errno(errno: i32, path: &str) -> Option<SandboxFsError> {
    let path = path.to_string();
    Some(match errno {
        libc::ENOENT => SandboxFsError::NotFound { path },
        libc::EEXIST => SandboxFsError::Exists { path },
        libc::EISDIR => SandboxFsError::IsDir { path },
        libc::ENOTDIR => SandboxFsError::NotDir { path },
        libc::ENOTEMPTY => SandboxFsError::NotEmpty { path },
        libc::EACCES | libc::EPERM | libc::EROFS => SandboxFsError::PermissionDenied { path },
        libc::ENOSPC | libc::EDQUOT => SandboxFsError::NoSpace { path },
        _ => return None,
    })
}

/// Returns an error and its sources as one line (`client error (Connect): tcp connect error:
/// Connection refused (os error 111)`). Shared with the other HTTP clients of `sandbox`.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// A TLS configuration with no trusted roots, for connectors that only ever speak plain http.
fn rustls_config_without_roots() -> rustls::ClientConfig {
    rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_is_read_from_the_detail() {
        assert_eq!(
            os_errno("stream error: Directory not empty (os error 39)"),
            Some(39)
        );
        assert_eq!(os_errno("stream error: failed to unpack `x`"), None);
        assert!(matches!(
            from_errno(libc::ENOTEMPTY, "/a"),
            Some(SandboxFsError::NotEmpty { .. })
        ));
        assert!(from_errno(libc::EIO, "/a").is_none());
    }

    #[test]
    fn problem_documents_and_plain_text_give_their_detail() {
        let body = br#"{"type":"urn:sandbox-agent:error:invalid_request","title":"Invalid Request","status":400,"detail":"invalid request: path not found: /x"}"#;
        assert_eq!(problem_detail(body), "invalid request: path not found: /x");
        assert_eq!(
            problem_detail(b"Failed to buffer the request body: length limit exceeded"),
            "Failed to buffer the request body: length limit exceeded"
        );
    }

    #[test]
    fn query_values_keep_slashes_and_encode_the_rest() {
        assert_eq!(query_value("/a b/c&d=é"), "/a%20b/c%26d%3D%C3%A9");
    }
}
