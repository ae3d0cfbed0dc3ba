// The Prometheus text exposition format, as tallyd's /metrics writes it:
// `name{label="value",...} value`, comments and blank lines skipped.

/** Every sample of `text` as `{ name, labels, value }`. */
export function parse(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const s = sample(line);
    if (s) out.push(s);
  }
  return out;
}

function sample(line) {
  let i = 0;
  while (i < line.length && line[i] !== '{' && line[i] !== ' ') i++;
  const name = line.slice(0, i);
  const labels = {};
  if (line[i] === '{') {
    i++;
    while (i < line.length && line[i] !== '}') {
      const eq = line.indexOf('=', i);
      if (eq < 0 || line[eq + 1] !== '"') return null;
      const key = line.slice(i, eq).trim();
      let j = eq + 2;
      let value = '';
      while (j < line.length && line[j] !== '"') {
        if (line[j] === '\\' && j + 1 < line.length) {
          j++;
          value += line[j] === 'n' ? '\n' : line[j];
        } else value += line[j];
        j++;
      }
      labels[key] = value;
      i = j + 1;
      if (line[i] === ',') i++;
    }
    i++;
  }
  const rest = line.slice(i).trim().split(/\s+/);
  const value = parseValue(rest[0]);
  return name && value !== null ? { name, labels, value } : null;
}

function parseValue(v) {
  if (v === undefined) return null;
  if (v === '+Inf' || v === 'Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  if (v === 'NaN') return NaN;
  const n = Number(v);
  return Number.isNaN(n) ? null : n;
}

/** The sum of `name`'s samples whose labels `keep` accepts (null: none). */
export function total(samples, name, keep = () => true) {
  let sum = null;
  for (const s of samples) {
    if (s.name === name && keep(s.labels)) sum = (sum ?? 0) + s.value;
  }
  return sum;
}

/** `name`'s samples summed per value of `label`: a Map value → sum. */
export function by(samples, name, label) {
  const out = new Map();
  for (const s of samples) {
    if (s.name !== name) continue;
    const k = s.labels[label] ?? '';
    out.set(k, (out.get(k) ?? 0) + s.value);
  }
  return out;
}
