//! What the store did: the cumulative counters behind [`MongoStats`] (for
//! benchmarks and tests) and the `tally_mongodb_*` metrics. Every round
//! trip the wire (`wire.rs`) sends is recorded here, under the [`Op`] it
//! served.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Cumulative work done by a [`super::MongoStore`], for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MongoStats {
    /// Statements sent: update statements (documents and catalog) plus
    /// inserted documents.
    pub statements: u64,
    /// Commands sent (each is one round trip), of every kind.
    pub round_trips: u64,
    pub update_statements: u64,
    pub update_round_trips: u64,
    /// Documents sent in `insert` commands (pre-allocation and first
    /// sighting).
    pub insert_statements: u64,
    pub insert_round_trips: u64,
    /// Existence look-ups before inserts.
    pub lookup_round_trips: u64,
    /// Range reads (one `find` each; `getMore`s are not counted).
    pub read_round_trips: u64,
    /// Series catalog upsert statements (one per series and call).
    pub catalog_statements: u64,
    /// Series catalog commands: `update` commands of upserts, plus one
    /// `find` per listing (`getMore`s are not counted).
    pub catalog_round_trips: u64,
    /// BSON bytes of the commands the store built (an approximation of the
    /// bytes on the wire).
    pub bytes_sent: u64,
    /// Documents created by [`crate::store::Store::preallocate`].
    pub preallocated_documents: u64,
    /// Documents created by `apply` before their first update.
    pub first_sighting_documents: u64,
    /// Documents created by the fallback upsert, with only the written
    /// slots (pre-allocation and first sighting both missed them).
    pub fallback_upserts: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    update_statements: AtomicU64,
    update_round_trips: AtomicU64,
    insert_statements: AtomicU64,
    insert_round_trips: AtomicU64,
    lookup_round_trips: AtomicU64,
    read_round_trips: AtomicU64,
    catalog_statements: AtomicU64,
    catalog_round_trips: AtomicU64,
    other_round_trips: AtomicU64,
    bytes_sent: AtomicU64,
    pub(super) preallocated_documents: AtomicU64,
    pub(super) first_sighting_documents: AtomicU64,
    pub(super) fallback_upserts: AtomicU64,
}

/// What a command was for: the `op` label of the store's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Update,
    Insert,
    Lookup,
    Read,
    ReserveIds,
    Complete,
    Indexes,
    Ping,
    LastFlushId,
    CatalogUpsert,
    CatalogList,
    Probe,
    Expire,
    FirstSeen,
}

impl Op {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Op::Update => "update",
            Op::Insert => "insert",
            Op::Lookup => "lookup",
            Op::Read => "read",
            Op::ReserveIds => "reserve_ids",
            Op::Complete => "complete",
            Op::Indexes => "indexes",
            Op::Ping => "ping",
            Op::LastFlushId => "last_flush_id",
            Op::CatalogUpsert => "catalog_upsert",
            Op::CatalogList => "catalog_list",
            Op::Probe => "probe",
            Op::Expire => "expire",
            Op::FirstSeen => "first_seen_baselines",
        }
    }
}

impl Counters {
    /// Counters of the work done so far.
    pub(super) fn snapshot(&self) -> MongoStats {
        let c = self;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let update_statements = get(&c.update_statements);
        let insert_statements = get(&c.insert_statements);
        let update_round_trips = get(&c.update_round_trips);
        let insert_round_trips = get(&c.insert_round_trips);
        let lookup_round_trips = get(&c.lookup_round_trips);
        let read_round_trips = get(&c.read_round_trips);
        let catalog_statements = get(&c.catalog_statements);
        let catalog_round_trips = get(&c.catalog_round_trips);
        MongoStats {
            statements: update_statements + insert_statements + catalog_statements,
            round_trips: update_round_trips
                + insert_round_trips
                + lookup_round_trips
                + read_round_trips
                + catalog_round_trips
                + get(&c.other_round_trips),
            update_statements,
            update_round_trips,
            insert_statements,
            insert_round_trips,
            lookup_round_trips,
            read_round_trips,
            catalog_statements,
            catalog_round_trips,
            bytes_sent: get(&c.bytes_sent),
            preallocated_documents: get(&c.preallocated_documents),
            first_sighting_documents: get(&c.first_sighting_documents),
            fallback_upserts: get(&c.fallback_upserts),
        }
    }

    /// Counts and times one command. `statements` and `bytes` are what it
    /// carried.
    pub(super) fn record(&self, op: Op, statements: usize, bytes: usize, started: Instant) {
        let c = self;
        let statements = statements as u64;
        match op {
            Op::Update => {
                c.update_statements.fetch_add(statements, Ordering::Relaxed);
                c.update_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::Insert => {
                c.insert_statements.fetch_add(statements, Ordering::Relaxed);
                c.insert_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::Lookup => {
                c.lookup_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::Read => {
                c.read_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::CatalogUpsert => {
                c.catalog_statements
                    .fetch_add(statements, Ordering::Relaxed);
                c.catalog_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::CatalogList => {
                c.catalog_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                c.other_round_trips.fetch_add(1, Ordering::Relaxed);
            }
        }
        c.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        let op = op.as_str();
        metrics::counter!("tally_mongodb_round_trips_total", "op" => op).increment(1);
        metrics::counter!("tally_mongodb_bytes_sent_total").increment(bytes as u64);
        metrics::histogram!("tally_mongodb_round_trip_duration_seconds", "op" => op)
            .record(started.elapsed().as_secs_f64());
        if statements > 0 {
            metrics::counter!("tally_mongodb_statements_total", "op" => op).increment(statements);
            metrics::histogram!("tally_mongodb_batch_statements", "op" => op)
                .record(statements as f64);
        }
    }
}
