//! The HTTP/2 server inside each gRPC connection ([`crate::listen`] accepts
//! them), with the `[grpc]` deadlines: the connection preface must arrive
//! within `grpc.preface_timeout`; a connection with no call in progress for
//! `grpc.idle_timeout` is closed with GOAWAY; a peer that stops answering
//! pings is dropped after `grpc.keepalive_timeout`. Calls in progress are
//! counted on the connection, which is how the listener knows which
//! connections wait on their clients (see `listen::pool`).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tower::util::BoxCloneSyncService;
use tower::ServiceExt as _;
use tracing::debug;

use super::GrpcConfig;
use crate::listen::{Active, Closed, Member, Serve};
use crate::tls::{Conn, Io};

/// Every service of the listener, behind one router.
pub(super) type Services = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// What every HTTP/2 connection opens with.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a connection closed for idleness may take to go once told.
const IDLE_GRACE: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub(super) struct GrpcServe {
    services: Services,
    cfg: GrpcConfig,
    builder: http2::Builder<TokioExecutor>,
}

impl GrpcServe {
    pub(super) fn new(services: Services, cfg: GrpcConfig) -> GrpcServe {
        let mut builder = http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            // gRPC has no use for a `date` on each response; leaving it out
            // spares a clock read and its header's encoding per call.
            .auto_date_header(false)
            .max_concurrent_streams(cfg.max_concurrent_streams)
            .keep_alive_interval(cfg.keepalive_interval)
            .keep_alive_timeout(cfg.keepalive_timeout);
        GrpcServe {
            services,
            cfg,
            builder,
        }
    }
}

impl Serve for GrpcServe {
    async fn serve<S: Io>(
        &self,
        mut conn: Conn<S>,
        member: Arc<Member>,
        _reserve: bool,
        stop: CancellationToken,
    ) -> Closed {
        let mut preface = [0u8; PREFACE.len()];
        let read = tokio::select! {
            _ = stop.cancelled() => return Closed::Shutdown,
            read = tokio::time::timeout(self.cfg.preface_timeout, conn.read_exact(&mut preface)) => read,
        };
        match read {
            Err(_) => return Closed::PrefaceTimeout,
            Ok(Err(_)) => return Closed::Done,
            Ok(Ok(_)) if &preface != PREFACE => return Closed::Error,
            Ok(Ok(_)) => {}
        }
        let io = Rewind {
            prefix: preface,
            at: 0,
            inner: conn,
        };
        let services = self.services.clone();
        let calls = member.clone();
        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let active = calls.begin();
            let call = services.clone().oneshot(req.map(Body::new));
            async move {
                let resp = call.await?;
                Ok::<_, Infallible>(resp.map(|body| {
                    Body::new(Counted {
                        inner: body,
                        _active: active,
                    })
                }))
            }
        });
        let conn = self.builder.serve_connection(TokioIo::new(io), svc);
        let mut conn = std::pin::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            _ = idle(&member, self.cfg.idle_timeout) => {
                member.close_for(Closed::IdleTimeout);
                conn.as_mut().graceful_shutdown();
                match tokio::time::timeout(IDLE_GRACE, conn.as_mut()).await {
                    Ok(r) => r,
                    Err(_) => return Closed::IdleTimeout,
                }
            }
            _ = stop.cancelled() => {
                member.close_for(Closed::Shutdown);
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        match result {
            Ok(()) => Closed::Done,
            Err(e) if keepalive_timed_out(&e) => Closed::KeepaliveTimeout,
            Err(e) => {
                debug!(error = %e, "gRPC connection ended");
                Closed::Error
            }
        }
    }
}

/// Resolves once the connection has had no call in progress for `limit`.
async fn idle(member: &Member, limit: Duration) {
    loop {
        let idle = member.idle_for();
        if idle >= limit {
            return;
        }
        tokio::time::sleep(limit - idle).await;
    }
}

fn keepalive_timed_out(e: &hyper::Error) -> bool {
    let mut cause: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cause {
        if c.to_string().contains("keep-alive timed out") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A response body that holds its call's place on the connection until it
/// is sent (or dropped).
struct Counted {
    inner: Body,
    _active: Active,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The connection with the preface, read to check it, put back in front.
struct Rewind<S> {
    prefix: [u8; PREFACE.len()],
    at: usize,
    inner: Conn<S>,
}

impl<S: Io> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let rest = &this.prefix[this.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: Io> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
