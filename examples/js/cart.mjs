// One instance of a shop whose carts live in DKV, not in the instance.
//
//   node cart.mjs --name A --port 8081 &
//   node cart.mjs --name B --port 8082 &
//   node proxy.mjs --port 8080 --backend http://127.0.0.1:8081 --backend http://127.0.0.1:8082 &
//   curl -c jar -b jar localhost:8080/cart/items -H 'Content-Type: application/json' -d '{"id":"1","item":"pen"}'
//   curl -c jar -b jar localhost:8080/cart
//
// An instance that keeps each cart in a Map (--in-memory) shows a shopper
// behind a round-robin half of the cart (the adds that instance happened
// to answer), and loses it all when it restarts. Here every request reads
// the cart from DKV, and an add writes it back with a compare-and-set on
// the mod_revision it read: if another instance wrote the cart in
// between, the write is refused (409 CONFLICT) and the add is made again
// on the cart as it is now. So concurrent adds through both instances all
// land.

import http from 'node:http';
import crypto from 'node:crypto';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { Client, DkvError, UnknownOutcome, endpointsFrom } from './dkv.mjs';

// addLine adds {id, item} to the cart at key, once: an add sent again (a
// retry after a lost answer, by the shopper, the proxy or this loop) finds
// its line there and changes nothing.
export async function addLine(dkv, key, line, { cas = true } = {}) {
  for (;;) {
    const cur = await dkv.get(key);
    const lines = cur ? JSON.parse(cur.value) : [];
    if (lines.some((l) => l.id === line.id)) return lines;
    lines.push(line);
    try {
      if (!cas) await dkv.put(key, JSON.stringify(lines)); // overwrites whatever landed since the get
      else if (!cur) await dkv.put(key, JSON.stringify(lines), { ifAbsent: true });
      else await dkv.put(key, JSON.stringify(lines), { ifModRevision: cur.modRevision });
      return lines;
    } catch (err) {
      if (err instanceof UnknownOutcome) continue; // the next get shows whether the line landed
      if (!(err instanceof DkvError) || err.reason !== 'CONFLICT') throw err;
      // Another request changed the cart since the get: read it again
      // and add to what is there now.
      await new Promise((r) => setTimeout(r, Math.random() * 5));
    }
  }
}

function session(req) {
  const m = /(?:^|;\s*)sid=([^;]+)/.exec(req.headers.cookie || '');
  return m ? m[1] : null;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let s = '';
    req.on('data', (d) => (s += d));
    req.on('end', () => resolve(s));
    req.on('error', reject);
  });
}

// inMemory is the shop as first written, with each cart in a Map in the
// instance: behind a round-robin, each instance holds the adds it
// answered, and a restart empties it. Only for seeing that happen.
function inMemory() {
  const carts = new Map();
  return {
    load: async (sid) => carts.get(sid) || [],
    add: async (sid, line) => {
      const lines = carts.get(sid) || [];
      if (!lines.some((l) => l.id === line.id)) lines.push(line);
      carts.set(sid, lines);
      return lines;
    },
  };
}

function inDkv(dkv, prefix, cas) {
  return {
    load: async (sid) => {
      const cur = await dkv.get(prefix + sid);
      return cur ? JSON.parse(cur.value) : [];
    },
    add: (sid, line) => addLine(dkv, prefix + sid, line, { cas }),
  };
}

export function startInstance({ carts, name, port }) {
  const server = http.createServer(async (req, res) => {
    const reply = (status, body, headers = {}) => {
      res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    try {
      let sid = session(req);
      if (req.method === 'GET' && req.url === '/cart') {
        return reply(200, { instance: name, items: sid ? await carts.load(sid) : [] });
      }
      if (req.method === 'POST' && req.url === '/cart/items') {
        const { id, item } = JSON.parse((await readBody(req)) || '{}');
        if (typeof item !== 'string' || !item) {
          return reply(400, { error: 'the body needs "item" (and "id", to make a retry safe)' });
        }
        const headers = {};
        if (!sid) {
          sid = crypto.randomBytes(16).toString('hex');
          headers['Set-Cookie'] = `sid=${sid}; Path=/; HttpOnly`;
        }
        const items = await carts.add(sid, { id: String(id || crypto.randomUUID()), item });
        return reply(200, { instance: name, items }, headers);
      }
      return reply(404, { error: 'GET /cart or POST /cart/items' });
    } catch (err) {
      return reply(err instanceof SyntaxError ? 400 : 503, { error: String(err.message) });
    }
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      dkv: { type: 'string' }, // comma-separated HTTP URLs of DKV members (env DKV_HTTP; default http://127.0.0.1:7863)
      name: { type: 'string', default: 'A' },
      port: { type: 'string', default: '8081' }, // 0: any free port
      prefix: { type: 'string', default: 'examples/js/cart/' },
      'no-cas': { type: 'boolean', default: false }, // the broken read-modify-write, to see it lose adds
      'in-memory': { type: 'boolean', default: false }, // carts in a Map in the instance, to see half of each
    },
  });
  const carts = values['in-memory'] ? inMemory() : inDkv(new Client(endpointsFrom(values.dkv)), values.prefix, !values['no-cas']);
  const server = await startInstance({ carts, name: values.name, port: Number(values.port) });
  console.log(`${values.name} listening on http://127.0.0.1:${server.address().port}`);
  process.on('SIGTERM', () => process.exit(0));
}
