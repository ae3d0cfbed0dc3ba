// Keeping a chart live: the daemon's watch stream (Server-Sent Events on
// GET /api/v1/watch) for series, and a slow poll for what the stream does
// not carry (PromQL, group rollups).
//
// The stream is read with fetch rather than EventSource, because
// EventSource cannot send the Authorization header. One stream is one
// long request; a lost stream is retried after 2 s, then 4, 8 … 30 s, so a
// chart never costs the daemon more than one request per second.

import { ApiError, get } from './api.js';

const FIRST_RETRY_MS = 2000;
const MAX_RETRY_MS = 30000;

/**
 * Subscribes to `params` (source, metric, labels, window). Calls
 * `onEvent(event)` with each snapshot and update, and `onStatus(state,
 * err, retryMs)` with `live`, `lost` (retrying) or `failed` (not retried:
 * the request itself was refused). Returns `{ stop() }`.
 */
export function watch(params, { onEvent, onStatus }) {
  let stopped = false;
  let ctrl = null;
  let timer = 0;
  let retry = FIRST_RETRY_MS;

  const lost = (err) => {
    if (stopped) return;
    onStatus('lost', err, retry);
    timer = setTimeout(run, retry);
    retry = Math.min(retry * 2, MAX_RETRY_MS);
  };

  async function run() {
    ctrl = new AbortController();
    let res;
    try {
      res = await get('/api/v1/watch', params(), { signal: ctrl.signal });
    } catch (e) {
      if (stopped) return;
      if (e.kind === 'network' || e.kind === 'busy' || e.kind === 'server') lost(e);
      else onStatus('failed', e);
      return;
    }
    let heard = false;
    try {
      await readEvents(res.body, (name, data) => {
        if (name === 'error') throw new ApiError('server', 0, data);
        const event = JSON.parse(data);
        if (!heard) {
          heard = true;
          retry = FIRST_RETRY_MS;
          onStatus('live');
        }
        onEvent(event);
      });
      lost(new ApiError('network', 0, 'the daemon closed the live stream'));
    } catch (e) {
      if (stopped || e.name === 'AbortError') return;
      ctrl.abort();
      lost(e instanceof ApiError ? e : new ApiError('network', 0, e.message));
    }
  }

  run();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      if (ctrl) ctrl.abort();
    },
  };
}

/** Reads a text/event-stream body, calling `fn(event, data)` per event. */
async function readEvents(body, fn) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') name = val;
        else if (field === 'data') data.push(val);
      }
      if (data.length) fn(name, data.join('\n'));
    }
  }
}

/**
 * Calls `fn(signal)` every `everyMs`, one call at a time; `onError(err)`
 * when it fails (the poll goes on). Returns `{ stop() }`.
 */
export function poll(fn, everyMs, onError) {
  let stopped = false;
  let timer = 0;
  let ctrl = null;
  const tick = async () => {
    ctrl = new AbortController();
    try {
      await fn(ctrl.signal);
      onError(null);
    } catch (e) {
      if (!stopped) onError(e);
    }
    if (!stopped) timer = setTimeout(tick, Math.max(everyMs, 1000));
  };
  timer = setTimeout(tick, Math.max(everyMs, 1000));
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      if (ctrl) ctrl.abort();
    },
  };
}
