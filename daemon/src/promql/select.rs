//! Selectors and the data behind them: which series a selector stands for,
//! and their slots at the evaluation times.
//!
//! # Instant selectors
//!
//! At time `t` a selector answers each series' newest sample no later than
//! `t` and no older than the lookback delta (5 minutes unless the request
//! says otherwise). Tally keeps each minute's last sample, so that is the
//! last sample of the newest non-empty minute whose last sample is at or
//! before `t`. The minute in progress is in memory and counts, so a bare
//! selector at "now" is fresh to the second. When `t`'s own minute has
//! its last sample after `t`, that sample is not the answer:
//!
//! - Where the series' recent raw samples (the aggregator's newest few,
//!   in memory) reach back to `t`, the minute is rewound to `t` by them
//!   (see [`newest_rewound`]): the answer is exactly Prometheus', the
//!   newest sample at or before `t`. That is where rule evaluators ask, a
//!   few seconds behind now, as they align their evaluation times.
//! - Where they do not (an older `t`, a restart since, a read that
//!   disagrees with them), the sample at `t` is not known: of the two known
//!   samples around it, the minute before's last and this minute's last,
//!   the nearer one in time answers (the earlier one on a tie), so
//!   `timestamp` can be after `t`. When there is none before `t` within the
//!   lookback (the series' first minute), the minute's start, the earliest
//!   the series can have begun, stands for it: the series is shown once
//!   `t` is nearer its first minute's last sample than that minute's
//!   start. On a minute's first millisecond the minute before answers.
//!   Always taking the minute before would show a change up to a minute
//!   late; this way a graph's mid-minute points are at most half the gap
//!   between two minutes' last samples off.
//!
//! When the sample that answers is a staleness marker, the series has
//! ended and answers nothing (as in Prometheus); range windows skip
//! markers (see `RangeSeries::sample`), and a minute of nothing but a
//! marker is no point of any window.
//!
//! # Range selectors
//!
//! `[r]` is rounded to whole minutes `r'` (see [`round_range_ms`]). The
//! window at `t` holds the slots that *end* in `(t - r', t]`: the minute
//! slots starting in `[floor_minute(t) - r', floor_minute(t))`. For a
//! minute-aligned `t` those are exactly the samples in `[t - r', t)`. A
//! `t` inside a minute, an instant query's or a range query's newest
//! point, reads that minute too, as far as it has samples (the minute in
//! progress is in memory), rewound to `t` where the recent samples reach
//! back to it, and the range functions read it over the time it covers
//! (see `range_fns::windows`), so the newest point of a graph is fresh and
//! never a partial minute that looks like a dip.
//! When `r'` and every evaluation time are whole hours (or days) and the
//! function needs no per-minute samples, hour (or day) slots serve the
//! windows: the same answer from a sixtieth of the slots.
//!
//! [`round_range_ms`]: super::plan::round_range_ms

use promql_parser::label::{MatchOp as PromOp, Matcher};

use super::names::{
    is_mapped_name, prom_name, tally_metric_value, unambiguous_metric, LabelScheme, MetricKind,
    NameCache, Route,
};
use super::plan::{Mods, SelectorSpec};
pub use super::range_fns::window_end;
use super::range_fns::RangeFn;
use super::value::{bad, EvalResult, Labels, Lead, PointKind, RangeSeries, Series, Tail};
use crate::aggregator::RecentWanted;
use crate::model::{
    is_stale_marker, validate_metric, validate_source, RecentSamples, SampleKind, SeriesId, Slot,
    DAY_S, HOUR_S,
};
use crate::query::{QueryEngine, Selection, Step, Window};
use crate::rollup::Rollups;
use crate::selector::{all_match, LabelMatcher, MatchOp, NameMatcher};

const MINUTE_MS: i64 = 60_000;

/// What a query reads through: the engine, the catalog's metric names and
/// how series are shown.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub engine: &'a QueryEngine,
    pub names: &'a NameCache,
    pub scheme: &'a LabelScheme,
}

