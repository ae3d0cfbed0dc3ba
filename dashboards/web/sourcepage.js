// The source's page: Explore with a source and no metric shows every metric
// of the source as a small live chart, grouped by the metric's prefix
// (`node_memory_…`), with a text filter; each chart links to its full-size
// chart.
//
// Bounded for large hosts: every metric has a light placeholder, but only
// the charts in view are read and drawn. The charts that come into view
// are read together, one GET /api/v1/charts per screenful (the daemon
// caps what one request reads and says which metrics it left for the
// next). The page asks for at most POINTS a request, so that no answer
// takes longer to parse than a frame can spare, however long the window or
// many the series: a screenful of long series comes in several reads. The
// charts in view are kept live by one watch stream for all of them, opened
// again when what is in view changes, so a page costs the daemon what one
// live chart does.
//
// Drawing never holds the page: the charts to draw wait in a queue, and
// after each frame a slice of them is drawn, a few milliseconds' worth, so
// that a screenful arriving at once is spread over frames and scrolling
// goes on meanwhile. A chart is drawn again only when its data, its window
// or its size changed, not each time it comes back into view.

import { getJSON, showError } from './api.js';
import { theme } from './chart.js';
import { duration, num } from './format.js';
import { watch } from './live.js';
import { drawMini, drawnData, markDrawn, miniSurface } from './minichart.js';
import * as series from './series.js';
import * as state from './state.js';

/** Metrics per charts request: the daemon takes up to 100. */
const BATCH = 60;
/** Points per charts request, all its series together (the first metric's
    whatever they are): about 2 MB of JSON, parsed in one task of about
    20 ms. */
const POINTS = 20000;
/** Lines per small chart; more are counted, not drawn, and not kept live. */
const LINES = 20;
/** A chart out of view this long is read again when it comes back: the
    stream's first event holds only the last few minutes. */
const REREAD_AFTER_MS = 4 * 60000;
const MINUTE_SNAPSHOT = 5;
/** Quiet time before what is in view is read or the stream is moved. */
const SETTLE_MS = 80;
const RESTREAM_MS = 1000;
const STEP_PARAM = { 60: '1m', 3600: '1h', 86400: '1d' };
/** Drawing per slice: at least one chart, then as many as fit. Well under
    a frame, so that a slice and the frame after it stay short tasks. */
const SLICE_MS = 8;
/** Placeholders put in place at once, whatever the time they take (about
    50 µs each): the first screenfuls of a large screen, so that none of
    the charts in view waits for a later slice, and a read of its own. */
const FIRST_CARDS = 300;

/** `fn` run when the page is idle (within 100 ms), or after a frame's time. */
const idle = (fn) => (window.requestIdleCallback ? requestIdleCallback(fn, { timeout: 100 }) : setTimeout(fn, 16));
const cancelIdle = (id) => (window.cancelIdleCallback ? cancelIdleCallback(id) : clearTimeout(id));

