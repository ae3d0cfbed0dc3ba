//! The listening sockets the gRPC and HTTP servers take, with the bounds
//! every connection lives within whatever protocol it speaks (the Graphite
//! listener counts its connections itself, and says why in
//! [`crate::graphite`]):
//!
//! * a cap on open connections per listener, where a new connection takes
//!   the place of one that keeps the daemon waiting on its client (`pool`);
//!   HTTP adds a small reserve beyond its cap that serves only the health
//!   and metrics endpoints;
//! * with TLS, a deadline on the whole handshake and a cap on handshakes in
//!   progress (evicting the same way);
//! * a deadline on each write the client does not take (`tracked`);
//! * the open-file limit, checked and raised at start against the caps
//!   (`fds`).
//!
//! Each server supplies what happens inside a connection ([`Serve`]): the
//! HTTP/1 server its header, body and keep-alive deadlines, the gRPC server
//! its preface and idle deadlines. Every connection is its own task, on
//! one of the connection threads when the listener has them (`threads`),
//! and each one that ends is counted by why (`tally_<listener>_connections_
//! closed_total{reason}`).

pub mod fds;
mod pool;
mod threads;
mod tracked;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::error;

pub use pool::{Active, Member, Pool, Slot, Waiting, MAX_EVICTING, STALLED};
pub use threads::{on_shared, on_shared_if_large, ConnThreads, LARGE_REQUEST};
pub use tracked::Tracked;

use crate::tls::{Conn, Io, Protocol, ServerTls};

/// Connections the kernel may hold completed for `accept` (it caps this at
/// `net.core.somaxconn`). Past the queue a client's handshake is not
/// refused but dropped and retried on the TCP retransmission backoff, so a
/// burst of new connections (a fleet reconnecting after a restart) would
/// wait seconds; tokio's default (1,024) is one listener's default connection
/// cap, with nothing to spare for a burst.
const BACKLOG: u32 = 8_192;

/// A listening socket on `addr` with a [`BACKLOG`] deep accept queue.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As `TcpListener::bind` does: a restart may rebind at once while the
    // previous process' connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Why a connection ended, as counted in `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Closed {
    /// The client closed it, or the server finished with it.
    Done = 1,
    /// The client broke the protocol (a malformed request, a wrong
    /// preface, a reset mid-request).
    Error,
    HandshakeTimeout,
    HandshakeFailed,
    /// Made room for a new connection at the cap.
    Evicted,
    /// `http.header_read_timeout`: no complete request head in time, from
    /// the connection's start or the previous response's end.
    HeaderTimeout,
    /// `http.body_read_timeout`.
    BodyTimeout,
    /// `http.write_timeout`: the client took nothing for that long.
    WriteTimeout,
    /// `grpc.preface_timeout`.
    PrefaceTimeout,
    /// `grpc.idle_timeout`.
    IdleTimeout,
    /// The peer stopped answering pings (`grpc.keepalive_timeout`).
    KeepaliveTimeout,
    /// The daemon is shutting down.
    Shutdown,
}

impl Closed {
    const ALL: [Closed; 12] = [
        Closed::Done,
        Closed::Error,
        Closed::HandshakeTimeout,
        Closed::HandshakeFailed,
        Closed::Evicted,
        Closed::HeaderTimeout,
        Closed::BodyTimeout,
        Closed::WriteTimeout,
        Closed::PrefaceTimeout,
        Closed::IdleTimeout,
        Closed::KeepaliveTimeout,
        Closed::Shutdown,
    ];

    fn from_u8(v: u8) -> Option<Closed> {
        Closed::ALL.into_iter().find(|c| *c as u8 == v)
    }

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Closed::Done => "closed",
            Closed::Error => "protocol_error",
            Closed::HandshakeTimeout => "handshake_timeout",
            Closed::HandshakeFailed => "handshake_failed",
            Closed::Evicted => "evicted",
            Closed::HeaderTimeout => "header_timeout",
            Closed::BodyTimeout => "body_timeout",
            Closed::WriteTimeout => "write_timeout",
            Closed::PrefaceTimeout => "preface_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::KeepaliveTimeout => "keepalive_timeout",
            Closed::Shutdown => "shutdown",
        }
    }
}

/// The metric names of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    /// `http` or `grpc`: the `listener` label, and the stem of the others.
    pub listener: &'static str,
    /// Gauge of connections open (in the main pool).
    pub open: &'static str,
    /// Counter of connections accepted: each is then refused, or closed
    /// and counted in `closed`.
    pub accepted: &'static str,
    /// Counter of connections refused at the cap.
    pub refused: &'static str,
    /// Counter of connections ended, by `reason`.
    pub closed: &'static str,
}

