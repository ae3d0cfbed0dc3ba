// The page's state lives in the URL: one URL per view, so a view can be
// shared, bookmarked and reloaded. Views read it with `read()` and change
// it with `write()`; the back button and links go through `onChange`.

/** The current state: the query string as a plain object. */
export function read() {
  return Object.fromEntries(new URLSearchParams(location.search));
}

/** A URL of the page for `state` (empty values left out). */
export function href(state) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  return `${location.pathname}?${q}`;
}

/**
 * Replaces the state. `push` makes a new history entry (a new view or
 * query); without it the entry is edited in place (typing, live ranges).
 */
export function write(state, push = false) {
  const url = href(state);
  if (url === `${location.pathname}${location.search}`) return;
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
}

const listeners = new Set();

/** Calls `fn` after the state changed by navigation (back, forward, links). */
export function onChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Goes to `state` as a link would, without reloading the page. */
export function go(state) {
  write(state, true);
  for (const fn of listeners) fn(read());
}

addEventListener('popstate', () => {
  for (const fn of listeners) fn(read());
});

/** Makes clicks on same-page links under `root` navigate without a reload. */
export function interceptLinks(root) {
  root.addEventListener('click', (e) => {
    const a = e.target.closest('a[href^="?"], a[href^="/?"]');
    if (!a || e.defaultPrevented || e.button !== 0) return;
    if (e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    go(Object.fromEntries(new URL(a.href).searchParams));
  });
}
