//! The socket's connections: how many are served, how long one may idle, and who makes room.
//!
//! * At most [`Policy::max`] connections are served at once: `api.max_connections`, kept under
//!   an eighth of the descriptor limit (the mount may hold three quarters of it), so a flood of
//!   connections never runs the daemon out of descriptors.
//! * A connection must send a complete request head within `api.idle_timeout_secs` of opening
//!   and of each answer (hyper's header-read timeout); then it is closed. So an idle or
//!   half-open connection holds its slot for that long at most.
//! * When every slot is taken, a new connection takes the slot of the **oldest idle one** (no
//!   request in flight: waiting for a head, or half of one), which is closed. A client that
//!   connects and sends its request at once (the CLI, MCP) therefore always gets through a flood
//!   of idle connections: it is the newest, and busy as soon as its head arrives. Connections
//!   with a request in flight (an answer streaming, a body being read) are never closed to make
//!   room; when every slot is busy, the new connection is closed unserved.
//! * A failed `accept` (the descriptor limit reached: EMFILE) closes the oldest idle connection
//!   to free a descriptor and backs off (10 ms doubling to 1 s); the log says so at most once
//!   every [`LOG_EVERY`], with the count of what it did not repeat.
//! * On shutdown, connections without a request in flight are closed at once; the others may
//!   finish their answer within [`SHUTDOWN_DEADLINE`], then they are closed too.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::UnixStream;
use tokio::sync::{watch, Notify};

use super::peer::{Peer, PeerListener};
use crate::config::Connections;

/// How long a shutdown waits for answers in flight to end before it closes their connections:
/// a client that never reads its answer, or sends half a body, must not keep the daemon alive.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// The least often a repeated connection warning (accept failing, slots full) is logged.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// The fewest connections served, whatever the descriptor limit.
const MIN_CONNECTIONS: usize = 16;

/// How the connections are bounded, as configured and as the descriptor limit allows.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Most connections served at once.
    pub max: usize,
    /// How long a connection may go without a complete request head.
    pub idle_timeout: Duration,
}

impl Policy {
    /// `api.max_connections`, lowered to an eighth of the soft descriptor limit (at least
    /// [`MIN_CONNECTIONS`]), and `api.idle_timeout_secs`.
    pub fn of(c: Connections) -> Policy {
        let fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let by_fds = usize::try_from(fds / 8).unwrap_or(usize::MAX);
        Policy {
            max: c.max.min(by_fds.max(MIN_CONNECTIONS)),
            idle_timeout: c.idle_timeout,
        }
    }
}

/// A warning repeated in a loop, logged at most once every [`LOG_EVERY`].
#[derive(Default)]
pub struct Throttle {
    last: Mutex<Option<Instant>>,
    skipped: AtomicU64,
}

impl Throttle {
    /// Whether to log now; `Some(n)`: yes, and `n` occurrences since the last line were not.
    pub fn due(&self) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < LOG_EVERY) {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(Instant::now());
        Some(self.skipped.swap(0, Ordering::Relaxed))
    }
}

/// One served connection, as the table sees it.
#[derive(Default)]
struct Slot {
    /// Requests in flight: from the head's arrival to the end of its answer's body.
    in_flight: AtomicUsize,
    /// Told when the connection is to be closed to make room.
    evict: Notify,
}

