import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '');

const safe = (f: () => string) => {
  try {
    return f().trim();
  } catch {
    return 'unknown';
  }
};

/** The repository's commit and whether the work tree has changes (read-only git commands). */
export function gitState(): { commit: string; dirty: boolean } {
  const commit = safe(() => execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8', cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'ignore'] }));
  const dirty =
    safe(() =>
      execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8', cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'ignore'] }),
    ) !== '';
  return { commit, dirty };
}

/** Host facts recorded with every benchmark record. */
export function hostFacts() {
  const cgroupMode =
    existsSync('/sys/fs/cgroup/cgroup.controllers') && readFileSync('/sys/fs/cgroup/cgroup.controllers', 'utf8').includes('memory') ? 'v2' : 'v1-hybrid';
  const g = gitState();
  return {
    kernel: os.release(),
    cgroupMode,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    memTotalMiB: Math.round(os.totalmem() / 1024 ** 2),
    loadavg: os.loadavg().map((x) => Math.round(x * 100) / 100),
    node: process.version,
    runc: safe(() => execFileSync('runc', ['--version'], { encoding: 'utf8' }).split('\n')[0]!),
    chromium: safe(() => execFileSync('dpkg-query', ['-W', '-f=${Version}', 'chromium'], { encoding: 'utf8' })),
    gitCommit: g.commit,
    gitDirty: g.dirty,
    swap: safe(() => readFileSync('/proc/swaps', 'utf8').trim().split('\n').slice(1).join('; ')) || 'none',
    date: new Date().toISOString(),
  };
}

export function meminfo(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of readFileSync('/proc/meminfo', 'utf8').split('\n')) {
    const m = /^(\w+(?:\(\w+\))?):\s+(\d+)/.exec(l);
    if (m) out[m[1]!] = Number(m[2]) / 1024;
  }
  return out;
}

/** Host memory in use: MemTotal − MemAvailable, MiB. */
export function hostUsedMiB(): number {
  const m = meminfo();
  return m.MemTotal! - m.MemAvailable!;
}
