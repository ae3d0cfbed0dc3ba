//! The range functions (`rate`, `avg_over_time`, `quantile_over_time`...):
//! what each computes from a series' slots or samples in each window.
//!
//! Where the slots determine the answer it is exact: a window's merged
//! slot gives `sum/count/min/max/avg_over_time` of gauges and delta
//! counters, and `increase` and `rate` of counters (their slots sum the
//! per-sample increases, resets already handled at ingest), read in
//! logarithmic time per window from a tree of merged slots. Everything
//! else applies Prometheus' own definition (see `samples`) to the window's
//! per-minute samples, each non-empty minute's last sample; over a
//! subquery's results, which are real samples, that is Prometheus' answer
//! exactly. A window that holds part of a minute (an evaluation time inside
//! the minute in progress) is read over the time it covers, never as whole
//! minutes: rates divide by it, counts, sums and increases are scaled from
//! it to the range; the share of its first minute before the range is
//! taken out of the merged slots. `docs/promql.md` tabulates every
//! function.

use std::cell::OnceCell;

use super::samples::{self, Point};
use super::value::{bad, EvalResult, PointKind, RangeSeries};
use crate::model::Slot;

/// A range function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeFn {
    Rate,
    Increase,
    Delta,
    Irate,
    Idelta,
    Deriv,
    PredictLinear,
    Changes,
    Resets,
    Avg,
    Min,
    Max,
    Sum,
    Count,
    Last,
    Present,
    Quantile,
    Stddev,
    Stdvar,
    Mad,
    Smoothing,
}

impl RangeFn {
    pub fn parse(name: &str) -> Option<RangeFn> {
        Some(match name {
            "rate" => RangeFn::Rate,
            "increase" => RangeFn::Increase,
            "delta" => RangeFn::Delta,
            "irate" => RangeFn::Irate,
            "idelta" => RangeFn::Idelta,
            "deriv" => RangeFn::Deriv,
            "predict_linear" => RangeFn::PredictLinear,
            "changes" => RangeFn::Changes,
            "resets" => RangeFn::Resets,
            "avg_over_time" => RangeFn::Avg,
            "min_over_time" => RangeFn::Min,
            "max_over_time" => RangeFn::Max,
            "sum_over_time" => RangeFn::Sum,
            "count_over_time" => RangeFn::Count,
            "last_over_time" => RangeFn::Last,
            "present_over_time" => RangeFn::Present,
            "quantile_over_time" => RangeFn::Quantile,
            "stddev_over_time" => RangeFn::Stddev,
            "stdvar_over_time" => RangeFn::Stdvar,
            "mad_over_time" => RangeFn::Mad,
            "holt_winters" | "double_exponential_smoothing" => RangeFn::Smoothing,
            _ => return None,
        })
    }

    /// Whether the function reads `kind`'s slots merged over the window
    /// (exact, and servable by hour and day slots), rather than per-minute
    /// samples.
    pub fn reads_merged_slots(self, kind: PointKind) -> bool {
        match self {
            RangeFn::Count | RangeFn::Present | RangeFn::Last => kind != PointKind::Samples,
            RangeFn::Rate | RangeFn::Increase => kind.sums_increases(),
            RangeFn::Avg | RangeFn::Min | RangeFn::Max | RangeFn::Sum => {
                matches!(kind, PointKind::Gauge | PointKind::Delta)
            }
            _ => false,
        }
    }

    /// `last_over_time` acts like an offset and keeps the metric name (as
    /// in Prometheus 2); every other range function drops it.
    pub fn keeps_name(self) -> bool {
        self == RangeFn::Last
    }
}

/// A window of one evaluation: points `lo..hi`, and the range's edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowAt {
    pub lo: usize,
    pub hi: usize,
    pub start_ms: i64,
    pub end_ms: i64,
    /// How much time the window's slots cover: the range, or, where the
    /// window holds the minute `t` is inside of, the range and that
    /// minute up to its newest sample. Rates divide by it, and counts,
    /// sums and increases are scaled from it to the range, so a partial
    /// minute is never read as a whole one.
    pub covered_ms: i64,
    /// Whether the window holds part of a minute: the minute `t` is in.
    pub partial: bool,
    /// In a partial window, how much of its first slot lies before the
    /// range: `t` less its minute's start, as the range `(t - r', t]`
    /// starts that far into the first minute. That share of the first
    /// slot's count, sum and increases is taken out (see [`Merged`]), so
    /// the window stands for `r'` up to `t`, not for up to a minute more.
    pub lead_ms: i64,
    /// The instant read: the evaluation time less any offset.
    pub read_ms: i64,
}

