// Windows over EWMH with openbox: list, wait (event driven), activate, close.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startXvfb, waitExit, type XvfbHandle } from '../../src/testing/xvfb.ts';
import { XDisplay } from '../../src/display/x-display.ts';
import { isDisplayError } from '../../src/display/errors.ts';

let h: XvfbHandle;
let d: XDisplay;

before(async () => {
  h = await startXvfb({ windowManager: true });
  d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000 });
});

after(async () => {
  await d?.close();
  await h?.stop();
  for (const c of [h.xvfb, ...h.children]) assert.ok(c.exitCode !== null || c.signalCode !== null, 'child still running');
});

test('waitForWindow, listWindows, activate and close two xterms', async () => {
  const a = h.spawnClient('xterm', ['-T', 'win-a', '-class', 'DrumsA']);
  const b = h.spawnClient('xterm', ['-T', 'win-b']);
  const wa = await d.waitForWindow((w) => w.title === 'win-a' && w.mapped, { timeoutMs: 10_000 });
  const wb = await d.waitForWindow((w) => w.title === 'win-b' && w.mapped, { timeoutMs: 10_000 });
  assert.equal(wa.className, 'DrumsA');
  assert.equal(wb.instance, 'xterm');
  assert.equal(wa.pid, a.pid);
  assert.ok(wa.x >= 0 && wa.y >= 0 && wa.x + wa.width <= 1280 && wa.y + wa.height <= 800);
  const list = await d.listWindows();
  assert.deepEqual(list.map((w) => w.title).sort(), ['win-a', 'win-b']);

  await d.activateWindow(wa.id);
  await d.waitForWindow(() => true, { timeoutMs: 100 }); // no-op: any window
  let active = await d.activeWindow();
  for (let i = 0; i < 20 && active?.id !== wa.id; i++) {
    await new Promise((r) => setTimeout(r, 50));
    active = await d.activeWindow();
  }
  assert.equal(active?.id, wa.id);

  await d.closeWindow(wb.id);
  assert.ok(await waitExit(b, 5000), 'xterm b did not exit on _NET_CLOSE_WINDOW');
  await d.closeWindow(wa.id);
  assert.ok(await waitExit(a, 5000), 'xterm a did not exit on _NET_CLOSE_WINDOW');
});

test('waitForWindow times out with wait_timeout', async () => {
  const t0 = performance.now();
  await assert.rejects(
    d.waitForWindow((w) => w.title === 'never', { timeoutMs: 300 }),
    (err: unknown) => isDisplayError(err, 'wait_timeout'),
  );
  assert.ok(performance.now() - t0 < 1000);
});

test('cursor position follows moves', async () => {
  await d.move(321, 123);
  assert.deepEqual(await d.cursorPosition(), { x: 321, y: 123 });
});
