// DKV dashboard: a hash-routed single page over the public HTTP API.
import * as api from './api.js';
import { Chart } from './chart.js';

// h builds an element: attributes, then children (strings become text,
// never HTML).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'style') el.style.cssText = v; // CSSOM: allowed by the page's CSP, a style attribute is not
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}
const $ = (sel, root = document) => root.querySelector(sel);
const kept = (kids) => kids.flat().filter((k) => k !== null && k !== undefined && k !== false);
// fill and add are replaceChildren and append without the null children
// (which the DOM would show as the text "null").
const fill = (el, ...kids) => el.replaceChildren(...kept(kids));
const add = (el, ...kids) => el.append(...kept(kids));

function toast(msg) {
  const d = h('div', {}, msg);
  $('#toast').append(d);
  setTimeout(() => d.remove(), 4000);
}
function errBox(e) { return h('div', { class: 'msg error', role: 'alert' }, describe(e)); }
function describe(e) {
  if (e instanceof api.ApiError) {
    if (e.status === 403) return `Permission denied: ${e.message}`;
    return `${e.message} (HTTP ${e.status}${e.reason ? ', ' + e.reason : ''})`;
  }
  return String(e && e.message ? e.message : e);
}
function fmtBytes(n) {
  n = Number(n || 0);
  for (const u of ['B', 'KiB', 'MiB', 'GiB', 'TiB']) { if (n < 1024) return `${n.toFixed(n % 1 ? 1 : 0)} ${u}`; n /= 1024; }
  return `${n.toFixed(1)} PiB`;
}
// fmtMs writes a duration as the CLI and Go do: 850ms, 4.2s, 1m47s, 24h.
function fmtMs(ms) {
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return `${ms}ms`;
  const tenths = Math.round(ms / 100) / 10;
  if (tenths < 60) return `${tenths.toFixed(1).replace(/\.0$/, '')}s`;
  let s = Math.round(ms / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  s %= 60;
  return `${h ? h + 'h' : ''}${m ? m + 'm' : ''}${s ? s + 's' : ''}`;
}
const num = (v) => Number(v || 0);

// ---- auth -----------------------------------------------------------
const session = { enabled: false, user: '', root: true, perms: null };

// may reports whether the session may do perm ('read' or 'write') on key;
// true when unknown (the server decides and its refusal is shown).
function may(perm, key) {
  if (!session.enabled || session.root || session.perms === null) return true;
  const kb = api.toBytes(key);
  return session.perms.some((p) => {
    const t = p.type || 'READ';
    if (perm === 'write' ? t === 'READ' : t === 'WRITE') return false;
    const start = api.unb64(p.key), end = api.unb64(p.range_end);
    if (end.length === 0) return cmp(kb, start) === 0;
    if (end.length === 1 && end[0] === 0) return cmp(kb, start) >= 0;
    return cmp(kb, start) >= 0 && cmp(kb, end) < 0;
  });
}
function cmp(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

async function loadPerms(name) {
  session.user = name;
  session.root = false;
  session.perms = null;
  try {
    // The caller's own roles and permissions (GET /v1/auth/whoami).
    const me = await api.get('/v1/auth/whoami');
    session.user = me.user || name;
    session.root = !!me.root;
    session.perms = me.permissions || [];
  } catch (_) {
    session.perms = null; // unknown: show every action, the server decides
  }
}

function loginPage(main, why) {
  const name = h('input', { id: 'login-user', autocomplete: 'username', required: true, 'aria-label': 'User' });
  const pw = h('input', { id: 'login-password', type: 'password', autocomplete: 'current-password', 'aria-label': 'Password' });
  const out = h('div');
  const form = h('form', { class: 'card login', onsubmit: async (ev) => {
    ev.preventDefault();
    fill(out, );
    try {
      const r = await api.post('/v1/auth/authenticate', { name: name.value, password: pw.value });
      api.setToken(r.token);
      await loadPerms(name.value);
      renderWho();
      route();
    } catch (e) { add(out, errBox(e)); }
  } },
  h('h2', {}, 'Sign in'),
  h('p', { class: 'muted' }, why || 'Authentication is enabled on this cluster. The token is kept in this page\'s memory only: reloading signs you out.'),
  h('label', { for: 'login-user' }, 'User'), name, h('label', { for: 'login-password' }, 'Password'), pw,
  h('button', { class: 'primary', type: 'submit' }, 'Sign in'), out);
  fill(main, form);
  name.focus();
}

function renderWho() {
  const who = $('#who');
  fill(who, );
  if (!session.enabled) { add(who, 'auth off'); return; }
  if (!api.loggedIn()) return;
  add(who, `${session.user}${session.root ? ' (root)' : ''} `, h('button', { onclick: () => { api.setToken(null); route(); } }, 'Sign out'));
}

// ---- router -----------------------------------------------------------
let cleanup = () => {};
const pages = { cluster: clusterPage, keys: keysPage, watch: watchPage, leases: leasesPage, locks: locksPage, recipes: recipesPage };

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  return { page: path || 'cluster', q: new URLSearchParams(query || '') };
}
export function go(page, params) {
  const q = new URLSearchParams(params || {}).toString();
  location.hash = `#/${page}${q ? '?' + q : ''}`;
}

let routeGen = 0;
function route() {
  const gen = ++routeGen;
  cleanup();
  cleanup = () => {};
  const main = $('#page');
  if (session.enabled && !api.loggedIn()) { renderWho(); loginPage(main); return; }
  const { page, q } = parseHash();
  const fn = pages[page] || clusterPage;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.page === page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  fill(main, );
  const stops = [];
  const ctx = {
    main, q,
    every(ms, f) { f(); const t = setInterval(f, ms); stops.push(() => clearInterval(t)); },
    onStop(f) { stops.push(f); },
  };
  cleanup = () => stops.forEach((f) => f());
  fn(ctx).catch((e) => { if (gen !== routeGen) return; /* a page left behind */ if (e instanceof api.ApiError && e.status === 401) { api.setToken(null); loginPage(main, 'Your session ended: ' + e.message); } else add(main, errBox(e)); });
}

// ---- cluster ------------------------------------------------------------
const REQ_RE = /^\/?dkv\.v1\.KV\/(\w+)$|^\/?etcdserverpb\.KV\/(\w+)$/;
function rates(samples) {
  let reads = 0, writes = 0;
  for (const s of samples) {
    if (s.name !== 'dkv_requests_total') continue;
    const m = REQ_RE.exec(s.labels.method || '');
    if (!m) continue;
    const op = m[1] || m[2];
    if (op === 'Range') reads += s.value; else if (op !== 'Compact') writes += s.value;
  }
  return { reads, writes };
}

// buckets reads a histogram's cumulative buckets: {le: count}.
function buckets(samples, name) {
  const b = {};
  for (const s of samples) if (s.name === name + '_bucket') b[s.labels.le] = s.value;
  return b;
}

// p99 over the interval between two scrapes of a histogram: the upper
// bound of the first bucket holding 99% of the observations made in it
// (in ms; null without observations).
function p99(prev, cur) {
  const total = (cur['+Inf'] || 0) - (prev['+Inf'] || 0);
  if (total <= 0) return null;
  const les = Object.keys(cur).filter((le) => le !== '+Inf').sort((x, y) => Number(x) - Number(y));
  for (const le of les) if ((cur[le] || 0) - (prev[le] || 0) >= 0.99 * total) return Number(le) * 1000;
  return les.length ? Number(les[les.length - 1]) * 1000 : null;
}

async function clusterPage(ctx) {
  const { main } = ctx;
  const summary = h('div', { class: 'card', id: 'cluster-summary' }, 'Loading…');
  const members = h('div', { class: 'card', id: 'members' });
  const canvas = h('canvas', { id: 'rate-chart', role: 'img', 'aria-label': 'Writes and reads per second over the last five minutes' });
  const chart = new Chart(canvas, [{ name: 'writes/s', color: '#d7482a' }, { name: 'reads/s', color: '#2a5bd7' }]);
  const rateNow = h('span', { class: 'muted', id: 'rate-now' });
  const latCanvas = h('canvas', { id: 'latency-chart', role: 'img', 'aria-label': 'Proposal and fsync latency p99 over the last five minutes' });
  const latChart = new Chart(latCanvas, [{ name: 'proposal p99', color: '#7a2ad7' }, { name: 'fsync p99', color: '#1d7a3a' }]);
  const latNow = h('span', { class: 'muted', id: 'latency-now' });
  // /readyz says when this member's peer port is guarded by a secret
  // anybody can derive (--insecure-peer): shown in red on every refresh.
  const peerWarn = h('div', { id: 'insecure-peer' });
  add(main, h('h2', {}, 'Cluster'), peerWarn, summary, members,
    h('div', { class: 'card' }, h('h3', {}, 'Requests on this member ', rateNow),
      h('div', { class: 'legend' }, h('span', {}, h('i', { style: 'background:#d7482a' }), 'writes/s'), h('span', {}, h('i', { style: 'background:#2a5bd7' }), 'reads/s')), canvas),
    h('div', { class: 'card' }, h('h3', {}, 'Latency on this member, p99 in ms ', latNow),
      h('div', { class: 'legend' }, h('span', {}, h('i', { style: 'background:#7a2ad7' }), 'proposal (hand-off to applied)'), h('span', {}, h('i', { style: 'background:#1d7a3a' }), 'fsync (raft log write)')), latCanvas));
  let last = null;
  ctx.every(2000, async () => {
    try {
      const samples = await api.metrics();
      const r = rates(samples), t = Date.now();
      if (last) {
        const dt = (t - last.t) / 1000;
        const w = Math.max(0, (r.writes - last.r.writes) / dt), rd = Math.max(0, (r.reads - last.r.reads) / dt);
        chart.add(t, [w, rd]);
        rateNow.textContent = `— now ${w.toFixed(1)} writes/s, ${rd.toFixed(1)} reads/s`;
        const pp = p99(last.prop, buckets(samples, 'dkv_proposal_seconds'));
        const fp = p99(last.fsync, buckets(samples, 'dkv_raft_persist_seconds'));
        latChart.add(t, [pp || 0, fp || 0]);
        latNow.textContent = `— last 2 s: proposal ${pp === null ? 'none' : '≤ ' + pp.toFixed(2)}, fsync ${fp === null ? 'none' : '≤ ' + fp.toFixed(2)}`;
      }
      last = { t, r, prop: buckets(samples, 'dkv_proposal_seconds'), fsync: buckets(samples, 'dkv_raft_persist_seconds') };
      ctx.quota = (samples.find((s) => s.name === 'dkv_quota_bytes') || {}).value || 0;
    } catch (e) { rateNow.textContent = '— metrics unavailable: ' + describe(e); }
  });
  ctx.every(2000, async () => {
    let st, ml = null, pr = null;
    try {
      const ready = await (await fetch('/readyz')).text();
      fill(peerWarn, ready.split('\n').includes('warning: insecure-peer')
        ? h('div', { class: 'msg error', role: 'alert' }, h('strong', {}, 'Insecure peer port: '),
          'this member runs without a peer secret chosen by its operator (--insecure-peer), so anyone who can reach a peer port can write to the cluster. Give the members a real secret or peer TLS (docs/cluster.md, "Peer security").')
        : null);
    } catch (e) { /* the probe is best effort here */ }
    try { st = await api.get('/v1/cluster/status'); } catch (e) { fill(summary, errBox(e)); return; }
    try { ml = await api.get('/v1/cluster/members'); } catch (e) { /* root only with auth */ }
    try { pr = await api.get('/v1/cluster/progress'); } catch (e) { /* root only with auth */ }
    // Every member's own status, asked by the serving member, so a
    // follower's page shows every row too.
    const stOf = {};
    try { for (const x of (await api.get('/v1/cluster/statuses')).members) stOf[x.id] = x; } catch (e) { /* root only with auth */ }
    const leaderId = (ml && ml.leader_id) || st.leader_id;
    const ms = (ml && ml.members) || [{ id: st.member_id, name: st.name, is_learner: st.is_learner, reachability: { state: 'STATE_SELF' } }];
    const leader = ms.find((m) => m.id === leaderId);
    const quota = ctx.quota || 0;
    fill(summary, 
      h('div', { class: 'row' },
        h('span', {}, 'Leader: ', h('strong', { id: 'leader-name' }, leader ? leader.name : (leaderId ? leaderId : 'none'))),
        h('span', {}, 'Term ', h('strong', { id: 'raft-term' }, st.raft_term || '0')),
        h('span', {}, 'Revision ', h('strong', {}, st.revision || '0')),
        h('span', { class: 'muted' }, `compacted below ${st.compact_revision || 0}`),
        h('span', { class: 'muted' }, `served by ${st.name} (version ${st.version || '?'})`)),
      (st.alarms || []).length ? h('div', { class: 'msg error', id: 'alarms' }, 'Alarms: ', (st.alarms || []).map((a) => `${a.alarm} on ${(ms.find((m) => m.id === a.member_id) || {}).name || a.member_id}: ${a.reason || ''}`).join('; ')) : h('div', { class: 'msg ok', id: 'alarms' }, 'No alarms'));
    const prog = {};
    for (const p of (pr && pr.progress) || []) prog[p.id] = p;
    const rows = ms.map((m) => {
      const self = m.id === st.member_id;
      const role = m.is_learner ? 'learner' : m.id === leaderId ? 'leader' : 'follower';
      const reach = (m.reachability || {}).state || 'STATE_UNKNOWN';
      const health = reach === 'STATE_SELF' || reach === 'STATE_REACHABLE'
        ? h('span', { class: 'badge ok' }, reach === 'STATE_SELF' ? 'this member' : `reachable${m.reachability.last_contact_ms ? ', ' + fmtMs(num(m.reachability.last_contact_ms)) + ' ago' : ''}`)
        : reach === 'STATE_UNREACHABLE' ? h('span', { class: 'badge bad' }, `unreachable${m.reachability.last_contact_ms ? ', last ' + fmtMs(num(m.reachability.last_contact_ms)) + ' ago' : ''}`) : h('span', { class: 'badge warn', title: 'A follower hears only from the leader: ask the leader\'s /ui/' }, 'unknown to this member');
      const p = prog[m.id];
      const alarms = (st.alarms || []).filter((a) => a.member_id === m.id).map((a) => a.alarm).join(', ');
      const ms_ = self ? st : (stOf[m.id] || {}).status; // the member's own status
      const why = self ? '' : (stOf[m.id] || {}).error;
      const lst = (stOf[leaderId] || {}).status;
      // Each member enforces its own --quota-bytes: its status says which.
      const mq = self ? quota : num(ms_ && ms_.quota_bytes);
      const size = ms_ ? h('div', {}, `${fmtBytes(ms_.db_size)} (in use ${fmtBytes(ms_.db_size_in_use)})`, mq ? ' of ' + fmtBytes(mq) : ', no quota',
        mq ? h('div', { class: 'bar', title: 'db size in use vs quota (the quota is enforced on what is in use)' }, h('div', { style: `width:${Math.min(100, (100 * num(ms_.db_size_in_use)) / mq).toFixed(1)}%` })) : null) : h('span', { class: 'muted', title: why || '' }, why ? 'no answer' : '—');
      // Lag: the leader's view of the member's replication when this is
      // the leader; else the leader's commit index minus the member's
      // applied index, from their own statuses.
      const lag = p ? String(p.lag) : self && role === 'leader' ? '0'
        : ms_ && lst ? h('span', { title: "the leader's commit index minus this member's applied index" }, String(Math.max(0, num(lst.raft_index) - num(ms_.raft_applied_index))))
          : h('span', { class: 'muted' }, pr ? 'known on the leader' : '—');
      return h('tr', { 'data-member': m.name },
        h('td', {}, h('strong', {}, m.name), h('div', { class: 'muted mono' }, m.id)),
        h('td', {}, h('span', { class: 'badge ' + (role === 'leader' ? 'leader' : ''), 'data-role': role }, role)),
        h('td', {}, health),
        h('td', { class: 'num', 'data-term': m.name }, ms_ ? ms_.raft_term : '—'),
        h('td', { class: 'num', 'data-applied': m.name }, ms_ ? ms_.raft_applied_index : p ? `${p.match} (replicated)` : '—'),
        h('td', { class: 'num', 'data-lag': m.name }, lag),
        h('td', { 'data-size': m.name }, size),
        h('td', {}, alarms ? h('span', { class: 'badge bad' }, alarms) : h('span', { class: 'muted' }, 'none')),
        h('td', { class: 'mono' }, m.client_url || ''));
    });
    // At phone width each row stacks into labelled lines (style.css,
    // table.stack): each cell carries its column's name.
    const cols = ['Member', 'Role', 'Health', 'Term', 'Applied index', 'Lag (entries)', 'DB size', 'Alarms', 'Client URL'];
    for (const tr of rows) [...tr.children].forEach((td, i) => { td.dataset.label = cols[i]; });
    fill(members, h('h3', {}, 'Members'), ml ? null : h('p', { class: 'muted' }, 'The member list needs the root role; showing this member only.'),
      h('table', { class: 'stack' }, h('thead', {}, h('tr', {}, cols.map((t) => h('th', { scope: 'col' }, t)))), h('tbody', {}, rows)));
  });
}

// ---- keys -----------------------------------------------------------------
const PAGE = 100;

// listChildren lists up to PAGE entries directly under prefix, from the
// cursor on: keys, and "directories" (the next '/'-ended segment), each
// directory skipped over at once so a big subtree costs one request.
async function listChildren(prefix, from) {
  const end = api.prefixEnd(prefix);
  const out = [];
  let cursor = from || api.b64(prefix === '' ? '\0' : prefix); // base64
  for (let rounds = 0; rounds < 50 && out.length < PAGE; rounds++) {
    const r = await api.range({ key: cursor, range_end: end, limit: String(PAGE), keys_only: true });
    const kvs = r.kvs || [];
    if (!kvs.length) return { entries: out, next: null };
    let jumped = false;
    for (const kv of kvs) {
      const k = api.str(kv.key);
      const rest = k.slice(prefix.length);
      const i = rest.indexOf('/');
      if (i >= 0) {
        const dir = prefix + rest.slice(0, i + 1);
        out.push({ dir: true, key: dir });
        // Jump past the directory: the keys after it in this batch are in it.
        cursor = api.prefixEnd(dir);
        jumped = true;
        break;
      }
      out.push({ dir: false, key: k, lease: kv.lease });
      const kb = api.unb64(kv.key);
      const nx = new Uint8Array(kb.length + 1);
      nx.set(kb);
      cursor = api.b64(nx); // the smallest key after k
      if (out.length >= PAGE) break;
    }
    if (!jumped && !r.more) return { entries: out, next: null };
  }
  return { entries: out, next: cursor };
}

async function keysPage(ctx) {
  const { main, q } = ctx;
  const prefix = q.get('p') || '';
  const sel = q.get('k');
  const tree = h('ul', { class: 'tree', id: 'key-tree', 'aria-label': 'Keys under ' + (prefix || '/') });
  const more = h('button', { id: 'more-keys', hidden: true }, 'Load more');
  const count = h('div', { class: 'muted', id: 'key-count' }, 'Counting…'); // text from the start: no layout shift when the count arrives
  const crumbs = h('div', { class: 'row', 'aria-label': 'Path' });
  add(crumbs, h('a', { href: '#/keys' }, '(root)'));
  let acc = '';
  for (const seg of prefix.split('/').slice(0, -1)) {
    acc += seg + '/';
    add(crumbs, ' / ', h('a', { href: '#/keys?' + new URLSearchParams({ p: acc }) }, seg));
  }
  const jump = h('input', { id: 'key-jump', placeholder: 'go to key…', 'aria-label': 'Go to key' });
  const viewer = h('div', { class: 'card', id: 'key-viewer' });
  add(main, h('h2', {}, 'Keys'),
    h('div', { class: 'split' },
      h('div', { class: 'card' }, crumbs,
        h('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); const k = jump.value; if (k) go('keys', { p: k.includes('/') ? k.slice(0, k.lastIndexOf('/') + 1) : '', k }); } }, jump, h('button', { type: 'submit' }, 'Open')),
        count, tree, more,
        may('write', prefix) ? h('div', { class: 'row' }, h('button', { id: 'new-key', onclick: () => editor(viewer, { key: prefix, fresh: true }) }, 'New key')) : null),
      viewer));
  const t0 = performance.now();
  let next = null;
  async function load() {
    more.disabled = true;
    const { entries, next: n } = await listChildren(prefix, next);
    next = n;
    for (const e of entries) {
      const label = e.key.slice(prefix.length) || '(this key)';
      const params = e.dir ? { p: e.key } : { p: prefix, k: e.key };
      add(tree, h('li', {}, h('a', { href: '#/keys?' + new URLSearchParams(params), class: e.dir ? 'dir' : 'key', 'data-key': e.key, 'aria-current': e.key === sel ? 'true' : null }, label)));
    }
    more.hidden = !next;
    more.disabled = false;
  }
  more.addEventListener('click', () => load().catch((e) => add(viewer, errBox(e))));
  await load();
  const total = await api.range({ key: api.b64(prefix || '\0'), range_end: api.prefixEnd(prefix), count_only: true });
  count.textContent = `${total.count || 0} keys under ${prefix || '/'} (listed in ${Math.round(performance.now() - t0)} ms)`;
  document.body.dataset.keysLoadedMs = String(Math.round(performance.now() - t0));
  if (sel !== null) await showKey(viewer, sel);
  else add(viewer, h('p', { class: 'muted' }, 'Select a key.'));
}

function valueViews(bytes) {
  const text = api.bytesText(bytes);
  let json = null;
  try { json = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not JSON */ }
  const hex = Array.from(bytes.slice(0, 4096), (b, i) => (i % 16 === 0 ? (i ? '\n' : '') + i.toString(16).padStart(6, '0') + '  ' : '') + b.toString(16).padStart(2, '0') + ' ').join('');
  return { text, json, hex };
}

async function showKey(viewer, key) {
  fill(viewer, h('p', {}, 'Loading…'));
  const kv = await api.getKey(key);
  if (!kv) { fill(viewer, h('h3', { id: 'key-name', class: 'mono' }, key), await missingKey(key)); return; }
  const bytes = api.unb64(kv.value);
  const v = valueViews(bytes);
  const pre = h('pre', { id: 'key-value', tabindex: '0' });
  const modes = h('div', { class: 'row', role: 'group', 'aria-label': 'Value view' });
  const show = (m) => { pre.textContent = m === 'json' ? v.json : m === 'hex' ? v.hex : v.text; for (const b of modes.children) b.setAttribute('aria-pressed', String(b.dataset.mode === m)); };
  for (const [m, label] of [['text', 'Text'], ['json', 'JSON'], ['hex', 'Hex']]) {
    if (m === 'json' && v.json === null) continue;
    add(modes, h('button', { 'data-mode': m, onclick: () => show(m) }, label));
  }
  show(v.json !== null ? 'json' : 'text');
  const lease = kv.lease && kv.lease !== '0' ? kv.lease : null;
  const leaseInfo = h('span', { id: 'key-lease' }, lease ? h('a', { href: '#/leases?' + new URLSearchParams({ id: lease }) }, lease) : 'none');
  if (lease) api.post('/v1/lease/timetolive', { id: lease }).then((t) => add(leaseInfo, ` (${fmtMs(num(t.remaining_ms))} left of ${fmtMs(num(t.granted_ttl_ms))})`)).catch(() => {});
  const lockInfo = h('span', { id: 'key-lock' }, '…');
  api.post('/v1/lock/describe', { key: api.b64(key) }).then((d) => {
    lockInfo.textContent = d.held ? `held by ${d.holder.owner} (token ${d.holder.token}, ${fmtMs(num(d.remaining_ms))} left, ${d.queue_length || 0} waiting)` : 'not locked';
  }).catch((e) => { lockInfo.textContent = describe(e); });
  const actions = h('div', { class: 'row' });
  const confirmBox = h('div');
  if (may('write', key)) {
    add(actions, h('button', { id: 'edit-key', class: 'primary', onclick: () => editor(viewer, { key, kv, text: v.text }) }, 'Edit'),
      h('button', { id: 'delete-key', class: 'danger', onclick: () => {
        fill(confirmBox, h('div', { class: 'msg error', role: 'alertdialog', 'aria-label': 'Confirm delete' }, `Delete ${key} (version ${kv.version})? `,
          h('button', { id: 'confirm-delete', class: 'danger', onclick: async () => {
            try {
              await api.post('/v1/kv/deleterange', { key: api.b64(key), if_version: kv.version });
              toast(`Deleted ${key}`);
              go('keys', { p: key.slice(0, key.lastIndexOf('/') + 1) });
            } catch (e) { fill(confirmBox, conflictBox(e, key)); }
          } }, 'Delete'), ' ', h('button', { onclick: () => fill(confirmBox, ) }, 'Cancel')));
        $('#confirm-delete', confirmBox).focus();
      } }, 'Delete'));
  }
  const history = h('div', { id: 'key-history' });
  fill(viewer, h('h3', { id: 'key-name', class: 'mono' }, key),
    h('table', {}, h('tbody', {},
      h('tr', {}, h('th', {}, 'Version'), h('td', { id: 'key-version' }, kv.version)),
      h('tr', {}, h('th', {}, 'Modified at revision'), h('td', {}, kv.mod_revision)),
      h('tr', {}, h('th', {}, 'Created at revision'), h('td', {}, kv.create_revision)),
      h('tr', {}, h('th', {}, 'Size'), h('td', {}, fmtBytes(bytes.length))),
      h('tr', {}, h('th', {}, 'Lease'), h('td', {}, leaseInfo)),
      h('tr', {}, h('th', {}, 'Lock'), h('td', {}, lockInfo)))),
    modes, pre, actions, confirmBox, history);
  loadHistory(history, key, kv).catch((e) => add(history, errBox(e)));
}

// missingKey says what there is of a key without a value: a lock can be
// held on it (a lock's key needs no value), and then writes to it must
// carry the holder's handle, so the holder is what the reader is after.
async function missingKey(key) {
  const none = h('p', { class: 'muted', id: 'key-missing' }, 'This key does not exist (now).');
  let d;
  try {
    d = await api.post('/v1/lock/describe', { key: api.b64(key) });
  } catch (e) {
    return [none, h('p', { class: 'muted', id: 'key-lock' }, 'Lock: ', describe(e))];
  }
  if (!d.held) return none;
  const lease = String(d.holder.lease || '0');
  return [h('p', { id: 'key-missing' }, 'This key has no value (now), but it is locked: a write to it must carry the holder\'s handle.'),
    h('table', { id: 'key-lock' }, h('tbody', {},
      h('tr', {}, h('th', {}, 'Holder'), h('td', { id: 'key-lock-holder' }, d.holder.owner)),
      h('tr', {}, h('th', {}, 'Fencing token'), h('td', { id: 'key-lock-token' }, String(d.holder.token))),
      h('tr', {}, h('th', {}, 'Lease'), h('td', { id: 'key-lock-lease' }, h('a', { href: '#/leases?' + new URLSearchParams({ id: lease }) }, lease), ` (${fmtMs(num(d.remaining_ms))} left)`)),
      h('tr', {}, h('th', {}, 'Waiters'), h('td', { id: 'key-lock-waiters' }, `${num(d.queue_length)} waiting`)))),
    h('p', {}, h('a', { href: '#/locks' }, 'All locks'), h('span', { class: 'muted' }, ' (with when it was granted and who waits, in order)'))];
}

function conflictBox(e, key) {
  if (e instanceof api.ApiError && (e.status === 409 || /CONFLICT/.test(e.reason))) {
    return h('div', { class: 'msg error', role: 'alert', id: 'conflict' }, `Conflict: ${key} was changed by someone else since you opened it, so nothing was written. `,
      h('button', { onclick: () => route() }, 'Reload the key'), h('div', { class: 'muted' }, e.message));
  }
  return errBox(e);
}

function editor(viewer, { key, kv, text, fresh }) {
  const name = h('input', { id: 'edit-name', value: key, class: 'mono', 'aria-label': 'Key', size: 40, readonly: fresh ? null : true });
  const ta = h('textarea', { id: 'edit-value', 'aria-label': 'Value' });
  ta.value = text || '';
  const out = h('div');
  fill(viewer, h('h3', {}, fresh ? 'New key' : `Edit ${key}`),
    h('form', { onsubmit: async (ev) => {
      ev.preventDefault();
      const k = name.value;
      if (!k) { fill(out, errBox('The key must not be empty.')); return; }
      // Compare-and-set on the version shown: a write made since fails.
      const req = { key: api.b64(k), value: api.b64(ta.value) };
      if (fresh) req.if_absent = true; else { req.if_version = kv.version; if (kv.lease && kv.lease !== '0') req.ignore_lease = true; }
      try {
        await api.post('/v1/kv/put', req);
        toast(`Saved ${k}`);
        const p = k.slice(0, k.lastIndexOf('/') + 1);
        if (parseHash().q.get('k') === k) route(); else go('keys', { p, k });
      } catch (e) {
        if (fresh && e instanceof api.ApiError && e.status === 409) fill(out, errBox(`${k} already exists: open it to edit it.`));
        else fill(out, conflictBox(e, k));
      }
    } },
    h('div', { class: 'row' }, h('label', { for: 'edit-name' }, 'Key'), name),
    fresh ? null : h('p', { class: 'muted' }, `Saving writes only if the key is still at version ${kv.version}.`),
    ta, h('div', { class: 'row' }, h('button', { id: 'save-key', class: 'primary', type: 'submit' }, 'Save'), h('button', { type: 'button', onclick: () => route() }, 'Cancel')), out));
  (fresh ? name : ta).focus();
}

async function loadHistory(box, key, kv) {
  const versions = [{ rev: num(kv.mod_revision), version: num(kv.version), value: api.unb64(kv.value) }];
  let note = '';
  for (let rev = num(kv.mod_revision) - 1; versions.length < 20 && rev >= num(kv.create_revision);) {
    let old;
    try { old = await api.getKey(key, rev); } catch (e) { note = e.status === 410 || /COMPACTED/.test(e.reason || '') ? 'older revisions are compacted' : describe(e); break; }
    if (!old || old.create_revision !== kv.create_revision) break;
    versions.push({ rev: num(old.mod_revision), version: num(old.version), value: api.unb64(old.value) });
    rev = num(old.mod_revision) - 1;
  }
  const a = h('select', { id: 'diff-a', 'aria-label': 'Older revision' }), b = h('select', { id: 'diff-b', 'aria-label': 'Newer revision' });
  versions.forEach((v, i) => { a.append(h('option', { value: i, selected: i === 1 }, `rev ${v.rev} (v${v.version})`)); b.append(h('option', { value: i, selected: i === 0 }, `rev ${v.rev} (v${v.version})`)); });
  const out = h('pre', { class: 'diff', id: 'diff-out' });
  const diff = () => fill(out, ...lineDiff(api.bytesText(versions[a.value].value), api.bytesText(versions[b.value].value)));
  a.addEventListener('change', diff); b.addEventListener('change', diff);
  add(box, h('h3', {}, 'History'),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Revision'), h('th', {}, 'Version'), h('th', {}, 'Value'))),
      h('tbody', {}, versions.map((v) => h('tr', {}, h('td', {}, v.rev), h('td', {}, v.version), h('td', { class: 'mono' }, preview(v.value)))))),
    note ? h('p', { class: 'muted' }, note) : null,
    versions.length > 1 ? h('div', {}, h('div', { class: 'row' }, 'Diff ', a, ' → ', b), out) : h('p', { class: 'muted' }, 'Only one version.'));
  if (versions.length > 1) diff();
}

function preview(bytes, n = 80) {
  const t = api.bytesText(bytes.slice(0, n * 4));
  return t.length > n ? t.slice(0, n) + '…' : t;
}

// lineDiff: an LCS line diff, as <del>/<ins>/text lines.
function lineDiff(x, y) {
  const A = x.split('\n'), B = y.split('\n');
  if (A.length * B.length > 250000) return [h('span', {}, 'Too large to diff here.')];
  const L = Array.from({ length: A.length + 1 }, () => new Uint32Array(B.length + 1));
  for (let i = A.length - 1; i >= 0; i--) for (let j = B.length - 1; j >= 0; j--) L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < A.length || j < B.length) {
    if (i < A.length && j < B.length && A[i] === B[j]) { out.push(h('span', {}, '  ' + A[i] + '\n')); i++; j++; }
    else if (j < B.length && (i === A.length || L[i][j + 1] >= L[i + 1][j])) { out.push(h('ins', {}, '+ ' + B[j])); j++; }
    else { out.push(h('del', {}, '- ' + A[i])); i++; }
  }
  return out;
}

