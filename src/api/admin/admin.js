// catalog-jobs admin page: the wiring. Plain JavaScript modules, no framework, nothing from
// a CDN (core.js: what the page knows and how it talks to the service; live.js: starts and
// live cards; pipeline.js: a tenant's whole refresh and its card; overview.js: the whole
// service; jobs.js: the jobs table; job.js: one job; products.js: the product browser;
// bulk.js: bulk retry and cancel).

import { $, state, api, remember, clearError, refreshTimes } from './core.js';
import { wireStarts, tickCards } from './live.js';
import { wirePipeline } from './pipeline.js';
import { followJobs, tickRows, wireJobs, showTenantFilter } from './jobs.js';
import { wireJob, openFromHash } from './job.js';
import { wireProducts } from './products.js';
import { followOverview } from './overview.js';
import { wireBulk, selectionChanged } from './bulk.js';

/** How often clocks (elapsed, "3 min ago") are brought up to date. */
const TICK_MS = 1000;

/**
 * What the token may do (`GET /catalog/whoami`): the controls it may not use are hidden.
 * A service that does not say shows every control; its answers still refuse what it must.
 */
async function learnPermissions() {
  const a = await api('GET', '/catalog/whoami').catch(() => null);
  state.may = a && a.status === 200 && a.body ? a.body.may : null;
  const may = (what) => !state.may || state.may[what] !== false;
  $('start-card').hidden = !may('start');
  document.body.dataset.readOnly = String(!may('start'));
  selectionChanged();
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
  learnPermissions().finally(() => { followOverview(); showTenantFilter(); followJobs(); });
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
  learnPermissions().finally(() => {
    followOverview();
    showTenantFilter();
    followJobs();
    openFromHash();
  });
}

wire();
