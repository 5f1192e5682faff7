import { run } from '../common/exec.ts';
import type { Instance } from './instance.ts';
import { nftTableName, vethPrefix } from './instance.ts';

/**
 * The instance's nftables policy. One table per instance (`inet drums_<inst>`),
 * created when the daemon starts and deleted by the sweep. Sessions are found
 * by their host veth name prefix; per-session facts live in sets:
 *  - `svc`: (veth, gateway, port) triples a session may reach on the host;
 *  - `egress`: session source addresses allowed out to the internet (NAT).
 * Everything else from a session is dropped: other sessions, the host's other
 * addresses and ports, private, link-local, CGNAT and loopback ranges, and IPv6.
 */
export const BLOCKED_V4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/4',
  '240.0.0.0/4',
];

export function tableScript(inst: Instance): string {
  const t = nftTableName(inst);
  const sess = `"${vethPrefix(inst)}*"`;
  return `
table inet ${t}
delete table inet ${t}
table inet ${t} {
  set svc { type ifname . ipv4_addr . inet_service; }
  set egress { type ipv4_addr; }
  set blocked4 { type ipv4_addr; flags interval; elements = { ${BLOCKED_V4.join(', ')} } }
  chain input {
    type filter hook input priority -10; policy accept;
    iifname ${sess} jump from_session
  }
  chain from_session {
    meta nfproto ipv6 drop
    ct state established,related accept
    iifname . ip daddr . tcp dport @svc accept
    counter drop
  }
  chain forward {
    type filter hook forward priority -10; policy accept;
    iifname ${sess} jump fwd_from_session
    oifname ${sess} jump fwd_to_session
  }
  chain fwd_from_session {
    meta nfproto ipv6 drop
    ip daddr @blocked4 counter drop
    ip saddr @egress accept
    counter drop
  }
  chain fwd_to_session {
    ct state established,related accept
    counter drop
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr @egress oifname != ${sess} masquerade
  }
}
`;
}

export async function installTable(inst: Instance): Promise<void> {
  await run(['nft', '-f', '-'], { input: tableScript(inst) });
}

export async function deleteTable(inst: Instance): Promise<void> {
  await run(['nft', 'delete', 'table', 'inet', nftTableName(inst)], { okCodes: [0, 1] });
}

export async function tableExists(inst: Instance): Promise<boolean> {
  const r = await run(['nft', 'list', 'table', 'inet', nftTableName(inst)], { okCodes: [0, 1] });
  return r.code === 0;
}

export interface SessionRules {
  hostVeth: string;
  gateway: string;
  address: string;
  hostPorts: number[];
  egress: boolean;
}

function elements(inst: Instance, r: SessionRules, verb: 'add' | 'delete'): string {
  const t = nftTableName(inst);
  const lines: string[] = [];
  if (r.hostPorts.length) {
    lines.push(`${verb} element inet ${t} svc { ${r.hostPorts.map((p) => `"${r.hostVeth}" . ${r.gateway} . ${p}`).join(', ')} }`);
  }
  if (r.egress) lines.push(`${verb} element inet ${t} egress { ${r.address} }`);
  return lines.join('\n');
}

export async function addSessionRules(inst: Instance, r: SessionRules): Promise<void> {
  const script = elements(inst, r, 'add');
  if (script) await run(['nft', '-f', '-'], { input: script + '\n' });
}

export async function removeSessionRules(inst: Instance, r: SessionRules): Promise<void> {
  // Delete one element at a time: a missing element must not keep the others.
  const t = nftTableName(inst);
  for (const p of r.hostPorts) {
    await run(['nft', `delete element inet ${t} svc { "${r.hostVeth}" . ${r.gateway} . ${p} }`], { okCodes: [0, 1] });
  }
  if (r.egress) await run(['nft', `delete element inet ${t} egress { ${r.address} }`], { okCodes: [0, 1] });
}

/** IPv4 forwarding is needed only for egress; the caller records the old value to restore it. */
export async function readIpForward(): Promise<string> {
  const { readFileSync } = await import('node:fs');
  return readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim();
}
