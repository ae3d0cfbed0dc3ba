//! The stock Python `grpcio` client (`tests/grpc-reflection/client.py`), for
//! tests that must see the daemon as third-party gRPC tools do: server
//! reflection through `grpc.reflection.v1alpha`, and raw request bytes no
//! generated client would send.
//!
//! Its venv is built on first use (see [`crate::venv`]); each call is a
//! bounded run of the script on a blocking-pool thread.

use std::time::Duration;

use crate::bins::workspace_root;
use crate::process::{self, Run};
use crate::venv::PythonEnv;
use crate::Daemon;

const CLIENT: PythonEnv = PythonEnv {
    name: "grpc-reflection",
    requirements: "tests/grpc-reflection/requirements.txt",
    imports: "grpc, grpc_reflection",
};

/// How long one run of the client may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `client.py <daemon's gRPC address> args…` and returns its run;
/// panics if the venv cannot be built or the script fails.
pub async fn run(d: &Daemon, args: &[&str]) -> Run {
    let addr = d.grpc_url().trim_start_matches("http://").to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let python = CLIENT
            .python()
            .unwrap_or_else(|e| panic!("the grpcio client's venv: {e}"));
        let script = workspace_root().join("tests/grpc-reflection/client.py");
        let mut all: Vec<&str> = vec![script.to_str().expect("a UTF-8 path"), &addr];
        all.extend(args.iter().map(String::as_str));
        let run = process::run(&python, &all, RUN_TIMEOUT);
        assert!(
            run.status.success(),
            "client.py {all:?}: {}",
            run.describe()
        );
        run
    })
    .await
    .expect("the grpcio client's task panicked")
}
