//! The listening socket both servers take: a task accepts connections and,
//! with TLS on, runs each handshake in a task of its own, bounded in number
//! and time, so a client that connects and says nothing holds neither the
//! accept loop nor more than one handshake slot. Finished connections reach
//! the server through a small queue. The gRPC server reads them as a stream
//! and the HTTP server as an axum listener.
//!
//! Dropping the listener stops the accept task, which closes the socket and
//! abandons the handshakes in progress.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::server::TlsStream;
use tracing::{debug, error};

use super::{Protocol, ServerTls};

/// Connections accepted (and, with TLS, through their handshake) waiting
/// for the server to take them.
const QUEUE: usize = 64;

/// One accepted connection, in plain text or TLS.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref().0,
        }
    }
}

/// A listening socket whose connections are handed over ready to serve.
pub struct SecureListener {
    ready: mpsc::Receiver<(Conn, SocketAddr)>,
    local: SocketAddr,
    accept: JoinHandle<()>,
}

impl SecureListener {
    /// Takes over `tcp`; with `tls`, connections are handed over after a
    /// successful handshake. `name` labels the metrics (`grpc`, `http`).
    pub fn new(
        tcp: TcpListener,
        tls: Option<(Arc<ServerTls>, Protocol)>,
        name: &'static str,
    ) -> io::Result<SecureListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(QUEUE);
        let accept = tokio::spawn(accept_loop(tcp, tls, tx, name));
        Ok(SecureListener {
            ready,
            local,
            accept,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for SecureListener {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    tcp: TcpListener,
    tls: Option<(Arc<ServerTls>, Protocol)>,
    tx: mpsc::Sender<(Conn, SocketAddr)>,
    name: &'static str,
) {
    let slots = Arc::new(Semaphore::new(
        tls.as_ref().map_or(1, |(t, _)| t.max_handshakes()),
    ));
    // Owned here, so stopping this task aborts the handshakes too.
    let mut handshakes = JoinSet::new();
    loop {
        while handshakes.try_join_next().is_some() {}
        // Waiting for a slot before accepting leaves the excess in the
        // kernel's queue rather than in our memory.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match tcp.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(e, name).await;
                continue;
            }
        };
        // Small requests and responses: do not wait to fill a segment.
        let _ = stream.set_nodelay(true);
        match &tls {
            None => {
                drop(slot);
                if tx.send((Conn::Plain(stream), peer)).await.is_err() {
                    return;
                }
            }
            Some((tls, protocol)) => {
                let acceptor = tls.acceptor(*protocol);
                let timeout = tls.handshake_timeout();
                let tx = tx.clone();
                handshakes.spawn(async move {
                    let conn = handshake(acceptor, stream, peer, timeout, name).await;
                    drop(slot);
                    if let Some(conn) = conn {
                        let _ = tx.send((conn, peer)).await;
                    }
                });
            }
        }
    }
}

async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
    name: &'static str,
) -> Option<Conn> {
    let outcome = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Ok(Conn::Tls(Box::new(tls))),
        Ok(Err(e)) => Err(("failed", e.to_string())),
        Err(_) => Err(("timeout", format!("no handshake within {timeout:?}"))),
    };
    let label: &'static str = match &outcome {
        Ok(_) => "ok",
        // Scanners and misconfigured clients fail handshakes all day: debug
        // level, with a counter to alert on.
        Err((label, why)) => {
            debug!(listener = name, %peer, error = %why, "TLS handshake failed");
            label
        }
    };
    metrics::counter!("tally_tls_handshakes_total", "listener" => name, "outcome" => label)
        .increment(1);
    outcome.ok()
}

async fn accept_failed(e: io::Error, name: &'static str) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    // Out of file descriptors, most likely: give connections time to close
    // instead of spinning.
    error!(listener = name, error = %e, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

impl futures::Stream for SecureListener {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.ready
            .poll_recv(cx)
            .map(|next| next.map(|(conn, _)| Ok(conn)))
    }
}

impl axum::serve::Listener for SecureListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp().connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
