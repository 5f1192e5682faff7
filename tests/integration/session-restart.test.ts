import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DrumsApiError } from '../../src/client/client.ts';
import { residue, startDaemon, type TestDaemon, killDaemon } from '../helpers.ts';

// Every step of a create (src/session/manager.ts): 'userns' runs for the default session (DRUMS_USERNS=1), a host-ids session skips it.
const CREATE_STEPS = ['record', 'userns', 'network', 'firewall', 'egress', 'rootfs', 'bundle', 'container', 'ready'];
const RESET_STEPS = ['stop', 'rootfs', 'bundle', 'container', 'ready'];

/** A waits for its daemon to die by itself (a test hook SIGKILLs it mid-operation). */
async function died(d: TestDaemon): Promise<void> {
  if (d.proc.exitCode !== null || d.proc.signalCode !== null) return;
  await new Promise((r) => d.proc.once('exit', r));
}

// Sessions survive a daemon restart: adopted from records and runtime state; the half-made are swept.
describe('daemon restart', () => {
  let d: TestDaemon;
  let env: NodeJS.ProcessEnv;
  const restart = async () => {
    d = await startDaemon(env);
  };
  before(async () => {
    d = await startDaemon({ DRUMS_TEST_HOOKS: '1' });
    env = { DRUMS_TEST_HOOKS: '1', DRUMS_STATE_DIR: d.stateDir, DRUMS_INSTANCE: d.instance, DRUMS_TOKEN: d.token };
  });
  after(async () => {
    await d.finish();
  });

  /** Exactly the objects of `n` sessions are on the host. */
  const assertObjects = (n: number) => {
    const r = residue(d.instance, d.stateDir);
    // A session with its own user namespace (DRUMS_USERNS=1) also holds a uid claim and two mounts (its pin, its idmapped image).
    const u = r.sessionDirs.filter((id) => existsSync(join(d.stateDir, 'sessions', id, 'userns'))).length;
    assert.deepEqual(
      {
        netns: r.netns.length,
        links: r.links.length,
        mounts: r.mounts.length,
        loops: r.loops.length,
        claims: r.claims.length,
        sessionDirs: r.sessionDirs.length,
        containers: r.containers.length,
        cgroups: new Set(r.cgroups.map((c) => c.split('/').pop())).size,
      },
      { netns: n, links: n, mounts: 3 * n + 2 * u, loops: n, claims: n + u, sessionDirs: n, containers: n, cgroups: n },
    );
  };

  it('kill -9, restart: a ready session is adopted with its token and generation, and works', async () => {
    const a = await d.client.createSession({ image: 'minimal', hostPorts: [18556] });
    await d.client.exec(a.id, { shell: 'echo kept > /home/user/marker' });
    const r = await d.client.resetSession(a.id);
    await killDaemon(d);
    await restart();
    const got = await d.client.getSession(a.id);
    assert.equal(got.state, 'ready');
    assert.equal(got.generation, r.generation);
    assert.equal(got.attempt.token, r.attempt.token);
    // The session kept its processes and files (the same X server answers).
    assert.equal((await d.client.exec(a.id, { argv: ['cat', '/home/user/marker'] })).exitCode, 1, 'reset had removed the marker');
    await d.client.exec(a.id, { shell: 'echo again > /home/user/marker' });
    const shot = await d.client.screenshot(a.id);
    assert.ok(shot.length > 100);
    // An adopted session whose processes die is marked broken (liveness by PID and start time), and reset repairs it.
    await d.client.exec(a.id, { shell: 'for p in /proc/[0-9]*; do [ "$(readlink $p/exe)" = /usr/bin/Xvfb ] && kill -KILL ${p#/proc/}; done; true' });
    const end = Date.now() + 20_000;
    while ((await d.client.getSession(a.id)).state !== 'broken') {
      assert.ok(Date.now() < end, 'adopted session not marked broken after its init died');
      await new Promise((res) => setTimeout(res, 200));
    }
    const again = await d.client.resetSession(a.id);
    assert.equal(again.state, 'ready');
    assertObjects(1);
  });

  for (const step of CREATE_STEPS) {
    it(`a daemon killed after create step '${step}' leaves nothing of that session after the restart; the others are adopted`, async () => {
      const before = (await d.client.listSessions()).map((s) => [s.id, s.attempt.token]);
      await assert.rejects(d.client.createSession({ image: 'minimal', labels: { 'drums.test.killAtStep': step } }));
      await died(d);
      await restart();
      // Adoption order need not be the first daemon's list order: compare sorted.
      assert.deepEqual((await d.client.listSessions()).map((s) => [s.id, s.attempt.token]).sort(), [...before].sort());
      assertObjects(before.length);
    });
  }

  for (const step of RESET_STEPS) {
    it(`a daemon killed after reset step '${step}' leaves no stuck session: it is swept and reported`, async () => {
      const b = await d.client.createSession({ image: 'minimal', labels: { 'drums.test.killAtResetStep': step } });
      await assert.rejects(d.client.resetSession(b.id));
      await died(d);
      await restart();
      await assert.rejects(d.client.getSession(b.id), (e: DrumsApiError) => e.status === 404);
      const t = (await (await d.client.request('GET', '/v1/terminations')).json()) as { terminations: { id: string; reason: string }[] };
      assert.match(t.terminations.find((x) => x.id === b.id)?.reason ?? '', /swept at daemon start: the daemon stopped while the session was resetting/);
      assertObjects((await d.client.listSessions()).length);
    });
  }

  it('sessions that died or lost an object while no daemon ran are swept and reported with why; a live one is adopted', async () => {
    const dead = await d.client.createSession({ image: 'minimal' });
    const noVeth = await d.client.createSession({ image: 'minimal' });
    const mute = await d.client.createSession({ image: 'minimal' });
    const live = await d.client.createSession({ image: 'minimal' });
    const keep = (await d.client.listSessions()).map((s) => s.id).filter((id) => ![dead.id, noVeth.id, mute.id].includes(id));
    await killDaemon(d);
    const rec = (id: string) =>
      JSON.parse(readFileSync(join(d.stateDir, 'sessions', id, 'session.json'), 'utf8')) as {
        init: { pid: number };
        names: { hostVeth: string; cgroup: string };
      };
    // Its init killed: the container is gone (or a zombie runc reports stopped).
    process.kill(rec(dead.id).init.pid, 'SIGKILL');
    // Its host veth deleted.
    execFileSync('ip', ['link', 'del', rec(noVeth.id).names.hostVeth]);
    // Its X server stopped (SIGSTOP): the container runs, but X does not answer the probe.
    const cg = rec(mute.id).names.cgroup;
    const procsFile = [`/sys/fs/cgroup/pids${cg}/cgroup.procs`, `/sys/fs/cgroup${cg}/cgroup.procs`].find((f) => existsSync(f))!;
    const procs = readFileSync(procsFile, 'utf8').split('\n').filter(Boolean);
    const xvfb = procs.filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]!.endsWith('Xvfb');
      } catch {
        return false;
      }
    });
    assert.equal(xvfb.length, 1, `Xvfb of ${mute.id}: ${JSON.stringify(xvfb)}`);
    process.kill(Number(xvfb[0]), 'SIGSTOP');
    await restart();
    assert.deepEqual((await d.client.listSessions()).map((s) => s.id).sort(), [...keep].sort());
    assert.equal((await d.client.exec(live.id, { argv: ['echo', 'ok'] })).stdout.trim(), 'ok');
    const t = (await (await d.client.request('GET', '/v1/terminations')).json()) as { terminations: { id: string; reason: string }[] };
    const why = (id: string) => t.terminations.find((x) => x.id === id)?.reason ?? '';
    assert.match(why(dead.id), /swept at daemon start: (its init process is gone|its container is (stopped|missing))/);
    assert.match(why(noVeth.id), /swept at daemon start: its veth is missing/);
    assert.match(why(mute.id), /swept at daemon start: its X server does not answer/);
    assertObjects(keep.length);
  });

  it('corrupt records (truncated, or JSON of the wrong shape): those sessions are swept and reported, the others are adopted', async () => {
    const trunc = await d.client.createSession({ image: 'minimal' });
    const shape = await d.client.createSession({ image: 'minimal' });
    const kept = await d.client.createSession({ image: 'minimal' });
    const keep = (await d.client.listSessions()).filter((s) => s.id !== trunc.id && s.id !== shape.id).map((s) => s.id);
    assert.ok(keep.includes(kept.id));
    await killDaemon(d);
    writeFileSync(join(d.stateDir, 'sessions', trunc.id, 'session.json'), '{"id": "trunc');
    writeFileSync(join(d.stateDir, 'sessions', shape.id, 'session.json'), JSON.stringify({ id: shape.id, phase: 7, generation: 'x', names: 'all' }));
    await restart();
    // Adoption order is not the list order of the first daemon: compare as sets.
    assert.deepEqual((await d.client.listSessions()).map((s) => s.id).sort(), [...keep].sort());
    // The adopted one still works with its old token.
    assert.equal((await d.client.exec(kept.id, { argv: ['echo', 'ok'] })).stdout.trim(), 'ok');
    const t = (await (await d.client.request('GET', '/v1/terminations')).json()) as { terminations: { id: string; reason: string }[] };
    assert.match(t.terminations.find((x) => x.id === trunc.id)?.reason ?? '', /unreadable record/);
    assert.match(t.terminations.find((x) => x.id === shape.id)?.reason ?? '', /lacks fields/);
    assertObjects(keep.length);
  });

  it('--keep-sessions: SIGTERM leaves the sessions for the next daemon', async () => {
    const ids = (await d.client.listSessions()).map((s) => s.id);
    await killDaemon(d);
    d = await startDaemon({ ...env, DRUMS_KEEP_SESSIONS: '1' });
    await d.stop();
    assertObjects(ids.length);
    await restart();
    assert.deepEqual((await d.client.listSessions()).map((s) => s.id).sort(), [...ids].sort());
  });
});

