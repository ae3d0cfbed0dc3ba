// A small chart on canvas for the source page: one metric's series as
// lines (a gauge's mean inside its min–max band, a counter's rate, as the
// full chart draws them), a value axis of three ticks, no legend and no
// readout, so that a screenful of them draws in a few milliseconds.
//
// Like the full chart, it says what it drew: its element carries
// `data-state`, `data-series`, `data-points` and `data-last-t`, and
// `element.tallyDrawn` returns every plotted point as `[t, y]` or
// `[t, y, min, max]`. Drawing and saying are two calls, so that a caller
// drawing several charts writes the page once they are all drawn: setting
// a canvas' font reads its element's style, which any write to the page
// before it would have recomputed, once per chart.

import { niceTicks } from './axes.js';
import { num } from './format.js';
import { bandOf, lowerBound, runsOf, yOf } from './series.js';

const MARGIN = { left: 46, right: 4, top: 6, bottom: 4 };

/** The points of `s` inside `[from, to)`. */
function inWindow(s, from, to) {
  return s.points.slice(lowerBound(s.points, from), lowerBound(s.points, to));
}

/**
 * Draws `list` (chart series, see series.js) over `win` ({from, to, step})
 * on `canvas`, `[w, h]` CSS px as its caller measured it (measuring here
 * would lay the page out once per chart). Writes nothing else: returns
 * the drawing, for `markDrawn` and `drawnData`.
 */
export function drawMini(canvas, list, win, colors, [w, h]) {
  const dpr = devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const { from, to, step } = win;
  const drawn = list.map((s, i) => ({ s, i, pts: inWindow(s, from, to) }));
  let lo = Infinity;
  let hi = -Infinity;
  let count = 0;
  let lastT = null;
  for (const { s, pts } of drawn) {
    for (const p of pts) {
      const b = bandOf(s, p);
      for (const v of b ? [yOf(s, p), b[0], b[1]] : [yOf(s, p)]) {
        if (Number.isFinite(v)) {
          lo = Math.min(lo, v);
          hi = Math.max(hi, v);
        }
      }
    }
    count += pts.length;
    if (pts.length) lastT = Math.max(lastT ?? -Infinity, pts[pts.length - 1].t);
  }
  if (!Number.isFinite(lo)) {
    lo = 0;
    hi = 1;
  }
  const box = {
    x: MARGIN.left,
    y: MARGIN.top,
    w: Math.max(10, w - MARGIN.left - MARGIN.right),
    h: Math.max(10, h - MARGIN.top - MARGIN.bottom),
  };
  const y = niceTicks(lo, hi, 3);
  const sx = (t) => box.x + ((t + step / 2 - from) / (to - from)) * box.w;
  const sy = (v) => box.y + box.h - ((v - y.lo) / (y.hi - y.lo)) * box.h;
  ctx.lineWidth = 1;
  ctx.strokeStyle = colors.grid;
  ctx.fillStyle = colors.muted;
  ctx.font = '10px system-ui, sans-serif';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  ctx.beginPath();
  for (const v of y.ticks) {
    const py = Math.round(sy(v)) + 0.5;
    ctx.moveTo(box.x, py);
    ctx.lineTo(box.x + box.w, py);
    ctx.fillText(num(v), box.x - 4, py);
  }
  ctx.stroke();
  ctx.save();
  ctx.beginPath();
  ctx.rect(box.x, box.y - 2, box.w, box.h + 4);
  ctx.clip();
  for (const d of drawn) line(ctx, d, step, sx, sy, colors.series[d.i % colors.series.length]);
  ctx.restore();
  return { drawn, count, lastT };
}

/** Says on `host`, the chart's element, what `drawing` drew. */
export function markDrawn(host, { drawn, count, lastT }) {
  const ds = host.dataset;
  ds.series = String(drawn.length);
  ds.points = String(count);
  ds.lastT = lastT === null ? '' : String(lastT);
  ds.state = count ? 'drawn' : 'empty';
}

/** One series: its band, then its line, broken where buckets are empty. */
function line(ctx, { s, pts }, step, sx, sy, color) {
  const runs = runsOf(s, pts, step);
  ctx.fillStyle = color;
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.25;
  for (const r of runs) {
    if (r.length > 1 && bandOf(s, r[0])) {
      ctx.globalAlpha = 0.15;
      ctx.beginPath();
      r.forEach((p, k) => ctx[k ? 'lineTo' : 'moveTo'](sx(p.t), sy(bandOf(s, p)[1])));
      for (let k = r.length - 1; k >= 0; k--) ctx.lineTo(sx(r[k].t), sy(bandOf(s, r[k])[0]));
      ctx.fill();
      ctx.globalAlpha = 1;
    }
    ctx.beginPath();
    if (r.length === 1) {
      ctx.arc(sx(r[0].t), sy(yOf(s, r[0])), 2, 0, 2 * Math.PI);
      ctx.fill();
      continue;
    }
    r.forEach((p, k) => ctx[k ? 'lineTo' : 'moveTo'](sx(p.t), sy(yOf(s, p))));
    ctx.stroke();
  }
}

/** What `tallyDrawn` returns for a drawing's series (as the full chart's). */
export function drawnData(drawn, win) {
  return {
    ...win,
    series: drawn.map(({ s, pts }) => ({
      key: s.key,
      metric: s.metric,
      labels: s.labels,
      kind: s.kind,
      points: pts.map((p) => {
        const b = bandOf(s, p);
        return b ? [p.t, yOf(s, p), b[0], b[1]] : [p.t, yOf(s, p)];
      }),
    })),
  };
}
