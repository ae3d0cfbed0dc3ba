//! Generated gRPC code for Tally's `tally.v1` protocol, shared by the daemon
//! and the load generator.

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("tally.v1");
}

/// Encoded `FileDescriptorSet` of all Tally protos, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tally_descriptor.bin"));
