//! The memory budget every read shares (`query.read_budget_bytes`): the
//! native range and latest reads, the gRPC query service, the Prometheus
//! API and watch snapshots. A read reserves its estimated peak before it
//! reads anything and gives it back when it is done, so however many heavy
//! reads arrive at once, together they stay within the budget: the ones
//! that do not fit wait their turn (up to `query.read_budget_wait`), then
//! are refused as busy.
//!
//! One limit per read (`query.max_total_points`) bounds what a single read
//! may reserve; the budget bounds what all of them hold together.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::QueryError;

/// The budget's unit: reservations are counted in KiB so that a budget of
/// many GiB fits the semaphore's permit count.
const UNIT: u64 = 1024;

/// The shared budget.
#[derive(Debug)]
pub struct ReadBudget {
    permits: Arc<Semaphore>,
    capacity_units: u32,
    wait: Duration,
}

/// A read's share of the budget, returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
    units: u32,
}

impl Reservation {
    /// Bytes reserved.
    pub fn bytes(&self) -> u64 {
        u64::from(self.units) * UNIT
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        metrics::gauge!("tally_query_budget_reserved_bytes").decrement(self.bytes() as f64);
    }
}

impl ReadBudget {
    pub fn new(bytes: u64, wait: Duration) -> ReadBudget {
        let units = (bytes / UNIT).clamp(1, u64::from(u32::MAX >> 3)) as u32;
        ReadBudget {
            permits: Arc::new(Semaphore::new(units as usize)),
            capacity_units: units,
            wait,
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        u64::from(self.capacity_units) * UNIT
    }

    /// Bytes free now.
    pub fn available_bytes(&self) -> u64 {
        self.permits.available_permits() as u64 * UNIT
    }

    /// Reserves `bytes` (at most the whole budget: a read larger than the
    /// budget runs alone), waiting for other reads to finish if need be.
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, QueryError> {
        let units = bytes
            .div_ceil(UNIT)
            .clamp(1, u64::from(self.capacity_units)) as u32;
        let acquire = self.permits.clone().acquire_many_owned(units);
        let permit = match tokio::time::timeout(self.wait, acquire).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(QueryError::Busy("the read budget is closed".into())),
            Err(_) => {
                metrics::counter!("tally_query_budget_timeouts_total").increment(1);
                return Err(QueryError::Busy(format!(
                    "other reads hold the memory budget for reads ({} MiB, query.read_budget_bytes) and this one (an estimated {} MiB) waited {:?} (query.read_budget_wait): retry, or ask for fewer series or points",
                    self.capacity_bytes() >> 20,
                    (u64::from(units) * UNIT) >> 20,
                    self.wait
                )));
            }
        };
        metrics::gauge!("tally_query_budget_reserved_bytes")
            .increment((u64::from(units) * UNIT) as f64);
        Ok(Reservation {
            _permit: Some(permit),
            units,
        })
    }
}

impl ReadBudget {
    /// Reserves `bytes` if they are free now, without waiting: for an
    /// evaluation already holding memory that finds it needs more, which
    /// must not queue behind reads that wait for what it holds.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let units = bytes
            .div_ceil(UNIT)
            .clamp(1, u64::from(self.capacity_units)) as u32;
        let permit = self.permits.clone().try_acquire_many_owned(units).ok()?;
        metrics::gauge!("tally_query_budget_reserved_bytes")
            .increment((u64::from(units) * UNIT) as f64);
        Some(Reservation {
            _permit: Some(permit),
            units,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_share_the_budget_and_wait_their_turn() {
        let budget = ReadBudget::new(10 * UNIT, Duration::from_millis(50));
        let a = budget.reserve(6 * UNIT).await.unwrap();
        assert_eq!(budget.available_bytes(), 4 * UNIT);
        // Does not fit until `a` is gone.
        let e = budget.reserve(6 * UNIT).await.unwrap_err();
        assert!(
            matches!(e, QueryError::Busy(ref m) if m.contains("query.read_budget_bytes")),
            "{e}"
        );
        drop(a);
        let b = budget.reserve(6 * UNIT).await.unwrap();
        drop(b);
        // Taken at once or not at all.
        let a = budget.reserve(6 * UNIT).await.unwrap();
        assert!(budget.try_reserve(6 * UNIT).is_none());
        let more = budget.try_reserve(4 * UNIT).unwrap();
        assert_eq!(budget.available_bytes(), 0);
        drop((a, more));
        // Larger than the whole budget: runs alone, once the rest is free.
        let whole = budget.reserve(1000 * UNIT).await.unwrap();
        assert_eq!(whole.bytes(), 10 * UNIT);
        assert_eq!(budget.available_bytes(), 0);
        drop(whole);
        assert_eq!(budget.available_bytes(), 10 * UNIT);
    }
}
