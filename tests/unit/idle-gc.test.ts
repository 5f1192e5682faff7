import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { startIdleGc } from '../../src/api/metrics.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('the daemon collects once per idle spell, never while a request is in flight', async () => {
  // The real collector, as bin/drums serve's --expose-gc gives it (counted).
  setFlagsFromString('--expose-gc');
  const realGc = runInNewContext('gc') as () => void;
  let calls = 0;
  (globalThis as { gc?: () => void }).gc = () => {
    calls++;
    realGc();
  };
  let finish: (() => void) | undefined;
  const server = createServer((req, res) => {
    if (req.url === '/slow') finish = () => res.end('slow');
    else res.end('ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const idle = startIdleGc(server, 300);
  try {
    await sleep(1000);
    assert.equal(idle.collections(), 0, 'no work yet, nothing to collect');
    await (await fetch(`${url}/`)).text();
    const slow = fetch(`${url}/slow`).then((r) => r.text());
    await sleep(1200);
    assert.equal(idle.collections(), 0, 'a request in flight: not idle');
    finish!();
    await slow;
    for (let i = 0; i < 40 && idle.collections() === 0; i++) await sleep(100);
    assert.equal(idle.collections(), 1);
    await sleep(1200);
    assert.equal(idle.collections(), 1, 'once per idle spell');
    assert.equal(calls, 1);
  } finally {
    idle.stop();
    delete (globalThis as { gc?: () => void }).gc;
    await new Promise((r) => server.close(r));
  }
});
