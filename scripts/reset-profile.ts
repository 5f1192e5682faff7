/**
 * Where a reset of a default session with Chromium spends its time (issue 29, item 4): the reset's
 * own step timings (stop, rootfs, container, ready; the daemon records them) and, at the moment the
 * reset answers, the CPU each process of the new generation has used, by kind (Xvfb, the Chromium
 * browser, its zygotes, renderer, utilities, crashpad, the desktop's helpers), and when the init
 * started the browser after the session's PID 1 (`browserStartMs`). CPU time is the figure a loaded
 * machine distorts least; wall times need a quiet one.
 *
 * Arms run side by side, interleaved reset by reset, each on its own private daemon with one
 * session (a user namespace, Chromium sandboxed, as a default daemon makes it):
 *
 *   --arm NAME=BIN            the daemon of the checkout whose bin/drums is BIN (default: this one's)
 *   --arm 'NAME=BIN:FLAG FLAG'  the same with extra Chromium flags (the session's browserFlags), space-separated
 *
 *   .runtime/node/bin/node scripts/reset-profile.ts [--n 10] [--arm ...]...   (as root; JSON on stdout)
 *
 * For a before/after of the code: a checkout of the old commit beside this one (its bin/drums finds
 * .runtime through its own directory), e.g.
 *   git archive main | tar -x -C /tmp/drums-before && ln -s $PWD/.runtime $PWD/node_modules /tmp/drums-before/
 *   .runtime/node/bin/node scripts/reset-profile.ts --n 10 --arm before=/tmp/drums-before/bin/drums --arm after=bin/drums
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startPrivateDaemon, type PrivateDaemon } from '../src/client/private-daemon.ts';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '10' },
    arm: { type: 'string', multiple: true },
    url: { type: 'string', default: 'data:text/html,<h1>reset</h1>' },
  },
});
const n = Number(values.n);
const here = resolve(import.meta.dirname, '..');
const armSpecs = (values.arm?.length ? values.arm : [`after=${join(here, 'bin', 'drums')}`]).map((a) => {
  const [name, rest = ''] = a.split(/=(.*)/s) as [string, string?];
  const [bin, flags = ''] = rest.split(/:(.*)/s) as [string, string?];
  return { name, bin: resolve(bin || join(here, 'bin', 'drums')), flags: flags.split(/\s+/).filter(Boolean) };
});

const TICK_MS = 10;

/**
 * A process's kind from its command line: the executable, and for Chromium its `--type` and a utility's
 * sub-type. Chromium rewrites its command line as one string (spaces, not NULs), so both are split.
 */
function kindOf(cmdline: string): string {
  const words = cmdline.split(/[\0 ]/).filter(Boolean);
  const exe = words[0]?.split('/').at(-1) ?? '?';
  if (exe !== 'chromium') return exe;
  const type = /--type=(\S+)/.exec(cmdline)?.[1];
  if (!type) return 'chromium:browser';
  const sub = /--utility-sub-type=(\S+)/.exec(cmdline)?.[1];
  return `chromium:${type}${sub ? `:${sub.split('.').at(-1)}` : ''}`;
}

