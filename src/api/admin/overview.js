// The overview: the whole service at a glance, from `GET /catalog/stats` — active jobs by
// status and kind, jobs finished in the last hour and day by outcome, a chart of jobs
// finished per minute, the queue, and the live processes with the jobs each runs.

import { $, el, state, api, setText, setTime, span, utc, count } from './core.js';
import { openJob } from './job.js';

/** How often the overview is read again while the page is open. */
const OVERVIEW_POLL_MS = 5000;
const SVG = 'http://www.w3.org/2000/svg';
const ACTIVE_STATUSES = ['queued', 'running', 'cancelling', 'lost'];
const OUTCOMES = ['done', 'failed', 'cancelled'];
const WINDOWS = [['1h', 'last_hour', 'Last hour'], ['24h', 'last_day', 'Last 24 h']];
/** The throughput chart's drawing box (the page scales it). */
const CHART_W = 600;
const CHART_H = 80;

let timer = 0;
let turn = 0; // the overview's current following: a read begun for an earlier one shows nothing

/** A table cell holding one figure: its text grouped for reading, `data-value` the number. */
function numberCell(n, attrs) {
  return el('td', { class: 'num' }, el('span', { text: count(n), 'data-value': String(n ?? 0), 'data-testid': 'overview-count', ...attrs }));
}

/** Shows the figure `n` in `node`: grouped for reading, the number itself in `data-value`. */
function setCount(node, n) {
  node.dataset.value = String(n ?? 0);
  setText(node, count(n));
}

/** What a figure of the page's (index.html: its window and status) counts in `stats`. */
function figure(stats, windowName, status) {
  if (windowName === 'active') {
    const active = stats.active || {};
    return status ? (active.by_status || {})[status] : active.total;
  }
  const [, key] = WINDOWS.find(([name]) => name === windowName) || [];
  const w = (stats.finished || {})[key] || {};
  return status ? (w.by_outcome || {})[status] : w.total;
}

function figures(stats) {
  // The figures stand in the page from its first paint: a read only changes their numbers.
  for (const n of $('overview-figures').querySelectorAll('.n')) {
    setCount(n, figure(stats, n.dataset.window, n.dataset.status));
  }
  const active = stats.active || {};
  const rows = [];
  for (const [windowName, key, label] of WINDOWS) {
    const w = (stats.finished || {})[key] || {};
    for (const [kind, byOutcome] of Object.entries(w.by_kind || {})) {
      rows.push(el('tr', {}, el('th', { scope: 'row', text: kind }), el('td', { text: label }),
        ...OUTCOMES.map((o) => numberCell(byOutcome[o], { 'data-window': windowName, 'data-kind': kind, 'data-status': o }))));
    }
  }
  const activeRows = Object.entries(active.by_kind || {}).map(([kind, byStatus]) =>
    el('tr', {}, el('th', { scope: 'row', text: kind }),
      ...ACTIVE_STATUSES.map((s) => numberCell(byStatus[s], { 'data-window': 'active', 'data-kind': kind, 'data-status': s }))));
  $('overview-active-kinds').replaceChildren(...activeRows);
  $('overview-kinds').replaceChildren(...rows);
}

