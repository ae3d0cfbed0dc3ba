//! The connection type both servers take, in plain text or TLS, and the
//! TLS handshake that turns an accepted socket into one: bounded in time as
//! a whole (`tls.handshake_timeout`), and counted by outcome in
//! `tally_tls_handshakes_total{listener,outcome}`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::debug;

use crate::listen::{Closed, Tracked};

/// The socket under either kind of connection, its progress tracked.
pub type Socket = Tracked<TcpStream>;

/// One accepted connection, in plain text or TLS.
pub enum Conn {
    Plain(Socket),
    Tls(Box<TlsStream<Socket>>),
}

impl Conn {
    /// The peer's address, for logs.
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        let tcp = match self {
            Conn::Plain(s) => s.get_ref(),
            Conn::Tls(s) => s.get_ref().0.get_ref(),
        };
        tcp.peer_addr().ok()
    }
}

/// Runs the server side of a TLS handshake on `io`, giving up after
/// `timeout` for the whole of it; `name` labels the metric (`grpc`,
/// `http`).
pub async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    io: Socket,
    timeout: Duration,
    name: &'static str,
) -> Result<Conn, Closed> {
    let peer = io.get_ref().peer_addr().ok();
    let outcome = match tokio::time::timeout(timeout, acceptor.accept(io)).await {
        Ok(Ok(tls)) => Ok(Conn::Tls(Box::new(tls))),
        Ok(Err(e)) => Err((Closed::HandshakeFailed, e.to_string())),
        Err(_) => Err((
            Closed::HandshakeTimeout,
            format!("no handshake within {timeout:?}"),
        )),
    };
    let label: &'static str = match &outcome {
        Ok(_) => "ok",
        // Scanners and misconfigured clients fail handshakes all day: debug
        // level, with a counter to alert on.
        Err((why, detail)) => {
            debug!(listener = name, ?peer, error = %detail, "TLS handshake failed");
            match why {
                Closed::HandshakeTimeout => "timeout",
                _ => "failed",
            }
        }
    };
    metrics::counter!("tally_tls_handshakes_total", "listener" => name, "outcome" => label)
        .increment(1);
    outcome.map_err(|(why, _)| why)
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
