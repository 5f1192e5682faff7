import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { assertClean, removeStateDir, startDaemon, TIME_SCALE, type TestDaemon } from '../helpers.ts';

const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers') && !existsSync('/sys/fs/cgroup/memory');

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 30_000 * TIME_SCALE): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// CPU and memory fairness: the daemon's own cgroup, default CPU quota, OOM inside one session only, PSI in /metrics.
describe('CPU and memory fairness', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    await d.finish();
  });

  it("the daemon runs in a CPU cgroup of its own with twice the sessions' weight", async () => {
    const s = await d.client.createSession({ image: 'minimal' }); // runc makes the sessions' parent
    const { pid } = JSON.parse(readFileSync(join(d.stateDir, 'daemon.json'), 'utf8')) as { pid: number };
    const cg = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
    if (v2) {
      const own = /^0::(.*)$/m.exec(cg)![1]!;
      if (own === `/drums-${d.instance}/daemon`) assert.equal(readFileSync(`/sys/fs/cgroup${own}/cpu.weight`, 'utf8').trim(), '200');
    } else {
      assert.match(cg, new RegExp(`:cpu(,cpuacct)?:/drums-${d.instance}/daemon$`, 'm'));
      assert.equal(readFileSync(`/sys/fs/cgroup/cpu/drums-${d.instance}/daemon/cpu.shares`, 'utf8').trim(), '2048');
      // Its sibling, the sessions' parent, keeps the default weight.
      assert.equal(readFileSync(`/sys/fs/cgroup/cpu/drums-${d.instance}/sessions/cpu.shares`, 'utf8').trim(), '1024');
    }
    await d.client.destroySession(s.id);
  });

  it("a client on the host joins a CPU cgroup beside the daemon's with its weight; a dead client's is swept", () => {
    const resources = new URL('../../src/host/resources.ts', import.meta.url).href;
    // A child joins, reports its cgroup and the weight, moves a grandchild out (as the noisy bench
    // does with its flood), leaves, and says whether the cgroup is gone; a second child dies inside.
    const code = `
      import { readFileSync, existsSync } from 'node:fs';
      import { spawn } from 'node:child_process';
      import { enterClientCgroup, leaveClientCgroup, moveOutOfClientCgroup } from '${resources}';
      const [inst, die] = process.argv.slice(1);
      const name = enterClientCgroup(inst);
      const cg = readFileSync('/proc/self/cgroup', 'utf8');
      const weight = ['/sys/fs/cgroup/cpu/' + name + '/cpu.shares', '/sys/fs/cgroup/' + name + '/cpu.weight'].filter(existsSync).map((f) => readFileSync(f, 'utf8').trim());
      const kid = spawn('sleep', ['5']);
      moveOutOfClientCgroup(inst, kid.pid);
      const kidCg = readFileSync('/proc/' + kid.pid + '/cgroup', 'utf8');
      kid.kill();
      if (die) process.kill(process.pid, 'SIGKILL');
      leaveClientCgroup(inst);
      const gone = !existsSync('/sys/fs/cgroup/cpu/' + name) && !existsSync('/sys/fs/cgroup/' + name);
      process.stdout.write(JSON.stringify({ name, cg, weight, kidCg, gone }));
    `;
    const run = (die: string) => spawnSync(process.execPath, ['--input-type=module', '-e', code, d.instance, die], { encoding: 'utf8' });
    const r = run('');
    assert.equal(r.status, 0, r.stderr);
    const o = JSON.parse(r.stdout) as { name: string; cg: string; weight: string[]; kidCg: string; gone: boolean };
    assert.equal(o.name, `drums-${d.instance}/client`);
    assert.match(o.cg, v2 ? new RegExp(`^0::/${o.name}$`, 'm') : new RegExp(`:cpu(,cpuacct)?:/${o.name}$`, 'm'));
    assert.deepEqual(o.weight, [v2 ? '200' : '2048']);
    assert.doesNotMatch(o.kidCg, new RegExp(o.name), 'the moved-out child is not in the client cgroup');
    assert.ok(o.gone, 'the client cgroup is removed when its last member leaves');
    // A client killed inside leaves the cgroup behind, empty: the instance's sweep takes it (d.finish checks).
    const k = run('die');
    assert.equal(k.signal, 'SIGKILL');
    const left = [`/sys/fs/cgroup/cpu/drums-${d.instance}/client`, `/sys/fs/cgroup/drums-${d.instance}/client`].filter((p) => existsSync(p));
    assert.equal(left.length, 1, 'the dead client left its cgroup');
  });

  it("a client still in its cgroup when the daemon stops removes the instance's top cgroup as it leaves", async () => {
    // The noisy bench's order: its daemon stops (and sweeps) first, then the harness leaves the client cgroup.
    const d2 = await startDaemon();
    let child: ReturnType<typeof spawn> | undefined;
    try {
      await d2.client.createSession({ image: 'minimal' }); // the sessions' parent exists in every hierarchy
      const resources = new URL('../../src/host/resources.ts', import.meta.url).href;
      const code = `
        import { enterClientCgroup, leaveClientCgroup } from '${resources}';
        const inst = process.argv[1];
        process.stdout.write(String(enterClientCgroup(inst)) + '\\n');
        process.stdin.once('data', () => {
          leaveClientCgroup(inst);
          process.stdout.write('left\\n');
          process.exit(0);
        });
      `;
      const c = spawn(process.execPath, ['--input-type=module', '-e', code, d2.instance], { stdio: ['pipe', 'pipe', 'inherit'] });
      child = c;
      const lines: string[] = [];
      c.stdout!.on('data', (b: Buffer) => lines.push(...b.toString().split('\n').filter(Boolean)));
      await until('the client in its cgroup', async () => (lines.length ? true : undefined));
      assert.equal(lines[0], `drums-${d2.instance}/client`);
      await d2.stop();
      c.stdin!.write('go\n');
      await until('the client gone', async () => (c.exitCode === null ? undefined : true));
      assert.equal(c.exitCode, 0);
      assertClean(d2.instance, d2.stateDir);
    } finally {
      if (child && child.exitCode === null) child.kill('SIGKILL');
      await d2.stop();
      removeStateDir(d2.stateDir);
    }
  });

  it('sessions get a CPU quota by default; a process over the memory limit is killed in its own session only, and the state says so', async () => {
    const a = await d.client.createSession({ image: 'minimal', memoryMb: 256 });
    const b = await d.client.createSession({ image: 'minimal' });
    try {
      const want = Math.max(1, cpus().length / 2);
      assert.equal(a.limits.cpus, want);
      // A session starting on a slow (emulated: the cgroup v2 VM) host can keep a core busy long enough
      // for the CPU guard to demote it for a while (cpu.idle 1, a capped quota): wait until it is back.
      await until('the session at its normal rank', async () => {
        const r = await d.client.exec(a.id, { shell: 'cat /sys/fs/cgroup/cpu/cpu.idle 2>/dev/null || cat /sys/fs/cgroup/cpu.idle' });
        return r.stdout.trim() !== '1' ? true : undefined;
      });
      const q = await d.client.exec(a.id, { shell: 'cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d" " -f1 /sys/fs/cgroup/cpu.max' });
      assert.equal(Number(q.stdout.trim()), want * 100_000);
      // ...and the normal weight, the same for every session (the CPU guard lowers a hog's; src/policy/cpu-guard.ts).
      const w = await d.client.exec(a.id, { shell: 'cat /sys/fs/cgroup/cpu/cpu.shares 2>/dev/null || cat /sys/fs/cgroup/cpu.weight' });
      assert.equal(w.stdout.trim(), v2 ? '100' : '1024');
      assert.equal(a.memory?.oomKills, 0);
      // What exec runs has the session's OOM score, not the daemon's -500 (crun's exec kept the daemon's).
      assert.equal((await d.client.exec(a.id, { shell: 'cat /proc/self/oom_score_adj' })).stdout.trim(), '500');
      // `tail` buffers a line that never ends: it grows until the session's memory limit stops it.
      const hog = await d.client.exec(a.id, { shell: 'tail /dev/zero; echo rc=$?', timeoutMs: 60_000 * TIME_SCALE });
      assert.match(hog.stdout, /rc=137/, JSON.stringify(hog));
      const after = await d.client.getSession(a.id);
      assert.equal(after.state, 'ready');
      assert.ok(after.memory!.oomKills >= 1, JSON.stringify(after.memory));
      // The session's desktop and its neighbour live on.
      assert.equal((await d.client.exec(a.id, { shell: 'xdpyinfo >/dev/null && echo x-ok' })).stdout.trim(), 'x-ok');
      assert.equal((await d.client.exec(b.id, { argv: ['echo', 'ok'] })).stdout.trim(), 'ok');
      assert.equal((await d.client.getSession(b.id)).memory!.oomKills, 0);
      const text = await (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}` } })).text();
      assert.match(text, new RegExp(`drums_session_oom_kills\\{session="${a.id}"\\} [1-9]`));
      assert.match(text, /drums_admission_more_sessions\{resource="memory"\} \d+/);
      for (const r of ['cpu', 'memory', 'io']) {
        if (existsSync(`/proc/pressure/${r}`)) assert.match(text, new RegExp(`drums_host_pressure_avg10\\{kind="some",resource="${r}"\\} [\\d.]+`), r);
      }
      if (v2) assert.match(text, new RegExp(`drums_session_pressure_avg10\\{kind="some",resource="memory",session="${a.id}"\\} [\\d.]+`));
      // When the kernel picks the X server, the session breaks and its state says why. The OOM
      // score is size + adj x limit: with X at 1000 and many small hogs at 500, X goes first.
      await d.client.exec(a.id, { shell: 'for p in $(pidof Xvfb); do echo 1000 > /proc/$p/oom_score_adj; done', root: true });
      await d.client
        .exec(a.id, { shell: 'for i in $(seq 40); do (head -c 12M /dev/zero | tail) & done; wait', timeoutMs: 60_000 * TIME_SCALE })
        .catch(() => {});
      const broken = await until('session broken', async () => {
        const s = await d.client.getSession(a.id);
        return s.state === 'broken' ? s : undefined;
      });
      assert.match(broken.brokenReason ?? '', /memory limit \(256 MiB\)/);
      assert.equal((await d.client.exec(b.id, { argv: ['echo', 'ok'] })).stdout.trim(), 'ok');
    } finally {
      await d.client.destroySession(a.id);
      await d.client.destroySession(b.id);
    }
  });
});
