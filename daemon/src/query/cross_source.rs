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
    Aggregate, Point, QueryEngine, QueryError, Selection, SeriesBuckets, StepSpec, Window,
};
use crate::model::{validate_metric, SampleKind, SeriesId, Slot};
use crate::rollup::Rollups;
use crate::selector::NameMatcher;

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
    pub points: Vec<Point>,
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
        };
        let (kind, merged) = match cover.group.filter(|_| q.use_rollup) {
            Some(g) => {
                let b = self.buckets(&Rollups::series(g, &q.metric), &w).await?;
                result.rollup = Some(g.to_string());
                (b.kind, b.buckets)
            }
            None => {
                let (members, merged) = self.fan_out(&q.metric, cover, &w).await?;
                result.fanned_out = Some(members);
                (merged.kind, merged.buckets.into_iter().collect())
            }
        };
        let counter = kind.is_some_and(SampleKind::is_counter);
        if q.aggregates.contains(&Aggregate::Rate) && kind.is_some() && !counter {
            return Err(QueryError::Invalid(format!(
                "rate is defined for counters; {} is a {}",
                q.metric,
                kind.map_or("", SampleKind::as_str)
            )));
        }
        result.kind = kind;
        result.points = Point::all(&merged, w.step.width_s, counter, &q.aggregates);
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

    /// Every member series of `metric` read and merged; also how many.
    async fn fan_out(
        &self,
        metric: &str,
        cover: Coverage<'_>,
        w: &Window,
    ) -> Result<(usize, Merged), QueryError> {
        let mut ids = match cover.members {
            Some(source) => {
                let sel = Selection {
                    source,
                    metric: vec![NameMatcher::exact(metric)],
                };
                self.resolve(&sel, self.limits().max_fanout, "query.max_fanout")
                    .await?
            }
            None => Vec::new(),
        };
        if !cover.declared.is_empty() {
            ids.extend(cover.declared.iter().map(|s| SeriesId::new(s, metric)));
            // A source in the rule that also declared the group counts once.
            ids.sort_unstable();
            ids.dedup();
        }
        let max = self.limits().max_fanout;
        if ids.len() > max {
            return Err(too_many_series(
                &ids.len().to_string(),
                max,
                "query.max_fanout",
            ));
        }
        let members = ids.len();
        // Folded as they arrive: memory follows the buckets of one series,
        // not of every member.
        let mut merged = Merged::default();
        let mut reads = futures::stream::iter(ids)
            .map(|id| async move { self.buckets(&id, w).await })
            .buffer_unordered(READ_CONCURRENCY);
        while let Some(member) = reads.next().await {
            merged.add(metric, member?)?;
        }
        Ok((members, merged))
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
