//! The HTTP/1 server inside each connection ([`crate::listen`] accepts
//! them), with the `[http]` deadlines: the request head (which also ends
//! idle keep-alive connections), the request body, and the reserve's
//! limited service beyond the connection cap; and the bounds on the request
//! head and body.
//!
//! Each connection is its own task, so a client that reads its response
//! slowly holds only its own connection, and only until
//! `http.write_timeout` passes with nothing taken.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::debug;

use super::config::RESERVE_HEADER_TIMEOUT;
use super::HttpConfig;
use crate::listen::{Closed, Listener, Member, Serve};
use crate::tls::{Conn, Io};

/// The connection a request came on, for the layers that tell it what the
/// request is waiting for.
#[derive(Clone)]
pub(crate) struct ConnHandle(pub(crate) Arc<Member>);

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets
/// the open connections finish their requests and waits for them.
/// Connections beyond the cap, in the reserve, are served `reserve`.
pub(super) async fn serve(
    listener: Listener,
    routers: (Router, Router),
    cfg: HttpConfig,
    tls: bool,
    shutdown: CancellationToken,
) {
    listener
        .run(HttpServe::new(routers, &cfg, tls), shutdown)
        .await;
}

/// The HTTP/1 server of each connection: `router` for connections within
/// the cap, `reserve` for those beyond it.
#[derive(Clone)]
pub(crate) struct HttpServe(Arc<Inner>);

impl HttpServe {
    pub(crate) fn new((router, reserve): (Router, Router), cfg: &HttpConfig, tls: bool) -> Self {
        let builder = |header_timeout: Duration, keep_alive: bool| {
            let mut b = http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_header_size(cfg.max_header_bytes)
                .keep_alive(keep_alive);
            b
        };
        HttpServe(Arc::new(Inner {
            main: (builder(cfg.header_read_timeout, true), router),
            reserve: (
                builder(cfg.header_read_timeout.min(RESERVE_HEADER_TIMEOUT), false),
                reserve,
            ),
            refusal: (!tls).then(|| refusal(cfg.max_connections)),
        }))
    }
}

struct Inner {
    main: (http1::Builder, Router),
    reserve: (http1::Builder, Router),
    /// The 503 written to a connection no slot takes, over plain text.
    refusal: Option<String>,
}

impl Serve for HttpServe {
    async fn serve<S: Io>(
        &self,
        conn: Conn<S>,
        member: Arc<Member>,
        reserve: bool,
        stop: CancellationToken,
    ) -> Closed {
        let (builder, router) = if reserve {
            &self.0.reserve
        } else {
            &self.0.main
        };
        let router = router.clone();
        let for_requests = member.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let router = router.clone();
            let member = for_requests.clone();
            async move {
                let _active = member.begin();
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnHandle(member.clone()));
                let resp: Result<Response, Infallible> = router.oneshot(req).await;
                resp
            }
        });
        let conn = builder.serve_connection(TokioIo::new(conn), svc);
        let mut conn = std::pin::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            _ = stop.cancelled() => {
                member.close_for(Closed::Shutdown);
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        match result {
            Ok(()) => Closed::Done,
            Err(e) if e.is_timeout() => Closed::HeaderTimeout,
            Err(e) if e.is_parse() || e.is_parse_too_large() || e.is_user() => {
                debug!(error = %e, "HTTP connection ended");
                Closed::Error
            }
            Err(e) => {
                debug!(error = %e, "HTTP connection ended");
                Closed::Done
            }
        }
    }

    /// A short 503 naming the setting, written only if the socket takes it
    /// at once: refused clients cannot hold anything.
    fn refuse(&self, tcp: &TcpStream) {
        if let Some(text) = &self.0.refusal {
            let _ = tcp.try_write(text.as_bytes());
        }
    }
}

/// The 503 a connection over every cap gets, head and body.
fn refusal(max: usize) -> String {
    let body = format!(
        "{{\"error\":\"the daemon has {max} HTTP connections open (http.max_connections); retry shortly\"}}\n"
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The answer to a request beyond the cap that the reserve does not serve.
pub(super) fn over_capacity(max: usize) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
        axum::Json(serde_json::json!({
            "status": "error",
            "errorType": "unavailable",
            "error": format!(
                "the daemon has {max} HTTP connections open (http.max_connections); \
                 only /healthz, /readyz and /metrics are served beyond them; retry shortly"
            ),
        })),
    )
        .into_response()
}

/// How a route family words a refused body (413, 408, 400): each protocol
/// answers in its own error format.
pub(super) type Refusal = fn(&HeaderMap, StatusCode, String) -> Response;

/// The Prometheus API's error format, which the read routes share.
pub(super) fn json_refusal(_: &HeaderMap, status: StatusCode, message: String) -> Response {
    let kind = match status {
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST => "bad_data",
        _ => "timeout",
    };
    (
        status,
        axum::Json(serde_json::json!({
            "status": "error",
            "errorType": kind,
            "error": message,
        })),
    )
        .into_response()
}

/// What a route family's bodies may be.
#[derive(Clone, Copy)]
pub(super) struct BodyLimits {
    pub max: usize,
    /// The setting `max` comes from, for messages.
    pub setting: &'static str,
    /// `http.body_read_timeout`.
    pub timeout: Duration,
    pub refusal: Refusal,
}

/// Reads the bodies of `router`'s routes whole before the handler runs,
/// within `limits`: a declared length over the limit is refused before
/// anything is read; a body that grows past it, or takes longer than the
/// timeout to arrive, is refused as it is read, and the connection closed
/// after the answer.
pub(super) fn limit_body(router: Router, limits: BodyLimits) -> Router {
    // The handlers' extractors take what this read, whole: their own
    // default bound (2 MiB) must not cut it shorter.
    router
        .layer(axum::middleware::from_fn_with_state(limits, read_body))
        .layer(axum::extract::DefaultBodyLimit::max(limits.max))
}

async fn read_body(
    axum::extract::State(limits): axum::extract::State<BodyLimits>,
    req: Request,
    next: Next,
) -> Response {
    let BodyLimits {
        max,
        setting,
        timeout,
        refusal,
    } = limits;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > max as u64) {
        let msg = format!("the request body is {n} bytes; the limit is {max} ({setting})");
        return close(refusal(req.headers(), StatusCode::PAYLOAD_TOO_LARGE, msg));
    }
    if http_body::Body::is_end_stream(req.body()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let conn = parts.extensions.get::<ConnHandle>().cloned();
    let _waiting = conn.as_ref().map(|c| c.0.waiting());
    let read = tokio::time::timeout(timeout, Limited::new(body, max).collect()).await;
    drop(_waiting);
    let bytes = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            let msg = format!("the request body is over {max} bytes ({setting})");
            return close(refusal(&parts.headers, StatusCode::PAYLOAD_TOO_LARGE, msg));
        }
        Ok(Err(e)) => {
            let msg = format!("the request body could not be read: {e}");
            return close(refusal(&parts.headers, StatusCode::BAD_REQUEST, msg));
        }
        Err(_) => {
            if let Some(c) = &conn {
                c.0.close_for(Closed::BodyTimeout);
            }
            let msg = format!(
                "the request body did not arrive within {} (http.body_read_timeout)",
                crate::validate::format_duration(timeout)
            );
            return close(refusal(&parts.headers, StatusCode::REQUEST_TIMEOUT, msg));
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Asks for the connection to close after `r`: the rest of the refused
/// body is never read.
fn close(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
