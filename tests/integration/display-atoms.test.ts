// Atom ids belong to one X server: a connection to another server must never reuse them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startXvfb } from '../../src/testing/xvfb.ts';
import { XDisplay } from '../../src/display/x-display.ts';

/** The id X server `display` has for `name`, asked by a process of its own (xprop interns it there). */
function serverAtom(env: NodeJS.ProcessEnv, name: string): number {
  execFileSync('xprop', ['-root', '-f', name, '8s', '-set', name, 'x'], { env });
  const out = execFileSync('xlsatoms', ['-name', name], { env, encoding: 'utf8' });
  return Number(out.trim().split(/\s+/)[0]);
}

test('two X servers: each connection interns atoms on its own server (the x11 package shares one table)', async () => {
  const tag = randomBytes(3).toString('hex');
  const pad = `DRUMS_TEST_PAD_${tag}`;
  const name = `DRUMS_TEST_PROP_${tag}`;
  const h1 = await startXvfb({ windowManager: false });
  const h2 = await startXvfb({ windowManager: false });
  let d1: XDisplay | undefined;
  let d2: XDisplay | undefined;
  try {
    // On server 1 the name is interned after another one; on server 2 it is interned first, so its ids differ.
    d1 = await XDisplay.open(h1.socketPath, { cookie: h1.cookie, timeoutMs: 5000 });
    await d1.conn.atom(pad);
    const id1 = await d1.conn.atom(name);
    const id2 = serverAtom(h2.env, name);
    assert.notEqual(id1, id2, 'the test needs the two servers to give the name different ids');
    d2 = await XDisplay.open(h2.socketPath, { cookie: h2.cookie, timeoutMs: 5000 });
    assert.equal(await d2.conn.atom(name), id2, "server 2's connection got server 1's atom id");
    assert.equal(await d1.conn.atom(name), id1);
  } finally {
    await d1?.close();
    await d2?.close();
    await h1.stop();
    await h2.stop();
  }
});