/// A selected series with the labels PromQL shows it with.
#[derive(Debug, Clone)]
pub struct Selected {
    pub id: SeriesId,
    pub labels: Labels,
}

/// The engine's matchers for one alternative of a selector.
#[derive(Debug, Default)]
pub struct Resolved {
    pub source: Vec<NameMatcher>,
    /// Tally metric matchers, a list of names first when known.
    pub metric: Vec<NameMatcher>,
    /// Matchers on the Prometheus name.
    pub names: Vec<NameMatcher>,
    /// Matchers on `tally_metric` (empty where the names agree).
    pub tally: Vec<NameMatcher>,
    pub labels: Vec<LabelMatcher>,
}

impl Resolved {
    /// Whether a metric passes the name and `tally_metric` matchers.
    pub fn metric_ok(&self, metric: &str) -> bool {
        all_match(&self.metric, metric)
            && all_match(&self.names, &prom_name(metric))
            && all_match(&self.tally, tally_metric_value(metric))
    }
}

fn op_of(m: &Matcher) -> MatchOp {
    match m.op {
        PromOp::Equal => MatchOp::Equal,
        PromOp::NotEqual => MatchOp::NotEqual,
        PromOp::Re(_) => MatchOp::Regex,
        PromOp::NotRe(_) => MatchOp::NotRegex,
    }
}

/// Turns matchers into engine matchers; None when no series can match.
pub async fn resolve_matchers(
    ctx: Context<'_>,
    matchers: &[Matcher],
) -> EvalResult<Option<Resolved>> {
    let limits = ctx.engine.limits().pattern_limits();
    let mut res = Resolved::default();
    let mut exact_name = None;
    let mut exact_tally = None;
    for m in matchers {
        let op = op_of(m);
        let matcher = NameMatcher::new_within(op, &m.value, &limits)
            .map_err(|e| bad(format!("label {}: {e}", m.name)))?;
        match ctx.scheme.route(&m.name) {
            Route::Name => {
                if op == MatchOp::Equal {
                    exact_name = Some(m.value.as_str());
                }
                res.names.push(matcher);
            }
            Route::Source => {
                // Not a name any source can have (rollup series included,
                // which are not listed as sources).
                if op == MatchOp::Equal && validate_source(&m.value).is_err() {
                    return Ok(None);
                }
                res.source.push(matcher);
            }
            Route::TallyMetric => {
                if op == MatchOp::Equal && !m.value.is_empty() {
                    if validate_metric(&m.value).is_err() {
                        return Ok(None);
                    }
                    exact_tally = Some(m.value.as_str());
                }
                res.tally.push(matcher);
            }
            // A series' own label; one without it has the empty value.
            Route::Own(name) => res.labels.push(LabelMatcher {
                name: name.to_string(),
                matcher,
            }),
        }
    }
    if !res.names.is_empty() || !res.tally.is_empty() {
        let candidates = match (exact_tally, exact_name) {
            (Some(t), _) => vec![t.to_string()],
            (None, Some(v)) if !is_mapped_name(v) => return Ok(None),
            (None, Some(v)) => match unambiguous_metric(v) {
                Some(m) => vec![m.to_string()],
                None => ctx.names.get(ctx.engine).await?.named(v),
            },
            (None, None) => ctx
                .names
                .get(ctx.engine)
                .await?
                .metrics
                .keys()
                .cloned()
                .collect(),
        };
        let candidates: Vec<String> = candidates
            .into_iter()
            .filter(|m| res.metric_ok(m))
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        res.metric.insert(0, list_matcher(&candidates)?);
    }
    // The engine enumerates exact selections from the first matcher.
    res.source.sort_by_key(|m| m.names().is_none());
    res.metric.sort_by_key(|m| m.names().is_none());
    Ok(Some(res))
}

/// A matcher accepting exactly `names` (at least one).
fn list_matcher(names: &[String]) -> EvalResult<NameMatcher> {
    match names {
        [one] => Ok(NameMatcher::exact(one)),
        _ => NameMatcher::one_of(names).map_err(|e| bad(format!("metric names: {e}"))),
    }
}