// ---- watch -----------------------------------------------------------------
async function watchPage(ctx) {
  const { main, q } = ctx;
  const key = h('input', { id: 'watch-key', value: q.get('key') || '', placeholder: 'key or prefix', class: 'mono', 'aria-label': 'Key or prefix' });
  const pre = h('input', { id: 'watch-prefix', type: 'checkbox', checked: q.get('prefix') !== 'false' });
  const rev = h('input', { id: 'watch-rev', type: 'number', min: '0', placeholder: 'now', 'aria-label': 'Start revision', style: 'width:8em', value: q.get('rev') || '' });
  const filter = h('input', { id: 'watch-filter', placeholder: 'filter events', 'aria-label': 'Filter events' });
  const startBtn = h('button', { id: 'watch-start', class: 'primary', type: 'submit' }, 'Start');
  const pauseBtn = h('button', { id: 'watch-pause', type: 'button', disabled: true }, 'Pause');
  const status = h('span', { class: 'muted', id: 'watch-status' }, 'not watching');
  const tbody = h('tbody', { id: 'watch-events' });
  add(main, h('h2', {}, 'Live watch'),
    h('form', { class: 'card row', onsubmit: (ev) => { ev.preventDefault(); start(); } },
      key, h('label', {}, pre, 'prefix'), h('label', {}, 'from revision', rev), startBtn, pauseBtn, filter, status),
    h('div', { class: 'card' }, h('table', {}, h('thead', {}, h('tr', {}, ['Type', 'Key', 'Revision', 'Version', 'Value'].map((t) => h('th', { scope: 'col' }, t)))), tbody)));
  let stop = null, paused = false, held = [], n = 0;
  const matches = (tr) => !filter.value || tr.textContent.toLowerCase().includes(filter.value.toLowerCase());
  filter.addEventListener('input', () => { for (const tr of tbody.children) tr.hidden = !matches(tr); });
  const addRow = (ev) => {
    const kv = ev.kv || {};
    const tr = h('tr', { 'data-type': ev.type || 'PUT' },
      h('td', {}, h('span', { class: 'badge ' + (ev.type === 'DELETE' ? 'bad' : 'ok') }, ev.type || 'PUT')),
      h('td', { class: 'mono' }, h('a', { href: '#/keys?' + new URLSearchParams({ p: api.str(kv.key).slice(0, api.str(kv.key).lastIndexOf('/') + 1), k: api.str(kv.key) }) }, api.str(kv.key))),
      h('td', { class: 'num' }, kv.mod_revision || ''), h('td', { class: 'num' }, kv.version || ''),
      h('td', { class: 'mono' }, ev.type === 'DELETE' ? '' : preview(api.unb64(kv.value))));
    tr.hidden = !matches(tr);
    tbody.prepend(tr);
    while (tbody.children.length > 1000) tbody.lastChild.remove();
  };
  pauseBtn.addEventListener('click', () => {
    paused = !paused;
    pauseBtn.textContent = paused ? 'Resume' : 'Pause';
    if (!paused) { held.forEach(addRow); held = []; }
    status.textContent = paused ? 'paused (events are kept)' : `watching, ${n} events`;
  });
  function start() {
    if (stop) stop();
    n = 0; held = []; paused = false; pauseBtn.textContent = 'Pause';
    fill(tbody, );
    const params = { key: key.value || '\0' };
    if (pre.checked) params.prefix = 'true';
    if (!key.value) { params.range_end = '\0'; delete params.prefix; }
    if (rev.value) params.rev = rev.value;
    status.textContent = 'connecting…';
    stop = api.watch(params, (resp) => {
      if (resp.canceled) { status.textContent = `stopped: ${resp.cancel_reason || 'canceled'}`; pauseBtn.disabled = true; return; }
      if (resp.created) { status.textContent = 'watching, 0 events'; status.dataset.state = 'watching'; pauseBtn.disabled = false; }
      for (const ev of resp.events || []) {
        n++;
        if (paused) held.push(ev); else addRow(ev);
      }
      if (!paused && (resp.events || []).length) status.textContent = `watching, ${n} events`;
      if (paused) status.textContent = `paused, ${held.length} events held`;
    }, (e) => { status.textContent = 'watch failed: ' + describe(e); pauseBtn.disabled = true; });
  }
  ctx.onStop(() => { if (stop) stop(); });
  if (q.get('key') !== null) start();
}

