// Where one accessibility-tree read of a multi-app desktop spends its time (issue 30, item 1).
//
//   sudo .runtime/node/bin/node scripts/a11y-profile.ts [--reads N] [--keep] [--bus PATH] [--apps calc,gimp,...]
//
// Starts a private daemon, an `osworld` session (without a user namespace, so this root process can join its
// AT-SPI bus directly) with the 7-app desktop (src/bench/a11y-desktop.ts), then walks the tree N times in this
// process with this checkout's walker and prints, per read: wall time, nodes, calls, XML size and the time to
// build the XML; per call kind and per application: calls, summed round trips and reply bytes; and the CPU each
// process of the session (the apps, the AT-SPI bus daemon) and this process spent over the N reads. Then the
// same reads through the daemon's HTTP API (XML), end to end.
// --keep leaves the daemon and session up until this process gets SIGTERM and prints the bus path; --bus PATH profiles an existing bus
// (e.g. one left by --keep) without starting anything, to compare walker changes on the same apps; --only NAME,...
// walks only those applications (their names in the tree: soffice, gedit, org.gnome.Nautilus...); --direct talks to each
// application over its own socket (WalkOptions.direct).
import { readFileSync, readdirSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { A11yClient } from '../src/a11y/client.ts';
import { toOsworldXml } from '../src/a11y/osworld-xml.ts';
import type { A11yNode, CallTally, WalkOptions } from '../src/a11y/types.ts';
import { DESKTOP_APPS, openDesktop } from '../src/bench/a11y-desktop.ts';
import { startPrivateDaemon } from '../src/client/private-daemon.ts';

const { values: o } = parseArgs({
  options: {
    reads: { type: 'string', default: '3' },
    keep: { type: 'boolean', default: false },
    bus: { type: 'string' },
    apps: { type: 'string' },
    only: { type: 'string' },
    direct: { type: 'boolean', default: false },
  },
});
const reads = Number(o.reads);
const names = o.apps ? o.apps.split(',') : DESKTOP_APPS.map((a) => a.name);

/** CPU ticks (utime+stime) of every process of the session, by pid: its comm and ticks. */
function cpuTicks(pids?: Set<number>): Map<number, { comm: string; ticks: number }> {
  const out = new Map<number, { comm: string; ticks: number }>();
  for (const e of readdirSync('/proc')) {
    const pid = Number(e);
    if (!Number.isInteger(pid) || (pids && !pids.has(pid))) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(pid, { comm, ticks: Number(f[11]) + Number(f[12]) });
    } catch {}
  }
  return out;
}

