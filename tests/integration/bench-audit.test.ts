import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { runAudit, type Probe } from '../../bench/audit.ts';
import { validateRecord } from '../../bench/record.ts';

// `drums audit`: ≥ 40 probes from inside a session; the shared-browser design is caught by a named probe.
describe('isolation audit', () => {
  const out = mkdtempSync('/var/tmp/drums-audit-test-');
  after(() => rmSync(out, { recursive: true, force: true }));

  it('runs ≥ 40 probes with valid controls; fences hold for baseline; shared-browser FAILS by a named probe; nothing is left behind', async () => {
    const nsBefore = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
    const { record } = await runAudit({ arms: ['baseline', 'shared-browser'], outDir: out });
    assert.deepEqual(validateRecord(record), []);
    const probes = (record.audit as { probes: Probe[] }).probes;
    const base = probes.filter((p) => p.arm === 'baseline' && p.category !== 'control');
    assert.ok(base.length >= 40, `only ${base.length} probes`);
    for (const c of probes.filter((p) => p.category === 'control')) assert.equal(c.result, 'pass', `${c.id}: ${c.detail}`);
    assert.deepEqual(
      probes.filter((p) => p.result === 'invalid').map((p) => `${p.arm} ${p.id} (${p.as}): ${p.detail}`),
      [],
    );
    // The fences that matter most must hold, each by name.
    const must = [
      'net.sibling-address',
      'net.sibling-gateway',
      'net.own-gateway-unlisted-port',
      'net.metadata-169.254.169.254',
      'net.private-10/8',
      'net.host-primary-address',
      'files.host-marker',
      'x.sibling-root-property-invisible',
      'sockets.sibling-abstract',
      'ipc.sibling-sysv-shm',
      'ns.pid-private',
      'ns.net-private',
      'cap.mount',
      'cap.raw-socket',
      'cap.mknod-block-device',
      'proc.sibling-marker-invisible',
      'screenshot.a-shows-only-a',
      'screenshot.b-shows-only-b',
      'blast.kill-xvfb-spares-b',
      'blast.kill-wm-spares-b',
      'blast.kill-buses-spares-b',
      'blast.kill-browser-spares-b',
    ];
    for (const id of must) {
      const ps = base.filter((p) => p.id === id);
      assert.ok(ps.length >= 1, `probe ${id} missing`);
      for (const p of ps) assert.equal(p.result, 'pass', `${id} (${p.as}): ${p.detail}`);
    }
    const sb = record.arms.find((a) => a.name === 'shared-browser')!;
    assert.equal(sb.isolation.verdict, 'fail', `shared-browser: ${JSON.stringify(record.incompleteReasons)}`);
    assert.ok(
      sb.isolation.failedProbes.some((p) => p.startsWith('shared-browser.')),
      sb.isolation.failedProbes.join(),
    );
    // Every failing probe is named in the arm's isolation verdict.
    const bl = record.arms.find((a) => a.name === 'baseline')!;
    assert.equal(bl.isolation.failedProbes.length, base.filter((p) => p.result === 'fail').length);
    assert.equal(
      execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
        .split('\n')
        .filter((l) => l.startsWith('drau')).length,
      nsBefore.split('\n').filter((l) => l.startsWith('drau')).length,
    );
    assert.doesNotMatch(execFileSync('ip', ['route'], { encoding: 'utf8' }), /169\.254\.169\.254/);
  });

  it('a disk-forked pair (two copies of one source, the source alive) passes every probe', async () => {
    const { record } = await runAudit({ arms: ['fork'], outDir: out });
    assert.deepEqual(validateRecord(record), []);
    const probes = (record.audit as { probes: Probe[] }).probes.filter((p) => p.arm === 'fork');
    assert.ok(probes.filter((p) => p.category !== 'control').length >= 40);
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id} (${p.as}): ${p.detail}`);
    assert.equal(record.arms.find((a) => a.name === 'fork')!.isolation.verdict, 'pass');
    assert.equal(record.status, 'passed');
  });

  it('a memory-forked pair (a userns source, copies in uid ranges of their own) passes every probe', async () => {
    const { record } = await runAudit({ arms: ['memfork'], outDir: out });
    assert.deepEqual(validateRecord(record), []);
    const probes = (record.audit as { probes: Probe[] }).probes.filter((p) => p.arm === 'memfork');
    assert.ok(probes.filter((p) => p.category !== 'control').length >= 40);
    // Its own cgroup namespace (a CRIU restore put it in the host's before the fix).
    for (const id of ['ns.cgroup-private', 'cgroup.namespaced'])
      assert.ok(
        probes.some((p) => p.id === id && p.result === 'pass'),
        id,
      );
    // The source has a user namespace of its own and each copy is restored into a uid range of
    // its own, so the users.* probes pass too (they failed while a memory fork refused such a source).
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id} (${p.as}): ${p.detail}`);
    assert.ok(probes.some((p) => p.id === 'users.distinct-host-uids'));
    assert.equal(record.arms.find((a) => a.name === 'memfork')!.isolation.verdict, 'pass');
  });

  it('refuses an arm it has no probes for', async () => {
    await assert.rejects(runAudit({ arms: ['zram-idle'], outDir: out }), /no probes for arm 'zram-idle'/);
  });
});
