/**
 * A local host user (uid 65534) asks the daemon to move another uid's process into the instance's
 * client CPU cgroup (`POST /v1/host/client-cgroup`): a root-owned process of the audit's, and the
 * daemon itself. Held when both are refused with 403 `process_not_owned` and neither moved. The
 * same user moving a process of its own must succeed, or the refusals prove nothing ('invalid').
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Probe } from '../probe.ts';
import type { HostProbeContext } from './types.ts';

const UID = 65534;

/** The CPU cgroup line of /proc/<pid>/cgroup (v1: the cpu controller's; v2: the unified one). */
export function cpuCgroupOf(text: string): string {
  const lines = text.split('\n');
  const v1 = lines.find((l) => /^\d+:[^:]*\bcpu\b[^:]*:/.test(l));
  return (v1 ?? lines.find((l) => l.startsWith('0::')) ?? '').replace(/^[^:]*:[^:]*:/, '');
}
const cgroupOf = (pid: number) => cpuCgroupOf(readFileSync(`/proc/${pid}/cgroup`, 'utf8'));

/** POST /v1/host/client-cgroup from a process of `uid` (curl, so the peer socket is that uid's): [status, code]. */
export function joinAs(d: { url: string; token: string }, uid: number, body: string): [number, string | undefined, string] {
  const out = execFileSync(
    'curl',
    [
      '-sS',
      '-o',
      '-',
      '-w',
      '\n%{http_code}',
      '-H',
      `Authorization: Bearer ${d.token}`,
      '-H',
      'content-type: application/json',
      '--data-binary',
      body,
      `${d.url}/v1/host/client-cgroup`,
    ],
    { uid, gid: uid, encoding: 'utf8', timeout: 60_000 },
  );
  const i = out.lastIndexOf('\n');
  const text = out.slice(0, i);
  let code: string | undefined;
  try {
    code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
  } catch {}
  return [Number(out.slice(i + 1)), code, text.slice(0, 300)];
}

/** The probe against a daemon given by its url, token, instance and own pid. */
export async function clientCgroupProbe(d: { url: string; token: string; instance: string; pid: number }, arm: string): Promise<Probe[]> {
  const id = 'host.client-cgroup.move-foreign-pid';
  const kids = [spawn('sleep', ['120'], { stdio: 'ignore' }), spawn('sleep', ['120'], { stdio: 'ignore', uid: UID, gid: UID })];
  try {
    const [rootsPid, ownPid] = kids.map((k) => k.pid!) as [number, number];
    const client = `/drums-${d.instance}/client`;
    const faults: string[] = [];
    for (const [what, pid] of [
      ['root-owned process', rootsPid],
      ['the daemon', d.pid],
    ] as const) {
      const before = cgroupOf(pid);
      const [status, code, text] = joinAs(d, UID, JSON.stringify({ pid }));
      if (cgroupOf(pid) !== before) faults.push(`${what} ${pid} was moved to ${cgroupOf(pid)}`);
      if (status !== 403 || code !== 'process_not_owned') faults.push(`${what}: ${status} ${text}`);
    }
    if (faults.length) return [{ arm, id, category: 'host', as: 'host-uid', result: 'fail', detail: faults.join('; ') }];
    const [status, , text] = joinAs(d, UID, JSON.stringify({ pid: ownPid }));
    if (status !== 200 || cgroupOf(ownPid) !== client)
      return [{ arm, id, category: 'host', as: 'host-uid', result: 'invalid', detail: `uid ${UID}'s own process was not moved: ${status} ${text}` }];
    return [
      {
        arm,
        id,
        category: 'host',
        as: 'host-uid',
        result: 'pass',
        detail: `uid ${UID} moved its own process; root's and the daemon's were refused (403 process_not_owned)`,
      },
    ];
  } finally {
    // Ours, by handle; the client cgroup empties only once they are reaped.
    await Promise.all(
      kids.map((k) => (k.exitCode !== null || k.signalCode !== null ? undefined : new Promise((r) => (k.once('close', r), k.kill('SIGKILL'))))),
    );
  }
}

export const clientCgroupProbes = (ctx: HostProbeContext): Promise<Probe[]> => clientCgroupProbe(ctx.d, ctx.arm);
