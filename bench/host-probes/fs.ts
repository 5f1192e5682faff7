/**
 * Host probes of the daemon's file handling (issue 27, findings 1 and 6; docs/security.md, "The
 * daemon's hands in a session's files"):
 *
 * - host.fs.rt-dirs-closed (a host uid): no other host user can list, enter or create anything in a
 *   session's runtime directories (`<state>/rt/<id>`: its /run/drums and its 1777 /tmp/.X11-unix)
 *   or its session directory, with a user namespace and without.
 * - host.fs.fork-chromium-link (the desktop user): `~/.config/chromium` made a link to a host
 *   directory holding Singleton* files; a disk fork and a memory fork leave those files as they were.
 * - host.fs.fork-etc-link (root-in-session): `/etc` made a link to a host directory holding
 *   `machine-id` and `hostname`; a disk fork leaves them.
 * - host.fs.memfork-planted-link (a host uid): while a memory fork makes its copy, a host user
 *   watching the mount table plants a link in the copy's X socket directory where the copy of the
 *   source's `/tmp/.X11-unix/d` lands; the daemon must not write through it.
 * - host.fs.memfork-sparse (the desktop user): a 1 TiB sparse file in /run/drums; the memory fork
 *   is refused (4xx) or copies it sparsely, the state disk does not fill, and the daemon answers
 *   /healthz throughout.
 *
 * Every host file the probes offer as a target is made here, under a fresh directory in /tmp.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statfsSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SessionInfo } from '../../src/client/client.ts';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';
import { DrumsApiError } from '../../src/client/errors.ts';
import type { Probe } from '../probe.ts';

/** index.ts's HostProbeContext, written out (index.ts imports this module; a type import back would be a cycle). */
interface HostProbeContext {
  d: PrivateDaemon;
  arm: string;
  progress: (s: string) => void;
}

/** The unprivileged host uid the local-user attacks run as. */
const NOBODY = 65534;
const SPARSE_BYTES = 2 ** 40;
/** The most /healthz may take while a memory fork runs (room for a loaded host; an event loop that copies a sparse file densely is blocked for seconds a GiB). */
const HEALTHZ_MAX_MS = 2000;
/** The most the state filesystem may fill while the sparse file is copied. */
const DISK_GROWTH_MAX = 1024 ** 3;

/** A directory's entries with type, owner, mode and content (or link target): what "left alone" compares. */
function snapshot(dir: string): string {
  const out: string[] = [];
  const st0 = lstatSync(dir);
  out.push(`. ${st0.uid}:${st0.gid} ${(st0.mode & 0o7777).toString(8)}`);
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    const st = lstatSync(p);
    const what = st.isSymbolicLink() ? `-> ${readlinkSync(p)}` : st.isFile() ? `= ${readFileSync(p, 'utf8')}` : st.isDirectory() ? '/' : '?';
    out.push(`${name} ${st.uid}:${st.gid} ${(st.mode & 0o7777).toString(8)} ${what}`);
  }
  return out.join('\n');
}

/** Runs `sh -c cmd` as host uid/gid NOBODY; true if it succeeded. */
function asNobody(cmd: string): boolean {
  const r = spawnSync('/bin/sh', ['-c', cmd], { uid: NOBODY, gid: NOBODY, cwd: '/', timeout: 10_000, stdio: 'ignore' });
  return r.status === 0;
}

/** A fork's outcome: the copies, or the API error's status and code. */
async function tryFork(
  ctx: HostProbeContext,
  id: string,
  mode: 'disk' | 'memory',
): Promise<{ copies: string[]; error?: { status: number; code: string; message: string } }> {
  try {
    const r = await ctx.d.client.forkSession(id, { count: 1, mode });
    return { copies: r.copies.map((c) => c.id) };
  } catch (e) {
    if (e instanceof DrumsApiError) return { copies: [], error: { status: e.status, code: e.code, message: e.message.slice(0, 300) } };
    throw e;
  }
}

