import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, readlinkSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import type { DrumsClient, SessionInfo } from '../src/client/client.ts';
import { acquireLock, type LockHandle } from '../src/image/lock.ts';
import { judge, loadBars } from './bars.ts';
import { gitState, hostFacts, REPO_ROOT } from './host-facts.ts';
import { sleep } from './measure.ts';
import { startPrivateDaemon, type PrivateDaemon } from '../src/client/private-daemon.ts';
import type { Probe } from './probe.ts';
import { runHostProbes } from './host-probes/index.ts';
import { RECORD_SCHEMA_VERSION, validateRecord, type ArmRecord, type BenchRecord, type ResultRow, type Verdict } from './record.ts';
import { sessionCgroup } from '../src/host/instance.ts';

/**
 * `drums audit`: the isolation audit as an experiment with a verdict. Probes
 * run inside session A (through the daemon's exec, as the desktop user and as
 * root-in-session) against sibling B, the host, and network targets the audit
 * itself starts (host listeners, and a network namespace it creates holding
 * 169.254.169.254 and private addresses). Any probe that finds an observation
 * or influence path is a FAIL, named in the record.
 */
export type { Probe } from './probe.ts';

const AUDIT_ARMS = ['baseline', 'fork', 'memfork', 'shared-browser'];
/** The configuration audited: a user namespace per session (the users.* probes fail without one). */
const AUDITED_CONFIG = { DRUMS_USERNS: '1' };

