//! Shared helpers for the daemon's integration tests.
//!
//! Include with `mod support;` from a file under `daemon/tests/`.

pub mod catalog_conformance;
pub mod conformance;
pub mod daemon;
pub mod standin;
