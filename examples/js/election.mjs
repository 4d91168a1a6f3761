// Leader election on a lease, and writes fenced by the leader's term.
//
//   node election.mjs --name w1 &
//   node election.mjs --name w2 &
//   node election.mjs --name w3 &
//
// Each worker grants itself a lease (a TTL it keeps alive), registers as a
// candidate and waits for the election's lock. The one holding it leads
// and runs the job: run 1, run 2, ... each recorded under runs/ with a
// write that carries its lock handle, so the store applies it only while
// that worker still leads. A leader that is paused (SIGSTOP, a long GC, a
// VM migration) past its TTL loses the lock to the next worker; when it
// wakes up, its late write is refused (423 LOCKED) and it steps down.
//
// The layout is the Go client's (client/concurrency.Election): the lock on
// NAME, each candidate's value under NAME/candidates/OWNER on its lease, so
// Go, Python and JavaScript workers can stand in one election.

import crypto from 'node:crypto';
import { parseArgs } from 'node:util';
import { Client, DkvError, UnknownOutcome, endpointsFrom } from './dkv.mjs';

const { values } = parseArgs({
  options: {
    dkv: { type: 'string' }, // comma-separated HTTP URLs of DKV members (env DKV_HTTP; default http://127.0.0.1:7863)
    name: { type: 'string' },
    prefix: { type: 'string', default: 'examples/js/election/' },
    ttl: { type: 'string', default: '2' }, // lease TTL in seconds: how long a paused leader keeps leading
    every: { type: 'string', default: '0.3' }, // seconds one run of the job takes
    'no-fence': { type: 'boolean', default: false }, // write without the lock handle: a paused leader's late write lands
  },
});
if (!values.name) {
  console.error('election: --name is required');
  process.exit(2);
}
const name = values.name;
const ttlMs = Number(values.ttl) * 1000;
const everyMs = Number(values.every) * 1000;
const election = values.prefix + 'leader';
const runs = values.prefix + 'runs/';
const dkv = new Client(endpointsFrom(values.dkv));
const say = (msg) => console.log(`${name}: ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const is = (err, reason) => err instanceof DkvError && err.reason === reason;

let lease = null; // the current lease, revoked on SIGTERM

// keepAlive renews the lease every TTL/3 and marks it lost once it has
// expired (or could not be renewed for a whole TTL).
function keepAlive(id) {
  const ka = { lost: false };
  let renewed = Date.now();
  const tick = async () => {
    try {
      await dkv.leaseKeepAlive(id);
      renewed = Date.now();
    } catch (err) {
      if (is(err, 'LEASE_NOT_FOUND') || Date.now() - renewed > ttlMs) {
        say(`lost the lease: ${err.message}`);
        ka.lost = true;
        clearInterval(timer);
      }
    }
  };
  const timer = setInterval(tick, ttlMs / 3);
  ka.stop = () => clearInterval(timer);
  return ka;
}

// campaign waits until this worker leads and returns its lock handle, or
// null if the lease was lost meanwhile.
async function campaign(ka) {
  const owner = `${BigInt(lease).toString(16)}-${crypto.randomBytes(8).toString('hex')}`;
  await dkv.put(`${election}/candidates/${owner}`, name, { lease });
  say(`campaigning (lease ${lease})`);
  while (!ka.lost) {
    try {
      // Waits in the lock's queue a few seconds at a time, so that a lost
      // lease is noticed; always as the same owner, so that a grant made
      // as one wait ended is not lost.
      const handle = await dkv.lockAcquire(election, lease, owner);
      if (handle) {
        say(`leader (term ${handle.token})`);
        return handle;
      }
    } catch (err) {
      if (!is(err, 'LEASE_NOT_FOUND')) throw err;
      say(`lost the lease while campaigning: ${err.message}`);
      return null;
    }
  }
  return null;
}

// lead runs the job until this worker is no longer the leader.
async function lead(handle, ka) {
  for (;;) {
    const done = await dkv.list(runs, { keysOnly: true });
    const n = done.length ? Number(done[done.length - 1].key.slice(runs.length)) + 1 : 1;
    say(`run ${n}: working`);
    await sleep(everyMs); // the job; a pause here is the fault the fence is for
    const key = runs + String(n).padStart(6, '0');
    try {
      await dkv.put(key, name, { lock: values['no-fence'] ? undefined : handle });
      say(`run ${n}: done`);
    } catch (err) {
      if (is(err, 'LOCKED')) {
        say(`run ${n}: write REFUSED, no longer the leader: ${err.message}`);
        return;
      }
      if (!(err instanceof UnknownOutcome)) throw err;
      const kv = await dkv.get(key);
      if (!kv || kv.value !== name) {
        say(`run ${n}: the write's outcome is unknown and it is not there; stepping down`);
        return;
      }
      say(`run ${n}: done`);
    }
    // The store refuses a deposed leader's writes whatever this says;
    // looking at the lease only stops the work sooner.
    if (ka.lost) {
      say('stepping down: the lease is gone');
      return;
    }
  }
}

process.on('SIGTERM', async () => {
  // Revoking the lease releases the lock, so that the next candidate
  // leads at once, and deletes the candidate key.
  if (lease) await dkv.leaseRevoke(lease).catch(() => {});
  process.exit(0);
});

for (;;) {
  try {
    lease = await dkv.leaseGrant(ttlMs);
  } catch (err) {
    if (!is(err, 'UNAVAILABLE')) throw err;
    say(`cannot campaign: ${err.message}`); // DKV is unreachable: try again
    continue;
  }
  const ka = keepAlive(lease);
  try {
    const handle = await campaign(ka);
    if (handle) await lead(handle, ka);
  } catch (err) {
    if (!(err instanceof DkvError)) throw err;
    say(`stepping down: ${err.message}`);
  } finally {
    ka.stop();
    await dkv.leaseRevoke(lease).catch(() => {}); // a deposed leader's lease is gone already
  }
}
