// Connection lifecycle: failures to connect, request timeouts, and an X server that dies mid-request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startXvfb, waitExit } from '../../src/testing/xvfb.ts';
import { XDisplay } from '../../src/display/x-display.ts';
import { isDisplayError } from '../../src/display/errors.ts';

const unhandled: unknown[] = [];
process.on('unhandledRejection', (err) => {
  unhandled.push(err);
});

test('opening a missing socket fails with connect_failed', async () => {
  await assert.rejects(XDisplay.open('/tmp/.X11-unix/X-no-such-display', { timeoutMs: 2000 }), (err: unknown) => isDisplayError(err, 'connect_failed'));
});

test('a stopped X server makes requests time out instead of hanging', async () => {
  const h = await startXvfb();
  try {
    // A short deadline per request, but a generous one for the open: on a loaded host the open
    // (keymap included) can take longer than 300 ms, which is not what this test is about.
    const d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 300, openTimeoutMs: 10_000 });
    // One frame first, so the one after the stop is a capture, not the set-up of damage tracking.
    await d.screenshot({ format: 'raw' });
    h.xvfb.kill('SIGSTOP');
    try {
      const t0 = performance.now();
      await assert.rejects(d.screenshot({ format: 'raw' }), (err: unknown) => isDisplayError(err, 'display_timeout'));
      assert.ok(performance.now() - t0 < 1500);
    } finally {
      h.xvfb.kill('SIGCONT');
    }
    await d.close();
  } finally {
    await h.stop();
  }
});

test('killing Xvfb mid-request rejects pending and later calls with display_closed; the process survives', async () => {
  const h = await startXvfb();
  try {
    const d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 3000 });
    let closedEvents = 0;
    d.on('closed', () => {
      closedEvents++;
    });
    // Stop the server so the request is surely in flight, then kill it.
    h.xvfb.kill('SIGSTOP');
    const t0 = performance.now();
    // Handlers are attached at once: the rejections may land while we wait for Xvfb to exit.
    const pending = assert.rejects(d.screenshot({ format: 'png' }), (err: unknown) => isDisplayError(err, 'display_closed'));
    const pendingInput = assert.rejects(d.click({ x: 10, y: 10 }), (err: unknown) => isDisplayError(err, 'display_closed'));
    h.xvfb.kill('SIGKILL');
    assert.ok(await waitExit(h.xvfb, 3000), 'Xvfb did not die');
    await pending;
    await pendingInput;
    assert.ok(performance.now() - t0 < 3000, 'rejection took longer than the timeout');
    assert.equal(d.closed, true);
    await assert.rejects(d.move(1, 1), (err: unknown) => isDisplayError(err, 'display_closed'));
    await assert.rejects(d.listWindows(), (err: unknown) => isDisplayError(err, 'display_closed'));
    await d.close();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closedEvents, 1);
    assert.deepEqual(unhandled, []);
  } finally {
    await h.stop();
  }
});

test('close() rejects pending calls and is idempotent', async () => {
  const h = await startXvfb();
  try {
    const d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 3000 });
    h.xvfb.kill('SIGSTOP');
    const pending = d.cursorPosition();
    h.xvfb.kill('SIGCONT');
    await d.close();
    await d.close();
    await pending.then(
      () => {},
      (err: unknown) => assert.ok(isDisplayError(err, 'display_closed')),
    );
    await assert.rejects(d.screenshot(), (err: unknown) => isDisplayError(err, 'display_closed'));
  } finally {
    await h.stop();
  }
});
