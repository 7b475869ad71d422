// The jobs table: one tenant's jobs kept live by the tenant's event stream, or every
// tenant's (an operator with no tenant picked): the list refreshed by a poll, its newest
// running jobs live from their own event streams; filters, "Load more", and a box per row
// to select jobs for a bulk action (bulk.js).
// A row is built once and then only its cells' text changes: the link under the pointer is
// never replaced, so it can be clicked while its job streams progress.

import {
  $, el, state, api, q, showError, readSse, parse, sleep, pick, learn, snapshot, onRedraw,
  setText, setTime, span, elapsed, ACTIVE,
} from './core.js';
import { openJob } from './job.js';

/** How often the table is reloaded when no stream keeps it live. */
const TABLE_POLL_MS = 2000;
/** How long to wait before reconnecting a tenant stream that closed. */
const RECONNECT_MS = 1000;
/** Jobs a page of the table lists. */
const TABLE_LIMIT = 50;
/**
 * Running jobs of every tenant followed live at once, each on a stream of its own: a
 * browser opens at most six connections to one server, and the page needs the rest.
 */
const LIVE_ROWS = 4;
/** Rows off the first page a poll reads again at most, in one call (`readUnlisted`; the
 * listing's `ids` takes 100). */
const STALE_READS = 100;

const rows = new Map(); // job_id -> {tr, cells}
let follower = null; // AbortController of the tenant's stream or poll
let nextCursor = null;
const liveRows = new Set(); // every-tenant mode: the jobs followed on their own streams
const lastRead = new Map(); // job_id -> when a poll last read its row off the first page (ms)
let loadedMore = false; // a "Load more" went past the first page: its cursor is the one to keep

/** How long typing in a text filter rests before the list is read again. */
const TYPING_MS = 300;
/** How many tenants the picker offers for what was typed. */
const PICKER_LIMIT = 20;

let pickedTenant = ''; // the tenant filter as last applied (not while it is being typed)

/** The table's filters as the listing's query names them; the tenant only across tenants. */
export const filters = () => ({
  status: $('filter-status').value,
  kind: $('filter-kind').value,
  id_prefix: $('filter-id').value.trim().toLowerCase(),
  tenant_id: state.tenant || pickedTenant,
});

function matches(job) {
  const { status, kind, id_prefix: idPrefix, tenant_id: tenant } = filters();
  return (!status || job.status === status) && (!kind || job.kind === kind)
    && (!idPrefix || String(job.job_id).startsWith(idPrefix))
    && (!tenant || !job.tenant_id || job.tenant_id === tenant);
}

/**
 * Rows that arrive while a mouse button is down on the table wait for its release: a row
 * put above the pointer mid-click would move the link away before the click lands.
 */
const heldRows = [];
let pressed = false;

function holdWhilePressed() {
  const body = $('jobs-body');
  body.addEventListener('pointerdown', () => { pressed = true; });
  const release = () => {
    if (!pressed) return;
    pressed = false;
    setTimeout(() => {
      // A row the table dropped meanwhile (its job gone) stays out.
      for (const [tr, job] of heldRows.splice(0)) if ((rows.get(job.job_id) || {}).tr === tr) placeRow(tr, job);
    }, 0);
  };
  window.addEventListener('pointerup', release);
  window.addEventListener('pointercancel', release);
}

/**
 * Whether a person looks at the rows: the pointer on the table's box, the focus in it, or
 * the box scrolled down. A new row then leaves the rows shown where they are.
 */
let hovered = false;
const looking = () => hovered || $('jobs-box').scrollTop > 0 || $('jobs-box').contains(document.activeElement);
let above = 0; // rows put above the rows shown since the box was last at its top
let fresh = new WeakSet(); // those rows: never the row to keep in place (they stand above it)

/**
 * The first row in the box's view below its sticky header that was there before (not one
 * put above it since), and where it stands; answers what scrolls the box back so that it
 * stands there again once `tr` is placed (null: no such row in view).
 */
