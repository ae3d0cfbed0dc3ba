//! The document model: series, samples, slots, and the arithmetic that maps a
//! timestamp to its hour document and minute slot and to its day document,
//! hour entry and minute slot.
//!
//! Everything here is plain data and pure functions; the aggregator, the flush
//! pipeline, the stores and the query engine all speak these types:
//!
//! | file | what |
//! |---|---|
//! | `names` | the rules for source and metric names |
//! | `series` | series ids and sample kinds |
//! | `slot` | the slot: count, sum, min, max and the minute's last sample; which slots a read shows |
//! | `time` | minutes, hours and days: tiers, resolutions, where a minute lands |
//! | `batch` | what a flush carries: a series' minutes and its document updates |
//! | `recent` | a series' newest raw samples, and a minute's slot rewound by them to an instant inside it |
//!
//! Time is Unix time in UTC. Unix time has no leap seconds, so every hour is
//! 3,600 s and every day 86,400 s and the mapping is integer division.

mod batch;
mod names;
mod recent;
mod series;
mod slot;
mod steps;
mod time;

pub use batch::*;
pub use names::*;
pub use recent::*;
pub use series::*;
pub use slot::*;
pub use steps::*;
pub use time::*;