/// The series a selector stands for, within the series limit that applies
/// to it (`query.max_fanout` under an aggregation, else
/// `query.max_series`).
pub async fn resolve(ctx: Context<'_>, spec: &SelectorSpec) -> EvalResult<Vec<Selected>> {
    let limits = ctx.engine.limits();
    let (limit, limit_name) = if spec.fan_out {
        (limits.max_fanout, "query.max_fanout")
    } else {
        (limits.max_series, "query.max_series")
    };
    let alternatives: Vec<&[Matcher]> = if spec.alternatives.is_empty() {
        vec![&spec.matchers]
    } else {
        spec.alternatives.iter().map(Vec::as_slice).collect()
    };
    let mut ids: Vec<SeriesId> = Vec::new();
    for matchers in alternatives {
        let Some(res) = resolve_matchers(ctx, matchers).await? else {
            continue;
        };
        let sel = Selection {
            source: res.source.clone(),
            metric: res.metric.clone(),
            labels: res.labels.clone(),
        };
        let found = ctx.engine.resolve(&sel, limit, limit_name).await?;
        ids.extend(
            found
                .into_iter()
                .filter(|id| !Rollups::is_rollup_source(&id.source) && res.metric_ok(&id.metric)),
        );
    }
    if spec.alternatives.len() > 1 {
        ids.sort_by_cached_key(SeriesId::key);
        ids.dedup();
        if ids.len() > limit {
            return Err(crate::query::QueryError::Limit(format!(
                "the selection {} matches {} series; the limit is {limit} ({limit_name}): narrow the selector",
                spec.text,
                ids.len()
            ))
            .into());
        }
    }
    Ok(ids
        .into_iter()
        .map(|id| Selected {
            labels: ctx.scheme.labels_of(&id.source, &id.metric, &id.labels),
            id,
        })
        .collect())
}

/// How a series' kind reads in a range.
pub fn point_kind(kind: Option<SampleKind>) -> PointKind {
    match kind {
        Some(SampleKind::DeltaCounter) => PointKind::Delta,
        Some(SampleKind::CumulativeCounter) => PointKind::Cumulative,
        _ => PointKind::Gauge,
    }
}

/// Whether hour or day slots serve `f` for every series selected: `f`
/// reads merged slots of each series' kind (as the catalog knows it).
pub async fn merged_slots_serve(
    ctx: Context<'_>,
    f: RangeFn,
    selected: &[Selected],
) -> EvalResult<bool> {
    let names = ctx.names.get(ctx.engine).await?;
    let all = [PointKind::Gauge, PointKind::Cumulative, PointKind::Delta];
    Ok(selected.iter().all(|s| {
        let kinds: &[PointKind] = match names.metrics.get(&*s.id.metric) {
            Some(MetricKind::Gauge) => &all[..1],
            // Cumulative or delta: both must be served.
            Some(MetricKind::Counter) => &all[1..],
            _ => &all,
        };
        kinds.iter().all(|k| f.reads_merged_slots(*k))
    }))
}

/// One series' read: its kind, if known, its non-empty slots, and its
/// newest raw samples in memory (see [`rewind_at`]).
pub type Read = (Option<SampleKind>, Vec<(i64, Slot)>, RecentSamples);

/// Reads the slots of `selected` of width `granularity_s` starting in the
/// ranges `spans` (Unix seconds, ascending, aligned), one read per series
/// and span.
pub async fn read(
    ctx: Context<'_>,
    selected: &[Selected],
    granularity_s: i64,
    spans: &[(i64, i64)],
) -> EvalResult<Vec<Read>> {
    let step = Step::fixed(granularity_s)?;
    let ids: Vec<SeriesId> = selected.iter().map(|s| s.id.clone()).collect();
    let mut out: Vec<Read> = vec![(None, Vec::new(), RecentSamples::default()); ids.len()];
    for &(from, to) in spans {
        if to <= from {
            continue;
        }
        let w = Window { from, to, step };
        // Only PromQL rewinds by the newest samples, so only it keeps them.
        for (i, b) in ctx
            .engine
            .many_buckets(&ids, &w, RecentWanted::Yes)
            .await?
            .into_iter()
            .enumerate()
        {
            out[i].0 = out[i].0.or(b.kind);
            out[i].1.extend(b.buckets);
            // The newest snapshot: the last span's, taken last.
            out[i].2 = b.recent;
        }
    }
    Ok(out)
}

