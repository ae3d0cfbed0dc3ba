//! `tls.client_ca_file`: clients without a certificate from that CA do not
//! get through the handshake, on either listener.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_when_a_client_ca_is_set() {
    let files = Files::new();
    let server = files.issue("server", true);
    let agent = files.issue("agent", false);
    let stranger = files.issue("stranger", false);
    let opts = with_tls(&files, &server).env("TALLYD_TLS_CLIENT_CA_FILE", path_str(&agent.ca));
    let d = Daemon::start_async(opts).await;
    let url = https_url(&d, "/api/v1/sources");
    let fetch = |cert: Option<&Issued>| {
        curl(
            &url,
            CurlOpts {
                ca: Some(&server.ca),
                client_cert: cert.map(|c| (c.cert.as_path(), c.key.as_path())),
                ..CurlOpts::default()
            },
        )
    };
    let with = fetch(Some(&agent));
    assert_eq!((with.exit, with.status), (0, 200), "{with:?}");
    for (what, cert) in [("no certificate", None), ("another CA's", Some(&stranger))] {
        let got = fetch(cert);
        assert_ne!(got.exit, 0, "{what}: {got:?}");
        assert_eq!(got.status, 0, "{what}: {got:?}");
    }

    let mut with = client(&d, Some(&server.ca));
    with.client_cert = Some((agent.cert.clone(), agent.key.clone()));
    let without = client(&d, Some(&server.ca));
    let r = tokio::task::spawn_blocking(move || {
        let call = || vec![latest(None, "web-1", "cpu")];
        (with.call(&call()), without.call(&call()))
    })
    .await
    .unwrap();
    assert_eq!(r.0[0].code, "OK", "{:?}", r.0[0]);
    assert_eq!(r.1[0].code, "UNAVAILABLE", "{:?}", r.1[0]);
}
