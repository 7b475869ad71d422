// Bulk actions on the jobs table: retry the selected ended jobs, cancel the selected active
// ones (select them one by one, or every job shown with the box in the table's head); or,
// beyond the rows shown, retry every failed job the filters match, or cancel every active
// job of the tenant picked. A confirmation states how many jobs the action touches (counted
// by the service for the last two); the answer says what was done, and why any job was
// skipped, and what is left when the page had to stop.

import { $, el, state, headers, showError, clearError, snapshot, ACTIVE, count } from './core.js';
import { selectedIds, selectAllShown, filters } from './jobs.js';

/** The most jobs one call acts on (`BULK_MAX` on the service): more are sent in turns. */
const BULK_MAX = 100;

const ACTIONS = {
  retry: {
    path: '/catalog/bulk/retry', verb: 'Retry', doing: 'Retrying', which: (j) => j && !ACTIVE.has(j.status),
    each: 'Each runs again as a new job.',
  },
  cancel: {
    path: '/catalog/bulk/cancel', verb: 'Cancel', doing: 'Cancelling', which: (j) => j && ACTIVE.has(j.status),
    each: 'Each stops at its next safe point and keeps what it saved.',
  },
};

const plural = (n, one) => `${count(n)} ${one}${n === 1 ? '' : 's'}`;
const may = (what) => !state.may || state.may[what] !== false;

/** The selected jobs an action applies to (ended ones to retry, active ones to cancel). */
const targets = (kind) => selectedIds().filter((id) => ACTIONS[kind].which(state.jobs.get(id)));

/** The statuses the "every failed job" retry agrees with: it retries failed jobs only. */
const RETRY_ALL_STATUSES = new Set(['', 'failed']);

/**
 * Every job an action may touch beyond the rows shown: its body (the filters as the service
 * names them, or the tenant), and how the confirmation names `n` of them.
 */
const WHOLE = {
  retry: () => {
    const f = filters();
    const filter = {};
    for (const field of ['tenant_id', 'kind', 'id_prefix']) if (f[field]) filter[field] = f[field];
    const words = [f.tenant_id ? `tenant ${f.tenant_id}` : 'every tenant, among the newest 10,000 jobs',
      ...(f.kind ? [`kind ${f.kind}`] : []), ...(f.id_prefix ? [`id starting ${f.id_prefix}`] : [])];
    return { body: { filter }, what: (n) => `${plural(n, 'failed job')} matching the filter (${words.join(', ')})` };
  },
  cancel: () => {
    const tenant = filters().tenant_id;
    return { body: { tenant_id: tenant }, what: (n) => `${plural(n, 'active job')} of tenant ${tenant}` };
  },
};

/** Shows the bulk bar to tokens that may act, with the counts each action would touch. */
export function selectionChanged() {
  const shown = may('bulk');
  $('bulk').hidden = !shown;
  if (!shown) return;
  const chosen = selectedIds().length;
  const retry = targets('retry').length;
  const cancel = targets('cancel').length;
  $('bulk-retry').textContent = `Retry ${plural(retry, 'ended job')}…`;
  $('bulk-cancel').textContent = `Cancel ${plural(cancel, 'active job')}…`;
  $('bulk-retry').disabled = retry === 0;
  $('bulk-cancel').disabled = cancel === 0;
  const { status, tenant_id: tenant } = filters();
  $('bulk-retry-all').disabled = !RETRY_ALL_STATUSES.has(status);
  $('bulk-retry-all').title = $('bulk-retry-all').disabled ? 'Set Status to any or failed: this retries failed jobs' : '';
  $('bulk-cancel-tenant').disabled = !tenant;
  $('bulk-cancel-tenant').textContent = tenant ? `Cancel every active job of ${tenant}…` : 'Cancel a tenant\'s jobs… (pick a tenant)';
  $('bulk-cancel-tenant').title = $('bulk-cancel-tenant').textContent; // clipped to its width
  for (const id of ['bulk-retry', 'bulk-retry-all']) $(id).hidden = !may('retry');
  for (const id of ['bulk-cancel', 'bulk-cancel-tenant']) $(id).hidden = !may('cancel');
  $('bulk-count').textContent = chosen ? `${plural(chosen, 'job')} selected` : 'Select jobs with the boxes in the table';
}

/** Asks before acting, stating how many jobs the action touches; answers whether to go on. */
function confirmed(text, yes) {
  const dialog = $('bulk-confirm');
  $('bulk-confirm-text').textContent = text;
  $('bulk-yes').textContent = yes;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true });
  });
}

/** One call; answers {status, body} (null body unless a 200's), or null when the network failed. */
async function call(action, body, key) {
  const init = {
    method: 'POST', cache: 'no-store',
    headers: headers({ 'Content-Type': 'application/json', ...(key ? { 'Idempotency-Key': key } : {}) }),
    body: JSON.stringify(body),
  };
  return fetch(action.path, init)
    .then(async (r) => ({ status: r.status, headers: r.headers, body: await r.json().catch(() => null) }))
    .catch(() => null);
}

