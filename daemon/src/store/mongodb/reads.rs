//! Range reads of one series: an `_id` range scan sorted by `_id`, which is
//! time order within a series, asking for every document in the first batch
//! so a read is one round trip. Decoding lives in `decode`.

use bson::{doc, Document};
use futures::stream::TryStreamExt;

use super::command::bson_len;
use super::decode::ReadPlan;
use super::documents::{HOURS, MINUTES};
use super::errors::classify;
use super::ids::{check_series, period_key, series_prefix, MAX_KEYED_S, MIN_KEYED_S};
use super::stats::Op;
use super::Conn;
use crate::model::{Resolution, Tier, DAY_S};
use crate::store::{DocRead, ReadQuery, StoreError};

/// The `_id` range of the documents that may hold a read's buckets.
struct IdRange {
    /// `<source>|<metric>|`.
    prefix: String,
    lower: String,
    upper: String,
    /// Documents the range can hold, as the first batch's size.
    documents: u32,
}

impl IdRange {
    /// `None` when no stored document can be in range.
    fn of(q: &ReadQuery) -> Option<IdRange> {
        let period = q.tier.period_s();
        // Nothing is stored outside the keyed years; clamping first keeps the
        // arithmetic below from overflowing.
        let from = q.from.clamp(MIN_KEYED_S - DAY_S, MAX_KEYED_S + DAY_S);
        let to = q.to.clamp(MIN_KEYED_S - DAY_S, MAX_KEYED_S + DAY_S);
        // The document holding `from` may start before it; documents
        // starting at or after `to` hold nothing in range.
        let lo = from.div_euclid(period) * period;
        let hi = (to - 1).div_euclid(period) * period + period;
        let prefix = series_prefix(&q.series);
        let lower = match period_key(q.tier, lo) {
            Some(k) => format!("{prefix}{k}"),
            None if lo < MIN_KEYED_S => prefix.clone(),
            None => return None,
        };
        let upper = match period_key(q.tier, hi) {
            Some(k) => format!("{prefix}{k}"),
            // ':' sorts after every digit.
            None if hi > MAX_KEYED_S => format!("{prefix}:"),
            None => return None,
        };
        Some(IdRange {
            prefix,
            lower,
            upper,
            documents: ((hi - lo) / period).clamp(1, 10_000) as u32,
        })
    }
}

impl Conn {
    pub(super) async fn read_inner(&self, q: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        if q.tier == Tier::Hour && q.resolution == Resolution::Day {
            return Err(StoreError::Invalid(
                "hour documents hold no day slot; read daily points from the day tier".into(),
            ));
        }
        check_series(&q.series)?;
        if q.from >= q.to {
            return Ok(Vec::new());
        }
        match IdRange::of(q) {
            Some(range) => self.read_range(q, range).await,
            None => Ok(Vec::new()),
        }
    }

    async fn read_range(&self, q: &ReadQuery, range: IdRange) -> Result<Vec<DocRead>, StoreError> {
        let projection = self.read_projection(q);
        self.ready().await?;
        let filter = doc! { "_id": { "$gte": range.lower, "$lt": range.upper } };
        let bytes = bson_len(&filter) + bson_len(&projection);
        let plan = ReadPlan {
            query: q,
            prefix: range.prefix,
            writer: &self.writer.id,
        };
        let coll = self.wire.collection(q.tier);
        let read = async {
            let mut cursor = coll
                .find(filter)
                .projection(projection)
                .sort(doc! { "_id": 1 })
                .batch_size(range.documents)
                .await
                .map_err(|e| classify(&e, false))?;
            let mut out = Vec::new();
            while let Some(raw) = cursor.try_next().await.map_err(|e| classify(&e, false))? {
                let doc = plan.decode(&raw).map_err(|e| StoreError::Corrupt {
                    doc: match raw.get_str("_id") {
                        Ok(id) => self.wire.doc_name(q.tier, id),
                        Err(_) => self.wire.doc_name(q.tier, "<no string _id>"),
                    },
                    reason: e.to_string(),
                })?;
                out.push(doc);
            }
            Ok(out)
        };
        self.wire
            .timed(Op::Read, bytes, self.wire.timeout, "read: ", read)
            .await
    }

    /// Only the fields the read's resolution needs: a day document is
    /// about 135 KB, its hour totals a small part of it.
    fn read_projection(&self, q: &ReadQuery) -> Document {
        let mut projection = doc! { "t": 1, "k": 1 };
        projection.insert(self.writer.watermark_path.as_str(), 1);
        match (q.tier, q.resolution) {
            (_, Resolution::Minute) => {
                projection.insert("values", 1);
            }
            (Tier::Day, Resolution::Hour) => {
                for h in 0..HOURS {
                    projection.insert(format!("values.{h}.total"), 1);
                }
            }
            (Tier::Hour, _) => {
                // The hour's running slot keeps no last sample; its minutes'
                // give it (see `documents`).
                projection.insert("total", 1);
                for m in 0..MINUTES {
                    projection.insert(format!("values.{m}.last"), 1);
                }
            }
            (Tier::Day, Resolution::Day) => {
                projection.insert("total", 1);
            }
        }
        projection
    }
}