// ---- leases ---------------------------------------------------------------
async function leasesPage(ctx) {
  const { main, q } = ctx;
  const tbody = h('tbody', { id: 'lease-rows' });
  const info = h('p', { class: 'muted' });
  add(main, h('h2', {}, 'Leases'), h('div', { class: 'card' }, info,
    h('table', {}, h('thead', {}, h('tr', {}, ['Lease', 'TTL', 'Remaining', 'Attached keys and locks', ''].map((t) => h('th', { scope: 'col' }, t)))), tbody)));
  let rows = [];
  async function refresh() {
    const ls = (await api.get('/v1/lease/leases')).leases || [];
    // Locks a lease holds or waits for (a lock's own lease holds no key).
    const lockOf = {};
    try {
      for (const l of (await api.get('/v1/locks')).locks) {
        (lockOf[String(l.lease)] ||= []).push(`holds lock ${l.key}`);
        for (const w of l.waiters) (lockOf[String(w.lease)] ||= []).push(`waits for lock ${l.key}`);
      }
    } catch (_) { /* not allowed: keys only */ }
    const got = await Promise.all(ls.map((l) => api.post('/v1/lease/timetolive', { id: l.id, keys: true }).then((t) => ({ t, at: performance.now() })).catch(() => null)));
    rows = [];
    fill(tbody, );
    got.forEach((g) => {
      if (!g || num(g.t.granted_ttl_ms) === 0 && num(g.t.remaining_ms) <= 0 && !g.t.id) return;
      const id = g.t.id;
      const remaining = h('td', { class: 'num', 'data-lease-remaining': id });
      const keys = (g.t.keys || []).map(api.str);
      const confirmCell = h('td');
      const revoke = h('button', { class: 'danger', 'data-revoke': id, onclick: () => {
        fill(confirmCell, `Revoke ${id} and delete its ${keys.length} keys? `,
          h('button', { class: 'danger', 'data-confirm-revoke': id, onclick: async () => {
            try { await api.post('/v1/lease/revoke', { id }); toast(`Revoked lease ${id}`); await refresh(); } catch (e) { fill(confirmCell, errBox(e)); }
          } }, 'Revoke'), ' ', h('button', { onclick: () => fill(confirmCell, revoke) }, 'Cancel'));
        confirmCell.querySelector('button').focus();
      } }, 'Revoke');
      add(confirmCell, keys.every((k) => may('write', k)) ? revoke : '');
      const tr = h('tr', { 'data-lease': id, class: q.get('id') === id ? 'selected' : null },
        h('td', { class: 'mono' }, id), h('td', { class: 'num' }, fmtMs(num(g.t.granted_ttl_ms))), remaining,
        h('td', { class: 'mono' }, keys.length ? keys.slice(0, 20).map((k) => h('div', {}, h('a', { href: '#/keys?' + new URLSearchParams({ p: k.slice(0, k.lastIndexOf('/') + 1), k }), 'data-lease-key': k }, k))) : (lockOf[id] ? null : h('span', { class: 'muted' }, 'none')), keys.length > 20 ? h('div', { class: 'muted' }, `and ${keys.length - 20} more`) : null,
          (lockOf[id] || []).map((x) => h('div', { class: 'muted', 'data-lease-lock': id }, x))),
        confirmCell);
      rows.push({ remaining, ms: num(g.t.remaining_ms), at: g.at });
      tbody.append(tr);
    });
    info.textContent = `${rows.length} leases (remaining time counts down here and is re-read every 5 s)`;
    tick();
  }
  function tick() {
    const now = performance.now();
    for (const r of rows) r.remaining.textContent = fmtMs(r.ms - (now - r.at));
  }
  ctx.every(250, tick);
  ctx.every(5000, () => refresh().catch((e) => { fill(info, errBox(e)); }));
}

