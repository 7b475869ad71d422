// catalog-jobs admin page: the wiring. Plain JavaScript modules, no framework, nothing from
// a CDN (core.js: what the page knows and how it talks to the service; live.js: starts and
// live cards; pipeline.js: a tenant's whole refresh and its card; overview.js: the whole
// service; jobs.js: the jobs table; job.js: one job; products.js: the product browser;
// bulk.js: bulk retry and cancel).

import {
  $, state, api, parse, remember, clearError, refreshTimes, leaveIdentity,
} from './core.js';
import { wireStarts, tickCards, forgetStarts } from './live.js';
import { wirePipeline } from './pipeline.js';
import { followJobs, stopJobs, tickRows, wireJobs, showTenantFilter } from './jobs.js';
import { wireJob, openFromHash, closeJob } from './job.js';
import { wireProducts, forgetProducts } from './products.js';
import { followOverview, forgetOverview } from './overview.js';
import { wireBulk, selectionChanged, forgetResult } from './bulk.js';

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
  clearTimeout(showAnyway);
  state.may = may;
  const can = (what) => !may || may[what] !== false;
  $('start-card').hidden = !can('start');
  $('overview').hidden = !can('stats');
  document.body.dataset.readOnly = String(!can('start'));
  selectionChanged();
  showTenantFilter();
  document.body.dataset.scope = 'known';
}

let turn = 0; // the tab's identities so far: a whoami asked for an earlier one lays out nothing
let knownFor = null; // the token `state.may` was said for (null: none yet)
let showAnyway = 0; // the timer that shows the page when the service does not say in time

/**
 * What the token may do (`GET /catalog/whoami`), then the page laid out for it; answers
 * whether it still holds (no other identity since). A token the service refuses (401) reads
 * no overview either; a service that does not say shows every control, its answers still
 * refuse what they must.
 */
async function learnPermissions(mine) {
  const token = state.token;
  const a = await api('GET', '/catalog/whoami').catch(() => null);
  if (mine !== turn) return false;
  const refused = a && a.status === 401;
  const may = a && a.status === 200 && a.body ? a.body.may : refused ? { stats: false } : null;
  sessionStorage.setItem(SCOPE, JSON.stringify(may));
  knownFor = token;
  laidOutFor(may);
  return true;
}

/**
 * Follows what the page shows (the overview, the jobs table; `then` once) as soon as what
 * the token may do is known: until then the page below the header stays blank, for
 * SCOPE_WAIT_MS at most, then it shows every control and follows anyway (laid out again
 * when the service says).
 */
function followOnceKnown(mine, then = () => {}) {
  let followed = null; // what the token might do when the page began following (JSON)
  const follow = () => {
    if (followed !== null || mine !== turn) return;
    followed = JSON.stringify(state.may);
    followOverview();
    followJobs();
    then();
  };
  clearTimeout(showAnyway);
  if (document.body.dataset.scope === 'known') follow(); // laid out already (as the service last said)
  else showAnyway = setTimeout(() => {
    if (mine !== turn) return;
    laidOutFor(null);
    follow();
  }, SCOPE_WAIT_MS);
  learnPermissions(mine).then((held) => {
    if (!held) return;
    if (followed === null) follow();
    // Followed already (laid out as last said, or shown anyway): the overview as it may now see it.
    else if (followed !== JSON.stringify(state.may)) followOverview();
  });
}

/** The tenant rule as the service states it (its OpenAPI document), so the page never copies it. */
async function tenantRule() {
  const a = await api('GET', '/openapi.json').catch(() => null);
  const schema = a && a.body && a.body.components && a.body.components.schemas && a.body.components.schemas.TenantId;
  if (schema && schema.description) {
    $('tenant-help').textContent = `${schema.description.replaceAll('`', '')} Empty: every tenant (an operator's token).`;
  }
}

/**
 * The tab takes the identity in the header's fields. What the last one's answers put on the
 * page goes at once (its jobs' rows and cards, its products, the job it opened); another
 * token also blanks the page below the header until the service says what the new one may
 * do, so the old token's layout never shows to the new one (no overview to a tenant's token,
 * no start to a read-only one). The same token with another tenant keeps its layout.
 */
function useIdentity() {
  const [tenant, token] = [$('tenant').value.trim(), $('token').value.trim()];
  clearError();
  if (tenant === state.tenant && token === state.token) {
    // The same identity: its page read again, unless it waits for the service to say its scope.
    if (document.body.dataset.scope === 'known') { followOverview(); followJobs(); }
    return;
  }
  const sameToken = token === state.token && knownFor === token;
  remember(tenant, token);
  leaveIdentity();
  stopJobs();
  forgetStarts();
  forgetProducts();
  forgetResult();
  turn += 1;
  if (sameToken) {
    laidOutFor(state.may);
    followOverview();
    followJobs();
    return;
  }
  closeJob();
  forgetOverview();
  sessionStorage.removeItem(SCOPE);
  document.body.dataset.scope = 'unknown';
  followOnceKnown(turn);
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
  turn = 1;
  const known = sessionStorage.getItem(SCOPE);
  if (known !== null) laidOutFor(parse(known));
  followOnceKnown(turn, openFromHash);
}

wire();
