//! The client of the daemon's socket: HTTP/1.1 over a Unix stream, JSON in and out. The CLI,
//! the MCP server and the review page all talk to the daemon through it.
//!
//! May import only the core's error codes (`crate::core::ErrorCode`), never an adapter.

pub mod paths;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::UnixStream;

use crate::core::ErrorCode;

/// A failed call to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the daemon is not running at {socket} ({reason}); start it with `wardfs serve`")]
    NotRunning { socket: String, reason: String },
    #[error("{message}")]
    Api {
        code: ErrorCode,
        message: String,
        path: Option<String>,
    },
    #[error("talking to the daemon: {0}")]
    Transport(String),
    #[error("{0}")]
    Local(String),
}

impl ClientError {
    /// Returns the error code, when the daemon sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A connection factory for the daemon's socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

#[derive(serde::Deserialize)]
struct WireError {
    code: ErrorCode,
    message: String,
    path: Option<String>,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
        }
    }

    /// Returns the socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    async fn send<B>(
        &self,
        req: Request<B>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|e| ClientError::NotRunning {
                    socket: self.socket.display().to_string(),
                    reason: e.to_string(),
                })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        sender
            .send_request(req)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))
    }

    async fn finish(resp: hyper::Response<hyper::body::Incoming>) -> Result<Bytes, ClientError> {
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .to_bytes();
        if status.is_success() {
            return Ok(body);
        }
        match serde_json::from_slice::<WireError>(&body) {
            Ok(e) => Err(ClientError::Api {
                code: e.code,
                message: e.message,
                path: e.path,
            }),
            Err(_) => Err(ClientError::Transport(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            ))),
        }
    }

    fn request(method: Method, route: &str) -> hyper::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(format!("http://wardfs{route}"))
            .header(hyper::header::HOST, "wardfs")
    }

    /// POSTs a JSON body and returns the raw JSON answer.
    pub async fn post_raw<T: Serialize>(
        &self,
        route: &str,
        body: &T,
    ) -> Result<Bytes, ClientError> {
        let json = serde_json::to_vec(body).map_err(|e| ClientError::Local(e.to_string()))?;
        let req = Client::request(Method::POST, route)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json)))
            .map_err(|e| ClientError::Local(e.to_string()))?;
        Client::finish(self.send(req).await?).await
    }

    /// POSTs a JSON body and decodes the JSON answer.
    pub async fn post<T: Serialize, R: DeserializeOwned>(
        &self,
        route: &str,
        body: &T,
    ) -> Result<R, ClientError> {
        let bytes = self.post_raw(route, body).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
    }

    /// A `POST` of `body` as JSON to `route`.
    fn json_post<T: Serialize>(route: &str, body: &T) -> Result<Request<Full<Bytes>>, ClientError> {
        let json = serde_json::to_vec(body).map_err(|e| ClientError::Local(e.to_string()))?;
        Client::request(Method::POST, route)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json)))
            .map_err(|e| ClientError::Local(e.to_string()))
    }

    /// POSTs a JSON body asking for progress (`"progress": true`) and reads the answer as NDJSON:
    /// `{"progress": …}` lines go to `on_progress`, then `{"result": …}` or `{"error": …}`.
    pub async fn post_progress<T: Serialize, R: DeserializeOwned>(
        &self,
        route: &str,
        body: &T,
        mut on_progress: impl FnMut(&serde_json::Value),
    ) -> Result<R, ClientError> {
        let resp = self.send(Client::json_post(route, body)?).await?;
        if !resp.status().is_success() {
            return Client::finish(resp).await.and_then(|b| {
                serde_json::from_slice(&b)
                    .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
            });
        }
        let mut last: Option<serde_json::Value> = None;
        Client::each_line(resp.into_body(), |line| {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                if let Some(p) = v.get("progress") {
                    on_progress(p);
                } else {
                    last = Some(v);
                }
            }
            ControlFlow::Continue(())
        })
        .await?;
        let mut v = last.ok_or_else(|| {
            ClientError::Transport("the daemon ended the answer without a result".into())
        })?;
        if let Some(e) = v.get_mut("error") {
            let e: WireError = serde_json::from_value(e.take())
                .map_err(|e| ClientError::Transport(format!("bad error: {e}")))?;
            return Err(ClientError::Api {
                code: e.code,
                message: e.message,
                path: e.path,
            });
        }
        let result = v
            .get_mut("result")
            .map(serde_json::Value::take)
            .ok_or_else(|| ClientError::Transport("the answer has no result".into()))?;
        serde_json::from_value(result)
            .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
    }

    /// GETs a route and returns the raw answer.
    pub async fn get_raw(&self, route: &str) -> Result<Bytes, ClientError> {
        let req = Client::request(Method::GET, route)
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Local(e.to_string()))?;
        Client::finish(self.send(req).await?).await
    }

    /// DELETEs a route and returns the raw JSON answer.
    pub async fn delete_raw(&self, route: &str) -> Result<Bytes, ClientError> {
        let req = Client::request(Method::DELETE, route)
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Local(e.to_string()))?;
        Client::finish(self.send(req).await?).await
    }

    /// GETs a route and decodes the JSON answer.
    pub async fn get<R: DeserializeOwned>(&self, route: &str) -> Result<R, ClientError> {
        let bytes = self.get_raw(route).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
    }

    /// GETs a route that answers NDJSON (`/v1/events`) and calls `on_line` with each line
    /// (without its newline) as it arrives, until the daemon ends the answer or `on_line` breaks.
    /// A refusal before the answer starts is the usual error.
    pub async fn get_lines(
        &self,
        route: &str,
        on_line: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<(), ClientError> {
        let req = Client::request(Method::GET, route)
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Local(e.to_string()))?;
        let resp = self.send(req).await?;
        if !resp.status().is_success() {
            return Client::finish(resp).await.map(|_| ());
        }
        Client::each_line(resp.into_body(), on_line).await
    }

    /// POSTs a JSON body to a route that answers NDJSON (`/v1/run`) and calls `on_line` with
    /// each line (without its newline) as it arrives, until the daemon ends the answer or
    /// `on_line` breaks. A refusal before the answer starts is the usual error.
    pub async fn post_lines<T: Serialize>(
        &self,
        route: &str,
        body: &T,
        on_line: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<(), ClientError> {
        let resp = self.send(Client::json_post(route, body)?).await?;
        if !resp.status().is_success() {
            return Client::finish(resp).await.map(|_| ());
        }
        Client::each_line(resp.into_body(), on_line).await
    }

    /// Reads an NDJSON body, calling `on_line` with each line that is not blank, until the body
    /// ends or `on_line` breaks.
    async fn each_line(
        mut body: hyper::body::Incoming,
        mut on_line: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> Result<(), ClientError> {
        let mut buf: Vec<u8> = Vec::new();
        let mut handle = |line: &[u8]| {
            if line.iter().all(u8::is_ascii_whitespace) {
                return ControlFlow::Continue(());
            }
            on_line(line.strip_suffix(b"\n").unwrap_or(line))
        };
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Transport(e.to_string()))?;
            if let Some(data) = frame.data_ref() {
                buf.extend_from_slice(data);
                let mut start = 0;
                while let Some(nl) = buf[start..].iter().position(|b| *b == b'\n') {
                    let end = start + nl + 1;
                    if handle(&buf[start..end]).is_break() {
                        return Ok(());
                    }
                    start = end;
                }
                buf.drain(..start);
            }
        }
        let _ = handle(&buf);
        Ok(())
    }

    /// Streams a file's raw bytes into `out`.
    pub async fn download<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        path: &str,
        out: &mut W,
    ) -> Result<u64, ClientError> {
        use tokio::io::AsyncWriteExt;
        let req = Client::request(Method::GET, &format!("/v1/fs/raw?path={}", encode(path)))
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Local(e.to_string()))?;
        let resp = self.send(req).await?;
        if !resp.status().is_success() {
            return Client::finish(resp).await.map(|_| 0);
        }
        let mut body = resp.into_body();
        let mut n = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Transport(e.to_string()))?;
            if let Some(data) = frame.data_ref() {
                out.write_all(data)
                    .await
                    .map_err(|e| ClientError::Local(e.to_string()))?;
                n += data.len() as u64;
            }
        }
        out.flush()
            .await
            .map_err(|e| ClientError::Local(e.to_string()))?;
        Ok(n)
    }

    /// Streams `input` to a file (replaced atomically by the daemon) and decodes the answer.
    pub async fn upload<R, T>(&self, path: &str, fsync: bool, input: R) -> Result<T, ClientError>
    where
        R: tokio::io::AsyncRead + Send + 'static,
        T: DeserializeOwned,
    {
        use futures_util::StreamExt;
        let stream = tokio_util::io::ReaderStream::with_capacity(input, 256 * 1024)
            .map(|r| r.map(Frame::data));
        let sync = if fsync { "&fsync=true" } else { "" };
        let req = Client::request(
            Method::PUT,
            &format!("/v1/fs/raw?path={}{sync}", encode(path)),
        )
        .header(hyper::header::CONTENT_TYPE, "application/octet-stream")
        .body(StreamBody::new(stream))
        .map_err(|e| ClientError::Local(e.to_string()))?;
        let bytes = Client::finish(self.send(req).await?).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
    }
}

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
