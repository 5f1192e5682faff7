import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { osworldEvalProbes } from '../../bench/host-probes/osworld-eval.ts';
import { type PrivateDaemon, startPrivateDaemon } from '../../src/client/private-daemon.ts';

// Issue 27, finding 5: an OSWorld agent reaching the harness host. The `sudo` half is the audit's
// host probe (bench/host-probes/osworld-eval.ts), run here against a private daemon with a user
// namespace per session; the evaluator half (a metric `eval`ing session output, a forged score line)
// is sdk/python/tests/test_osworld_metric_sandbox.py.
describe('osworld: an agent cannot reach the harness host', () => {
  let d: PrivateDaemon;
  before(async () => {
    d = await startPrivateDaemon({ DRUMS_USERNS: '1' });
  });
  after(async () => {
    for (const s of await d.client.listSessions().catch(() => [])) await d.client.destroySession(s.id).catch(() => {});
    await d.stop();
  });

  it("an env.step with 'sudo' in it runs as the desktop user; a task's set-up step still gets root", async () => {
    const probes = await osworldEvalProbes({ d, arm: 'test', progress: () => {} });
    assert.equal(probes.length, 4);
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id}: ${p.detail}`);
    assert.deepEqual(await d.client.listSessions(), [], 'the probe leaves no session');
  });
});
