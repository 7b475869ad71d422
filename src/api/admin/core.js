// The admin page's shared parts: the DOM helpers, what the page knows (state), the API
// client, errors in the page's own words, one time format, the SSE reader, and the merge of
// what is learnt about a job followed by a coalesced redraw. Everything shown is built with
// createElement/textContent: no data is ever parsed as markup.

/** Redraws of the jobs views happen at most this often, whatever the streams deliver. */
export const REDRAW_MS = 250;
export const ACTIVE = new Set(['queued', 'running', 'cancelling']);
const STORE = { tenant: 'catalog-jobs.tenant', token: 'catalog-jobs.token' };

export const $ = (id) => document.getElementById(id);
export const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'text') node.textContent = v;
    else if (k === 'class') node.className = v;
    else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role') node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
};
/** Sets a node's text only when it changes, so a redraw touches nothing that stays the same. */
export const setText = (node, text) => {
  if (node.textContent !== text) node.textContent = text;
};

/** A progress bar for a job of `kind` (`testid` names it for the tests): the bar's frame
 * and its fill, for `paintProgress`. */
export function progressBar(kind, testid) {
  const bar = el('span');
  const progress = el('div', {
    class: 'progress', role: 'progressbar', 'data-testid': testid,
    'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': '0',
    'aria-label': `${kind} progress`,
  }, bar);
  return { progress, bar };
}

/** Paints `job`'s status and percent on a card or a pipeline's step row (`{ node, progress,
 * bar, status, shown }`); the bar moves only when its percent changed. */
export function paintProgress(row, job) {
  const pct = Math.max(0, Math.min(100, Number(job.percent) || 0));
  row.node.dataset.status = job.status || '';
  if (pct !== row.shown) {
    row.shown = pct;
    row.progress.setAttribute('aria-valuenow', String(pct));
    row.bar.style.width = `${pct}%`;
  }
  row.progress.setAttribute('aria-valuetext', `${pct}% ${job.step || ''}`);
  setText(row.status, job.status || '');
  row.status.className = `badge ${job.status || ''}`;
}

export const state = {
  tenant: sessionStorage.getItem(STORE.tenant) || '',
  token: sessionStorage.getItem(STORE.token) || '',
  jobs: new Map(), // job_id -> what is known of it (snapshots and events merged)
  may: null, // GET /catalog/whoami's `may`, once known
  openJob: null,
  // Aborted when the tab takes another identity (Use): what followed the old one's jobs stops.
  identity: new AbortController(),
};

/** Forgets what the tab learnt as its last identity: its jobs, and the streams and polls
 * that were following them. */
export function leaveIdentity() {
  state.identity.abort();
  state.identity = new AbortController();
  state.jobs.clear();
}

export function remember(tenant, token) {
  state.tenant = tenant;
  state.token = token;
  sessionStorage.setItem(STORE.tenant, tenant);
  sessionStorage.setItem(STORE.token, token);
}

// ---------------------------------------------------------------- the API

export function headers(extra = {}) {
  const h = { Accept: 'application/json', ...extra };
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

/** Calls the API; answers {status, body, headers}; throws only when the network fails. */
export async function api(method, path, body, type) {
  const init = { method, headers: headers(type ? { 'Content-Type': type } : {}), cache: 'no-store' };
  if (body) init.body = body;
  const r = await fetch(path, init);
  let parsed = null;
  const ct = r.headers.get('content-type') || '';
  if (ct.includes('json')) parsed = await r.json().catch(() => null);
  else await r.text();
  return { status: r.status, body: parsed, headers: r.headers };
}

export const q = (params) => {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => u.append(k, x));
    else if (v !== '' && v != null) u.append(k, v);
  }
  return u;
};
export const enc = encodeURIComponent;
/** A job read's query: the job's tenant once known; before that the token decides what it sees. */
export const tenantOf = (id) => q({ tenant_id: (state.jobs.get(id) || {}).tenant_id });

// ---------------------------------------------------------------- errors, in the page's words

export function clearError() {
  const box = $('error');
  box.replaceChildren();
  box.hidden = true;
}

/** Says what to do about an answer, in the page's terms (its fields and buttons), not HTTP's. */
export function advice(answer) {
  if (!answer) return 'the service did not answer: check that it is running and reachable from this browser';
  const body = answer.body || {};
  const wait = answer.headers && answer.headers.get('retry-after');
  const later = wait ? `try again in ${wait} s` : 'try again in a moment';
  switch (body.error) {
    case 'unauthorized':
      return state.token
        ? 'the token in the Token field was not accepted: paste a valid one and press Use'
        : 'this service needs a token: paste yours in the Token field and press Use';
    case 'forbidden':
      if (state.may && state.may.start === false) return 'your token may look but not change anything: ask for a token that may act';
      return state.tenant
        ? `your token does not reach tenant ${state.tenant}: pick the tenant your token is for`
        : 'your token is for one tenant: type it in the Tenant field and press Use';
    case 'already_running': return 'already running.';
    case 'rate_limited': return `too many starts for this tenant just now: ${later}`;
    case 'overloaded': case 'shutting_down': return `the service is busy: ${later}`;
    case 'not_found': return 'no such job or product here (it may have expired, or belong to another tenant)';
    default: break;
  }
  if (body.field === 'tenant_id') return `the Tenant field: ${body.message}`;
  if (body.message) return body.message;
  return `the service answered ${answer.status}`;
}

