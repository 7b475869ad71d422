// Bulk actions on the jobs table: retry the selected ended jobs, cancel the selected active
// ones (select them one by one, or every job shown with the box in the table's head: filter
// the table first to act on, say, a tenant's failed jobs). A confirmation states how many
// jobs the action touches; the answer says what was done, and why any job was skipped.

import { $, el, state, headers, showError, clearError, snapshot, ACTIVE } from './core.js';
import { selectedIds, selectAllShown } from './jobs.js';

/** The most jobs one call acts on (`BULK_MAX` on the service): more are sent in turns. */
const BULK_MAX = 100;

const ACTIONS = {
  retry: {
    path: '/catalog/bulk/retry', verb: 'Retry', which: (j) => j && !ACTIVE.has(j.status),
    ask: (what) => `Retry ${what}? Each runs again as a new job.`,
  },
  cancel: {
    path: '/catalog/bulk/cancel', verb: 'Cancel', which: (j) => j && ACTIVE.has(j.status),
    ask: (what) => `Cancel ${what}? Each stops at its next safe point and keeps what it saved.`,
  },
};

const plural = (n, one) => `${n} ${one}${n === 1 ? '' : 's'}`;
const may = (what) => !state.may || state.may[what] !== false;

/** The selected jobs an action applies to (ended ones to retry, active ones to cancel). */
const targets = (kind) => selectedIds().filter((id) => ACTIONS[kind].which(state.jobs.get(id)));

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
  $('bulk-retry').hidden = !may('retry');
  $('bulk-cancel').hidden = !may('cancel');
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

/** One call for up to BULK_MAX ids; answers {status, body} or null when the network failed. */
async function call(action, ids, key) {
  const init = {
    method: 'POST', cache: 'no-store',
    headers: headers({ 'Content-Type': 'application/json', 'Idempotency-Key': key }),
    body: JSON.stringify({ job_ids: ids }),
  };
  return fetch(action.path, init)
    .then(async (r) => ({ status: r.status, headers: r.headers, body: await r.json().catch(() => null) }))
    .catch(() => null);
}

/** Says what the action did: how many were done and skipped, and why each skip happened. */
function report(action, results) {
  const skipped = results.filter((r) => r.outcome === 'skipped');
  const done = results.length - skipped.length;
  const box = $('bulk-result');
  box.replaceChildren(el('p', { text: `${action.verb}: ${plural(done, 'job')} done, ${skipped.length} skipped.` }),
    ...(skipped.length ? [el('ul', {}, ...skipped.map((r) => el('li', {
      'data-testid': 'bulk-skip', text: `${r.job_id.slice(0, 8)}: ${r.message || r.reason}`,
    })))] : []));
  box.hidden = false;
}

async function run(kind) {
  clearError();
  const action = ACTIONS[kind];
  const ids = targets(kind);
  if (!ids.length) return;
  const what = plural(ids.length, 'job');
  if (!await confirmed(action.ask(what), `${action.verb} ${what}`)) return;
  $('bulk-result').hidden = true;
  const results = [];
  for (let i = 0; i < ids.length; i += BULK_MAX) {
    // A key per call: sent again after a failure, the service answers what it did the first time.
    const a = await call(action, ids.slice(i, i + BULK_MAX), crypto.randomUUID());
    if (!a || a.status !== 200 || !a.body) {
      showError(`Could not ${kind} the selected jobs`, a, !a);
      break;
    }
    results.push(...a.body.results);
  }
  report(action, results);
  for (const r of results) if (r.new_job_id) snapshot(r.new_job_id).catch(() => {});
  selectAllShown(false);
}

export function wireBulk() {
  $('bulk-retry').addEventListener('click', () => run('retry'));
  $('bulk-cancel').addEventListener('click', () => run('cancel'));
  $('select-all').addEventListener('change', (e) => selectAllShown(e.target.checked));
  $('jobs-body').addEventListener('change', selectionChanged);
  document.addEventListener('jobs-selection', selectionChanged);
  selectionChanged();
}