const answered = (a) => a && a.status === 200 && a.body;

/** Says what the action did: how many were done and skipped, why each skip happened, and `left`. */
function report(action, results, left = '') {
  const skipped = results.filter((r) => r.outcome === 'skipped');
  const done = results.length - skipped.length;
  const box = $('bulk-result');
  box.replaceChildren(el('p', { text: `${action.verb}: ${plural(done, 'job')} done, ${count(skipped.length)} skipped.${left}` }),
    ...(skipped.length ? [el('ul', {}, ...skipped.map((r) => el('li', {
      'data-testid': 'bulk-skip', text: `${r.job_id.slice(0, 8)}: ${r.message || r.reason}`,
    })))] : []));
  box.hidden = false;
}

/** Shows how far an action spanning several calls has come. */
function progress(action, done, of) {
  $('bulk-result').replaceChildren(el('p', { text: `${action.doing}… ${count(done)} of ${plural(of, 'job')} done so far` }));
  $('bulk-result').hidden = false;
}

async function run(kind) {
  clearError();
  const action = ACTIONS[kind];
  const ids = targets(kind);
  if (!ids.length) return;
  const what = plural(ids.length, 'job');
  if (!await confirmed(`${action.verb} ${what}? ${action.each}`, `${action.verb} ${what}`)) return;
  $('bulk-result').hidden = true;
  const results = [];
  for (let i = 0; i < ids.length; i += BULK_MAX) {
    // A key per call: sent again after a failure, the service answers what it did the first time.
    const a = await call(action, { job_ids: ids.slice(i, i + BULK_MAX) }, crypto.randomUUID());
    if (!answered(a)) {
      showError(`Could not ${kind} the selected jobs`, a, !a);
      break;
    }
    results.push(...a.body.results);
  }
  report(action, results);
  for (const r of results) if (r.new_job_id) snapshot(r.new_job_id).catch(() => {});
  selectAllShown(false);
}

/**
 * Every job the filter (retry) or the tenant (cancel) selects, the rows shown or not: the
 * service counts them first, the confirmation says how many and in how many calls, then the
 * calls follow `more` until none is left, or a call does nothing (each job left was skipped,
 * and says why), or a call fails — then the result says how many are left.
 */
async function runAll(kind) {
  clearError();
  const action = ACTIONS[kind];
  const whole = WHOLE[kind]();
  const counted = await call(action, { ...whole.body, dry_run: true });
  if (!answered(counted)) { showError(`Could not count the jobs to ${kind}`, counted, !counted); return; }
  const n = counted.body.matched;
  if (!n) { report(action, [], ` Nothing to ${kind}: no ${whole.what(n).slice(2)}.`); return; }
  const calls = Math.ceil(n / BULK_MAX);
  const beyond = n > BULK_MAX ? ` That is more than one call's worth (${BULK_MAX} jobs a call): the page sends ${calls} calls or so, one after another, until every one is done.` : '';
  if (!await confirmed(`${action.verb} ${whole.what(n)}? ${action.each}${beyond}`, `${action.verb} ${plural(n, 'job')}`)) return;
  // Later calls act on no job newer than those counted: a retry that fails again meanwhile
  // is not retried in turn.
  if (counted.body.until && whole.body.filter) whole.body.filter.until = counted.body.until;
  const byId = new Map(); // the last word on each job: a job skipped once may be done later
  let [done, left, more] = [0, n, true];
  while (more) {
    const a = await call(action, whole.body, crypto.randomUUID());
    if (!answered(a)) { showError(`Could not ${kind} every job; ${count(left)} may be left`, a, !a); break; }
    for (const r of a.body.results) byId.set(r.job_id, r);
    done += a.body.done;
    left = a.body.matched - a.body.done;
    more = a.body.more && a.body.done > 0;
    if (a.body.more) progress(action, done, done + left);
  }
  const stopped = more || left > 0 ? ` ${plural(left, 'job')} left: press again to go on, once what stops them is mended.` : '';
  report(action, [...byId.values()], stopped);
}

/** Takes the last action's result line off the page (its jobs were another identity's). */
export function forgetResult() {
  $('bulk-result').replaceChildren();
  $('bulk-result').hidden = true;
}

export function wireBulk() {
  $('bulk-retry').addEventListener('click', () => run('retry'));
  $('bulk-cancel').addEventListener('click', () => run('cancel'));
  $('bulk-retry-all').addEventListener('click', () => runAll('retry'));
  $('bulk-cancel-tenant').addEventListener('click', () => runAll('cancel'));
  $('select-all').addEventListener('change', (e) => selectAllShown(e.target.checked));
  $('jobs-body').addEventListener('change', selectionChanged);
  document.addEventListener('jobs-selection', selectionChanged);
  selectionChanged();
}
