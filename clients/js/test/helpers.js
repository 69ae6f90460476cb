// Helpers of the tests: the gateways' URLs from the environment (started by
// tests/clients_js_test.go) and a tiny HTTP proxy that can stop answering.
import http from 'node:http';
import { Client } from '../src/index.js';

export const url = process.env.REDLOCKD_URL;
export const authURL = process.env.REDLOCKD_TESTS_AUTH_URL;
export const apiKey = process.env.REDLOCKD_API_KEY;
// Two gateways over redis-servers of their own, and the control server that
// pauses, kills and restarts those servers and stops and restarts those
// gateways (tests/clientjs_test.go).
export const faultURLs = process.env.REDLOCKD_TESTS_FAULT_URLS?.split(',');
const faults = process.env.REDLOCKD_TESTS_FAULTS;
if (!url) throw new Error('REDLOCKD_URL is not set: run the tests through `go test ./tests -run TestClientJS`');

let n = 0;
// resource is a lock name of its own for each test.
export const resource = (name) => `js-${name}-${process.pid}-${++n}`;

export const client = (opts = {}) => new Client({ url, ...opts });

// fault asks tests/clientjs_test.go for a fault on the gateways of
// faultURLs and their 3 redis-servers, and resolves once it is done:
// fault('pause', { nodes: 2 }) stops (SIGSTOP) the first 2 servers and
// fault('resume') resumes them; fault('kill', { node: 2 }) kills the third
// and fault('revive', { node: 2 }) starts it again, empty, on its port;
// fault('stop', { gateway: 0 }) stops the first gateway, fault('start',
// { gateway: 0 }) starts it again on its address (answering once it is
// ready) and fault('restart', { gateway: 0 }) does both; fault('heal') undoes
// every fault still in force.
export async function fault(action, params = {}) {
  const res = await fetch(`${faults}/${action}?${new URLSearchParams(params)}`, { method: 'POST' });
  if (res.status !== 204) throw new Error(`fault ${action}: HTTP ${res.status} ${await res.text()}`);
}

// startProxy forwards requests to target. A request for which stall(req)
// is true is never answered; one for which fail(req) is a status gets that
// status at once, as from a proxy whose gateway is away; one for which
// drop(req, body) is true (body: the gateway's answer) reaches the gateway
// but its answer is lost (the connection is cut). The methods of the
// requests received are in methods, in order.
export async function startProxy(target = url) {
  const proxy = { stall: () => false, fail: () => 0, drop: () => false, methods: [] };
  const sockets = new Set();
  const server = http.createServer(async (req, res) => {
    proxy.methods.push(req.method);
    const chunks = [];
    for await (const c of req) chunks.push(c);
    if (proxy.stall(req)) return;
    const status = proxy.fail(req);
    if (status) return res.writeHead(status, { 'Content-Type': 'text/html' }).end('<h1>Bad Gateway</h1>');
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
