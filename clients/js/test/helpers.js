// Helpers of the tests: the gateways' URLs from the environment (started by
// tests/clients_js_test.go) and a tiny HTTP proxy that can stop answering.
import http from 'node:http';
import { Client } from '../src/index.js';

export const url = process.env.REDLOCKD_URL;
export const authURL = process.env.REDLOCKD_TESTS_AUTH_URL;
export const apiKey = process.env.REDLOCKD_API_KEY;
if (!url) throw new Error('REDLOCKD_URL is not set: run the tests through `go test ./tests -run TestClientJS`');

let n = 0;
// resource is a lock name of its own for each test.
export const resource = (name) => `js-${name}-${process.pid}-${++n}`;

export const client = (opts = {}) => new Client({ url, ...opts });

// startProxy forwards requests to target. A request for which stall(req)
// is true is never answered; one for which drop(req, body) is true (body:
// the gateway's answer) reaches the gateway but its answer is lost (the
// connection is cut). The methods of the
// requests received are in methods, in order.
export async function startProxy(target = url) {
  const proxy = { stall: () => false, drop: () => false, methods: [] };
  const sockets = new Set();
  const server = http.createServer(async (req, res) => {
    proxy.methods.push(req.method);
    const chunks = [];
    for await (const c of req) chunks.push(c);
    if (proxy.stall(req)) return;
    const headers = { ...req.headers };
    for (const h of ['host', 'connection', 'content-length', 'keep-alive']) delete headers[h];
    try {
      const up = await fetch(target + req.url, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
      const body = Buffer.from(await up.arrayBuffer());
      if (proxy.drop(req, body)) return req.socket.destroy();
      const out = {};
      up.headers.forEach((v, k) => { if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(k)) out[k] = v; });
      res.writeHead(up.status, out).end(body);
    } catch {
      req.socket.destroy();
    }
  });
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${server.address().port}`;
  proxy.close = () => {
    for (const s of sockets) s.destroy();
    return new Promise((resolve) => server.close(resolve));
  };
  return proxy;
}

// closedURL is a URL on which nothing listens.
export async function closedURL() {
  const server = http.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}
