// A time chart on canvas: each series' line (a gauge's mean, a counter's
// rate, a PromQL value) inside its min–max band, a legend that hides and
// shows series, and a readout of the bucket under the pointer.
//
// What was drawn is open to tests and tools: the chart's element carries
// its window and counts as data- attributes (`data-state`, `data-from`,
// `data-to`, `data-step`, `data-series`, `data-points`, `data-last-t`,
// `data-live`), and `element.tallyDrawn` returns every plotted point as
// `[t, y]` or `[t, y, min, max]`. The first chart drawn with data marks
// `tally:chart-drawn` on the page's Performance timeline.

import { drawAxes, niceTicks } from './axes.js';
import { clock, exact, num, stamp } from './format.js';
import { bandOf, lowerBound, runsOf, yOf } from './series.js';

const COLORS = 10;
/** Series listed in the readout: those nearest the pointer. */
const READOUT_ROWS = 8;
const MARGIN = { left: 58, right: 14, top: 20, bottom: 24 };
let firstDrawn = false;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** The theme's colours, read from its CSS variables. */
export function theme() {
  const css = getComputedStyle(document.documentElement);
  const v = (name) => css.getPropertyValue(name).trim();
  return {
    fg: v('--fg'),
    muted: v('--muted'),
    grid: v('--grid'),
    series: Array.from({ length: COLORS }, (_, i) => v(`--c${i}`)),
  };
}

export class Chart {
  constructor(parent) {
    this.el = el('section', 'chart');
    this.el.dataset.state = 'loading';
    this.el.dataset.live = 'off';
    const head = el('div', 'chart-head');
    this.titleEl = el('h2', 'chart-title');
    this.liveEl = el('span', 'live');
    this.liveEl.setAttribute('role', 'status');
    head.append(this.titleEl, this.liveEl);
    this.plot = el('div', 'plot');
    this.base = el('canvas');
    this.over = el('canvas', 'over');
    this.base.setAttribute('role', 'img');
    this.readout = el('div', 'readout');
    this.readout.hidden = true;
    this.message = el('p', 'plot-message');
    this.plot.append(this.base, this.over, this.readout, this.message);
    this.legend = el('ul', 'legend');
    this.note = el('p', 'note');
    this.note.hidden = true;
    this.el.append(head, this.plot, this.legend, this.note);
    parent.append(this.el);

    this.series = [];
    this.hidden = new Set();
    this.win = { from: 0, to: 1, step: 60 };
    this.drawn = [];
    this.frame = 0;
    this.colors = theme();
    this.over.addEventListener('pointermove', (e) => this.hover(e));
    this.over.addEventListener('pointerleave', () => this.unhover());
    this.legend.addEventListener('click', (e) => this.toggle(e));
    this.resize = new ResizeObserver(() => this.changed());
    this.resize.observe(this.plot);
    this.scheme = matchMedia('(prefers-color-scheme: dark)');
    this.onScheme = () => {
      this.colors = theme();
      this.changed();
    };
    this.scheme.addEventListener('change', this.onScheme);
    Object.defineProperty(this.el, 'tallyDrawn', { get: () => this.drawnData() });
  }

  destroy() {
    cancelAnimationFrame(this.frame);
    this.resize.disconnect();
    this.scheme.removeEventListener('change', this.onScheme);
    this.el.remove();
  }

  /** The window `[from, to)` in Unix seconds, buckets of `step` seconds. */
  setWindow(from, to, step) {
    this.win = { from, to, step };
    this.changed();
  }

  /** New series (their `name`s set); `unit` labels the value axis. */
  setSeries(list, { title = '', unit = '' } = {}) {
    this.series = list;
    this.unit = unit;
    this.titleEl.textContent = title;
    this.hidden = new Set([...this.hidden].filter((k) => list.some((s) => s.key === k)));
    this.legend.replaceChildren(
      ...list.map((s, i) => {
        const li = el('li');
        const b = el('button', this.hidden.has(s.key) ? 'off' : '');
        b.type = 'button';
        b.dataset.key = s.key;
        b.append(el('span', `sw s${i % COLORS}`), el('span', '', s.name));
        li.append(b);
        return li;
      }),
    );
    this.changed();
  }

  /**
   * Shows a state with a message in words: `loading`, `error`, or `ready`
   * (data given; the next draw says `drawn` or `empty`).
   */
  setState(state, message = '') {
    this.el.dataset.state = state;
    this.message.textContent = message;
    this.message.hidden = !message;
  }

