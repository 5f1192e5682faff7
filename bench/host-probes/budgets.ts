/**
 * A session against the daemon through its status file (issue 27, finding 4). The desktop user of a session can
 * write /run/drums/status, which the daemon follows through inotify. Two attacks:
 * - `truncate -s 1T` (sparse: the session's run tmpfs limits blocks, not sizes): a daemon that reads it to EOF
 *   builds a string until V8 throws RangeError out of the fs.watch callback and exits. Held: the daemon stays up,
 *   another session answers, and the attacker's session alone is broken, saying why.
 * - appends of one byte at a time and no newline, as fast as python goes: a daemon that polls once per inotify
 *   event and re-splits what it holds spends its event loop on them. Held: what the attack costs the daemon's CPU
 *   stays well under a core and another session's requests stay fast.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { DrumsClient } from '../../src/client/client.ts';
import type { Probe } from '../probe.ts';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';

const APPEND_SECONDS = 3;
const BASELINE_MS = 1500;
/** The daemon's CPU the appends may cost, as a share of one core, above its own without them (a pinned loop is ~1). */
const MAX_CPU_SHARE = 0.2;
const APPENDER = [
  'import os, sys, time',
  'fd = os.open("/run/drums/status", os.O_WRONLY | os.O_APPEND)',
  'end = time.time() + float(sys.argv[1])',
  'while time.time() < end:',
  '    os.write(fd, b"x")',
].join('\n');
/** The slowest request to another session during the appender's run that still passes. */
const MAX_LATENCY_MS = 1000;

/** The daemon's own node process: bin/drums serve runs it under tini. */
export function daemonNodePid(pid: number): number {
  const cmd = (p: number) => readFileSync(`/proc/${p}/cmdline`, 'utf8');
  if (!cmd(pid).startsWith('tini')) return pid;
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    for (const c of readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
      if (cmd(Number(c)).includes('src/cli/main.ts')) return Number(c);
    }
  }
  return pid;
}

