import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { withDumpRetry } from '../../src/session/memfork.ts';

// A memory fork's dump taken while Chromium is still starting can be refused by CRIU on a socket
// going away (SO_PASSCRED); the dump is tried once more. The zygote's queued hello is not retried.
describe('withDumpRetry', () => {
  const dumps = (reasons: (string | undefined)[]) => {
    let n = 0;
    let last = '';
    return {
      dump: async () => {
        const r = reasons[n++];
        last = r ?? '';
        if (r !== undefined) throw new Error(`runc checkpoint: exit 1 (${r})`);
      },
      reason: () => last,
      calls: () => n,
    };
  };

  it('answers after one attempt when the dump works', async () => {
    const d = dumps([undefined]);
    assert.deepEqual(await withDumpRetry(d.dump, d.reason, () => {}, 0), { attempts: 1 });
    assert.equal(d.calls(), 1);
  });

  it('retries a failed dump once, after the delay, and reports the first reason', async () => {
    const d = dumps(["Error (criu/sockets.c:628): Can't get 1:16 opt: Bad file descriptor", undefined]);
    const seen: string[] = [];
    const t0 = performance.now();
    assert.deepEqual(await withDumpRetry(d.dump, d.reason, (w) => seen.push(w), 50), { attempts: 2 });
    assert.ok(performance.now() - t0 >= 45);
    assert.equal(d.calls(), 2);
    assert.deepEqual(seen, ["Error (criu/sockets.c:628): Can't get 1:16 opt: Bad file descriptor"]);
  });

  it('gives up after the second failure with its reason', async () => {
    const d = dumps(['first', 'second', undefined]);
    assert.deepEqual(await withDumpRetry(d.dump, d.reason, () => {}, 0), { attempts: 2, error: 'second' });
    assert.equal(d.calls(), 2);
  });

  it("does not retry the zygote's queued control message (it lasts)", async () => {
    const d = dumps(['Error (criu/sk-queue.c:272): Control messages in queue, not supported', undefined]);
    const r = await withDumpRetry(d.dump, d.reason, () => assert.fail('retried'), 0);
    assert.deepEqual(r, { attempts: 1, error: 'Error (criu/sk-queue.c:272): Control messages in queue, not supported' });
  });

  it("falls back to the error's message when CRIU left no log", async () => {
    let n = 0;
    const r = await withDumpRetry(
      async () => {
        n++;
        throw new Error('runc checkpoint: exit 1');
      },
      () => '',
      () => {},
      0,
    );
    assert.deepEqual(r, { attempts: 2, error: 'runc checkpoint: exit 1' });
    assert.equal(n, 2);
  });
});