function anchorRow(tr) {
  const box = $('jobs-box');
  const top = box.getBoundingClientRect().top + $('jobs-table').tHead.offsetHeight;
  const row = [...$('jobs-body').children]
    .find((r) => !r.hidden && !fresh.has(r) && r.getBoundingClientRect().bottom > top);
  if (!row) return null;
  const stood = row.getBoundingClientRect().top;
  return () => {
    const moved = row.getBoundingClientRect().top - stood;
    if (moved > 0) {
      box.scrollTop += moved;
      fresh.add(tr);
      above += 1;
      tellAbove();
    }
  };
}

/** Where `tr` stands against the box's view below its sticky header: above, in or below it. */
function whereInView(tr) {
  const box = $('jobs-box').getBoundingClientRect();
  const top = box.top + $('jobs-table').tHead.offsetHeight;
  const r = tr.getBoundingClientRect();
  return r.bottom <= top ? 'above' : r.top >= box.bottom ? 'below' : 'in';
}

const gone = new Set(); // rows left in place, struck out, while a person looks at the rows

/** Takes `tr` out at once: out of the table (`drop`) or hidden. */
function out(tr, drop) {
  if (gone.delete(tr)) unmarkGone(tr);
  if (drop) tr.remove(); else tr.hidden = true;
}

/**
 * Takes `tr` out of the rows shown (`drop`: out of the table, its job gone; else hidden, its
 * job no longer matching the filters) without moving the rows a person looks at: a row above
 * them goes and the box scrolls up by its height; one among them stays where it is, struck
 * out, until no one looks (`sweepGone`); one below them, or when no one looks, goes at once.
 */
function takeOut(tr, drop) {
  if (!tr.isConnected || (tr.hidden && !drop)) return;
  const where = looking() && !tr.hidden ? whereInView(tr) : 'below';
  if (where === 'in') { markGone(tr, drop); return; }
  const height = tr.getBoundingClientRect().height;
  out(tr, drop);
  if (where === 'above' && height) $('jobs-box').scrollTop -= height;
}

function markGone(tr, drop) {
  if (drop) tr.dataset.gone = 'dropped';
  else if (!tr.dataset.gone) tr.dataset.gone = 'filtered';
  tr.title = drop ? 'This job is gone (deleted, or past its time to live): the row leaves once you look away'
    : 'This job no longer matches the filters: the row leaves once you look away';
  const box = tr.querySelector('[data-testid=job-select]');
  const was = box.checked;
  box.checked = false;
  box.disabled = true;
  gone.add(tr);
  if (was) selectionChanged();
}

function unmarkGone(tr) {
  delete tr.dataset.gone;
  tr.removeAttribute('title');
  tr.querySelector('[data-testid=job-select]').disabled = false;
}

/**
 * Takes out the struck-out rows that nobody looks at any more: all of them once no one looks
 * at the rows, else those scrolled out of view (the box keeping the rows in view in place).
 */
function sweepGone() {
  const anyone = looking();
  for (const tr of [...gone]) {
    const drop = tr.dataset.gone === 'dropped';
    if (!tr.isConnected) gone.delete(tr);
    else if (!anyone) out(tr, drop);
    else if (whereInView(tr) !== 'in') { gone.delete(tr); unmarkGone(tr); takeOut(tr, drop); }
  }
}

/** Says how many new rows wait above the rows shown ("Show" scrolls up to them). */
function tellAbove() {
  if ($('jobs-box').scrollTop <= 0) { above = 0; fresh = new WeakSet(); }
  $('jobs-new').hidden = above === 0;
  setText($('jobs-new'), `${above} new above: show`);
}

/**
 * Where a new row goes: newest first, by creation time (a job not read yet is newest). While
 * a person looks at the rows, the box scrolls by what the row adds above them, so they stay
 * where they were (the browser's own anchoring does nothing at the box's top, where new
 * rows arrive); otherwise the table shows its newest rows as they come.
 */
function placeRow(tr, job) {
  if (pressed) { heldRows.push([tr, job]); return; }
  const keep = looking() ? anchorRow(tr) : null;
  const created = Date.parse(job.created_at) || Infinity;
  const before = [...$('jobs-body').children].find((other) => {
    const theirs = Date.parse((state.jobs.get(other.dataset.jobId) || {}).created_at) || Infinity;
    return theirs < created || (theirs === created && other.dataset.jobId < job.job_id);
  });
  if (before) before.before(tr); else $('jobs-body').append(tr);
  if (keep) keep();
}