  /** The live badge: `live`, `lost`, `polling` or `off`, with a tooltip. */
  setLive(state, text) {
    this.el.dataset.live = state;
    this.liveEl.textContent = text;
    this.liveEl.className = `live ${state}`;
  }

  setNote(text) {
    this.note.textContent = text || '';
    this.note.hidden = !text;
  }

  /** Redraws at the next frame (points or window changed). */
  changed() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  toggle(e) {
    const b = e.target.closest('button[data-key]');
    if (!b) return;
    const key = b.dataset.key;
    if (this.hidden.has(key)) this.hidden.delete(key);
    else this.hidden.add(key);
    b.classList.toggle('off', this.hidden.has(key));
    this.changed();
  }

  /** Points of series `s` inside the window. */
  inWindow(s) {
    const { from, to } = this.win;
    const pts = s.points;
    return pts.slice(lowerBound(pts, from), lowerBound(pts, to));
  }

  layout() {
    const w = this.plot.clientWidth;
    const h = this.plot.clientHeight;
    const dpr = devicePixelRatio || 1;
    for (const c of [this.base, this.over]) {
      if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
        c.width = Math.round(w * dpr);
        c.height = Math.round(h * dpr);
      }
    }
    this.box = {
      x: MARGIN.left,
      y: MARGIN.top,
      w: Math.max(10, w - MARGIN.left - MARGIN.right),
      h: Math.max(10, h - MARGIN.top - MARGIN.bottom),
    };
    return dpr;
  }

  draw() {
    const dpr = this.layout();
    const ctx = this.base.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.base.width, this.base.height);
    const { from, to, step } = this.win;
    this.drawn = this.series
      .map((s, i) => ({ s, i, pts: this.inWindow(s) }))
      .filter((d) => !this.hidden.has(d.s.key));
    let lo = Infinity;
    let hi = -Infinity;
    let count = 0;
    let lastT = null;
    for (const { s, pts } of this.drawn) {
      for (const p of pts) {
        const y = yOf(s, p);
        const b = bandOf(s, p);
        for (const v of b ? [y, b[0], b[1]] : [y]) {
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
    const y = niceTicks(lo, hi, Math.max(2, Math.floor(this.box.h / 42)));
    const offset = this.series.some((s) => s.value) ? 0 : step / 2;
    const { x, w } = this.box;
    this.sx = (t) => x + ((t + offset - from) / (to - from)) * w;
    this.sy = (v) => this.box.y + this.box.h - ((v - y.lo) / (y.hi - y.lo)) * this.box.h;
    drawAxes(ctx, this.box, {
      from,
      to,
      yTicks: y.ticks,
      sx: this.sx,
      sy: this.sy,
      colors: this.colors,
      unit: this.unit,
    });
    ctx.save();
    ctx.beginPath();
    ctx.rect(this.box.x, this.box.y - 2, this.box.w, this.box.h + 4);
    ctx.clip();
    for (const d of this.drawn) this.drawSeries(ctx, d, step);
    ctx.restore();
    this.publish(count, lastT);
  }

  /** One series: its band, then its line; a lone point is a dot. */
  drawSeries(ctx, { s, i, pts }, step) {
    const color = this.colors.series[i % COLORS];
    const runs = runsOf(s, pts, step);
    ctx.fillStyle = color;
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.lineJoin = 'round';
    for (const r of runs) {
      if (bandOf(s, r[0])) {
        ctx.globalAlpha = 0.18;
        ctx.beginPath();
        r.forEach((p, k) => ctx[k ? 'lineTo' : 'moveTo'](this.sx(p.t), this.sy(bandOf(s, p)[1])));
        for (let k = r.length - 1; k >= 0; k--) ctx.lineTo(this.sx(r[k].t), this.sy(bandOf(s, r[k])[0]));
        ctx.closePath();
        if (r.length === 1) ctx.lineWidth = 3;
        ctx[r.length === 1 ? 'stroke' : 'fill']();
        ctx.lineWidth = 1.5;
        ctx.globalAlpha = 1;
      }
      if (r.length === 1) {
        ctx.beginPath();
        ctx.arc(this.sx(r[0].t), this.sy(yOf(s, r[0])), 2.5, 0, 2 * Math.PI);
        ctx.fill();
        continue;
      }
      ctx.beginPath();
      r.forEach((p, k) => ctx[k ? 'lineTo' : 'moveTo'](this.sx(p.t), this.sy(yOf(s, p))));
      ctx.stroke();
    }
  }

  /** Data attributes, the first-chart mark and the canvas' description. */
  publish(count, lastT) {
    const d = this.el.dataset;
    d.from = String(this.win.from);
    d.to = String(this.win.to);
    d.step = String(this.win.step);
    d.series = String(this.drawn.length);
    d.points = String(count);
    d.lastT = lastT === null ? '' : String(lastT);
    if (d.state !== 'error' && d.state !== 'loading') d.state = count ? 'drawn' : 'empty';
    this.base.setAttribute(
      'aria-label',
      `${this.titleEl.textContent}: ${this.drawn.length} series, ${count} points`,
    );
    if (count && !firstDrawn) {
      firstDrawn = true;
      performance.mark('tally:chart-drawn', { detail: { points: count } });
    }
  }

  drawnData() {
    const { from, to, step } = this.win;
    return {
      from,
      to,
      step,
      series: this.drawn.map(({ s, pts }) => ({
        key: s.key,
        name: s.name,
        source: s.source,
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

  /** The bucket under the pointer: a crosshair and every series' values. */
  hover(e) {
    if (!this.box || !this.drawn.length) return;
    const r = this.over.getBoundingClientRect();
    const px = e.clientX - r.left;
    const { from, to, step } = this.win;
    const valueMode = this.series.some((s) => s.value);
    const at = from + ((px - this.box.x) / this.box.w) * (to - from) - (valueMode ? 0 : step / 2);
    const rows = [];
    let t = null;
    for (const { s, i, pts } of this.drawn) {
      const k = lowerBound(pts, at - step / 2);
      const p = pts[k];
      if (!p || Math.abs(p.t - at) > step / 2 + 1e-9) continue;
      t = p.t;
      rows.push({ s, i, p });
    }
    const dpr = devicePixelRatio || 1;
    const ctx = this.over.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.over.width, this.over.height);
    if (t === null) {
      this.readout.hidden = true;
      return;
    }
    const x = Math.round(this.sx(t)) + 0.5;
    ctx.strokeStyle = this.colors.muted;
    ctx.beginPath();
    ctx.moveTo(x, this.box.y);
    ctx.lineTo(x, this.box.y + this.box.h);
    ctx.stroke();
    for (const { s, i, p } of rows) {
      ctx.fillStyle = this.colors.series[i % COLORS];
      ctx.beginPath();
      ctx.arc(x, this.sy(yOf(s, p)), 3.5, 0, 2 * Math.PI);
      ctx.fill();
    }
    this.showReadout(t, rows, px, e.clientY - r.top);
  }

  showReadout(t, all, px, py) {
    const step = this.win.step;
    const head = el('div', 'readout-time', stamp(t, step < 60));
    const near = (r) => Math.abs(this.sy(yOf(r.s, r.p)) - py);
    const rows = all.length > READOUT_ROWS ? all.slice().sort((a, b) => near(a) - near(b)).slice(0, READOUT_ROWS) : all;
    const list = rows.map(({ s, i, p }) => {
      const row = el('div', 'readout-row');
      row.append(el('span', `sw s${i % COLORS}`), el('span', 'readout-name', s.name));
      const vals = el('div', 'readout-values');
      for (const [k, v] of readoutValues(s, p)) {
        const cell = el('span');
        cell.append(el('b', '', k), ` ${v}`);
        vals.append(cell);
      }
      row.append(vals);
      return row;
    });
    if (all.length > rows.length) {
      list.push(el('div', 'readout-more', `and ${all.length - rows.length} more series`));
    }
    this.readout.replaceChildren(head, ...list);
    this.readout.hidden = false;
    const w = this.readout.offsetWidth;
    const left = px + 16 + w > this.plot.clientWidth ? Math.max(0, px - 16 - w) : px + 16;
    this.readout.style.left = `${left}px`;
    this.readout.style.top = `${Math.max(0, Math.min(py - 10, this.plot.clientHeight - this.readout.offsetHeight))}px`;
  }

  unhover() {
    this.readout.hidden = true;
    const ctx = this.over.getContext('2d');
    ctx.clearRect(0, 0, this.over.width, this.over.height);
  }
}

/** What the readout lists for one point, in order. */
export function readoutValues(s, p) {
  if (s.value) return [['value', exact(p.value)]];
  const out = [];
  if (s.counter) out.push(['rate', `${num(p.rate)}/s`]);
  else out.push(['mean', num(p.avg)]);
  out.push(['n', exact(p.n)], ['sum', num(p.sum)], ['min', num(p.min)], ['max', num(p.max)]);
  if (p.last !== undefined && p.last !== null) {
    const when = p.last_ms ? ` at ${clock(p.last_ms / 1000, true)}` : '';
    out.push(['last', `${num(p.last)}${when}`]);
  }
  return out;
}
