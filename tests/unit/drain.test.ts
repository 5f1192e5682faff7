// drainBody (src/common/drain.ts), the one drain of a refused request body for the API and the OSWorld guest.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PassThrough } from 'node:stream';
import { drainBody } from '../../src/common/drain.ts';

describe('drainBody', () => {
  it('reads a body that ends within the budget and says it ended', async () => {
    const body = new PassThrough();
    const ended = drainBody(body, { maxBytes: 1000, maxMs: 10_000 });
    body.write(Buffer.alloc(600));
    body.end(Buffer.alloc(300));
    assert.equal(await ended, true);
  });

  it('gives up past maxBytes, past maxMs, or when the body fails, without waiting for more', async () => {
    const big = new PassThrough();
    const overBytes = drainBody(big, { maxBytes: 1000, maxMs: 60_000 });
    big.write(Buffer.alloc(600));
    big.write(Buffer.alloc(600));
    assert.equal(await overBytes, false);
    // A body that never ends: the timer decides (the test would hang without it).
    assert.equal(await drainBody(new PassThrough(), { maxBytes: 1000, maxMs: 50 }), false);
    const failing = new PassThrough();
    const failed = drainBody(failing, { maxBytes: 1000, maxMs: 60_000 });
    failing.destroy(new Error('reset'));
    assert.equal(await failed, false);
  });

  it('with maxMs 0 only starts reading, and an ended body is done at once', async () => {
    const body = new PassThrough();
    assert.equal(await drainBody(body, { maxBytes: 1000, maxMs: 0 }), false);
    assert.equal(body.readableFlowing, true, 'the body is being read');
    const done = new PassThrough();
    done.end();
    done.resume();
    await new Promise((r) => done.once('end', r));
    assert.equal(await drainBody(done, { maxBytes: 1000, maxMs: 60_000 }), true);
  });
});
