//! The Graphite plaintext listener (`[graphite]`, off unless `listen` is
//! set): TCP connections sending `path value [timestamp]` lines, as
//! collectd's `write_graphite`, Telegraf's graphite output and carbon
//! clients do. What a line means is decided in [`crate::ingest::graphite`].
//!
//! # When a line counts as kept
//!
//! The protocol has no acknowledgement. Each connection gathers its lines
//! into a batch, and a batch goes through the same admission as every
//! other protocol (limits, backpressure, the write-ahead log): a line is
//! kept once its batch is in the log. A batch is admitted when it holds
//! `graphite.batch_lines` lines, `graphite.batch_delay` after its first
//! line was read, when the client closes its side of the connection, or
//! when the daemon shuts down. The daemon closes its side of a connection
//! in order only once the client has closed its own and everything it
//! sent is admitted, so a client that shuts down its sending side and
//! waits for the end of the stream knows that every line it sent has been
//! admitted (the load generator does this). Any other end (shutdown, the
//! idle timeout, a batch not kept, a crash) is a reset (see
//! `conn::abort_if_dropped`).
//!
//! # Bounds
//!
//! `graphite.max_connections` connections at once (one more is closed at
//! once); `graphite.idle_timeout` without a byte closes a connection; a
//! line longer than `graphite.max_line_bytes` is cut there and the rest of
//! it discarded unread into memory, so a never-ending line costs a
//! connection's bounded buffer and nothing more. A connection reads its
//! next batch while the one before is admitted, and holds at most those
//! two. While the store is behind (backpressure), a connection stops
//! reading once its next batch is full too, so the client is slowed by
//! TCP rather than dropped.
//!
//! # Why not `listen`'s pool
//!
//! The gRPC and HTTP listeners share [`crate::listen`]: at the cap, a new
//! connection takes the place of one that keeps the daemon waiting on its
//! client, such as one idle between requests. That is safe there because
//! an idle connection holds nothing unanswered, and the client of an
//! evicted one learns it from its next call. A Graphite connection is idle
//! between lines by design (collectd and Telegraf keep one open and write
//! every interval), and the protocol has no acknowledgement: a client of an
//! evicted connection cannot tell which lines it wrote before it saw the
//! close, so eviction would drop lines silently. Refusing the new
//! connection as soon as it is accepted loses nothing: the client has sent
//! nothing on it yet, sees the close at once, and connects again later.
//! Hence a plain count of open connections (a semaphore) rather than the
//! pool; no TLS and no per-request deadlines, the pool's other parts, apply
//! either.
//!
//! # Bad lines
//!
//! A malformed, over-long or source-less line is refused alone: it counts
//! as one rejected sample (`tally_samples_rejected_total{protocol="graphite"}`,
//! reason `invalid_point` or `missing_source`) and is logged, at most one
//! line per second for the whole listener; it never closes the connection.
//!
//! Graphite carries no token: the listener takes every source from anyone
//! who reaches it, whatever `[auth]` says. Keep it on loopback or a trusted
//! network.

mod config;
mod conn;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

pub use config::GraphiteConfig;

use crate::ingest::Ingestor;

/// Serves Graphite plaintext on `listener` until `shutdown` is cancelled;
/// then every connection admits what it has read and closes, and this
/// returns once all have.
pub async fn serve(
    listener: TcpListener,
    ingest: Arc<Ingestor>,
    cfg: GraphiteConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let cap = u32::try_from(cfg.max_connections).unwrap_or(u32::MAX);
    let permits = Arc::new(Semaphore::new(cap as usize));
    let ctx = Arc::new(conn::Ctx::new(ingest, cfg));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait, do not spin.
                warn!(error = %e, "graphite: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            metrics::counter!("tally_graphite_connections_refused_total").increment(1);
            debug!(%peer, "graphite: connection refused (graphite.max_connections)");
            drop(stream);
            continue;
        };
        metrics::gauge!("tally_graphite_connections").increment(1.0);
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            conn::serve(stream, peer, ctx, shutdown).await;
            metrics::gauge!("tally_graphite_connections").decrement(1.0);
            drop(permit);
        });
    }
    drop(listener);
    let _all_closed = permits.acquire_many(cap).await;
    Ok(())
}

/// Warns at start about what the listener at `addr` lets in.
pub fn warn_exposure(addr: std::net::SocketAddr, auth_enabled: bool) {
    if !addr.ip().is_loopback() {
        warn!("graphite.listen {addr} is reachable from other hosts: Graphite plaintext carries no token and no TLS, so anyone who reaches it can push for any source");
    } else if auth_enabled {
        warn!("graphite.listen {addr} is on: Graphite plaintext carries no token, so its lines are not held to [auth]");
    }
}
