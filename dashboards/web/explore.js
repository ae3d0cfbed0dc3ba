// Explore: one chart of what the query form selects (a metric's series,
// a group's fleet aggregate, or a PromQL expression) over a range, at the
// minute, hour or day tier, kept live. A source with no metric opens the
// source's page instead: every metric of it as a small chart
// (sourcepage.js).
//
// Series are read once with /api/v1/range and then kept live by the watch
// stream, which sends each changed minute once a second; the hour and day
// tiers fold those minutes into their newest bucket. Fleet aggregates and
// PromQL have no stream: their newest buckets are read again every few
// seconds. Either way one chart costs the daemon at most one request a
// second.

import { getJSON, showError } from './api.js';
import { Chart } from './chart.js';
import { duration } from './format.js';
import { poll, watch } from './live.js';
import { QueryForm, defaultTier, rangeSeconds } from './picker.js';
import * as series from './series.js';
import { SourcePage } from './sourcepage.js';
import * as state from './state.js';

const MAX_SERIES = 20;
const STEP_PARAM = { minute: '1m', hour: '1h', day: '1d' };
const POLL_MS = { minute: 5000, hour: 30000, day: 120000 };
/** Minutes of history the stream sends first on the minute tier. */
const MINUTE_SNAPSHOT = 5;

export function mount(main, s) {
  return new Explore(main, s);
}

