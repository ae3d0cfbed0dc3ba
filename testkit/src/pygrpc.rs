//! The third-party gRPC client: Python `grpcio` running
//! `tests/grpc-client/client.py` in a venv of its own, for tests that must
//! see the daemon through an implementation of gRPC, HTTP/2 and TLS other
//! than the one it is built on. One run makes a list of unary calls over one
//! channel and reports each call's status and response as JSON.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::bins::workspace_root;
use crate::venv::PythonEnv;

/// The client's Python environment.
pub const GRPC_CLIENT_ENV: PythonEnv = PythonEnv {
    name: "grpc-client",
    requirements: "tests/grpc-client/requirements.txt",
    imports: "grpc, grpc_tools, google.protobuf",
};

/// One run's deadline; each call inside has its own of 10 s.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// Where and how the client connects.
#[derive(Debug, Clone)]
pub struct PyGrpc {
    /// `host:port`.
    pub target: String,
    /// PEM CA to trust; `None` for plain text.
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key, presented when the server asks.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// One unary call: `method` as `package.Service/Method`, the request as
/// proto3 JSON, and the bearer token to send, if any.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub token: Option<String>,
    pub request: Value,
}

/// How one call ended.
#[derive(Debug, Clone)]
pub struct Reply {
    /// `OK` or the status code's name (`UNAUTHENTICATED`, …).
    pub code: String,
    pub details: String,
    /// The response as proto3 JSON with the .proto field names; `Null`
    /// unless `code` is `OK`.
    pub response: Value,
}

impl PyGrpc {
    /// Makes `calls` in order over one channel. Panics when the client
    /// cannot be run at all (no Python, no PyPI on its first run).
    pub fn call(&self, calls: &[Call]) -> Vec<Reply> {
        let python = GRPC_CLIENT_ENV
            .python()
            .unwrap_or_else(|e| panic!("the Python gRPC client is unavailable: {e}"));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let spec_path = dir.path().join("spec.json");
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| json!({"method": c.method, "token": c.token, "request": c.request}))
            .collect();
        let spec = json!({
            "target": self.target,
            "proto_dir": workspace_root().join("proto").join("proto"),
            "ca": self.ca,
            "cert": self.client_cert.as_ref().map(|(c, _)| c),
            "key": self.client_cert.as_ref().map(|(_, k)| k),
            "calls": calls,
        });
        std::fs::write(&spec_path, spec.to_string()).expect("writing the call list");
        let script = workspace_root().join("tests/grpc-client/client.py");
        let run = crate::process::run(
            &python,
            &[
                script.to_str().expect("a UTF-8 path"),
                spec_path.to_str().expect("a UTF-8 path"),
            ],
            RUN_TIMEOUT,
        );
        assert!(run.status.success(), "client.py failed: {}", run.describe());
        let replies = match run.json() {
            Value::Array(replies) => replies,
            other => panic!("client.py printed {other}, not a list"),
        };
        replies
            .into_iter()
            .map(|r| Reply {
                code: r["code"].as_str().unwrap_or_default().to_string(),
                details: r["details"].as_str().unwrap_or_default().to_string(),
                response: r["response"].clone(),
            })
            .collect()
    }
}