describe('systemd unit', () => {
  it('install-service writes a unit that restarts on failure and stops only the daemon', async () => {
    const { spawnSync } = await import('node:child_process');
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { DRUMS } = await import('../helpers.ts');
    const dir = mkdtempSync('/var/tmp/drums-unit-');
    try {
      execFileSync(DRUMS, ['install-service', '--dir', dir], { encoding: 'utf8' });
      const unit = readFileSync(join(dir, 'drums.service'), 'utf8');
      assert.equal(execFileSync(DRUMS, ['install-service', '--print'], { encoding: 'utf8' }), unit, '--print shows what is installed');
      // Parsed as systemd reads it: sections, then Key=Value lines (comments and blank lines aside).
      const sections: Record<string, Record<string, string[]>> = {};
      let cur: Record<string, string[]> | undefined;
      for (const line of unit.split('\n')) {
        if (/^\s*(#|;|$)/.test(line)) continue;
        const sec = /^\[(\w+)\]$/.exec(line);
        if (sec) {
          cur = sections[sec[1]!] = {};
          continue;
        }
        const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
        assert.ok(cur && kv, `not a unit line: ${JSON.stringify(line)}`);
        (cur[kv[1]!] ??= []).push(kv[2]!);
      }
      assert.deepEqual(Object.keys(sections), ['Unit', 'Service', 'Install']);
      const svc = sections.Service!;
      const exec = /^(\/\S+) serve --keep-sessions$/.exec(svc.ExecStart?.join() ?? '');
      assert.ok(exec && existsSync(exec[1]!), unit);
      // Restart on failure; a stop signals the daemon only (KillMode=process), which keeps the sessions (--keep-sessions).
      assert.deepEqual([svc.Restart, svc.KillMode, svc.CPUWeight, svc.OOMScoreAdjust], [['on-failure'], ['process'], ['200'], ['-500']]);
      assert.ok(
        svc.Environment?.some((e) => /^DRUMS_STATE_DIR=\//.test(e)),
        JSON.stringify(svc.Environment),
      );
      assert.deepEqual(sections.Install!.WantedBy, ['multi-user.target']);
      assert.doesNotMatch(unit, /@[A-Z_]+@/);
      const verify = spawnSync('systemd-analyze', ['verify', join(dir, 'drums.service')], { encoding: 'utf8' });
      if (!verify.error) assert.ok(verify.status === 0 && !/drums\.service/.test(verify.stderr), `systemd-analyze verify: ${verify.status} ${verify.stderr}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