function buildRow(job) {
  const id = job.job_id;
  const open = el('button', { type: 'button', class: 'linklike mono', text: id.slice(0, 8),
    title: id, 'aria-label': `Open job ${id}` });
  open.addEventListener('click', () => openJob(id));
  const select = el('input', { type: 'checkbox', class: 'select', 'data-testid': 'job-select',
    'data-job-id': id, 'aria-label': `Select job ${id}` });
  const cell = (cls) => el('td', cls ? { class: cls } : {});
  const cells = {
    kind: cell('kind'), tenant: cell('tenant clip'), status: el('span', { class: 'badge' }), pct: cell('num pct'),
    step: cell('wide'), started: el('time', { class: 'rel' }), duration: cell('wide'), error: cell('clip err'),
  };
  const tr = el('tr', { 'data-testid': 'job-row', 'data-job-id': id },
    el('td', { class: 'id' }, select, open), cells.kind, cells.tenant,
    el('td', {}, cells.status), cells.pct, cells.step, el('td', { class: 'wide' }, cells.started),
    cells.duration, cells.error);
  const row = { tr, cells };
  rows.set(id, row);
  placeRow(tr, job);
  return row;
}

/** A clipped cell's text, whole in its title. */
function setClipped(cell, text) {
  setText(cell, text);
  if (cell.title !== text) cell.title = text;
}

function paintRow(job) {
  let row = rows.get(job.job_id);
  if (!row) {
    if (!job.kind || !matches(job)) return; // an event about a job not listed: its snapshot comes next
    row = buildRow(job);
  }
  const { tr, cells } = row;
  if (tr.dataset.status !== (job.status || '')) tr.dataset.status = job.status || '';
  setText(cells.kind, job.kind || '');
  setClipped(cells.tenant, job.tenant_id || '');
  setText(cells.status, job.status || '');
  const badge = `badge ${job.status || ''}`;
  if (cells.status.className !== badge) cells.status.className = badge;
  setText(cells.pct, job.percent == null ? '' : `${job.percent}`);
  setText(cells.step, job.step || '');
  if (job.started_at) setTime(cells.started, job.started_at);
  setText(cells.duration, job.started_at ? span(elapsed(job)) : '—');
  setClipped(cells.error, job.error || '');
  if (!matches(job)) takeOut(tr, false);
  else if (tr.hidden || gone.has(tr)) showAgain(tr);
  $('jobs-empty').hidden = rows.size > 0;
}

/** A row whose job matches the filters again: shown where it stands, the rows looked at kept
 * in place as for a new row. */
function showAgain(tr) {
  if (gone.delete(tr)) { unmarkGone(tr); return; }
  const keep = looking() ? anchorRow(tr) : null;
  tr.hidden = false;
  if (keep) keep();
}
onRedraw(paintRow);

/** Keeps the running rows' durations ticking, and takes out the rows nobody looks at any more. */
export function tickRows() {
  sweepGone();
  for (const [id, row] of rows) {
    const job = state.jobs.get(id);
    if (job && ACTIVE.has(job.status) && job.started_at) setText(row.cells.duration, span(elapsed(job)));
  }
}

/** Shows the rows the filters let through at once; the reload that follows may add more. */
function applyFilters() {
  for (const tr of [...gone]) out(tr, tr.dataset.gone === 'dropped');
  for (const [id, row] of rows) row.tr.hidden = !matches(state.jobs.get(id) || {});
  selectionChanged();
}

/** Tells the bulk actions the selection (or the rows it counts among) changed. */
const selectionChanged = () => document.dispatchEvent(new Event('jobs-selection'));

/** The ids of the jobs selected among the rows shown, newest first. */
export function selectedIds() {
  return [...$('jobs-body').querySelectorAll('tr:not([hidden]):not([data-gone]) [data-testid=job-select]:checked')]
    .map((box) => box.dataset.jobId);
}

/** Selects (or clears) every row shown. */
export function selectAllShown(on) {
  for (const box of $('jobs-body').querySelectorAll('tr:not([hidden]):not([data-gone]) [data-testid=job-select]')) box.checked = on;
  $('select-all').checked = on;
  selectionChanged();
}

/**
 * Reads the first page (or, with `cursor`, the next one) and learns every job on it; answers
 * the ids it listed.
 */
