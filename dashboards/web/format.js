// Numbers, durations, times and sizes as the dashboard writes them.

const SI = [
  [1e12, 'T'],
  [1e9, 'G'],
  [1e6, 'M'],
  [1e3, 'k'],
];

/** A number in at most about four significant digits: 1.23k, 45.6M, 0.0012. */
export function num(v) {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  const a = Math.abs(v);
  if (a === 0) return '0';
  for (const [f, s] of SI) {
    if (a >= f) return trim((v / f).toPrecision(3)) + s;
  }
  if (a >= 1) return trim(v.toPrecision(4));
  if (a >= 1e-3) return trim(v.toPrecision(3));
  return v.toExponential(2);
}

/** A number with every digit the float has, for readouts. */
export function exact(v) {
  if (v === undefined || v === null) return '–';
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return v.toLocaleString('en-US');
  return String(v);
}

function trim(s) {
  return s.includes('e') || !s.includes('.') ? s : s.replace(/\.?0+$/, '');
}

/** Seconds as a short duration: 45 s, 3 min, 2 h 5 min, 3 d. */
export function duration(s) {
  if (s === undefined || s === null || !Number.isFinite(s)) return '–';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 90) return `${Math.round(s)} s`;
  const m = Math.round(s / 60);
  if (m < 90) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  return `${Math.round(h / 24)} d`;
}

/** Bytes in binary units. */
export function bytes(b) {
  if (b === undefined || b === null || !Number.isFinite(b)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  return `${i === 0 ? b : trim(b.toPrecision(3))} ${units[i]}`;
}

const pad = (n) => String(n).padStart(2, '0');

/** Unix seconds as local time: 14:05, or 14:05:09 with seconds. */
export function clock(t, seconds = false) {
  const d = new Date(t * 1000);
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return seconds ? `${hm}:${pad(d.getSeconds())}` : hm;
}

const MONTHS = 'Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec'.split(' ');

/** Unix seconds as a local date: 3 Nov. */
export function day(t) {
  const d = new Date(t * 1000);
  return `${d.getDate()} ${MONTHS[d.getMonth()]}`;
}

/** Unix seconds as local date and time, for readouts. */
export function stamp(t, seconds = false) {
  return `${day(t)} ${clock(t, seconds)}`;
}

/** `{a="1", b="2"}`, the labels as PromQL writes them; '' when none. */
export function labels(obj, skip = []) {
  const parts = Object.entries(obj || {})
    .filter(([k]) => !skip.includes(k))
    .map(([k, v]) => `${k}="${v}"`);
  return parts.length ? `{${parts.join(', ')}}` : '';
}

/** Parses 30s, 5m, 2h, 7d into seconds; NaN when it is none of those. */
export function parseDuration(text) {
  const m = /^(\d+(?:\.\d+)?)\s*(s|m|min|h|d)$/.exec(String(text).trim());
  if (!m) return NaN;
  const unit = { s: 1, m: 60, min: 60, h: 3600, d: 86400 }[m[2]];
  return Number(m[1]) * unit;
}
