// catalog-jobs admin page: the wiring. Plain JavaScript modules, no framework, nothing from
// a CDN (core.js: what the page knows and how it talks to the service; live.js: starts and
// live cards; pipeline.js: a tenant's whole refresh and its card; overview.js: the whole
// service; jobs.js: the jobs table; job.js: one job; products.js: the product browser;
// bulk.js: bulk retry and cancel).

import { $, state, api, parse, remember, clearError, refreshTimes } from './core.js';
import { wireStarts, tickCards } from './live.js';
import { wirePipeline } from './pipeline.js';
import { followJobs, tickRows, wireJobs, showTenantFilter } from './jobs.js';
import { wireJob, openFromHash } from './job.js';
import { wireProducts } from './products.js';
import { followOverview } from './overview.js';
import { wireBulk, selectionChanged } from './bulk.js';

/** How often clocks (elapsed, "3 min ago") are brought up to date. */
const TICK_MS = 1000;

/** What the tab's token may do, as the service last said (session storage): a page loaded
 * again is laid out for it at once, without waiting for the service to say it again. */
const SCOPE = 'catalog-jobs.may';
/** How long the page below the header waits for the service to say what the token may do
 * before it shows anyway, every control in it (then laid out again once it says): long
 * enough for a service under load to answer, short enough that one not answering is seen. */
const SCOPE_WAIT_MS = 5000;

/**
 * Lays the page out for what the token may do (`may`: whoami's flags; null when unknown,
 * every control shown) and shows it: the controls it may not use are left out before the
 * page below the header is first shown, so none flashes in and out (the overview for a
 * tenant's token, the starts for a read-only one) and nothing moves when it is known.
 */
function laidOutFor(may) {
  state.may = may;
  const can = (what) => !may || may[what] !== false;
  $('start-card').hidden = !can('start');
  $('overview').hidden = !can('stats');
  document.body.dataset.readOnly = String(!can('start'));
  selectionChanged();
  showTenantFilter();
  document.body.dataset.scope = 'known';
}

/**
 * What the token may do (`GET /catalog/whoami`). A token the service refuses (401) reads no
 * overview either; a service that does not say shows every control, its answers still
 * refuse what they must.
 */
async function learnPermissions() {
  const a = await api('GET', '/catalog/whoami').catch(() => null);
  const refused = a && a.status === 401;
  const may = a && a.status === 200 && a.body ? a.body.may : refused ? { stats: false } : null;
  sessionStorage.setItem(SCOPE, JSON.stringify(may));
  laidOutFor(may);
}

/** The tenant rule as the service states it (its OpenAPI document), so the page never copies it. */
async function tenantRule() {
  const a = await api('GET', '/openapi.json').catch(() => null);
  const schema = a && a.body && a.body.components && a.body.components.schemas && a.body.components.schemas.TenantId;
  if (schema && schema.description) {
    $('tenant-help').textContent = `${schema.description.replaceAll('`', '')} Empty: every tenant (an operator's token).`;
  }
}

function useIdentity() {
  remember($('tenant').value.trim(), $('token').value.trim());
  clearError();
  state.jobs.clear();
  sessionStorage.removeItem(SCOPE);
  learnPermissions().finally(() => { followOverview(); followJobs(); });
}

function wire() {
  $('tenant').value = state.tenant;
  $('token').value = state.token;
  $('who').addEventListener('submit', (e) => { e.preventDefault(); useIdentity(); });
  $('tenant').addEventListener('change', useIdentity);
  $('token').addEventListener('change', useIdentity);
  wireStarts();
  wirePipeline();
  wireJobs();
  wireJob();
  wireProducts();
  wireBulk();
  setInterval(() => { tickCards(); tickRows(); refreshTimes(); }, TICK_MS);
  tenantRule();
  const known = sessionStorage.getItem(SCOPE);
  if (known !== null) laidOutFor(parse(known));
  else setTimeout(() => { document.body.dataset.scope = 'known'; }, SCOPE_WAIT_MS);
  learnPermissions().finally(() => {
    followOverview();
    followJobs();
    openFromHash();
  });
}

wire();
