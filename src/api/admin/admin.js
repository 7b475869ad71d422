// catalog-jobs admin page. Plain JavaScript, no framework, nothing from a CDN.
// Everything shown is built with createElement/textContent: no data is ever parsed as
// markup, so a product or step containing markup is shown as text.
'use strict';

(() => {
  /** How often a job is polled when its event stream is not available. */
  const POLL_MS = 1000;
  /** How often the jobs table is reloaded when the tenant's stream is not available. */
  const TABLE_POLL_MS = 2000;
  /** Shortest gap between two snapshot reads of one job while its stream runs (for the ETA). */
  const SNAPSHOT_EVERY_MS = 1000;
  /** Reconnections of a job's stream before falling back to polling. */
  const STREAM_RETRIES = 3;
  /** Jobs listed in the table. */
  const TABLE_LIMIT = 50;
  /** Products per page of search results. */
  const PRODUCT_PAGE = 20;
  const ACTIVE = new Set(['queued', 'running', 'cancelling']);
  const STORE = { tenant: 'catalog-jobs.tenant', token: 'catalog-jobs.token' };

  const $ = (id) => document.getElementById(id);
  const el = (tag, props = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === 'text') node.textContent = v;
      else if (k === 'class') node.className = v;
      else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role') node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const c of children) if (c != null) node.append(c);
    return node;
  };

  const state = {
    tenant: sessionStorage.getItem(STORE.tenant) || '',
    token: sessionStorage.getItem(STORE.token) || '',
    jobs: new Map(), // job_id -> latest snapshot (or partial event data)
    watched: new Map(), // job_id -> {card, ...}
    tenantStream: null, // AbortController of the tenant's stream or poll
    openJob: null,
    openJobRefresh: 0,
  };

  // ---------------------------------------------------------------- the API

  function headers(extra = {}) {
    const h = { Accept: 'application/json', ...extra };
    if (state.token) h.Authorization = `Bearer ${state.token}`;
    return h;
  }

  /** Calls the API; answers {status, body, headers}; throws only when the network fails. */
  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store' };
    if (body) init.body = body;
    const r = await fetch(path, init);
    let parsed = null;
    const type = r.headers.get('content-type') || '';
    if (type.includes('json')) parsed = await r.json().catch(() => null);
    else await r.text();
    return { status: r.status, body: parsed, headers: r.headers };
  }

  const q = (params) => {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (Array.isArray(v)) v.forEach((x) => u.append(k, x));
      else if (v !== '' && v != null) u.append(k, v);
    }
    return u;
  };
  const enc = encodeURIComponent;

  // ---------------------------------------------------------------- errors

  function clearError() {
    const box = $('error');
    box.replaceChildren();
    box.hidden = true;
  }

  /** Shows an API error (its message) or a plain message; a 409 links to the running job. */
  function showError(what, answer) {
    const box = $('error');
    box.replaceChildren();
    const body = answer && answer.body;
    let text = what;
    if (body && body.message) text = `${what}: ${body.message}`;
    else if (answer) text = `${what}: HTTP ${answer.status}`;
    if (answer && answer.status === 409 && body && body.error === 'already_running') {
      text = `${what}: already running.`;
    }
    box.append(el('span', { text }));
    if (body && body.job_id) {
      box.append(' ', el('a', { href: `#job=${enc(body.job_id)}`, text: `Open job ${body.job_id}`, 'data-testid': 'error-job' }));
    }
    box.hidden = false;
  }

  function needTenant() {
    if (state.tenant) return true;
    showError('Pick a tenant first');
    $('tenant').focus();
    return false;
  }

  // ---------------------------------------------------------------- time

  const ms = (iso) => (iso ? Date.parse(iso) : NaN);
  function span(seconds) {
    if (!Number.isFinite(seconds) || seconds < 0) return '—';
    if (seconds < 1) return '< 1 s';
    const s = Math.round(seconds);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }
  function elapsed(job) {
    const start = ms(job.started_at) || ms(job.created_at);
    if (!Number.isFinite(start)) return NaN;
    const end = ms(job.finished_at) || Date.now();
    return (end - start) / 1000;
  }
  const clock = (iso) => (iso ? new Date(iso).toLocaleTimeString() : '—');

  // ---------------------------------------------------------------- Server-Sent Events

  /**
   * Reads Server-Sent Events with fetch (the browser's own SSE client cannot send a token). Calls onEvent with
   * {id, type, data} for each event. Answers 'ended' (204: nothing more will come) or
   * 'closed' (the server closed the stream); throws when there is no stream to read.
   */
  async function readSse(url, { lastId, onEvent, signal }) {
    const extra = { Accept: 'text/event-stream' };
    if (lastId) extra['Last-Event-ID'] = lastId;
    const r = await fetch(url, { headers: headers(extra), signal, cache: 'no-store' });
    if (r.status === 204) return 'ended';
    const type = r.headers.get('content-type') || '';
    if (!r.ok || !type.startsWith('text/event-stream') || !r.body) {
      r.body && r.body.cancel().catch(() => {});
      throw new Error(`no event stream (HTTP ${r.status})`);
    }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let event = { id: null, type: 'message', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return 'closed';
      buffer += value;
      let cut;
      while ((cut = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, cut);
        buffer = buffer.slice(cut + (buffer.startsWith('\r\n', cut) ? 2 : 1));
        if (line === '') {
          if (event.data.length) onEvent({ id: event.id, type: event.type, data: event.data.join('\n') });
          event = { id: event.id, type: 'message', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue; // a keep-alive comment
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'data') event.data.push(val);
        else if (field === 'event') event.type = val;
        else if (field === 'id') event.id = val;
      }
    }
  }

  const parse = (text) => {
    try { return JSON.parse(text); } catch { return null; }
  };
  const sleep = (t, signal) => new Promise((resolve) => {
    const timer = setTimeout(resolve, t);
    signal && signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); });
  });

  // ---------------------------------------------------------------- one job's live card

  function card(job) {
    let w = state.watched.get(job.job_id);
    if (w) return w;
    const bar = el('span');
    const progress = el('div', {
      class: 'progress', role: 'progressbar', 'data-testid': 'job-progress',
      'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': '0',
      'aria-label': `${job.kind} progress`,
    }, bar);
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
    w = { node, bar, progress, status, step, time, eta, job: { ...job }, lastId: null, lastRead: 0 };
    state.watched.set(job.job_id, w);
    return w;
  }

  function paintCard(w) {
    const j = w.job;
    const pct = Math.max(0, Math.min(100, Number(j.percent) || 0));
    w.node.dataset.status = j.status || '';
    w.progress.setAttribute('aria-valuenow', String(pct));
    w.progress.setAttribute('aria-valuetext', `${pct}% ${j.step || ''}`);
    w.bar.style.width = `${pct}%`;
    w.status.textContent = j.status || '';
    w.status.className = `badge ${j.status || ''}`;
    w.step.textContent = j.step || '';
    w.time.textContent = `elapsed ${span(elapsed(j))}`;
    const eta = ACTIVE.has(j.status) ? span(Number(j.eta_seconds)) : '—';
    w.eta.textContent = `ETA ${j.eta_seconds == null && ACTIVE.has(j.status) ? 'estimating' : eta}`;
    if (j.error) w.step.textContent = `${j.step || ''} — ${j.error}`;
  }

  /** How far along a job's life a status is: answers can arrive out of order. */
  const RANK = { queued: 0, running: 1, cancelling: 2, done: 3, failed: 3, cancelled: 3, lost: 3 };

  /**
   * Whether `incoming` (a snapshot or an event) is older news than `known`: a reply that was
   * overtaken by a later event. A job's percent never goes backwards, nor its status, within
   * one attempt.
   */
  function stale(known, incoming) {
    if (!known || known.status == null || incoming.status == null) return false;
    if ((incoming.attempt || 0) > (known.attempt || 0) && known.attempt != null) return false;
    const [a, b] = [RANK[known.status] ?? 0, RANK[incoming.status] ?? 0];
    return b < a || (b === a && a < 3 && Number(incoming.percent) < Number(known.percent));
  }

  /** Merges what is known of a job (snapshot or event) into every view of it. */
  function learn(job) {
    if (!job || !job.job_id) return;
    const known = state.jobs.get(job.job_id);
    const news = { ...job };
    if (stale(known, news)) {
      for (const k of ['status', 'percent', 'step', 'eta_seconds', 'error', 'finished_at']) delete news[k];
    }
    const merged = { ...(known || {}), ...news };
    state.jobs.set(job.job_id, merged);
    const w = state.watched.get(job.job_id);
    if (w) { w.job = merged; paintCard(w); }
    paintRow(merged);
    if (state.openJob === job.job_id) refreshOpenJob();
  }

  async function snapshot(id) {
    const a = await api('GET', `/catalog/jobs/${enc(id)}?${q({ tenant_id: state.tenant })}`);
    if (a.status === 200) learn(a.body);
    return a;
  }

  /** Follows a job to its end: its event stream when there is one, else a poll. */
  async function watch(job) {
    const w = card(job);
    w.job = { ...w.job, ...job };
    paintCard(w);
    learn(job);
    const url = `/catalog/jobs/${enc(job.job_id)}/events`;
    let failures = 0;
    // At least one read, even of a job another view has already seen end: its timeline.
    do {
      let heard = false;
      try {
        const how = await readSse(url, {
          lastId: w.lastId,
          onEvent: (e) => {
            heard = true;
            w.node.dataset.follow = 'stream';
            if (e.id) w.lastId = e.id;
            const data = parse(e.data) || {};
            learn({ job_id: job.job_id, ...pick(data) });
            if (Date.now() - w.lastRead > SNAPSHOT_EVERY_MS || e.type === 'finished') {
              w.lastRead = Date.now();
              snapshot(job.job_id).catch(() => {});
            }
          },
        });
        if (how === 'ended' || !ACTIVE.has(w.job.status)) break;
        // Closed before the end: resume after the last event seen.
        failures = heard ? 0 : failures + 1;
      } catch {
        failures = STREAM_RETRIES; // no stream here: poll instead
      }
    } while (failures < STREAM_RETRIES && ACTIVE.has(w.job.status));
    if (failures >= STREAM_RETRIES) w.node.dataset.follow = 'poll';
    while (ACTIVE.has(w.job.status)) {
      const a = await snapshot(job.job_id).catch(() => null);
      if (a && a.status === 404) break;
      await sleep(POLL_MS);
    }
    await snapshot(job.job_id).catch(() => {});
  }

  /** The fields of an event that describe the job (an event's `id` is the timeline's). */
  function pick(data) {
    const out = {};
    for (const k of ['status', 'percent', 'step', 'kind', 'error', 'error_class']) {
      if (data[k] !== undefined && data[k] !== null) out[k] = data[k];
    }
    if (out.error_class && !out.error) out.error = out.error_class;
    delete out.error_class;
    return out;
  }

  // ---------------------------------------------------------------- starting jobs

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
    } catch (e) {
      showError(`Could not start ${kind}: ${e.message}`);
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
    $('report-box').hidden = false;
  }

  // ---------------------------------------------------------------- the jobs table

  function paintRow(job) {
    if (!job.job_id) return;
    const body = $('jobs-body');
    let row = body.querySelector(`tr[data-job-id="${CSS.escape(job.job_id)}"]`);
    if (!row) {
      if (!job.kind) return; // an event about a job not listed yet: its snapshot comes next
      row = el('tr', { 'data-testid': 'job-row', 'data-job-id': job.job_id });
      body.prepend(row);
    }
    row.dataset.status = job.status || '';
    const open = el('button', { type: 'button', class: 'linklike mono', text: job.job_id.slice(0, 8),
      title: job.job_id, 'aria-label': `Open job ${job.job_id}` });
    open.addEventListener('click', () => openJob(job.job_id));
    const pct = job.percent == null ? '' : `${job.percent}`;
    row.replaceChildren(
      el('td', { class: 'id' }, open),
      el('td', { text: job.kind || '' }),
      el('td', {}, el('span', { class: `badge ${job.status || ''}`, text: job.status || '' })),
      el('td', { text: pct }),
      el('td', { text: job.step || '' }),
      el('td', { text: clock(job.started_at) }),
      el('td', { text: job.started_at ? span(elapsed(job)) : '—' }),
      el('td', { text: job.error || '' }),
    );
    row.hidden = !matchesFilters(job);
    $('jobs-empty').hidden = body.children.length > 0;
  }

  function matchesFilters(job) {
    const status = $('filter-status').value;
    const kind = $('filter-kind').value;
    return (!status || job.status === status) && (!kind || job.kind === kind);
  }

  /** Shows the rows the filters let through (at once; the reload may add more). */
  function applyFilters() {
    for (const row of $('jobs-body').children) row.hidden = !matchesFilters(state.jobs.get(row.dataset.jobId) || {});
  }

  async function loadJobs() {
    if (!state.tenant) return;
    const filters = { status: $('filter-status').value, kind: $('filter-kind').value };
    let a = await api('GET', `/catalog/jobs?${q({ tenant_id: state.tenant, limit: TABLE_LIMIT, ...filters })}`);
    if (a.status === 422 && a.body && a.body.error === 'unknown_field') {
      // A server without the filters: list, and filter here.
      a = await api('GET', `/catalog/jobs?${q({ tenant_id: state.tenant, limit: TABLE_LIMIT })}`);
    }
    if (a.status !== 200) { showError('Could not list jobs', a); return; }
    const body = $('jobs-body');
    for (const job of [...a.body.jobs].reverse()) learn(job);
    applyFilters();
    $('jobs-empty').hidden = body.children.length > 0;
  }

  /** Keeps the table live: the tenant's event stream, or a poll where there is none. */
  async function followTenant() {
    if (state.tenantStream) state.tenantStream.abort();
    const ctl = new AbortController();
    state.tenantStream = ctl;
    $('jobs-body').replaceChildren();
    if (!state.tenant) return;
    await loadJobs().catch((e) => showError(`Could not list jobs: ${e.message}`));
    const url = `/catalog/events?${q({ tenant_id: state.tenant })}`;
    let streamed = false;
    while (!ctl.signal.aborted) {
      try {
        await readSse(url, {
          signal: ctl.signal,
          onEvent: (e) => {
            const data = parse(e.data);
            if (!data || !data.job_id) return;
            streamed = true;
            $('jobs-table').dataset.follow = 'stream';
            learn({ job_id: data.job_id, ...pick(data) });
            if (!state.jobs.get(data.job_id).created_at || !ACTIVE.has(data.status)) {
              snapshot(data.job_id).catch(() => {});
            }
          },
        });
        $('jobs-live').textContent = 'Updated live';
      } catch {
        if (ctl.signal.aborted) return;
        if (!streamed) break; // no stream on this server: poll
      }
      await sleep(POLL_MS, ctl.signal);
    }
    $('jobs-live').textContent = 'Refreshed every few seconds';
    $('jobs-table').dataset.follow = 'poll';
    while (!ctl.signal.aborted) {
      await sleep(TABLE_POLL_MS, ctl.signal);
      if (!ctl.signal.aborted) await loadJobs().catch(() => {});
    }
  }

  // ---------------------------------------------------------------- one job, opened

  async function openJob(id) {
    clearError();
    if (!needTenant()) return;
    const a = await api('GET', `/catalog/jobs/${enc(id)}?${q({ tenant_id: state.tenant })}`);
    if (a.status !== 200) { showError(`Could not open job ${id}`, a); return; }
    state.openJob = id;
    learn(a.body);
    paintJob(a.body);
    $('job-view').hidden = false;
    $('job-title').focus?.();
    await loadTimeline(id);
  }

  function paintJob(job) {
    const view = $('job-view');
    view.dataset.jobId = job.job_id;
    view.dataset.status = job.status;
    $('job-title').textContent = `Job ${job.job_id}`;
    const facts = [
      ['Kind', job.kind], ['Status', job.status], ['Percent', job.percent], ['Step', job.step],
      ['Error class', job.error], ['Created', job.created_at], ['Started', job.started_at],
      ['Finished', job.finished_at], ['Elapsed', span(elapsed(job))],
      ['ETA', ACTIVE.has(job.status) ? span(Number(job.eta_seconds)) : '—'],
      ['Attempt', `${job.attempt} of ${job.max_attempts}`], ['Retry of', job.retry_of],
      ['Created by', job.created_by], ['Cancelled by', job.cancelled_by], ['Worker', job.worker],
    ];
    $('job-snapshot').replaceChildren(...facts.filter(([, v]) => v != null && v !== '')
      .flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
    $('job-params').textContent = JSON.stringify(job.params, null, 2);
    $('job-result').textContent = JSON.stringify(job.result, null, 2);
    $('cancel').hidden = !ACTIVE.has(job.status) || job.status === 'cancelling';
    $('retry').hidden = ACTIVE.has(job.status);
  }

  async function loadTimeline(id) {
    const list = $('job-timeline');
    const a = await api('GET', `/catalog/jobs/${enc(id)}/events?${q({ tenant_id: state.tenant })}`);
    if (state.openJob !== id) return;
    if (a.status !== 200 || !a.body || !Array.isArray(a.body.events)) {
      list.replaceChildren(el('li', { class: 'help', text: 'No timeline from this server.' }));
      return;
    }
    list.replaceChildren(...a.body.events.map((e) => {
      const bits = [clock(e.at), e.type, e.status, e.percent != null ? `${e.percent}%` : null, e.step, e.error_class || e.error]
        .filter((x) => x != null && x !== '');
      return el('li', { 'data-type': e.type || '', text: bits.join(' · ') });
    }));
  }

  function refreshOpenJob() {
    const now = Date.now();
    const job = state.jobs.get(state.openJob);
    if (job && job.created_at) paintJob(job);
    if (now - state.openJobRefresh < SNAPSHOT_EVERY_MS && job && ACTIVE.has(job.status)) return;
    state.openJobRefresh = now;
    const id = state.openJob;
    setTimeout(() => { if (state.openJob === id) loadTimeline(id).catch(() => {}); }, 0);
  }

  async function cancelOpenJob() {
    const id = state.openJob;
    const dialog = $('confirm');
    $('confirm-text').textContent = `Job ${id} will stop at its next safe point; what it did so far stays in its report.`;
    dialog.returnValue = '';
    dialog.showModal();
    const answer = await new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue), { once: true }));
    if (answer !== 'yes') return;
    const a = await api('POST', `/catalog/jobs/${enc(id)}/cancel?${q({ tenant_id: state.tenant })}`);
    if (a.status === 202) { learn(a.body); if (!state.watched.has(id)) watch(a.body); } else showError('Could not cancel', a);
  }

  async function retryOpenJob() {
    clearError();
    const id = state.openJob;
    const a = await api('POST', `/catalog/jobs/${enc(id)}/retry?${q({ tenant_id: state.tenant })}`);
    if (a.status === 202 && a.body) { watch(a.body); openJob(a.body.job_id); } else showError('Could not retry', a);
  }

  // ---------------------------------------------------------------- products

  /**
   * Searches the catalogue (`q`: a key prefix or name words; empty lists every product) and
   * shows a page; with `cursor`, appends the next page.
   */
  async function searchProducts(text, cursor) {
    clearError();
    if (!needTenant()) return;
    const list = $('product-results');
    let a = await api('GET', `/catalog/products?${q({ tenant_id: state.tenant, q: text, limit: PRODUCT_PAGE, cursor })}`);
    let products = a.status === 200 ? a.body.products : null;
    if (a.status === 422 && a.body && a.body.error === 'unknown_field' && a.body.field === 'q') {
      // A server without search: look the text up as a key.
      a = await api('GET', `/catalog/products/${enc(text)}?${q({ tenant_id: state.tenant })}`);
      products = a.status === 200 ? [a.body] : a.status === 404 ? [] : null;
    }
    if (!products) { showError('Could not search products', a); return; }
    const more = list.querySelector('[data-testid=product-more]');
    if (more) more.closest('li').remove();
    const items = products.map((p) => {
      const b = el('button', { type: 'button', class: 'linklike', text: p.name || p.product_key, 'data-product-key': p.product_key });
      b.addEventListener('click', () => openProduct(p.product_key));
      return el('li', { 'data-testid': 'product-result' }, b, el('span', { class: 'score mono', text: p.product_key }));
    });
    if (cursor) list.append(...items); else list.replaceChildren(...items);
    const next = a.body && a.body.next_cursor;
    if (next) {
      const b = el('button', { type: 'button', text: 'More results', 'data-testid': 'product-more' });
      b.addEventListener('click', () => searchProducts(text, next));
      list.append(el('li', {}, b));
    }
    if (!list.children.length) list.append(el('li', { class: 'help', text: 'No product matches.' }));
  }

  async function openProduct(key) {
    clearError();
    const a = await api('GET', `/catalog/products/${enc(key)}?${q({ tenant_id: state.tenant })}`);
    if (a.status !== 200) { showError(`Could not open product ${key}`, a); return; }
    const p = a.body;
    const view = $('product-view');
    view.dataset.productKey = p.product_key;
    $('product-name').textContent = p.name || p.product_key;
    const facts = [['Key', p.product_key], ['Brand', p.brand],
      ['Price', p.price_cents != null ? (p.price_cents / 100).toFixed(2) : null],
      ['Category', Array.isArray(p.taxonomy_path) ? p.taxonomy_path.join(' › ') : null],
      ['Enrichment', p.enrichment && p.enrichment.state]];
    $('product-facts').replaceChildren(...facts.filter(([, v]) => v != null && v !== '')
      .flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
    const attrs = Object.entries((p.enrichment && p.enrichment.attributes) || {});
    $('product-attributes').replaceChildren(...attrs.flatMap(([k, v]) => [
      el('dt', { text: k }), el('dd', { text: typeof v === 'string' ? v : JSON.stringify(v) })]));
    const n = $('neighbours');
    n.replaceChildren(...(p.neighbours || []).map((x) => {
      const b = el('button', { type: 'button', class: 'linklike', text: x.name || x.product_key, 'data-product-key': x.product_key });
      b.addEventListener('click', () => openProduct(x.product_key));
      return el('li', {}, b, el('span', { class: 'score', text: `score ${Number(x.score).toFixed(3)}` }));
    }));
    if (!(p.neighbours || []).length) n.append(el('li', { class: 'help', text: 'No neighbours yet (run pair).' }));
    view.hidden = false;
  }

  // ---------------------------------------------------------------- wiring

  function useIdentity() {
    state.tenant = $('tenant').value.trim();
    state.token = $('token').value.trim();
    sessionStorage.setItem(STORE.tenant, state.tenant);
    sessionStorage.setItem(STORE.token, state.token);
    clearError();
    state.jobs.clear();
    followTenant();
  }

  function openFromHash() {
    const m = /^#job=(.+)$/.exec(location.hash);
    if (m) openJob(decodeURIComponent(m[1]));
  }

  function tick() {
    for (const w of state.watched.values()) if (ACTIVE.has(w.job.status)) paintCard(w);
  }

  function wire() {
    $('tenant').value = state.tenant;
    $('token').value = state.token;
    $('who').addEventListener('submit', (e) => { e.preventDefault(); useIdentity(); });
    $('tenant').addEventListener('change', useIdentity);
    $('token').addEventListener('change', useIdentity);
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
      $('report-box').hidden = false;
      const a = await start('pair', { wait: 'true' }, $('pair-wait'));
      if (a && a.status === 200) showReport(a.body);
      else if (a && a.status === 202) $('report').textContent = 'Still running: follow it above.';
      else $('report-box').hidden = true;
    });
    for (const filter of ['filter-status', 'filter-kind']) {
      $(filter).addEventListener('change', () => { applyFilters(); loadJobs(); });
    }
    $('find-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const id = $('find-id').value.trim();
      if (id) openJob(id);
    });
    $('cancel').addEventListener('click', cancelOpenJob);
    $('retry').addEventListener('click', retryOpenJob);
    $('close-job').addEventListener('click', () => { state.openJob = null; $('job-view').hidden = true; });
    $('product-form').addEventListener('submit', (e) => {
      e.preventDefault();
      searchProducts($('product-search').value.trim());
    });
    window.addEventListener('hashchange', openFromHash);
    setInterval(tick, 1000);
    if (state.tenant) followTenant();
    openFromHash();
  }

  wire();
})();
