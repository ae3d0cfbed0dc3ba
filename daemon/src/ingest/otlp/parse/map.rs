//! A data point read by the view parser made into series, as the owned
//! conversion (`points`) makes them: the same kinds, names, labels, start
//! times and refusals, in the same order. The table of what each metric
//! type becomes is in `points`.

use std::fmt::Write as _;

use bumpalo::Bump;
use tally_proto::v1 as pb;

use super::super::points::{check_buckets, counter, temporality, NO_RECORDED_VALUE};
use super::super::MAX_POINT_ATTRIBUTES;
use super::{ParseError, Point, Reader, Shape, Variant};
use crate::aggregator::RejectReason;
use crate::model::stale_marker;

/// The names a metric's series take: made once per metric, not per point.
pub(in crate::ingest::otlp) struct Names<'a> {
    name: &'a str,
    count: &'a str,
    sum: &'a str,
    bucket: &'a str,
}

impl<'a> Names<'a> {
    #[inline]
    pub(in crate::ingest::otlp) fn new(
        arena: &'a Bump,
        name: &'a str,
        variant: Variant,
        scratch: &mut String,
    ) -> Names<'a> {
        let mut suffixed = |suffix: &str| -> &'a str {
            scratch.clear();
            scratch.push_str(name);
            scratch.push_str(suffix);
            arena.alloc_str(scratch)
        };
        match variant {
            // Gauges and sums are named as sent.
            Variant::Gauge | Variant::Sum => Names {
                name,
                count: "",
                sum: "",
                bucket: "",
            },
            _ => Names {
                name,
                count: suffixed("_count"),
                sum: suffixed("_sum"),
                bucket: suffixed("_bucket"),
            },
        }
    }
}

type Mapped = Result<(), ParseError>;

