//! One metric across sources, pooled per step: read from a group's rollup
//! series when the selection is a group, else fanned out over the member
//! series and merged bucket by bucket.
//!
//! Separate from the engine's per-series reads because it is the one read
//! that chooses between two sources of the same answer (the rollup and its
//! members), with its own limit (`query.max_fanout`) and its own rule that
//! members agree on counter-or-gauge.

use std::collections::BTreeMap;

use futures::StreamExt;

use super::engine::READ_CONCURRENCY;
use super::error::too_many_series;
use super::{
    Aggregate, LabelMap, Point, QueryEngine, QueryError, Selection, SeriesBuckets, StepSpec, Window,
};
use crate::aggregator::RecentWanted;
use crate::labels::Labels;
use crate::model::{validate_metric, SampleKind, SeriesId, Slot};
use crate::rollup::Rollups;
use crate::selector::{all_match_labels, LabelMatcher, NameMatcher};

/// Which sources an aggregate covers.
#[derive(Debug, Clone)]
pub enum Sources {
    /// A configured group (or prefix group), by name.
    Group(String),
    /// Sources matching all of these.
    Matching(Vec<NameMatcher>),
}

#[derive(Debug, Clone)]
pub struct AggregateQuery {
    pub metric: String,
    pub sources: Sources,
    pub from: i64,
    pub to: i64,
    pub step: StepSpec,
    pub aggregates: Vec<Aggregate>,
    /// Read the group's rollup when the selection is a group. Off forces
    /// the fan-out (for checking a rollup against its members).
    pub use_rollup: bool,
    /// Only member series these accept.
    pub labels: Vec<LabelMatcher>,
    /// Label names to group by: one result per combination of their values
    /// (an absent label is the empty value). Empty: one pooled result.
    pub by: Vec<String>,
}

/// One group of a grouped aggregate (`by`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AggregateGroup {
    /// The group's values of the `by` labels (absent ones left out).
    pub labels: LabelMap,
    pub kind: Option<SampleKind>,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AggregateResult {
    pub metric: String,
    pub step: String,
    pub step_s: i64,
    pub from: i64,
    pub to: i64,
    /// The group whose rollup served the read, if one did.
    pub rollup: Option<String>,
    /// Member series read, when the read fanned out.
    pub fanned_out: Option<usize>,
    pub kind: Option<SampleKind>,
    /// Per step, the pooled samples of every selected source: `n` and
    /// `sum` add up, `min`/`max` are the extremes, `avg` is `sum / n`.
    /// Empty when grouped (`by`): see `groups`.
    pub points: Vec<Point>,
    /// With `by`: one pooled result per group, in label order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<AggregateGroup>,
}

/// What a selection of sources stands for.
struct Coverage<'a> {
    /// The group whose rollup can serve the read.
    group: Option<&'a str>,
    /// Sources matching these are members (none: only `declared`).
    members: Option<Vec<NameMatcher>>,
    /// Sources that declared the group themselves.
    declared: Vec<String>,
}

impl QueryEngine {
    /// One metric across sources, pooled per step.
    pub async fn aggregate(&self, q: &AggregateQuery) -> Result<AggregateResult, QueryError> {
        validate_metric(&q.metric)
            .map_err(|e| QueryError::Invalid(format!("metric {:?} {e}", q.metric)))?;
        let w = self.window(q.from, q.to, q.step)?;
        let cover = self.coverage(&q.sources)?;
        let mut result = AggregateResult {
            metric: q.metric.clone(),
            step: w.step.label(),
            step_s: w.step.width_s,
            from: w.from,
            to: w.to,
            rollup: None,
            fanned_out: None,
            kind: None,
            points: Vec::new(),
            groups: Vec::new(),
        };
        // A group's rollup keeps its members' label sets, so it answers a
        // label condition and a grouping by label as well as the pooled read.
        let ids = match cover.group.filter(|_| q.use_rollup) {
            Some(g) => {
                result.rollup = Some(g.to_string());
                let source = Rollups::source(g);
                let max = self.limits().max_fanout;
                let sets = self.series_of(&source, &q.metric, max).await?;
                if sets.len() > max {
                    return Err(too_many_series(
                        &format!("more than {max}"),
                        max,
                        "query.max_fanout",
                    ));
                }
                sets.into_iter()
                    .filter(|id| all_match_labels(&q.labels, &id.labels))
                    .collect()
            }
            None => {
                let ids = self.members(q, cover).await?;
                result.fanned_out = Some(ids.len());
                ids
            }
        };
        let groups = self.merge_groups(q, ids, &w).await?;
        let pooled = q.by.is_empty();
        for (labels, merged) in groups {
            let counter = merged.kind.is_some_and(SampleKind::is_counter);
            if q.aggregates.contains(&Aggregate::Rate) && merged.kind.is_some() && !counter {
                return Err(QueryError::Invalid(format!(
                    "rate is defined for counters; {} is a {}",
                    q.metric,
                    merged.kind.map_or("", SampleKind::as_str)
                )));
            }
            let buckets: Vec<(i64, Slot)> = merged.buckets.into_iter().collect();
            let points = Point::all(&buckets, w.step.width_s, counter, &q.aggregates);
            result.kind = result.kind.or(merged.kind);
            if pooled {
                result.points = points;
            } else {
                result.groups.push(AggregateGroup {
                    labels: labels.to_map(),
                    kind: merged.kind,
                    points,
                });
            }
        }
        Ok(result)
    }

