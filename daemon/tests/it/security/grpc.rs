//! Roles and source globs over gRPC with TLS, from Python `grpcio` sending
//! its tokens as call credentials.

use tally_testkit::pygrpc::Reply;

use super::*;

fn assert_code(reply: &Reply, code: &str, what: &str) {
    assert_eq!(reply.code, code, "{what}: {reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_decide_who_pushes_and_reads_what() {
    let files = Files::new();
    let (d, server) = secured(&files).await;
    let c = client(&d, Some(&server.ca));
    let calls = vec![
        push(Some(INGEST), &[("web-1", "cpu", 1.0)]),
        push(None, &[("web-1", "cpu", 2.0)]),
        push(
            Some("it-no-such-token-0123456789"),
            &[("web-1", "cpu", 3.0)],
        ),
        push(Some(READ), &[("web-1", "cpu", 4.0)]),
        latest(Some(INGEST), "web-1", "cpu"),
        // One source inside the token's globs, one outside.
        push(Some(INGEST), &[("web-2", "cpu", 5.0), ("db-1", "mem", 6.0)]),
        // Nothing inside.
        push(Some(INGEST), &[("db-1", "mem", 7.0), ("db-2", "mem", 8.0)]),
        push(Some(ADMIN), &[("db-1", "cpu", 9.0)]),
    ];
    let r = tokio::task::spawn_blocking(move || c.call(&calls))
        .await
        .unwrap();

    assert_code(&r[0], "OK", "ingest token, own source");
    assert_eq!(r[0].response["accepted"], "1", "{:?}", r[0]);
    assert_code(&r[1], "UNAUTHENTICATED", "no token");
    assert!(r[1].details.contains("Bearer"), "{:?}", r[1]);
    assert_code(&r[2], "UNAUTHENTICATED", "unknown token");
    assert_code(&r[3], "PERMISSION_DENIED", "read token pushing");
    assert!(
        r[3].details.contains("\"dashboards\" has role read"),
        "{:?}",
        r[3]
    );
    assert_code(&r[4], "PERMISSION_DENIED", "ingest token reading");

    assert_code(&r[5], "OK", "one source of two allowed");
    let partial = &r[5].response;
    assert_eq!(partial["accepted"], "1", "{partial}");
    assert_eq!(partial["rejected"], "1", "{partial}");
    let rejection = &partial["rejections"][0];
    assert_eq!(
        rejection["reason"], "REJECT_REASON_SOURCE_NOT_ALLOWED",
        "{partial}"
    );
    assert_eq!(rejection["source_index"], 1, "{partial}");
    assert!(
        rejection["detail"].as_str().unwrap().contains("web-*"),
        "{partial}"
    );

    assert_code(&r[6], "PERMISSION_DENIED", "no source allowed");
    assert!(r[6].details.contains("web-*"), "{:?}", r[6]);
    assert_code(&r[7], "OK", "admin pushes any source");

    only_the_allowed_pushes_were_stored(&d, &server.ca).await;
    // Tokens never reach the log, whatever happened to their requests.
    let log = d.logs();
    for secret in [INGEST, READ, ADMIN] {
        assert!(!log.contains(secret), "a token is in the log");
    }
}

/// What was refused left nothing behind; what was taken is readable.
async fn only_the_allowed_pushes_were_stored(d: &Daemon, ca: &Path) {
    let c = client(d, Some(ca));
    let reads = vec![
        latest(Some(READ), "web-1", "cpu"),
        latest(Some(ADMIN), "db-1", "cpu"),
        latest(Some(READ), "db-1", "mem"),
        latest(Some(READ), "db-2", "mem"),
    ];
    let r = tokio::task::spawn_blocking(move || c.call(&reads))
        .await
        .unwrap();
    let value = |reply: &Reply| reply.response["series"][0]["last_value"].as_f64();
    assert_code(&r[0], "OK", "read token reading");
    assert_eq!(value(&r[0]), Some(1.0), "{:?}", r[0]);
    assert_eq!(value(&r[1]), Some(9.0), "{:?}", r[1]);
    for refused in &r[2..] {
        assert_code(refused, "OK", "read of a refused source");
        assert_eq!(value(refused), None, "{refused:?}");
    }
}
