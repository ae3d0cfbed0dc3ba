//! The HTTP listener's accept loop, with the `[http]` limits: a cap on open
//! connections, a deadline for each request's headers (which also ends idle
//! keep-alive connections), and bounds on the request head and body.
//!
//! Each connection is its own task, so a client that reads its response
//! slowly holds only its own connection. At the cap, a new connection gets
//! a short 503 naming the setting and is closed at once, rather than
//! waiting unseen in the kernel's backlog.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::Listener as _;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::HttpConfig;
use crate::tls::{Conn, SecureListener};

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets
/// the open connections finish their requests and waits for them.
pub(super) async fn serve(
    mut listener: SecureListener,
    router: Router,
    cfg: HttpConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .max_header_size(cfg.max_header_bytes);
    let cap = u32::try_from(cfg.max_connections).unwrap_or(u32::MAX);
    let permits = Arc::new(Semaphore::new(cap as usize));
    loop {
        // The listener retries failed accepts itself (and, with TLS,
        // hands over only connections whose handshake completed).
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            (stream, _) = listener.accept() => stream,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse(stream, cfg.max_connections);
            continue;
        };
        metrics::gauge!("tally_http_connections").increment(1.0);
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                debug!(error = %e, "HTTP connection ended");
            }
            metrics::gauge!("tally_http_connections").decrement(1.0);
            drop(permit);
        });
    }
    drop(listener);
    // Every connection returns its permit when it ends.
    let _all_closed = permits.acquire_many(cap).await;
    Ok(())
}

/// Answers a connection over `http.max_connections` with a short 503 and
/// closes it; the write gets a second at most, so refused clients cannot
/// pile up.
fn refuse(mut stream: Conn, max: usize) {
    metrics::counter!("tally_http_connections_refused_total").increment(1);
    let body = format!(
        "{{\"error\":\"the daemon has {max} HTTP connections open (http.max_connections); retry shortly\"}}\n"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REFUSE_WRITE_TIMEOUT, async {
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        })
        .await;
    });
}

/// How long a refused connection's 503 may take to write.
const REFUSE_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Bounds the bodies `router`'s routes take to `max` bytes, the value of
/// `setting`.
pub(super) fn limit_body(router: Router, max: usize, setting: &'static str) -> Router {
    router
        .layer(axum::middleware::from_fn_with_state(
            (max, setting),
            refuse_large_body,
        ))
        .layer(DefaultBodyLimit::max(max))
}

/// A declared body over the limit is refused before anything reads it; a
/// chunked one is cut off by [`DefaultBodyLimit`] as it is read.
async fn refuse_large_body(
    axum::extract::State((max, setting)): axum::extract::State<(usize, &'static str)>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > max as u64 => (
            StatusCode::PAYLOAD_TOO_LARGE,
            axum::Json(serde_json::json!({
                "status": "error",
                "errorType": "bad_data",
                "error": format!("the request body is {n} bytes; the limit is {max} ({setting})"),
            })),
        )
            .into_response(),
        _ => next.run(req).await,
    }
}