/// Joins the needed ranges (ascending by start) that lie closer than
/// `gap` into one read each: many small reads for sparse windows, one for
/// dense ones.
pub fn merge_spans(mut spans: Vec<(i64, i64)>, gap: i64) -> Vec<(i64, i64)> {
    spans.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 + gap => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Slots a span read reads at most before a gap splits it.
const MERGE_GAP_SLOTS: i64 = 120;

/// The instant selector at each of `times`: per series, the value (or the
/// sample's time in seconds, for `timestamp()`) at each time.
pub async fn instant(
    ctx: Context<'_>,
    selected: &[Selected],
    times: &[i64],
    mods: Mods,
    lookback_ms: i64,
    timestamps: bool,
) -> EvalResult<Vec<Series>> {
    let read_at: Vec<i64> = times.iter().map(|&t| mods.at(t)).collect();
    let spans = merge_spans(
        read_at
            .iter()
            .map(|&t| {
                let from = (t - lookback_ms).div_euclid(MINUTE_MS) * 60;
                (from, t.div_euclid(MINUTE_MS) * 60 + 60)
            })
            .collect(),
        MERGE_GAP_SLOTS * 60,
    );
    let data = read(ctx, selected, 60, &spans).await?;
    let mut out = Vec::new();
    for (sel, (kind, buckets, recent)) in selected.iter().zip(data) {
        let rs = RangeSeries {
            labels: sel.labels.clone(),
            kind: point_kind(kind),
            width_ms: MINUTE_MS,
            t: buckets.iter().map(|(t, _)| t * 1000).collect(),
            slots: buckets.into_iter().map(|(_, s)| s).collect(),
            lead: None,
            tail: None,
        };
        let values: Vec<Option<f64>> = read_at
            .iter()
            .map(|&t| {
                newest_rewound(&rs, &recent, kind, t, lookback_ms).map(|(ts, v)| {
                    if timestamps {
                        ts as f64 / 1000.0
                    } else {
                        v
                    }
                })
            })
            .collect();
        if values.iter().any(Option::is_some) {
            out.push(Series {
                labels: rs.labels,
                values,
            });
        }
    }
    Ok(out)
}

/// The sample a bare selector answers at `t` (see the module's opening
/// comment): where the series' recent samples reach back to `t`, the
/// newest at or before `t`, from `t`'s minute as it stood at `t` (see
/// [`RecentSamples::rewind`]); elsewhere [`newest_sample`]. Every
/// evaluation time alike, so a range query's points are the instant
/// queries at its steps.
fn newest_rewound(
    rs: &RangeSeries,
    recent: &RecentSamples,
    kind: Option<SampleKind>,
    t: i64,
    lookback_ms: i64,
) -> Option<(i64, f64)> {
    let start = window_end(t);
    let Ok(i) = rs.t.binary_search(&start) else {
        // No sample in `t`'s minute: none after `t` to leave out.
        return newest_sample(rs, t, lookback_ms);
    };
    let answer = match recent.rewind(&rs.slots[i], start, start + rs.width_ms, t) {
        None => return newest_sample(rs, t, lookback_ms),
        Some(slot) if slot.shows(kind) => {
            slot.last_sample().filter(|&(ts, _)| ts >= t - lookback_ms)
        }
        // Nothing of the minute up to `t`: the minutes before answer.
        Some(_) => newest_before(rs, i, t, lookback_ms),
    };
    answer.filter(|&(_, v)| !is_stale_marker(v))
}

/// The sample a selector answers at `t` without the recent samples: the
/// newest at or before `t` and no older than `lookback_ms`, or, when `t`
/// is inside a minute (not on its first millisecond) whose last sample
/// came later, that later sample if it is nearer `t` (see the module's
/// opening comment); none when the answer is a staleness marker (the
/// series ended).
pub fn newest_sample(rs: &RangeSeries, t: i64, lookback_ms: i64) -> Option<(i64, f64)> {
    let mut i = rs.t.partition_point(|&start| start <= t);
    // Only `t`'s own minute can have its last sample after `t`.
    let mut later = None;
    if let Some(j) = i
        .checked_sub(1)
        .filter(|&j| rs.t[j] < t && t < rs.t[j] + rs.width_ms)
    {
        if let Some(l) = rs.newest(j).filter(|&(ts, _)| ts > t) {
            later = Some((l, rs.t[j]));
            i = j;
        }
    }
    let answer = match (newest_before(rs, i, t, lookback_ms), later) {
        (Some(e), Some((l, _))) if l.0 - t < t - e.0 => Some(l),
        // The series' first minute: its start is the earliest it can have
        // begun, and stands for the sample before.
        (None, Some((l, start))) if l.0 - t < t - start => Some(l),
        (e, _) => e,
    };
    answer.filter(|(_, v)| !is_stale_marker(*v))
}

/// The newest sample at or before `t` and no older than `lookback_ms`
/// among the slots before the `i`th, a staleness marker included.
fn newest_before(rs: &RangeSeries, mut i: usize, t: i64, lookback_ms: i64) -> Option<(i64, f64)> {
    while i > 0 {
        i -= 1;
        if rs.t[i] + rs.width_ms <= t - lookback_ms {
            return None;
        }
        match rs.newest(i) {
            Some((ts, v)) if ts <= t => return (ts >= t - lookback_ms).then_some((ts, v)),
            _ => {}
        }
    }
    None
}

/// Rewinds the minute slot `t` is inside of to what it held at `t`, where
/// the series' newest raw samples make that exact (see
/// [`RecentSamples::rewind`]): a range function's window at the newest
/// evaluation time, inside the minute in progress or one just past, then
/// holds no sample after it. Only that time reads its own minute (see
/// `range_fns::windows`), so the earlier ones read what they did.
fn rewind_at((kind, buckets, recent): &mut Read, t: i64) {
    let start = window_end(t);
    let Ok(i) = buckets.binary_search_by_key(&(start / 1000), |(s, _)| *s) else {
        return;
    };
    match recent.rewind(&buckets[i].1, start, start + MINUTE_MS, t) {
        Some(slot) if slot.shows(*kind) => buckets[i].1 = slot,
        Some(_) => {
            buckets.remove(i);
        }
        None => {}
    }
}

/// The widest slots (a day, an hour, a minute) that tile every window of
/// `range_ms` read at `ends_ms`: a read inside a minute reads that minute
/// too (see `range_fns::window`), so only minutes serve it.
pub fn granularity(range_ms: i64, ends_ms: &[i64]) -> i64 {
    [DAY_S, HOUR_S]
        .into_iter()
        .find(|g| range_ms % (g * 1000) == 0 && ends_ms.iter().all(|e| e.rem_euclid(g * 1000) == 0))
        .unwrap_or(60)
}

/// The range selector's slots for windows read at `reads_ms` (ascending),
/// read at `granularity_s`: the whole minutes before each read's minute,
/// and for the last read, when it is inside a minute, that minute itself
/// (see `range_fns::windows`).
pub async fn range(
    ctx: Context<'_>,
    selected: &[Selected],
    reads_ms: &[i64],
    range_ms: i64,
    granularity_s: i64,
) -> EvalResult<Vec<RangeSeries>> {
    let last = reads_ms.len().saturating_sub(1);
    let spans = merge_spans(
        reads_ms
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let e = window_end(t);
                let own = if t == e || i != last { 0 } else { MINUTE_MS };
                ((e - range_ms) / 1000, (e + own) / 1000)
            })
            .collect(),
        MERGE_GAP_SLOTS * granularity_s,
    );
    let mut data = read(ctx, selected, granularity_s, &spans).await?;
    let last = reads_ms.last().copied().filter(|&t| t != window_end(t));
    if let Some(t) = last {
        data.iter_mut().for_each(|r| rewind_at(r, t));
    }
    for (_, buckets, _) in &mut data {
        // A minute of nothing but its series' end: range functions skip
        // markers, so it is no point of any window.
        buckets.retain(|(_, s)| !s.only_ends());
    }
    Ok(selected
        .iter()
        .zip(data)
        .filter(|(_, (_, b, _))| !b.is_empty())
        .map(|(sel, r)| {
            let lead = last.and_then(|t| lead_at(&r, t, range_ms));
            let tail = last.and_then(|t| tail_at(&r, t));
            let (kind, buckets, _) = r;
            RangeSeries {
                labels: sel.labels.clone(),
                kind: point_kind(kind),
                width_ms: granularity_s * 1000,
                t: buckets.iter().map(|(t, _)| t * 1000).collect(),
                slots: buckets.into_iter().map(|(_, s)| s).collect(),
                lead,
                tail,
            }
        })
        .collect())
}

