import { existsSync, readdirSync, rmdirSync } from 'node:fs';
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
