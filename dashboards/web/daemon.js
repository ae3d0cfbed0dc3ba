// Daemon: tallyd's own telemetry, read from its /metrics (the Prometheus
// text a scraper reads, with the same read token) and /readyz every few
// seconds: readiness, ingest by protocol, rejections by reason, how far
// the store is behind, the write-ahead log, memory and CPU. Rates are
// computed here from consecutive reads; the charts hold what this page
// has seen since it opened.

import { getText, showError } from './api.js';
import { Chart } from './chart.js';
import { bytes, duration, num } from './format.js';
import { by, parse, total } from './promtext.js';

const EVERY_MS = 5000;
const HISTORY_S = 10 * 60;

export function mount(main) {
  return new Daemon(main);
}

function make(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A card: a title and a list of name–value rows, filled on each read. */
class Card {
  constructor(parent, title) {
    this.el = make('section', 'card');
    this.el.append(make('h2', '', title));
    this.list = make('dl');
    this.el.append(this.list);
    parent.append(this.el);
  }

  set(rows) {
    this.list.replaceChildren(
      ...rows.flatMap(([k, v, cls]) => {
        const dd = make('dd', cls || '', v);
        dd.dataset.key = k;
        return [make('dt', '', k), dd];
      }),
    );
  }
}

class Daemon {
  constructor(main) {
    this.root = make('section', 'view daemon');
    this.root.dataset.state = 'loading';
    this.error = make('div', 'error');
    this.error.setAttribute('role', 'alert');
    this.error.hidden = true;
    const cards = make('div', 'cards');
    this.root.append(this.error, cards);
    this.ready = new Card(cards, 'Readiness');
    this.store = new Card(cards, 'Store');
    this.wal = new Card(cards, 'Write-ahead log');
    this.memory = new Card(cards, 'Memory and CPU');
    const charts = make('div', 'charts');
    this.root.append(charts);
    this.ingest = new Chart(charts);
    this.lag = new Chart(charts);
    this.rejections = new Card(this.root, 'Rejected samples by reason');
    main.append(this.root);
    this.prev = null;
    this.history = { ingest: new Map(), lag: [] };
    this.read();
    this.timer = setInterval(() => this.read(), EVERY_MS);
  }

  unmount() {
    clearInterval(this.timer);
    this.ingest.destroy();
    this.lag.destroy();
    this.root.remove();
  }

  async read() {
    if (document.hidden && this.prev) return;
    const now = Date.now() / 1000;
    const [metrics, ready] = await Promise.allSettled([getText('/metrics'), getText('/readyz')]);
    if (metrics.status === 'rejected') {
      this.showReady(ready, now, []);
      showError(this.error, metrics.reason);
      this.root.dataset.state = 'error';
      return;
    }
    showError(this.error, null);
    const cur = { t: now, samples: parse(metrics.value) };
    this.showReady(ready, now, cur.samples);
    this.show(cur);
    this.prev = cur;
    this.root.dataset.state = 'drawn';
  }

  showReady(r, now, samples) {
    const rows = [];
    if (r.status === 'fulfilled') rows.push(['state', 'ready', 'ok']);
    else rows.push(['state', `not ready: ${r.reason.message}`, 'bad']);
    const start = total(samples, 'process_start_time_seconds');
    if (start) rows.push(['uptime', duration(now - start)]);
    rows.push(['read at', new Date(now * 1000).toLocaleTimeString()]);
    this.ready.set(rows);
  }

  /** The per-second rate of counter `name` since the last read. */
  rate(cur, name, keep) {
    if (!this.prev) return null;
    const a = total(this.prev.samples, name, keep);
    const b = total(cur.samples, name, keep);
    if (b === null) return null;
    const dt = cur.t - this.prev.t;
    const d = b >= (a ?? 0) ? b - (a ?? 0) : b;
    return dt > 0 ? d / dt : null;
  }

  show(cur) {
    const s = cur.samples;
    const g = (name, keep) => total(s, name, keep);
    const storeName = (s.find((x) => x.labels.store) || { labels: {} }).labels.store || '';
    const failed = g('tally_store_failed');
    const refusing = g('tally_store_refusing');
    const letters = g('tally_dead_letter_files') ?? 0;
    const lag = g('tally_store_lag_seconds');
    const errRate = this.rate(cur, 'tally_store_errors_total');
    this.store.set([
      ['store', storeName || 'not reported yet'],
      [
        'state',
        failed ? 'failed: writes refused' : refusing ? 'refusing every flush: held, ingest refused' : 'writing',
        failed || refusing ? 'bad' : 'ok',
      ],
      ['behind by', lag === null ? '–' : duration(lag), lag > 10 ? 'warn' : ''],
      ['batches in flight', num(g('tally_flush_inflight_batches'))],
      ['slots pending in memory', num(g('tally_pending_slots'))],
      ['errors/s', errRate === null ? '–' : num(errRate), errRate ? 'bad' : ''],
      ['dead-letter files', num(letters), letters ? 'bad' : ''],
      ['dead-letter bytes', bytes(g('tally_dead_letter_bytes') ?? 0), letters ? 'bad' : ''],
      ['samples set aside', num(g('tally_dead_letter_samples_total') ?? 0)],
    ]);
    const segments = g('tally_wal_segments');
    const walErrors = g('tally_wal_errors_total') ?? 0;
    this.wal.set(
      segments === null
        ? [['state', 'off or not started (wal.enabled)']]
        : [
            ['state', walErrors ? 'errors' : 'writing', walErrors ? 'bad' : 'ok'],
            ['segments', num(segments)],
            ['written', `${bytes(this.rate(cur, 'tally_wal_bytes_total'))}/s`],
            ['errors', num(walErrors), walErrors ? 'bad' : ''],
            ['queue full', num(g('tally_wal_queue_full_total') ?? 0)],
          ],
    );
    const cpu = this.rate(cur, 'process_cpu_seconds_total');
    this.memory.set([
      ['resident', bytes(g('process_resident_memory_bytes'))],
      ['CPU', cpu === null ? '–' : `${num(cpu * 100)} % of a core`],
      ['series in memory', num(g('tally_series'))],
      ['sources', num(g('tally_sources'))],
      ['watch streams', num(g('tally_watch_subscribers') ?? 0)],
      ['HTTP connections', num(g('tally_http_connections') ?? 0)],
    ]);
    this.showIngest(cur);
    this.showLag(cur.t, lag);
    this.showRejections(cur);
  }

  showIngest(cur) {
    const protocols = by(cur.samples, 'tally_samples_accepted_total', 'protocol');
    for (const p of protocols.keys()) {
      const r = this.rate(cur, 'tally_samples_accepted_total', (l) => l.protocol === p);
      if (r === null) continue;
      const pts = this.history.ingest.get(p) || [];
      pts.push({ t: cur.t, value: r });
      this.history.ingest.set(p, trim(pts, cur.t));
    }
    const list = [...this.history.ingest].map(([p, points]) => ({
      key: p,
      name: p,
      value: true,
      labels: { protocol: p },
      points,
    }));
    this.plot(this.ingest, list, 'Samples accepted per second, by protocol', cur.t);
  }

  showLag(t, lag) {
    if (lag !== null) this.history.lag = trim([...this.history.lag, { t, value: lag }], t);
    const list = [{ key: 'lag', name: 'store behind by (s)', value: true, labels: {}, points: this.history.lag }];
    this.plot(this.lag, list, 'How far the store is behind (seconds)', t);
  }

  plot(chart, list, title, t) {
    chart.setSeries(list, { title });
    chart.setWindow(t - HISTORY_S, t + EVERY_MS / 1000, EVERY_MS / 1000);
    if (!list.some((s) => s.points.length)) chart.setState('ready', 'Two reads are needed for a rate.');
    else chart.setState('ready');
  }

  showRejections(cur) {
    const reasons = by(cur.samples, 'tally_samples_rejected_total', 'reason');
    if (!reasons.size) {
      this.rejections.set([['none', 'no sample rejected since start', 'ok']]);
      return;
    }
    this.rejections.set(
      [...reasons].map(([reason, n]) => {
        const r = this.rate(cur, 'tally_samples_rejected_total', (l) => l.reason === reason);
        const text = `${num(n)} since start${r ? `, ${num(r)}/s now` : ''}`;
        return [reason, text, r ? 'warn' : ''];
      }),
    );
  }
}

function trim(points, now) {
  return points.filter((p) => p.t >= now - HISTORY_S);
}
