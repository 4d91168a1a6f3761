// The cart's guarantee: whichever instance answers, no add is lost, even
// when an instance is killed in the middle.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Proc, dkvEndpoints, freshPrefix, skipWithoutDkv } from './proc.mjs';

async function startInstance(procs, name, prefix, port, flags = []) {
  const dkv = dkvEndpoints ? ['--dkv', dkvEndpoints] : [];
  const p = new Proc('cart.mjs', [...dkv, '--name', name, '--port', port, '--prefix', prefix, ...flags]);
  procs.push(p);
  const url = (await p.waitLine(/listening on (http:\S+)/))[1];
  return { p, url };
}

async function startShop(procs, prefix, flags = []) {
  const a = await startInstance(procs, 'A', prefix, 0, flags);
  const b = await startInstance(procs, 'B', prefix, 0, flags);
  const proxy = new Proc('proxy.mjs', ['--port', 0, '--backend', a.url, '--backend', b.url]);
  procs.push(proxy);
  const url = (await proxy.waitLine(/listening on (http:\S+)/))[1];
  return { a, b, proxy, url };
}

// shopper's requests all carry one session cookie: one cart.
async function shopper(url, method, path, body) {
  for (let attempt = 1; ; attempt++) {
    const resp = await fetch(url + path, {
      method,
      headers: { Cookie: 'sid=shopper-1', ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
      signal: AbortSignal.timeout(30000),
    });
    const text = await resp.text();
    if (resp.status === 200) return JSON.parse(text);
    // 502: neither instance answered (the proxy tried both); an add is
    // safe to send again, it carries its id.
    if (resp.status !== 502 || attempt === 3) throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  }
}

// addAll adds one line per id, from two clients at once (each with 10
// requests in flight), through the proxy; afterEach is called with the
// number of adds done so far.
async function addAll(url, ids, afterEach = () => {}) {
  let done = 0;
  const client = async (mine) => {
    const queue = [...mine];
    const worker = async () => {
      for (let id; (id = queue.shift()) !== undefined; ) {
        await shopper(url, 'POST', '/cart/items', { id, item: 'pen' });
        afterEach(++done);
      }
    };
    await Promise.all(Array.from({ length: 10 }, worker));
  };
  await Promise.all([client(ids.filter((_, i) => i % 2 === 0)), client(ids.filter((_, i) => i % 2 === 1))]);
}

test('two instances behind a round-robin lose no add, even when one is killed', { skip: skipWithoutDkv }, async (t) => {
  const procs = [];
  try {
    const prefix = freshPrefix('cart');
    const shop = await startShop(procs, prefix);
    const first = await shopper(shop.url, 'POST', '/cart/items', { id: 'first', item: 'book' });
    const second = await shopper(shop.url, 'GET', '/cart');
    assert.deepEqual([first.instance, second.instance].sort(), ['A', 'B'], 'the proxy alternates');
    assert.deepEqual(second.items, [{ id: 'first', item: 'book' }], 'the instance that did not take the add shows it');

    const ids = Array.from({ length: 100 }, (_, i) => `pen-${String(i).padStart(3, '0')}`);
    let killed;
    await addAll(shop.url, ids, (done) => {
      if (done === 40) killed = shop.b.p.kill(); // a crash in the middle, with requests in flight
    });
    await killed;
    assert.equal(shop.b.p.running(), false);
    const again = shop.proxy.lines.filter((l) => l.includes('sending it to the next instance'));
    assert.ok(again.length > 0, 'no request found B dead: the kill was not in the middle');
    t.diagnostic(`B killed after 40 adds; ${again.length} requests that found it dead were sent to A`);

    // A fresh B on the same port, as a restarted instance: empty memory.
    const port = new URL(shop.b.url).port;
    await startInstance(procs, 'B2', prefix, port);
    const seen = new Set();
    for (let i = 0; i < 2; i++) {
      const cart = await shopper(shop.url, 'GET', '/cart');
      seen.add(cart.instance);
      const got = cart.items.map((l) => l.id);
      assert.equal(new Set(got).size, got.length, `a line twice in the cart shown by ${cart.instance}`);
      const lost = ids.filter((id) => !got.includes(id));
      assert.deepEqual(lost, [], `${cart.instance} shows a cart without ${lost.length} of the 100 adds`);
      assert.equal(got.length, 101);
    }
    assert.deepEqual([...seen].sort(), ['A', 'B2']);
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
  }
});

test('with carts in a Map in each instance, each shows half the cart', async () => {
  // The shop as first written: what the DKV cart is for.
  const procs = [];
  try {
    const shop = await startShop(procs, 'unused/', ['--in-memory']);
    for (let i = 0; i < 10; i++) await shopper(shop.url, 'POST', '/cart/items', { id: `pen-${i}`, item: 'pen' });
    for (let i = 0; i < 2; i++) {
      const cart = await shopper(shop.url, 'GET', '/cart');
      assert.equal(cart.items.length, 5, `${cart.instance} shows ${cart.items.length} of the 10 adds`);
    }
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
  }
});

test('without the compare-and-set, concurrent adds are lost', { skip: skipWithoutDkv }, async (t) => {
  // The instances as they would be without the compare-and-set: a
  // read-modify-write whose write overwrites whatever another request
  // wrote since its read. This is what the test above guards against;
  // here it must lose adds, or the test above would prove nothing.
  const procs = [];
  try {
    const shop = await startShop(procs, freshPrefix('cart-no-cas'), ['--no-cas']);
    const ids = Array.from({ length: 100 }, (_, i) => `pen-${i}`);
    await addAll(shop.url, ids);
    const kept = (await shopper(shop.url, 'GET', '/cart')).items.length;
    t.diagnostic(`without the compare-and-set, the cart kept ${kept} of 100 adds`);
    assert.ok(kept < 100, '100 concurrent read-modify-writes without a compare-and-set lost nothing');
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
  }
});
