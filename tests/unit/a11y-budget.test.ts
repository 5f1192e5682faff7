import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { A11yCallError, A11yClient } from '../../src/a11y/client.ts';
import type { A11yNode } from '../../src/a11y/types.ts';
import { walk } from '../../src/a11y/walk.ts';

// What a session's applications answer is the session's: a walk takes in a bounded amount of it, and one
// message read from its bus is bounded too. (The walk itself is tested against a real AT-SPI stack in
// tests/integration/a11y-walk.test.ts.)

const MiB = 1024 * 1024;

test('a walk of an application that answers every node with 1 MiB of text stops at its budget', async () => {
  const text = 'y'.repeat(MiB);
  let serial = 0;
  const client = {
    timeoutMs: 1000,
    closed: false,
    peer: async () => undefined,
    call: async (m: { member: string }) => {
      await new Promise((r) => setImmediate(r));
      switch (m.member) {
        case 'GetAll':
          return { Name: 'n', ChildCount: 4 };
        case 'GetRole':
          return 1;
        case 'GetState':
          return [0, 0];
        case 'GetInterfaces':
          return ['org.a11y.atspi.Accessible', 'org.a11y.atspi.Text'];
        case 'GetAttributes':
          return [];
        case 'GetText':
          // A fresh string each time, as a real reply would be.
          return text.slice(0, -1) + String(serial++ % 10);
        case 'GetChildren':
          return [0, 1, 2, 3].map(() => [':1.1', `/n/${serial++}`]);
        default:
          return [];
      }
    },
  };
  const r = await walk(client as never, { deadlineMs: 60_000 });
  let held = 0;
  let marked = 0;
  const count = (n: A11yNode): void => {
    held += n.text?.length ?? 0;
    if (n.truncated && n.error === 'budget') marked++;
    n.children.forEach(count);
  };
  count(r.tree);
  assert.equal(r.stats.budgetHit, true, `stats: ${JSON.stringify(r.stats)}`);
  assert.equal(r.stats.deadlineHit, false);
  assert.ok(held <= 64 * MiB, `the tree holds ${held} bytes of text`);
  assert.ok(marked > 0, 'the nodes cut short say why');
});

test("a message over the bound from an application's socket closes that connection, not the process", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'drums-a11y-'));
  const path = join(dir, 'bus');
  const sockets: Socket[] = [];
  const server = createServer((sock) => {
    sockets.push(sock);
    let buf = '';
    let begun = false;
    sock.on('error', () => {});
    const attack = () => {
      // A reply whose header declares a 100 MiB body, then the body trickling in.
      const head = Buffer.alloc(16);
      head.write('l', 0);
      head[1] = 2;
      head[3] = 1;
      head.writeUInt32LE(100 * MiB, 4);
      head.writeUInt32LE(1, 8);
      head.writeUInt32LE(0, 12);
      sock.write(head);
      const timer = setInterval(() => (sock.destroyed ? clearInterval(timer) : sock.write(Buffer.alloc(MiB))), 20);
    };
    sock.on('data', (d) => {
      if (begun) return;
      buf += d.toString('latin1');
      if (buf.includes('AUTH ') && !buf.includes('OK-SENT')) {
        buf += 'OK-SENT';
        sock.write('OK 0123456789abcdef0123456789abcdef\r\n');
      }
      if (buf.includes('NEGOTIATE_UNIX_FD') && !buf.includes('ERR-SENT')) {
        buf += 'ERR-SENT';
        sock.write('ERROR\r\n');
      }
      if (buf.includes('BEGIN\r\n')) {
        begun = true;
        attack();
      }
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  try {
    const c = await A11yClient.connect(path, { peer: true, timeoutMs: 5000 });
    const t0 = performance.now();
    const pending = c.call({ destination: ':1.1', path: '/x', interface: 'org.a11y.atspi.Accessible', member: 'GetRole' }, 5000);
    pending.catch(() => {});
    while (!c.closed && performance.now() - t0 < 1000) await new Promise((r) => setTimeout(r, 20));
    assert.ok(c.closed, 'the connection is dropped at the header, before the body is buffered');
    assert.ok(sockets[0]!.destroyed || (await new Promise((r) => sockets[0]!.once('close', () => r(true)))));
    await assert.rejects(pending, A11yCallError);
    await c.close();
  } finally {
    for (const s of sockets) s.destroy();
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
