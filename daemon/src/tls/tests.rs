use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::listen::{Closed, Limits, Listener, Member, Names, Serve};
use crate::validate::Problems;

/// A CA and a leaf for `localhost`/127.0.0.1 it signed, as PEM.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Connects over TLS trusting `ca` and returns the leaf the server showed,
/// after one byte echoed through the connection.
async fn leaf_seen(addr: std::net::SocketAddr, ca: &str) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.as_bytes()) {
        let c: CertificateDer<'static> = c.unwrap();
        roots.add(c).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    // What a browser or curl offers; each listener picks its own protocol.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(b"x").await.unwrap();
    let mut byte = [0u8; 1];
    tls.read_exact(&mut byte).await.map_err(|e| e.to_string())?;
    let (_, session) = tls.get_ref();
    assert!(session.alpn_protocol().is_some(), "no protocol agreed");
    Ok(session.peer_certificates().unwrap()[0].to_vec())
}

/// Echoes one byte per connection.
#[derive(Clone)]
struct Echo;

impl Serve for Echo {
    async fn serve<S: Io>(
        &self,
        mut conn: Conn<S>,
        _: std::sync::Arc<Member>,
        _: bool,
        _: tokio_util::sync::CancellationToken,
    ) -> Closed {
        let mut byte = [0u8; 1];
        if conn.read_exact(&mut byte).await.is_ok() {
            let _ = conn.write_all(&byte).await;
            let _ = conn.flush().await;
        }
        Closed::Done
    }
}

fn limits() -> Limits {
    Limits {
        names: Names::GRPC,
        max_connections: 64,
        reserved: 0,
        write_timeout: None,
    }
}

/// A listener on a free loopback port, with TLS when given.
async fn listener(tls: Option<(Arc<ServerTls>, Protocol)>) -> Listener {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Listener::new(tcp, tls, limits()).unwrap()
}

/// Serves `listener`, echoing one byte per connection.
fn echo(listener: Listener) {
    tokio::spawn(listener.run(Echo, tokio_util::sync::CancellationToken::new()));
}

fn der(pem: &str) -> Vec<u8> {
    let c: CertificateDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes()).unwrap();
    c.to_vec()
}

#[tokio::test]
async fn reload_serves_the_new_certificate_and_survives_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (pki(), pki());
    let files = TlsConfig {
        cert_file: write(&dir, "cert.pem", &first.cert),
        key_file: write(&dir, "key.pem", &first.key),
        ..TlsConfig::default()
    };
    let tls = ServerTls::load(&files).unwrap().unwrap();
    let listener = listener(Some((tls.clone(), Protocol::Grpc))).await;
    let addr = listener.local_addr();
    echo(listener);

    assert_eq!(leaf_seen(addr, &first.ca).await.unwrap(), der(&first.cert));

    write(&dir, "cert.pem", &second.cert);
    write(&dir, "key.pem", &second.key);
    tls.reload().unwrap();
    assert_eq!(
        leaf_seen(addr, &second.ca).await.unwrap(),
        der(&second.cert)
    );
    assert!(leaf_seen(addr, &first.ca).await.is_err());

    // Half a rotation (new certificate, old key) is refused as a whole.
    write(&dir, "cert.pem", &first.cert);
    assert!(tls.reload().is_err());
    assert_eq!(
        leaf_seen(addr, &second.ca).await.unwrap(),
        der(&second.cert)
    );
}

#[tokio::test]
async fn silent_handshakes_make_room_for_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let p = pki();
    let files = TlsConfig {
        cert_file: write(&dir, "cert.pem", &p.cert),
        key_file: write(&dir, "key.pem", &p.key),
        handshake_timeout: std::time::Duration::from_millis(300),
        max_handshakes: 2,
        ..TlsConfig::default()
    };
    let tls = ServerTls::load(&files).unwrap().unwrap();
    let listener = listener(Some((tls, Protocol::Http))).await;
    let addr = listener.local_addr();
    echo(listener);

    // Two clients that never speak take both handshake slots...
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // ...and a real client takes the place of one of them at once.
    let started = std::time::Instant::now();
    let served = tokio::time::timeout(std::time::Duration::from_secs(5), leaf_seen(addr, &p.ca))
        .await
        .unwrap();
    assert!(served.is_ok(), "{served:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // The silent ones were dropped by the server: one for the real client,
    // the other at the handshake deadline.
    for mut s in silent {
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    }
}

#[test]
fn settings_are_checked_together() {
    let check = |c: &TlsConfig| {
        let mut p = Problems::default();
        c.check(&mut p);
        p.into_vec().into_iter().map(|(k, _)| k).collect::<Vec<_>>()
    };
    assert!(check(&TlsConfig::default()).is_empty());
    let only_cert = TlsConfig {
        cert_file: "c.pem".into(),
        ..TlsConfig::default()
    };
    assert_eq!(check(&only_cert), vec!["tls.key_file"]);
    let ca_alone = TlsConfig {
        client_ca_file: "ca.pem".into(),
        key_file: "k.pem".into(),
        handshake_timeout: std::time::Duration::ZERO,
        max_handshakes: 0,
        ..TlsConfig::default()
    };
    assert_eq!(
        check(&ca_alone),
        vec![
            "tls.cert_file",
            "tls.client_ca_file",
            "tls.handshake_timeout",
            "tls.max_handshakes"
        ]
    );
}

#[tokio::test]
async fn plain_listeners_serve_connections_straight_away_and_close_on_shutdown() {
    let listener = listener(None).await;
    let addr = listener.local_addr();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(listener.run(Echo, stop.clone()));
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"z").await.unwrap();
    let mut byte = [0u8; 1];
    client.read_exact(&mut byte).await.unwrap();
    assert_eq!(&byte, b"z");
    // Stopping closes the socket and waits for the connections.
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}
