// Explore's query form: a metric, then its labels (or a group's fleet
// aggregate), or a PromQL expression; the range and the tier. Suggestions
// come from the discovery API as the user types; the form itself only
// reads and writes its fields, Explore decides what to draw.

import { getJSON } from './api.js';

export const RANGES = [
  ['15m', 900],
  ['1h', 3600],
  ['3h', 3 * 3600],
  ['6h', 6 * 3600],
  ['12h', 12 * 3600],
  ['24h', 86400],
  ['2d', 2 * 86400],
  ['7d', 7 * 86400],
  ['30d', 30 * 86400],
  ['90d', 90 * 86400],
];

/** Minute points beyond this range are too many to draw; pick hours. */
const MINUTE_TIER_MAX_S = 7 * 86400;
const MAX_LABEL_PICKERS = 8;

/** The tier a range gets unless the URL names one. */
export function defaultTier(rangeS) {
  if (rangeS <= 2 * 86400) return 'minute';
  if (rangeS <= 30 * 86400) return 'hour';
  return 'day';
}

export function rangeSeconds(name) {
  const r = RANGES.find(([n]) => n === name);
  return r ? r[1] : 3600;
}

let uid = 0;

function field(labelText, input, hint) {
  const label = document.createElement('label');
  const span = document.createElement('span');
  span.textContent = labelText;
  label.append(span, input);
  if (hint) label.append(hint);
  return label;
}

function make(tag, props = {}) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k in e) e[k] = v;
    else e.setAttribute(k, v);
  }
  return e;
}

function options(select, pairs) {
  select.replaceChildren(
    ...pairs.map(([value, text]) => make('option', { value, text: text ?? value })),
  );
}

/** A datalist for `input`, filled with `values`. */
function suggest(input, list, values) {
  list.replaceChildren(...values.slice(0, 500).map((v) => make('option', { value: v })));
  input.setAttribute('list', list.id);
}

export class QueryForm {
  /** `onRun(values, push)` when the query should be (re)drawn. */
  constructor(parent, onRun) {
    this.onRun = onRun;
    this.ctrl = null;
    const id = ++uid;
    this.form = make('form', { class: 'query', autocomplete: 'off' });
    this.form.noValidate = true;

    this.modeSeries = make('button', { type: 'button', text: 'Series', class: 'tab' });
    this.modePromql = make('button', { type: 'button', text: 'PromQL', class: 'tab' });
    const modes = make('div', { class: 'tabs', role: 'tablist' });
    modes.append(this.modeSeries, this.modePromql);

    this.source = make('input', { name: 'source', placeholder: '* (every source)', spellcheck: false });
    this.group = make('select', { name: 'group' });
    options(this.group, [['', 'per source']]);
    this.metric = make('input', { name: 'metric', placeholder: 'metric name', spellcheck: false });
    this.labels = make('input', {
      name: 'labels',
      placeholder: 'mode="idle", cpu=~"0|1"',
      spellcheck: false,
    });
    this.metricHint = make('small', { class: 'hint' });
    this.sourceList = make('datalist', { id: `sources-${id}` });
    this.metricList = make('datalist', { id: `metrics-${id}` });
    this.pickers = make('div', { class: 'label-pickers' });
    this.seriesFields = make('div', { class: 'fields series-fields' });
    this.seriesFields.append(
      field('Source', this.source),
      field('Fleet aggregate', this.group),
      field('Metric', this.metric, this.metricHint),
      field('Labels', this.labels),
      this.pickers,
      this.sourceList,
      this.metricList,
    );

    this.query = make('textarea', {
      name: 'q',
      rows: 2,
      spellcheck: false,
      placeholder: 'rate(node_cpu_seconds_total{mode="user"}[5m])',
    });
    this.promqlFields = make('div', { class: 'fields promql-fields' });
    this.promqlFields.append(field('PromQL', this.query));

    this.range = make('select', { name: 'range' });
    options(this.range, RANGES.map(([n]) => [n, `last ${n}`]));
    this.tiers = make('div', { class: 'tiers', role: 'radiogroup', 'aria-label': 'Tier' });
    this.tierInputs = ['minute', 'hour', 'day'].map((t) => {
      const input = make('input', { type: 'radio', name: 'tier', value: t });
      const l = make('label');
      l.append(input, ` ${t}`);
      this.tiers.append(l);
      return input;
    });
    this.submit = make('button', { type: 'submit', text: 'Show', class: 'primary' });
    const when = make('div', { class: 'fields when' });
    when.append(field('Range', this.range), field('Tier', this.tiers), this.submit);

    this.form.append(modes, this.seriesFields, this.promqlFields, when);
    parent.append(this.form);
    this.wire();
    this.setMode('series');
  }

