//! What the integration tests of `tallyd` and `tally-loadgen` share: the
//! real binaries run as child processes on loopback, the MongoDB stand-in,
//! small clients for the daemon's gRPC and HTTP interfaces, the `/metrics`
//! parser and bounded waits for flushes to settle.
//!
//! This crate is only ever a dev-dependency. It is a crate of its own, not
//! a `mod support;` compiled into every test binary, so the two packages'
//! tests run daemons the same way and none of it needs `dead_code` allowances.
//!
//! * [`bins`]: where the workspace's binaries are (and building the other
//!   package's binary when it is missing or stale).
//! * [`daemon`]: one `tallyd` process on ephemeral ports with its own data
//!   directory; [`process`]: a bounded run of any other binary.
//! * [`client`], [`metrics`], [`settle`]: talking to a running daemon.
//! * `mongo` (feature `mongodb`): the MongoDB the tests talk to, the
//!   stand-in or the server in `MONGODB_URI`.
//! * [`pygrpc`]: a third-party gRPC client (Python `grpcio`); [`venv`]: the
//!   Python environments it and the stand-in run in.
//! * [`prometheus`]: a real Prometheus and node exporter beside the daemon.
//! * [`grpc_client`]: the stock `grpcio` reflection client, as older tools
//!   see the daemon.
//! * [`gotool`]: programs built with Go from the Go module proxy (FerretDB,
//!   the OpenTelemetry Collector), skipped with a reason where Go is missing.
//!
//! Every wait is bounded and everything listens on 127.0.0.1 only.

// A failed expectation panics: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bins;
pub mod client;
pub mod daemon;
pub mod gotool;
pub mod grpc_client;
pub mod metrics;
#[cfg(feature = "mongodb")]
pub mod mongo;
pub mod process;
pub mod prometheus;
pub mod pygrpc;
pub mod settle;
pub mod venv;

pub use daemon::{Daemon, DaemonOpts};