    /// The group and members a selection of sources stands for. A fan-out
    /// reads the sources the selection matches, plus those that declared
    /// the group themselves.
    fn coverage<'a>(&'a self, sources: &'a Sources) -> Result<Coverage<'a>, QueryError> {
        let rollups = self.rollups();
        Ok(match sources {
            Sources::Group(name) => {
                let Some(members) = rollups.members(name) else {
                    return Err(QueryError::Invalid(format!(
                        "no group {name:?}: groups are {} (see [rollup] in the configuration)",
                        describe_groups(rollups)
                    )));
                };
                Coverage {
                    group: Some(name.as_str()),
                    members: members.rule.map(|m| vec![m]),
                    declared: members.declared,
                }
            }
            Sources::Matching(ms) => Coverage {
                group: match ms.as_slice() {
                    [one] => rollups.group_for(one),
                    [] => rollups.group_for(&NameMatcher::any()),
                    _ => None,
                },
                members: Some(ms.clone()),
                declared: Vec::new(),
            },
        })
    }

    /// Every member series of the query's metric that its labels accept.
    async fn members(
        &self,
        q: &AggregateQuery,
        cover: Coverage<'_>,
    ) -> Result<Vec<SeriesId>, QueryError> {
        let metric = q.metric.as_str();
        let max = self.limits().max_fanout;
        let mut ids = match cover.members {
            Some(source) => {
                let sel = Selection {
                    source,
                    metric: vec![NameMatcher::exact(metric)],
                    labels: q.labels.clone(),
                };
                self.resolve(&sel, max, "query.max_fanout").await?
            }
            None => Vec::new(),
        };
        if !cover.declared.is_empty() {
            for s in &cover.declared {
                let of_source = self.series_of(s, metric, max).await?;
                ids.extend(
                    of_source
                        .into_iter()
                        .filter(|id| all_match_labels(&q.labels, &id.labels)),
                );
            }
            // A source in the rule that also declared the group counts once.
            ids.sort_unstable();
            ids.dedup();
        }
        if ids.len() > max {
            return Err(too_many_series(
                &ids.len().to_string(),
                max,
                "query.max_fanout",
            ));
        }
        Ok(ids)
    }

    /// `ids` read and merged bucket by bucket, per group of the query's
    /// `by` labels (one group without `by`).
    async fn merge_groups(
        &self,
        q: &AggregateQuery,
        ids: Vec<SeriesId>,
        w: &Window,
    ) -> Result<BTreeMap<Labels, Merged>, QueryError> {
        // Folded as they arrive: memory follows the buckets of one series
        // per group, not of every member.
        let held = if q.by.is_empty() {
            ids.len().min(READ_CONCURRENCY + 1)
        } else {
            ids.len()
        };
        let _reserved = self
            .reserve_points((held as u64).saturating_mul(w.buckets().max(0) as u64))
            .await?;
        let mut groups: BTreeMap<Labels, Merged> = BTreeMap::new();
        if q.by.is_empty() {
            groups.insert(Labels::none(), Merged::default());
        }
        let mut reads = futures::stream::iter(ids)
            .map(|id| async move { self.buckets(&id, w, RecentWanted::No).await })
            .buffer_unordered(READ_CONCURRENCY);
        while let Some(member) = reads.next().await {
            let member = member?;
            let group = member.series.labels.retain(|n| q.by.iter().any(|b| b == n));
            groups.entry(group).or_default().add(&q.metric, member)?;
        }
        Ok(groups)
    }
}

/// Member series merged bucket by bucket (the pooled aggregate). Members
/// must agree on counter-or-gauge.
#[derive(Default)]
struct Merged {
    kind: Option<SampleKind>,
    buckets: BTreeMap<i64, Slot>,
}

impl Merged {
    fn add(&mut self, metric: &str, m: SeriesBuckets) -> Result<(), QueryError> {
        if let (Some(k), Some(mk)) = (self.kind, m.kind) {
            if k.is_counter() != mk.is_counter() {
                return Err(QueryError::Invalid(format!(
                    "{metric} is a {} on some sources and a {} on {}: an aggregate across them would mix gauges and counters; select sources of one kind",
                    k.as_str(),
                    mk.as_str(),
                    m.series.source
                )));
            }
        }
        // Counters pool as deltas whatever their agents sent.
        self.kind = self.kind.or(m.kind.map(|k| match k {
            SampleKind::Gauge => SampleKind::Gauge,
            _ => SampleKind::DeltaCounter,
        }));
        for (t, s) in m.buckets {
            self.buckets.entry(t).or_default().merge(&s);
        }
        Ok(())
    }
}

fn describe_groups(r: &Rollups) -> String {
    let mut names: Vec<String> = r
        .listed()
        .into_iter()
        .map(|g| format!("{:?}", g.name))
        .collect();
    if let Some(d) = r.prefix_delimiter() {
        names.push(format!("any source prefix before {d:?}"));
    }
    if names.is_empty() {
        "none configured".into()
    } else {
        names.join(", ")
    }
}