/// Where the window of a read at `t` inside a minute, `(t - range, t]`,
/// starts inside a minute slot (the range a whole number of minutes):
/// that minute's part before it, from the series' steps (see
/// [`crate::model::Steps::up_to`]).
fn lead_at((_, buckets, recent): &Read, t: i64, range_ms: i64) -> Option<Lead> {
    if range_ms % MINUTE_MS != 0 {
        return None;
    }
    let start = window_end(t) - range_ms;
    let i = buckets
        .binary_search_by_key(&(start / 1000), |(s, _)| *s)
        .ok()?;
    let cut = t - range_ms;
    let (n, sum) = recent
        .steps()
        .up_to(&buckets[i].1, start, cut, recent.spacing())?;
    Some(Lead {
        cut_ms: cut,
        n,
        sum,
    })
}

/// The two newest samples at or before `t` inside a minute, from the
/// series' recent samples (see [`Tail`]): only a gauge's or a cumulative
/// counter's (raw values), no staleness marker, and only where the slot
/// of the newer one's minute, as read and rewound to `t`, ends with it
/// (the samples and the slots tell of the same series' samples).
fn tail_at((kind, buckets, recent): &Read, t: i64) -> Option<Tail> {
    if !matches!(
        kind,
        Some(SampleKind::Gauge | SampleKind::CumulativeCounter)
    ) {
        return None;
    }
    let [older, newer] = recent.last_two(t)?;
    if is_stale_marker(older.v) || is_stale_marker(newer.v) {
        return None;
    }
    let minute = window_end(newer.ts) / 1000;
    let i = buckets.binary_search_by_key(&minute, |(s, _)| *s).ok()?;
    let ends_with_it = buckets[i]
        .1
        .last_sample()
        .is_some_and(|(ts, _)| ts == newer.ts);
    ends_with_it.then_some(Tail {
        at_ms: t,
        older: (older.ts, older.v),
        newer: (newer.ts, newer.v),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::value::sample_slot;

    fn minutes(points: &[(i64, Option<(i64, f64)>)], kind: PointKind) -> RangeSeries {
        RangeSeries {
            labels: Labels::empty(),
            kind,
            width_ms: MINUTE_MS,
            t: points.iter().map(|(m, _)| m * MINUTE_MS).collect(),
            slots: points
                .iter()
                .map(|(_, last)| match last {
                    Some((t, v)) => sample_slot(*t, *v),
                    None => Slot::of(7.0),
                })
                .collect(),
            lead: None,
            tail: None,
        }
    }

    #[test]
    fn the_newest_sample_within_the_lookback() {
        // Minutes 10 and 11 with last samples at 10:50 and 11:20.
        let rs = minutes(
            &[(10, Some((650_000, 1.0))), (11, Some((680_000, 2.0)))],
            PointKind::Gauge,
        );
        let lb = 300_000;
        assert_eq!(newest_sample(&rs, 700_000, lb), Some((680_000, 2.0)));
        // Inside minute 11 but before its last sample: the nearer of
        // minute 10's last (20 s before) and minute 11's (10 s after).
        assert_eq!(newest_sample(&rs, 670_000, lb), Some((680_000, 2.0)));
        assert_eq!(newest_sample(&rs, 664_999, lb), Some((650_000, 1.0)));
        assert_eq!(newest_sample(&rs, 665_000, lb), Some((650_000, 1.0)));
        assert_eq!(newest_sample(&rs, 665_001, lb), Some((680_000, 2.0)));
        // On a minute's first millisecond only what is at or before it.
        let rs2 = minutes(
            &[(10, Some((650_000, 1.0))), (11, Some((660_500, 2.0)))],
            PointKind::Gauge,
        );
        assert_eq!(newest_sample(&rs2, 660_000, lb), Some((650_000, 1.0)));
        // Nothing before `t`: the minute's start stands for the sample
        // before, so the series shows from half-way to its last sample.
        let first = minutes(&[(11, Some((680_000, 2.0)))], PointKind::Gauge);
        assert_eq!(newest_sample(&first, 665_000, lb), None);
        assert_eq!(newest_sample(&first, 670_000, lb), None);
        assert_eq!(newest_sample(&first, 671_000, lb), Some((680_000, 2.0)));
        assert_eq!(newest_sample(&first, 660_000, lb), None);
        assert_eq!(newest_sample(&rs, 600_000, lb), None);
        // Beyond the lookback.
        assert_eq!(newest_sample(&rs, 680_000 + lb + 1, lb), None);
        assert_eq!(newest_sample(&rs, 680_000 + lb, lb), Some((680_000, 2.0)));
        // A minute without a last sample reads its average at its end.
        let old = minutes(&[(10, None)], PointKind::Gauge);
        assert_eq!(newest_sample(&old, 700_000, lb), Some((659_999, 7.0)));
        assert_eq!(newest_sample(&old, 659_998, lb), Some((659_999, 7.0)));
        assert_eq!(newest_sample(&old, 620_000, lb), None);
        let counter = minutes(&[(10, None)], PointKind::Cumulative);
        assert_eq!(newest_sample(&counter, 700_000, lb), None);
    }

    #[test]
    fn a_staleness_marker_ends_the_series_until_its_next_sample() {
        use crate::model::stale_marker;
        let lb = 300_000;
        // Minute 10: samples, then the marker at 10:40 in the same minute.
        let mut ended = Slot::at(610_000, 1.0);
        ended.add(620_000, 2.0);
        ended.see(640_000, stale_marker());
        let mut rs = minutes(&[(10, Some((0, 0.0)))], PointKind::Gauge);
        rs.slots[0] = ended;
        // Before the marker, in its minute, nothing before it to answer
        // (the rule above); from its time on, nothing, however long the
        // lookback.
        assert_eq!(newest_sample(&rs, 639_999, lb), None);
        assert_eq!(newest_sample(&rs, 640_000, lb), None);
        assert_eq!(newest_sample(&rs, 700_000, lb), None);
        // The range view skips the marker: no per-minute sample there.
        assert_eq!(rs.sample(0), None);
        // A minute of only a marker after a minute of samples, and then a
        // sample again in the minute after.
        let mut only = Slot::EMPTY;
        only.see(665_000, stale_marker());
        let mut rs = minutes(
            &[
                (10, Some((650_000, 1.0))),
                (11, None),
                (12, Some((730_000, 3.0))),
            ],
            PointKind::Gauge,
        );
        rs.slots[1] = only;
        assert_eq!(newest_sample(&rs, 660_000, lb), Some((650_000, 1.0)));
        assert_eq!(newest_sample(&rs, 657_000, lb), Some((650_000, 1.0)));
        // Inside the marker's minute, nearer the marker than the sample
        // before: the series has ended.
        assert_eq!(newest_sample(&rs, 664_999, lb), None);
        assert_eq!(newest_sample(&rs, 665_000, lb), None);
        assert_eq!(newest_sample(&rs, 700_000, lb), None);
        // Inside minute 12, nearer its sample than the marker.
        assert_eq!(newest_sample(&rs, 721_000, lb), Some((730_000, 3.0)));
        assert_eq!(newest_sample(&rs, 729_999, lb), Some((730_000, 3.0)));
        assert_eq!(newest_sample(&rs, 730_000, lb), Some((730_000, 3.0)));
        assert!(rs.slots[1].only_ends());
    }

    #[test]
    fn an_instant_inside_a_minute_reads_it_rewound_to_that_instant() {
        use crate::model::RecentSample;
        // Minute 10 whole; minute 11 so far: samples at 11:01..11:04.
        let mut minute = Slot::EMPTY;
        for k in 1..=4 {
            minute.add(660_000 + k * 1_000, k as f64);
        }
        let kept = [
            (659_000, 9.0),
            (661_000, 1.0),
            (662_000, 2.0),
            (663_000, 3.0),
        ];
        let mut read: Read = (
            Some(SampleKind::Gauge),
            vec![(600, Slot::at(659_000, 9.0)), (660, minute)],
            RecentSamples::new(
                kept.iter()
                    .chain(&[(664_000, 4.0)])
                    .map(|&(ts, v)| RecentSample {
                        ts,
                        v,
                        added: Some(v),
                    })
                    .collect(),
            ),
        );
        // The oldest kept sample is before the minute, which is kept
        // whole: at 11:02.5 it holds 11:01 and 11:02.
        rewind_at(&mut read, 662_500);
        let rs = minutes(&[(10, None), (11, None)], PointKind::Gauge);
        let rs = RangeSeries {
            slots: read.1.iter().map(|(_, s)| *s).collect(),
            ..rs
        };
        assert_eq!(newest_sample(&rs, 662_500, 300_000), Some((662_000, 2.0)));
        assert_eq!((rs.slots[1].n, rs.slots[1].sum), (2, 3.0));
        // Before the minute's first sample: the minute is gone.
        let mut early = read.clone();
        early.1[1].1 = minute;
        rewind_at(&mut early, 660_500);
        assert_eq!(early.1.len(), 1);
        // The instant selector reads every time so, the minute unchanged.
        let rs = minutes(&[(10, None), (11, None)], PointKind::Gauge);
        let rs = RangeSeries {
            slots: vec![Slot::at(659_000, 9.0), minute],
            ..rs
        };
        let (kind, recent) = (Some(SampleKind::Gauge), &read.2);
        let at = |t| newest_rewound(&rs, recent, kind, t, 300_000);
        assert_eq!(at(662_500), Some((662_000, 2.0)));
        assert_eq!(at(660_500), Some((659_000, 9.0)));
        assert_eq!(at(670_000), Some((664_000, 4.0)));
        // Before the oldest recent sample: the nearer-sample rule, here
        // the series' first minute, its last sample nearer than its start.
        assert_eq!(at(658_000), Some((659_000, 9.0)));
        assert_eq!(at(629_000), None);
    }

    #[test]
    fn windows_tile_with_wide_slots_when_they_can() {
        let h = 3_600_000;
        assert_eq!(granularity(h, &[5 * h, 6 * h]), HOUR_S);
        assert_eq!(granularity(2 * h, &[5 * h]), HOUR_S);
        assert_eq!(granularity(h, &[5 * h, 5 * h + 60_000]), 60);
        assert_eq!(granularity(300_000, &[5 * h]), 60);
        assert_eq!(granularity(24 * h, &[24 * h, 48 * h]), DAY_S);
        assert_eq!(window_end(61_500), 60_000);
        assert_eq!(window_end(-1), -60_000);
    }

    #[test]
    fn spans_merge_across_small_gaps_only() {
        assert_eq!(
            merge_spans(vec![(0, 60), (60, 120), (200, 260), (10_000, 10_060)], 120),
            vec![(0, 260), (10_000, 10_060)]
        );
        assert_eq!(merge_spans(vec![], 1), vec![]);
    }
}
