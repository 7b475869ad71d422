// Starting jobs, and the live card of each job started here: a progress bar fed by the
// job's event stream (or a poll where there is none), its step, elapsed time and ETA.

import {
  $, el, state, api, q, enc, showError, clearError, needTenant, span, elapsed, readSse,
  parse, sleep, pick, learn, snapshot, onRedraw, setText, ACTIVE, showPairWords, progressBar,
  paintProgress,
} from './core.js';
import { openJob } from './job.js';
import { followPipeline, forgetPipelines } from './pipeline.js';

/** How often a job is polled when its event stream is not available. */
const POLL_MS = 1000;
/** Shortest gap between two snapshot reads of one job while its stream runs (for the ETA). */
const SNAPSHOT_EVERY_MS = 1000;
/** Reconnections of a job's stream before falling back to polling. */
const STREAM_RETRIES = 3;

const watched = new Map(); // job_id -> its card
/** What the report box says before a pair's report is shown there (index.html). */
const REPORT_NOTE = $('report').textContent;

function card(job) {
  let w = watched.get(job.job_id);
  if (w) return w;
  const { progress, bar } = progressBar(job.kind, 'job-progress');
  const status = el('span', { class: 'badge' });
  const step = el('span', { 'data-testid': 'job-step' });
  const time = el('span');
  const eta = el('span');
  const open = el('button', { type: 'button', class: 'linklike', text: `${job.kind} ${job.job_id}` });
  open.addEventListener('click', () => openJob(job.job_id));
  const node = el('div', { class: 'job-card', 'data-job-id': job.job_id, 'data-kind': job.kind },
    el('div', { class: 'head' }, open, status),
    progress,
    el('div', { class: 'meta' }, step, time, eta));
  $('live').prepend(node);
  w = { node, bar, progress, status, step, time, eta, lastId: null, lastRead: 0, shown: -1 };
  watched.set(job.job_id, w);
  return w;
}

function paintCard(job) {
  const w = watched.get(job.job_id);
  if (!w) return;
  paintProgress(w, job);
  const step = job.error ? `${job.step || ''} — ${job.error}` : job.step || '';
  setText(w.step, step);
  if (w.step.title !== step) w.step.title = step; // the line is clipped: the whole of it on hover
  setText(w.time, `elapsed ${span(elapsed(job))}`);
  const active = ACTIVE.has(job.status);
  const eta = !active ? '—' : job.eta_seconds == null ? 'estimating' : span(Number(job.eta_seconds));
  setText(w.eta, `ETA ${eta}`);
}
onRedraw(paintCard);

/** Keeps the elapsed clocks of running cards ticking. */
export function tickCards() {
  for (const id of watched.keys()) {
    const job = state.jobs.get(id);
    if (job && ACTIVE.has(job.status)) paintCard(job);
  }
}

export const isWatched = (id) => watched.has(id);
const statusOf = (id) => (state.jobs.get(id) || {}).status;

/** Follows a job to its end: its event stream when there is one, else a poll. */
export async function watch(job) {
  if (job.steps) return followPipeline(job); // a pipeline: a card with a bar per step
  const w = card(job);
  learn(job);
  const id = job.job_id;
  const url = `/catalog/jobs/${enc(id)}/events`;
  const { signal } = state.identity; // the tab taking another identity stops the following
  let failures = 0;
  // At least one read, even of a job another view has already seen end: its timeline.
  do {
    let heard = false;
    try {
      const how = await readSse(url, {
        lastId: w.lastId,
        signal,
        onEvent: (e) => {
          heard = true;
          w.node.dataset.follow = 'stream';
          if (e.id) w.lastId = e.id;
          learn({ job_id: id, ...pick(parse(e.data) || {}) });
          if (Date.now() - w.lastRead > SNAPSHOT_EVERY_MS || e.type === 'finished') {
            w.lastRead = Date.now();
            snapshot(id).catch(() => {});
          }
        },
      });
      if (how === 'ended' || signal.aborted || !ACTIVE.has(statusOf(id))) break;
      // Closed before the end: resume after the last event seen.
      failures = heard ? 0 : failures + 1;
    } catch {
      failures = STREAM_RETRIES; // no stream here: poll instead
    }
  } while (failures < STREAM_RETRIES && ACTIVE.has(statusOf(id)));
  if (failures >= STREAM_RETRIES) w.node.dataset.follow = 'poll';
  while (!signal.aborted && ACTIVE.has(statusOf(id))) {
    const a = await snapshot(id).catch(() => null);
    if (a && a.status === 404) break;
    await sleep(POLL_MS, signal);
  }
  if (!signal.aborted) await snapshot(id).catch(() => {});
}

/** Takes off the starts card what the tab's last identity put there: the cards of the jobs it
 * started (watch stops following them) and the pair's report. */
export function forgetStarts() {
  watched.clear();
  forgetPipelines();
  $('live').replaceChildren();
  $('report').textContent = REPORT_NOTE;
  $('report-words').hidden = true;
}

async function start(kind, fields, button) {
  clearError();
  if (!needTenant()) return null;
  button.disabled = true;
  try {
    const a = await api('POST', `/catalog/${kind}`, q({ tenant_id: state.tenant, ...fields }));
    if (a.status === 202 && a.body) { watch(a.body); return a; }
    if (a.status === 200) return a;
    showError(`Could not start ${kind}`, a);
    return a;
  } catch {
    showError(`Could not start ${kind}`, null, true);
    return null;
  } finally {
    button.disabled = false;
  }
}

function sources() {
  return $('sync-source').value.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
}

function showReport(report) {
  $('report').textContent = JSON.stringify(report, null, 2);
  showPairWords($('report-words'), report);
}

export function wireStarts() {
  $('sync-form').addEventListener('submit', (e) => {
    e.preventDefault();
    start('sync', { source: sources() }, $('sync-form').querySelector('button'));
  });
  $('enrich-form').addEventListener('submit', (e) => {
    e.preventDefault();
    start('enrich', $('enrich-force').checked ? { force: 'true' } : {}, $('enrich-form').querySelector('button'));
  });
  $('pair-form').addEventListener('submit', (e) => {
    e.preventDefault();
    start('pair', {}, $('pair-form').querySelector('button[type=submit]'));
  });
  $('pair-wait').addEventListener('click', async () => {
    $('report').textContent = 'Waiting for the pair to end…';
    $('report-words').hidden = true;
    const { signal } = state.identity;
    const a = await start('pair', { wait: 'true' }, $('pair-wait'));
    if (signal.aborted) return; // another identity since: not its report
    if (a && a.status === 200) showReport(a.body);
    else if (a && a.status === 202) $('report').textContent = 'Still running: follow it above.';
    else $('report').textContent = 'No report: the pair did not end here (the message says why).';
  });
}
