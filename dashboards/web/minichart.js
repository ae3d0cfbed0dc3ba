// A small chart for the source page: one metric's series as lines (a
// gauge's mean inside its min–max band, a counter's rate, as the full chart
// draws them), a value axis of three ticks, no legend and no readout.
//
// Drawn in SVG rather than on a canvas: the browser composites every canvas
// as a layer of its own, in every frame, and a page of small canvases spent
// most of its frames on them (more with each screenful read), while SVG is
// painted with the page, and an unchanged chart costs a frame nothing.
//
// Like the full chart, it says what it drew: its element carries
// `data-state`, `data-series`, `data-points` and `data-last-t`, and
// `element.tallyDrawn` returns every plotted point as `[t, y]` or
// `[t, y, min, max]`. Drawing and saying are two calls, so that a caller
// drawing several charts measures them all before it writes to any.

import { niceTicks } from './axes.js';
import { num } from './format.js';
import { bandOf, lowerBound, runsOf, yOf } from './series.js';

const MARGIN = { left: 46, right: 4, top: 6, bottom: 4 };
const NS = 'http://www.w3.org/2000/svg';

/** An SVG element with `attrs`. */
function svgNode(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

/** A small chart's drawing surface, to give `drawMini`. */
export function miniSurface() {
  return svgNode('svg', { class: 'mini-plot' });
}

/** The points of `s` inside `[from, to)`. */
function inWindow(s, from, to) {
  return s.points.slice(lowerBound(s.points, from), lowerBound(s.points, to));
}

/** A coordinate to a tenth of a pixel, for short path data. */
const px = (v) => Math.round(v * 10) / 10;

/**
 * Draws `list` (chart series, see series.js) over `win` ({from, to, step})
 * on `surface` (from `miniSurface`), `[w, h]` CSS px as its caller measured
 * it (measuring here would lay the page out once per chart). Writes
 * nothing else: returns the drawing, for `markDrawn` and `drawnData`.
 */
export function drawMini(surface, list, win, colors, [w, h]) {
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
  const yAt = (v) => box.y + box.h - ((v - y.lo) / (y.hi - y.lo)) * box.h;
  const sx = (t) => px(box.x + ((t + step / 2 - from) / (to - from)) * box.w);
  const sy = (v) => px(yAt(v));
  const nodes = [];
  let grid = '';
  for (const v of y.ticks) {
    const py = Math.round(yAt(v)) + 0.5;
    grid += `M${box.x} ${py}H${box.x + box.w}`;
    const label = svgNode('text', { x: box.x - 4, y: py, fill: colors.muted });
    label.textContent = num(v);
    nodes.push(label);
  }
  nodes.push(svgNode('path', { d: grid, stroke: colors.grid, 'stroke-width': 1, fill: 'none' }));
  // The lines, clipped to the plot (a nested svg clips what it holds).
  const plot = svgNode('svg', {
    x: box.x,
    y: box.y - 2,
    width: box.w,
    height: box.h + 4,
    viewBox: `${box.x} ${box.y - 2} ${box.w} ${box.h + 4}`,
  });
  for (const d of drawn) plot.append(...line(d, step, sx, sy, colors.series[d.i % colors.series.length]));
  nodes.push(plot);
  surface.replaceChildren(...nodes);
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

/**
 * One series' paths: its band, its line, broken where buckets are empty,
 * and a dot for a bucket alone between gaps.
 */
function line({ s, pts }, step, sx, sy, color) {
  let band = '';
  let path = '';
  let dots = '';
  for (const r of runsOf(s, pts, step)) {
    if (r.length === 1) {
      dots += `M${sx(r[0].t)} ${sy(yOf(s, r[0]))}h0`;
      continue;
    }
    if (bandOf(s, r[0])) {
      band += r.map((p, k) => `${k ? 'L' : 'M'}${sx(p.t)} ${sy(bandOf(s, p)[1])}`).join('');
      for (let k = r.length - 1; k >= 0; k--) band += `L${sx(r[k].t)} ${sy(bandOf(s, r[k])[0])}`;
      band += 'Z';
    }
    path += r.map((p, k) => `${k ? 'L' : 'M'}${sx(p.t)} ${sy(yOf(s, p))}`).join('');
  }
  const out = [];
  if (band) out.push(svgNode('path', { d: band, fill: color, 'fill-opacity': 0.15 }));
  if (path) out.push(svgNode('path', { d: path, stroke: color, 'stroke-width': 1.25, fill: 'none' }));
  if (dots) {
    out.push(svgNode('path', { d: dots, stroke: color, 'stroke-width': 4, 'stroke-linecap': 'round', fill: 'none' }));
  }
  return out;
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
