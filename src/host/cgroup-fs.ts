import { existsSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The one door to the cgroup filesystem: where it is, which layout the host has (decided here
 * only: `cgroupMode`), where a cgroup's files are in it (`cgroupDir`), and the reads and writes of
 * a session's cgroup that are the same on v1 and v2 but for the file names. What the daemon does
 * with them (its own CPU cgroup, the CPU guard's verdicts, disk limits) is in the files that use it.
 */

/** Where the cgroup filesystem is mounted. */
export const CGROUP_ROOT = '/sys/fs/cgroup';

/**
 * The host's cgroup layout: v2 (one unified tree with the memory controller at the root), hybrid
 * (v1 controllers, plus a unified tree without controllers at `unified/`), or v1.
 */
export function cgroupMode(): 'v1' | 'hybrid' | 'v2' {
  const controllers = join(CGROUP_ROOT, 'cgroup.controllers');
  if (existsSync(controllers)) return readFileSync(controllers, 'utf8').includes('memory') ? 'v2' : 'hybrid';
  return existsSync(join(CGROUP_ROOT, 'unified')) ? 'hybrid' : 'v1';
}

/** A cgroup's directory (`path` from the root, e.g. `/drums-<inst>/sessions/<id>`) in the hierarchy that holds `controller`. */
export function cgroupDir(controller: string, path: string): string {
  return cgroupMode() === 'v2' ? join(CGROUP_ROOT, path) : join(CGROUP_ROOT, controller, path);
}

/**
 * The cgroup hierarchies a runtime makes a container's cgroup in: the unified
 * tree on a cgroup v2 host, or every v1 controller (plus the hybrid's unified
 * mount) otherwise.
 */
export function cgroupBases(): string[] {
  if (cgroupMode() === 'v2') return [CGROUP_ROOT];
  return readdirSync(CGROUP_ROOT).map((c) => join(CGROUP_ROOT, c));
}

/** Removes one (empty) cgroup, e.g. `/drums-<inst>/sessions/<id>`, from every hierarchy. */
export function removeCgroup(path: string): void {
  for (const base of cgroupBases()) {
    try {
      rmdirSync(base + path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
}

/**
 * A session cgroup's files the CPU guard reads and writes, by cgroup version: `%` stands for the
 * session's cgroup path; `tasks` is the directory whose `tasksFile` lists its threads; `normal` and
 * `low` are the default weight and a sixteenth of it.
 */
export const CPU_FILES_V1 = {
  usage: 'cpuacct/%/cpuacct.usage',
  /** user and system time, in USER_HZ (100 a second) */
  userSys: 'cpuacct/%/cpuacct.stat',
  weight: 'cpu/%/cpu.shares',
  idle: 'cpu/%/cpu.idle',
  stat: 'cpu/%/cpu.stat',
  quota: 'cpu/%/cpu.cfs_quota_us',
  period: 'cpu/%/cpu.cfs_period_us',
  pidsEvents: 'pids/%/pids.events',
  pidsCurrent: 'pids/%/pids.current',
  memEvents: 'memory/%/memory.oom_control',
  tasks: 'cpu/%',
  tasksFile: 'tasks',
  normal: 1024,
  low: 64,
};
export const CPU_FILES_V2 = {
  usage: '%/cpu.stat',
  userSys: '%/cpu.stat',
  weight: '%/cpu.weight',
  idle: '%/cpu.idle',
  stat: '%/cpu.stat',
  quota: '%/cpu.max',
  period: '%/cpu.max',
  pidsEvents: '%/pids.events',
  pidsCurrent: '%/pids.current',
  memEvents: '%/memory.events',
  tasks: '%',
  tasksFile: 'cgroup.threads',
  normal: 100,
  low: 6,
};

/**
 * Lifts a demotion from a session's cgroup whose processes are about to be killed (cpu.idle 0, no
 * quota): a dying process runs to exit, and a thousand of them at the cap took longer than `runc
 * delete` waits (a fork bomb's reset failed: "container with given ID already exists"). Missing
 * files (a kernel without cpu.idle, a cgroup already gone) are skipped.
 */
export function releaseCpu(cgroup: string, root = CGROUP_ROOT, v2 = cgroupMode() === 'v2'): void {
  const k = v2 ? CPU_FILES_V2 : CPU_FILES_V1;
  for (const [file, value] of [
    [k.idle, '0'],
    [k.quota, v2 ? 'max' : '-1'],
  ] as const) {
    try {
      writeFileSync(join(root, file.replace('%', cgroup)), value);
    } catch (e) {
      if (!['ENOENT', 'ENODEV'].includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
    }
  }
}

/** Whether the runtime can turn swap off for a session (v1 needs swap accounting: memory.memsw.*). */
export function swapLimitSupported(): boolean {
  return cgroupMode() === 'v2' || existsSync(join(CGROUP_ROOT, 'memory', 'memory.memsw.limit_in_bytes'));
}

/** OOM kills inside one session's memory cgroup (`/drums-<inst>/sessions/<id>`), 0 if unknown. */
export function oomKills(cgroupPath: string): number {
  try {
    const file = join(cgroupDir('memory', cgroupPath), cgroupMode() === 'v2' ? 'memory.events' : 'memory.oom_control');
    const m = /^oom_kill (\d+)$/m.exec(readFileSync(file, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Memory the session's cgroup uses now, in bytes (0 if unknown). */
export function memoryUsage(cgroupPath: string): number {
  try {
    const file = join(cgroupDir('memory', cgroupPath), cgroupMode() === 'v2' ? 'memory.current' : 'memory.usage_in_bytes');
    return Number(readFileSync(file, 'utf8').trim()) || 0;
  } catch {
    return 0;
  }
}

export interface Pressure {
  resource: 'cpu' | 'memory' | 'io';
  kind: 'some' | 'full';
  avg10: number;
  avg60: number;
  /** Total stall time, seconds. */
  totalSeconds: number;
}

/** Parses a PSI file (/proc/pressure/* or a v2 cgroup's *.pressure); [] where the kernel has no PSI. */
export function readPressure(file: string, resource: Pressure['resource']): Pressure[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  const out: Pressure[] = [];
  for (const line of text.split('\n')) {
    const m = /^(some|full) avg10=([\d.]+) avg60=([\d.]+) avg300=[\d.]+ total=(\d+)$/.exec(line.trim());
    if (m) out.push({ resource, kind: m[1] as 'some' | 'full', avg10: Number(m[2]), avg60: Number(m[3]), totalSeconds: Number(m[4]) / 1e6 });
  }
  return out;
}

/** A cgroup's PSI (cgroup v2 only; v1 has none). */
export function cgroupPressure(cgroupPath: string): Pressure[] {
  if (cgroupMode() !== 'v2') return [];
  return (['cpu', 'memory', 'io'] as const).flatMap((r) => readPressure(join(CGROUP_ROOT, cgroupPath, `${r}.pressure`), r));
}
