// The dashboard's only way to the store: the public HTTP/JSON API
// (/v1/...), the streaming watch (GET /v1/watch) and /metrics. The token
// lives in this module's memory only: never in localStorage or a cookie.

let token = null;
export function setToken(t) { token = t || null; }
export function loggedIn() { return token !== null; }

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: false });

export function toBytes(s) { return typeof s === 'string' ? enc.encode(s) : s; }
export function b64(s) {
  const u = toBytes(s);
  let bin = '';
  for (let i = 0; i < u.length; i++) bin += String.fromCharCode(u[i]);
  return btoa(bin);
}
export function unb64(s) {
  if (!s) return new Uint8Array(0);
  const bin = atob(s);
  const u = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
  return u;
}
export function str(s) { return dec.decode(unb64(s)); }
export function bytesText(u) { return dec.decode(u); }

// prefixEnd is the smallest key above every key starting with p, as the
// base64 range_end; "\0" (every key from key on) when there is none.
export function prefixEnd(p) {
  const u = Array.from(toBytes(p));
  for (let i = u.length - 1; i >= 0; i--) {
    if (u[i] < 0xff) { u[i]++; return b64(new Uint8Array(u.slice(0, i + 1))); }
  }
  return b64('\0');
}

export class ApiError extends Error {
  constructor(status, message, reason) {
    super(message);
    this.status = status;
    this.reason = reason || '';
  }
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (token) h['Authorization'] = 'Bearer ' + token;
  return h;
}

async function failure(r) {
  if (r.status === 401 && token) {
    // The token expired or was revoked: forget it; the page asks again.
    token = null;
    window.dispatchEvent(new Event('dkv-signed-out'));
  }
  const t = await r.text();
  let msg = t.trim();
  let reason = r.headers.get('X-Dkv-Status') || '';
  try {
    const j = JSON.parse(t);
    if (j.message) msg = j.message;
    for (const d of j.details || []) if (d.reason) reason = d.reason;
  } catch (_) { /* plain text */ }
  return new ApiError(r.status, msg || r.statusText, reason);
}

export async function call(method, path, body) {
  const r = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
  if (!r.ok) throw await failure(r);
  const t = await r.text();
  return t ? JSON.parse(t) : {};
}
export const get = (p) => call('GET', p);
export const post = (p, b) => call('POST', p, b || {});

export async function metrics() {
  const r = await fetch('/metrics', { headers: headers(false) });
  if (!r.ok) throw await failure(r);
  return parseProm(await r.text());
}

// parseProm reads the Prometheus text format into [{name, labels, value}].
export function parseProm(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3])) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// watch streams GET /v1/watch: onResp gets each WatchResponse; the
// returned function stops it.
export function watch(params, onResp, onError) {
  const ctl = new AbortController();
  const q = new URLSearchParams(params);
  (async () => {
    const r = await fetch('/v1/watch?' + q, { headers: headers(false), signal: ctl.signal });
    if (!r.ok) throw await failure(r);
    const reader = r.body.getReader();
    let buf = '';
    const td = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += td.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) onResp(JSON.parse(line));
      }
    }
  })().catch((e) => { if (!ctl.signal.aborted) onError(e); });
  return () => ctl.abort();
}

// Helpers over the KV API (keys and values as strings).
export async function range(req) {
  return post('/v1/kv/range', req);
}
export async function getKey(key, revision) {
  const r = await range({ key: b64(key), revision: revision ? String(revision) : undefined });
  return (r.kvs || [])[0] || null;
}