  wire() {
    this.modeSeries.addEventListener('click', () => this.setMode('series'));
    this.modePromql.addEventListener('click', () => this.setMode('promql'));
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.onRun(this.values(), true);
    });
    this.query.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey) {
        e.preventDefault();
        this.form.requestSubmit();
      }
    });
    this.range.addEventListener('change', () => {
      this.limitTiers();
      this.onRun(this.values(), true);
    });
    this.tiers.addEventListener('change', () => this.onRun(this.values(), true));
    this.group.addEventListener('change', () => {
      this.source.disabled = !!this.group.value;
      this.onRun(this.values(), true);
    });
    let typing = 0;
    this.source.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => this.suggestSources(), 250);
    });
    this.source.addEventListener('change', () => this.suggestMetrics());
    this.metric.addEventListener('change', () => {
      this.loadPickers();
      if (this.metric.value) this.onRun(this.values(), true);
    });
  }

  setMode(mode) {
    this.mode = mode;
    const promql = mode === 'promql';
    this.modeSeries.setAttribute('aria-selected', String(!promql));
    this.modePromql.setAttribute('aria-selected', String(promql));
    this.seriesFields.hidden = promql;
    this.promqlFields.hidden = !promql;
    if (promql) this.query.focus();
  }

  /** The form's query, as URL state. */
  values() {
    const tier = this.tierInputs.find((i) => i.checked)?.value;
    const common = { range: this.range.value, tier };
    if (this.mode === 'promql') return { ...common, q: this.query.value.trim() };
    return {
      ...common,
      source: this.group.value ? '' : this.source.value.trim(),
      group: this.group.value,
      metric: this.metric.value.trim(),
      labels: this.labels.value.trim(),
    };
  }

  /** Fills the form from URL state (and loads what it suggests). */
  setValues(s, tier) {
    this.setMode(s.q ? 'promql' : 'series');
    this.query.value = s.q || '';
    this.source.value = s.source || '';
    this.metric.value = s.metric || '';
    this.labels.value = s.labels || '';
    this.range.value = RANGES.some(([n]) => n === s.range) ? s.range : '1h';
    for (const i of this.tierInputs) i.checked = i.value === tier;
    this.limitTiers();
    this.pendingGroup = s.group || '';
    if (this.pendingGroup && ![...this.group.options].some((o) => o.value === this.pendingGroup)) {
      // Until the groups are listed: the URL's group, as asked.
      this.group.append(make('option', { value: this.pendingGroup, text: `group ${this.pendingGroup}` }));
    }
    this.group.value = this.pendingGroup;
    this.source.disabled = !!this.pendingGroup;
  }

  /** Minute points over long ranges are too many: that tier is off there. */
  limitTiers() {
    const minute = this.tierInputs[0];
    minute.disabled = rangeSeconds(this.range.value) > MINUTE_TIER_MAX_S;
    minute.parentElement.title = minute.disabled
      ? 'minute points over more than 7 days are too many to draw: pick hour or day'
      : '';
    if (minute.disabled && minute.checked) {
      minute.checked = false;
      this.tierInputs[1].checked = true;
    }
  }

  /** Loads the lists the form suggests from (groups, metrics, pickers). */
  async load() {
    this.ctrl?.abort();
    this.ctrl = new AbortController();
    const signal = this.ctrl.signal;
    try {
      const body = await getJSON('/api/v1/groups', {}, { signal });
      const names = (body.groups || []).map((g) => g.name);
      this.groupNames = names;
      options(this.group, [['', 'per source'], ...names.map((n) => [n, `group ${n}`])]);
      this.group.value = names.includes(this.pendingGroup) ? this.pendingGroup : '';
      this.source.disabled = !!this.group.value;
    } catch {
      // Groups are optional; an error shows with the chart's own read.
    }
    this.suggestMetrics();
    if (this.metric.value) this.loadPickers();
  }

  sourceSpec() {
    const s = this.source.value.trim();
    return s || '*';
  }

  /**
   * The source discovery lists from. Every source's metrics and labels are
   * those of the `all` group's rollup (one series per metric and label
   * set), which lists them without scanning every series of the fleet.
   */
  discoverySource() {
    if (this.group.value) return `@${this.group.value}`;
    const spec = this.sourceSpec();
    return spec === '*' && (this.groupNames || []).includes('all') ? '@all' : spec;
  }

  async suggestSources() {
    const typed = this.source.value.trim();
    const spec = /[*?,[]/.test(typed) ? typed : `${typed}*`;
    try {
      const body = await getJSON('/api/v1/sources', { source: spec, limit: 50 });
      suggest(this.source, this.sourceList, body.sources || []);
    } catch {
      // Suggestions only.
    }
  }

  async suggestMetrics() {
    try {
      const body = await getJSON('/api/v1/metrics', { source: this.discoverySource(), limit: 1000 });
      suggest(this.metric, this.metricList, body.metrics || []);
      this.metricHint.textContent = body.next ? 'more metrics than listed: type to narrow' : '';
    } catch (e) {
      this.metricHint.textContent = e.kind === 'aborted' ? '' : `no suggestions: ${e.message}`;
    }
  }

  /** One drop-down per label of the metric, each writing `labels`. */
  async loadPickers() {
    this.pickers.replaceChildren();
    const metric = this.metric.value.trim();
    if (!metric) return;
    const sel = { source: this.discoverySource(), metric };
    let names = [];
    try {
      names = (await getJSON('/api/v1/labels', { ...sel, limit: 50 })).labels || [];
    } catch {
      return;
    }
    const chosen = parseEquals(this.labels.value);
    for (const name of names.slice(0, MAX_LABEL_PICKERS)) {
      let values = [];
      try {
        const path = `/api/v1/label/${encodeURIComponent(name)}/values`;
        values = (await getJSON(path, { ...sel, limit: 100 })).values || [];
      } catch {
        continue;
      }
      const select = make('select', { name: `label-${name}` });
      select.dataset.label = name;
      options(select, [['', 'any'], ...values.map((v) => [v, v])]);
      select.value = values.includes(chosen[name]) ? chosen[name] : '';
      select.addEventListener('change', () => {
        this.labels.value = this.pickedLabels();
        this.onRun(this.values(), true);
      });
      this.pickers.append(field(name, select));
    }
  }

  pickedLabels() {
    const kept = Object.entries(parseEquals(this.labels.value)).filter(
      ([k]) => !this.pickers.querySelector(`select[name="label-${CSS.escape(k)}"]`),
    );
    const picked = [...this.pickers.querySelectorAll('select')]
      .filter((s) => s.value)
      .map((s) => [s.dataset.label, s.value]);
    return [...kept, ...picked].map(([k, v]) => `${k}="${v.replace(/["\\]/g, '\\$&')}"`).join(', ');
  }
}

/** The `name="value"` matchers of a labels text (others are ignored). */
function parseEquals(text) {
  const out = {};
  const re = /([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(text))) out[m[1]] = m[2].replace(/\\(.)/g, '$1');
  return out;
}