/** utime + stime of a process, in seconds. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / 100;
}

async function victimAnswers(c: DrumsClient, id: string): Promise<string | undefined> {
  try {
    const r = await c.exec(id, { argv: ['echo', 'still here'], timeoutMs: 20_000 });
    return r.stdout === 'still here\n' ? undefined : `the other session's exec answered ${JSON.stringify(r).slice(0, 200)}`;
  } catch (e) {
    return `the other session's exec failed: ${(e as Error).message}`;
  }
}

/** A HostProbe (./index.ts; typed here by shape, so the registry's import is the only edge between the two). */
export async function budgetsProbe({ d, arm, progress }: { d: PrivateDaemon; arm: string; progress: (s: string) => void }): Promise<Probe[]> {
  const c = d.client;
  const ids: string[] = [];
  const out: Probe[] = [];
  const alive = () => d.proc.exitCode === null && d.proc.signalCode === null;
  try {
    progress('budgets: three sessions (attacker, appender, victim)');
    const made = await Promise.allSettled([0, 1, 2].map(() => c.createSession({ image: 'minimal', labels: { 'drums.probe': 'budgets' } })));
    for (const m of made) if (m.status === 'fulfilled') ids.push(m.value.id);
    const failed = made.find((m) => m.status === 'rejected');
    if (failed) throw new Error(`could not create the probe's sessions: ${String(failed.reason)}`);
    const [a, b, v] = ids as [string, string, string];

    // The appender first: the truncate takes an unfixed daemon down.
    progress(`budgets: byte-by-byte appends to /run/drums/status for ${APPEND_SECONDS} s`);
    {
      const probe = { arm, id: 'host.budgets.status-byte-appender', category: 'host', as: 'user' };
      const problems: string[] = [];
      if (!alive()) out.push({ ...probe, result: 'fail', detail: 'the daemon was already down' });
      else {
        const pid = daemonNodePid(d.pid);
        // The daemon's own CPU without the attack (it settles after three creates), to take away from it.
        const b0 = cpuSeconds(pid);
        await new Promise((r) => setTimeout(r, BASELINE_MS));
        const baseline = (cpuSeconds(pid) - b0) / (BASELINE_MS / 1000);
        const cpu0 = cpuSeconds(pid);
        const t0 = performance.now();
        // One byte a write and no newline: a reader that re-splits all it has on each poll does quadratic work.
        const appender = c.exec(b, {
          argv: ['python3', '-c', APPENDER, String(APPEND_SECONDS)],
          timeoutMs: (APPEND_SECONDS + 20) * 1000,
        });
        let worst = 0;
        let done = false;
        appender.finally(() => (done = true)).catch(() => {});
        while (!done && alive()) {
          const q0 = performance.now();
          await c.getSession(v).catch(() => {});
          worst = Math.max(worst, performance.now() - q0);
          await new Promise((r) => setTimeout(r, 100));
        }
        const ran = await appender.catch((e: Error) => e);
        const wall = (performance.now() - t0) / 1000;
        const share = alive() ? (cpuSeconds(pid) - cpu0) / wall - baseline : Number.NaN;
        if (ran instanceof Error) problems.push(`the appender failed: ${ran.message}`);
        if (!alive()) problems.push(`the daemon exited (${d.proc.exitCode ?? d.proc.signalCode})`);
        else {
          const other = await victimAnswers(c, v);
          if (other) problems.push(other);
          if (share > MAX_CPU_SHARE) problems.push(`the appends cost the daemon more than ${MAX_CPU_SHARE} of a core`);
          if (worst > MAX_LATENCY_MS) problems.push(`another session's request took ${Math.round(worst)} ms`);
        }
        const s = await c.getSession(b).catch(() => undefined);
        out.push({
          ...probe,
          result: problems.length ? 'fail' : 'pass',
          detail: `${problems.length ? problems.join('; ') : 'daemon up, the other session answers'}; the appends cost the daemon ${share.toFixed(2)} of a core over ${wall.toFixed(1)} s (above its ${baseline.toFixed(2)} without them), slowest other request ${Math.round(worst)} ms; the appender's session is ${s?.state ?? 'gone'}${s?.brokenReason ? ` (${s.brokenReason})` : ''}`,
        });
      }
    }
    progress('budgets: truncate -s 1T /run/drums/status');
    {
      const probe = { arm, id: 'host.budgets.status-sparse-terabyte', category: 'host', as: 'user' };
      const problems: string[] = [];
      const t = await c.exec(a, { argv: ['truncate', '-s', '1T', '/run/drums/status'], timeoutMs: 20_000 }).catch((e: Error) => e);
      if (t instanceof Error || t.exitCode !== 0) problems.push(`the attack itself did not run: ${t instanceof Error ? t.message : t.stderr}`);
      let state = '';
      let reason = '';
      for (let i = 0; i < 50 && alive(); i++) {
        await new Promise((r) => setTimeout(r, 100));
        const s = await c.getSession(a).catch(() => undefined);
        state = s?.state ?? '';
        reason = s?.brokenReason ?? '';
        if (state === 'broken') break;
      }
      if (!alive()) problems.push(`the daemon exited (${d.proc.exitCode ?? d.proc.signalCode})`);
      else {
        const other = await victimAnswers(c, v);
        if (other) problems.push(other);
        if (state !== 'broken' || !/status file/.test(reason))
          problems.push(`the attacking session is '${state}' (${reason || 'no reason'}), not broken for its status file`);
        if (reason.length > 1000) problems.push(`the session's error is ${reason.length} characters`);
      }
      out.push({
        ...probe,
        result: problems.length ? 'fail' : 'pass',
        detail: problems.length ? problems.join('; ') : `daemon up, the other session answers, the attacker's session is broken: ${reason}`,
      });
    }

    return out;
  } finally {
    if (alive()) for (const id of ids) await c.destroySession(id).catch(() => {});
  }
}
