import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metrics, watchEventLoop } from '../../src/api/metrics.ts';
import { bucketCounts } from '../../src/common/prom-text.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Ticks counted in the lag histogram above `le` seconds, from its rendered text. */
function over(le: string): number {
  const counts = bucketCounts(metrics.loopLag.render(), metrics.loopLag.name);
  return (counts.get('+Inf') ?? 0) - (counts.get(le) ?? 0);
}

test('the loop-lag histogram counts a blocked event loop until stopped', async () => {
  const stop = watchEventLoop(10);
  try {
    await sleep(300);
    const before = over('0.25');
    const t = performance.now();
    while (performance.now() - t < 400) {} // the loop is blocked for 400 ms
    await sleep(50);
    assert.equal(over('0.25') - before, 1, 'the tick due in the block ran about 400 ms late');
    stop();
    const stopped = over('0.25');
    const t2 = performance.now();
    while (performance.now() - t2 < 400) {}
    await sleep(50);
    assert.equal(over('0.25'), stopped, 'a stopped watch counts nothing');
  } finally {
    stop();
  }
});