impl<'a> Reader<'a, '_> {
    /// Makes series of a point of a metric of `variant`, whose data says
    /// `shape` of all its points.
    pub(super) fn point(
        &mut self,
        names: &Names<'a>,
        variant: Variant,
        shape: Shape,
        p: &Point,
    ) -> Mapped {
        let name = names.name;
        match variant {
            Variant::Gauge => self.number(name, Ok(pb::SampleKind::Gauge), p),
            Variant::Sum => {
                let kind = match (shape.monotonic, temporality(shape.temporality)) {
                    (true, Some(delta)) => Ok(counter(delta)),
                    (false, Some(false)) => Ok(pb::SampleKind::Gauge),
                    (false, Some(true)) => Err("a non-monotonic delta sum has no Tally kind; export UpDownCounters with cumulative temporality"),
                    (_, None) => Err("a sum without aggregation temporality"),
                };
                self.number(name, kind, p)
            }
            Variant::Histogram | Variant::Exponential => {
                let Some(delta) = temporality(shape.temporality) else {
                    self.refuse_unread(name, "a histogram without aggregation temporality");
                    return Ok(());
                };
                if variant == Variant::Histogram {
                    self.histogram(names, counter(delta), p)
                } else {
                    self.exponential(names, counter(delta), p)
                }
            }
            Variant::Summary => self.summary(names, p),
        }
    }

    /// Counts and refuses a point whose metric cannot be read, unopened.
    fn refuse_unread(&mut self, name: &str, why: &str) {
        self.next_point();
        self.refuse(RejectReason::InvalidPoint, || {
            format!("metric {name:?}: {why}")
        });
    }

    fn next_point(&mut self) -> u32 {
        self.points += 1;
        self.points - 1
    }

    fn refuse(&mut self, reason: RejectReason, detail: impl FnOnce() -> String) {
        self.refused_points += 1;
        self.b.refuse(1, reason, detail);
    }

    /// The point's ordinal and time, its labels made, or None when it is
    /// skipped or refused (already counted).
    fn open(&mut self, name: &str, p: &Point) -> Option<(u32, i64)> {
        let point = self.next_point();
        self.start_ms = (p.start / 1_000_000).min(i64::MAX as u64) as i64;
        self.ended = p.flags & NO_RECORDED_VALUE != 0;
        if p.time == 0 {
            self.refuse(RejectReason::InvalidPoint, || {
                format!("metric {name:?}: a data point has no time_unix_nano")
            });
            return None;
        }
        if self.attrs.len() > MAX_POINT_ATTRIBUTES {
            let (n, max) = (self.attrs.len(), MAX_POINT_ATTRIBUTES);
            self.refuse(RejectReason::InvalidLabel, || {
                format!("metric {name:?}: a data point has {n} attributes; at most {max} are read")
            });
            return None;
        }
        self.point_labels();
        Some((point, (p.time / 1_000_000).min(i64::MAX as u64) as i64))
    }

    /// The open point's labels: its attributes (colliding names joining
    /// their values with `;`), then the resource's labels it lacks.
    fn point_labels(&mut self) {
        self.labels.clear();
        // Most points of some agents have no attributes: no drain to set up.
        if !self.attrs.is_empty() {
            self.attribute_labels();
        }
        for &(name, value) in &self.resource_labels {
            if !self.labels.iter().any(|l| l.0 == name) {
                self.labels.push((name, value));
            }
        }
    }

    /// The open point's attributes as labels, colliding names joining
    /// their values with `;`.
    fn attribute_labels(&mut self) {
        let arena = self.arena;
        for (key, attr) in self.attrs.drain(..) {
            let Some(value) = attr.text(arena, &mut self.scratch) else {
                continue;
            };
            let name = self.key_names.name(arena, key);
            match self.labels.iter_mut().find(|l| l.0 == name) {
                Some(l) => {
                    self.scratch.clear();
                    self.scratch.push_str(l.1);
                    self.scratch.push(';');
                    self.scratch.push_str(value);
                    l.1 = arena.alloc_str(&self.scratch);
                }
                None => self.labels.push((name, value)),
            }
        }
    }

    /// A number as label text, made in the arena.
    fn float(&mut self, v: f64) -> &'a str {
        self.scratch.clear();
        let _ = write!(self.scratch, "{v}");
        self.arena.alloc_str(&self.scratch)
    }

    /// Adds one sample of one series: the open point's labels, `extra`
    /// replacing any label of its name.
    fn sample(
        &mut self,
        point: u32,
        metric: &'a str,
        kind: pb::SampleKind,
        (ts_ms, value): (i64, f64),
        extra: Option<(&'a str, &'a str)>,
    ) -> Mapped {
        let mark = self.b.mark();
        for &(name, v) in &self.labels {
            if extra.is_none_or(|(e, _)| e != name) {
                self.b.label(name, v);
            }
        }
        if let Some((name, v)) = extra {
            self.b.label(name, v);
        }
        // A point with no recorded value ends its series (see `points`).
        let value = if self.ended { stale_marker() } else { value };
        self.b.sample(ts_ms, value);
        // A cumulative counter's start time tells a reset from a drop.
        if kind == pb::SampleKind::CumulativeCounter && self.start_ms != 0 {
            self.b.start_time(self.start_ms);
        }
        let source = self.source.unwrap_or("");
        self.b.end_series(mark, source, metric, kind as i32)?;
        self.point_of.push(point);
        Ok(())
    }

    fn number(&mut self, name: &'a str, kind: Result<pb::SampleKind, &str>, p: &Point) -> Mapped {
        let kind = match kind {
            Ok(k) => k,
            Err(why) => {
                self.refuse_unread(name, why);
                return Ok(());
            }
        };
        let Some((point, ts)) = self.open(name, p) else {
            return Ok(());
        };
        let Some(value) = p.value.or(self.ended.then_some(0.0)) else {
            self.refuse(RejectReason::InvalidPoint, || {
                format!("metric {name:?}: a data point has no value")
            });
            return Ok(());
        };
        self.sample(point, name, kind, (ts, value), None)
    }

    fn histogram(&mut self, names: &Names<'a>, kind: pb::SampleKind, p: &Point) -> Mapped {
        let Some((point, ts)) = self.open(names.name, p) else {
            return Ok(());
        };
        let checked = match self.ended {
            true => Ok(()),
            false => check_buckets(&self.counts, &self.bounds, p.count),
        };
        if let Err(why) = checked {
            let name = names.name;
            self.refuse(RejectReason::InvalidPoint, || {
                format!("histogram {name:?}: {why}")
            });
            return Ok(());
        }
        self.count_and_sum(names, point, kind, (ts, p.count, p.sum))?;
        let mut cumulative = 0u64;
        for i in 0..self.counts.len() {
            cumulative = cumulative.saturating_add(self.counts[i]);
            let le = match self.bounds.get(i) {
                Some(&bound) => self.float(bound),
                None => "+Inf",
            };
            let sample = (ts, cumulative as f64);
            self.sample(point, names.bucket, kind, sample, Some(("le", le)))?;
        }
        Ok(())
    }

    fn exponential(&mut self, names: &Names<'a>, kind: pb::SampleKind, p: &Point) -> Mapped {
        let Some((point, ts)) = self.open(names.name, p) else {
            return Ok(());
        };
        self.count_and_sum(names, point, kind, (ts, p.count, p.sum))
    }

    fn summary(&mut self, names: &Names<'a>, p: &Point) -> Mapped {
        let Some((point, ts)) = self.open(names.name, p) else {
            return Ok(());
        };
        let kind = pb::SampleKind::CumulativeCounter;
        // A summary's sum is not optional: absent, it is 0.
        let sum = Some(p.sum.unwrap_or(0.0));
        self.count_and_sum(names, point, kind, (ts, p.count, sum))?;
        for i in 0..self.quantiles.len() {
            let (quantile, value) = self.quantiles[i];
            let q = self.float(quantile);
            let gauge = pb::SampleKind::Gauge;
            self.sample(point, names.name, gauge, (ts, value), Some(("quantile", q)))?;
        }
        Ok(())
    }

    fn count_and_sum(
        &mut self,
        names: &Names<'a>,
        point: u32,
        kind: pb::SampleKind,
        (ts, count, sum): (i64, u64, Option<f64>),
    ) -> Mapped {
        self.sample(point, names.count, kind, (ts, count as f64), None)?;
        if let Some(sum) = sum {
            self.sample(point, names.sum, kind, (ts, sum), None)?;
        }
        Ok(())
    }
}
