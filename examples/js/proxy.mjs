// A round-robin load balancer, as in front of any web service: each
// request goes to the next instance, so one shopper's requests alternate
// between them.
//
//   node proxy.mjs --port 8080 --backend http://127.0.0.1:8081 --backend http://127.0.0.1:8082
//
// A request whose instance cannot be reached, or dies before answering,
// is sent to the next instance. For the cart that is safe because every
// add carries its id, and an add whose line is already in the cart
// changes nothing; for requests without that property a proxy must not
// retry, or must know the request never reached the instance.

import http from 'node:http';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8080' }, // 0: any free port
    backend: { type: 'string', multiple: true },
  },
});
const backends = (values.backend || []).map((b) => new URL(b));
if (backends.length === 0) {
  console.error('proxy: give at least one --backend URL');
  process.exit(2);
}
let next = 0;

function forward(req, body, backend) {
  return new Promise((resolve, reject) => {
    const out = http.request(
      { host: backend.hostname, port: backend.port, method: req.method, path: req.url, headers: req.headers, agent: false },
      (resp) => {
        const chunks = [];
        resp.on('data', (c) => chunks.push(c));
        resp.on('end', () => resolve({ status: resp.statusCode, headers: resp.headers, body: Buffer.concat(chunks) }));
        resp.on('error', reject);
      },
    );
    out.on('error', reject);
    out.end(body);
  });
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const body = Buffer.concat(chunks);
    const first = next++ % backends.length;
    let last;
    for (let i = 0; i < backends.length; i++) {
      const backend = backends[(first + i) % backends.length];
      try {
        const r = await forward(req, body, backend);
        res.writeHead(r.status, r.headers);
        res.end(r.body);
        return;
      } catch (err) {
        last = `${backend.host}: ${err.message}`;
        console.log(`proxy: ${req.method} ${req.url} to ${last}; sending it to the next instance`);
      }
    }
    res.writeHead(502, { 'Content-Type': 'text/plain' });
    res.end(`no instance answered (${last})\n`);
  });
});
server.listen(Number(values.port), '127.0.0.1', () => {
  console.log(`proxy listening on http://127.0.0.1:${server.address().port}`);
});
process.on('SIGTERM', () => process.exit(0));