impl Names {
    pub const HTTP: Names = Names {
        listener: "http",
        open: "tally_http_connections",
        accepted: "tally_http_connections_accepted_total",
        refused: "tally_http_connections_refused_total",
        closed: "tally_http_connections_closed_total",
    };
    pub const GRPC: Names = Names {
        listener: "grpc",
        open: "tally_grpc_connections",
        accepted: "tally_grpc_connections_accepted_total",
        refused: "tally_grpc_connections_refused_total",
        closed: "tally_grpc_connections_closed_total",
    };
}

/// Gauge of the HTTP connections served from the reserve.
const RESERVE_GAUGE: &str = "tally_http_reserved_connections";

/// The bounds a listener applies to every connection.
#[derive(Debug, Clone)]
pub struct Limits {
    pub names: Names,
    /// Connections served in full at once.
    pub max_connections: usize,
    /// Connections beyond the cap that the server may answer in a limited
    /// way (HTTP's health and metrics); 0 for none.
    pub reserved: usize,
    /// A write the client takes nothing of for this long fails the
    /// connection; `None` leaves it to the protocol (gRPC's keepalive).
    pub write_timeout: Option<Duration>,
}

/// What a server does inside each connection.
pub trait Serve: Clone + Send + Sync + 'static {
    /// Serves `conn` until it ends; on `stop`, finishes what is in
    /// progress and ends. `reserve`: the connection came in beyond the cap
    /// and may only be answered in the limited way. Returns why it ended.
    fn serve<S: Io>(
        &self,
        conn: Conn<S>,
        member: Arc<Member>,
        reserve: bool,
        stop: CancellationToken,
    ) -> impl Future<Output = Closed> + Send;

    /// Turns away a connection no slot could take, without waiting on it.
    fn refuse(&self, _tcp: &TcpStream) {}
}

/// A bound socket, not yet accepting.
pub struct Listener {
    tcp: TcpListener,
    tls: Option<(Arc<ServerTls>, Protocol)>,
    limits: Limits,
    local: SocketAddr,
    threads: Option<Arc<ConnThreads>>,
}

impl Listener {
    /// Takes over `tcp`; with `tls`, connections are served after a
    /// successful handshake.
    pub fn new(
        tcp: TcpListener,
        tls: Option<(Arc<ServerTls>, Protocol)>,
        limits: Limits,
    ) -> io::Result<Listener> {
        let local = tcp.local_addr()?;
        Ok(Listener {
            tcp,
            tls,
            limits,
            local,
            threads: None,
        })
    }

    /// Serves each connection on one of `threads` rather than on the
    /// runtime the listener runs on.
    pub fn on_threads(mut self, threads: Arc<ConnThreads>) -> Listener {
        self.threads = Some(threads);
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Accepts and serves connections with `serve` until `shutdown`, then
    /// closes the socket, lets every connection finish (each is told to by
    /// `shutdown`) and returns once they have.
    pub async fn run<S: Serve>(self, serve: S, shutdown: CancellationToken) {
        let epoch = tokio::time::Instant::now();
        let pools = Pools {
            main: Pool::new(self.limits.max_connections, epoch),
            reserve: Pool::new(self.limits.reserved, epoch),
            handshakes: Pool::new(
                self.tls.as_ref().map_or(0, |(t, _)| t.max_handshakes()),
                epoch,
            ),
        };
        let names = self.limits.names;
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = self.tcp.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e, names.listener, &shutdown).await;
                    continue;
                }
            };
            metrics::counter!(names.accepted).increment(1);
            // Small requests and responses: do not wait to fill a segment.
            let _ = stream.set_nodelay(true);
            let member = Arc::new(Member::new(epoch));
            let (slot, reserve) = match pools.main.admit(&member) {
                Some(slot) => (slot, false),
                None => match pools.reserve.admit(&member) {
                    Some(slot) => (slot, true),
                    None => {
                        metrics::counter!(names.refused).increment(1);
                        serve.refuse(&stream);
                        continue;
                    }
                },
            };
            let task = ConnTask {
                serve: serve.clone(),
                tls: self.tls.clone(),
                handshakes: pools.handshakes.clone(),
                limits: self.limits.clone(),
                stop: shutdown.clone(),
            };
            match &self.threads {
                Some(threads) => threads.spawn(stream, move |stream| {
                    task.run(stream, member, slot, reserve)
                }),
                None => drop(tokio::spawn(task.run(stream, member, slot, reserve))),
            }
        }
        drop(self.tcp);
        pools.main.emptied().await;
        pools.reserve.emptied().await;
    }
}

struct Pools {
    main: Arc<Pool>,
    reserve: Arc<Pool>,
    handshakes: Arc<Pool>,
}

/// A listener without a socket, for harnesses: connections given to it as
/// in-memory streams are admitted and served as an accepted one would be.
#[cfg(test)]
pub(crate) struct Harness {
    pools: Pools,
    tls: Option<(Arc<ServerTls>, Protocol)>,
    limits: Limits,
    stop: CancellationToken,
}