impl Slot {
    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// The connections being served, oldest (lowest id) first.
struct Table {
    slots: Mutex<BTreeMap<u64, Arc<Slot>>>,
    next: AtomicU64,
    max: usize,
    full: Throttle,
}

impl Table {
    fn new(max: usize) -> Arc<Table> {
        Arc::new(Table {
            slots: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            max,
            full: Throttle::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the oldest connection with no request in flight; false when every one is busy.
    fn evict_oldest_idle(slots: &mut BTreeMap<u64, Arc<Slot>>) -> bool {
        let Some(id) = slots.iter().find(|(_, s)| s.idle()).map(|(id, _)| *id) else {
            return false;
        };
        if let Some(slot) = slots.remove(&id) {
            slot.evict.notify_one();
        }
        true
    }

    /// Gives a new connection a slot, closing the oldest idle one when all are taken; `None`
    /// when every slot has a request in flight.
    fn admit(self: &Arc<Table>) -> Option<Ticket> {
        let mut slots = self.lock();
        if slots.len() >= self.max && !Table::evict_oldest_idle(&mut slots) {
            drop(slots);
            if let Some(skipped) = self.full.due() {
                tracing::warn!(
                    max_connections = self.max,
                    refused_since_last = skipped,
                    "every connection has a request in flight (api.max_connections): refused a new one"
                );
            }
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        slots.insert(id, slot.clone());
        Some(Ticket {
            table: self.clone(),
            id,
            slot,
        })
    }
}

/// A connection's place in the table, given back when it closes.
struct Ticket {
    table: Arc<Table>,
    id: u64,
    slot: Arc<Slot>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.table.lock().remove(&self.id);
    }
}

/// A request in flight on a connection: it is not idle until this is dropped, which happens
/// with the answer's body (so a streaming answer keeps its connection busy).
struct InFlight(Arc<Slot>);

impl InFlight {
    fn begin(slot: &Arc<Slot>) -> InFlight {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(slot.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's body that keeps its request [`InFlight`] until it is sent (or dropped).
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The router as one connection's service: each request carries the peer's credentials
/// (`ConnectInfo<Peer>`) and counts as in flight until its answer is sent.
fn service(
    router: Router,
    peer: Peer,
    slot: Arc<Slot>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone {
    let inner = TowerToHyperService::new(router);
    hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let in_flight = InFlight::begin(&slot);
        let answer = hyper::service::Service::call(&inner, req);
        async move {
            let resp = answer.await?;
            Ok(resp.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        }
    })
}

/// What every connection task shares.
#[derive(Clone)]
struct Shared {
    router: Router,
    policy: Policy,
    /// Becomes true when the daemon starts to stop.
    stopping: watch::Receiver<bool>,
    /// Held by every connection task (never read): the server waits until all are dropped.
    _open: watch::Receiver<()>,
}

/// Serves one connection until it ends, is evicted, or the daemon stops.
async fn serve_one(io: UnixStream, peer: Peer, ticket: Ticket, mut shared: Shared) {
    let slot = ticket.slot.clone();
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.policy.idle_timeout)
        .serve_connection(
            TokioIo::new(io),
            service(shared.router.clone(), peer, slot.clone()),
        );
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            () = slot.evict.notified() => return,
            _ = shared.stopping.wait_for(|s| *s), if !stopping => {
                stopping = true;
                if slot.idle() {
                    return;
                }
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Whether an accept error means the descriptors ran out.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Accepts connections and serves each on a task of its own until `stop` turns true.
async fn accept_loop(
    mut listener: PeerListener,
    table: Arc<Table>,
    shared: Shared,
    mut stop: watch::Receiver<bool>,
) {
    let failed = Throttle::default();
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            a = listener.accept_peer() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok(Some((io, peer))) => {
                backoff = Duration::ZERO;
                if let Some(ticket) = table.admit() {
                    tokio::spawn(serve_one(io, peer, ticket, shared.clone()));
                }
            }
            Ok(None) => {}
            Err(e) => {
                let freed = out_of_descriptors(&e) && Table::evict_oldest_idle(&mut table.lock());
                backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                if let Some(skipped) = failed.due() {
                    tracing::warn!(
                        error = %e,
                        closed_an_idle_connection = freed,
                        retry_in_ms = backoff.as_millis() as u64,
                        failed_since_last = skipped,
                        "accept failed"
                    );
                }
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then closes idle connections at
/// once and lets answers in flight end for at most [`SHUTDOWN_DEADLINE`].
pub async fn serve(
    listener: PeerListener,
    router: Router,
    policy: Policy,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    tracing::info!(
        max_connections = policy.max,
        idle_timeout_s = policy.idle_timeout.as_secs(),
        "connection limits"
    );
    let (stop, stopping) = watch::channel(false);
    let (opened, open) = watch::channel(());
    let table = Table::new(policy.max);
    let shared = Shared {
        router,
        policy,
        stopping: stopping.clone(),
        _open: open,
    };
    let accepting = tokio::spawn(accept_loop(listener, table, shared, stopping));
    shutdown.await;
    stop.send_replace(true);
    // The listener closes with the accept loop; its receiver of `open` goes with it.
    let _ = accepting.await;
    if tokio::time::timeout(SHUTDOWN_DEADLINE, opened.closed())
        .await
        .is_err()
    {
        tracing::warn!(
            after_s = SHUTDOWN_DEADLINE.as_secs(),
            "connections still open after the shutdown deadline: closing them"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_makes_room_by_closing_its_oldest_idle_connection_only() {
        let table = Table::new(2);
        let first = table.admit().expect("a free slot");
        let second = table.admit().expect("a free slot");
        let busy = InFlight::begin(&first.slot);
        // The first is older but busy: the second, idle, makes room.
        let third = table.admit().expect("room made");
        assert_eq!(first.slot.in_flight.load(Ordering::Relaxed), 1);
        assert!(!table.lock().contains_key(&second.id), "the idle one left");
        assert!(table.lock().contains_key(&first.id), "the busy one stayed");
        // Now both are busy: a newcomer is refused, nothing is closed.
        let _also_busy = InFlight::begin(&third.slot);
        assert!(table.admit().is_none(), "no room when all are busy");
        assert_eq!(table.lock().len(), 2);
        // A busy one that finishes is idle again and can make room.
        drop(busy);
        assert!(table.admit().is_some());
        assert!(!table.lock().contains_key(&first.id));
    }

    #[test]
    fn a_closed_connection_gives_its_slot_back() {
        let table = Table::new(1);
        let t = table.admit().unwrap();
        drop(t);
        assert!(table.lock().is_empty());
    }

    #[test]
    fn a_repeated_warning_is_due_once_per_period_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.due(), Some(0));
        for _ in 0..1000 {
            assert_eq!(t.due(), None);
        }
        *t.last.lock().unwrap() = Some(Instant::now() - LOG_EVERY);
        assert_eq!(t.due(), Some(1000));
    }

    #[test]
    fn the_cap_stays_under_the_descriptor_limit() {
        let fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let p = Policy::of(Connections {
            max: 1_000_000,
            idle_timeout: Duration::from_secs(1),
        });
        assert!(
            (p.max as u64) < fds || p.max == MIN_CONNECTIONS,
            "{p:?} for {fds} fds"
        );
        let small = Policy::of(Connections {
            max: 3,
            idle_timeout: Duration::from_secs(1),
        });
        assert_eq!(small.max, 3);
    }
}
