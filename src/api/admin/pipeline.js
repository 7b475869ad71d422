// "Sync, enrich and pair": a tenant's whole refresh in one request (POST /catalog/pipeline),
// and its live card — the pipeline's status and percent, then each step with its own bar,
// status and step. The pipeline is polled; its steps' progress also arrives by the tenant's
// event stream (jobs.js learns it), and each step's bar shows whichever is further along.

import {
  $, el, state, api, q, showError, clearError, needTenant, learn, merge, snapshot,
  onRedraw, setText, sleep, ACTIVE, progressBar, paintProgress,
} from './core.js';
import { openJob } from './job.js';

/** How often a running pipeline is read (its steps' statuses and percents). */
const POLL_MS = 500;

const cards = new Map(); // pipeline job_id -> its card
const stepOf = new Map(); // a step's job_id -> [its card, its index]

function stepRow(step) {
  const { progress, bar } = progressBar(step.kind, 'step-progress');
  const status = el('span', { class: 'badge', 'data-testid': 'step-status' });
  const words = el('span', { 'data-testid': 'step-words' });
  const node = el('li', { class: 'pipeline-step', 'data-testid': 'pipeline-step', 'data-kind': step.kind },
    el('div', { class: 'head' }, el('span', { text: step.kind }), status), progress,
    el('div', { class: 'meta' }, words));
  return { node, bar, progress, status, words, shown: -1, known: null };
}

function card(pipeline) {
  let c = cards.get(pipeline.job_id);
  if (c) return c;
  const open = el('button', { type: 'button', class: 'linklike', text: `refresh ${pipeline.job_id}` });
  open.addEventListener('click', () => openJob(pipeline.job_id));
  const status = el('span', { class: 'badge', 'data-testid': 'pipeline-status' });
  const percent = el('span', { 'data-testid': 'pipeline-percent' });
  const list = el('ol', { class: 'plain pipeline-steps' });
  const node = el('div', {
    class: 'job-card pipeline-card', 'data-testid': 'pipeline-card', 'data-job-id': pipeline.job_id,
    'data-kind': pipeline.kind,
  }, el('div', { class: 'head' }, open, status), el('div', { class: 'meta' }, percent), list);
  $('live').prepend(node);
  c = { node, status, percent, list, steps: [] };
  cards.set(pipeline.job_id, c);
  return c;
}

/** Learns what `incoming` says of step `i` of card `c` (never taking its progress back). */
function paintStep(c, i, incoming) {
  const s = c.steps[i];
  s.known = merge(s.known, incoming);
  const job = s.known;
  s.node.dataset.jobId = job.job_id;
  paintProgress(s, job);
  setText(s.words, job.step || '');
}

/** Draws a pipeline's snapshot: its own status and percent, and each of its steps. */
function paintPipeline(pipeline) {
  const c = card(pipeline);
  c.node.dataset.status = pipeline.status || '';
  setText(c.status, pipeline.status || '');
  c.status.className = `badge ${pipeline.status || ''}`;
  const why = pipeline.error ? ` — ${pipeline.error}` : '';
  setText(c.percent, `${Number(pipeline.percent) || 0}% ${pipeline.step || ''}${why}`);
  (pipeline.steps || []).forEach((step, i) => {
    if (!c.steps[i]) {
      c.steps[i] = stepRow(step);
      c.list.append(c.steps[i].node);
      stepOf.set(step.job_id, [c, i]);
    }
    paintStep(c, i, { job_id: step.job_id, kind: step.kind, status: step.status, percent: step.percent, step: step.step });
    const streamed = state.jobs.get(step.job_id);
    if (streamed) paintStep(c, i, streamed);
  });
}

// A step's events from the tenant's stream, and the pipeline's own merged snapshot.
onRedraw((job) => {
  const at = stepOf.get(job.job_id);
  if (at) paintStep(at[0], at[1], job);
  if (cards.has(job.job_id) && job.steps) paintPipeline(job);
});

const following = new Set(); // the pipelines being read

/**
 * Shows a pipeline's card and reads the pipeline until it ends, drawing each snapshot (any
 * view that starts, cancels or retries one lands here: live.js's `watch`). When the tenant's
 * stream told of its end first, one more read draws its steps' ends as the server composed
 * them: a step's own last events may have been missed (a `resync`), and the card never rests
 * on a step still running under a pipeline that ended.
 */
export async function followPipeline(pipeline) {
  const id = pipeline.job_id;
  learn(pipeline);
  paintPipeline(pipeline);
  if (following.has(id)) return;
  following.add(id);
  let read = pipeline; // its last snapshot read (null once it is gone)
  const { signal } = state.identity; // the tab taking another identity stops the reads
  for (;;) {
    const known = state.jobs.get(id) || pipeline;
    if (signal.aborted || !ACTIVE.has(known.status)) break;
    await sleep(POLL_MS, signal);
    if (signal.aborted) break;
    const a = await snapshot(id).catch(() => null);
    if (a && a.status === 404) { read = null; break; }
    if (a && a.status === 200) read = a.body;
  }
  if (!signal.aborted && read && ACTIVE.has(read.status)) await snapshot(id).catch(() => null);
  following.delete(id);
}

/** Forgets every pipeline's card (live.js takes them off the page). */
export function forgetPipelines() {
  cards.clear();
  stepOf.clear();
}

function sources() {
  return $('pipeline-source').value.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
}

async function start(button) {
  clearError();
  if (!needTenant()) return;
  button.disabled = true;
  try {
    const a = await api('POST', '/catalog/pipeline', q({ tenant_id: state.tenant, source: sources() }));
    if (a.status === 202 && a.body) followPipeline(a.body);
    else showError('Could not start the refresh', a);
  } catch {
    showError('Could not start the refresh', null, true);
  } finally {
    button.disabled = false;
  }
}

export function wirePipeline() {
  $('pipeline-form').addEventListener('submit', (e) => {
    e.preventDefault();
    start($('pipeline-form').querySelector('button'));
  });
}