/** Host uids of a session's processes (from its pids cgroup, v1 or v2), with their command lines. */
function sessionHostUids(instance: string, id: string): { uid: number; cmd: string }[] {
  const out: { uid: number; cmd: string }[] = [];
  for (const f of [`/sys/fs/cgroup/pids/${sessionCgroup(instance, id)}/cgroup.procs`, `/sys/fs/cgroup/${sessionCgroup(instance, id)}/cgroup.procs`]) {
    let pids: string[];
    try {
      pids = readFileSync(f, 'utf8').split('\n').filter(Boolean);
    } catch {
      continue;
    }
    for (const pid of pids) {
      try {
        const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
        out.push({ uid, cmd: readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ') });
      } catch {}
    }
    break;
  }
  return out;
}

/**
 * Host-side user probes: A's and B's processes run as host uids no other session and no host
 * user holds (none below 65536), and a root-in-session process in A is not host root.
 */
async function userProbes(c: DrumsClient, d: PrivateDaemon, a: SessionInfo, b: SessionInfo, arm: string): Promise<Probe[]> {
  const mark = String(42_000_000 + Math.floor(Math.random() * 999_999));
  await c.exec(a.id, { shell: `setsid sleep ${mark} >/dev/null 2>&1 < /dev/null &`, root: true, timeoutMs: 15_000 });
  let rootProc: { uid: number } | undefined;
  for (const end = Date.now() + 10_000; !rootProc && Date.now() < end; await sleep(200))
    rootProc = sessionHostUids(d.instance, a.id).find((p) => p.cmd.includes(`sleep ${mark}`));
  const ua = new Set(sessionHostUids(d.instance, a.id).map((p) => p.uid));
  const ub = new Set(sessionHostUids(d.instance, b.id).map((p) => p.uid));
  const shared = [...ua].filter((u) => ub.has(u));
  const low = [...ua, ...ub].filter((u) => u < 65536);
  return [
    {
      arm,
      id: 'users.distinct-host-uids',
      category: 'users',
      as: 'host',
      result: ua.size && ub.size && !shared.length && !low.length ? 'pass' : 'fail',
      detail: `A runs as host uids ${[...ua].join(',')}; B as ${[...ub].join(',')}${shared.length ? `; shared ${shared.join(',')}` : ''}${low.length ? `; host-range uids ${low.join(',')}` : ''}`,
    },
    {
      arm,
      id: 'users.root-in-session-unprivileged-on-host',
      category: 'users',
      as: 'host',
      result: rootProc && rootProc.uid >= 65536 ? 'pass' : rootProc ? 'fail' : 'invalid',
      detail: rootProc ? `root-in-session's process is host uid ${rootProc.uid}` : 'the root-in-session process was not found',
    },
  ];
}
const PROBES_PY = readFileSync(new URL('./audit-probes.py', import.meta.url), 'utf8');
const page = (rgb: string) => `data:text/html,<title>audit</title><body style="background:%23${rgb};margin:0"></body>`;
const RED = 'cc2222',
  GREEN = '22cc22';

const ip = (...args: string[]) => execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** A network namespace of our own with metadata/private addresses, routed from the host, with a listener. */
function startTargets(tag: string, port: number) {
  const ns = `drau${tag}`,
    hv = `drau${tag}h`,
    nv = `drau${tag}n`;
  const addrs = { meta: '169.254.169.254', ten: '10.254.77.1', one92: '192.168.254.1', one72: '172.16.254.1' };
  const routes: string[] = [];
  let proc: ChildProcess | undefined;
  const cleanup = () => {
    if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    for (const r of routes) {
      try {
        ip('route', 'del', r);
      } catch {}
    }
    try {
      ip('link', 'del', hv);
    } catch {}
    try {
      ip('netns', 'del', ns);
    } catch {}
  };
  try {
    ip('netns', 'add', ns);
    ip('link', 'add', hv, 'type', 'veth', 'peer', 'name', nv, 'netns', ns);
    ip('addr', 'add', '10.254.78.1/30', 'dev', hv);
    ip('link', 'set', hv, 'up');
    ip('-n', ns, 'addr', 'add', '10.254.78.2/30', 'dev', nv);
    for (const a of Object.values(addrs)) ip('-n', ns, 'addr', 'add', `${a}/32`, 'dev', nv);
    ip('-n', ns, 'link', 'set', nv, 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    for (const a of Object.values(addrs)) {
      ip('route', 'add', `${a}/32`, 'via', '10.254.78.2');
      routes.push(`${a}/32`);
    }
    proc = spawn(
      'ip',
      [
        'netns',
        'exec',
        ns,
        'python3',
        '-c',
        `import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',${port}));s.listen(64)\nwhile True:\n  c,_=s.accept();c.close()`,
      ],
      { stdio: 'ignore' },
    );
  } catch (e) {
    cleanup();
    throw new Error(`could not set up the audit's target namespace: ${(e as Error).message}`);
  }
  return { ns, addrs, cleanup };
}

function hostListener(host: string): Promise<{ port: number; accepted: string[]; close: () => void }> {
  const accepted: string[] = [];
  const srv = net.createServer((s) => {
    accepted.push(String(s.remoteAddress));
    s.destroy();
  });
  return new Promise((res, rej) => {
    srv.once('error', rej);
    srv.listen(0, host, () => res({ port: (srv.address() as net.AddressInfo).port, accepted, close: () => srv.close() }));
  });
}

const canConnect = (host: string, port: number) =>
  new Promise<boolean>((res) => {
    const s = net.connect({ host, port, timeout: 1500 }, () => {
      s.destroy();
      res(true);
    });
    s.on('error', () => res(false));
    s.on('timeout', () => {
      s.destroy();
      res(false);
    });
  });

async function centerPixel(c: DrumsClient, id: string): Promise<[number, number, number]> {
  const sharp = (await import('sharp')).default;
  const png = await c.screenshot(id, 'png');
  const img = sharp(png);
  const meta = await img.metadata();
  const { data, info } = await img.removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const x = Math.floor(meta.width! / 2),
    y = Math.floor(meta.height! * 0.75);
  const o = (y * info.width + x) * info.channels;
  return [data[o]!, data[o + 1]!, data[o + 2]!];
}
const near = (p: number[], hex: string) => [0, 1, 2].every((i) => Math.abs(p[i]! - parseInt(hex.slice(i * 2, i * 2 + 2), 16)) < 40);

const KINDS: Record<string, string> = { xvfb: 'Xvfb', wm: 'openbox', buses: 'dbus-daemon', browser: 'chromium' };
const kindsAlive = async (c: DrumsClient, id: string) => {
  const r = await c
    .exec(id, { shell: 'cat /proc/[0-9]*/comm 2>/dev/null | sort | uniq -c', timeoutMs: 15_000 })
    .catch((e: Error) => ({ stdout: '', exitCode: -1, stderr: e.message }));
  return Object.fromEntries(Object.entries(KINDS).map(([k, comm]) => [k, new RegExp(`\\d+ ${comm}$`, 'm').test(r.stdout)]));
};

/**
 * The fork arms' pair: a source whose page is a file in its home, forked (disk or memory) into A
 * and B; B's copy of the file is then made green and reloaded, so each screenshot shows whose it is.
 * A memory fork's source is what a memory fork takes: no user namespace of its own (the audited
 * daemon gives one by default), where Chromium runs without its zygote (docs/pools.md).
 */
async function forkedPair(c: DrumsClient, sessions: SessionInfo[], mode: 'disk' | 'memory'): Promise<{ a: SessionInfo; b: SessionInfo }> {
  const html = (rgb: string) => `<title>audit</title><body style="background:#${rgb};margin:0"></body>`;
  const src = await c.createSession({
    image: 'default',
    url: 'file:///home/user/audit.html',
    // A memory fork restores a session with its own user namespace into copies with their own, but
    // not Chromium's own sandbox (its nested namespaces can't be checkpointed): browserSandbox false runs it without.
    ...(mode === 'memory' ? { userns: true, browserSandbox: false } : {}),
  });
  sessions.push(src);
  await c.writeFile(src.id, '/home/user/audit.html', html(RED));
  if (mode === 'memory') {
    // The page shows the red file before the fork, so both copies start from it.
    const end = Date.now() + 30_000;
    for (;;) {
      await c.act(src.id, { actions: [{ type: 'key', keys: ['F5'] }] });
      await sleep(500);
      if (near(await centerPixel(c, src.id), RED)) break;
      if (Date.now() > end) throw new Error('the memory fork source did not paint its page');
    }
  }
  const r = await c.forkSession(src.id, { count: 2, mode });
  sessions.push(...r.copies);
  const [a, b] = r.copies as [SessionInfo, SessionInfo];
  await c.writeFile(b.id, '/home/user/audit.html', html(GREEN));
  const end = Date.now() + 30_000;
  for (;;) {
    await c.act(b.id, { actions: [{ type: 'key', keys: ['F5'] }] });
    await sleep(500);
    const [pa, pb] = [await centerPixel(c, a.id), await centerPixel(c, b.id)];
    if (near(pb, GREEN) && near(pa, RED)) return { a, b };
    if (Date.now() > end) throw new Error(`forked pair not painted: A ${pa}, B ${pb}`);
  }
}

/**
 * Whoever routes the metadata and private target addresses host-wide (the audit, the network
 * policy test) holds this lock meanwhile: one at a time per host (a lock file of pid and start
 * time; a dead holder's is taken over).
 */
export const HOST_ROUTES_LOCK = '/run/drums-audit.lock';

async function auditBaseline(d: PrivateDaemon, progress: (s: string) => void, arm = 'baseline'): Promise<{ probes: Probe[]; blast: unknown[] }> {
  const c = d.client;
  const probes: Probe[] = [];
  const tag = randomBytes(3).toString('hex');
  const hostMarker = `/root/drums-audit-marker-${tag}`;
  writeFileSync(hostMarker, 'host secret\n');
  const sessions: SessionInfo[] = [];
  const blast: unknown[] = [];
  // Everything made from here on is undone in `finally`, even when a later set-up step throws
  // (an open listener left behind would keep the caller's process alive forever).
  let hostAny: Awaited<ReturnType<typeof hostListener>> | undefined;
  let hostLo: Awaited<ReturnType<typeof hostListener>> | undefined;
  let targets: ReturnType<typeof startTargets> | undefined;
  let hostWide: LockHandle | undefined;
  try {
    // The targets' addresses are routed host-wide (169.254.169.254 and the rest, via one fixed
    // veth address), so two audits on one host take turns instead of failing on each other.
    hostWide = await acquireLock(HOST_ROUTES_LOCK, { timeoutMs: 20 * 60_000, onWait: (pid) => progress(`waiting for the audit of pid ${pid} to end`) });
    hostAny = await hostListener('0.0.0.0');
    hostLo = await hostListener('127.0.0.1');
    const targetPort = 20000 + Math.floor(Math.random() * 20000);
    targets = startTargets(tag.slice(0, 4), targetPort);
    let a: SessionInfo, b: SessionInfo;
    if (arm === 'fork' || arm === 'memfork') {
      // A and B are two forked copies of one source (which stays alive as a third sibling).
      progress(`creating a source session and ${arm === 'fork' ? 'disk' : 'memory'}-forking it into A and B`);
      ({ a, b } = await forkedPair(c, sessions, arm === 'fork' ? 'disk' : 'memory'));
    } else {
      progress('creating sessions A (red page) and B (green page)');
      a = await c.createSession({ image: 'default', url: page(RED) });
      sessions.push(a);
      b = await c.createSession({ image: 'default', url: page(GREEN) });
      sessions.push(b);
    }
    const bPort = 18000 + Math.floor(Math.random() * 1000);
    const mark = String(31_000_000 + Math.floor(Math.random() * 999_999));
    const bFiles = [`/tmp/audit-${tag}`, `/home/user/audit-${tag}`, `/dev/shm/audit-${tag}`];
    const shmKey = 0x5a000000 + Math.floor(Math.random() * 0xffff);
    progress('planting markers and listeners in B');
    const setup = await c.exec(b.id, {
      shell: [
        `for f in ${bFiles.join(' ')}; do echo secret > $f; done`,
        `xprop -root -f AUDIT_${tag} 8s -set AUDIT_${tag} from-b`,
        `setsid sleep ${mark} >/dev/null 2>&1 < /dev/null &`,
        `setsid python3 -c "import socket,time; s=socket.socket(socket.AF_UNIX); s.bind('\\0audit-${tag}'); s.listen(8); t=socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(('0.0.0.0', ${bPort})); t.listen(8); time.sleep(600)" >/dev/null 2>&1 < /dev/null &`,
        `python3 -c "import ctypes; l=ctypes.CDLL(None, use_errno=True); assert l.shmget(${shmKey}, 4096, 0o1666) >= 0; l.mq_open.restype=ctypes.c_int; assert l.mq_open(b'/audit-${tag}', 0o100 | 0o2, 0o666, None) >= 0"`,
        `for i in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', ${bPort}), 0.2)" 2>/dev/null && break; sleep 0.1; done`,
        `python3 -c "import socket; socket.create_connection(('127.0.0.1', ${bPort}), 0.5)" && echo LISTENING`,
        'for n in pid mnt ipc uts net cgroup; do printf "%s=%s," $n $(readlink /proc/self/ns/$n); done',
      ].join('\n'),
      timeoutMs: 30_000,
    });
    const bNs = /pid=.*cgroup=[^,]+/.exec(setup.stdout)?.[0];
    // Positive controls: the targets really listen, so a blocked probe means a fence, not a dead target.
    const controls: [string, boolean][] = [
      ['control.sibling-listener', /LISTENING/.test(setup.stdout)],
      ['control.metadata-target', await canConnect(targets.addrs.meta, targetPort)],
      ['control.private-10-target', await canConnect(targets.addrs.ten, targetPort)],
      ['control.host-listener', await canConnect('127.0.0.1', hostAny.port)],
      ['control.sibling-markers', setup.exitCode === 0 && !!bNs],
    ];
    // The controls' own connections are not findings.
    hostAny.accepted.length = 0;
    hostLo.accepted.length = 0;
    for (const [id, ok] of controls)
      probes.push({
        arm,
        id,
        category: 'control',
        as: 'host',
        result: ok ? 'pass' : 'invalid',
        detail: ok ? 'target reachable from where it should be' : `control failed; probes depending on it are not meaningful: ${setup.stderr.slice(-200)}`,
      });
    const hostAddr = /src (\S+)/.exec(ip('route', 'get', '192.0.2.123'))?.[1] ?? '127.0.0.1';
    const env: Record<string, string> = {
      B_PROC_MARK: `sleep ${mark}`,
      B_FILES: bFiles.join(':'),
      HOST_MARKER: hostMarker,
      STATE_DIR: d.stateDir,
      B_XPROP: `AUDIT_${tag}`,
      B_ADDR: b.network.address,
      B_GW: b.network.gateway,
      A_GW: a.network.gateway,
      B_PORT: String(bPort),
      B_ABSTRACT: `audit-${tag}`,
      B_BUS_ID: ((st) => `${st.dev}:${st.ino}`)(statSync(join(d.stateDir, 'rt', b.id, 'run', 'bus'))),
      B_NS: (bNs ?? '').replace(/,$/, ''),
      B_SHM_KEY: String(shmKey),
      B_MQ: `audit-${tag}`,
      HOST_PORT: String(hostAny.port),
      HOST_LO_PORT: String(hostLo.port),
      HOST_ADDR: hostAddr,
      TARGET_PORT: String(targetPort),
      TARGET_10: targets.addrs.ten,
      TARGET_192: targets.addrs.one92,
      TARGET_172: targets.addrs.one72,
      HOST_PID: String(process.pid),
    };
    for (const root of [false, true]) {
      progress(`probes in A as ${root ? 'root-in-session' : 'user'}`);
      const r = await c.exec(a.id, { argv: ['python3', '-'], stdin: PROBES_PY, env, root, timeoutMs: 120_000 });
      const lines = r.stdout.split('\n').filter((l) => l.startsWith('{'));
      if (!lines.length || r.exitCode !== 0)
        probes.push({
          arm,
          id: 'probe-script',
          category: 'harness',
          as: root ? 'root' : 'user',
          result: 'invalid',
          detail: `probe script exit ${r.exitCode}: ${r.stderr.slice(-400)}`,
        });
      for (const l of lines) {
        const p = JSON.parse(l) as { id: string; category: string; held: boolean; detail: string };
        probes.push({ arm, id: p.id, category: p.category, as: root ? 'root' : 'user', result: p.held ? 'pass' : 'fail', detail: p.detail });
      }
    }
    if (hostAny.accepted.length || hostLo.accepted.length)
      probes.push({
        arm,
        id: 'net.host-listener-accepted',
        category: 'network',
        as: 'host',
        result: 'fail',
        detail: `host listeners accepted ${[...hostAny.accepted, ...hostLo.accepted].join(', ')}`,
      });
    progress('host uids');
    probes.push(...(await userProbes(c, d, a, b, arm)));
    progress('screenshot integrity');
    const pa = await centerPixel(c, a.id),
      pb = await centerPixel(c, b.id);
    probes.push({
      arm,
      id: 'screenshot.a-shows-only-a',
      category: 'screenshot',
      as: 'api',
      result: near(pa, RED) ? 'pass' : 'fail',
      detail: `A pixel ${pa} (own page ${RED})`,
    });
    probes.push({
      arm,
      id: 'screenshot.b-shows-only-b',
      category: 'screenshot',
      as: 'api',
      result: near(pb, GREEN) ? 'pass' : 'fail',
      detail: `B pixel ${pb} (own page ${GREEN})`,
    });
    // The daemon's own connections: a fresh A (whose display the daemon has not opened yet) swaps its X socket for a
    // symlink to B's; the daemon must not then show B as A (docs/security.md, "The daemon's connections into a session").
    progress('daemon connections: X0 symlinked to B');
    {
      const a3 = await c.createSession({ image: 'default', url: page(RED) });
      sessions.push(a3);
      const target = join(realpathSync(d.stateDir), 'rt', b.id, 'x11', 'X0');
      const plant = await c.exec(a3.id, { shell: `ln -sfn ${target} /tmp/.X11-unix/X0 && [ -L /tmp/.X11-unix/X0 ]`, timeoutMs: 15_000 });
      const px = await centerPixel(c, a3.id).catch((e: Error) => e);
      const shot = px instanceof Error ? `refused: ${px.message.slice(0, 200)}` : `pixel ${px}`;
      probes.push({
        arm,
        id: 'daemon.x-socket-symlink-reaches-only-own',
        category: 'daemon',
        as: 'user',
        result: plant.exitCode !== 0 ? 'invalid' : !(px instanceof Error) && near(px, GREEN) ? 'fail' : 'pass',
        detail: plant.exitCode !== 0 ? `could not plant the symlink: ${plant.stderr.slice(-200)}` : `A's screenshot with X0 -> B's socket: ${shot}`,
      });
      await c.destroySession(a3.id).catch(() => {});
      sessions.pop();
    }
    // Blast radius: kill each process kind in a fresh A; B must be unaffected.
    for (const [kind, comm] of Object.entries(KINDS)) {
      progress(`blast radius: kill ${comm} in a fresh A`);
      const a2 = await c.createSession({ image: 'default', url: page(RED) });
      sessions.push(a2);
      await c.exec(a2.id, {
        shell: `for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = "${comm}" ] && kill -9 \${p#/proc/}; done; true`,
        root: true,
        timeoutMs: 15_000,
      });
      await sleep(3000);
      const aState = (await c.getSession(a2.id)).state;
      const aLeft = aState === 'ready' ? await kindsAlive(c, a2.id) : null;
      const bState = (await c.getSession(b.id)).state;
      const bLeft = await kindsAlive(c, b.id);
      const bPix = await centerPixel(c, b.id).catch(() => [0, 0, 0]);
      const bOk = bState === 'ready' && Object.values(bLeft).every(Boolean) && near(bPix, GREEN);
      blast.push({
        killed: kind,
        process: comm,
        aState,
        aStillRunning: aLeft,
        lostInA: aLeft
          ? Object.entries(aLeft)
              .filter(([, v]) => !v)
              .map(([k]) => k)
          : 'whole session (broken)',
        bState,
        bRunning: bLeft,
        bScreenshotOk: near(bPix, GREEN),
      });
      probes.push({
        arm,
        id: `blast.kill-${kind}-spares-b`,
        category: 'blast-radius',
        as: 'root',
        result: bOk ? 'pass' : 'fail',
        detail: `A ${aState}; B ${bState}, running ${JSON.stringify(bLeft)}`,
      });
      await c.destroySession(a2.id).catch(() => {});
      sessions.pop();
    }
  } finally {
    for (const s of sessions) await c.destroySession(s.id).catch(() => {});
    targets?.cleanup();
    hostWide?.release();
    hostAny?.close();
    hostLo?.close();
    rmSync(hostMarker, { force: true });
  }
  return { probes, blast };
}

/**
 * The shared-browser arm's probe: one Chromium serving two sessions' profiles
 * (two browser contexts of one browser). It checks whether A's renderer and
 * B's renderer share a uid and a PID namespace, i.e. whether one can observe
 * and signal the other; and whether both profiles live in one browser process.
 */
async function auditSharedBrowser(progress: (s: string) => void): Promise<Probe[]> {
  progress('shared-browser: one Chromium, two profiles');
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    const ctxA = await browser.newContext(),
      ctxB = await browser.newContext();
    const pa = await ctxA.newPage(),
      pb = await ctxB.newPage();
    await pa.goto(page(RED));
    await pb.goto(page(GREEN));
    const renderers: { pid: number; uid: string; pidns: string }[] = [];
    const kids = (pid: number): number[] => {
      try {
        return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
      } catch {
        return [];
      }
    };
    const bpid =
      (browser as unknown as { _initializer?: unknown }) &&
      Number(
        execFileSync('sh', ['-c', `ps -o pid= --ppid ${process.pid}`], { encoding: 'utf8' })
          .trim()
          .split('\n')
          .find((p) => {
            // Another child of this process can exit between ps and the read (the probe was lost to that once).
            try {
              return /chrom/.test(readFileSync(`/proc/${p.trim()}/comm`, 'utf8'));
            } catch {
              return false;
            }
          })
          ?.trim(),
      );
    const walk = (p: number) => {
      for (const k of kids(p)) {
        try {
          const cmd = readFileSync(`/proc/${k}/cmdline`, 'utf8');
          if (cmd.includes('--type=renderer'))
            renderers.push({
              pid: k,
              uid: /Uid:\s+(\d+)/.exec(readFileSync(`/proc/${k}/status`, 'utf8'))![1]!,
              pidns: readlinkSync(`/proc/${k}/ns/pid`),
            });
        } catch {
          continue; // exited meanwhile
        }
        walk(k);
      }
    };
    if (bpid) walk(bpid);
    const shared = renderers.length >= 2 && renderers.every((r) => r.uid === renderers[0]!.uid && r.pidns === renderers[0]!.pidns);
    return [
      {
        arm: 'shared-browser',
        id: 'shared-browser.one-browser-process-holds-both-profiles',
        category: 'processes',
        as: 'host',
        result: 'fail',
        detail: `both sessions' profiles are served by one browser process (pid ${bpid}): its memory holds both sessions' cookies and storage`,
      },
      {
        arm: 'shared-browser',
        id: 'shared-browser.renderers-share-uid-and-pidns',
        category: 'processes',
        as: 'host',
        result: shared ? 'fail' : renderers.length < 2 ? 'invalid' : 'pass',
        detail: `${renderers.length} renderers: ${renderers.map((r) => `${r.pid} uid ${r.uid} ${r.pidns}`).join('; ')}${shared ? " — A's renderer can see and signal B's" : ''}`,
      },
    ];
  } finally {
    await browser.close();
  }
}

/**
 * Arms that show a design known to fail isolation, audited to name its paths: their failed probes are the
 * finding, so they do not fail the record (the arm's own isolation verdict still says FAIL).
 */
export const DEMONSTRATION_ARMS = ['shared-browser'];

/**
 * The record's status from its verdicts: 'failed' when any audited arm (baseline, fork, memfork) misses a bar,
 * so a memfork arm with failed probes fails the record and `drums audit`'s exit code; else 'inconclusive'
 * when a probe run was incomplete or a verdict had no value; else 'passed'.
 */
export function auditStatus(verdicts: Pick<Verdict, 'arm' | 'pass'>[], complete: boolean): 'failed' | 'inconclusive' | 'passed' {
  const judged = verdicts.filter((v) => !DEMONSTRATION_ARMS.includes(v.arm));
  if (judged.some((v) => v.pass === false)) return 'failed';
  if (!complete || judged.some((v) => v.pass === null)) return 'inconclusive';
  return 'passed';
}

export async function runAudit(o: {
  arms?: string[];
  outDir?: string;
  progress?: (s: string) => void;
  command?: string;
}): Promise<{ record: BenchRecord; file: string }> {
  const armNames = o.arms?.length ? o.arms : ['baseline'];
  for (const a of armNames) if (!AUDIT_ARMS.includes(a)) throw new Error(`the audit has no probes for arm '${a}'; audited arms: ${AUDIT_ARMS.join(', ')}`);
  const bars = loadBars('audit');
  const progress = o.progress ?? (() => {});
  const started = new Date().toISOString();
  const g = gitState();
  const probes: Probe[] = [];
  let blast: unknown[] = [];
  const failures: string[] = [];
  const incomplete: string[] = [];
  if (armNames.includes('baseline')) {
    const d = await startPrivateDaemon(AUDITED_CONFIG);
    try {
      const r = await auditBaseline(d, progress);
      probes.push(...r.probes);
      blast = r.blast;
      // Host-local attackers (a host uid other than root, and a session against the host through the daemon).
      probes.push(...(await runHostProbes({ d, arm: 'baseline', progress })));
    } catch (e) {
      failures.push(`baseline audit aborted: ${(e as Error).message}`);
      incomplete.push(`baseline audit aborted: ${(e as Error).message}`);
    } finally {
      await d.stop();
    }
  }
  for (const arm of ['fork', 'memfork'].filter((a) => armNames.includes(a))) {
    const d = await startPrivateDaemon(AUDITED_CONFIG);
    try {
      probes.push(...(await auditBaseline(d, progress, arm)).probes);
    } catch (e) {
      failures.push(`${arm} audit aborted: ${(e as Error).message}`);
      incomplete.push(`${arm} audit aborted: ${(e as Error).message}`);
    } finally {
      await d.stop();
    }
  }
  if (armNames.includes('shared-browser')) {
    try {
      probes.push(...(await auditSharedBrowser(progress)));
    } catch (e) {
      incomplete.push(`shared-browser probe aborted: ${(e as Error).message}`);
    }
  }
  const results: ResultRow[] = [];
  const arms: ArmRecord[] = armNames.map((name) => {
    const ps = probes.filter((p) => p.arm === name);
    const failed = ps.filter((p) => p.result === 'fail').map((p) => `${p.id} (${p.as})`);
    const invalid = ps.filter((p) => p.result === 'invalid');
    results.push({ arm: name, metric: 'audit_probes_run', value: ps.filter((p) => p.category !== 'control').length, ci: null, unit: 'probes', n: 1 });
    results.push({ arm: name, metric: 'audit_probes_failed', value: failed.length, ci: null, unit: 'probes', n: 1, note: failed.join(', ') });
    if (invalid.length) incomplete.push(`${name}: ${invalid.length} probes or controls invalid (${invalid.map((p) => p.id).join(', ')})`);
    return {
      name,
      description:
        name === 'baseline'
          ? 'two default Drums sessions with Chromium, probed from A'
          : name === 'fork'
            ? 'two disk-forked copies of one default session with Chromium (the source alive beside them), probed from A'
            : name === 'memfork'
              ? 'two memory-forked (CRIU) copies of one default session with a user namespace of its own and Chromium without its sandbox (browserSandbox false; the source alive beside them), probed from A'
              : 'one Chromium serving two profiles (the shared-browser design)',
      image: 'default',
      status: ps.length ? 'measured' : 'invalid',
      ...(ps.length ? {} : { reason: 'no probe ran' }),
      isolation: { verdict: ps.length === 0 ? 'not-audited' : failed.length ? 'fail' : 'pass', failedProbes: failed },
    } as ArmRecord;
  });
  const verdicts: Verdict[] = bars.bars.bars.flatMap((b) =>
    armNames
      .filter((a) => a === b.arm || b.arm === 'baseline')
      .map((arm) => {
        const row = results.find((r) => r.arm === arm && r.metric === b.metric);
        const pass = judge(b, row?.value);
        return {
          barId: `${b.id}${arm === 'baseline' ? '' : '@' + arm}`,
          arm,
          metric: b.metric,
          op: b.op,
          bar: b.value,
          unit: b.unit,
          value: row?.value ?? null,
          ci: null,
          pass,
        };
      }),
  );
  const complete = incomplete.length === 0;
  const status = auditStatus(verdicts, complete);
  const record: BenchRecord = {
    schemaVersion: RECORD_SCHEMA_VERSION,
    kind: 'drums-bench-record',
    experiment: 'audit',
    description:
      'Isolation audit: probes from inside session A against sibling B and the host (processes, files, /proc, X, D-Bus, abstract sockets, network to sibling/gateways/host/metadata/private ranges, SysV/POSIX IPC, cgroups, capabilities, devices, /sys), screenshot integrity, and the blast radius of killing each process kind in A. Any failed bar of the baseline, fork or memfork arm fails the record; the shared-browser arm demonstrates a design known to fail and carries its own isolation verdict without failing the record.',
    mode: 'full',
    status,
    complete,
    incompleteReasons: incomplete,
    command: o.command ?? `bin/drums audit --arms ${armNames.join(',')}`,
    commit: g.commit,
    dirty: g.dirty,
    started,
    finished: new Date().toISOString(),
    bars: { file: 'bench/bars/audit.json', sha256: bars.sha256, fixedAt: bars.bars.fixedAt, fixedCommit: bars.bars.fixedCommit },
    host: hostFacts(),
    method: {
      probes:
        'a Python probe script run in A through POST /v1/sessions/:id/exec, once as the desktop user and once as root-in-session; each probe reports whether the fence held',
      targets:
        'network targets are listeners this audit starts: on B (its address), on the host (0.0.0.0 and 127.0.0.1, random ports), and in a network namespace it creates holding 169.254.169.254, 10.254.77.1, 192.168.254.1 and 172.16.254.1, routed from the host; positive controls check each target is reachable from where it should be',
      blast: 'for each kind (Xvfb, openbox, dbus-daemon, chromium) a fresh A is created, the kind killed as root-in-session, and A and B inspected 3 s later',
    },
    config: { arms: armNames },
    arms,
    trials: [],
    results,
    verdicts,
    summary: '',
    surprises: [],
    limitations: ['the probes cover known paths; a pass is not a proof of isolation', 'kernel exploits are out of scope'],
    failures,
    plots: {},
    audit: { probes, blastRadius: blast },
  };
  const fails = probes.filter((p) => p.result === 'fail');
  record.summary =
    arms
      .map(
        (a) =>
          `${a.name}: isolation ${a.isolation.verdict.toUpperCase()} over ${probes.filter((p) => p.arm === a.name && p.category !== 'control').length} probes${a.isolation.failedProbes.length ? `; caught by ${a.isolation.failedProbes.join(', ')}` : ''}.`,
      )
      .join(' ') + (complete ? '' : ` Incomplete: ${incomplete.join('; ')}.`);
  if (fails.length) record.surprises.push(...fails.map((p) => `${p.arm}: ${p.id} (${p.as}) — ${p.detail}`));
  const errs = validateRecord(record);
  if (errs.length) throw new Error(`internal: audit record does not validate: ${errs.join('; ')}`);
  const outDir = o.outDir ?? join(REPO_ROOT, 'bench', 'records');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `audit-${started.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(record, null, 2) + '\n');
  return { record, file };
}
