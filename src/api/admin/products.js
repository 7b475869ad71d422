// The product browser: search by key prefix or name words, page through the results, open
// a product (price with its currency, category, attributes, neighbours with key, name and
// score) beside the results on a wide screen, and go back to the result it came from.

import { $, el, state, api, q, enc, showError, clearError, needTenant } from './core.js';

/** Products per page of search results. */
const PRODUCT_PAGE = 20;

let openedFrom = null; // the result's button a product was opened from

/** A price as people read it: `12.00 EUR`, or `12.00` when the service names no currency. */
export function price(p) {
  if (p.price_cents == null) return null;
  const amount = (p.price_cents / 100).toFixed(2);
  return p.currency ? `${amount} ${p.currency}` : amount;
}

function resultButton(p) {
  const b = el('button', { type: 'button', class: 'linklike', text: p.name || p.product_key, 'data-product-key': p.product_key });
  b.addEventListener('click', () => { openedFrom = b; openProduct(p.product_key); });
  return b;
}

/**
 * Searches the catalogue (`q`: a key prefix or name words) and shows a page; with `cursor`,
 * appends the next page.
 */
async function searchProducts(text, cursor) {
  clearError();
  if (!needTenant()) return;
  if (!text) { showError('Type a key prefix or some words of a name in the search field first'); return; }
  const list = $('product-results');
  const a = await api('GET', `/catalog/products?${q({ tenant_id: state.tenant, q: text, limit: PRODUCT_PAGE, cursor })}`).catch(() => null);
  if (!a || a.status !== 200) { showError('Could not search products', a, !a); return; }
  const more = list.querySelector('[data-testid=product-more]');
  if (more) more.closest('li').remove();
  const items = a.body.products.map((p) => el('li', { 'data-testid': 'product-result' },
    resultButton(p), el('span', { class: 'key mono', text: p.product_key })));
  if (cursor) list.append(...items); else list.replaceChildren(...items);
  const next = a.body.next_cursor;
  if (next) {
    const b = el('button', { type: 'button', text: 'More results', 'data-testid': 'product-more' });
    b.addEventListener('click', () => searchProducts(text, next));
    list.append(el('li', {}, b));
  }
  if (!list.children.length) list.append(el('li', { class: 'help', text: 'No product matches.' }));
  $('product-view').hidden = true;
  $('products').classList.remove('opened');
}

async function openProduct(key) {
  clearError();
  const a = await api('GET', `/catalog/products/${enc(key)}?${q({ tenant_id: state.tenant })}`).catch(() => null);
  if (!a || a.status !== 200) { showError(`Could not open product ${key}`, a, !a); return; }
  const p = a.body;
  const view = $('product-view');
  view.dataset.productKey = p.product_key;
  $('product-name').textContent = p.name || p.product_key;
  const facts = [['Key', p.product_key], ['Brand', p.brand], ['Price', price(p)],
    ['Category', Array.isArray(p.taxonomy_path) ? p.taxonomy_path.join(' › ') : null],
    ['Enrichment', p.enrichment && p.enrichment.state]];
  $('product-facts').replaceChildren(...facts.filter(([, v]) => v != null && v !== '')
    .flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
  const attrs = Object.entries((p.enrichment && p.enrichment.attributes) || {});
  $('product-attributes').replaceChildren(...attrs.flatMap(([k, v]) => [
    el('dt', { text: k }), el('dd', { text: typeof v === 'string' ? v : JSON.stringify(v) })]));
  if (!attrs.length) $('product-attributes').append(el('dd', { class: 'help', text: 'None extracted yet (run enrich).' }));
  const n = $('neighbours');
  n.replaceChildren(...(p.neighbours || []).map((x) => {
    const b = el('button', { type: 'button', class: 'linklike', text: x.name || x.product_key, 'data-product-key': x.product_key });
    b.addEventListener('click', () => openProduct(x.product_key));
    return el('li', {}, b, el('span', { class: 'key mono', text: x.product_key }),
      el('span', { class: 'score', text: `score ${Number(x.score).toFixed(3)}` }));
  }));
  if (!(p.neighbours || []).length) n.append(el('li', { class: 'help', text: 'No neighbours yet (run pair).' }));
  view.hidden = false;
  $('products').classList.add('opened');
  $('product-name').focus();
}

function backToResults() {
  $('product-view').hidden = true;
  $('products').classList.remove('opened');
  if (openedFrom && openedFrom.isConnected) openedFrom.focus();
  else $('product-search').focus();
}

/** Takes off the page the products the tab's last tenant or token found or opened. */
export function forgetProducts() {
  $('product-results').replaceChildren();
  $('product-view').hidden = true;
  $('products').classList.remove('opened');
  openedFrom = null;
}

export function wireProducts() {
  $('product-form').addEventListener('submit', (e) => {
    e.preventDefault();
    searchProducts($('product-search').value.trim());
  });
  $('product-back').addEventListener('click', backToResults);
}
