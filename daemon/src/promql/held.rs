//! What one chunk of a query may hold while it is evaluated, checked as
//! results are made.
//!
//! The plan's estimate (`budget`) bounds every node by its input and is
//! reserved before anything is read. A few operators make results whose
//! size depends on the data, not only on their input's: `count_values`
//! (a series per value seen), vector matching (a pair per matched series,
//! more when the "one" side's series change over the range) and
//! `label_replace`/`label_join` (label values built from others, which
//! nesting can double at every level). Each of those works out what it is
//! about to allocate first, in a form no larger than its input, and
//! charges it here before allocating it:
//! * a result of more than `query.max_total_points` points (series ×
//!   times) is refused;
//! * what the chunk's charges add up to must fit the memory reserved for
//!   its intermediate results; past that, more is taken from the read
//!   budget at once if it is free, up to the chunk's share of
//!   `query.read_budget_bytes` (or its estimate, if larger). A chunk that
//!   needs more is refused, naming the setting.

use std::sync::Mutex;

use super::budget::{BYTES_PER_SERIES, BYTES_PER_VALUE};
use super::value::{execution, EvalError, EvalResult};
use crate::query::{QueryEngine, Reservation};

/// One evaluation's account of what its chunk holds.
pub struct Held<'a> {
    /// Where to take more memory from; `None` holds to `max_bytes` alone.
    engine: Option<&'a QueryEngine>,
    max_points: u64,
    /// The most one chunk's charges may add up to.
    max_bytes: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Bytes reserved for charges: the estimate's, plus what was taken.
    reserved: u64,
    /// Bytes charged in this chunk.
    used: u64,
    /// Taken from the read budget while evaluating; returned at the end
    /// of the query.
    extra: Vec<Reservation>,
}

impl<'a> Held<'a> {
    /// An account that has `reserved` bytes already reserved and may grow,
    /// from `engine`'s read budget, to `max_bytes` (without an engine: may
    /// count up to `max_bytes`, already reserved by the caller).
    pub fn new(
        engine: Option<&'a QueryEngine>,
        max_points: u64,
        reserved: u64,
        max_bytes: u64,
    ) -> Held<'a> {
        Held {
            engine,
            max_points,
            max_bytes: max_bytes.max(reserved),
            state: Mutex::new(State {
                reserved,
                ..State::default()
            }),
        }
    }

    /// An account bounded by `max_total_points` alone (unit tests of the
    /// operators).
    #[cfg(test)]
    pub fn unlimited(max_points: u64) -> Held<'static> {
        Held::new(None, max_points, u64::MAX, u64::MAX)
    }

    /// A new chunk starts: what the last one held is gone.
    pub fn next_chunk(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.used = 0;
        }
    }

    /// Charges a result of `series` series over `times` times, with
    /// `label_bytes` of new label values, before it is allocated. `what`
    /// names the operator in the error.
    pub fn charge(
        &self,
        what: &str,
        series: usize,
        times: usize,
        label_bytes: usize,
    ) -> EvalResult<()> {
        let points = (series as u64).saturating_mul(times as u64);
        if points > self.max_points {
            return Err(execution(format!(
                "{what} would hold {points} points ({series} series × {times} times); the limit is {} (query.max_total_points): select fewer series or a coarser step",
                self.max_points
            )));
        }
        let bytes = points
            .saturating_mul(BYTES_PER_VALUE)
            .saturating_add((series as u64).saturating_mul(BYTES_PER_SERIES))
            .saturating_add(label_bytes as u64);
        self.charge_bytes(what, bytes)
    }

    /// Charges `bytes` of the answer a range query assembles (its points
    /// and the label sets of its series), before they join it.
    pub fn charge_bytes(&self, what: &str, bytes: u64) -> EvalResult<()> {
        let mut s = self
            .state
            .lock()
            .map_err(|_| execution("the query's memory account is unusable"))?;
        let used = s.used.saturating_add(bytes);
        if used > s.reserved {
            self.grow(&mut s, used, what)?;
        }
        s.used = used;
        Ok(())
    }

    /// Takes what `used` needs beyond the reservation from the read
    /// budget, without waiting: an evaluation in progress holds memory, so
    /// it must not queue behind others for more.
    fn grow(&self, s: &mut State, used: u64, what: &str) -> Result<(), EvalError> {
        if used > self.max_bytes {
            return Err(execution(format!(
                "{what} would bring the query's memory to {} MiB, more than its share of the read budget ({} MiB of query.read_budget_bytes): select fewer series, a shorter range or a coarser step",
                used >> 20,
                self.max_bytes >> 20
            )));
        }
        let Some(engine) = self.engine else {
            s.reserved = used;
            return Ok(());
        };
        // Take a little more than needed, so that a run of small charges
        // does not go to the budget each time.
        let want = (used - s.reserved)
            .max(1 << 20)
            .min(self.max_bytes - s.reserved);
        match engine.budget().try_reserve(want) {
            Some(r) => {
                s.reserved = s.reserved.saturating_add(r.bytes());
                s.extra.push(r);
                Ok(())
            }
            None => Err(EvalError::Query(crate::query::QueryError::Busy(format!(
                "{what} needs {} MiB more than estimated and other reads hold the memory budget for reads (query.read_budget_bytes): retry, or ask for fewer series or points",
                want.div_ceil(1 << 20)
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_over_max_total_points_are_refused_before_allocation() {
        let held = Held::unlimited(1_000);
        held.charge("count_values", 10, 100, 0).unwrap();
        let e = held.charge("count_values", 11, 100, 0).unwrap_err();
        assert!(e.to_string().contains("query.max_total_points"), "{e}");
        assert!(matches!(e, EvalError::Execution(_)));
    }

    #[test]
    fn charges_add_up_within_a_chunk_and_start_over_with_the_next() {
        let per = 10 * BYTES_PER_SERIES + 100 * BYTES_PER_VALUE;
        let held = Held::new(None, 1_000_000, per, 2 * per);
        held.charge("a", 10, 10, 0).unwrap();
        held.charge("b", 10, 10, 0).unwrap();
        let e = held.charge("c", 10, 10, 0).unwrap_err();
        assert!(e.to_string().contains("query.read_budget_bytes"), "{e}");
        held.next_chunk();
        held.charge("a", 10, 10, 0).unwrap();
        // Label bytes count too.
        let e = held.charge("label_join", 1, 1, 10 << 20).unwrap_err();
        assert!(e.to_string().contains("query.read_budget_bytes"), "{e}");
    }
}