/** Shows what went wrong and what to do; a job that blocks an action gets a link. */
export function showError(what, answer, failure) {
  const box = $('error');
  box.replaceChildren();
  const text = failure ? `${what}: ${advice(null)}` : answer ? `${what}: ${advice(answer)}` : what;
  const says = el('span', { class: 'says', text });
  const body = answer && answer.body;
  if (body && body.job_id) {
    says.append(' ', el('a', { href: `#job=${enc(body.job_id)}`, text: `Open job ${body.job_id}`, 'data-testid': 'error-job' }));
  }
  // The message lies over the page (admin.css): the person it covers something for may close it.
  const dismiss = el('button', { type: 'button', class: 'dismiss', 'aria-label': 'Dismiss this message', title: 'Dismiss' });
  dismiss.addEventListener('click', clearError);
  box.append(says, dismiss);
  box.hidden = false;
}

export function needTenant() {
  if (state.tenant) return true;
  showError('Type a tenant in the Tenant field and press Use first');
  $('tenant').focus();
  return false;
}

// ---------------------------------------------------------------- numbers: one format

/** A count as a person reads it, its thousands grouped: `12,500` (the JSON keeps 12500). */
export const count = (n) => Number(n || 0).toLocaleString('en-US');

// ---------------------------------------------------------------- time: one format

export const ms = (iso) => (iso == null ? NaN : typeof iso === 'number' ? iso : Date.parse(iso));
export function span(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return '—';
  if (seconds < 1) return '< 1 s';
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
export function elapsed(job) {
  const start = ms(job.started_at) || ms(job.created_at);
  if (!Number.isFinite(start)) return NaN;
  const end = ms(job.finished_at) || Date.now();
  return (end - start) / 1000;
}
/** The exact time, in UTC: `2026-12-01 10:00:30 UTC`. */
export function utc(at) {
  const t = ms(at);
  return Number.isFinite(t) ? `${new Date(t).toISOString().slice(0, 19).replace('T', ' ')} UTC` : '—';
}
/** How long ago: `just now`, `12 s ago`, `3 min ago`, `2 h ago`, `4 d ago`. */
export function ago(at) {
  const t = ms(at);
  if (!Number.isFinite(t)) return '—';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 2) return 'just now';
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}
/** A time as the page shows it: relative, the exact UTC time on hover (kept fresh by tick). */
export function timeEl(at) {
  const node = el('time', { class: 'rel' });
  setTime(node, at);
  return node;
}
export function setTime(node, at) {
  const t = ms(at);
  const iso = Number.isFinite(t) ? new Date(t).toISOString() : '';
  if (node.dateTime !== iso) {
    node.dateTime = iso;
    node.title = utc(at);
  }
  setText(node, ago(at));
}
/** Keeps every relative time on the page current. */
export function refreshTimes() {
  for (const node of document.querySelectorAll('time.rel')) {
    if (node.dateTime) setText(node, ago(node.dateTime));
  }
}

// ---------------------------------------------------------------- Server-Sent Events

/**
 * Reads Server-Sent Events with fetch (the browser's own SSE client cannot send a token).
 * Calls onOpen once the stream is served, onEvent with {id, type, data} for each event.
 * Answers 'ended' (204: nothing more will come) or 'closed' (the server closed the stream);
 * throws when there is no stream to read.
 */
export async function readSse(url, { lastId, onOpen, onEvent, signal }) {
  const extra = { Accept: 'text/event-stream' };
  if (lastId) extra['Last-Event-ID'] = lastId;
  const r = await fetch(url, { headers: headers(extra), signal, cache: 'no-store' });
  if (r.status === 204) return 'ended';
  const type = r.headers.get('content-type') || '';
  if (!r.ok || !type.startsWith('text/event-stream') || !r.body) {
    r.body && r.body.cancel().catch(() => {});
    throw new Error(`no event stream (HTTP ${r.status})`);
  }
  onOpen && onOpen();
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = { id: null, type: 'message', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return 'closed';
    buffer += value;
    let cut;
    while ((cut = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, cut);
      buffer = buffer.slice(cut + (buffer.startsWith('\r\n', cut) ? 2 : 1));
      if (line === '') {
        if (event.data.length) onEvent({ id: event.id, type: event.type, data: event.data.join('\n') });
        event = { id: event.id, type: 'message', data: [] };
        continue;
      }
      if (line.startsWith(':')) continue; // a keep-alive comment
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'data') event.data.push(val);
      else if (field === 'event') event.type = val;
      else if (field === 'id') event.id = val;
    }
  }
}

export const parse = (text) => {
  try { return JSON.parse(text); } catch { return null; }
};
export const sleep = (t, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, t);
  signal && signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); });
});

