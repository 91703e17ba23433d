//! The stdio transport of `wardfs mcp`: one bound on a message, and an answer past it.
//!
//! rmcp's stdio transport drops a line longer than its cap (16 MiB) with a log line and no
//! answer, so a client that sent a 17 MiB `write` waited forever. Here [`pump`] reads stdin
//! first: a message (one line) of up to [`max_message_bytes`] — twice `limits.max_write_bytes`
//! plus 64 KiB, the API's own rule for a JSON body, since a file's text may double when escaped
//! — goes on to rmcp's transport through an in-process pipe. A longer one is cut: what already
//! went on is ended with a byte that keeps it from parsing (rmcp ignores a line that is not
//! JSON), the rest is read and dropped without being held, and [`Bounded`] answers a JSON-RPC
//! error (`-32600`, `data.code = "TOO_LARGE"`) naming the limit and the config key. The answer
//! carries the request's `id` when the line's first 64 KiB hold it (clients write `id` before
//! `params`); otherwise it has none, as MCP says for a request whose id cannot be read. The
//! session goes on: the next message is read as usual.

use std::borrow::Cow;
use std::future::Future;

use rmcp::model::{ErrorCode, ErrorData, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// What a message may hold beyond the file a `write` carries: the JSON-RPC envelope, the tool's
/// name and its other arguments.
const FRAMING_BYTES: usize = 64 << 10;
/// How much of a refused line's start is kept to find its `id`.
const ID_PROBE_BYTES: usize = 64 << 10;
/// The pipe between [`pump`] and rmcp's transport, and the piece read from stdin at once.
const PIPE_BYTES: usize = 64 << 10;

/// Returns the longest message (line, without its newline) the server reads: twice
/// `max_write_bytes` (the JSON-escaped text of the largest file a `write` may carry) plus 64 KiB.
pub fn max_message_bytes(max_write_bytes: u64) -> usize {
    usize::try_from(max_write_bytes)
        .unwrap_or(usize::MAX)
        .saturating_mul(2)
        .saturating_add(FRAMING_BYTES)
}

/// A message [`pump`] did not hand on.
#[derive(Debug)]
struct Refused {
    id: Option<RequestId>,
    limit: usize,
}

impl Refused {
    /// The JSON-RPC error that answers it.
    fn answer(&self) -> TxJsonRpcMessage<RoleServer> {
        let message = format!(
            "the message is longer than {} bytes, the most wardfs mcp reads (twice \
             limits.max_write_bytes plus 64 KiB); it was not read. Write a smaller file, or \
             raise limits.max_write_bytes in the daemon's config",
            self.limit
        );
        let data =
            json!({"code": "TOO_LARGE", "limit": self.limit, "key": "limits.max_write_bytes"});
        let error = ErrorData::new(ErrorCode::INVALID_REQUEST, message, Some(data));
        TxJsonRpcMessage::<RoleServer>::error(error, self.id.clone())
    }
}

/// rmcp's stdio transport behind [`pump`]: messages come through the pump, answers go to
/// stdout, and each refused message is answered with its error.
pub struct Bounded<W: AsyncWrite + Send + Unpin + 'static> {
    inner: AsyncRwTransport<RoleServer, DuplexStream, W>,
    refused: mpsc::UnboundedReceiver<Refused>,
}

impl Bounded<tokio::io::Stdout> {
    /// Serves on stdin and stdout, refusing messages over `limit` bytes.
    pub fn stdio(limit: usize) -> Self {
        Bounded::new(tokio::io::stdin(), tokio::io::stdout(), limit)
    }
}

impl<W: AsyncWrite + Send + Unpin + 'static> Bounded<W> {
    /// Reads messages from `input` (a task pumps it) and writes answers to `output`.
    pub fn new<R: AsyncRead + Send + Unpin + 'static>(input: R, output: W, limit: usize) -> Self {
        let (to_rmcp, from_pump) = tokio::io::duplex(PIPE_BYTES);
        let (refuse, refused) = mpsc::unbounded_channel();
        tokio::spawn(pump(input, to_rmcp, refuse, limit));
        // The pump already bounds every line: rmcp's own cap must never cut one it passes
        // (at most the limit, plus the byte and newline that end a cut line).
        let inner = AsyncRwTransport::new(from_pump, output).with_max_line_length(limit + 2);
        Bounded { inner, refused }
    }
}

