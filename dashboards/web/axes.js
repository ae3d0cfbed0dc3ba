// The charts' axes: round-number ticks for values, local-time ticks for
// time, and drawing both as a grid with labels.

import { clock, day, num } from './format.js';

/** Round-number ticks covering [lo, hi], about `count` of them. */
export function niceTicks(lo, hi, count) {
  // A range of a few units in the last place (the minute means of a
  // constant gauge differ in their last bits) rounds to one tick, and a
  // scale of zero height draws nothing but NaN: it is drawn as flat.
  if (!(hi - lo > Math.max(Math.abs(lo), Math.abs(hi)) * 1e-9)) {
    const d = Math.abs(lo) * 0.1 || 1;
    lo = lo >= 0 && lo - d < 0 ? 0 : lo - d;
    hi += d;
  }
  const rough = (hi - lo) / Math.max(1, count);
  const pow = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= rough);
  const lo2 = Math.floor(lo / step) * step;
  const hi2 = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let i = 0; lo2 + i * step <= hi2 + step * 1e-9; i++) {
    const v = lo2 + i * step;
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return { lo: lo2, hi: hi2, ticks };
}

const TIME_STEPS = [
  60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400,
  7 * 86400, 14 * 86400, 30 * 86400,
];

/** Ticks on [from, to) at least `gap` px apart on `width` px, in local time. */
export function timeTicks(from, to, width, gap = 90) {
  const span = Math.max(1, to - from);
  const fits = (s) => (s / span) * width >= gap;
  const step = TIME_STEPS.find(fits) ?? TIME_STEPS[TIME_STEPS.length - 1];
  const offset = -new Date(from * 1000).getTimezoneOffset() * 60;
  const ticks = [];
  let t = Math.ceil((from + offset) / step) * step - offset;
  for (; t < to; t += step) {
    const local = t + offset;
    const midnight = ((local % 86400) + 86400) % 86400 === 0;
    ticks.push({ t, label: step >= 86400 || midnight ? day(t) : clock(t) });
  }
  return ticks;
}

/**
 * Draws the grid and the labels of both axes on `ctx` for the plot area
 * `box` ({ x, y, w, h } in CSS px), mapping with `sx(t)` and `sy(v)`.
 */
export function drawAxes(ctx, box, { from, to, yTicks, sx, sy, colors, unit }) {
  ctx.save();
  ctx.lineWidth = 1;
  ctx.strokeStyle = colors.grid;
  ctx.fillStyle = colors.muted;
  ctx.font = '11px system-ui, sans-serif';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  ctx.beginPath();
  for (const v of yTicks) {
    const y = Math.round(sy(v)) + 0.5;
    ctx.moveTo(box.x, y);
    ctx.lineTo(box.x + box.w, y);
    ctx.fillText(num(v), box.x - 6, y);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const { t, label } of timeTicks(from, to, box.w)) {
    const x = Math.round(sx(t)) + 0.5;
    ctx.moveTo(x, box.y);
    ctx.lineTo(x, box.y + box.h);
    ctx.fillText(label, x, box.y + box.h + 6);
  }
  ctx.stroke();
  if (unit) {
    ctx.textAlign = 'left';
    ctx.textBaseline = 'bottom';
    ctx.fillText(unit, box.x, box.y - 4);
  }
  ctx.restore();
}