async function loadJobs(cursor) {
  const query = { limit: TABLE_LIMIT, cursor, ...filters() };
  const following = follower;
  const a = await api('GET', `/catalog/jobs?${q(query)}`);
  if (following !== follower) return new Set(); // the table follows another identity since
  if (a.status !== 200) { showError('Could not list jobs', a); return new Set(); }
  for (const job of a.body.jobs) learn(job);
  if (cursor) loadedMore = true;
  if (cursor || !loadedMore) nextCursor = a.body.next_cursor || null;
  $('jobs-load-more').hidden = !nextCursor;
  $('jobs-empty').hidden = rows.size > 0 || a.body.jobs.length > 0;
  return new Set(a.body.jobs.map((job) => job.job_id));
}

/**
 * Without a stream the poll reads only the first page, and a row that left it (newer jobs
 * came, or "Load more" showed it) would keep the status it had then for ever, and an ended
 * one would stay listed after its record expired (it could not be opened). So each poll
 * also reads the rows the page did not list and no stream of their own follows, the least
 * recently read first, at most STALE_READS of them, in one call (the listing's `ids`); a
 * job the answer leaves out is gone (its tenant deleted, or past its TTL) and leaves the table.
 */
async function readUnlisted(listed) {
  const following = follower;
  const stale = [...rows.keys()]
    .filter((id) => !listed.has(id) && !liveRows.has(id))
    .sort((a, b) => (lastRead.get(a) || 0) - (lastRead.get(b) || 0))
    .slice(0, STALE_READS);
  if (!stale.length) return;
  const now = Date.now();
  for (const id of stale) lastRead.set(id, now);
  const query = { tenant_id: state.tenant, ids: stale.join(','), limit: stale.length };
  const a = await api('GET', `/catalog/jobs?${q(query)}`).catch(() => null);
  if (following !== follower || !a || a.status !== 200 || !a.body) return;
  const found = new Set();
  for (const job of a.body.jobs) {
    found.add(job.job_id);
    learn(job);
  }
  for (const id of stale) if (!found.has(id)) dropRow(id);
}

function dropRow(id) {
  const row = rows.get(id);
  if (row) takeOut(row.tr, true);
  rows.delete(id);
  lastRead.delete(id);
  $('jobs-empty').hidden = rows.size > 0;
}

function caption(live) {
  $('jobs-table').dataset.follow = live ? 'stream' : 'poll';
  const every = `refreshed every ${TABLE_POLL_MS / 1000} s`;
  $('jobs-live').textContent = live ? 'Updated live'
    : state.tenant ? `No live stream here: ${every}`
      : `Every tenant: running jobs live (the newest ${LIVE_ROWS}), the list ${every}`;
}

/** Keeps one tenant's table live from its event stream; answers false when there is none. */
async function stream(ctl) {
  const url = `/catalog/events?${q({ tenant_id: state.tenant })}`;
  let streamed = false;
  while (!ctl.signal.aborted) {
    try {
      await readSse(url, {
        signal: ctl.signal,
        onOpen: () => {
          if (ctl.signal.aborted) return;
          streamed = true;
          caption(true);
          // What changed between the first read and the subscription: read the list again.
          loadJobs().catch(() => {});
        },
        onEvent: (e) => {
          const data = parse(e.data);
          if (e.type === 'resync') { loadJobs().then(readUnlisted).catch(() => {}); return; }
          if (!data || !data.job_id) return;
          learn({ job_id: data.job_id, ...pick(data) });
          const known = state.jobs.get(data.job_id);
          if (!known.created_at || !ACTIVE.has(data.status)) snapshot(data.job_id).catch(() => {});
        },
      });
    } catch {
      if (ctl.signal.aborted) return true;
      if (!streamed) return false;
    }
    await sleep(RECONNECT_MS, ctl.signal);
  }
  return true;
}

/** Follows one job's stream until it ends (or the table follows something else). */
async function followRow(id, ctl) {
  liveRows.add(id);
  try {
    await readSse(`/catalog/jobs/${encodeURIComponent(id)}/events`, {
      signal: ctl.signal,
      onOpen: () => { const row = rows.get(id); if (row) row.tr.dataset.follow = 'stream'; },
      onEvent: (e) => learn({ job_id: id, ...pick(parse(e.data) || {}) }),
    });
  } catch {
    // No stream, or it broke: the poll keeps the row current.
  } finally {
    liveRows.delete(id);
    const row = rows.get(id);
    if (row) delete row.tr.dataset.follow;
  }
}