/** The fields of an event that describe the job (an event's `id` is the timeline's). */
export function pick(data) {
  const out = {};
  for (const k of ['status', 'percent', 'step', 'kind', 'tenant_id', 'error', 'error_class', 'attempt']) {
    if (data[k] !== undefined && data[k] !== null) out[k] = data[k];
  }
  if (out.error_class && !out.error) out.error = out.error_class;
  delete out.error_class;
  return out;
}

// ---------------------------------------------------------------- what is known of a job

/** How far along a job's life a status is: answers can arrive out of order. */
const RANK = { queued: 0, running: 1, cancelling: 2, done: 3, failed: 3, cancelled: 3, lost: 3 };
/** What a reply overtaken by later news must not take back. */
const PROGRESS = ['status', 'percent', 'step', 'eta_seconds', 'error', 'finished_at'];

/**
 * Merges `incoming` (a snapshot or an event, in whatever order they arrive) into `known`.
 * Within one attempt a job's status only moves forward and its percent never goes down, so
 * an older reply never takes either back. Only a new attempt of a run already seen (a
 * requeue after a lost lease) starts its progress again.
 */
export function merge(known, incoming) {
  if (!known) return { ...incoming };
  const merged = { ...known, ...incoming };
  const again = known.attempt >= 1 && incoming.attempt > known.attempt;
  if (again) return merged;
  if (incoming.attempt != null && known.attempt != null && incoming.attempt < known.attempt) {
    merged.attempt = known.attempt;
  }
  const [a, b] = [RANK[known.status] ?? -1, RANK[incoming.status] ?? -1];
  const older = incoming.status != null && b < a;
  const behind = Number(incoming.percent) < Number(known.percent);
  if (older || (behind && b <= a)) {
    for (const k of PROGRESS) if (k in known) merged[k] = known[k];
  } else if (behind) {
    merged.percent = known.percent;
  }
  return merged;
}

const painters = [];
const dirty = new Set();
let flushTimer = 0;

/** Registers a view's painter: called with each changed job, at most every REDRAW_MS. */
export const onRedraw = (paint) => painters.push(paint);

function flush() {
  flushTimer = 0;
  const ids = [...dirty];
  dirty.clear();
  for (const id of ids) {
    const job = state.jobs.get(id);
    if (job) for (const paint of painters) paint(job);
  }
}

/** Asks for a job's views to be redrawn; many asks within REDRAW_MS make one redraw. */
export function redraw(id) {
  dirty.add(id);
  if (!flushTimer) flushTimer = setTimeout(flush, REDRAW_MS);
}

/** Merges what is learnt of a job (snapshot or event) and redraws its views, coalesced. */
export function learn(job) {
  if (!job || !job.job_id) return;
  state.jobs.set(job.job_id, merge(state.jobs.get(job.job_id), job));
  redraw(job.job_id);
}

/** Reads a job's snapshot and learns it. */
export async function snapshot(id) {
  const a = await api('GET', `/catalog/jobs/${enc(id)}?${tenantOf(id)}`);
  if (a.status === 200) learn(a.body);
  return a;
}

/** Why a full pair was full, in words (`full_because`, docs/api.md). */
const FULL_BECAUSE = {
  asked: 'asked for',
  first: 'the first pair',
  settings: 'PAIR_TOP_K or PAIR_MIN_SCORE changed',
  share: 'too much changed since the last full pair',
};

/** How an incremental pair found what changed, in words (`changes.found_by`, docs/api.md). */
const FOUND_BY = {
  feed: 'found by the change feed',
  listing: 'found by listing every product',
};


/**
 * A pair report in words: full or incremental, and its counts (what was re-scored and why,
 * what changed since the last pair, the table's size). Null for any other report.
 */
export function pairWords(report) {
  if (!report || (report.mode !== 'full' && report.mode !== 'incremental')) return null;
  const table = `${count(report.paired)} products paired, ${count(report.pairs)} pairs.`;
  if (report.mode === 'full') {
    const why = FULL_BECAUSE[report.full_because] || report.full_because || 'asked for';
    return `Full pair (${why}): re-scored all ${count(report.products)} products; ${table}`;
  }
  const c = report.changes || {};
  const r = report.rescored_because || {};
  // A report written before pairs said how they found their changes has no `found_by`.
  const found = c.found_by ? ` (${FOUND_BY[c.found_by] || `found by ${c.found_by}`})` : '';
  return `Incremental pair: re-scored ${count(report.rescored)} of ${count(report.products)} products`
    + ` (${count(r.changed)} changed or added, ${count(r.lost_a_neighbour)} lost a neighbour,`
    + ` ${count(r.refilled)} refilled one from their kept list, ${count(r.gained_a_neighbour)} gained one); since the last pair ${count(c.added)} added,`
    + ` ${count(c.changed)} changed, ${count(c.removed)} removed`
    + `${found}; ${table}`;
}

/** Shows a pair report's words in `node` (hidden for any other report). */
export function showPairWords(node, report) {
  const words = pairWords(report);
  node.hidden = !words;
  setText(node, words || '');
}
