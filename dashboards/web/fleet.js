// Fleet: every source the daemon holds series of, with its series count,
// samples per second and its newest sample's age; stale sources stand out.
//
// The daemon filters, sorts and pages (GET /api/v1/fleet); the page asks
// only for the pages of rows in view and draws only those rows, reusing a
// few row elements as the list scrolls, so ten thousand sources cost what
// thirty do. Rows in view are read again every few seconds.

import { getJSON, showError } from './api.js';
import { duration, num, parseDuration } from './format.js';
import * as state from './state.js';

const ROW_PX = 30;
const PAGE = 200;
const OVERSCAN = 10;
const REFRESH_MS = 5000;
const STALE_CHOICES = ['', '1m', '2m', '5m', '15m', '1h'];
const COLUMNS = [
  ['source', 'Source'],
  ['series', 'Series'],
  ['rate', 'Samples/s'],
  ['age', 'Last sample'],
];

export function mount(main, s) {
  return new Fleet(main, s);
}

function make(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

class Fleet {
  constructor(main, s) {
    this.root = make('section', 'view fleet');
    this.root.dataset.state = 'loading';
    this.build();
    main.append(this.root);
    this.pages = new Map();
    this.loading = new Map();
    this.total = 0;
    this.firstDrawn = false;
    this.update(s);
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    this.onScroll = () => this.scrolled();
    this.scroller.addEventListener('scroll', this.onScroll, { passive: true });
    this.resize = new ResizeObserver(() => this.render());
    this.resize.observe(this.scroller);
  }

  build() {
    const bar = make('div', 'toolbar');
    this.filter = make('input');
    this.filter.type = 'search';
    this.filter.placeholder = 'Filter sources: text or glob (web-*)';
    this.filter.setAttribute('aria-label', 'Filter sources');
    this.staleOnly = make('input');
    this.staleOnly.type = 'checkbox';
    const staleLabel = make('label', 'check');
    staleLabel.append(this.staleOnly, ' stale only');
    this.staleAfter = make('select');
    this.staleAfter.setAttribute('aria-label', 'Stale after');
    this.staleAfter.append(
      ...STALE_CHOICES.map((v) => {
        const o = make('option', '', v ? `stale after ${v}` : 'stale after (daemon default)');
        o.value = v;
        return o;
      }),
    );
    this.summary = make('span', 'summary');
    this.summary.setAttribute('role', 'status');
    bar.append(this.filter, staleLabel, this.staleAfter, this.summary);

    this.error = make('div', 'error');
    this.error.setAttribute('role', 'alert');
    this.error.hidden = true;

    const table = make('div', 'table');
    table.setAttribute('role', 'table');
    this.head = make('div', 'row head');
    this.head.setAttribute('role', 'row');
    for (const [key, text] of COLUMNS) {
      const b = make('button', `col ${key}`, text);
      b.type = 'button';
      b.dataset.sort = key;
      b.setAttribute('role', 'columnheader');
      this.head.append(b);
    }
    this.scroller = make('div', 'scroller');
    this.spacer = make('div', 'spacer');
    this.rows = make('div', 'rows');
    this.rows.setAttribute('role', 'rowgroup');
    this.spacer.append(this.rows);
    this.scroller.append(this.spacer);
    table.append(this.head, this.scroller);
    this.root.append(bar, this.error, table);

    let typing = 0;
    this.filter.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => this.changeQuery(false), 250);
    });
    this.staleOnly.addEventListener('change', () => this.changeQuery(true));
    this.staleAfter.addEventListener('change', () => this.changeQuery(true));
    this.head.addEventListener('click', (e) => {
      const b = e.target.closest('button[data-sort]');
      if (!b) return;
      const same = this.s.sort === b.dataset.sort || (!this.s.sort && b.dataset.sort === 'source');
      const order = same && this.s.order !== 'desc' ? 'desc' : 'asc';
      this.changeQuery(true, { sort: b.dataset.sort, order });
    });
  }

  /** Shows the state of the URL. */
  update(s) {
    this.s = { ...s, view: 'fleet' };
    this.filter.value = s.filter || '';
    this.staleOnly.checked = s.stale_only === '1';
    this.staleAfter.value = STALE_CHOICES.includes(s.stale) ? s.stale : '';
    for (const b of this.head.querySelectorAll('button')) {
      const on = (s.sort || 'source') === b.dataset.sort;
      b.setAttribute('aria-sort', on ? (s.order === 'desc' ? 'descending' : 'ascending') : 'none');
    }
    this.reset();
  }

  changeQuery(push, extra = {}) {
    const next = {
      ...this.s,
      filter: this.filter.value.trim(),
      stale_only: this.staleOnly.checked ? '1' : '',
      stale: this.staleAfter.value,
      ...extra,
    };
    state.write(next, push);
    this.update(next);
  }

  unmount() {
    clearInterval(this.timer);
    this.resize.disconnect();
    if (this.ctrl) this.ctrl.abort();
    this.root.remove();
  }

  /** The fleet endpoint's parameters for the current query. */
  params() {
    const f = (this.s.filter || '').trim();
    const staleS = parseDuration(this.s.stale);
    return {
      source: f ? (/[*?,[]/.test(f) ? f : `*${f}*`) : '',
      sort: this.s.sort || 'source',
      order: this.s.order === 'desc' ? 'desc' : 'asc',
      stale_only: this.s.stale_only === '1' ? 'true' : '',
      stale_after: Number.isFinite(staleS) ? `${staleS}s` : '',
    };
  }

  /** A new query: forget every page and start from the top. */
  reset() {
    if (this.ctrl) this.ctrl.abort();
    this.ctrl = new AbortController();
    this.pages = new Map();
    this.loading = new Map();
    this.scroller.scrollTop = 0;
    this.load(0, true);
  }

  /** Reads page `n` (unless it is on its way), then draws. */
  async load(n, fresh = false) {
    if (this.loading.has(n)) return;
    const signal = this.ctrl.signal;
    const p = getJSON('/api/v1/fleet', { ...this.params(), offset: n * PAGE, limit: PAGE }, { signal });
    this.loading.set(n, p);
    try {
      const body = await p;
      if (signal.aborted) return;
      this.pages.set(n, body.rows || []);
      this.meta = body;
      if (fresh || body.matched !== this.total) this.total = body.matched;
      showError(this.error, null);
      this.render();
    } catch (e) {
      if (e.kind === 'aborted') return;
      this.root.dataset.state = 'error';
      showError(this.error, e);
    } finally {
      if (this.loading.get(n) === p) this.loading.delete(n);
    }
  }

  /** Reads the pages in view again. */
  refresh() {
    if (document.hidden) return;
    for (const n of this.pagesInView()) this.load(n);
  }

  pagesInView() {
    const [first, last] = this.rowsInView();
    const out = [];
    for (let n = Math.floor(first / PAGE); n <= Math.floor(Math.max(first, last - 1) / PAGE); n++) {
      out.push(n);
    }
    return out;
  }

  rowsInView() {
    const top = this.scroller.scrollTop;
    const h = this.scroller.clientHeight || ROW_PX * 20;
    const first = Math.max(0, Math.floor(top / ROW_PX) - OVERSCAN);
    const last = Math.min(this.total, Math.ceil((top + h) / ROW_PX) + OVERSCAN);
    return [first, last];
  }

  scrolled() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
      for (const n of this.pagesInView()) if (!this.pages.has(n)) this.load(n);
    });
  }

  /** Draws the rows in view from the pages at hand. */
  render() {
    this.spacer.style.height = `${this.total * ROW_PX}px`;
    const [first, last] = this.rowsInView();
    const need = Math.max(0, last - first);
    while (this.rows.children.length < need) this.rows.append(this.rowElement());
    while (this.rows.children.length > need) this.rows.lastChild.remove();
    this.rows.style.transform = `translateY(${first * ROW_PX}px)`;
    for (let i = 0; i < need; i++) {
      const idx = first + i;
      const page = this.pages.get(Math.floor(idx / PAGE));
      this.fillRow(this.rows.children[i], page ? page[idx % PAGE] : null, idx);
    }
    this.renderSummary();
    const d = this.root.dataset;
    d.total = String(this.total);
    d.state = this.meta ? 'drawn' : 'loading';
    if (this.meta && !this.firstDrawn) {
      this.firstDrawn = true;
      performance.mark('tally:fleet-drawn', { detail: { rows: need, total: this.total } });
    }
  }

  rowElement() {
    const row = make('div', 'row');
    row.setAttribute('role', 'row');
    const link = make('a', 'cell source');
    const badge = make('span', 'badge', 'stale');
    const name = make('span', 'name');
    link.append(name, badge);
    row.append(link, make('span', 'cell series'), make('span', 'cell rate'), make('span', 'cell age'));
    for (const c of row.children) c.setAttribute('role', 'cell');
    return row;
  }

  fillRow(row, r, idx) {
    const [link, series, rate, age] = row.children;
    row.classList.toggle('odd', idx % 2 === 1);
    if (!r) {
      row.classList.remove('stale');
      row.dataset.source = '';
      link.firstChild.textContent = '…';
      link.removeAttribute('href');
      series.textContent = rate.textContent = age.textContent = '';
      return;
    }
    row.dataset.source = r.source;
    row.classList.toggle('stale', r.stale);
    link.firstChild.textContent = r.source;
    link.href = state.href({ view: 'explore', source: r.source });
    link.title = r.stale ? `${r.source}: stale, nothing for longer than ${duration(this.meta.stale_after_s)}` : r.source;
    series.textContent = num(r.series);
    rate.textContent = num(r.samples_per_s);
    age.textContent = r.age_s === undefined ? 'none yet' : `${duration(r.age_s)} ago`;
  }

  renderSummary() {
    const m = this.meta;
    if (!m) return;
    const parts = [`${num(m.matched)} of ${num(m.sources)} sources`];
    if (m.stale) parts.push(`${num(m.stale)} stale`);
    parts.push(`${num(m.series)} series`, `${num(m.samples_per_s)} samples/s`);
    this.summary.textContent = parts.join(' · ');
  }
}