/** CPU ms used so far by each process of the session's cgroup, summed by kind; and the cgroup's whole use (v1 cpuacct, v2 cpu.stat). */
function cpuByKind(instance: string, id: string): { byKind: Record<string, number>; cgroupMs: number | null; browserStartMs: number | null } {
  // The session's cgroup (src/host/instance.ts sessionCgroup; scripts may not import the host layer).
  const cg = `drums-${instance}/sessions/${id}`;
  const byKind: Record<string, number> = {};
  let pids: string[] = [];
  for (const f of [`/sys/fs/cgroup/pids/${cg}/cgroup.procs`, `/sys/fs/cgroup/${cg}/cgroup.procs`]) {
    try {
      pids = readFileSync(f, 'utf8').split('\n').filter(Boolean);
      break;
    } catch {}
  }
  // Start times (clock ticks since boot): when the browser was started, after the session's init.
  let initStart: number | undefined;
  let browserStart: number | undefined;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ms = (Number(f[11]) + Number(f[12])) * TICK_MS;
      const k = kindOf(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
      byKind[k] = (byKind[k] ?? 0) + ms;
      const start = Number(f[19]);
      if (k === 'tini') initStart = Math.min(initStart ?? start, start);
      if (k === 'chromium:browser') browserStart = Math.min(browserStart ?? start, start);
    } catch {}
  }
  const browserStartMs = initStart !== undefined && browserStart !== undefined ? (browserStart - initStart) * TICK_MS : null;
  let cgroupMs: number | null = null;
  try {
    cgroupMs = Number(readFileSync(`/sys/fs/cgroup/cpuacct/${cg}/cpuacct.usage`, 'utf8')) / 1e6;
  } catch {
    try {
      cgroupMs = Number(/usage_usec (\d+)/.exec(readFileSync(`/sys/fs/cgroup/${cg}/cpu.stat`, 'utf8'))![1]) / 1e3;
    } catch {}
  }
  return { byKind, cgroupMs, browserStartMs };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2) : NaN;
};

const arms: { name: string; flags: string[]; d: PrivateDaemon; id: string; rows: Record<string, number>[] }[] = [];
try {
  for (const a of armSpecs) {
    const d = await startPrivateDaemon({ DRUMS_USERNS: '1' }, { bin: a.bin });
    const s = await d.client.createSession({ image: 'default', url: values.url, ...(a.flags.length ? { browserFlags: a.flags } : {}) });
    arms.push({ name: a.name, flags: a.flags, d, id: s.id, rows: [] });
  }
  for (let i = 0; i < n; i++) {
    for (const a of arms) {
      const t = performance.now();
      const r = await a.d.client.resetSession(a.id);
      const wall = performance.now() - t;
      const { byKind, cgroupMs, browserStartMs } = cpuByKind(a.d.instance, a.id);
      const tm = r.timings;
      a.rows.push({
        clientMs: wall,
        resetMs: tm.resetMs!,
        stopMs: tm['reset.stopMs']!,
        rootfsMs: tm['reset.rootfsMs']!,
        containerMs: tm['reset.containerMs']!,
        readyMs: tm['reset.readyMs']!,
        desktopReadyMs: tm.desktopReadyMs!,
        browserAfterDesktopMs: tm.browserReadyMs! - tm.desktopReadyMs!,
        ...(cgroupMs === null ? {} : { cgroupCpuMs: cgroupMs }),
        // When the init started Chromium (what a reset waits on), from the start of the session's PID 1.
        ...(browserStartMs === null ? {} : { browserStartMs }),
        cpuMs: Object.values(byKind).reduce((x, y) => x + y, 0),
        ...Object.fromEntries(Object.entries(byKind).map(([k, v]) => [`cpu.${k}`, v])),
      });
      process.stderr.write(`${a.name} ${i + 1}/${n}: reset ${Math.round(tm.resetMs!)} ms (ready ${Math.round(tm['reset.readyMs']!)})\n`);
    }
  }
} finally {
  for (const a of arms) await a.d.stop().catch(() => {});
}
const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const out = arms.map((a) => {
  const keys = [...new Set(a.rows.flatMap((r) => Object.keys(r)))];
  return {
    arm: a.name,
    flags: a.flags,
    n: a.rows.length,
    median: Object.fromEntries(keys.map((k) => [k, Math.round(median(a.rows.map((r) => r[k] ?? 0)))])),
    rows: a.rows.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Math.round(v)]))),
  };
});
process.stdout.write(
  `${JSON.stringify({ n, load, cpus: readdirSync('/sys/devices/system/cpu').filter((c) => /^cpu\d+$/.test(c)).length, arms: out }, null, 2)}\n`,
);
