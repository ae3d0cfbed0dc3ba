//! The series catalog: one small document per series for discovery, upserted
//! when a series is new or its `last_seen` moved on, and listed by `_id`
//! range (see "The series catalog" in the module documentation).

use bson::raw::{RawBsonRef, RawDocument};
use bson::{doc, Bson, Document};
use futures::stream::TryStreamExt;

use super::command::{bson_len, to_raw, Work};
use super::decode::{kind_from_str, type_error, DecodeError};
use super::errors::classify;
use super::ids::bson_date;
use super::indexes::LAST_SEEN_FIELD;
use super::stats::Op;
use super::Conn;
use crate::model::SeriesId;
use crate::selector::NameMatcher;
use crate::store::{
    check_catalog_entries, merge_catalog_entries, prefix_successor, CatalogEntry, CatalogQuery,
    StoreError,
};

/// Catalog documents per listing batch: a few hundred bytes each, so a batch
/// stays well below a megabyte, while a small `limit` does not fetch many
/// more than it needs.
const CATALOG_MIN_BATCH: usize = 100;
const CATALOG_MAX_BATCH: usize = 2_000;

impl Conn {
    pub(super) async fn catalog_upsert_inner(
        &self,
        entries: &[CatalogEntry],
    ) -> Result<(), StoreError> {
        check_catalog_entries(entries)?;
        let stmts = merge_catalog_entries(entries)
            .into_iter()
            .map(|(key, e)| {
                to_raw(&doc! {
                    "q": { "_id": key },
                    "u": {
                        "$min": { "first_seen": bson_date(e.first_seen) },
                        "$max": { LAST_SEEN_FIELD: bson_date(e.last_seen) },
                        "$set": { "kind": e.kind.as_str() },
                        "$setOnInsert": on_insert(&e.series),
                    },
                    "upsert": true,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if stmts.is_empty() {
            return Ok(());
        }
        self.ready().await?;
        // Duplicate keys: concurrent first upserts of the same series; see
        // the module documentation.
        let mut pending: Vec<usize> = (0..stmts.len()).collect();
        for _round in 0..2 {
            let send: Vec<&RawDocument> = pending.iter().map(|&i| stmts[i].as_ref()).collect();
            let groups = [(self.wire.series.name(), send)];
            let replies = self
                .wire
                .write_all(Op::CatalogUpsert, &groups, &mut Work::default())
                .await?;
            pending = replies
                .iter()
                .flat_map(|(_, reply)| &reply.duplicates)
                .filter_map(|&i| pending.get(i).copied())
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(
            format!(
                "{} catalog upserts collided with concurrent inserts twice",
                pending.len()
            )
            .into(),
        ))
    }

    pub(super) async fn catalog_list_inner(
        &self,
        q: &CatalogQuery,
    ) -> Result<Vec<CatalogEntry>, StoreError> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let prefix = q.key_prefix();
        let (start, inclusive) = q.scan_start(&prefix);
        let mut id_range = doc! { if inclusive { "$gte" } else { "$gt" }: start };
        if let Some(end) = prefix_successor(&prefix) {
            id_range.insert("$lt", end);
        }
        let mut filter = doc! { "_id": id_range };
        if let Some(metric) = q.metric.iter().find_map(NameMatcher::exact_name) {
            filter.insert("metric", metric);
        }
        if let Some(kind) = q.kind {
            filter.insert("kind", kind.as_str());
        }
        if let Some(since) = q.seen_since {
            filter.insert(LAST_SEEN_FIELD, doc! { "$gte": bson_date(since) });
        }
        let projection = doc! { "kind": 1, "first_seen": 1, LAST_SEEN_FIELD: 1 };
        self.ready().await?;
        let bytes = bson_len(&filter) + bson_len(&projection);
        let batch = q.limit.clamp(CATALOG_MIN_BATCH, CATALOG_MAX_BATCH) as u32;
        let list = async {
            let mut cursor = self
                .wire
                .series
                .find(filter)
                .projection(projection)
                .sort(doc! { "_id": 1 })
                .batch_size(batch)
                .await
                .map_err(|e| classify(&e, false))?;
            let mut out = Vec::new();
            while let Some(raw) = cursor.try_next().await.map_err(|e| classify(&e, false))? {
                let entry = decode_catalog(&raw).map_err(|e| StoreError::Corrupt {
                    doc: format!(
                        "{}.{}/{}",
                        self.wire.db.name(),
                        self.wire.series.name(),
                        raw.get_str("_id").unwrap_or("<no string _id>")
                    ),
                    reason: e.to_string(),
                })?;
                if q.accepts(&entry) {
                    out.push(entry);
                    if out.len() >= q.limit {
                        break;
                    }
                }
            }
            Ok(out)
        };
        self.wire
            .timed(
                Op::CatalogList,
                bytes,
                self.wire.timeout,
                "catalog listing: ",
                list,
            )
            .await
    }
}

/// The fields a catalog document gets when it is created: source, metric
/// and, for a labelled series, its labels as a document.
fn on_insert(series: &SeriesId) -> Document {
    let mut d = doc! { "source": &*series.source, "metric": &*series.metric };
    if !series.labels.is_empty() {
        let labels: Document = series
            .labels
            .pairs()
            .into_iter()
            .map(|(n, v)| (n.to_string(), Bson::String(v.into_owned())))
            .collect();
        d.insert("labels", labels);
    }
    d
}

/// A catalog document, as [`CatalogEntry`]. Source and metric come from the
/// `_id`, since that is what listings are ordered and filtered by.
fn decode_catalog(raw: &RawDocument) -> Result<CatalogEntry, DecodeError> {
    let id = match raw.get("_id")? {
        Some(RawBsonRef::String(id)) => id,
        Some(v) => return Err(type_error("_id", v, "a string")),
        None => return Err(DecodeError::Missing("_id".into())),
    };
    let Some(series) = SeriesId::from_key(id) else {
        return Err(DecodeError::Value {
            field: "_id".into(),
            reason: "not `source|metric` or `source|metric{labels}` in canonical form".into(),
        });
    };
    let kind = match raw.get("kind")? {
        Some(RawBsonRef::String(k)) => kind_from_str(k).ok_or_else(|| DecodeError::Value {
            field: "kind".into(),
            reason: format!("unknown kind {k:?}"),
        })?,
        Some(v) => return Err(type_error("kind", v, "a string")),
        None => return Err(DecodeError::Missing("kind".into())),
    };
    let seconds = |field: &str| match raw.get(field)? {
        Some(RawBsonRef::DateTime(t)) => Ok(t.timestamp_millis().div_euclid(1000)),
        Some(v) => Err(type_error(field, v, "a date")),
        None => Err(DecodeError::Missing(field.into())),
    };
    Ok(CatalogEntry {
        series: series.into(),
        kind,
        first_seen: seconds("first_seen")?,
        last_seen: seconds(LAST_SEEN_FIELD)?,
    })
}
