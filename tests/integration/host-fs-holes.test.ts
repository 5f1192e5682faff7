import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { fsProbes } from '../../bench/host-probes/fs.ts';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// Issue 27, findings 1 and 6: the daemon's hands in a session's files (docs/security.md, "The daemon's
// hands in a session's files"). The attacks are the audit's host probes (bench/host-probes/fs.ts),
// run here against a private daemon with a user namespace per session (the audited configuration).
describe('host file holes: runtime directories, fork copies and cleanup', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_USERNS: '1', DRUMS_MAX_SESSIONS: '6' });
  });
  after(async () => {
    await d.finish();
  });

  it('no host user reaches a runtime directory; no fork follows a link the session or a host user planted; a sparse file stays sparse', async (t) => {
    const pd: PrivateDaemon = { ...d, pid: d.proc.pid!, kill: d.stop, stop: d.finish };
    const probes = await fsProbes({ d: pd, arm: 'test', progress: (s) => process.env.DRUMS_TEST_VERBOSE && process.stderr.write(`${s}\n`) });
    assert.deepEqual(probes.map((p) => p.id).sort(), [
      'host.fs.fork-chromium-link',
      'host.fs.fork-etc-link',
      'host.fs.memfork-planted-link',
      'host.fs.memfork-sparse',
      'host.fs.rt-dirs-closed',
    ]);
    for (const p of probes) t.diagnostic(`${p.id}: ${p.result}: ${p.detail}`);
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id}: ${p.detail}`);
    // Nothing of the probes is left: no session, no host fixture.
    assert.deepEqual(await d.client.listSessions(), []);
    assert.deepEqual(
      readdirSync('/tmp').filter((f) => f.startsWith('drums-probe-fs-')),
      [],
    );
    assert.ok(existsSync(d.stateDir));
  });
});
