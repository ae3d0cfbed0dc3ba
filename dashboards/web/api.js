// Talking to tallyd: every request goes to this daemon only (relative
// URLs), carries the read token when there is one, and fails with an
// ApiError whose message is the daemon's own words.
//
// The token is kept in sessionStorage: it lives as long as the tab and is
// never written to disk, to a cookie or to the URL.

const TOKEN_KEY = 'tally.read-token';

/** Fires `refused` (detail: the ApiError) when the daemon refuses a token. */
export const auth = new EventTarget();

export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(value) {
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage disabled: the token lasts as long as this page instead.
  }
  fallbackToken = value || '';
}

let fallbackToken = '';

function currentToken() {
  return token() || fallbackToken;
}

/**
 * What went wrong, by kind: `auth` (401: no token, or one not accepted),
 * `forbidden` (403: the token may not read), `bad` (the request, with the
 * daemon's reason), `busy` (503), `server`, `network`, `aborted`.
 */
export class ApiError extends Error {
  constructor(kind, status, message) {
    super(message);
    this.kind = kind;
    this.status = status;
  }

  /** The message as the page shows it. */
  describe() {
    switch (this.kind) {
      case 'auth':
        return `Token refused: ${this.message}`;
      case 'forbidden':
        return `This token may not read: ${this.message}`;
      case 'busy':
        return `tallyd is busy: ${this.message}`;
      case 'network':
        return `tallyd cannot be reached: ${this.message}`;
      default:
        return this.message;
    }
  }
}

/** `path?params`, leaving out empty values. */
export function url(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** The response to GET `path`, or an ApiError. */
export async function get(path, params, { signal } = {}) {
  const headers = {};
  const t = currentToken();
  if (t) headers.Authorization = `Bearer ${t}`;
  let res;
  try {
    res = await fetch(url(path, params), {
      headers,
      signal,
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
  } catch (e) {
    if (e.name === 'AbortError') throw new ApiError('aborted', 0, 'cancelled');
    throw new ApiError('network', 0, e.message || 'the request failed');
  }
  if (!res.ok) throw await errorOf(res);
  return res;
}

export async function getJSON(path, params, opts) {
  const res = await get(path, params, opts);
  try {
    return await res.json();
  } catch (e) {
    if (e.name === 'AbortError') throw new ApiError('aborted', 0, 'cancelled');
    throw new ApiError('server', res.status, `unreadable answer from ${path}: ${e.message}`);
  }
}

export async function getText(path, params, opts) {
  const res = await get(path, params, opts);
  return res.text();
}

/** The daemon's reason: `{"error": ...}` (both APIs) or plain text. */
async function errorOf(res) {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // No body: the status says enough.
  }
  let message = text.trim();
  try {
    const body = JSON.parse(text);
    if (body && typeof body.error === 'string') message = body.error;
  } catch {
    // Plain text.
  }
  message = message || `${res.status} ${res.statusText}`;
  const kind =
    res.status === 401
      ? 'auth'
      : res.status === 403
        ? 'forbidden'
        : res.status === 503
          ? 'busy'
          : res.status >= 500
            ? 'server'
            : 'bad';
  const err = new ApiError(kind, res.status, message);
  if (kind === 'auth' || kind === 'forbidden') {
    auth.dispatchEvent(new CustomEvent('refused', { detail: err }));
  }
  return err;
}

/** Shows `err` in `box` (an element with role=alert), or hides the box. */
export function showError(box, err) {
  if (!err || err.kind === 'aborted') {
    box.hidden = true;
    box.textContent = '';
    return;
  }
  box.hidden = false;
  box.textContent = err instanceof ApiError ? err.describe() : String(err.message || err);
  box.dataset.kind = err.kind || 'error';
}
