//! Retention where the server has no TTL indexes (`features.rs`): the
//! maintenance sweep's [`Store::expire`](crate::store::Store::expire)
//! deletes what a TTL monitor would have, with one `delete` command per
//! collection on the indexed field. With TTL indexes it does nothing: the
//! server expires documents itself.

use bson::doc;

use super::command::{to_raw, WriteCommand};
use super::errors::parse_write_reply;
use super::features::Feature;
use super::ids::bson_date;
use super::indexes::{LAST_SEEN_FIELD, PERIOD_FIELD};
use super::stats::Op;
use super::Conn;
use crate::store::StoreError;

impl Conn {
    /// Deletes hour and day documents whose period started more than their
    /// retention before `now_s`, and catalog entries last seen more than the
    /// day retention before it: what the TTL indexes would delete. Returns
    /// the documents deleted (catalog entries included); 0 when the server
    /// has TTL indexes or cannot be reached yet (the next sweep tries
    /// again). A failure of the deletes themselves is an error.
    pub(super) async fn expire_inner(
        &self,
        now_s: i64,
        hour_retention_s: i64,
        day_retention_s: i64,
    ) -> Result<usize, StoreError> {
        if self.wire.features.probed() && !self.wire.features.lacks(Feature::TtlIndex) {
            return Ok(0);
        }
        // Not known yet: the first contact decides. While the server is
        // down there is nothing to delete from, and flushes report it.
        match self.ready().await {
            Err(e) if e.is_retryable() => return Ok(0),
            other => other?,
        }
        if !self.wire.features.lacks(Feature::TtlIndex) {
            return Ok(0);
        }
        let mut deleted = 0;
        for (coll, field, retention) in [
            (self.wire.hour.name(), PERIOD_FIELD, hour_retention_s),
            (self.wire.day.name(), PERIOD_FIELD, day_retention_s),
            (self.wire.series.name(), LAST_SEEN_FIELD, day_retention_s),
        ] {
            let cutoff = bson_date(now_s.saturating_sub(retention));
            let mut cmd = WriteCommand::new("delete", coll, "deletes");
            cmd.push(&to_raw(
                &doc! { "q": { field: { "$lt": cutoff } }, "limit": 0 },
            )?);
            let cmd = cmd.finish(self.wire.write_concern.as_deref())?;
            let reply = self.wire.command(Op::Expire, cmd, 1, true).await?;
            deleted += usize::try_from(parse_write_reply(&reply, 1)?.n).unwrap_or(0);
        }
        Ok(deleted)
    }
}