/** Jobs finished per minute over the last hour, failures and cancellations stacked. */
function throughput(minutes) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${CHART_W} ${CHART_H}`);
  svg.setAttribute('class', 'chart wide-chart');
  svg.setAttribute('role', 'img');
  const most = Math.max(1, ...minutes.map((m) => OUTCOMES.reduce((n, o) => n + (m[o] || 0), 0)));
  const w = CHART_W / Math.max(1, minutes.length);
  let total = 0;
  minutes.forEach((m, i) => {
    let y = CHART_H;
    for (const o of OUTCOMES) {
      const n = m[o] || 0;
      total += n;
      if (!n) continue;
      const h = (n / most) * CHART_H;
      y -= h;
      const bar = document.createElementNS(SVG, 'rect');
      for (const [k, v] of [['x', i * w + 0.5], ['y', y], ['width', Math.max(1, w - 1)], ['height', h], ['class', o]]) bar.setAttribute(k, String(v));
      const title = document.createElementNS(SVG, 'title');
      title.textContent = `${m.minute}: ${count(n)} ${o}`;
      bar.append(title);
      svg.append(bar);
    }
  });
  svg.setAttribute('aria-label', `${count(total)} jobs finished in the last hour; at most ${count(most)} in a minute`);
  // The chart's scale in words: its bars are drawn to the busiest minute's height.
  setText($('throughput-words'), total ? `${count(total)} in the hour; the tallest bar ${count(most)} a minute` : 'none in the hour');
  const box = $('throughput');
  box.dataset.total = String(total);
  box.replaceChildren(svg);
}

const processRows = new Map(); // worker -> {tr, host, started, heartbeat, silent, jobs, items}

/** A process's row, built once: later reads change only its cells' text. */
function processRow(p) {
  const cell = (cls) => el('td', cls ? { class: cls } : {});
  const row = {
    host: cell('wide'), started: el('time', { class: 'rel' }), heartbeat: el('time', { class: 'rel' }),
    silent: el('span', { class: 'silent', 'data-testid': 'process-silent', hidden: true }),
    jobs: el('ul', { class: 'plain' }), items: new Map(),
  };
  row.tr = el('tr', { 'data-testid': 'process-row', 'data-worker': p.worker },
    el('td', { class: 'mono', text: p.worker }), row.host, el('td', { class: 'wide' }, row.started),
    el('td', {}, row.heartbeat, row.silent), el('td', {}, row.jobs));
  processRows.set(p.worker, row);
  return row;
}

/** A job a process runs: its button (built once) and a line of text kept current. */
function jobItem(row, j) {
  let item = row.items.get(j.job_id);
  if (!item) {
    const b = el('button', { type: 'button', class: 'linklike', text: `${j.kind} ${j.job_id.slice(0, 8)}`, title: j.job_id });
    b.addEventListener('click', () => openJob(j.job_id));
    item = { li: el('li', { 'data-job-id': j.job_id }, b, el('span')) };
    row.items.set(j.job_id, item);
  }
  setText(item.li.lastChild, ` ${j.tenant_id} · ${j.status} ${j.percent ?? 0} % · ${j.step || ''}`);
  return item.li;
}

/**
 * Marks a process that stopped beating (the service's `answering`: a missed run of
 * heartbeats) and says since when; it stays listed, marked, until its entry goes stale.
 */
function silent(row, p) {
  const answering = p.answering !== false;
  row.tr.dataset.answering = String(answering);
  row.heartbeat.hidden = !answering;
  row.silent.hidden = answering;
  // The time of day only (the exact UTC time on hover): the cell stays one line.
  setText(row.silent, answering ? '' : `not answering since ${utc(p.heartbeat_at).slice(11)}`);
  row.silent.title = answering ? '' : `Last heartbeat ${utc(p.heartbeat_at)}`;
}

/** Puts `nodes` in `parent` in this order, moving only what is out of place. */
function arrange(parent, nodes) {
  nodes.forEach((node, i) => {
    if (parent.children[i] !== node) parent.insertBefore(node, parent.children[i] || null);
  });
  while (parent.children.length > nodes.length) parent.lastChild.remove();
}

/** A setting's length of time: under a second as given (`0.2 s`), else as `span` says it. */
const interval = (seconds) => (seconds > 0 && seconds < 1 ? `${seconds} s` : span(seconds));

/** The processes, each row updated in place: a redraw never replaces the button under the pointer. */
function processes(list, stats) {
  const seen = new Set(list.map((p) => p.worker));
  for (const worker of [...processRows.keys()]) if (!seen.has(worker)) processRows.delete(worker);
  const trs = list.map((p) => {
    const row = processRows.get(p.worker) || processRow(p);
    setText(row.host, p.host || '');
    setTime(row.started, p.started_at);
    setTime(row.heartbeat, p.heartbeat_at);
    silent(row, p);
    const running = new Set((p.jobs || []).map((j) => j.job_id));
    for (const id of [...row.items.keys()]) if (!running.has(id)) row.items.delete(id);
    const items = (p.jobs || []).map((j) => jobItem(row, j));
    arrange(row.jobs, items.length ? items : [row.idle || (row.idle = el('li', { class: 'help', text: 'idle' }))]);
    return row.tr;
  });
  arrange($('processes-body'), trs);
  setText($('processes-help'), list.length
    ? `A process beats every ${interval(stats.heartbeat_seconds)}; it reads "not answering" once its last heartbeat is`
      + ` ${interval(stats.not_answering_after_seconds)} old, and leaves this list ${interval(stats.stale_after_seconds)} after it.`
    : 'No process is running jobs.');
}

/** Answers the overview may not show for this token or service: it is hidden, not retried. */
const REFUSED = new Set([401, 403, 404]);

/**
 * Says the last read failed (the store or the service out of reach), keeping the last
 * figures, dimmed, and the time they were read: an overview that vanished, or went on
 * showing figures as if current, would mislead an operator during an outage.
 */
function unread(a) {
  const section = $('overview');
  const why = a ? `the service answered ${a.status}${a.body && a.body.error ? ` (${a.body.error})` : ''}` : 'the service did not answer';
  const since = section.dataset.unreadSince || (section.dataset.unreadSince = new Date().toISOString());
  const asOf = section.dataset.readAt ? `; figures as of ${utc(section.dataset.readAt).slice(11)}` : '';
  section.dataset.stale = 'true';
  setText($('overview-state'), `not current: ${why} since ${utc(since).slice(11)}${asOf}`);
}

/** Reads the overview once; answers whether to go on reading it. */
async function loadOverview(mine) {
  const a = await api('GET', '/catalog/stats').catch(() => null);
  if (mine !== turn) return false;
  const section = $('overview');
  if (a && REFUSED.has(a.status)) {
    // A service without the overview, or refusing it to this token (a tenant's token never asks: admin.js).
    section.hidden = true;
    return false;
  }
  if (!a || a.status !== 200 || !a.body) {
    unread(a);
    return true;
  }
  const stats = a.body;
  section.hidden = false;
  section.dataset.readAt = stats.at || ''; // the service's clock at this read
  delete section.dataset.stale;
  delete section.dataset.unreadSince;
  setText($('overview-state'), '');
  figures(stats);
  throughput(stats.throughput || []);
  const queue = stats.queue || {};
  setCount($('queue-depth'), queue.depth);
  // Queued behind the tenant's running job: not in the ready queue until it ends.
  setCount($('queue-waiting'), queue.waiting);
  setText($('queue-oldest'), queue.oldest_wait_seconds == null ? 'nothing waits'
    : `the oldest has waited ${span(queue.oldest_wait_seconds)}`);
  processes(stats.processes || [], stats);
  return true;
}

/** Shows the overview (when the token may read it) and keeps it current. */
export async function followOverview() {
  stopOverview();
  const mine = turn;
  if (state.may && state.may.stats === false) { $('overview').hidden = true; return; }
  if (!(await loadOverview(mine))) return;
  const again = async () => {
    if (await loadOverview(mine)) timer = setTimeout(again, OVERVIEW_POLL_MS);
  };
  timer = setTimeout(again, OVERVIEW_POLL_MS);
}

/** Stops reading the overview (a read under way shows nothing). */
export function stopOverview() {
  clearTimeout(timer);
  turn += 1;
}

/** Stops reading the overview and blanks what it showed (the figures back to their dash, as
 * at the first paint): what an earlier token read is not shown to the next one. */
export function forgetOverview() {
  stopOverview();
  for (const n of $('overview-figures').querySelectorAll('.n')) setText(n, '—');
  for (const id of ['overview-active-kinds', 'overview-kinds', 'processes-body', 'throughput']) $(id).replaceChildren();
  setText($('throughput-words'), '—');
  setText($('overview-state'), '');
  processRows.clear();
  for (const key of ['readAt', 'stale', 'unreadSince']) delete $('overview').dataset[key];
}