/// The windows of `rs` at the read times `reads` (ascending, one per
/// evaluation time): the last one, an instant query's or the newest point
/// of a range query's, as [`window`] has it, with the minute it is inside
/// of; the others whole minutes only, so a graph's points inside past
/// minutes do not read the rest of their minute.
pub fn windows(rs: &RangeSeries, reads: &[i64], range_ms: i64) -> Vec<WindowAt> {
    let last = reads.len().saturating_sub(1);
    reads
        .iter()
        .enumerate()
        .map(|(i, &t)| window_with(rs, t, range_ms, i == last))
        .collect()
}

/// The window of `rs` for a read at `read_t` over `range_ms`. For slots:
/// the slots ending in `(end - range, end]` where `end` is `read_t`'s
/// minute start; when `read_t` is inside a minute, that minute too, as far
/// as it has samples (the minute in progress up to its newest sample, a
/// past minute whole), with [`WindowAt::covered_ms`] saying how far that
/// is. For samples, those in `[read_t - range, read_t]` (Prometheus 2's
/// closed range).
pub fn window(rs: &RangeSeries, read_t: i64, range_ms: i64) -> WindowAt {
    window_with(rs, read_t, range_ms, true)
}

fn window_with(rs: &RangeSeries, read_t: i64, range_ms: i64, own_minute: bool) -> WindowAt {
    if rs.kind == PointKind::Samples {
        let (start, end) = (read_t - range_ms, read_t);
        return WindowAt {
            lo: rs.t.partition_point(|&t| t < start),
            hi: rs.t.partition_point(|&t| t <= end),
            start_ms: start,
            end_ms: end,
            covered_ms: range_ms,
            partial: false,
            lead_ms: 0,
            read_ms: read_t,
        };
    }
    let end = window_end(read_t);
    let start = end - range_ms;
    let lo = rs.t.partition_point(|&t| t < start);
    let whole = rs.t.partition_point(|&t| t < end);
    let own = match read_t == end || !own_minute {
        true => None,
        false => rs.t.get(whole).filter(|&&t| t == end).map(|_| whole),
    };
    let Some(own) = own else {
        return WindowAt {
            lo,
            hi: whole,
            start_ms: start,
            end_ms: end,
            covered_ms: range_ms,
            partial: false,
            lead_ms: 0,
            read_ms: read_t,
        };
    };
    // The newest sample of `read_t`'s minute bounds what it covers (its
    // end where a slot written before last samples were kept has none).
    let slot = &rs.slots[own];
    let newest = slot.last_sample().map_or(end + rs.width_ms, |(ts, _)| {
        ts.clamp(end, end + rs.width_ms)
    });
    // Only a first slot that starts the range has a share before it (and
    // not the minute in progress itself, a range of its own minute only).
    let lead_ms = match rs.t.get(lo) == Some(&start) && lo < own {
        true => (read_t - end).min(rs.width_ms),
        false => 0,
    };
    WindowAt {
        lo,
        hi: own + 1,
        start_ms: start,
        end_ms: newest.max(read_t),
        covered_ms: newest - start,
        partial: true,
        lead_ms,
        read_ms: read_t,
    }
}

/// The end of the whole minutes a range selector reads for evaluation time
/// `t`: the start of `t`'s minute (see [`window`] for the minute itself).
pub fn window_end(t: i64) -> i64 {
    t.div_euclid(MINUTE_MS) * MINUTE_MS
}

const MINUTE_MS: i64 = 60_000;

/// Arguments besides the range vector, per evaluation time.
#[derive(Debug, Default)]
pub struct Params<'a> {
    /// `quantile_over_time`'s φ, `predict_linear`'s seconds, the smoothing
    /// factor.
    pub first: Option<&'a [f64]>,
    /// The trend factor.
    pub second: Option<&'a [f64]>,
}

