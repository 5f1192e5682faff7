import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { hostUsedMiB } from './host-facts.ts';
import { sessionCgroup } from '../src/host/instance.ts';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The host's 1-, 5- and 15-minute load averages. */
export const hostLoad = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);

/** Memory (bytes) charged to a session's cgroup (`rel` under the memory hierarchy), inactive page cache left out (v1 or v2). */
export function cgroupMemoryBytes(rel: string): number | null {
  for (const [usage, statKey, dir] of [
    ['memory.usage_in_bytes', 'total_inactive_file', join('/sys/fs/cgroup/memory', rel)],
    ['memory.current', 'inactive_file', join('/sys/fs/cgroup', rel)],
  ] as const) {
    if (!existsSync(join(dir, usage))) continue;
    const stat = Object.fromEntries(
      readFileSync(join(dir, 'memory.stat'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => l.split(' '))
        .map(([k, v]) => [k, Number(v)]),
    );
    return Number(readFileSync(join(dir, usage), 'utf8')) - (stat[statKey] ?? 0);
  }
  return null;
}

/** A session's cgroup directory for one controller (v1: /sys/fs/cgroup/<ctl>/drums-<inst>/sessions/<id>; v2: unified). */
export function cgroupDir(instance: string, sessionId: string, controller: string): string {
  const rel = sessionCgroup(instance, sessionId);
  if (existsSync('/sys/fs/cgroup/cgroup.controllers') && readFileSync('/sys/fs/cgroup/cgroup.controllers', 'utf8').includes('memory'))
    return `/sys/fs/cgroup/${rel}`;
  for (const c of [controller, `${controller},cpu`, `cpu,${controller}`]) if (existsSync(`/sys/fs/cgroup/${c}/${rel}`)) return `/sys/fs/cgroup/${c}/${rel}`;
  return `/sys/fs/cgroup/${controller}/${rel}`;
}

export function sessionPids(instance: string, sessionId: string): number[] {
  const f = join(cgroupDir(instance, sessionId, 'memory'), 'cgroup.procs');
  if (!existsSync(f)) throw new Error(`no cgroup for session ${sessionId} (${f}); is it still running?`);
  return readFileSync(f, 'utf8').split('\n').filter(Boolean).map(Number);
}

export type Kind = 'xvfb' | 'browser' | 'wm' | 'buses' | 'vnc' | 'other';
export function kindOf(comm: string, cmdline: string): Kind {
  if (/^Xvfb/.test(comm)) return 'xvfb';
  if (/chrom|crashpad/i.test(comm) || /\/chromium/.test(cmdline)) return 'browser';
  if (/^openbox/.test(comm)) return 'wm';
  if (/dbus|at-spi/.test(comm)) return 'buses';
  if (/x11vnc|websockify/.test(comm) || /websockify|x11vnc/.test(cmdline)) return 'vnc';
  return 'other';
}

/** PSS by process kind (MiB), summed from /proc/PID/smaps_rollup over the session's cgroup. */
export function pssByKind(instance: string, sessionId: string): { byKind: Record<Kind, number>; total: number; processes: number } {
  const byKind: Record<Kind, number> = { xvfb: 0, browser: 0, wm: 0, buses: 0, vnc: 0, other: 0 };
  let total = 0,
    processes = 0;
  for (const pid of sessionPids(instance, sessionId)) {
    try {
      const roll = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      const pss = Number(/^Pss:\s+(\d+)/m.exec(roll)?.[1] ?? 0) / 1024;
      const comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      byKind[kindOf(comm, cmd)] += pss;
      total += pss;
      processes++;
    } catch {
      /* exited between listing and reading */
    }
  }
  return { byKind, total, processes };
}

/** Size of the session's writable layer (du of its overlay upper dir), MiB. */
export function upperMiB(stateDir: string, sessionId: string): number {
  const dir = join(stateDir, 'sessions', sessionId, 'disk', 'upper');
  // The session runs on while du walks its layer: a file it deletes meanwhile (Chromium's journals) makes du exit 1
  // with the total still printed, which is the size at that moment.
  const r = spawnSync('du', ['-sk', dir], { encoding: 'utf8' });
  const kib = /^(\d+)\t/.exec(r.stdout ?? '')?.[1];
  if (kib === undefined || (r.status !== 0 && !/No such file or directory/.test(r.stderr ?? ''))) {
    throw new Error(`du -sk ${dir} failed (exit ${r.status}): ${(r.stderr ?? '').slice(0, 500)}`);
  }
  return Number(kib) / 1024;
}

/** CPU time (ns) a session's cgroup has used so far. */
export function cgroupCpuNs(instance: string, sessionId: string): number {
  const v1 = join(cgroupDir(instance, sessionId, 'cpuacct'), 'cpuacct.usage');
  if (existsSync(v1)) return Number(readFileSync(v1, 'utf8').trim());
  const v2 = join(cgroupDir(instance, sessionId, 'cpu'), 'cpu.stat');
  return Number(/usage_usec (\d+)/.exec(readFileSync(v2, 'utf8'))![1]) * 1000;
}

/** CPU time (ns) of one process (utime+stime from /proc/PID/stat). */
export function procCpuNs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * (1e9 / 100);
}

export function rssMiB(pid: number): number {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)?.[1] ?? 0) / 1024;
}

/**
 * Host memory in use (MemTotal − MemAvailable), averaged over `samples` readings,
 * minus the harness's own RSS at the time (the daemon's process stays counted:
 * it is part of the system under test).
 */
export async function sampleUsed(samples = 3, gapMs = 500): Promise<{ usedMiB: number; rawMiB: number; harnessRssMiB: number }> {
  let raw = 0,
    harness = 0;
  for (let i = 0; i < samples; i++) {
    raw += hostUsedMiB();
    harness += process.memoryUsage().rss / 1024 ** 2;
    if (i < samples - 1) await sleep(gapMs);
  }
  raw /= samples;
  harness /= samples;
  return { usedMiB: raw - harness, rawMiB: raw, harnessRssMiB: harness };
}