function make(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

class Explore {
  constructor(main, s) {
    this.root = make('section', 'view explore');
    this.form = new QueryForm(this.root, (values, push) => this.submit(values, push));
    this.error = make('div', 'error');
    this.error.setAttribute('role', 'alert');
    this.error.hidden = true;
    this.hint = make(
      'p',
      'hint',
      'Pick a metric (and its labels, or a group for a fleet aggregate), or type PromQL.',
    );
    this.root.append(this.error, this.hint);
    main.append(this.root);
    this.chart = null;
    this.skewMs = 0;
    this.update(s);
    this.form.load();
  }

  /** Shows the state of the URL (on opening, and on back or forward). */
  update(s) {
    const rangeS = rangeSeconds(s.range);
    const tier = series.TIERS[s.tier] ? s.tier : defaultTier(rangeS);
    this.form.setValues(s, tier);
    this.filter = s.filter || '';
    this.run();
  }

  submit(values, push) {
    const onPage = !values.q && !values.metric;
    state.write({ view: 'explore', ...values, filter: onPage ? this.filter : '' }, push);
    this.run();
  }

  unmount() {
    this.stopLive();
    if (this.ctrl) this.ctrl.abort();
    if (this.chart) this.chart.destroy();
    this.closePage();
    this.root.remove();
  }

  closePage() {
    if (this.page) this.page.destroy();
    this.page = null;
  }

  /** The source's page: a source named outright, no metric, no group. */
  openPage(v) {
    if (this.chart) this.chart.destroy();
    this.chart = null;
    const step = series.TIERS[v.tier] || 60;
    const to = series.bucketOf(this.now(), step) + step;
    const from = to - Math.ceil(rangeSeconds(v.range) / step) * step;
    this.page = new SourcePage(this.root, {
      source: v.source,
      range: v.range,
      tier: v.tier,
      filter: this.filter,
      win: { from, to, step },
      now: () => this.now(),
      skew: (ms) => {
        this.skewMs = ms;
      },
      onFilter: (text) => {
        this.filter = text;
        state.write({ view: 'explore', ...this.form.values(), filter: text });
      },
    });
  }

  /** Now on the daemon's clock, as far as its stream told it. */
  now() {
    return (Date.now() + this.skewMs) / 1000;
  }

  stopLive() {
    if (this.live) this.live.stop();
    clearInterval(this.slider);
    this.live = null;
  }

  async run() {
    this.stopLive();
    if (this.ctrl) this.ctrl.abort();
    this.ctrl = new AbortController();
    const signal = this.ctrl.signal;
    const v = this.form.values();
    const what = v.q ? 'promql' : v.metric ? (v.group ? 'aggregate' : 'series') : null;
    showError(this.error, null);
    this.closePage();
    const page = !what && this.form.mode === 'series' && !v.group && /^[^*?,[\]]+$/.test(v.source);
    this.hint.hidden = !!what || page;
    if (page) {
      this.openPage(v);
      return;
    }
    if (!what) {
      if (this.chart) this.chart.destroy();
      this.chart = null;
      return;
    }
    if (!this.chart) this.chart = new Chart(this.root);
    const chart = this.chart;
    const step = series.TIERS[v.tier] || 60;
    const rangeS = rangeSeconds(v.range);
    const to = series.bucketOf(this.now(), step) + step;
    const from = to - Math.ceil(rangeS / step) * step;
    this.win = { from, to, step };
    chart.setWindow(from, to, step);
    chart.setState('loading', 'Loading…');
    chart.setLive('off', '');
    chart.setNote('');
    try {
      const { list, total, partial } = await this.read(what, v, from, to, step, signal);
      this.list = list;
      const title = what === 'promql' ? v.q : series.nameAll(list);
      const counters = list.length && list.every((s) => s.counter);
      chart.setSeries(list, { title, unit: counters ? 'per second' : '' });
      chart.setState(
        'ready',
        list.length ? '' : 'No data in this range: check the metric, source and labels.',
      );
      const notes = [];
      if (total > list.length) {
        notes.push(`Showing ${list.length} of ${total} series: narrow the selection with labels or a source.`);
      }
      if (partial) notes.push(`Answered from memory only: ${partial}`);
      chart.setNote(notes.join(' '));
      if (total <= MAX_SERIES) this.startLive(what, v, step);
      else chart.setLive('off', 'live updates off: too many series');
    } catch (e) {
      if (e.kind === 'aborted') return;
      showError(this.error, e);
      chart.setSeries([], { title: v.q || v.metric });
      chart.setState('error', e.describe ? e.describe() : e.message);
    }
  }

  /** The chart's series from the daemon. */
  async read(what, v, from, to, step, signal) {
    let body;
    let list;
    if (what === 'promql') {
      body = await getJSON(
        '/prometheus/api/v1/query_range',
        { query: v.q, start: from, end: Math.min(to - 1, Math.floor(this.now())), step },
        { signal },
      );
      list = series.fromMatrix(body);
    } else if (what === 'aggregate') {
      body = await getJSON(
        '/api/v1/aggregate',
        { group: v.group, metric: v.metric, labels: v.labels, from, to, step: STEP_PARAM[v.tier] },
        { signal },
      );
      list = series.fromAggregate(body, v.group);
    } else {
      body = await getJSON(
        '/api/v1/range',
        { source: v.source || '*', metric: v.metric, labels: v.labels, from, to, step: STEP_PARAM[v.tier] },
        { signal },
      );
      list = series.fromRange(body);
    }
    const total = list.length;
    return { list: list.slice(0, MAX_SERIES), total, partial: body.partial };
  }

  startLive(what, v, step) {
    const chart = this.chart;
    this.slider = setInterval(() => this.slide(), 5000);
    if (what !== 'series') {
      const every = POLL_MS[v.tier] || 5000;
      chart.setLive('polling', `● live, read every ${duration(every / 1000)}`);
      this.live = poll(
        (signal) => this.refreshTail(what, v, step, signal),
        every,
        (err) => {
          if (err) chart.setLive('lost', `○ refresh failed: ${err.describe ? err.describe() : err.message}`);
          else chart.setLive('polling', `● live, read every ${duration(every / 1000)}`);
        },
      );
      return;
    }
    let coveredFrom = -Infinity;
    const params = () => {
      const now = this.now();
      let minutes = MINUTE_SNAPSHOT;
      if (step > 60) {
        coveredFrom = series.bucketOf(now, step);
        minutes = Math.floor((now - coveredFrom) / 60) + 1;
      }
      return { source: v.source || '*', metric: v.metric, labels: v.labels, window: `${minutes}m` };
    };
    this.live = watch(params, {
      onEvent: (ev) => {
        if (ev.t_ms) this.skewMs = ev.t_ms - Date.now();
        if (series.applyWatch(this.list, ev, step, coveredFrom)) {
          this.slide();
          chart.changed();
        }
      },
      onStatus: (st, err, retryMs) => {
        if (st === 'live') chart.setLive('live', '● live');
        else if (st === 'lost') {
          const why = err && err.describe ? err.describe() : 'the stream ended';
          chart.setLive('lost', `○ live stream lost (${why}); retrying in ${duration(retryMs / 1000)}`);
        } else chart.setLive('off', `live updates off: ${err.describe ? err.describe() : err.message}`);
      },
    });
  }

  /** Reads the newest two buckets again (aggregates, PromQL). */
  async refreshTail(what, v, step, signal) {
    const from = series.bucketOf(this.now(), step) - step;
    const { list } = await this.read(what, v, from, from + 2 * step, step, signal);
    const byKey = new Map(this.list.map((s) => [s.key, s]));
    for (const fresh of list) {
      const s = byKey.get(fresh.key);
      if (s) s.points = series.upsert(s.points, fresh.points);
      else if (this.list.length < MAX_SERIES) {
        this.list.push(fresh);
        this.chart.setSeries(this.list, { title: what === 'promql' ? v.q : series.nameAll(this.list) });
      }
    }
    this.slide();
    this.chart.changed();
  }

  /** Moves the window on when a new bucket begins, keeping its length. */
  slide() {
    const { from, to, step } = this.win;
    const next = series.bucketOf(this.now(), step) + step;
    if (next <= to) return;
    this.win = { from: from + (next - to), to: next, step };
    for (const s of this.list || []) s.points = series.trimBefore(s.points, this.win.from);
    this.chart.setWindow(this.win.from, this.win.to, step);
  }
}
