//! Real agents pushing to the real binary in their own protocols: the
//! OpenTelemetry Python SDK over OTLP/gRPC and OTLP/HTTP (`otel`), and a
//! real Prometheus remote-writing what it scrapes from a real node exporter
//! (`prometheus`); and OTLP/gRPC's answers to bad input (`otlp_grpc`). Each
//! agent test computes what Tally must hold from what the
//! agent itself reports having sent, with a reference model of its own
//! (`reference`), and reads every minute slot back.

mod otel;
mod otlp_grpc;
mod prometheus;
mod reference;