/// `f` of `rs` in each window; `eval_times` are the evaluation times
/// (`predict_linear` predicts from them).
pub fn apply(
    f: RangeFn,
    rs: &RangeSeries,
    wins: &[WindowAt],
    eval_times: &[i64],
    range_ms: i64,
    params: &Params<'_>,
) -> EvalResult<Vec<Option<f64>>> {
    let view = SeriesView::new(rs);
    let mut out = Vec::with_capacity(wins.len());
    for (i, w) in wins.iter().enumerate() {
        if w.lo >= w.hi {
            out.push(None);
            continue;
        }
        // Over the covered time; counts, sums and increases scaled from it
        // to the range (the same where the window is whole minutes).
        let range_s = w.covered_ms.max(1) as f64 / 1000.0;
        let scale = range_ms as f64 / w.covered_ms.max(1) as f64;
        // The same for the merged slots, less the first slot's share
        // before the range.
        let covered_s = (w.covered_ms - w.lead_ms).max(1) as f64 / 1000.0;
        let p = |ps: Option<&[f64]>| ps.and_then(|v| v.get(i).copied()).unwrap_or(f64::NAN);
        if let Some(v) = tail_value(f, rs, w, range_ms) {
            out.push(Some(v));
            continue;
        }
        // A window whose slots hold last samples only (NaN samples; a
        // cumulative counter's baseline never reaches here, see
        // `Slot::shows`) has no aggregates to merge: its samples answer, as
        // they would for Prometheus.
        let merged = match f.reads_merged_slots(rs.kind) && f != RangeFn::Last {
            true => Some(view.merged(w))
                .filter(|m| m.n > 0)
                .map(|m| Merged::new(m, rs, w)),
            false => None,
        };
        let v = match (f, merged) {
            (RangeFn::Present, _) => Some(1.0),
            (RangeFn::Last, _) if f.reads_merged_slots(rs.kind) => view.last(w),
            (RangeFn::Count, Some(m)) => Some(m.n * per_sample_scale(w, range_ms, m.n)),
            (RangeFn::Sum, Some(m)) => Some(m.sum * per_sample_scale(w, range_ms, m.n)),
            (RangeFn::Increase, Some(m)) => Some(m.sum / covered_s * (range_ms as f64 / 1000.0)),
            (RangeFn::Avg, Some(m)) => m.avg(),
            (RangeFn::Min, Some(m)) => Some(m.min),
            (RangeFn::Max, Some(m)) => Some(m.max),
            (RangeFn::Rate, Some(m)) => Some(m.sum / covered_s),
            // A counter's window without increases: one sample at most,
            // no rate (Prometheus needs two).
            (RangeFn::Rate | RangeFn::Increase, None) if rs.kind.sums_increases() => None,
            (RangeFn::Irate, _) if rs.kind.sums_increases() => view.counter_irate(w),
            _ => {
                let pts = view.samples(w);
                let v = by_samples(
                    f,
                    pts,
                    w,
                    eval_times[i],
                    range_s,
                    p(params.first),
                    p(params.second),
                )?;
                match f {
                    // Of the covered time, made the range's.
                    RangeFn::Increase | RangeFn::Delta => v.map(|v| v * scale),
                    _ => v,
                }
            }
        };
        out.push(v);
    }
    Ok(out)
}

/// `irate` or `idelta` at the last read, from the two newest samples at or
/// before it where the series' recent samples hold them inside the range
/// (`RangeSeries::tail`): Prometheus' own definition, on its own samples.
fn tail_value(f: RangeFn, rs: &RangeSeries, w: &WindowAt, range_ms: i64) -> Option<f64> {
    let per_second = match f {
        RangeFn::Irate => true,
        RangeFn::Idelta => false,
        _ => return None,
    };
    let tail = rs
        .tail
        .filter(|t| t.at_ms == w.read_ms && t.older.0 >= w.read_ms - range_ms)?;
    samples::instant_value(&[tail.older, tail.newer], per_second)
}

