//! Protocol-neutral ingest: the `[ingest]` limits (`config`), the shutdown
//! gate (`gate`), the borrowed form every request is read in (`view`),
//! numbers as text protocols write them (`number`), where a short slice's
//! bytes of a few classes are (`bytemask`), short names compared
//! and searched inline and checked as UTF-8 once a request (`text`, the
//! aggregator's series-key check too), names numbered as a stream repeats
//! them (`dict`), label names made from foreign keys (`key_names`) and the
//! admission every receiver shares (`admit`). The receivers themselves
//! live with their listeners: `tally.v1` and OTLP/gRPC in [`crate::grpc`],
//! OTLP/HTTP, Prometheus remote-write and InfluxDB line protocol in
//! [`crate::http`], Graphite plaintext in [`crate::graphite`]. What each
//! foreign protocol's requests mean in Tally's model (sources, labels,
//! kinds) is decided in `otlp`, `remote_write`, `influx` and `graphite`, so
//! every transport of a protocol maps it the same way.

mod admit;
pub mod builder;
pub(crate) mod bytemask;
pub mod config;
pub(crate) mod dict;
mod gate;
pub mod graphite;
pub mod influx;
pub(crate) mod key_names;
mod number;
pub mod otlp;
pub mod remote_write;
pub(crate) mod text;
pub mod view;

pub(crate) use admit::{first_problems, kind_from_proto};
pub use admit::{IngestError, Ingestor, Protocol, PUSHBACK_RETRY_AFTER};
pub use config::IngestConfig;
pub use gate::IngestGate;
