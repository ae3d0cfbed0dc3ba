//! The built-in dashboard: the page at `/` and its scripts, styles and icon
//! under `/ui/`, compiled into the binary from `dashboards/web/` (see
//! [`assets`]), so it needs no network and no build step.
//!
//! The files hold no data: they are served to anyone, so that a browser
//! without a token can load the page that asks for one. Everything the page
//! shows it reads from the API with the reader's token, under the same
//! rules as any other client. Every response carries a
//! Content-Security-Policy of `default-src 'self'`: the page may load and
//! fetch only from this daemon, and no inline script or style runs.

mod assets;
mod config;

pub use config::UiConfig;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The policy on every response of the dashboard's files.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'";

/// The page and its files.
pub(crate) fn router() -> Router {
    Router::new()
        .route(
            "/",
            get(|h: HeaderMap| async move { serve("index.html", &h) }),
        )
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>, h: HeaderMap| async move { serve(&file, &h) }),
        )
}

/// One file, or 304 when the browser's copy is current, or 404.
fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some(asset) = assets::find(name) else {
        return with_policy(
            (
                StatusCode::NOT_FOUND,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("no dashboard file {name:?}\n"),
            )
                .into_response(),
        );
    };
    let etag = asset.etag();
    let current = request
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut response = if current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    // Revalidated on every load: a new daemon's page is never mixed with
    // an old one's modules.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_policy(response)
}

fn with_policy(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Problems;
    use axum::body::Body;
    use axum::http::Request;
    use std::time::Duration;
    use tower::ServiceExt as _;

    async fn get(path: &str, etag: Option<&str>) -> Response {
        let mut req = Request::get(path);
        if let Some(e) = etag {
            req = req.header(header::IF_NONE_MATCH, e);
        }
        router()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn every_file_is_served_with_the_policy_and_revalidated() {
        let page = get("/", None).await;
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(
            page.headers()[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert!(page.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        for a in assets::ASSETS {
            let r = get(&format!("/ui/{}", a.name), None).await;
            assert_eq!(r.status(), StatusCode::OK, "{}", a.name);
            assert_eq!(r.headers()[header::CONTENT_TYPE], a.content_type);
            let etag = r.headers()[header::ETAG].to_str().unwrap().to_string();
            let again = get(&format!("/ui/{}", a.name), Some(&etag)).await;
            assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{}", a.name);
            assert!(again
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY));
        }
        let missing = get("/ui/nothing.js", None).await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert!(missing
            .headers()
            .contains_key(header::CONTENT_SECURITY_POLICY));
        assert_eq!(
            get("/ui/..%2fmain.rs", None).await.status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn stale_after_must_be_a_second_or_more() {
        let mut p = Problems::default();
        UiConfig {
            stale_after: Duration::from_millis(10),
            ..UiConfig::default()
        }
        .check(&mut p);
        assert_eq!(p.into_vec()[0].0, "ui.stale_after");
    }
}