/// The scale from a window's samples to the range for counts and sums. A
/// window that starts inside its first minute (`lead_ms`) is measured
/// from the range's start to its newest sample, and no sample comes after
/// that up to the instant read: counted, as Prometheus counts, not scaled.
/// In a window that holds part of a minute otherwise, `n` samples between
/// the range's start and its newest sample stand for `n` sampling
/// intervals, one more than the `n - 1` between them, so the time they
/// cover is `covered · n/(n-1)`.
fn per_sample_scale(w: &WindowAt, range_ms: i64, n: f64) -> f64 {
    let covered = (w.covered_ms - w.lead_ms).max(1) as f64;
    if w.partial && w.lead_ms > 0 {
        return 1.0;
    }
    if !w.partial || n < 2.0 {
        return range_ms as f64 / covered;
    }
    range_ms as f64 / (covered * n / (n - 1.0))
}

/// A window's merged slots, less the part of its first slot that lies
/// before the range (see [`WindowAt::lead_ms`]): as the series' steps of
/// ten seconds measured it where they hold that minute (`RangeSeries::lead`,
/// the one step the range starts in shared out evenly), and otherwise
/// with the minute's samples taken as spread evenly over it, the one thing
/// its count and sums can say of when they came. The minimum and maximum
/// cannot be shared out: they stay the first minute's whole.
#[derive(Debug, Clone, Copy)]
struct Merged {
    n: f64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Merged {
    fn new(m: Slot, rs: &RangeSeries, w: &WindowAt) -> Merged {
        let mut out = Merged {
            n: m.n as f64,
            sum: m.sum,
            min: m.min,
            max: m.max,
        };
        let Some((&start, first)) = rs.t.get(w.lo).zip(rs.slots.get(w.lo)) else {
            return out;
        };
        if w.lead_ms == 0 {
            return out;
        }
        match rs.lead {
            Some(l) if l.cut_ms == start + w.lead_ms => {
                out.n -= l.n;
                out.sum -= l.sum;
            }
            _ => {
                let share = w.lead_ms as f64 / rs.width_ms.max(1) as f64;
                out.n -= share * first.n as f64;
                out.sum -= share * first.sum;
            }
        }
        out
    }

    fn avg(&self) -> Option<f64> {
        (self.n > 0.0).then(|| self.sum / self.n)
    }
}

/// Prometheus' definition of `f` over `pts`.
fn by_samples(
    f: RangeFn,
    pts: &[Point],
    w: &WindowAt,
    eval_t: i64,
    range_s: f64,
    p1: f64,
    p2: f64,
) -> EvalResult<Option<f64>> {
    if pts.is_empty() {
        return Ok(None);
    }
    let values = || pts.iter().map(|p| p.1);
    Ok(match f {
        RangeFn::Rate => samples::extrapolated_rate(pts, w.start_ms, w.end_ms, range_s, true, true),
        RangeFn::Increase => {
            samples::extrapolated_rate(pts, w.start_ms, w.end_ms, range_s, true, false)
        }
        RangeFn::Delta => {
            samples::extrapolated_rate(pts, w.start_ms, w.end_ms, range_s, false, false)
        }
        RangeFn::Irate => samples::instant_value(pts, true),
        RangeFn::Idelta => samples::instant_value(pts, false),
        RangeFn::Deriv => samples::deriv(pts),
        RangeFn::PredictLinear => samples::predict_linear(pts, eval_t, p1),
        RangeFn::Changes => samples::changes(pts),
        RangeFn::Resets => samples::resets(pts),
        RangeFn::Avg => samples::avg(values()),
        RangeFn::Min => samples::min(values()),
        RangeFn::Max => samples::max(values()),
        RangeFn::Sum => Some(samples::sum(values())),
        RangeFn::Count => Some(pts.len() as f64),
        RangeFn::Last => pts.last().map(|p| p.1),
        RangeFn::Present => Some(1.0),
        RangeFn::Quantile => Some(samples::quantile(p1, &mut values().collect::<Vec<_>>())),
        RangeFn::Stddev => samples::variance(values()).map(f64::sqrt),
        RangeFn::Stdvar => samples::variance(values()),
        RangeFn::Mad => Some(samples::mad(&mut values().collect::<Vec<_>>())),
        RangeFn::Smoothing => {
            if !(p1 > 0.0 && p1 < 1.0) {
                return Err(bad(format!(
                    "invalid smoothing factor. Expected: 0 < sf < 1, got: {p1}"
                )));
            }
            if !(p2 > 0.0 && p2 < 1.0) {
                return Err(bad(format!(
                    "invalid trend factor. Expected: 0 < tf < 1, got: {p2}"
                )));
            }
            samples::double_exponential_smoothing(&values().collect::<Vec<_>>(), p1, p2)
        }
    })
}

/// A series' points, with what windows are read from built once when
/// first needed: the slot tree, and the per-minute sample view.
struct SeriesView<'a> {
    rs: &'a RangeSeries,
    tree: OnceCell<SlotTree>,
    /// The sample view, and for each slot index where its samples start.
    view: OnceCell<(Vec<Point>, Vec<usize>)>,
}

