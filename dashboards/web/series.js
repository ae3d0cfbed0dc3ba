// Series as the charts draw them, built from each of the daemon's answers
// (native range, group aggregate, PromQL matrix), and live minutes folded
// into the chart's tier.
//
// A chart series is `{ key, name, source, metric, labels, kind, counter,
// value, points }`. Native points keep the daemon's fields as they came
// (`t, n, sum, min, max, avg, rate`, and `last, last_ms` where the daemon
// sends them); PromQL points are `{ t, value }` (`value: true` on the
// series). Times are Unix seconds, points ascending by `t`.

import { labels as fmtLabels } from './format.js';

export const TIERS = { minute: 60, hour: 3600, day: 86400 };

export function seriesKey(s) {
  return `${s.source}\u0000${s.metric}\u0000${JSON.stringify(s.labels || {})}`;
}

function isCounter(kind) {
  return kind === 'delta_counter' || kind === 'cumulative_counter';
}

/** The series of a `/api/v1/range` answer. */
export function fromRange(body) {
  return (body.series || []).map((s) => native(s, s.points || []));
}

function native(s, points) {
  return {
    key: seriesKey(s),
    source: s.source,
    metric: s.metric,
    labels: s.labels || {},
    kind: s.kind || null,
    counter: isCounter(s.kind),
    value: false,
    points,
  };
}

/** The one series of a `/api/v1/aggregate` answer: a fleet aggregate. */
export function fromAggregate(body, group) {
  const how = body.rollup
    ? `rollup of group “${body.rollup}”`
    : `fanned out over ${body.fanned_out ?? 0} series`;
  const s = native(
    { source: `@${group}`, metric: body.metric, labels: {}, kind: body.kind },
    body.points || [],
  );
  s.name = `${body.metric} · fleet aggregate, ${how}`;
  s.aggregate = how;
  return [s];
}

/** The series of a Prometheus `query_range` answer (a matrix). */
export function fromMatrix(body) {
  const result = (body.data && body.data.result) || [];
  return result.map((r) => {
    const { __name__: metric = '', ...rest } = r.metric || {};
    return {
      key: JSON.stringify(r.metric || {}),
      name: `${metric}${fmtLabels(rest)}` || '{}',
      source: rest.source || rest.instance || '',
      metric,
      labels: rest,
      kind: null,
      counter: false,
      value: true,
      points: (r.values || []).map(([t, v]) => ({ t: Number(t), value: parseFloat(v) })),
    };
  });
}

/** The index of the first point at or after `t` (points ascending). */
export function lowerBound(points, t) {
  let lo = 0;
  let hi = points.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid].t < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** What the line shows: the rate of a counter, the mean of a gauge. */
export function yOf(s, p) {
  if (s.value) return p.value;
  return s.counter ? p.rate : p.avg;
}

/** The band around the line: min and max of a gauge (none for counters). */
export function bandOf(s, p) {
  if (s.value || s.counter || p.min === undefined) return null;
  return [p.min, p.max];
}

/**
 * Names each series by what tells it from the others (metric, source,
 * labels), and returns what they all share, for the chart's title.
 */
export function nameAll(list) {
  if (!list.length) return '';
  const same = (f) => list.every((s) => f(s) === f(list[0]));
  const oneMetric = same((s) => s.metric);
  const oneSource = same((s) => s.source);
  const shared = Object.entries(list[0].labels).filter(([k, v]) =>
    list.every((s) => s.labels[k] === v),
  );
  const skip = list.length > 1 ? shared.map(([k]) => k) : [];
  for (const s of list) {
    if (s.name && (s.value || s.aggregate)) continue;
    const parts = [];
    if (!oneMetric) parts.push(s.metric);
    if (!oneSource || list.length === 1) parts.push(s.source);
    const l = fmtLabels(s.labels, skip);
    if (l) parts.push(l);
    s.name = parts.join(' ') || s.metric;
  }
  if (list[0].value || list[0].aggregate) return list.length === 1 ? list[0].name : '';
  const title = [];
  if (oneMetric) title.push(list[0].metric);
  if (oneSource && list.length > 1) title.push(list[0].source);
  if (shared.length && list.length > 1) title.push(fmtLabels(Object.fromEntries(shared)));
  return title.join(' ');
}

