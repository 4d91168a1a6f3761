// A small client for DKV's HTTP/JSON API, on Node's built-in fetch only.
//
// It covers what the examples here use: keys, leases and locks.
// docs/http.md describes the API; this file is the part to copy into a
// service.
//
// Three things the API asks of a client, and how they are done here:
//
// - Keys and values are base64 in the JSON, 64-bit integers are strings
//   (JavaScript's numbers lose precision above 2^53): get and list turn
//   them back into strings and Numbers (revisions stay far below 2^53).
// - A refused call is an HTTP status with the DKV status in the body
//   (details[0].reason): it is thrown as DkvError, with that reason.
// - Any member answers any call. A member that cannot be reached, or
//   answers 503 (no leader, stopping), is skipped for the next one. A
//   write whose connection broke after it was sent may or may not have
//   been applied: it is not sent again behind the caller's back but thrown
//   as UnknownOutcome, so the caller can find out and decide.

export class DkvError extends Error {
  constructor(httpStatus, reason, message) {
    super(`${message} (${httpStatus} ${reason})`);
    this.httpStatus = httpStatus;
    this.reason = reason; // CONFLICT, LOCKED, LEASE_NOT_FOUND, UNAVAILABLE, ...
  }
}

export class UnknownOutcome extends Error {}

export function endpointsFrom(arg) {
  const s = arg || process.env.DKV_HTTP || 'http://127.0.0.1:7863';
  return s.split(',').map((e) => e.trim()).filter(Boolean);
}

const b64 = (s) => Buffer.from(s).toString('base64');
const unb64 = (s) => Buffer.from(s || '', 'base64').toString();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function kv(j) {
  return {
    key: unb64(j.key),
    value: unb64(j.value),
    modRevision: Number(j.mod_revision || 0),
    version: Number(j.version || 0),
  };
}

// notSent tells a connection that was never made (nothing was sent, so
// another member may take the call) from one that broke later.
function notSent(err) {
  const code = err && err.cause && err.cause.code;
  return code === 'ECONNREFUSED' || code === 'EHOSTUNREACH' || code === 'UND_ERR_CONNECT_TIMEOUT';
}

export class Client {
  constructor(endpoints, { timeoutMs = 10000, retryForMs = 15000 } = {}) {
    this.endpoints = typeof endpoints === 'string' ? endpointsFrom(endpoints) : endpoints;
    this.timeoutMs = timeoutMs;
    this.retryForMs = retryForMs;
    this.first = 0; // the member that answered last: tried first
  }

  // call sends one call and returns its decoded JSON answer.
  async call(path, body, { idempotent = false, timeoutMs = this.timeoutMs, retryForMs = this.retryForMs } = {}) {
    const deadline = Date.now() + retryForMs;
    let pause = 50;
    let last;
    for (let attempt = 0; ; attempt++) {
      const i = (this.first + attempt) % this.endpoints.length;
      const url = this.endpoints[i] + path;
      let resp;
      let text;
      try {
        resp = await fetch(url, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify(body || {}),
          signal: AbortSignal.timeout(timeoutMs),
        });
        text = await resp.text();
      } catch (err) {
        if (!idempotent && !notSent(err)) {
          throw new UnknownOutcome(`POST ${url}: ${err.cause ? err.cause.message : err.message}`);
        }
        last = `${url}: ${err.cause ? err.cause.message : err.message}`;
      }
      if (resp) {
        if (resp.status === 200) {
          this.first = i;
          return JSON.parse(text || '{}');
        }
        const err = toError(resp.status, text);
        if (resp.status !== 503) throw err;
        last = err.message; // no leader, or stopping: refused, so safe to send again
      }
      if (Date.now() > deadline) throw new DkvError(503, 'UNAVAILABLE', `no member could serve ${path}: ${last}`);
      if ((attempt + 1) % this.endpoints.length === 0) {
        await sleep(pause);
        pause = Math.min(pause * 2, 500);
      }
    }
  }

  // get is the key ({key, value, modRevision, version}), or null.
  async get(key) {
    const r = await this.call('/v1/kv/range', { key: b64(key) }, { idempotent: true });
    return r.kvs ? kv(r.kvs[0]) : null;
  }

  async list(prefix, { keysOnly = false } = {}) {
    const r = await this.call('/v1/kv/range', { key: b64(prefix), prefix: true, keys_only: keysOnly }, { idempotent: true });
    return (r.kvs || []).map(kv);
  }

  // put writes key. ifAbsent and ifModRevision make it a compare-and-set
  // (DkvError CONFLICT if it does not hold); lock is a lock handle: the
  // write applies only while that handle is current (LOCKED otherwise).
  async put(key, value, { ifAbsent, ifModRevision, lease, lock } = {}) {
    const body = { key: b64(key), value: b64(value) };
    if (ifAbsent) body.if_absent = true;
    if (ifModRevision) body.if_mod_revision = String(ifModRevision);
    if (lease) body.lease = String(lease);
    if (lock) body.lock = lock;
    const r = await this.call('/v1/kv/put', body);
    return Number(r.header.revision);
  }

  async leaseGrant(ttlMs) {
    return (await this.call('/v1/lease/grant', { ttl_ms: String(ttlMs) })).id; // a string: lease ids use all 64 bits
  }

  async leaseKeepAlive(lease) {
    await this.call('/v1/lease/keepalive', { id: lease }, { idempotent: true });
  }

  async leaseRevoke(lease) {
    try {
      await this.call('/v1/lease/revoke', { id: lease }, { idempotent: true });
    } catch (err) {
      if (err.reason !== 'LEASE_NOT_FOUND') throw err;
    }
  }

  // lockAcquire waits in key's queue until granted and returns the
  // handle, or null if not granted within about waitMs (the wait then
  // leaves the queue). Call it again with the same owner: if the lock was
  // granted as the last call ended, it returns that grant.
  async lockAcquire(key, lease, owner, { waitMs = 5000 } = {}) {
    try {
      const body = { key: b64(key), lease, owner, wait: true };
      return (await this.call('/v1/lock/acquire', body, { idempotent: true, timeoutMs: waitMs, retryForMs: waitMs })).handle;
    } catch (err) {
      if (err instanceof DkvError && err.reason === 'UNAVAILABLE') return null;
      throw err;
    }
  }
}

function toError(status, text) {
  let message = text;
  let reason = `HTTP_${status}`;
  try {
    const j = JSON.parse(text);
    message = j.message || text;
    if (j.details && j.details[0] && j.details[0].reason) reason = j.details[0].reason;
  } catch {
    // not JSON: a proxy's page, say
  }
  return new DkvError(status, reason, message.trim());
}
