//! Generated gRPC code for Tally's `tally.v1` protocol, and the Prometheus
//! remote-write messages, shared by the daemon and the load generator.

// Input and I/O must not reach a panic: production code answers with an
// error instead. Tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("tally.v1");
}

pub mod keys;

/// Prometheus remote-write 1.0 messages (`prometheus.WriteRequest`), which
/// the daemon receives on `POST /api/v1/write` and the load generator sends.
#[allow(clippy::all, missing_docs)]
pub mod prometheus {
    tonic::include_proto!("prometheus");
}

/// Encoded `FileDescriptorSet` of all Tally protos, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tally_descriptor.bin"));
