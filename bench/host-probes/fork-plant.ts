/**
 * A session that plants symlinks and FIFOs in everything a fork reads or copies from it, then is forked
 * (issue 29, item 2). The daemon copies the source's writable layer (both modes) and, for a memory fork,
 * its /run/drums, its /tmp/.X11-unix and a CRIU checkpoint of its tmpfs mounts; all by path, as host root.
 *
 * - host.fork.planted-links (the desktop user, and root-in-session for /etc): links to a host directory
 *   made here (holding a secret) and FIFOs in /run/drums (Xauthority and log among them), in
 *   /tmp/.X11-unix, the home directory, /tmp and /dev/shm; /etc/machine-id a link. A memory fork and a
 *   disk fork must each answer promptly (a copy, or a 4xx), never change the host directory, never
 *   hand the host's secret to a copy (each planted name is in the copy what it was in the source: a
 *   link with the same target, a FIFO; identity files are the copy's own), and the daemon must answer
 *   /healthz throughout (a FIFO opened by the daemon would block it).
 * - host.fork.status-swapped (the desktop user): /run/drums/status, the file the daemon reads readiness
 *   from, made a FIFO, then a link to a host file holding readiness marks. A memory fork must answer
 *   within STATUS_FORK_MAX_MS (a copy that is ready, or a 4xx), never wait out the readiness timeout on
 *   a copy that can never be ready; the daemon must answer /healthz throughout.
 */
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { DrumsApiError } from '../../src/client/errors.ts';
import type { Probe } from '../probe.ts';
import type { HostProbeContext } from './types.ts';

/** The most a fork of a small source may take here (a loaded 2-core box): seconds, not a readiness timeout. */
const FORK_MAX_MS = 45_000;
/** A fork refused for its status file, or made: well under the daemon's 60 s readiness timeout. */
const STATUS_FORK_MAX_MS = 30_000;
/** The most /healthz may take while a fork runs. */
const HEALTHZ_MAX_MS = 2000;

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

