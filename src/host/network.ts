import { mkdirSync, openSync, closeSync, writeSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../common/exec.ts';
import { DrumsError, HostError } from '../common/errors.ts';
import type { Instance } from './instance.ts';
import { vethPrefix } from './instance.ts';

/** A session's /30: the host end of the veth is the gateway, the session end is `address`. */
export interface Subnet {
  slot: number;
  cidr: string;
  gateway: string;
  address: string;
}

export interface SubnetPool {
  base: number; // network address as uint32
  prefix: number;
  slots: number;
}

export function parsePool(spec: string): SubnetPool {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/(\d+)$/.exec(spec.trim());
  if (!m) throw new DrumsError('invalid_config', `DRUMS_SUBNET_POOL must look like 10.231.0.0/16, got '${spec}'`);
  const octets = m.slice(1, 5).map(Number);
  const prefix = Number(m[5]);
  if (octets.some((o) => o > 255) || prefix < 8 || prefix > 28) {
    throw new DrumsError('invalid_config', `DRUMS_SUBNET_POOL '${spec}': prefix must be 8..28 and octets 0..255`);
  }
  const base = ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
  const mask = prefix === 0 ? 0 : (~0 << (32 - prefix)) >>> 0;
  return { base: (base & mask) >>> 0, prefix, slots: 2 ** (32 - prefix) / 4 };
}

const ip = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');

export function subnetForSlot(pool: SubnetPool, slot: number): Subnet {
  const net = pool.base + slot * 4;
  return { slot, cidr: `${ip(net)}/30`, gateway: ip(net + 1), address: ip(net + 2) };
}

/**
 * Claims a free /30 host-wide: one file per subnet in a directory shared by all
 * instances, created with O_EXCL, so two instances on one host never pick the
 * same subnet. The file names its owner for the sweep.
 */
export function claimSubnet(inst: Instance, pool: SubnetPool, sessionId: string): Subnet {
  mkdirSync(inst.claimsDir, { recursive: true, mode: 0o755 });
  for (let slot = 0; slot < pool.slots; slot++) {
    const sub = subnetForSlot(pool, slot);
    const path = join(inst.claimsDir, sub.cidr.replace('/', '_'));
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o644);
    } catch {
      continue;
    }
    writeSync(fd, `${inst.name} ${sessionId}\n`);
    closeSync(fd);
    return sub;
  }
  throw new DrumsError('pool_exhausted', `no free subnet left in the pool (${pool.slots} slots); destroy a session or widen DRUMS_SUBNET_POOL`);
}

export function releaseSubnet(inst: Instance, sub: Subnet): void {
  rmSync(join(inst.claimsDir, sub.cidr.replace('/', '_')), { force: true });
}

/** Subnet claims held by this instance: [file, sessionId]. */
export function listClaims(inst: Instance): { file: string; sessionId: string }[] {
  if (!existsSync(inst.claimsDir)) return [];
  const out: { file: string; sessionId: string }[] = [];
  for (const f of readdirSync(inst.claimsDir)) {
    try {
      const [owner, sessionId] = readFileSync(join(inst.claimsDir, f), 'utf8').trim().split(' ');
      if (owner === inst.name) out.push({ file: join(inst.claimsDir, f), sessionId: sessionId ?? '' });
    } catch {}
  }
  return out;
}

/**
 * Makes the session's network namespace and veth pair in two `ip -batch`
 * calls. The session end is created directly inside the namespace as eth0.
 */
export async function createNetwork(netns: string, hostVeth: string, sub: Subnet, opts: { existingNetns?: boolean } = {}): Promise<void> {
  // existingNetns: the namespace is already pinned at /run/netns/<netns> (a session's own user namespace owns it).
  await run(['ip', '-batch', '-'], {
    input:
      [
        ...(opts.existingNetns ? [] : [`netns add ${netns}`]),
        `link add ${hostVeth} type veth peer name eth0 netns ${netns}`,
        `addr add ${sub.gateway}/30 dev ${hostVeth}`,
      ].join('\n') + '\n',
  });
  // Note: no IPv6 on the host end, so the session has no v6 peer at all.
  writeFileSync(`/proc/sys/net/ipv6/conf/${hostVeth}/disable_ipv6`, '1');
  await run(['ip', '-n', netns, '-batch', '-'], {
    input: [`link set lo up`, `addr add ${sub.address}/30 dev eth0`, `link set eth0 up`, `route add default via ${sub.gateway}`].join('\n') + '\n',
  });
  await run(['ip', 'link', 'set', hostVeth, 'up']);
}

export async function deleteNetwork(netns: string, hostVeth: string): Promise<void> {
  // Deleting the namespace destroys eth0 and with it the host end.
  await run(['ip', 'netns', 'del', netns], { okCodes: [0, 1] });
  // Note: the kernel tears a deleted namespace down on a workqueue, so the host end can vanish
  // between the lookup and the delete (RTNETLINK "No such device", exit 2). Gone is what we want.
  const del = await run(['ip', 'link', 'del', hostVeth], { okCodes: [0, 1, 2] });
  if (del.code === 2 && !/No such device|Cannot find device/.test(del.stderr)) {
    throw new HostError(`ip link del ${hostVeth}`, `exit 2: ${del.stderr.trim()}`, { argv: ['ip', 'link', 'del', hostVeth], exitCode: 2 });
  }
}

export async function listNetns(prefix: string): Promise<string[]> {
  const { stdout } = await run(['ip', '-j', 'netns', 'list']);
  const list = stdout.trim() ? (JSON.parse(stdout) as { name: string }[]) : [];
  return list.map((n) => n.name).filter((n) => n.startsWith(prefix));
}

export async function listVeths(inst: Instance): Promise<string[]> {
  const { stdout } = await run(['ip', '-j', 'link', 'show']);
  const links = JSON.parse(stdout) as { ifname: string }[];
  return links.map((l) => l.ifname).filter((n) => n.startsWith(vethPrefix(inst)));
}
