import { existsSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

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
 * Lifts the CPU guard's demotion from a cgroup whose processes are about to be killed (cpu.idle 0,
 * no quota): a dying process runs to exit, and a thousand of them at a demoted session's cap took
 * longer than `runc delete` waits (a fork bomb's reset failed: "container with given ID already
 * exists"). Missing files (a kernel without cpu.idle, a cgroup already gone) are skipped.
 */
export function releaseCpu(path: string): void {
  const v2 = cgroupBases().length === 1;
  const dir = v2 ? `/sys/fs/cgroup${path}` : `/sys/fs/cgroup/cpu${path}`;
  for (const [file, value] of [['cpu.idle', '0'], v2 ? ['cpu.max', 'max'] : ['cpu.cfs_quota_us', '-1']] as const) {
    try {
      writeFileSync(join(dir, file), value);
    } catch (e) {
      if (!['ENOENT', 'ENODEV'].includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
    }
  }
}