/** Pids whose open sockets include the bus's (the bus daemon and its clients): all processes under the session's cgroup would be better; here, every process whose cgroup names the session. */
function sessionPids(id: string): Set<number> {
  const pids = new Set<number>();
  for (const e of readdirSync('/proc')) {
    const pid = Number(e);
    if (!Number.isInteger(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cgroup`, 'utf8').includes(id)) pids.add(pid);
    } catch {}
  }
  return pids;
}

const table = (rows: Array<[string, CallTally]>, wallMs: number) =>
  rows
    .sort((a, b) => b[1].ms - a[1].ms)
    .map(
      ([k, t]) =>
        `  ${k.padEnd(34)} ${String(t.calls).padStart(7)} calls ${t.ms.toFixed(0).padStart(8)} ms summed ${(t.ms / t.calls).toFixed(2).padStart(6)} ms/call ${(t.bytes / 1024).toFixed(0).padStart(6)} KiB ${((t.ms / wallMs) * 100).toFixed(0).padStart(5)}% of wall`,
    )
    .join('\n');

async function profile(bus: string, sessionId: string | undefined, readApi?: () => Promise<string>) {
  const client = await A11yClient.connect(bus, { timeoutMs: 2000 });
  const pids = sessionId ? sessionPids(sessionId) : undefined;
  try {
    const walkOpts: WalkOptions = { maxDepth: 50, maxWidth: 1024, deadlineMs: 20_000, ...(o.only ? { apps: o.only.split(',') } : {}),
      // The session's XDG_RUNTIME_DIR (/run/drums/xdg) is the host's <runDir>/xdg, next to the bus's at-spi/.
      ...(o.direct ? { direct: { mapPath: (p: string) => p.replace(/^\/run\/drums\/xdg\//, bus.replace(/at-spi\/bus_0$/, '')) } } : {}),
    };
    await client.walk(walkOpts); // warm: first reads make atk-bridge create its objects
    const before = cpuTicks(pids);
    const self0 = process.cpuUsage();
    const walls: number[] = [];
    for (let i = 0; i < reads; i++) {
      const t0 = performance.now();
      const { tree, stats } = await client.walk(walkOpts);
      const t1 = performance.now();
      const xml = toOsworldXml(tree, { maxDepth: 50, maxWidth: 1024 });
      const t2 = performance.now();
      walls.push(t1 - t0);
      const appOf = new Map((tree.children as A11yNode[]).map((a) => [a.ref.bus, a.name || a.ref.bus]));
      console.log(
        `read ${i + 1}: walk ${(t1 - t0).toFixed(0)} ms, ${stats.nodes} nodes, ${stats.calls} calls, XML ${(xml.length / 1024).toFixed(0)} KiB built in ${(t2 - t1).toFixed(0)} ms; errors ${stats.errors}, timeouts ${stats.timeouts}`,
      );
      if (i === reads - 1) {
        console.log('by call kind:');
        console.log(table(Object.entries(stats.profile.byKind), t1 - t0));
        console.log('by application:');
        const perApp = new Map<string, number>();
        const count = (n: A11yNode, app: string) => {
          perApp.set(app, (perApp.get(app) ?? 0) + 1);
          for (const c of n.children) count(c, app);
        };
        for (const a of tree.children) count(a, appOf.get(a.ref.bus)!);
        console.log(
          table(
            Object.entries(stats.profile.byBus).map(([b, t]) => [`${appOf.get(b) ?? b} (${perApp.get(appOf.get(b) ?? '') ?? 0} nodes)`, t]),
            t1 - t0,
          ),
        );
      }
    }
    const self = process.cpuUsage(self0);
    const after = cpuTicks(pids);
    const hz = 100;
    const spent = [...after]
      .map(([pid, a]) => ({ comm: a.comm, pid, ms: ((a.ticks - (before.get(pid)?.ticks ?? 0)) * 1000) / hz / reads }))
      .filter((x) => x.ms > 0)
      .sort((a, b) => b.ms - a.ms);
    console.log(`CPU per read (ms), over ${reads} reads:`);
    console.log(`  this process (walker + XML)  ${((self.user + self.system) / 1000 / reads).toFixed(0)}`);
    for (const x of spent.slice(0, 15)) console.log(`  ${`${x.comm} [${x.pid}]`.padEnd(28)} ${x.ms.toFixed(0)}`);
    walls.sort((a, b) => a - b);
    console.log(`walk wall ms: min ${walls[0]!.toFixed(0)} p50 ${walls[Math.floor(walls.length / 2)]!.toFixed(0)} max ${walls.at(-1)!.toFixed(0)}`);
    if (readApi) {
      const api: number[] = [];
      for (let i = 0; i < reads; i++) {
        const t0 = performance.now();
        await readApi();
        api.push(performance.now() - t0);
      }
      api.sort((a, b) => a - b);
      console.log(`HTTP API XML read ms: min ${api[0]!.toFixed(0)} p50 ${api[Math.floor(api.length / 2)]!.toFixed(0)} max ${api.at(-1)!.toFixed(0)}`);
    }
  } finally {
    await client.close();
  }
}

if (o.bus) {
  await profile(o.bus, undefined);
} else {
  const d = await startPrivateDaemon({});
  try {
    const s = await d.client.createSession({ image: 'osworld', userns: false } as never);
    console.log(`session ${s.id}; opening ${names.join(', ')}`);
    const t0 = Date.now();
    await openDesktop(d.client, s.id, { names });
    console.log(`apps up in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    const bus = `${d.stateDir}/rt/${s.id}/run/xdg/at-spi/bus_0`;
    await profile(bus, s.id, async () => String(await d.client.a11y(s.id, { format: 'xml' })));
    if (o.keep) {
      console.log(`kept: daemon at ${d.url} (token ${d.token}), session ${s.id}, bus ${bus}; SIGTERM this process (pid ${process.pid}) to stop`);
      await new Promise<void>((resolve) => process.once('SIGTERM', () => resolve()));
    }
  } finally {
    await d.stop();
  }
}