// ---- locks and elections ------------------------------------------------------
function fmtTime(ms) { return new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC'; }

// grantedAt: when the holder got the lock: the time the granting raft
// entry carried and the store revision then (either may be unknown: 0).
function grantedAt(l, now) {
  const t = num(l.granted_unix_ms), rev = num(l.granted_revision);
  if (!t && !rev) return h('span', { class: 'muted' }, 'not recorded');
  return h('span', {}, t ? h('time', { datetime: new Date(t).toISOString() }, fmtTime(t)) : null,
    t ? h('span', { class: 'muted' }, ` (${fmtMs(now - t)} ago)`) : null,
    rev ? h('div', { class: 'muted' }, `at revision ${rev}`) : null);
}

async function locksPage(ctx) {
  const { main } = ctx;
  const locks = h('tbody', { id: 'lock-rows' });
  const elections = h('tbody', { id: 'election-rows' });
  const info = h('p', { class: 'muted' });
  add(main, h('h2', {}, 'Locks'), h('div', { class: 'card' }, info,
    h('table', {}, h('thead', {}, h('tr', {}, ['Key', 'Holder', 'Fencing token', 'Granted', 'Lease', 'Expires in', 'Waiters (FIFO)'].map((t) => h('th', { scope: 'col' }, t)))), locks)),
  h('h2', {}, 'Elections'), h('div', { class: 'card' }, h('p', { class: 'muted' }, 'An election is a lock whose candidates store their values under NAME/candidates/; its term is the lock\'s fencing token.'),
    h('table', {}, h('thead', {}, h('tr', {}, ['Election', 'Leader', 'Term', 'Candidates'].map((t) => h('th', { scope: 'col' }, t)))), elections)));
  ctx.every(2000, async () => {
    let r;
    try { r = await api.get('/v1/locks'); } catch (e) { fill(info, errBox(e)); return; }
    const at = Date.now();
    info.textContent = `${r.locks.length} held locks${r.more ? ' (more not shown)' : ''}, at revision ${r.revision}`;
    fill(locks, ...r.locks.map((l) => h('tr', { 'data-lock': l.key },
      h('td', { class: 'mono' }, h('a', { href: '#/keys?' + new URLSearchParams({ p: l.key.slice(0, l.key.lastIndexOf('/') + 1), k: l.key }) }, l.key)), h('td', { 'data-holder': l.key }, l.owner), h('td', { class: 'num' }, l.token),
      h('td', { 'data-granted': l.key }, grantedAt(l, at)),
      h('td', { class: 'mono' }, h('a', { href: '#/leases?' + new URLSearchParams({ id: String(l.lease) }) }, String(l.lease))),
      h('td', { class: 'num' }, l.remaining_ms ? fmtMs(l.remaining_ms - (Date.now() - at)) : '—'),
      h('td', { 'data-waiters': l.key }, l.waiters.length ? h('ol', {}, l.waiters.map((w) => h('li', {}, w.owner))) : h('span', { class: 'muted' }, 'none')))));
    const rowsE = [];
    for (const l of r.locks) {
      let c;
      try { c = await api.range({ key: api.b64(l.key + '/candidates/'), range_end: api.prefixEnd(l.key + '/candidates/') }); } catch (_) { continue; }
      const cands = (c.kvs || []).map((kv) => ({ id: api.str(kv.key).slice((l.key + '/candidates/').length), value: api.str(kv.value) }));
      if (!cands.length) continue;
      const leader = cands.find((x) => x.id === l.owner);
      rowsE.push(h('tr', { 'data-election': l.key }, h('td', { class: 'mono' }, l.key),
        h('td', {}, leader ? `${leader.value} (${leader.id})` : l.owner), h('td', { class: 'num' }, l.token),
        h('td', {}, h('ul', {}, cands.map((x) => h('li', {}, `${x.id}: ${x.value}`, x.id === l.owner ? ' (leader)' : ''))))));
    }
    fill(elections, ...(rowsE.length ? rowsE : [h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No elections.'))]));
  });
}

// ---- recipes -------------------------------------------------------------------
// queueOrder is a job's key under dkv.queue/NAME/j/, as internal/queuekeys
// writes it: the priority (sign bit flipped, then inverted so higher
// sorts first), run-at in ms and the id, in hex.
function queueOrder(priority, runAtMs, id) {
  const p = (~((priority | 0) ^ 0x80000000)) >>> 0;
  return p.toString(16).padStart(8, '0') + Math.max(0, Math.floor(runAtMs)).toString(16).padStart(16, '0') + id;
}

// requeue moves a dead-lettered job back to the queue, visible now with
// its attempts reset, in one transaction as client/recipe's
// Queue.Requeue does: only if the dead letter is still the one shown.
async function requeue(queue, j) {
  const kv = j._kv;
  const rec = JSON.parse(api.str(kv.value));
  delete rec.attempt; // 0, omitted as the Go record omits it
  delete rec.dead_ms;
  rec.run_at_ms = Date.now();
  const jobKey = `dkv.queue/${queue}/j/` + queueOrder(rec.priority || 0, rec.run_at_ms, rec.id);
  const r = await api.post('/v1/kv/txn', {
    compare: [{ key: kv.key, target: 'MOD', result: 'EQUAL', mod_revision: kv.mod_revision }],
    success: [{ request_delete_range: { key: kv.key } }, { request_put: { key: api.b64(jobKey), value: api.b64(JSON.stringify(rec)) } }],
  });
  if (!r.succeeded) throw new Error(`Job ${rec.id} left the dead-letter list meanwhile (requeued, purged or changed by someone else): nothing was written.`);
}

function requeueCell(queue, j) {
  const cell = h('div');
  const key = api.str(j._kv.key);
  if (!may('write', key) || !may('write', `dkv.queue/${queue}/j/`)) {
    add(cell, h('span', { class: 'muted mono' }, `dkv queue requeue ${queue} ${j.id}`));
    return cell;
  }
  const btn = h('button', { 'data-requeue': j.id, title: `Move job ${j.id} back to ${queue}, visible now, attempts reset`, onclick: async () => {
    btn.disabled = true;
    try {
      await requeue(queue, j);
      toast(`Requeued job ${j.id} on ${queue}`);
      fill(cell, h('span', { class: 'badge ok', 'data-requeued': j.id }, 'requeued'));
    } catch (e) { btn.disabled = false; fill(cell, btn, errBox(e)); }
  } }, 'Requeue');
  add(cell, btn);
  return cell;
}

// ---- feature flags: the document client/recipe's flag.go reads
// (dkv.flags/KEY -> {key, type, variants, defaultVariant, offVariant,
// enabled, rules, rollout}); it refuses unknown fields, so the form
// writes only those.
const FLAG_OPS = ['eq', 'in', 'not_in'];

function flagProblem(f) {
  const vs = Object.keys(f.variants || {});
  for (const [i, r] of (f.rules || []).entries()) {
    if (!r.attribute) return `Rule ${i + 1}: the attribute is empty.`;
    if (!FLAG_OPS.includes(r.op)) return `Rule ${i + 1}: the operator must be eq, in or not_in.`;
    if (r.op === 'eq' && r.values.length !== 1) return `Rule ${i + 1}: eq takes exactly one value.`;
    if (!r.values.length || r.values.length > 1024) return `Rule ${i + 1}: ${r.op} takes 1 to 1024 values.`;
    if (!vs.includes(r.variant)) return `Rule ${i + 1}: "${r.variant}" is not a variant.`;
  }
  if (f.rules && f.rules.length > 64) return 'At most 64 rules.';
  if (f.rollout) {
    if (!vs.includes(f.rollout.variant)) return `The rollout variant "${f.rollout.variant}" is not a variant.`;
    if (!(f.rollout.percent >= 0 && f.rollout.percent <= 100)) return `The rollout percentage ${f.rollout.percent} must be from 0 to 100.`;
  }
  return '';
}

function flagSummary(f) {
  const parts = [h('span', { class: 'badge ' + (f.enabled ? 'ok' : 'bad') }, f.enabled ? 'on' : 'off (' + f.offVariant + ')'), ' default ', h('strong', {}, f.defaultVariant || '?')];
  if (f.rollout) parts.push(h('div', { 'data-flag-rollout': f.key }, `rollout: ${f.rollout.percent}% get ${f.rollout.variant}`));
  for (const r of f.rules || []) parts.push(h('div', { class: 'muted' }, `if ${r.attribute} ${r.op} ${r.values.join(', ')} → ${r.variant}`));
  return parts;
}

function flagForm(box, kv, f, done) {
  const key = api.str(kv.key);
  const variants = Object.keys(f.variants || {}).sort();
  const opt = (sel) => variants.map((v) => h('option', { value: v, selected: v === sel }, v));
  const id = (x) => `flag-${x}`;
  const enabled = h('input', { type: 'checkbox', id: id('enabled'), checked: !!f.enabled });
  const rolloutOn = h('input', { type: 'checkbox', id: id('rollout-on'), checked: !!f.rollout });
  const rolloutVariant = h('select', { id: id('rollout-variant'), 'aria-label': 'Rollout variant' }, opt(f.rollout ? f.rollout.variant : variants[0]));
  const percent = h('input', { type: 'number', id: id('rollout-percent'), min: '0', max: '100', step: '0.01', value: f.rollout ? String(f.rollout.percent) : '0', 'aria-label': 'Rollout percentage', style: 'width:7em' });
  const rules = h('tbody', { id: id('rules') });
  const ruleRow = (r) => {
    const tr = h('tr', {},
      h('td', {}, h('input', { value: r.attribute || '', 'aria-label': 'Attribute', 'data-f': 'attribute', size: 8 })),
      h('td', {}, h('select', { 'aria-label': 'Operator', 'data-f': 'op' }, FLAG_OPS.map((o) => h('option', { value: o, selected: o === r.op }, o)))),
      h('td', {}, h('input', { value: (r.values || []).join(', '), 'aria-label': 'Values, comma-separated', 'data-f': 'values', size: 12 })),
      h('td', {}, h('select', { 'aria-label': 'Variant', 'data-f': 'variant' }, opt(r.variant))),
      h('td', {}, h('button', { type: 'button', 'aria-label': 'Remove this rule', onclick: () => tr.remove() }, 'Remove')));
    return tr;
  };
  for (const r of f.rules || []) rules.append(ruleRow(r));
  const out = h('div');
  const form = h('form', { class: 'flag-form', 'data-flag-form': f.key, onsubmit: async (ev) => {
    ev.preventDefault();
    const next = JSON.parse(api.str(kv.value)); // keep every field as stored
    next.enabled = enabled.checked;
    const rs = [...rules.children].map((tr) => {
      const v = (n) => tr.querySelector(`[data-f="${n}"]`).value;
      return { attribute: v('attribute').trim(), op: v('op'), values: v('values').split(',').map((x) => x.trim()).filter((x) => x !== ''), variant: v('variant') };
    });
    if (rs.length) next.rules = rs; else delete next.rules;
    if (rolloutOn.checked) next.rollout = { variant: rolloutVariant.value, percent: Number(percent.value) };
    else delete next.rollout;
    const why = flagProblem(next);
    if (why) { fill(out, errBox(why)); return; }
    try {
      // Compare-and-set on the version shown.
      await api.post('/v1/kv/put', { key: kv.key, value: api.b64(JSON.stringify(next)), if_version: kv.version });
      toast(`Saved flag ${f.key}`);
      done(true);
    } catch (e) {
      if (e instanceof api.ApiError && (e.status === 409 || /CONFLICT/.test(e.reason))) {
        fill(out, h('div', { class: 'msg error', role: 'alert', id: 'flag-conflict' }, `Conflict: flag ${f.key} was changed by someone else since you opened it (version ${kv.version}), so nothing was written. `,
          h('button', { type: 'button', onclick: () => done(true) }, 'Reload the flag'), h('div', { class: 'muted' }, e.message)));
      } else fill(out, errBox(e));
    }
  } },
  h('h4', {}, `Edit ${f.key}`),
  h('div', { class: 'row' }, h('label', {}, enabled, ' enabled (off serves ', f.offVariant, ')')),
  h('fieldset', {}, h('legend', {}, 'Rollout'),
    h('div', { class: 'row' }, h('label', {}, rolloutOn, ' roll out'), rolloutVariant, h('label', { for: id('rollout-percent') }, 'to'), percent, '% of keys')),
  h('fieldset', {}, h('legend', {}, 'Rules (first match wins)'),
    h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, h('tr', {}, ['Attribute', 'Op', 'Values', 'Variant', ''].map((t) => h('th', { scope: 'col' }, t)))), rules)),
    h('button', { type: 'button', id: id('add-rule'), onclick: () => rules.append(ruleRow({ op: 'eq', variant: variants[0] })) }, 'Add rule')),
  h('p', { class: 'muted' }, `Saving writes ${key} only if it is still at version ${kv.version}.`),
  h('div', { class: 'row' }, h('button', { class: 'primary', type: 'submit', id: id('save') }, 'Save'), h('button', { type: 'button', onclick: () => done(false) }, 'Cancel')), out);
  fill(box, form);
  enabled.focus();
}

async function recipesPage(ctx) {
  const { main } = ctx;
  const queues = h('div', { class: 'card', id: 'queues' });
  const flags = h('div', { class: 'card', id: 'flags' });
  const presence = h('div', { class: 'card', id: 'presence' });
  const limiters = h('div', { class: 'card', id: 'ratelimits' });
  const canaries = h('div', { class: 'card', id: 'canaries' });
  add(main, h('h2', {}, 'Recipes'), queues, h('div', { class: 'grid2' }, flags, presence), canaries, limiters);
  let editingFlag = false;
  async function refreshFlags() {
    try {
      const r = await api.range({ key: api.b64('dkv.flags/'), range_end: api.prefixEnd('dkv.flags/'), limit: '200' });
      if (editingFlag) return;
      // The form opens below the table, full width (a phone's too).
      const formHost = h('div', { id: 'flag-form-host' });
      fill(flags, h('h3', {}, 'Feature flags'), (r.kvs || []).length ? h('table', {}, h('tbody', {}, (r.kvs || []).map((kv) => {
        const k = api.str(kv.key);
        let f = null;
        try { f = JSON.parse(api.str(kv.value)); } catch (_) { /* not a flag document */ }
        const ok = f && typeof f === 'object' && f.variants && typeof f.variants === 'object';
        const tr = h('tr', { 'data-flag': k.slice('dkv.flags/'.length) },
          h('td', { class: 'mono' }, h('a', { href: '#/keys?' + new URLSearchParams({ p: 'dkv.flags/', k }) }, k.slice('dkv.flags/'.length))),
          h('td', {}, ok ? flagSummary(f) : h('pre', {}, valueViews(api.unb64(kv.value)).json || api.str(kv.value))),
          h('td', {}, ok && may('write', k) ? h('button', { 'data-edit-flag': f.key, onclick: () => {
            editingFlag = true;
            for (const x of flags.querySelectorAll('tr.selected')) x.classList.remove('selected');
            tr.classList.add('selected');
            flagForm(formHost, kv, f, (changed) => { editingFlag = false; tr.classList.remove('selected'); fill(formHost); if (changed) refreshFlags(); });
          } }, 'Edit') : null));
        return tr;
      }))) : h('p', { class: 'muted' }, 'No flags under dkv.flags/.'), formHost, h('p', { class: 'muted' }, 'Rules and rollout are edited here with compare-and-set; the whole document from the Keys page.'));
    } catch (e) { fill(flags, h('h3', {}, 'Feature flags'), errBox(e)); }
  }
  async function refreshRateLimits() {
    try {
      const r = await api.get('/v1/ratelimits');
      const now = r.now_unix_ms;
      fill(limiters, h('h3', {}, 'Rate limiters'), r.buckets.length ? h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, ['Bucket', 'Last decision', 'State'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, r.buckets.map((b) => h('tr', { 'data-ratelimit': b.key }, h('td', { class: 'mono' }, b.key),
          h('td', {}, fmtTime(b.last_unix_ms), h('span', { class: 'muted' }, ` (${fmtMs(now - b.last_unix_ms)} ago)`)),
          h('td', {}, b.full_in_ms > 0 ? h('span', { class: 'badge warn' }, `refilling: full in ${fmtMs(b.full_in_ms)}`) : h('span', { class: 'badge ok' }, 'full'))))))) : h('p', { class: 'muted' }, 'No rate limiter buckets.'),
        r.more ? h('p', { class: 'muted' }, 'Showing the first 1,000.') : null,
        h('p', { class: 'muted' }, 'From GET /v1/ratelimits. A bucket keeps only its GCRA state; its rate and burst come with each request, so token counts are the callers\' to know.'));
    } catch (e) { fill(limiters, h('h3', {}, 'Rate limiters'), errBox(e)); }
  }
  // Canary rollouts: the decision log client/recipe's CanaryController
  // records, one JSON record per decision under
  // dkv.canary/NAME/decisions/SEQ, newest last.
  async function refreshCanaries() {
    const p = 'dkv.canary/';
    try {
      const r = await api.range({ key: api.b64(p), range_end: api.prefixEnd(p), limit: '1000' });
      const byName = {};
      for (const kv of r.kvs || []) {
        const rest = api.str(kv.key).slice(p.length);
        const i = rest.indexOf('/decisions/');
        if (i < 0) continue;
        let d = null;
        try { d = JSON.parse(api.str(kv.value)); } catch (_) { continue; }
        (byName[rest.slice(0, i)] ||= []).push(d);
      }
      const names = Object.keys(byName).sort();
      const rate = (v) => `${(v && v.errors) || 0}/${(v && v.requests) || 0}` + (v && v.requests ? ` (${(100 * (v.errors || 0) / v.requests).toFixed(2)}%)` : '');
      const badge = (d) => h('span', { class: 'badge ' + (d === 'rollback' ? 'bad' : d === 'proceed' ? 'ok' : '') }, d);
      fill(canaries, h('h3', {}, 'Canary rollouts'), names.length ? names.map((n) => {
        const ds = byName[n].filter((d) => d.decision !== 'wait').slice(-20);
        const waits = byName[n].length - byName[n].filter((d) => d.decision !== 'wait').length;
        return h('div', { 'data-canary': n }, h('h4', { class: 'mono' }, n), ds.length ? h('div', { class: 'scroll' }, h('table', {},
          h('thead', {}, h('tr', {}, ['#', 'Stage', 'Decision', 'Then', 'Canary errors', 'Baseline errors', 'Term'].map((t) => h('th', { scope: 'col' }, t)))),
          h('tbody', {}, ds.map((d) => h('tr', { 'data-canary-decision': `${n}/${d.seq}` }, h('td', { class: 'num' }, d.seq), h('td', { class: 'num' }, `${d.percent}%`),
            h('td', {}, badge(d.decision)), h('td', { class: 'num' }, `${d.next_percent}%`), h('td', { class: 'num' }, rate(d.canary)), h('td', { class: 'num' }, rate(d.baseline)), h('td', { class: 'num' }, d.term)))))) : null,
        h('p', { class: 'muted' }, `${ds.length} decisions` + (waits ? `, and ${waits} ${waits === 1 ? 'wait' : 'waits'} for enough canary requests` : '') + ` (records under ${p}${n}/decisions/).`));
      }) : h('p', { class: 'muted' }, `No canary decisions under ${p}.`));
    } catch (e) { fill(canaries, h('h3', {}, 'Canary rollouts'), errBox(e)); }
  }
  ctx.every(3000, async () => {
    try {
      const s = await api.metrics();
      const byQ = {};
      for (const m of s) {
        if (m.name === 'dkv_queue_jobs') (byQ[m.labels.queue] ||= {})[m.labels.state] = m.value;
        if (m.name === 'dkv_queue_oldest_age_seconds') (byQ[m.labels.queue] ||= {}).age = m.value;
      }
      const names = Object.keys(byQ).sort();
      fill(queues, h('h3', {}, 'Queues'), names.length ? h('table', {}, h('thead', {}, h('tr', {}, ['Queue', 'Visible', 'Claimed', 'Scheduled', 'Dead letters', 'Oldest visible'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, names.map((n) => { const x = byQ[n]; return h('tr', { 'data-queue': n }, h('td', { class: 'mono' }, n), h('td', { class: 'num' }, x.visible || 0), h('td', { class: 'num' }, x.claimed || 0), h('td', { class: 'num' }, x.scheduled || 0), h('td', { class: 'num' }, x.dead ? h('span', { class: 'badge bad' }, x.dead) : 0), h('td', { class: 'num' }, fmtMs((x.age || 0) * 1000))); })))
        : h('p', { class: 'muted' }, 'No queues.'), h('p', { class: 'muted' }, 'Counts from this member\'s /metrics.'));
      // The oldest dead letters of each queue that has some (job records
      // are JSON under dkv.queue/NAME/d/ID).
      for (const n of names.filter((q) => byQ[q].dead)) {
        const p = `dkv.queue/${n}/d/`;
        let r;
        try { r = await api.range({ key: api.b64(p), range_end: api.prefixEnd(p), limit: '20' }); } catch (_) { continue; }
        const jobs = (r.kvs || []).map((kv) => { try { return Object.assign(JSON.parse(api.str(kv.value)), { _kv: kv }); } catch (_) { return null; } }).filter(Boolean);
        add(queues, h('h3', {}, `Dead letters of ${n}`), h('table', { 'data-dead': n }, h('thead', {}, h('tr', {}, ['Job', 'Attempts', 'Last error', 'Dead since', 'Payload', 'Requeue'].map((t) => h('th', { scope: 'col' }, t)))),
          h('tbody', {}, jobs.map((j) => h('tr', {}, h('td', { class: 'mono' }, j.id), h('td', { class: 'num' }, `${j.attempt || 0} of ${j.max_attempts || '?'}`), h('td', {}, j.last_error || ''),
            h('td', {}, j.dead_ms ? new Date(j.dead_ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC' : ''), h('td', { class: 'mono' }, preview(api.unb64(j.payload || ''), 40)),
            h('td', {}, requeueCell(n, j)))))),
          r.more ? h('p', { class: 'muted' }, 'Showing the oldest 20.') : null);
      }
    } catch (e) { fill(queues, h('h3', {}, 'Queues'), errBox(e)); }
    if (!editingFlag) await refreshFlags();
    await refreshCanaries();
    await refreshRateLimits();
    try {
      const r = await api.range({ key: api.b64('dkv.presence/'), range_end: api.prefixEnd('dkv.presence/'), limit: '500' });
      const groups = {};
      for (const kv of r.kvs || []) {
        const rest = api.str(kv.key).slice('dkv.presence/'.length);
        const i = rest.indexOf('/');
        (groups[rest.slice(0, i)] ||= []).push({ id: rest.slice(i + 1), meta: api.str(kv.value), lease: kv.lease });
      }
      fill(presence, h('h3', {}, 'Presence groups'), Object.keys(groups).length ? h('table', {}, h('tbody', {}, Object.entries(groups).map(([g, ms]) => h('tr', {}, h('td', { class: 'mono' }, g), h('td', {}, ms.map((m) => h('div', {}, h('strong', {}, m.id), ' ', h('span', { class: 'muted' }, preview(api.toBytes(m.meta), 40)), ' lease ', h('a', { href: '#/leases?' + new URLSearchParams({ id: m.lease || '0' }) }, m.lease || '0')))))))) : h('p', { class: 'muted' }, 'No presence groups under dkv.presence/.'));
    } catch (e) { fill(presence, h('h3', {}, 'Presence groups'), errBox(e)); }
  });
}

// ---- start -----------------------------------------------------------------------
async function main() {
  try {
    const st = await api.get('/v1/auth/status');
    session.enabled = !!st.enabled;
  } catch (e) { session.enabled = false; }
  renderWho();
  window.addEventListener('hashchange', route);
  window.addEventListener('dkv-signed-out', () => { renderWho(); route(); });
  route();
}
main();
