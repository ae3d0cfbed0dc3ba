//! Protocol-neutral ingest: the `[ingest]` limits (`config`), the shutdown
//! gate (`gate`) and the admission every receiver shares (`admit`). The
//! receivers themselves live with their listeners: `tally.v1` and OTLP/gRPC
//! in [`crate::grpc`], OTLP/HTTP and Prometheus remote-write in
//! [`crate::http`]. What OTLP and remote-write requests mean in Tally's
//! model (sources, labels, kinds) is decided in `otlp` and `remote_write`,
//! so both transports of a protocol map it the same way.

mod admit;
pub mod builder;
mod config;
mod gate;
pub mod otlp;
pub mod remote_write;

use crate::aggregator;

pub(crate) use admit::kind_from_proto;
pub use admit::{samples_in, IngestError, Ingestor, Protocol, PUSHBACK_RETRY_AFTER};
pub use config::IngestConfig;
pub use gate::IngestGate;

/// A short message naming the first few reasons `out` refused samples, for
/// protocols that answer with one message rather than a list.
pub(crate) fn first_problems(out: &aggregator::IngestOutcome) -> String {
    const SHOWN: usize = 3;
    let mut msg = format!("{} samples rejected", out.rejected);
    for (i, r) in out.rejections.iter().take(SHOWN).enumerate() {
        msg.push_str(if i == 0 { ": " } else { "; " });
        msg.push_str(r.reason.as_str());
        msg.push_str(" (");
        msg.push_str(&r.detail);
        msg.push(')');
    }
    if out.rejections.len() > SHOWN || out.rejections_truncated {
        msg.push_str("; …");
    }
    msg
}