/** A fork, timed, with /healthz polled every 100 ms while it runs: the copies, or the API error. */
async function timedFork(
  ctx: HostProbeContext,
  id: string,
  mode: 'disk' | 'memory',
): Promise<{ copies: string[]; ms: number; healthMaxMs: number; error?: { status: number; code: string; message: string } }> {
  let forking = true;
  let healthMaxMs = 0;
  const poller = (async () => {
    while (forking) {
      const t = performance.now();
      try {
        await fetch(`${ctx.d.url}/healthz`, { signal: AbortSignal.timeout(60_000) });
      } catch {}
      healthMaxMs = Math.max(healthMaxMs, performance.now() - t);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const t0 = performance.now();
  try {
    const r = await ctx.d.client.forkSession(id, { count: 1, mode });
    return { copies: r.copies.map((c) => c.id), ms: performance.now() - t0, healthMaxMs };
  } catch (e) {
    if (!(e instanceof DrumsApiError)) throw e;
    return { copies: [], ms: performance.now() - t0, healthMaxMs, error: { status: e.status, code: e.code, message: e.message.slice(0, 300) } };
  } finally {
    forking = false;
    await poller;
  }
}

/** `stat`'s type and link target of each path, one line each (a missing one says so); never opens a FIFO. */
const statScript = (paths: string[]) => paths.map((p) => `stat -c '%n %F %N' ${p} 2>/dev/null || echo '${p} missing'`).join('; ');

export async function forkPlantProbes(ctx: HostProbeContext): Promise<Probe[]> {
  const { d, arm, progress } = ctx;
  const c = d.client;
  const tag = randomBytes(4).toString('hex');
  const probes: Probe[] = [];
  const made: string[] = [];
  const host = mkdtempSync('/tmp/drums-probe-fork-');
  const probe = (id: string, as: string, result: Probe['result'], detail: string) => probes.push({ arm, id, category: 'host', as, result, detail });
  try {
    chmodSync(host, 0o755);
    const victim = join(host, 'victim');
    mkdirSync(victim, { mode: 0o755 });
    const secret = `host-secret-${tag}`;
    writeFileSync(join(victim, 'secret'), `${secret}\n`, { mode: 0o644 });
    // Readiness marks, as an init writes them: a daemon that read the status file through a link would see a ready copy.
    writeFileSync(join(victim, 'status'), 'x\ndbus\na11y\nwm\n', { mode: 0o644 });
    const victimBefore = snapshot(victim);

    progress('host.fork: a source that plants links and FIFOs');
    const src = await c.createSession({ image: 'default', labels: { probe: `fork-plant-${tag}` } });
    made.push(src.id);
    // Planted names, by directory: `l` a link to the host file, `d` a link to the host directory, `p` a FIFO.
    const dirs = ['/run/drums', '/tmp/.X11-unix', '/home/user', '/tmp', '/dev/shm'];
    const planted = dirs.flatMap((dir) => [`${dir}/l-${tag}`, `${dir}/d-${tag}`, `${dir}/p-${tag}`]);
    const plant = await c.exec(src.id, {
      shell: [
        ...dirs.map((dir) => `ln -s ${victim}/secret ${dir}/l-${tag} && ln -s ${victim} ${dir}/d-${tag} && mkfifo ${dir}/p-${tag}`),
        // Files the daemon itself writes or reads in the copy's /run/drums.
        `rm -f /run/drums/Xauthority && ln -s ${victim}/secret /run/drums/Xauthority`,
        `rm -f /run/drums/log && mkfifo /run/drums/log`,
      ].join(' && '),
      timeoutMs: 30_000,
    });
    const plantRoot = await c.exec(src.id, { shell: `rm -f /etc/machine-id && ln -s ${victim}/secret /etc/machine-id`, root: true, timeoutMs: 30_000 });
    if (plant.exitCode !== 0 || plantRoot.exitCode !== 0)
      throw new Error(`planting in ${src.id} failed: ${plant.stderr.slice(0, 200)} ${plantRoot.stderr.slice(0, 200)}`);
    const inSource = (await c.exec(src.id, { shell: statScript(planted), timeoutMs: 30_000 })).stdout;

    const issues: string[] = [];
    const outcomes: string[] = [];
    for (const mode of ['memory', 'disk'] as const) {
      progress(`host.fork: ${mode} fork of the planted source`);
      const f = await timedFork(ctx, src.id, mode);
      made.push(...f.copies);
      outcomes.push(
        `${mode}: ${f.copies.length ? 'copied' : `${f.error?.status} ${f.error?.code}`} in ${Math.round(f.ms)} ms, /healthz ≤ ${Math.round(f.healthMaxMs)} ms`,
      );
      if (f.ms > FORK_MAX_MS) issues.push(`the ${mode} fork took ${Math.round(f.ms)} ms (bar ${FORK_MAX_MS})`);
      if (f.healthMaxMs > HEALTHZ_MAX_MS) issues.push(`/healthz took ${Math.round(f.healthMaxMs)} ms during the ${mode} fork (bar ${HEALTHZ_MAX_MS})`);
      if (f.error && f.error.status >= 500) issues.push(`the ${mode} fork failed ${f.error.status} ${f.error.code}: ${f.error.message}`);
      for (const id of f.copies) {
        // Memory fork: the planted names as they were. Disk fork: the writable layer's as they were (tmpfs mounts are fresh).
        const kept = mode === 'memory' ? planted : planted.filter((p) => p.startsWith('/home/user/'));
        const inCopy = (await c.exec(id, { shell: statScript(kept), timeoutMs: 30_000 })).stdout;
        const want = inSource
          .split('\n')
          .filter((l) => kept.some((p) => l.startsWith(`${p} `)))
          .join('\n');
        if (inCopy.trim() !== want.trim()) issues.push(`${mode} copy ${id}: the planted names changed:\n${want}\n=>\n${inCopy}`);
        // The daemon's own files in the copy are its own: regular files, never the host's secret.
        const own = await c.exec(id, {
          shell: `stat -c '%n %F' /run/drums/Xauthority /etc/machine-id; grep -l ${secret} /run/drums/Xauthority /etc/machine-id 2>/dev/null; true`,
          root: true,
          timeoutMs: 30_000,
        });
        const ownWant = mode === 'memory' ? ['/run/drums/Xauthority regular file', '/etc/machine-id regular file'] : ['/etc/machine-id regular file'];
        for (const w of ownWant)
          if (!own.stdout.includes(w)) issues.push(`${mode} copy ${id}: ${w.split(' ')[0]} is not the copy's own file: ${own.stdout.trim()}`);
        if (own.stdout.includes(secret)) issues.push(`${mode} copy ${id}: the host's secret reached the copy: ${own.stdout.trim()}`);
        await c.destroySession(id).catch(() => {});
      }
    }
    const victimMid = snapshot(victim);
    if (victimMid !== victimBefore) issues.push(`the host directory changed:\n${victimBefore}\n=>\n${victimMid}`);
    probe(
      'host.fork.planted-links',
      'user',
      issues.length ? 'fail' : 'pass',
      issues.length
        ? issues.join('; ')
        : `links to host ${victim} and FIFOs in /run/drums (Xauthority and log too), /tmp/.X11-unix, ~, /tmp, /dev/shm and /etc/machine-id: copied as what they were, the daemon's own files fresh, the host directory unchanged (${outcomes.join('; ')})`,
    );

    // 2. The status file swapped: a FIFO, then a link to a host file of readiness marks.
    const statusIssues: string[] = [];
    const statusOutcomes: string[] = [];
    for (const [what, cmd] of [
      ['a FIFO', 'rm -f /run/drums/status && mkfifo /run/drums/status'],
      ['a link to a host file of marks', `rm -f /run/drums/status && ln -s ${victim}/status /run/drums/status`],
    ] as const) {
      const r = await c.exec(src.id, { shell: cmd, timeoutMs: 30_000 });
      if (r.exitCode !== 0) throw new Error(`swapping the status file of ${src.id} failed: ${r.stderr.slice(0, 200)}`);
      progress(`host.fork: memory fork with /run/drums/status ${what}`);
      const f = await timedFork(ctx, src.id, 'memory');
      made.push(...f.copies);
      statusOutcomes.push(`${what}: ${f.copies.length ? 'copied' : `${f.error?.status} ${f.error?.code}`} in ${Math.round(f.ms)} ms`);
      if (f.ms > STATUS_FORK_MAX_MS) statusIssues.push(`with ${what} the memory fork took ${Math.round(f.ms)} ms (bar ${STATUS_FORK_MAX_MS})`);
      if (f.healthMaxMs > HEALTHZ_MAX_MS) statusIssues.push(`/healthz took ${Math.round(f.healthMaxMs)} ms (bar ${HEALTHZ_MAX_MS})`);
      if (f.error && !(f.error.status >= 400 && f.error.status < 500)) statusIssues.push(`with ${what}: ${f.error.status} ${f.error.code}: ${f.error.message}`);
      for (const id of f.copies) await c.destroySession(id).catch(() => {});
    }
    const victimAfter = snapshot(victim);
    if (victimAfter !== victimBefore) statusIssues.push(`the host directory changed:\n${victimBefore}\n=>\n${victimAfter}`);
    probe(
      'host.fork.status-swapped',
      'user',
      statusIssues.length ? 'fail' : 'pass',
      statusIssues.length
        ? statusIssues.join('; ')
        : `a memory fork of a session whose /run/drums/status is swapped answered promptly (${statusOutcomes.join('; ')}); /healthz within ${HEALTHZ_MAX_MS} ms`,
    );
  } finally {
    for (const id of made) await c.destroySession(id).catch(() => {});
    rmSync(host, { recursive: true, force: true });
  }
  return probes;
}
