import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';

/** Host facts recorded with every benchmark record. */
export function hostFacts() {
  const safe = (f: () => string) => { try { return f().trim(); } catch { return 'unknown'; } };
  const cgroup = safe(() => (readFileSync('/sys/fs/cgroup/cgroup.controllers', 'utf8').includes('memory') ? 'v2' : 'hybrid'));
  return {
    kernel: os.release(),
    cgroupMode: cgroup === 'unknown' ? 'v1' : cgroup,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    memTotalMiB: Math.round(os.totalmem() / 1024 ** 2),
    node: process.version,
    runc: safe(() => execFileSync('runc', ['--version'], { encoding: 'utf8' }).split('\n')[0]!),
    chromium: safe(() => execFileSync('dpkg-query', ['-W', '-f=${Version}', 'chromium'], { encoding: 'utf8' })),
    gitCommit: safe(() => execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8', cwd: new URL('../..', import.meta.url).pathname })),
    date: new Date().toISOString(),
  };
}

/** Host memory in use: MemTotal − MemAvailable, MiB. */
export function hostUsedMiB(): number {
  const m = readFileSync('/proc/meminfo', 'utf8');
  const get = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(m)![1]) / 1024;
  return get('MemTotal') - get('MemAvailable');
}
