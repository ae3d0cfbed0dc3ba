//! SIGHUP: a rotated token stops working and its successor starts, an
//! expired one is refused, a new certificate is served to new connections,
//! and a bad file leaves what was in force.

use std::time::Duration;

use super::*;

const RELOAD_WAIT: Duration = Duration::from_secs(10);
const NEW_INGEST: &str = "it-ingest-rotated-0123456789";
const NEW_READ: &str = "it-read-rotated-0123456789ab";
const EXPIRED: &str = "it-read-expired-0123456789ab";

/// Tokens over plain text on loopback (metadata rather than call
/// credentials on the gRPC side).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_and_expired_tokens_stop_working_after_sighup() {
    let files = Files::new();
    let mut d = Daemon::start_async(with_tokens(tallyd(), &files, &tokens_toml())).await;
    let api = format!("{}/api/v1/sources", d.http_url());
    let status = |token: &str| {
        curl(
            &api,
            CurlOpts {
                token: Some(token),
                ..CurlOpts::default()
            },
        )
        .status
    };
    assert_eq!(status(READ), 200);
    assert_eq!(status(NEW_READ), 401);

    files.write(
        "tokens.toml",
        &format!(
            "[[token]]\nname = \"web-agents\"\nrole = \"ingest\"\nsources = [\"web-*\"]\ntoken = \"{NEW_INGEST}\"\n\
             [[token]]\nname = \"dashboards\"\nrole = \"read\"\ntoken = \"{NEW_READ}\"\n\
             [[token]]\nname = \"old-dashboards\"\nrole = \"read\"\ntoken = \"{EXPIRED}\"\nexpires = \"2020-01-01T00:00:00Z\"\n"
        ),
    );
    d.sighup();
    d.wait_for_log("tokens reloaded", 1, RELOAD_WAIT).await;
    assert_eq!(status(READ), 401, "the rotated read token");
    assert_eq!(status(NEW_READ), 200, "its successor");
    let expired = curl(
        &api,
        CurlOpts {
            token: Some(EXPIRED),
            ..CurlOpts::default()
        },
    );
    assert_eq!(expired.status, 401);
    assert!(
        expired.body.contains("\"old-dashboards\" expired"),
        "{expired:?}"
    );

    let c = client(&d, None);
    let calls = vec![
        push(Some(INGEST), &[("web-1", "cpu", 1.0)]),
        push(Some(NEW_INGEST), &[("web-1", "cpu", 2.0)]),
    ];
    let r = tokio::task::spawn_blocking(move || c.call(&calls))
        .await
        .unwrap();
    assert_eq!(r[0].code, "UNAUTHENTICATED", "{:?}", r[0]);
    assert_eq!(r[1].code, "OK", "{:?}", r[1]);

    // A broken file is reported and changes nothing.
    files.write("tokens.toml", "[[token]]\nname = \"half-written\"\n");
    d.sighup();
    d.wait_for_log("tokens reload failed", 1, RELOAD_WAIT).await;
    assert_eq!(status(NEW_READ), 200);
    assert_eq!(status(READ), 401);
    let log = d.logs();
    for secret in [INGEST, READ, NEW_INGEST, NEW_READ, EXPIRED] {
        assert!(!log.contains(secret), "a token is in the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_certificate_is_served_after_sighup() {
    let files = Files::new();
    let (first, second) = (files.issue("first", true), files.issue("second", true));
    let mut d = Daemon::start_async(with_tls(&files, &first)).await;
    let url = https_url(&d, "/healthz");
    let exit_with = |ca: &Path| {
        curl(
            &url,
            CurlOpts {
                ca: Some(ca),
                ..CurlOpts::default()
            },
        )
        .exit
    };
    assert_eq!(exit_with(&first.ca), 0);
    assert_eq!(exit_with(&second.ca), 60, "the second CA is not in use yet");

    std::fs::copy(&second.cert, files.path("cert.pem")).unwrap();
    std::fs::copy(&second.key, files.path("key.pem")).unwrap();
    d.sighup();
    d.wait_for_log("TLS certificate reloaded", 1, RELOAD_WAIT)
        .await;
    assert_eq!(exit_with(&second.ca), 0);
    assert_eq!(exit_with(&first.ca), 60);
    let c = client(&d, Some(&second.ca));
    let r = tokio::task::spawn_blocking(move || c.call(&[latest(None, "web-1", "cpu")]))
        .await
        .unwrap();
    assert_eq!(r[0].code, "OK", "{:?}", r[0]);

    // A key that does not match the certificate: the reload fails whole.
    std::fs::copy(&first.key, files.path("key.pem")).unwrap();
    d.sighup();
    d.wait_for_log("TLS reload failed", 1, RELOAD_WAIT).await;
    assert_eq!(exit_with(&second.ca), 0);
}