function make(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * The metrics' groups, in name order: the first two words of a name
 * (`node_memory`) when another metric shares them, else its first word.
 */
export function groupByPrefix(names) {
  const words = (n, k) => n.split('_').slice(0, k).join('_');
  const twice = new Map();
  for (const n of names) {
    const p = words(n, 2);
    if (p !== n) twice.set(p, (twice.get(p) || 0) + 1);
  }
  const groups = new Map();
  for (const n of names) {
    const p2 = words(n, 2);
    const key = p2 !== n && twice.get(p2) > 1 ? p2 : words(n, 1);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(n);
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A filter's test: a glob (`*`, `?`) anchored, or a substring; any case. */
export function filterTest(text) {
  const f = (text || '').trim().toLowerCase();
  if (!f) return () => true;
  if (!/[*?]/.test(f)) return (n) => n.toLowerCase().includes(f);
  const re = new RegExp(`^${f.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`);
  return (n) => re.test(n.toLowerCase());
}

export class SourcePage {
  /**
   * `opts`: `source`, `range` and `tier` (URL values), `filter`, `win`
   * ({from, to, step}), `now()` (seconds on the daemon's clock), and
   * `onFilter(text)` when the filter changes.
   */
  constructor(parent, opts) {
    this.opts = opts;
    this.win = opts.win;
    this.colors = theme();
    this.cards = new Map();
    this.visible = new Set();
    this.inFlight = new Set();
    /** Charts to draw, in the order they were asked for. */
    this.queue = new Set();
    this.ctrl = new AbortController();
    this.root = make('section', 'source-page');
    this.root.dataset.state = 'loading';
    this.root.dataset.live = 'off';
    this.build();
    parent.append(this.root);
    this.observer = new IntersectionObserver((entries) => this.seen(entries), {
      rootMargin: '100px 0px',
    });
    this.onResize = () => {
      for (const c of this.cards.values()) c.stale = true;
      this.redrawVisible();
    };
    addEventListener('resize', this.onResize);
    this.slider = setInterval(() => this.slide(), 5000);
    this.list();
  }

  build() {
    const bar = make('div', 'toolbar');
    this.filter = make('input');
    this.filter.type = 'search';
    this.filter.placeholder = 'Filter metrics: text or glob (node_cpu*)';
    this.filter.setAttribute('aria-label', 'Filter metrics');
    this.filter.value = this.opts.filter || '';
    this.summary = make('span', 'summary');
    this.summary.setAttribute('role', 'status');
    this.liveEl = make('span', 'live');
    this.liveEl.setAttribute('role', 'status');
    bar.append(this.filter, this.summary, this.liveEl);
    this.error = make('div', 'error');
    this.error.setAttribute('role', 'alert');
    this.error.hidden = true;
    this.groups = make('div', 'groups');
    this.root.append(bar, this.error, this.groups);
    let typing = 0;
    this.filter.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        this.opts.onFilter(this.filter.value.trim());
        this.render();
      }, 200);
    });
  }

  destroy() {
    this.ctrl.abort();
    this.observer.disconnect();
    removeEventListener('resize', this.onResize);
    clearInterval(this.slider);
    clearTimeout(this.pumpTimer);
    clearTimeout(this.streamTimer);
    cancelAnimationFrame(this.frame);
    clearTimeout(this.sliceTimer);
    cancelIdle(this.fillTimer);
    this.queue.clear();
    if (this.live) this.live.stop();
    this.root.remove();
  }

  /** Every metric name of the source, page by page. */
  async list() {
    const names = [];
    let after;
    try {
      do {
        const body = await getJSON(
          '/api/v1/metrics',
          { source: this.opts.source, limit: 10000, after },
          { signal: this.ctrl.signal },
        );
        names.push(...(body.metrics || []));
        after = body.next;
      } while (after);
    } catch (e) {
      if (e.kind === 'aborted') return;
      this.root.dataset.state = 'error';
      showError(this.error, e);
      return;
    }
    this.names = names;
    this.render();
  }

  /**
   * Placeholders of every metric the filter keeps, in their groups: the
   * groups at once, their cards in page order, FIRST_CARDS of them now and
   * the others about SLICE_MS' worth at a time when the page is idle (so
   * they wait for the charts in view to be read and drawn), so that a host
   * of thousands of metrics is laid out without holding the page. The page
   * is `listed` once all are in.
   */
  render() {
    if (!this.names) return;
    this.observer.disconnect();
    this.visible.clear();
    cancelIdle(this.fillTimer);
    const keep = filterTest(this.filter.value);
    const shown = this.names.filter(keep);
    const groups = groupByPrefix(shown);
    const todo = [];
    this.groups.replaceChildren(
      ...groups.map(([prefix, names]) => {
        const g = make('section', 'group');
        g.dataset.prefix = prefix;
        const h = make('h3', '', `${prefix}_…`);
        h.append(make('span', 'count', ` ${names.length}`));
        const grid = make('div', 'minis');
        for (const n of names) todo.push([grid, n]);
        g.append(h, grid);
        return g;
      }),
    );
    const d = this.root.dataset;
    d.state = 'loading';
    d.metrics = String(this.names.length);
    d.shown = String(shown.length);
    this.summary.textContent = `${num(shown.length)} of ${num(this.names.length)} metrics · ${num(groups.length)} groups`;
    if (!this.names.length) {
      this.groups.replaceChildren(make('p', 'hint', `${this.opts.source} has no metrics: check the source's name.`));
    }
    this.fill(todo, 0, FIRST_CARDS);
  }

  /**
   * Puts `todo`'s cards, from `i` on, in their groups: at least `least`,
   * then until SLICE_MS have passed (see `render`).
   */
  fill(todo, i, least = 1) {
    const start = performance.now();
    for (let k = 0; i < todo.length; k++) {
      // The clock read every 16 cards: a card takes some 50 µs.
      if (k >= least && k % 16 === 0 && performance.now() - start > SLICE_MS) break;
      const [grid, metric] = todo[i++];
      const { el } = this.card(metric);
      grid.append(el);
      this.observer.observe(el);
    }
    if (i < todo.length) {
      this.fillTimer = idle(() => this.fill(todo, i));
      return;
    }
    this.root.dataset.state = 'listed';
  }

  /**
   * A metric's placeholder, made once, with its chart's surface: the card
   * keeps its layout from the start, so drawing it moves nothing on the page.
   */
  card(metric) {
    let c = this.cards.get(metric);
    if (c) return c;
    const el = make('a', 'mini');
    el.dataset.metric = metric;
    el.dataset.state = 'waiting';
    el.href = state.href({
      view: 'explore',
      source: this.opts.source,
      metric,
      range: this.opts.range,
      tier: this.opts.tier,
    });
    const title = make('span', 'mini-title', metric);
    title.title = metric;
    const note = make('span', 'mini-note');
    const plot = miniSurface();
    plot.setAttribute('role', 'img');
    plot.setAttribute('aria-label', `${metric}: not read yet`);
    el.append(title, plot, note);
    // `stale`: its data, window or size changed since it was last drawn.
    c = { el, note, metric, plot, list: null, drawn: [], stale: true, leftAt: 0 };
    Object.defineProperty(el, 'tallyDrawn', { get: () => drawnData(c.drawn, this.win) });
    this.cards.set(metric, c);
    return c;
  }

  seen(entries) {
    const back = [];
    for (const e of entries) {
      const c = this.cards.get(e.target.dataset.metric);
      if (!c) continue;
      if (e.isIntersecting) {
        this.visible.add(c);
        if (c.leftAt && Date.now() - c.leftAt > REREAD_AFTER_MS) c.list = null;
        c.leftAt = 0;
        if (c.list && c.stale) back.push(c);
      } else if (this.visible.delete(c)) {
        c.leftAt = Date.now();
      }
    }
    this.schedule(back);
    // The first screenful is read at once; later ones once scrolling pauses.
    clearTimeout(this.pumpTimer);
    this.pumpTimer = setTimeout(() => this.pump(), this.pumped ? SETTLE_MS : 0);
    this.moveStream();
  }

  /** Reads the charts in view that have no data yet, a screenful at once. */
  async pump() {
    const want = [...this.visible]
      .filter((c) => !c.list && !this.inFlight.has(c.metric))
      .slice(0, BATCH);
    if (!want.length) return;
    this.pumped = true;
    for (const c of want) {
      this.inFlight.add(c.metric);
      c.el.dataset.state = 'loading';
    }
    const { from, to, step } = this.win;
    try {
      const body = await getJSON(
        '/api/v1/charts',
        {
          source: this.opts.source,
          metric: want.map((c) => c.metric).join(','),
          from,
          to,
          step: STEP_PARAM[step],
          series_per_metric: LINES,
          points: POINTS,
        },
        { signal: this.ctrl.signal },
      );
      showError(this.error, null);
      const fresh = [];
      for (const chart of body.charts || []) {
        const c = this.cards.get(chart.metric);
        if (!c) continue;
        c.list = series.fromRange({ series: chart.series });
        c.matched = chart.matched;
        c.stale = true;
        series.nameAll(c.list);
        if (this.visible.has(c)) fresh.push(c);
      }
      this.schedule(fresh);
      if (body.partial) showError(this.error, { message: `Answered from memory only: ${body.partial}` });
    } catch (e) {
      if (e.kind === 'aborted') return;
      for (const c of want) c.el.dataset.state = 'error';
      showError(this.error, e);
      return;
    } finally {
      for (const c of want) {
        this.inFlight.delete(c.metric);
        // Left unread by the daemon's bounds: asked for again below.
        if (!c.list && c.el.dataset.state === 'loading') c.el.dataset.state = 'waiting';
      }
    }
    this.moveStream();
    // What the daemon left unread, and what came into view meanwhile.
    this.pump();
  }

  /** Marks the first screenful drawn on the Performance timeline. */
  marked() {
    if (this.firstDrawn || !this.visible.size) return;
    if ([...this.visible].some((c) => !c.list || c.stale)) return;
    this.firstDrawn = true;
    performance.mark('tally:source-drawn', { detail: { charts: this.visible.size } });
  }

  /** Queues `cards` to be drawn (those that have data), after the next frame. */
  schedule(cards) {
    for (const c of cards) if (c.list) this.queue.add(c);
    if (!this.queue.size || this.frame || this.sliceTimer) return;
    // A task of its own right after the frame: the frame shows what the
    // last slice drew, and neither task grows by the other's work.
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.sliceTimer = setTimeout(() => {
        this.sliceTimer = 0;
        this.drawSlice();
      });
    });
  }

  /**
   * Draws queued charts still in view (the others are queued again when
   * they come back) for about SLICE_MS: their sizes read first, in one
   * layout, then the charts drawn and what they drew written to the page,
   * so that the page is laid out once per slice.
   */
  drawSlice() {
    const start = performance.now();
    const due = [];
    for (const c of this.queue) {
      if (this.visible.has(c) && c.list) due.push(c);
      else this.queue.delete(c);
    }
    const sizes = due.map((c) => [c.plot.clientWidth, c.plot.clientHeight]);
    const done = [];
    for (const [i, c] of due.entries()) {
      if (done.length && performance.now() - start > SLICE_MS) break;
      this.queue.delete(c);
      done.push([c, drawMini(c.plot, c.list, this.win, this.colors, sizes[i])]);
    }
    for (const [c, drawing] of done) this.label(c, drawing);
    this.marked();
    this.schedule([]);
  }

  /** Says on the card what its chart now shows. */
  label(c, drawing) {
    c.drawn = drawing.drawn;
    c.stale = false;
    markDrawn(c.el, drawing);
    const kind = c.list[0]?.kind;
    const parts = [];
    if (c.list.length && c.list.every((s) => s.counter)) parts.push('per second');
    else if (kind === 'gauge') parts.push('gauge');
    if (c.list.length > 1 || c.matched > c.list.length) {
      parts.push(c.matched > c.list.length ? `${c.list.length} of ${num(c.matched)} series` : `${c.list.length} series`);
    }
    c.note.textContent = parts.join(' · ');
    c.plot.setAttribute('aria-label', `${c.metric}: ${c.el.dataset.series} series, ${c.el.dataset.points} points`);
    c.el.dataset.live = this.liveMetrics?.has(c.metric) ? 'live' : 'off';
  }

  redrawVisible() {
    this.schedule([...this.visible]);
  }

  /** The charts in view that the stream can keep live (all their lines). */
  streamable() {
    return [...this.visible]
      .filter((c) => c.list && c.matched <= c.list.length)
      .map((c) => c.metric)
      .sort();
  }

  /** Opens the stream again, once quiet, when what is in view changed. */
  moveStream() {
    clearTimeout(this.streamTimer);
    this.streamTimer = setTimeout(() => {
      const metrics = this.streamable();
      const key = metrics.join(',');
      if (key === this.streamKey) return;
      this.streamKey = key;
      if (this.live) this.live.stop();
      this.live = null;
      this.liveMetrics = new Set(metrics);
      if (!metrics.length) {
        this.setLive('off', '');
        return;
      }
      this.stream(metrics);
    }, RESTREAM_MS);
  }

  /** One watch stream for every live chart in view. */
  stream(metrics) {
    const step = this.win.step;
    let coveredFrom = -Infinity;
    const params = () => {
      const now = this.opts.now();
      let minutes = MINUTE_SNAPSHOT;
      if (step > 60) {
        coveredFrom = series.bucketOf(now, step);
        minutes = Math.floor((now - coveredFrom) / 60) + 1;
      }
      return { source: this.opts.source, metric: metrics.join(','), window: `${minutes}m` };
    };
    const count = metrics.length;
    this.live = watch(params, {
      onEvent: (ev) => {
        if (ev.t_ms) this.opts.skew(ev.t_ms - Date.now());
        const touched = new Set((ev.series || []).map((s) => s.metric));
        const changed = [];
        for (const m of touched) {
          const c = this.cards.get(m);
          if (!c || !c.list) continue;
          if (!series.applyWatch(c.list, ev, step, coveredFrom)) continue;
          c.stale = true;
          if (this.visible.has(c)) changed.push(c);
        }
        if (!this.slide()) this.schedule(changed);
      },
      onStatus: (st, err, retryMs) => {
        const why = err && err.describe ? err.describe() : err ? err.message : '';
        if (st === 'live') this.setLive('live', `● live, ${count} charts in view`);
        else if (st === 'lost') this.setLive('lost', `○ live stream lost (${why}); retrying in ${duration(retryMs / 1000)}`);
        else this.setLive('off', `live updates off: ${why}`);
      },
    });
  }

  setLive(st, text) {
    this.root.dataset.live = st;
    this.liveEl.textContent = text;
    this.liveEl.className = `live ${st}`;
    for (const c of this.visible) c.el.dataset.live = st === 'live' && this.liveMetrics.has(c.metric) ? 'live' : 'off';
  }

  /**
   * Moves the window on when a new bucket begins, keeping its length, and
   * redraws what is in view; false when the window stays.
   */
  slide() {
    const { from, to, step } = this.win;
    const next = series.bucketOf(this.opts.now(), step) + step;
    if (next <= to) return false;
    this.win = { from: from + (next - to), to: next, step };
    for (const c of this.cards.values()) {
      for (const s of c.list || []) s.points = series.trimBefore(s.points, this.win.from);
      c.stale = true;
    }
    this.redrawVisible();
    return true;
  }
}
