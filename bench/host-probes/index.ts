/**
 * Probes of `drums audit` against the host side of the boundary: a local host user other than root
 * (run as an unprivileged host uid), and a session's own code against the host through what the
 * daemon does for it (fork, status, OSWorld's guest contract). Each module here exports one
 * HostProbe; the integration tests call the same functions, so the audit and the tests try the
 * same attacks. A probe makes what it needs on the given daemon and removes it before it returns.
 */
import type { Probe } from '../probe.ts';
import type { HostProbe, HostProbeContext } from './types.ts';
import { x11Probes } from './x11.ts';
import { osworldPeerProbe } from './osworld-peer.ts';
import { fsProbes } from './fs.ts';
import { budgetsProbe } from './budgets.ts';
import { osworldEvalProbes } from './osworld-eval.ts';
import { probeExecCmdline } from './exec-cmdline.ts';
import { forkPlantProbes } from './fork-plant.ts';
import { clientCgroupProbes } from './client-cgroup.ts';

export type { HostProbe, HostProbeContext };

/** The registry: one line per module. */
const PROBES: [string, HostProbe][] = [
  ['x11', x11Probes],
  ['osworld-peer', osworldPeerProbe],
  ['fs', fsProbes],
  ['budgets', budgetsProbe],
  ['osworld-eval', osworldEvalProbes],
  ['exec-cmdline', probeExecCmdline],
  ['fork-plant', forkPlantProbes],
  ['client-cgroup', clientCgroupProbes],
];

/** Runs every host probe; a probe that throws is recorded as invalid, and the others still run. */
export async function runHostProbes(ctx: HostProbeContext): Promise<Probe[]> {
  const out: Probe[] = [];
  for (const [name, probe] of PROBES) {
    ctx.progress(`host probes: ${name}`);
    try {
      out.push(...(await probe(ctx)));
    } catch (e) {
      out.push({ arm: ctx.arm, id: `host.${name}`, category: 'host', as: 'host', result: 'invalid', detail: `probe aborted: ${(e as Error).message}` });
    }
  }
  return out;
}