impl<W: AsyncWrite + Send + Unpin + 'static> Transport<RoleServer> for Bounded<W> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            tokio::select! {
                message = self.inner.receive() => return message,
                Some(refused) = self.refused.recv() => {
                    // Sent on its own, so that a cancelled `receive` cannot lose the answer.
                    let answer = self.inner.send(refused.answer());
                    tokio::spawn(async move {
                        if let Err(e) = answer.await {
                            tracing::warn!("cannot answer a refused MCP message: {e}");
                        }
                    });
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

/// The line being read by [`pump`].
#[derive(Default)]
struct Line {
    /// Bytes of it read so far (without the newline).
    len: usize,
    /// Its first bytes, to find the `id` of a refused line.
    start: Vec<u8>,
    /// Set once it was refused: the rest is dropped.
    refused: bool,
}

/// Copies `input` to `output` line by line; a line over `limit` bytes is cut, dropped and
/// reported to `refuse`. Ends at the end of `input` (or when rmcp stops reading), which
/// closes `output`: rmcp then sees the end of the session.
async fn pump(
    input: impl AsyncRead + Unpin,
    mut output: DuplexStream,
    refuse: mpsc::UnboundedSender<Refused>,
    limit: usize,
) {
    let mut reader = BufReader::with_capacity(PIPE_BYTES, input);
    let mut line = Line::default();
    loop {
        let piece = match reader.fill_buf().await {
            Ok(piece) if !piece.is_empty() => piece,
            _ => return,
        };
        let (take, ends) = match memchr::memchr(b'\n', piece) {
            Some(at) => (at + 1, true),
            None => (piece.len(), false),
        };
        let text = &piece[..take - usize::from(ends)];
        if !line.refused && line.len + text.len() > limit {
            line.refused = true;
            // What went on must not parse: rmcp ignores a line that is not JSON.
            if line.len > 0 && output.write_all(b"!\n").await.is_err() {
                return;
            }
            let id = id_in(&line.start, text);
            let _ = refuse.send(Refused { id, limit });
        }
        if !line.refused {
            if output.write_all(&piece[..take]).await.is_err() {
                return;
            }
            line.len += text.len();
            let room = ID_PROBE_BYTES.saturating_sub(line.start.len());
            line.start.extend_from_slice(&text[..room.min(text.len())]);
        }
        reader.consume(take);
        if ends {
            line = Line::default();
        }
    }
}

/// Returns the `id` of the JSON-RPC message that `start` then `more` begin, when the first
/// 64 KiB of it hold one.
fn id_in(start: &[u8], more: &[u8]) -> Option<RequestId> {
    let mut probe = start.to_vec();
    let room = ID_PROBE_BYTES.saturating_sub(probe.len());
    probe.extend_from_slice(&more[..room.min(more.len())]);
    let mut id = None;
    // The message is cut, so the parse fails; the id is kept if it came before the cut.
    let _ = serde_json::Deserializer::from_slice(&probe).deserialize_map(IdProbe(&mut id));
    id
}

/// Reads the members of a message's object until it finds `id`.
struct IdProbe<'a>(&'a mut Option<RequestId>);

impl<'de> Visitor<'de> for IdProbe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<str>>()? {
            if key == "id" {
                *self.0 = Some(map.next_value::<RequestId>()?);
                return Ok(());
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_found_before_the_cut() {
        let start = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"content":"xx"#;
        assert_eq!(id_in(start, b"xxx"), Some(RequestId::Number(7)));
        let named = br#"{"method":"tools/call","id":"a\"b","params":{"#;
        assert_eq!(
            id_in(&named[..10], &named[10..]),
            Some(RequestId::String("a\"b".into()))
        );
        let late = br#"{"jsonrpc":"2.0","params":{"arguments":{"content":"xxxx"#;
        assert_eq!(id_in(late, b""), None);
        assert_eq!(id_in(b"not json", b""), None);
    }

    #[test]
    fn the_limit_follows_max_write_bytes() {
        assert_eq!(max_message_bytes(100 << 20), (200 << 20) + (64 << 10));
        assert_eq!(max_message_bytes(u64::MAX), usize::MAX);
    }
}
