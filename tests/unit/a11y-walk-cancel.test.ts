import assert from 'node:assert/strict';
import { test } from 'node:test';
import { walk } from '../../src/a11y/walk.ts';
import { CancelledError } from '../../src/common/errors.ts';

// A stand-in for the AT-SPI bus: counts calls, answers slowly. Only cancellation is under test here
// (the walk itself is tested against a real AT-SPI stack in tests/integration/a11y-walk.test.ts).
function fakeBus(onCall: (n: number) => unknown) {
  let calls = 0;
  const client = {
    timeoutMs: 1000,
    call: async () => {
      calls++;
      const v = onCall(calls);
      await new Promise((r) => setTimeout(r, 5));
      return v;
    },
    peer: async () => undefined,
  };
  return { client: client as never, calls: () => calls };
}

test('a walk with an aborted signal makes no call and throws CancelledError', async () => {
  const bus = fakeBus(() => []);
  await assert.rejects(walk(bus.client, { signal: AbortSignal.abort() }), CancelledError);
  assert.equal(bus.calls(), 0);
});

test('aborting during a walk stops it: no call starts after the abort', async () => {
  const ac = new AbortController();
  const bus = fakeBus((n) => {
    if (n === 1) ac.abort();
    return [];
  });
  await assert.rejects(walk(bus.client, { signal: ac.signal }), CancelledError);
  assert.equal(bus.calls(), 1);
});

test('without a signal the same bus is walked (more than one call)', async () => {
  const bus = fakeBus(() => []);
  await walk(bus.client, {}).catch(() => {});
  assert.ok(bus.calls() > 1, `${bus.calls()} calls`);
});