/// Windows of up to this many slots are merged directly.
const DIRECT_MERGE: usize = 16;

impl<'a> SeriesView<'a> {
    fn new(rs: &'a RangeSeries) -> Self {
        SeriesView {
            rs,
            tree: OnceCell::new(),
            view: OnceCell::new(),
        }
    }

    fn merged(&self, w: &WindowAt) -> Slot {
        if w.hi - w.lo <= DIRECT_MERGE {
            let mut acc = Slot::EMPTY;
            for s in &self.rs.slots[w.lo..w.hi] {
                acc.merge(s);
            }
            return acc;
        }
        self.tree
            .get_or_init(|| SlotTree::new(&self.rs.slots))
            .merged(w.lo, w.hi)
    }

    /// The newest sample of the window (a slot's last sample, or for one
    /// written before those were kept, its average).
    fn last(&self, w: &WindowAt) -> Option<f64> {
        (w.lo..w.hi)
            .rev()
            .find_map(|i| self.rs.sample(i))
            .map(|p| p.1)
    }

    fn samples(&self, w: &WindowAt) -> &[Point] {
        let (pts, starts) = self.view.get_or_init(|| {
            let mut pts = Vec::with_capacity(self.rs.slots.len());
            let mut starts = Vec::with_capacity(self.rs.slots.len() + 1);
            for i in 0..self.rs.slots.len() {
                starts.push(pts.len());
                pts.extend(self.rs.sample(i));
            }
            starts.push(pts.len());
            (pts, starts)
        });
        &pts[starts[w.lo]..starts[w.hi]]
    }

    /// A counter's `irate`: the newest slot's increase over the time
    /// between the last samples of it and the slot before (the slots' ends
    /// where their last samples are unknown). The increase is exact, resets
    /// included, where the raw values alone would only see one sample each.
    fn counter_irate(&self, w: &WindowAt) -> Option<f64> {
        if w.hi - w.lo < 2 {
            return None;
        }
        let at = |i: usize| {
            let s = &self.rs.slots[i];
            s.last_sample()
                .map_or(self.rs.t[i] + self.rs.width_ms - 1, |(t, _)| t)
        };
        let dt = at(w.hi - 1) - at(w.hi - 2);
        (dt > 0).then(|| self.rs.slots[w.hi - 1].sum / (dt as f64 / 1000.0))
    }
}

/// Merges of any run of slots in logarithmic time, so long windows at fine
/// steps cost the same as short ones; sums are added in a balanced order,
/// never subtracted, so no precision is lost to cancellation.
struct SlotTree {
    n: usize,
    nodes: Vec<Slot>,
}

impl SlotTree {
    fn new(slots: &[Slot]) -> SlotTree {
        let n = slots.len();
        let mut nodes = vec![Slot::EMPTY; n];
        nodes.extend_from_slice(slots);
        for i in (1..n).rev() {
            let mut s = nodes[2 * i];
            s.merge(&nodes[2 * i + 1]);
            nodes[i] = s;
        }
        SlotTree { n, nodes }
    }

    fn merged(&self, lo: usize, hi: usize) -> Slot {
        let mut acc = Slot::EMPTY;
        let (mut l, mut r) = (lo + self.n, hi + self.n);
        while l < r {
            if l & 1 == 1 {
                acc.merge(&self.nodes[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                acc.merge(&self.nodes[r]);
            }
            l >>= 1;
            r >>= 1;
        }
        acc
    }
}

#[cfg(test)]
#[path = "range_fns_tests.rs"]
mod tests;