/** Every-tenant mode: the newest running jobs listed get a stream each, up to LIVE_ROWS. */
function followRunning(ctl) {
  const running = [...$('jobs-body').children].map((tr) => state.jobs.get(tr.dataset.jobId))
    .filter((j) => j && ACTIVE.has(j.status) && !liveRows.has(j.job_id));
  for (const job of running.slice(0, Math.max(0, LIVE_ROWS - liveRows.size))) followRow(job.job_id, ctl);
}

/** Stops following the table and empties it: it shows nothing until it is followed again. */
export function stopJobs() {
  if (follower) follower.abort();
  follower = null;
  rows.clear();
  liveRows.clear();
  lastRead.clear();
  $('jobs-body').replaceChildren();
  gone.clear();
  heldRows.length = 0;
  above = 0;
  tellAbove();
  selectAllShown(false);
  nextCursor = null;
  loadedMore = false;
  $('jobs-load-more').hidden = true;
  $('jobs-empty').hidden = true;
  $('jobs-live').textContent = 'Loading…';
}

/** Follows the table: the tenant's stream, or a poll where there is none (or no tenant). */
export async function followJobs() {
  stopJobs();
  const ctl = new AbortController();
  follower = ctl;
  await loadJobs().catch(() => showError('Could not list jobs', null, true));
  if (ctl.signal.aborted) return;
  if (state.tenant && await stream(ctl)) return;
  if (ctl.signal.aborted) return;
  caption(false);
  while (!ctl.signal.aborted) {
    if (!state.tenant) followRunning(ctl);
    await sleep(TABLE_POLL_MS, ctl.signal);
    if (ctl.signal.aborted) break;
    const listed = await loadJobs().catch(() => null);
    if (listed && !ctl.signal.aborted) await readUnlisted(listed);
  }
}

/** The tenant picker's choices: the tenants with recent jobs whose id starts as typed. */
async function offerTenants() {
  const a = await api('GET', `/catalog/tenants?${q({ prefix: $('filter-tenant').value.trim(), limit: PICKER_LIMIT })}`)
    .catch(() => null);
  if (!a || a.status !== 200) return;
  const names = a.body.tenants.map((t) => t.tenant_id);
  const list = $('tenant-choices');
  const shown = [...list.children].map((o) => o.value);
  if (shown.join('\n') !== names.join('\n')) list.replaceChildren(...names.map((value) => el('option', { value })));
}

/** Across tenants only: the tenant filter and its picker (one tenant's table has its tenant). */
export function showTenantFilter() {
  $('tenant-filter').hidden = Boolean(state.tenant) || (state.may && state.may.list_every_tenant === false);
  if (!$('tenant-filter').hidden) offerTenants();
}

function refilter() {
  loadedMore = false;
  applyFilters();
  loadJobs().catch(() => {});
}

export function wireJobs() {
  holdWhilePressed();
  const box = $('jobs-box');
  box.addEventListener('pointerenter', () => { hovered = true; });
  box.addEventListener('pointerleave', () => { hovered = false; sweepGone(); });
  box.addEventListener('focusout', () => setTimeout(sweepGone, 0));
  box.addEventListener('scroll', tellAbove, { passive: true });
  $('jobs-new').addEventListener('click', () => { box.scrollTo({ top: 0 }); above = 0; tellAbove(); });
  for (const filter of ['filter-status', 'filter-kind']) $(filter).addEventListener('change', refilter);
  $('filter-tenant').addEventListener('change', () => { pickedTenant = $('filter-tenant').value.trim(); refilter(); });
  let typing = 0;
  $('filter-id').addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(refilter, TYPING_MS); });
  let picking = 0;
  $('filter-tenant').addEventListener('input', () => { clearTimeout(picking); picking = setTimeout(offerTenants, TYPING_MS); });
  $('jobs-load-more').addEventListener('click', () => {
    if (nextCursor) loadJobs(nextCursor).catch(() => showError('Could not list more jobs', null, true));
  });
  $('find-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = $('find-id').value.trim();
    if (id) openJob(id);
  });
}
