import { existsSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cgroupMode } from './oci-runtime.ts';

/** Where the cgroup filesystem is mounted. */
export const CGROUP_ROOT = '/sys/fs/cgroup';

/**
 * The cgroup hierarchies a runtime makes a container's cgroup in: the unified
 * tree on a cgroup v2 host, or every v1 controller (plus the hybrid's unified
 * mount) otherwise.
 */
export function cgroupBases(): string[] {
  if (existsSync('/sys/fs/cgroup/cgroup.controllers') && !existsSync('/sys/fs/cgroup/memory')) return ['/sys/fs/cgroup'];
  return readdirSync('/sys/fs/cgroup').map((c) => join('/sys/fs/cgroup', c));
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
