// The dashboard's entry point: the header, the token prompt, and one view
// at a time (Fleet, Explore or Daemon), chosen by the URL.

import { auth, setToken, token } from './api.js';
import * as daemon from './daemon.js';
import * as explore from './explore.js';
import * as fleet from './fleet.js';
import * as state from './state.js';

const VIEWS = {
  fleet: ['Fleet', fleet],
  explore: ['Explore', explore],
  daemon: ['Daemon', daemon],
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const dialog = document.getElementById('token-dialog');
const why = document.getElementById('token-why');
const input = document.getElementById('token-input');
const tokenButton = document.getElementById('token-button');
let current = null;

function route(s) {
  const name = VIEWS[s.view] ? s.view : 'fleet';
  for (const a of nav.querySelectorAll('a[data-view]')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${VIEWS[name][0]} · Tally`;
  if (current && current.name === name && current.view.update) {
    current.view.update(s);
    return;
  }
  if (current) current.view.unmount();
  current = { name, view: VIEWS[name][1].mount(main, s) };
}

/** Starts the view again, e.g. with a new token. */
function remount() {
  if (current) current.view.unmount();
  current = null;
  route(state.read());
}

function showTokenState() {
  tokenButton.textContent = token() ? 'Forget token' : 'Token…';
}

// A refused request opens the prompt once per token; after "Cancel" the
// views show the refusal in their own words and the header button asks.
let dismissed = false;
auth.addEventListener('refused', (e) => {
  why.textContent = e.detail.describe();
  if (!dialog.open && !dismissed) {
    input.value = '';
    dialog.showModal();
  }
});

dialog.addEventListener('close', () => {
  const value = input.value.trim();
  input.value = '';
  if (dialog.returnValue === 'use' && value) {
    setToken(value);
    dismissed = false;
    showTokenState();
    remount();
  } else {
    dismissed = true;
  }
});

tokenButton.addEventListener('click', () => {
  if (token()) {
    setToken('');
    dismissed = false;
    showTokenState();
    remount();
    return;
  }
  why.textContent = 'Enter a read token for this daemon.';
  dialog.showModal();
});

state.interceptLinks(document.body);
state.onChange(route);
showTokenState();
route(state.read());
