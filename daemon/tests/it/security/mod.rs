//! TLS and bearer tokens end to end, through the real binary and clients
//! that are not ours: Python `grpcio` (the test kit's `pygrpc`) and `curl`.
//! Certificates are made at test time with `rcgen` in a temporary
//! directory; everything listens on 127.0.0.1.
//!
//! * `grpc`: roles and source globs over gRPC with TLS.
//! * `http`: the HTTP listener's open and protected paths over TLS.
//! * `rotation`: SIGHUP replaces tokens and certificates; a bad file keeps
//!   what was in force.
//! * `client_certs`: a client CA makes certificates mandatory.

mod client_certs;
mod grpc;
mod http;
mod rotation;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tally_testkit::pygrpc::{Call, PyGrpc};
use tally_testkit::{Daemon, DaemonOpts};

use crate::tallyd;

/// May push sources `web-*`.
const INGEST: &str = "it-ingest-token-0123456789";
const READ: &str = "it-read-token-0123456789ab";
const ADMIN: &str = "it-admin-token-0123456789a";

/// A token file giving [`INGEST`], [`READ`] and [`ADMIN`] their roles.
fn tokens_toml() -> String {
    format!(
        "[[token]]\nname = \"web-agents\"\nrole = \"ingest\"\nsources = [\"web-*\"]\ntoken = \"{INGEST}\"\n\n\
         [[token]]\nname = \"dashboards\"\nrole = \"read\"\ntoken = \"{READ}\"\n\n\
         [[token]]\nname = \"ops\"\nrole = \"admin\"\ntoken = \"{ADMIN}\"\n"
    )
}

/// A CA and the certificates it issued, as files in the test's directory.
struct Issued {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// Files of one test: certificates, keys, tokens.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::Builder::new()
                .prefix("tally-security-")
                .tempdir()
                .unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A new CA named `<prefix>-ca.pem` and a certificate it issued for
    /// 127.0.0.1 and localhost (`server`) or for a client (`!server`).
    fn issue(&self, prefix: &str, server: bool) -> Issued {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("tally test CA {prefix}"));
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let key = rcgen::KeyPair::generate().unwrap();
        let names = if server {
            vec!["127.0.0.1".to_string(), "localhost".to_string()]
        } else {
            Vec::new()
        };
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            if server { "tallyd" } else { "agent" },
        );
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &issuer).unwrap();
        Issued {
            ca: self.write(&format!("{prefix}-ca.pem"), &ca.pem()),
            cert: self.write(&format!("{prefix}-cert.pem"), &cert.pem()),
            key: self.write(&format!("{prefix}-key.pem"), &key.serialize_pem()),
        }
    }
}

/// `tallyd` serving `server`'s certificate from `cert.pem`/`key.pem` (which
/// rotation tests overwrite).
fn with_tls(files: &Files, server: &Issued) -> DaemonOpts {
    std::fs::copy(&server.cert, files.path("cert.pem")).unwrap();
    std::fs::copy(&server.key, files.path("key.pem")).unwrap();
    tallyd()
        .env("TALLYD_TLS_CERT_FILE", path_str(&files.path("cert.pem")))
        .env("TALLYD_TLS_KEY_FILE", path_str(&files.path("key.pem")))
}

fn with_tokens(opts: DaemonOpts, files: &Files, toml: &str) -> DaemonOpts {
    let path = files.write("tokens.toml", toml);
    // As an operator would keep it; rewrites keep the mode.
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&path, owner_only).unwrap();
    opts.env("TALLYD_AUTH_TOKENS_FILE", path_str(&path))
}

/// `tallyd` with TLS and [`tokens_toml`], and the CA its certificate is from.
async fn secured(files: &Files) -> (Daemon, Issued) {
    let server = files.issue("server", true);
    let opts = with_tokens(with_tls(files, &server), files, &tokens_toml());
    (Daemon::start_async(opts).await, server)
}

fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The gRPC listener's `host:port`.
fn grpc_target(d: &Daemon) -> String {
    d.grpc_url().trim_start_matches("http://").to_string()
}

fn https_url(d: &Daemon, path: &str) -> String {
    format!("{}{path}", d.http_url().replacen("http://", "https://", 1))
}

fn client(d: &Daemon, ca: Option<&Path>) -> PyGrpc {
    PyGrpc {
        target: grpc_target(d),
        ca: ca.map(Path::to_path_buf),
        client_cert: None,
    }
}

/// A push of one gauge sample now for each `(source, metric, value)`.
fn push(token: Option<&str>, series: &[(&str, &str, f64)]) -> Call {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let sources: Vec<Value> = series
        .iter()
        .map(|(source, metric, value)| {
            json!({"source": source, "series": [{
                "metric": metric,
                "kind": "SAMPLE_KIND_GAUGE",
                "timestamps_ms": [now_ms],
                "values": [value],
            }]})
        })
        .collect();
    Call {
        method: "tally.v1.Ingest/Push",
        token: token.map(str::to_string),
        request: json!({ "sources": sources }),
    }
}

fn latest(token: Option<&str>, source: &str, metric: &str) -> Call {
    Call {
        method: "tally.v1.Query/Latest",
        token: token.map(str::to_string),
        request: json!({"source": source, "metric": metric}),
    }
}

/// What one `curl` run saw.
#[derive(Debug)]
struct Fetched {
    /// curl's exit code: 0, or why the transfer failed (60: untrusted
    /// certificate, 35/56: handshake refused, …).
    exit: i32,
    /// 0 when no response arrived.
    status: u16,
    headers: String,
    body: String,
    stderr: String,
}

/// How `curl` connects.
#[derive(Default, Clone)]
struct CurlOpts<'a> {
    ca: Option<&'a Path>,
    token: Option<&'a str>,
    client_cert: Option<(&'a Path, &'a Path)>,
}

fn curl(url: &str, o: CurlOpts<'_>) -> Fetched {
    let dir = tempfile::tempdir().unwrap();
    let (headers, body) = (dir.path().join("headers"), dir.path().join("body"));
    let mut args: Vec<String> = vec![
        "--silent".into(),
        "--show-error".into(),
        "--max-time".into(),
        "10".into(),
        "--dump-header".into(),
        path_str(&headers),
        "--output".into(),
        path_str(&body),
        "--write-out".into(),
        "%{http_code}".into(),
    ];
    if let Some(ca) = o.ca {
        args.extend(["--cacert".into(), path_str(ca)]);
    }
    if let Some(token) = o.token {
        args.extend(["--header".into(), format!("Authorization: Bearer {token}")]);
    }
    if let Some((cert, key)) = o.client_cert {
        args.extend([
            "--cert".into(),
            path_str(cert),
            "--key".into(),
            path_str(key),
        ]);
    }
    args.push(url.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = tally_testkit::process::run(Path::new("curl"), &args, Duration::from_secs(30));
    Fetched {
        exit: run.code().unwrap_or(-1),
        status: run.stdout.trim().parse().unwrap_or(0),
        headers: std::fs::read_to_string(&headers).unwrap_or_default(),
        body: std::fs::read_to_string(&body).unwrap_or_default(),
        stderr: run.stderr,
    }
}
