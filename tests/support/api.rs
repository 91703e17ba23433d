//! Talking to a daemon's API from a test: [`Api`], a blocking client of one socket that never
//! panics on a dead daemon (the crash tests call it while the daemon is down), and [`code`], the
//! code of a JSON error body. [`Daemon`](super::daemon::Daemon) answers through an `Api` of its
//! own; raw HTTP goes through curl ([`Daemon::curl`](super::daemon::Daemon::curl)).

use std::path::{Path, PathBuf};

use serde_json::Value;
use wardfs::client::{Client, ClientError};
use wardfs::core::ErrorCode;

/// An API error as the tests see it: the code and message, or `None` for a transport failure
/// (the daemon died or the socket is gone).
pub type ApiResult = Result<Value, (Option<ErrorCode>, String)>;

/// A blocking client of one daemon socket.
pub struct Api {
    socket: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Api {
    pub fn new(socket: &Path) -> Api {
        Api {
            socket: socket.to_path_buf(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// The runtime the calls block on (for the library client's other calls).
    pub fn rt(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }

    /// A library client of the socket.
    pub fn client(&self) -> Client {
        Client::new(&self.socket)
    }

    /// POSTs JSON; the answer, or the error's code (None when no answer came) and message.
    pub fn post(&self, route: &str, body: &Value) -> ApiResult {
        self.rt
            .block_on(self.client().post::<_, Value>(route, body))
            .map_err(|e| match e {
                ClientError::Api { code, message, .. } => (Some(code), message),
                other => (None, other.to_string()),
            })
    }

    /// GETs a route; the answer, or the error as [`Api::post`] gives it.
    pub fn get(&self, route: &str) -> ApiResult {
        self.rt
            .block_on(self.client().get::<Value>(route))
            .map_err(|e| match e {
                ClientError::Api { code, message, .. } => (Some(code), message),
                other => (None, other.to_string()),
            })
    }

    /// Like `post`, but the call must succeed.
    pub fn ok(&self, route: &str, body: Value) -> Value {
        self.post(route, &body)
            .unwrap_or_else(|e| panic!("{route} {body}: {e:?}"))
    }

    /// Like `post`, but the call must fail with an API error; returns its code and message.
    pub fn err(&self, route: &str, body: Value) -> (ErrorCode, String) {
        match self.post(route, &body) {
            Ok(v) => panic!("{route} {body} succeeded: {v}"),
            Err((Some(code), msg)) => (code, msg),
            Err((None, msg)) => panic!("{route} {body}: no answer from the daemon: {msg}"),
        }
    }
}

/// Returns the error code of a JSON error body.
pub fn code(v: &Value) -> &str {
    v["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {v}"))
}
