// The election's guarantee: one leader at a time, and a deposed leader's
// late write is refused, so every run of the job is recorded once.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Client } from './dkv.mjs';
import { Proc, dkvEndpoints, freshPrefix, skipWithoutDkv, waitFor } from './proc.mjs';

const TTL = 3; // seconds; long enough that a loaded machine does not depose a leader that runs

test('a paused leader\'s late write is refused; a killed leader is replaced', { skip: skipWithoutDkv }, async (t) => {
  const dkv = new Client(dkvEndpoints);
  const prefix = freshPrefix('election');
  const workers = {};
  const start = (name) => {
    workers[name] = new Proc('election.mjs', ['--dkv', dkvEndpoints, '--name', name, '--prefix', prefix, '--ttl', TTL, '--every', 0.3]);
    return workers[name];
  };
  const runs = async () => {
    const m = new Map();
    for (const kv of await dkv.list(prefix + 'runs/')) m.set(Number(kv.key.slice(prefix.length + 5)), kv);
    return m;
  };
  try {
    const w1 = start('w1');
    await w1.waitLine(/^w1: leader \(term \d+\)/);
    for (const name of ['w2', 'w3']) await start(name).waitLine(/campaigning/);
    await w1.waitLine(/run \d+: done/);

    // w1 is paused in the middle of run n, past its TTL.
    w1.skip();
    const n = Number((await w1.waitLine(/run (\d+): working/))[1]);
    w1.signal('SIGSTOP');
    const frozenAt = Date.now();
    const kv = await waitFor(`run ${n} done by another worker`, async () => (await runs()).get(n), 10 * TTL * 1000);
    t.diagnostic(`w1 frozen in run ${n}; ${kv.value} did it ${(Date.now() - frozenAt) / 1000}s later (TTL ${TTL}s)`);
    assert.notEqual(kv.value, 'w1');

    // It wakes up and sends the write it was about to send: refused.
    w1.signal('SIGCONT');
    await w1.waitLine(new RegExp(`run ${n}: write REFUSED, no longer the leader`));
    assert.equal((await runs()).get(n).version, 1, `run ${n} recorded twice`);

    // Now the new leader is killed outright: another takes over.
    const leader = kv.value;
    const before = Math.max(...(await runs()).keys());
    await workers[leader].kill();
    const killedAt = Date.now();
    const next = await waitFor('a run after the leader was killed', async () => (await runs()).get(before + 2), 10 * TTL * 1000);
    t.diagnostic(`${leader} killed; ${next.value} led ${(Date.now() - killedAt) / 1000}s later`);
    assert.notEqual(next.value, leader);

    await Promise.all(Object.values(workers).map((w) => w.stop()));
    const all = await runs();
    const numbers = [...all.keys()].sort((a, b) => a - b);
    assert.deepEqual(numbers, Array.from({ length: numbers.length }, (_, i) => i + 1), 'a run skipped');
    const twice = [...all].filter(([, kv]) => kv.version !== 1).map(([i, kv]) => `run ${i}: ${kv.version} times`);
    assert.deepEqual(twice, [], 'runs recorded more than once');
  } finally {
    await Promise.all(Object.values(workers).map((w) => w.stop()));
  }
});