/** `points` with `incoming` merged in (same `t`: incoming wins), ascending. */
export function upsert(points, incoming) {
  if (!incoming.length) return points;
  const sorted = incoming.slice().sort((a, b) => a.t - b.t);
  const last = points.length ? points[points.length - 1].t : -Infinity;
  if (sorted[0].t > last) return points.concat(sorted);
  const byT = new Map(points.map((p) => [p.t, p]));
  for (const p of sorted) byT.set(p.t, p);
  return [...byT.values()].sort((a, b) => a.t - b.t);
}

/** Drops points before `from`. */
export function trimBefore(points, from) {
  let i = 0;
  while (i < points.length && points[i].t < from) i++;
  return i ? points.slice(i) : points;
}

/** The bucket of `step` seconds (UTC-aligned, as the daemon's) holding `t`. */
export function bucketOf(t, step) {
  return t - (((t % step) + step) % step);
}

/**
 * Minute points folded into one bucket of `step` seconds starting at `t`,
 * as the daemon folds slots: n and sum add up, min and max are the
 * extremes, the last sample is the newest one. Null when all are empty.
 */
export function fold(minutes, t, step, counter) {
  let n = 0;
  let sum = 0;
  let min = Infinity;
  let max = -Infinity;
  let last;
  let lastMs = -Infinity;
  for (const m of minutes) {
    if (m.t < t || m.t >= t + step || !m.n) continue;
    n += m.n;
    sum += m.sum;
    min = Math.min(min, m.min);
    max = Math.max(max, m.max);
    if (m.last !== undefined && (m.last_ms ?? m.t * 1000) >= lastMs) {
      last = m.last;
      lastMs = m.last_ms ?? m.t * 1000;
    }
  }
  if (!n) return null;
  const p = { t, n, sum, min, max, avg: sum / n };
  if (counter) p.rate = sum / step;
  if (last !== undefined) {
    p.last = last;
    if (Number.isFinite(lastMs)) p.last_ms = lastMs;
  }
  return p;
}

/**
 * Folds a watch event into the chart's series (by key): minute tier takes
 * the minutes as they are; hour and day tiers keep the minutes of their
 * newest buckets and fold them again, for the buckets that start at or
 * after `coveredFrom` (the stream holds all their minutes). Series the
 * chart does not hold are ignored. Returns whether anything changed.
 */
export function applyWatch(list, event, step, coveredFrom) {
  const byKey = new Map(list.map((s) => [s.key, s]));
  let changed = false;
  for (const ws of event.series || []) {
    const s = byKey.get(seriesKey(ws));
    if (!s || !ws.points || !ws.points.length) continue;
    if (ws.kind && !s.kind) {
      s.kind = ws.kind;
      s.counter = isCounter(ws.kind);
    }
    changed = true;
    if (step === 60) {
      s.points = upsert(s.points, ws.points);
      continue;
    }
    s.minutes = upsert(s.minutes || [], ws.points);
    const newest = bucketOf(s.minutes[s.minutes.length - 1].t, step);
    s.minutes = trimBefore(s.minutes, newest - step);
    const touched = new Set(ws.points.map((p) => bucketOf(p.t, step)));
    const folded = [];
    for (const b of touched) {
      if (b < coveredFrom || b < newest - step) continue;
      const p = fold(s.minutes, b, step, s.counter);
      if (p) folded.push(p);
    }
    s.points = upsert(s.points, folded);
  }
  return changed;
}

/**
 * A series' drawable points split into runs: a gap of more than one and a
 * half steps breaks the line, so a missing bucket is never bridged.
 */
export function runsOf(s, pts, step) {
  const runs = [];
  let run = [];
  for (const p of pts) {
    if (!Number.isFinite(yOf(s, p))) continue;
    if (run.length && p.t - run[run.length - 1].t > step * 1.5) {
      runs.push(run);
      run = [];
    }
    run.push(p);
  }
  if (run.length) runs.push(run);
  return runs;
}
