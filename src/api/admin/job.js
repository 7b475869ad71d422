// One job, opened: its facts (exact UTC times), parameters and result, a readable timeline
// (lifecycle events one a line, progress folded into one line per step, a small chart of
// percent over time), cancel and retry. `#job=<id>` in the address opens it, also on reload.

import {
  $, el, state, api, enc, showError, clearError, span, elapsed, utc, ago, ms, learn,
  onRedraw, tenantOf, ACTIVE, showPairWords,
} from './core.js';
import { watch, isWatched } from './live.js';

/** Shortest gap between two timeline reads of the open job while it changes. */
const TIMELINE_EVERY_MS = 1000;
const SVG = 'http://www.w3.org/2000/svg';
/** The percent chart's drawing box (the page scales it). */
const CHART_W = 300;
const CHART_H = 60;

let timelineReadAt = 0;
let timelineTimer = 0;
let opener = null; // what had the focus when the job was opened: it gets it back on Close

const may = (what) => !state.may || state.may[what] !== false;

/** Opens a job by id (any tenant the token may see) and keeps `#job=<id>` in the address. */
export async function openJob(id) {
  clearError();
  const a = await api('GET', `/catalog/jobs/${enc(id)}?${tenantOf(id)}`).catch(() => null);
  if (!a || a.status !== 200) { showError(`Could not open job ${id}`, a, !a); return; }
  state.openJob = id;
  if (location.hash !== `#job=${enc(id)}`) history.replaceState(null, '', `#job=${enc(id)}`);
  learn(a.body);
  paintJob(a.body);
  const view = $('job-view');
  if (view.hidden) opener = view.contains(document.activeElement) ? null : document.activeElement;
  view.hidden = false;
  view.scrollTop = 0;
  $('job-title').focus();
  await loadTimeline(id);
}

export function closeJob() {
  state.openJob = null;
  $('job-view').hidden = true;
  if (location.hash.startsWith('#job=')) history.replaceState(null, '', location.pathname + location.search);
  if (opener && opener.isConnected) opener.focus();
  opener = null;
}

export function openFromHash() {
  const m = /^#job=(.+)$/.exec(location.hash);
  if (m && decodeURIComponent(m[1]) !== state.openJob) openJob(decodeURIComponent(m[1]));
}

/** An exact UTC time with how long ago beside it, as the job view shows times. */
const exact = (at) => (at ? `${utc(at)} (${ago(at)})` : null);

function paintJob(job) {
  const view = $('job-view');
  view.dataset.jobId = job.job_id;
  view.dataset.status = job.status;
  $('job-title').textContent = `Job ${job.job_id}`;
  const facts = [
    ['Tenant', job.tenant_id], ['Kind', job.kind], ['Status', job.status], ['Percent', job.percent],
    ['Step', job.step], ['Error class', job.error], ['Created', exact(job.created_at)],
    ['Started', exact(job.started_at)], ['Finished', exact(job.finished_at)],
    ['Elapsed', span(elapsed(job))],
    ['ETA', ACTIVE.has(job.status) ? span(Number(job.eta_seconds)) : '—'],
    // Attempt 0: not run yet, or a pipeline (its steps run, each with its attempts).
    ['Attempt', job.attempt ? `${job.attempt} of ${job.max_attempts}` : null],
    ['Retry of', job.retry_of], ['Retried as', job.retried_as], ['Created by', job.created_by],
    ['Cancelled by', job.cancelled_by], ['Retried by', job.retried_by], ['Worker', job.worker],
  ];
  $('job-snapshot').replaceChildren(...facts.filter(([, v]) => v != null && v !== '')
    .flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
  $('job-params').textContent = JSON.stringify(job.params, null, 2);
  $('job-result').textContent = JSON.stringify(job.result, null, 2);
  showPairWords($('job-result-words'), job.kind === 'pair' ? job.result : null);
  $('cancel').hidden = !may('cancel') || !ACTIVE.has(job.status) || job.status === 'cancelling';
  $('retry').hidden = !may('retry') || ACTIVE.has(job.status);
}

// ---------------------------------------------------------------- the timeline

/** What a lifecycle event says, in words. */
function words(e) {
  switch (e.type) {
    case 'created': return `created${e.waiting_for ? `, waiting for job ${e.waiting_for}` : ''}`;
    case 'started': return `started${e.attempt ? ` (attempt ${e.attempt}` : ''}${e.worker ? ` on ${e.worker})` : e.attempt ? ')' : ''}`;
    case 'ready': return `ready: the job it waited for${e.after ? ` (${e.after})` : ''} ended`;
    case 'waiting': return `waiting for job ${e.waiting_for}`;
    case 'cancel_requested': return `cancel requested${e.by ? ` by ${e.by}` : ''}`;
    case 'released': return 'given back by a replica shutting down; queued again';
    case 'requeued': return e.attempt ? `its run (attempt ${e.attempt}) was lost; queued again for attempt ${Number(e.attempt) + 1}` : 'its run was lost; queued again';
    case 'lost': return 'its run was lost; no attempt left';
    case 'restored': return 'its record was written back by its run';
    case 'superseded': return `taken over by job ${e.superseded_by}`;
    case 'step_ended': return `step ${e.step_kind} (${e.step_job_id}) ended ${e.step_status}`;
    case 'finished': return `finished ${e.status}${e.error ? `: ${e.error}` : e.error_class ? `: ${e.error_class}` : ''}`;
    default: return e.type;
  }
}

/**
 * The timeline as lines: each lifecycle event on its own; a run of progress events of one
 * step folded into one line, from the percent before it to its last percent.
 */
export function fold(events) {
  const lines = [];
  let before = null; // the last event before the current step's run: where it started from
  for (const e of events) {
    const last = lines[lines.length - 1];
    if (e.type === 'progress') {
      if (last && last.type === 'progress' && last.step === e.step) {
        last.to = e.percent;
        last.end = e.at;
      } else {
        const from = before ? before.percent ?? 0 : 0;
        lines.push({ type: 'progress', step: e.step, from, to: e.percent, start: before ? before.at : e.at, end: e.at, at: e.at });
      }
    } else {
      lines.push({ type: e.type, at: e.at, text: words(e) });
    }
    before = e;
  }
  for (const l of lines) {
    if (l.type === 'progress') l.text = `${l.step || 'working'} — ${l.from} → ${l.to} % in ${span((ms(l.end) - ms(l.start)) / 1000)}`;
  }
  return lines;
}

/** A small chart of percent over time, from every event that carries a percent. */
function chart(events) {
  const points = events.filter((e) => e.percent != null && Number.isFinite(ms(e.at)));
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${CHART_W} ${CHART_H}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('data-testid', 'percent-chart');
  svg.setAttribute('role', 'img');
  if (points.length < 2) {
    svg.setAttribute('aria-label', 'no progress yet');
    return svg;
  }
  const [t0, t1] = [ms(points[0].at), ms(points[points.length - 1].at)];
  const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * CHART_W : 0);
  const y = (p) => CHART_H - (Math.max(0, Math.min(100, p)) / 100) * CHART_H;
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', points.map((e) => `${x(ms(e.at)).toFixed(1)},${y(e.percent).toFixed(1)}`).join(' '));
  const last = points[points.length - 1];
  svg.setAttribute('aria-label', `percent over time: ${points[0].percent} → ${last.percent} % in ${span((t1 - t0) / 1000)}`);
  svg.append(line);
  return svg;
}

