import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { forkPlantProbes } from '../../bench/host-probes/fork-plant.ts';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// Issue 29, item 2: a source that plants symlinks and FIFOs in everything a fork copies from it (its
// /run/drums and status file, /tmp/.X11-unix, home, tmpfs mounts, /etc), then is forked. The attacks
// are the audit's host probes (bench/host-probes/fork-plant.ts), run against a private daemon with
// a user namespace per session (the audited configuration).
describe('fork of a source that planted links and FIFOs', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_USERNS: '1', DRUMS_MAX_SESSIONS: '3' });
  });
  after(async () => {
    await d.finish();
  });

  it('copies them as what they are, never through them, answers promptly, and leaves the host alone', async (t) => {
    const pd: PrivateDaemon = { ...d, pid: d.proc.pid!, kill: d.stop, stop: d.finish };
    const probes = await forkPlantProbes({ d: pd, arm: 'test', progress: (s) => process.env.DRUMS_TEST_VERBOSE && process.stderr.write(`${s}\n`) });
    assert.deepEqual(probes.map((p) => p.id).sort(), ['host.fork.planted-links', 'host.fork.status-swapped']);
    for (const p of probes) t.diagnostic(`${p.id}: ${p.result}: ${p.detail}`);
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id}: ${p.detail}`);
    assert.deepEqual(await d.client.listSessions(), []);
    assert.deepEqual(
      readdirSync('/tmp').filter((f) => f.startsWith('drums-probe-fork-')),
      [],
    );
  });
});
