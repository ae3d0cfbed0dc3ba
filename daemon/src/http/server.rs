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
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::HttpConfig;

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets
/// the open connections finish their requests and waits for them.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    cfg: HttpConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            cfg.max_body_bytes,
            refuse_large_body,
        ))
        .layer(DefaultBodyLimit::max(cfg.max_body_bytes));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .max_header_size(cfg.max_header_bytes);
    let cap = u32::try_from(cfg.max_connections).unwrap_or(u32::MAX);
    let permits = Arc::new(Semaphore::new(cap as usize));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection that died in
                    // the backlog: pause briefly rather than spin.
                    warn!(error = %e, "accepting an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
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

/// Answers a connection over `http.max_connections` without a task: the
/// response fits a fresh socket's send buffer, so one non-blocking write
/// is enough, and closing follows.
fn refuse(stream: TcpStream, max: usize) {
    metrics::counter!("tally_http_connections_refused_total").increment(1);
    let body = format!(
        "{{\"error\":\"the daemon has {max} HTTP connections open (http.max_connections); retry shortly\"}}\n"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

/// A declared body over `http.max_body_bytes` is refused before anything
/// reads it; a chunked one is cut off by [`DefaultBodyLimit`] as it is read.
async fn refuse_large_body(
    axum::extract::State(max): axum::extract::State<usize>,
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
                "error": format!("the request body is {n} bytes; the limit is {max} (http.max_body_bytes)"),
            })),
        )
            .into_response(),
        _ => next.run(req).await,
    }
}
