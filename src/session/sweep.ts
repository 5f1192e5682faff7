import { existsSync, readdirSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../common/exec.ts';
import { DrumsError, errorMessage } from '../common/errors.ts';
import { instanceCgroup, type Instance } from '../host/instance.ts';
import { listClaims, listNetns, listVeths } from '../host/network.ts';
import { deleteTable, tableExists } from '../host/nftables.ts';
import { OciRuntime, detectRuntime } from '../host/oci-runtime.ts';
import { mountsUnder } from '../host/overlay.ts';
import { detachLoops } from '../host/disk.ts';
import { clearFreeLoopThrottles } from '../host/disk-throttle.ts';
import { cgroupBases } from '../host/cgroup-fs.ts';
import { identify, isAlive } from '../host/proc.ts';
import { removeInstanceCpuCgroups } from '../host/resources.ts';
import { removeTree } from '../host/safe-fs.ts';

export interface SweepReport {
  containers: string[];
  mounts: string[];
  loops: string[];
  netns: string[];
  veths: string[];
  nftTable: boolean;
  cgroups: string[];
  claims: string[];
  sessionDirs: string[];
  ipForwardRestored: boolean;
  errors: string[];
}

/** What the sweep must leave of a session a restarting daemon adopts. */
export interface KeptSession {
  /** The key its objects are named with: its id, or the slot a reset by standby took over (src/session/standby.ts). */
  id: string;
  names: { container: string; netns: string; hostVeth: string };
  egress: boolean;
}

export interface DaemonRecord {
  pid: number;
  startTime: number;
  url: string;
}

export function daemonFile(inst: Instance): string {
  return join(inst.stateDir, 'daemon.json');
}

/** The live daemon of this instance, if any (checked by PID *and* start time). */
export function liveDaemon(inst: Instance): DaemonRecord | undefined {
  try {
    const rec = JSON.parse(readFileSync(daemonFile(inst), 'utf8')) as DaemonRecord;
    return isAlive({ pid: rec.pid, startTime: rec.startTime }) ? rec : undefined;
  } catch {
    return undefined;
  }
}

/** The instance's top cgroup in each hierarchy. */
function cgroupRoots(inst: Instance): string[] {
  return cgroupBases().map((base) => join(base, instanceCgroup(inst.name)));
}

/** The top cgroup's children that are not sessions (src/host/instance.ts). */
const NOT_SESSIONS = new Set(['daemon', 'client', 'sessions']);

/**
 * Every session cgroup of the instance in every hierarchy: those in `sessions/`, and those directly
 * under the top cgroup (the layout before `sessions/`, kept by sessions a daemon adopted from it).
 */
function sessionCgroups(inst: Instance): { id: string; dir: string }[] {
  const found: { id: string; dir: string }[] = [];
  for (const root of cgroupRoots(inst)) {
    for (const parent of [join(root, 'sessions'), root]) {
      if (!existsSync(parent)) continue;
      for (const sub of readdirSync(parent, { withFileTypes: true })) {
        if (sub.isDirectory() && !(parent === root && NOT_SESSIONS.has(sub.name))) found.push({ id: sub.name, dir: join(parent, sub.name) });
      }
    }
  }
  return found;
}

/**
 * Removes every host object of this instance: containers, mounts, network
 * namespaces, veths, the nftables table, cgroups, subnet claims, session
 * directories, and the ip_forward change. Refuses while another live daemon
 * owns the instance. Idempotent.
 */
export async function sweepInstance(inst: Instance, opts: { self?: boolean; keep?: KeptSession[] } = {}): Promise<SweepReport> {
  const live = liveDaemon(inst);
  if (live && !(opts.self && live.pid === process.pid)) {
    throw new DrumsError('daemon_running', `a live daemon (pid ${live.pid}, ${live.url}) owns ${inst.stateDir}; stop it first`);
  }
  const report: SweepReport = {
    containers: [],
    mounts: [],
    loops: [],
    netns: [],
    veths: [],
    nftTable: false,
    cgroups: [],
    claims: [],
    sessionDirs: [],
    ipForwardRestored: false,
    errors: [],
  };
  const attempt = async (what: string, fn: () => Promise<void> | void) => {
    try {
      await fn();
    } catch (e) {
      report.errors.push(`${what}: ${errorMessage(e)}`);
    }
  };
  const prefix = `drums-${inst.name}-`;
  // Sessions a restarting daemon adopts: their objects stay, everything else of the instance goes.
  const keep = opts.keep ?? [];
  const keptIds = new Set(keep.map((k) => k.id));
  const keptNames = new Set(keep.flatMap((k) => [k.names.container, k.names.netns, k.names.hostVeth]));
  const keptPath = (p: string) => keep.some((k) => [join(inst.sessionsDir, k.id), join(inst.rtDir, k.id)].some((d) => p === d || p.startsWith(d + '/')));

  // 1. Containers: killing each init tears down its PID namespace.
  const runtime = new OciRuntime(detectRuntime(inst.runtime), inst.runcRoot);
  for (const c of await runtime.list()) {
    if (!c.id.startsWith(prefix) || keptNames.has(c.id)) continue;
    await attempt(`container ${c.id}`, () => runtime.destroy(c.id));
    report.containers.push(c.id);
  }
  // 2. Anything still alive in our session cgroups (a backstop; the PID namespace kill normally suffices).
  for (const { id, dir } of sessionCgroups(inst)) {
    if (keptIds.has(id)) continue;
    const procs = join(dir, 'cgroup.procs');
    if (!existsSync(procs)) continue;
    for (const pid of readFileSync(procs, 'utf8').split('\n').filter(Boolean).map(Number)) {
      const who = identify(pid);
      if (who)
        await attempt(`kill ${pid}`, () => {
          process.kill(pid, 'SIGKILL');
        });
    }
  }
  // 3. Mounts under the sessions directory (overlay roots before the session disks they sit on),
  // then the sessions' and the instance's tmpfs; then any loop device left on a session disk image.
  const byDepth = mountsUnder(inst.sessionsDir).filter((m) => !keptPath(m));
  const overlays = byDepth.filter((m) => m.endsWith('/bundle/rootfs'));
  const rtMounts = mountsUnder(inst.rtDir).filter((m) => !keptPath(m) && !(keep.length && m === inst.rtDir));
  for (const mp of [...overlays, ...byDepth.filter((m) => !overlays.includes(m)), ...rtMounts]) {
    await attempt(`umount ${mp}`, async () => {
      const r = await run(['umount', mp], { okCodes: [0, 32] });
      if (r.code !== 0) await run(['umount', '-l', mp]);
    });
    report.mounts.push(mp);
  }
  if (!keep.length)
    await attempt('loop devices', async () => {
      report.loops.push(...(await detachLoops(inst.sessionsDir)));
    });
  else
    for (const d of existsSync(inst.sessionsDir) ? readdirSync(inst.sessionsDir) : []) {
      if (!keptIds.has(d))
        await attempt('loop devices', async () => {
          report.loops.push(...(await detachLoops(join(inst.sessionsDir, d))));
        });
    }
  // Write limits (v1 root rules) left on loop devices that the unmounts above freed.
  await attempt('loop write limits', async () => {
    clearFreeLoopThrottles();
  });
  // 4. Network namespaces and veths named with this instance.
  for (const ns of (await listNetns(prefix)).filter((n) => !keptNames.has(n))) {
    await attempt(`netns ${ns}`, async () => {
      await run(['ip', 'netns', 'del', ns]);
    });
    report.netns.push(ns);
  }
  for (const v of (await listVeths(inst)).filter((n) => !keptNames.has(n))) {
    await attempt(`veth ${v}`, async () => {
      await run(['ip', 'link', 'del', v], { okCodes: [0, 1] });
    });
    report.veths.push(v);
  }
  // 5. The firewall table (a restarting daemon reinstalls it with its adopted sessions' elements).
  if (!keep.length && (await tableExists(inst))) {
    await attempt('nft table', () => deleteTable(inst));
    report.nftTable = true;
  }
  // 6. cgroups (children first); the sessions' are empty once the containers are gone. Then the daemon's
  // own CPU cgroup and a client's (empty once their processes are gone; a live daemon moves itself out
  // first), and the top cgroup.
  for (const { id, dir } of sessionCgroups(inst)) {
    if (keptIds.has(id)) continue;
    await attempt(`cgroup ${dir}`, () => rmdirSync(dir));
    report.cgroups.push(dir);
  }
  report.cgroups.push(...removeInstanceCpuCgroups(inst.name));
  for (const root of cgroupRoots(inst)) {
    if (keep.length || !existsSync(root)) continue;
    if (existsSync(join(root, 'sessions'))) await attempt(`cgroup ${join(root, 'sessions')}`, () => rmdirSync(join(root, 'sessions')));
    // A client still in its cgroup removes the top one when it leaves (leaveClientCgroup).
    if (!existsSync(join(root, 'client'))) await attempt(`cgroup ${root}`, () => rmdirSync(root));
  }
  // 7. Subnet claims, session directories and the runtime's state.
  for (const c of listClaims(inst).filter((c) => !keptIds.has(c.sessionId))) {
    rmSync(c.file, { force: true });
    report.claims.push(c.file);
  }
  if (existsSync(inst.sessionsDir)) {
    for (const d of readdirSync(inst.sessionsDir).filter((d) => !keptIds.has(d))) {
      // A child process that follows no link and crosses no mount (src/host/safe-fs.ts): the tree holds what sessions wrote.
      await attempt(`dir ${d}`, () => removeTree(join(inst.sessionsDir, d)));
      report.sessionDirs.push(d);
    }
  }
  // The runtime's root goes once it holds no container: crun (the default on cgroup v2) also
  // keeps a cache there (`.cache`, compiled seccomp filters), which outlived a swept container.
  const containersLeft = existsSync(inst.runcRoot) ? readdirSync(inst.runcRoot).filter((n) => !n.startsWith('.')) : [];
  if (!containersLeft.length && !keep.length) rmSync(inst.runcRoot, { recursive: true, force: true });
  if (!mountsUnder(inst.rtDir).length) rmSync(inst.rtDir, { recursive: true, force: true });
  // 8. Host settings changed for egress go back to what they were.
  const fwd = join(inst.stateDir, 'ip_forward.orig');
  if (existsSync(fwd) && !keep.some((k) => k.egress)) {
    await attempt('ip_forward', () => {
      writeFileSync('/proc/sys/net/ipv4/ip_forward', readFileSync(fwd, 'utf8').trim() + '\n');
      rmSync(fwd);
    });
    report.ipForwardRestored = true;
  }
  return report;
}