/**
 * A host user's watcher (python3 as NOBODY): for each runtime tmpfs mounted under `rt` after it
 * starts (a new session's, found in the mount table anyone can read), it tries to plant
 * `x11/d -> target` until it succeeds; it prints `planted <dir>` when it did.
 */
const PLANTER = `
import os, sys, time
rt, target, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
def mounts():
    with open('/proc/self/mountinfo') as f:
        return {l.split(' ')[4] for l in f if l.split(' ')[4].startswith(rt + '/') and '/' not in l.split(' ')[4][len(rt) + 1:]}
seen = mounts()
print('ready', flush=True)
done = set()
end = time.time() + secs
while time.time() < end:
    for mp in mounts() - seen - done:
        try:
            os.symlink(target, mp + '/x11/d')
            print('planted', mp, flush=True)
            done.add(mp)
        except OSError:
            pass
    time.sleep(0.001)
`;

function startPlanter(rt: string, target: string, secs: number): Promise<{ child: ChildProcess; out: () => string }> {
  const child = spawn('python3', ['-c', PLANTER, rt, target, String(secs)], { uid: NOBODY, gid: NOBODY, cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    if (out.length < 4000) out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    if (out.length < 4000) out += d.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the planter did not start: ${out}`)), 10_000);
    child.once('error', reject);
    child.stdout!.on('data', () => {
      if (out.includes('ready')) {
        clearTimeout(timer);
        resolve({ child, out: () => out });
      }
    });
  });
}

export async function fsProbes(ctx: HostProbeContext): Promise<Probe[]> {
  const { d, arm, progress } = ctx;
  const c = d.client;
  const tag = randomBytes(4).toString('hex');
  const probes: Probe[] = [];
  const made: string[] = [];
  const host = mkdtempSync('/tmp/drums-probe-fs-');
  const rt = join(d.stateDir, 'rt');
  let planter: ChildProcess | undefined;
  const probe = (id: string, as: string, result: Probe['result'], detail: string) => probes.push({ arm, id, category: 'host', as, result, detail });
  try {
    progress('host.fs: sessions (user namespace and host ids)');
    const [a, b] = await Promise.all([
      c.createSession({ image: 'default', labels: { probe: `fs-${tag}` } }),
      c.createSession({ image: 'default', userns: false, labels: { probe: `fs-${tag}` } }),
    ]);
    made.push(a.id, b.id);

    // 1. A host user against the runtime and session directories.
    const reached: string[] = [];
    for (const s of [a, b] as SessionInfo[]) {
      const tries: [string, string][] = [
        ['list rt/<id>', `ls -A ${rt}/${s.id}`],
        ['list rt/<id>/x11', `ls -A ${rt}/${s.id}/x11`],
        ['create in rt/<id>/x11', `: > ${rt}/${s.id}/x11/.probe-${tag}`],
        ['list rt/<id>/run', `ls -A ${rt}/${s.id}/run`],
        ['read rt/<id>/run/status', `cat ${rt}/${s.id}/run/status`],
        ['list sessions/<id>', `ls -A ${d.stateDir}/sessions/${s.id}`],
        ['enter sessions/<id>/bundle/rootfs', `ls -A ${d.stateDir}/sessions/${s.id}/bundle/rootfs/`],
      ];
      for (const [what, cmd] of tries) if (asNobody(cmd)) reached.push(`${s.id}: ${what}`);
      rmSync(join(rt, s.id, 'x11', `.probe-${tag}`), { force: true });
    }
    probe(
      'host.fs.rt-dirs-closed',
      'host-uid',
      reached.length ? 'fail' : 'pass',
      reached.length
        ? `host uid ${NOBODY} could ${reached.join('; ')}`
        : `host uid ${NOBODY} could neither list, enter nor create in the runtime or session directories of ${a.id} (user namespace) and ${b.id} (host ids)`,
    );

    // 2. The desktop user links ~/.config/chromium to a host directory of Singleton* files; a disk fork, then a memory fork.
    const chromium = join(host, 'chromium');
    const fixture = () => {
      rmSync(chromium, { recursive: true, force: true });
      mkdirSync(chromium, { mode: 0o755 });
      symlinkSync(`${a.id}-4242`, join(chromium, 'SingletonLock'));
      writeFileSync(join(chromium, 'SingletonSocket'), 'socket\n');
      writeFileSync(join(chromium, 'SingletonCookie'), 'cookie\n');
      return snapshot(chromium);
    };
    // The memory fork's source also gets a directory in its X socket directory (where the planter's link lands
    // in the copy) and some files to copy (a wider window for the planter).
    const prep = await c.exec(a.id, {
      shell: [
        'mkdir -p ~/.config && rm -rf ~/.config/chromium',
        `ln -s ${chromium} ~/.config/chromium`,
        'mkdir -p /tmp/.X11-unix/d && echo from-source > /tmp/.X11-unix/d/f',
        'mkdir -p ~/pad && cd ~/pad && for i in $(seq 1 3000); do echo $i > f$i; done',
      ].join(' && '),
      timeoutMs: 60_000,
    });
    if (prep.exitCode !== 0) throw new Error(`preparing ${a.id} failed: ${prep.stderr.slice(0, 300)}`);
    const chromiumIssues: string[] = [];
    let before = fixture();
    progress('host.fs: disk fork through ~/.config/chromium');
    const df = await tryFork(ctx, a.id, 'disk');
    made.push(...df.copies);
    if (snapshot(chromium) !== before) chromiumIssues.push(`the disk fork changed the host directory:\n${before}\n=>\n${snapshot(chromium)}`);
    for (const id of df.copies) await c.destroySession(id).catch(() => {});

    // 3. A memory fork while a host user plants links into the copy's runtime directory.
    const victim = join(host, 'victim');
    mkdirSync(victim, { mode: 0o755 });
    writeFileSync(join(victim, 'f'), 'victim\n');
    const victimBefore = snapshot(victim);
    before = fixture();
    const p = await startPlanter(rt, victim, 300);
    planter = p.child;
    progress('host.fs: memory fork (a host user plants links in the copy)');
    const mf = await tryFork(ctx, a.id, 'memory');
    made.push(...mf.copies);
    planter.kill('SIGKILL');
    planter = undefined;
    const planted = p
      .out()
      .split('\n')
      .filter((l) => l.startsWith('planted'));
    if (mf.copies.length && snapshot(chromium) !== before)
      chromiumIssues.push(`the memory fork changed the host directory:\n${before}\n=>\n${snapshot(chromium)}`);
    for (const id of mf.copies) await c.destroySession(id).catch(() => {});
    probe(
      'host.fs.fork-chromium-link',
      'user',
      chromiumIssues.length ? 'fail' : !df.copies.length || !mf.copies.length ? 'invalid' : 'pass',
      chromiumIssues.length
        ? chromiumIssues.join('; ')
        : !df.copies.length || !mf.copies.length
          ? `a fork did not make its copy (disk: ${JSON.stringify(df.error)}, memory: ${JSON.stringify(mf.error)})`
          : `a disk fork and a memory fork of ${a.id}, whose ~/.config/chromium links to host ${chromium}, left its Singleton* files as they were`,
    );
    const victimAfter = snapshot(victim);
    probe(
      'host.fs.memfork-planted-link',
      'host-uid',
      victimAfter !== victimBefore ? 'fail' : !mf.copies.length ? 'invalid' : 'pass',
      victimAfter !== victimBefore
        ? `the memory fork wrote through the link host uid ${NOBODY} planted (${planted.join(', ')}):\n${victimBefore}\n=>\n${victimAfter}`
        : !mf.copies.length
          ? `the memory fork made no copy: ${JSON.stringify(mf.error)}`
          : `host ${victim} unchanged; the watcher as host uid ${NOBODY} ${planted.length ? `planted ${planted.join(', ')} (not followed)` : 'could not plant a link in the copy'}`,
    );

    // 4. A memory fork of a source with a 1 TiB sparse file in /run/drums; /healthz is timed and the state disk watched throughout.
    const sp = await c.exec(a.id, { shell: `truncate -s ${SPARSE_BYTES} /run/drums/sparse-${tag}`, timeoutMs: 15_000 });
    if (sp.exitCode !== 0) throw new Error(`making the sparse file in ${a.id} failed: ${sp.stderr.slice(0, 300)}`);
    const free = () => {
      const s = statfsSync(d.stateDir);
      return s.bavail * s.bsize;
    };
    const free0 = free();
    let minFree = free0;
    let maxMs = 0;
    let polls = 0;
    let forking = true;
    progress('host.fs: memory fork (sparse file, /healthz timed)');
    const poller = (async () => {
      while (forking) {
        const t = performance.now();
        try {
          await fetch(`${d.url}/healthz`, { signal: AbortSignal.timeout(60_000) });
        } catch {}
        maxMs = Math.max(maxMs, performance.now() - t);
        minFree = Math.min(minFree, free());
        polls++;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const sf = await tryFork(ctx, a.id, 'memory').finally(() => {
      forking = false;
    });
    await poller;
    made.push(...sf.copies);
    const grew = free0 - minFree;
    const sparseOk =
      (sf.copies.length > 0 || (sf.error && sf.error.status >= 400 && sf.error.status < 500)) && maxMs < HEALTHZ_MAX_MS && grew < DISK_GROWTH_MAX;
    probe(
      'host.fs.memfork-sparse',
      'user',
      sparseOk ? 'pass' : 'fail',
      `a memory fork of a session with a ${SPARSE_BYTES}-byte sparse file in /run/drums: ${sf.copies.length ? 'copied' : `refused ${JSON.stringify(sf.error)}`}; /healthz answered within ${Math.round(maxMs)} ms at worst (${polls} polls, bar ${HEALTHZ_MAX_MS} ms); the state disk's free space fell by ${(grew / 1024 ** 2).toFixed(0)} MiB at most (bar ${DISK_GROWTH_MAX / 1024 ** 2} MiB)`,
    );
    for (const id of sf.copies) await c.destroySession(id).catch(() => {});

    // 5. Root-in-session makes /etc a link to a host directory (a host-ids session: its root is host uid 0 without capabilities).
    const etc = join(host, 'etc');
    mkdirSync(etc, { mode: 0o755 });
    writeFileSync(join(etc, 'machine-id'), 'host-machine-id\n');
    writeFileSync(join(etc, 'hostname'), 'host-name\n');
    writeFileSync(join(etc, 'keep'), 'keep\n');
    const etcBefore = snapshot(etc);
    const r = await c.exec(b.id, { shell: `cp -a /etc /etc.probe && rm -rf /etc && ln -s ${etc} /etc`, root: true, timeoutMs: 60_000 });
    if (r.exitCode !== 0) throw new Error(`making /etc a link in ${b.id} failed: ${r.stderr.slice(0, 300)}`);
    progress('host.fs: disk fork through /etc');
    const ef = await tryFork(ctx, b.id, 'disk');
    made.push(...ef.copies);
    const etcAfter = snapshot(etc);
    const healthy = (await fetch(`${d.url}/healthz`, { signal: AbortSignal.timeout(10_000) })).ok;
    probe(
      'host.fs.fork-etc-link',
      'root',
      etcAfter === etcBefore && healthy ? 'pass' : 'fail',
      etcAfter !== etcBefore
        ? `a disk fork of ${b.id}, whose /etc links to host ${etc}, changed it:\n${etcBefore}\n=>\n${etcAfter}`
        : `host ${etc} unchanged by a disk fork of ${b.id} whose /etc links to it (${ef.copies.length ? 'the copy was made' : `the fork ended ${ef.error?.status} ${ef.error?.code}`}); the daemon ${healthy ? 'answers' : 'does not answer'}`,
    );
  } finally {
    planter?.kill('SIGKILL');
    for (const id of made) await c.destroySession(id).catch(() => {});
    chmodSync(host, 0o700);
    rmSync(host, { recursive: true, force: true });
  }
  return probes;
}