#[cfg(test)]
impl Harness {
    pub(crate) fn new(limits: Limits, tls: Option<(Arc<ServerTls>, Protocol)>) -> Harness {
        let epoch = tokio::time::Instant::now();
        Harness {
            pools: Pools {
                main: Pool::new(limits.max_connections, epoch),
                reserve: Pool::new(limits.reserved, epoch),
                handshakes: Pool::new(tls.as_ref().map_or(0, |(t, _)| t.max_handshakes()), epoch),
            },
            tls,
            limits,
            stop: CancellationToken::new(),
        }
    }

    /// Serves `stream` with `serve` in a task of its own; `None` when no
    /// slot takes it (it is then dropped, as a refused socket is).
    pub(crate) fn serve<T: Serve, S: Io>(
        &self,
        serve: &T,
        stream: S,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let member = Arc::new(Member::new(tokio::time::Instant::now()));
        let (slot, reserve) = match self.pools.main.admit(&member) {
            Some(slot) => (slot, false),
            None => (self.pools.reserve.admit(&member)?, true),
        };
        let task = ConnTask {
            serve: serve.clone(),
            tls: self.tls.clone(),
            handshakes: self.pools.handshakes.clone(),
            limits: self.limits.clone(),
            stop: self.stop.clone(),
        };
        Some(tokio::spawn(task.run(stream, member, slot, reserve)))
    }

    /// Connections holding a slot.
    pub(crate) fn open(&self) -> usize {
        self.pools.main.counted() + self.pools.reserve.counted() + self.pools.handshakes.counted()
    }
}

/// One connection's life.
struct ConnTask<T> {
    serve: T,
    tls: Option<(Arc<ServerTls>, Protocol)>,
    handshakes: Arc<Pool>,
    limits: Limits,
    stop: CancellationToken,
}

impl<T: Serve> ConnTask<T> {
    async fn run<S: Io>(self, stream: S, member: Arc<Member>, slot: Slot, reserve: bool) {
        let names = self.limits.names;
        let gauge = if reserve { RESERVE_GAUGE } else { names.open };
        metrics::gauge!(gauge).increment(1.0);
        let io = Tracked::new(stream, member.clone(), self.limits.write_timeout);
        let served = async {
            let conn = match &self.tls {
                None => Conn::Plain(io),
                Some((tls, protocol)) => {
                    // Another slot, among the handshakes in progress.
                    let _handshaking = self.handshakes.admit(&member)?;
                    let acceptor = tls.acceptor(*protocol);
                    let timeout = tls.handshake_timeout();
                    match crate::tls::handshake(acceptor, io, timeout, names.listener).await {
                        Ok(conn) => conn,
                        Err(why) => return Some(why),
                    }
                }
            };
            Some(
                self.serve
                    .serve(conn, member.clone(), reserve, self.stop.clone())
                    .await,
            )
        };
        let closed = tokio::select! {
            // The slot is already given to another connection: close now.
            _ = member.evicted() => Some(Closed::Evicted),
            closed = served => closed,
        };
        metrics::gauge!(gauge).decrement(1.0);
        // No handshake slot could be had: refused, as at the listener's cap.
        let Some(closed) = closed else {
            metrics::counter!(names.refused).increment(1);
            return;
        };
        // A deadline that decided it names the reason better than the
        // error it caused.
        let closed = member.reason().unwrap_or(closed);
        metrics::counter!(names.closed, "reason" => closed.label()).increment(1);
        drop(slot);
    }
}

async fn accept_failed(e: io::Error, name: &'static str, shutdown: &CancellationToken) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    // Out of file descriptors, most likely (the caps are sized below the
    // limit, see `fds`): give connections time to close instead of
    // spinning.
    error!(listener = name, error = %e, "accepting a connection failed");
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// A burst of connections deeper than tokio's default queue completes
    /// its handshakes before any is accepted: with a 1,024 deep queue the
    /// kernel drops the SYNs past it until `accept` makes room.
    #[tokio::test]
    async fn a_burst_past_1024_connections_is_queued_not_dropped() {
        let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let burst = somaxconn.min(super::BACKLOG).min(2_000) as usize;
        if burst <= 1_100 {
            eprintln!(
                "net.core.somaxconn is {somaxconn}: the kernel caps the queue at tokio's default"
            );
            return;
        }
        super::fds::raise_to(burst as u64 + 256);
        let listener = super::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::with_capacity(burst);
        for i in 0..burst {
            let connect = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_secs(10), connect).await {
                Ok(Ok(c)) => clients.push(c),
                other => panic!("connection {i} of {burst} not queued: {other:?}"),
            }
        }
        for _ in 0..burst {
            listener.accept().await.unwrap();
        }
    }
}
