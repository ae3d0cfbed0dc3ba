//! The HTTP side: middleware in front of every route but `/healthz` and
//! `/readyz`, which load balancers probe without credentials. The ingest
//! endpoints (OTLP/HTTP, remote-write) need an `ingest` or `admin` token;
//! everything else the listener serves is a read (the JSON API, the
//! Prometheus API, `/metrics`), so it needs a `read` or `admin` token.
//! Refusals are 401 with `WWW-Authenticate: Bearer` (RFC 6750) or 403 for
//! the wrong role.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{count_denied, Authenticator, Denied, Need};

/// Paths served to anyone.
const OPEN: &[&str] = &["/healthz", "/readyz"];

/// Axum middleware (`middleware::from_fn_with_state`) deciding each request
/// of the routes it wraps, which need `need`.
pub async fn require_token(
    State((auth, need)): State<(Authenticator, Need)>,
    mut request: Request,
    next: Next,
) -> Response {
    if !auth.enabled() || OPEN.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    match auth.authorize(header, need) {
        Ok(grant) => {
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        Err(denied) => refuse(&denied),
    }
}

fn refuse(denied: &Denied) -> Response {
    count_denied("http", denied);
    let message = format!("{denied}\n");
    if denied.is_forbidden() {
        return (StatusCode::FORBIDDEN, message).into_response();
    }
    // A client that sent a token learns it was not accepted; one that sent
    // none learns only which scheme to use.
    let challenge = match denied {
        Denied::Missing => "Bearer realm=\"tally\"",
        _ => "Bearer realm=\"tally\", error=\"invalid_token\"",
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        message,
    )
        .into_response()
}
