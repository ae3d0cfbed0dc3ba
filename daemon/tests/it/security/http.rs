//! The HTTP listener over TLS with tokens, from `curl --cacert`: probes are
//! open, every read needs a read or admin token, refusals say why.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_read_tokens_and_probes_stay_open() {
    let files = Files::new();
    let (d, server) = secured(&files).await;
    let ca = Some(server.ca.as_path());
    let get = |path: &str, token: Option<&'static str>| {
        let url = https_url(&d, path);
        let o = CurlOpts {
            ca,
            token,
            ..CurlOpts::default()
        };
        let got = curl(&url, o);
        assert_eq!(got.exit, 0, "curl {url}: {got:?}");
        got
    };

    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(probe, None).status, 200, "{probe}");
    }

    let none = get("/api/v1/sources", None);
    assert_eq!(none.status, 401, "{none:?}");
    let challenge = none.headers.to_ascii_lowercase();
    assert!(
        challenge.contains("www-authenticate: bearer realm=\"tally\""),
        "{none:?}"
    );
    let unknown = get("/api/v1/sources", Some("it-no-such-token-0123456789"));
    assert_eq!(unknown.status, 401, "{unknown:?}");
    assert!(
        unknown.headers.contains("error=\"invalid_token\""),
        "{unknown:?}"
    );
    let ingest = get("/api/v1/sources", Some(INGEST));
    assert_eq!(ingest.status, 403, "{ingest:?}");
    assert!(
        ingest.body.contains("\"web-agents\" has role ingest"),
        "{ingest:?}"
    );

    for path in [
        "/api/v1/sources",
        "/prometheus/api/v1/query?query=1",
        "/metrics",
    ] {
        assert_eq!(
            get(path, Some(READ)).status,
            200,
            "{path} with a read token"
        );
        assert_eq!(
            get(path, Some(ADMIN)).status,
            200,
            "{path} with an admin token"
        );
        assert_eq!(get(path, None).status, 401, "{path} without a token");
    }
    let metrics = get("/metrics", Some(READ)).body;
    assert!(
        metrics.contains("tally_auth_denied_total{listener=\"http\",reason=\"missing\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("tally_tls_handshakes_total"), "{metrics}");

    // A client that does not trust the daemon's CA never gets to send.
    let untrusted = curl(&https_url(&d, "/healthz"), CurlOpts::default());
    assert_eq!(untrusted.exit, 60, "{untrusted:?}");
    assert!(untrusted.stderr.contains("certificate"), "{untrusted:?}");
    // Plain HTTP to the TLS listener gets no answer.
    let plain = curl(&format!("{}/healthz", d.http_url()), CurlOpts::default());
    assert_ne!(plain.status, 200, "{plain:?}");
}