async function loadTimeline(id) {
  timelineReadAt = Date.now();
  const list = $('job-timeline');
  const a = await api('GET', `/catalog/jobs/${enc(id)}/events?${tenantOf(id)}`).catch(() => null);
  if (state.openJob !== id) return;
  if (!a || a.status !== 200 || !a.body || !Array.isArray(a.body.events)) {
    list.replaceChildren(el('li', { class: 'help', text: 'This service keeps no timeline for the job.' }));
    return;
  }
  const events = a.body.events;
  $('job-chart').replaceChildren(chart(events));
  list.replaceChildren(...fold(events).map((l) => {
    const when = Number.isFinite(ms(l.at)) ? new Date(ms(l.at)).toISOString().slice(11, 19) : '';
    return el('li', { 'data-testid': 'timeline-line', 'data-type': l.type },
      el('time', { class: 'mono', dateTime: when ? new Date(ms(l.at)).toISOString() : '', title: utc(l.at), text: `${when} UTC` }),
      ' ', el('span', { text: l.text }));
  }));
}

/** Redraws the open job when it changes, and re-reads its timeline at most once a second. */
function refreshOpenJob(job) {
  if (state.openJob !== job.job_id) return;
  if (job.created_at) paintJob(job);
  if (timelineTimer) return;
  const wait = Math.max(0, timelineReadAt + TIMELINE_EVERY_MS - Date.now());
  timelineTimer = setTimeout(() => {
    timelineTimer = 0;
    if (state.openJob === job.job_id) loadTimeline(job.job_id).catch(() => {});
  }, wait);
}
onRedraw(refreshOpenJob);

async function cancelOpenJob() {
  const id = state.openJob;
  const dialog = $('confirm');
  $('confirm-title').textContent = 'Cancel this job?';
  $('confirm-text').textContent = `Job ${id} will stop at its next safe point; what it did so far stays in its report.`;
  $('confirm-yes').textContent = 'Cancel the job';
  dialog.returnValue = '';
  dialog.showModal();
  const answer = await new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue), { once: true }));
  if (answer !== 'yes') return;
  const a = await api('POST', `/catalog/jobs/${enc(id)}/cancel?${tenantOf(id)}`).catch(() => null);
  if (a && a.status === 202) { learn(a.body); if (!isWatched(id)) watch(a.body); } else showError('Could not cancel', a, !a);
}

async function retryOpenJob() {
  clearError();
  const id = state.openJob;
  const a = await api('POST', `/catalog/jobs/${enc(id)}/retry?${tenantOf(id)}`).catch(() => null);
  if (a && a.status === 202 && a.body) { watch(a.body); openJob(a.body.job_id); } else showError('Could not retry', a, !a);
}

export function wireJob() {
  $('cancel').addEventListener('click', cancelOpenJob);
  $('retry').addEventListener('click', retryOpenJob);
  $('close-job').addEventListener('click', closeJob);
  $('job-view').addEventListener('keydown', (e) => { if (e.key === 'Escape') closeJob(); });
  window.addEventListener('hashchange', openFromHash);
}

