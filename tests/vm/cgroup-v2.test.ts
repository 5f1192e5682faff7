// The cgroup v2 paths of a real daemon with real sessions. It runs inside the cgroup v2 VM
// (scripts/cgv2-vm.sh, started by tests/vm/cgroup-v2-vm.test.ts) and fails on any
// host that is not pure cgroup v2, so it can never pass without testing v2.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CPU_GUARD_DEFAULTS } from '../../src/policy/cpu-guard.ts';
import { cgroupMode } from '../../src/host/cgroup-fs.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

const MiB = 1024 ** 2;
const CG = '/sys/fs/cgroup';
const read = (p: string): string => readFileSync(p, 'utf8').trim();

async function until<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, ms = 60_000, state = () => ''): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${state()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function metrics(d: TestDaemon): Promise<string> {
  return (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}` } })).text();
}

describe('cgroup v2 host', () => {
  it('this host has the unified hierarchy only, with every controller delegated', () => {
    assert.equal(cgroupMode(), 'v2');
    assert.ok(!existsSync(join(CG, 'memory')) && !existsSync(join(CG, 'cpu')), 'no v1 hierarchy is mounted');
    for (const c of ['cpu', 'memory', 'pids', 'io']) assert.ok(read(join(CG, 'cgroup.subtree_control')).split(' ').includes(c), c);
    for (const r of ['cpu', 'memory', 'io']) assert.ok(existsSync(`/proc/pressure/${r}`), `PSI ${r}`);
  });

  // crun (the default on v2) in full; runc for the limits it writes.
  for (const runtime of ['crun', 'runc']) {
    it(`${runtime}: a session's cgroup holds its spec's limits${runtime === 'crun' ? '; the CPU guard, PSI, usage, reset and destroy work on v2' : ''}`, async () => {
      const d = await startDaemon({ DRUMS_RUNTIME: runtime, DRUMS_DISK_WRITE_MBPS: '8' });
      try {
        // The daemon's own CPU cgroup with twice the sessions' weight.
        const { pid } = JSON.parse(read(join(d.stateDir, 'daemon.json'))) as { pid: number };
        assert.equal(/^0::(.*)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))![1], `/drums-${d.instance}/daemon`);
        assert.equal(read(join(CG, `drums-${d.instance}`, 'daemon', 'cpu.weight')), '200');

        const s = await d.client.createSession({ image: 'minimal', memoryMb: 256, cpus: 1, pids: 300, diskMb: 256 });
        const dir = join(CG, `drums-${d.instance}`, 'sessions', s.id);
        // The sessions' parent is the daemon's sibling, at the default weight.
        assert.equal(read(join(CG, `drums-${d.instance}`, 'sessions', 'cpu.weight')), '100');
        // A session starting under emulation keeps a core busy for seconds, so the CPU guard may have
        // it demoted now (cpu.idle 1; the kernel then reports cpu.weight 1): wait for it to be back.
        // (Restoring writes cpu.idle 0, which brings back the demoted weight 6, then cpu.weight.)
        const restored = () =>
          read(join(dir, 'cpu.idle')) === '0' && !['1', '6'].includes(read(join(dir, 'cpu.weight'))) && read(join(dir, 'cpu.max')) === '100000 100000'
            ? true
            : undefined;
        await until('the session at the normal weight and quota', restored, 90_000, () => `${read(join(dir, 'cpu.weight'))} ${read(join(dir, 'cpu.max'))}`);
        assert.equal(read(join(dir, 'cpu.weight')), '100', 'a session has the default weight, the one the CPU guard restores');
        assert.equal(read(join(dir, 'memory.max')), String(256 * MiB));
        assert.equal(read(join(dir, 'memory.swap.max')), '0', 'no swap: a session at its limit is OOM-killed, not swapped');
        assert.equal(read(join(dir, 'pids.max')), '300');
        assert.equal(read(join(dir, 'memory.oom.group')), '0', 'an OOM kill takes one process, not the whole session');
        assert.equal(read(join(dir, 'cpu.max')), '100000 100000');
        // io.max on the session's own loop device (writeback is charged to the session on v2).
        const loop = execFileSync('losetup', ['-n', '-O', 'NAME,BACK-FILE', '-l'], { encoding: 'utf8' })
          .split('\n')
          .find((l) => l.includes(join(d.stateDir, 'sessions', s.id)))!
          .split(/\s+/)[0]!;
        const dev = execFileSync('stat', ['-c', '%Hr:%Lr', loop], { encoding: 'utf8' }).trim();
        assert.match(read(join(dir, 'io.max')), new RegExp(`^${dev} rbps=(max|\\d+) wbps=${8 * MiB} riops=max wiops=max$`, 'm'));
        // Every process of the session is in its cgroup, and the session sees its own cgroup as the root.
        const procs = read(join(dir, 'cgroup.procs')).split('\n').filter(Boolean);
        assert.ok(procs.length >= 3, `session processes: ${procs.join(' ')}`);
        const inside = await d.client.exec(s.id, { shell: 'cat /proc/self/cgroup; cat /sys/fs/cgroup/memory.max' });
        assert.deepEqual(inside.stdout.trim().split('\n'), ['0::/', String(256 * MiB)]);
        if (runtime === 'runc') {
          await d.client.destroySession(s.id);
          assert.ok(!existsSync(dir), 'the session cgroup is gone');
          return;
        }
        // df shows the quota.
        const df = Number((await d.client.exec(s.id, { shell: 'df -B1 --output=size / | tail -1' })).stdout.trim());
        assert.ok(df > 200 * MiB && df <= 256 * MiB, `df / shows ${df}`);

        // The CPU guard: a session that spins is demoted (cpu.idle 1, and cpu.max capped at 0.1 core),
        // then restored. It demotes only while the host is contended for the session (src/policy/cpu-guard.ts):
        // a process of this VM outside any session spins too, so the rest of the host wants a core.
        const cpuState = () =>
          ['cpu.weight', 'cpu.idle', 'cpu.max', 'cpu.stat', 'cgroup.procs'].map((f) => `${f}: ${read(join(dir, f)).replaceAll('\n', ' ')}`).join('; ');
        // The dashboard's usage reads the same v2 files (cpu.stat, memory.current): over the spin, up to the demotion.
        const usage = async () =>
          (
            (await (await fetch(`${d.url}/v1/usage`, { headers: { authorization: `Bearer ${d.token}` } })).json()) as {
              sessions: { id: string; cpuPercent: number | null; memoryBytes: number | null }[];
            }
          ).sessions.find((u) => u.id === s.id)!;
        await usage();
        // Bounded by its own timeout (TERM from the finally reaches the loop through timeout).
        const neighbour = spawn('timeout', ['-s', 'KILL', '90', 'sh', '-c', 'while :; do :; done'], { stdio: 'ignore' });
        try {
          const hog = d.client.exec(s.id, { shell: 'timeout 20 sh -c "while :; do :; done"; true', timeoutMs: 60_000 });
          await until('the spinning session demoted', () => (read(join(dir, 'cpu.idle')) === '1' ? true : undefined), 60_000, cpuState);
          assert.equal(read(join(dir, 'cpu.max')), `${Math.round(CPU_GUARD_DEFAULTS.capCores * 100_000)} 100000`, `demoted to its cap: ${cpuState()}`);
          const u = await usage();
          assert.ok(u.cpuPercent !== null && u.cpuPercent > 10 && (u.memoryBytes ?? 0) > MiB, JSON.stringify(u));
          await hog;
        } finally {
          neighbour.kill('SIGTERM');
        }
        await until('the session restored', () => (restored() && read(join(dir, 'cpu.weight')) === '100' ? true : undefined), 90_000, cpuState);

        // PSI in /metrics: the host's and this session's own (v2 has it per cgroup).
        const text = await metrics(d);
        for (const r of ['cpu', 'memory', 'io']) {
          assert.match(text, new RegExp(`drums_host_pressure_avg10\\{kind="some",resource="${r}"\\} [\\d.]+`), `host ${r}`);
          assert.match(text, new RegExp(`drums_session_pressure_stall_seconds\\{kind="some",resource="${r}",session="${s.id}"\\} [\\d.]+`), `session ${r}`);
        }
        assert.match(text, new RegExp(`drums_session_memory_bytes\\{session="${s.id}"\\} [1-9]`));

        // Reset makes the session anew: its new cgroup gets the same limits.
        await d.client.resetSession(s.id);
        assert.equal(read(join(dir, 'memory.max')), String(256 * MiB));
        await until('the new cgroup at the normal weight', restored, 90_000, cpuState);
        assert.equal(read(join(dir, 'cpu.weight')), '100');

        await d.client.destroySession(s.id);
        assert.ok(!existsSync(dir), 'the session cgroup is gone');
      } finally {
        await d.finish();
      }
      assert.ok(!existsSync(join(CG, `drums-${d.instance}`)), "the instance's cgroups (the daemon's too) are gone at stop");
    });
  }
});
