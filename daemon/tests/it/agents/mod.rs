//! Real agents pushing to the real binary in their own protocols: the
//! OpenTelemetry Python SDK over OTLP/gRPC and OTLP/HTTP (`otel`), the
//! OpenTelemetry Collector's hostmetrics receiver over both (`collector`),
//! a real Prometheus remote-writing what it scrapes from a real node
//! exporter (`prometheus`), InfluxData's Python client and curl over
//! InfluxDB line protocol (`influx`), and collectd over Graphite plaintext
//! (`collectd`); and each protocol's answers to bad input (`otlp_grpc`,
//! `influx`, `graphite`). Each agent test computes what Tally must hold
//! from what the agent itself reports having sent, with a reference model
//! of its own (`reference`), and reads every minute slot back.

mod collectd;
mod collector;
mod graphite;
mod influx;
mod otel;
mod otlp_grpc;
mod prometheus;
mod reference;
