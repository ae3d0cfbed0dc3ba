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

/// What a connection can run over: an accepted socket, or in tests an
/// in-memory stream.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for S {}

/// One accepted connection, in plain text or TLS, over its socket with its
/// progress tracked.
pub enum Conn<S = TcpStream> {
    Plain(Tracked<S>),
    Tls(Box<TlsStream<Tracked<S>>>),
}

/// Runs the server side of a TLS handshake on `io`, giving up after
/// `timeout` for the whole of it; `name` labels the metric (`grpc`,
/// `http`).
pub async fn handshake<S: Io>(
    acceptor: tokio_rustls::TlsAcceptor,
    io: Tracked<S>,
    timeout: Duration,
    name: &'static str,
) -> Result<Conn<S>, Closed> {
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
            debug!(listener = name, error = %detail, "TLS handshake failed");
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

impl<S: Io> AsyncRead for Conn<S> {
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

impl<S: Io> AsyncWrite for Conn<S> {
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
