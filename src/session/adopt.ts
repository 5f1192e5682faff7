import { createConnection } from 'node:net';
import { existsSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Subnet } from '../host/network.ts';
import type { Instance, objectNames } from '../host/instance.ts';
import type { OciRuntime } from '../host/oci-runtime.ts';
import type { UidRange } from '../host/userns.ts';
import { mountsUnder } from '../host/overlay.ts';
import { isAlive } from '../host/proc.ts';
import { checkPeer, withPinnedSocket } from '../host/peer.ts';
import { setupRequest } from '../display/xauth.ts';
import type { SessionSpec } from './spec.ts';

/**
 * Sessions that outlive their daemon. Each session's record (`session.json`)
 * says what phase it is in and names every host object; a new daemon of the
 * instance adopts a session whose record says `ready` and whose objects are
 * all there and alive (container running with the recorded init, X answering,
 * netns, veth and mounts present), and sweeps the rest: dead, half-made
 * (killed mid-create or mid-reset) and unreadable ones.
 *
 * Nothing here depends on a file descriptor the old daemon held: liveness of
 * an adopted session is its init's PID *and* start time, checked by polling.
 */
export type RecordPhase = 'creating' | 'ready' | 'resetting';

export interface SessionRecord {
  id: string;
  instance: string;
  phase: RecordPhase;
  createdAt: string;
  subnet: Subnet;
  /** The session's host uid range, when it has a user namespace of its own (its claim stays with it). */
  uids?: UidRange;
  names: ReturnType<typeof objectNames>;
  /** The key its objects and its directory are named with, when not its id: a reset by standby took over the standby's (src/session/standby.ts). */
  slot?: string;
  /** Set on a standby: the session it stands by for. A standby is never adopted (its owner makes a new one). */
  standbyOf?: string;
  mounts: string[];
  spec: SessionSpec;
  generation: number;
  attempt: { generation: number; token: string };
  imageDir: string;
  init?: { pid: number; startTime: number };
  /** The generation's X cookie (hex): the daemon's own copy, never read back from the session. */
  xCookie?: string;
}

/** Writes the record atomically (a crash leaves the old one or the new one, never half of either). */
export function writeRecord(dir: string, rec: SessionRecord): void {
  const tmp = join(dir, '.session.json.tmp');
  writeFileSync(tmp, JSON.stringify(rec, null, 2), { mode: 0o600 });
  renameSync(tmp, join(dir, 'session.json'));
}

export interface ReadRecords {
  records: SessionRecord[];
  /** Session directories whose record is missing or unreadable, with why. */
  corrupt: { id: string; why: string }[];
}

function validRecord(r: unknown, dirName: string, instance: string): r is SessionRecord {
  if (!r || typeof r !== 'object') return false;
  const x = r as Partial<SessionRecord>;
  return (
    typeof x.id === 'string' &&
    (x.slot === undefined || (typeof x.slot === 'string' && x.slot.startsWith(`${x.id}-`))) &&
    (x.slot ?? x.id) === dirName &&
    x.instance === instance &&
    typeof x.phase === 'string' &&
    typeof x.generation === 'number' &&
    !!x.attempt &&
    typeof x.attempt.token === 'string' &&
    !!x.names &&
    !!x.subnet &&
    !!x.spec &&
    typeof x.imageDir === 'string' &&
    (x.xCookie === undefined || (typeof x.xCookie === 'string' && /^[0-9a-f]{32}$/.test(x.xCookie)))
  );
}

export function readRecords(sessionsDir: string, instance: string): ReadRecords {
  const out: ReadRecords = { records: [], corrupt: [] };
  if (!existsSync(sessionsDir)) return out;
  for (const id of readdirSync(sessionsDir)) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(join(sessionsDir, id, 'session.json'), 'utf8'));
    } catch (e) {
      out.corrupt.push({ id, why: `unreadable record: ${(e as Error).message.slice(0, 200)}` });
      continue;
    }
    if (!validRecord(parsed, id, instance)) out.corrupt.push({ id, why: 'the record lacks fields or names another session or instance' });
    else out.records.push(parsed);
  }
  return out;
}

/**
 * Whether an X server answers on a path socket: sends the connection setup
 * (with `cookie`, the session's, or no authorization) and expects "success" (1)
 * as the first reply byte. With `cgroup`, only a server of that cgroup counts,
 * and nothing is sent to another (the socket's directory is the session's to
 * write; docs/security.md).
 */
export function xAnswers(socketPath: string, timeoutMs = 2000, cgroup?: string, cookie?: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection(socketPath);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      sock.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    sock.once('error', () => done(false));
    sock.once('connect', () => {
      const req = setupRequest(cookie);
      if (!cgroup) sock.write(req);
      else
        checkPeer(sock, cgroup, timeoutMs).then(
          () => {
            if (!sock.destroyed) sock.write(req);
          },
          () => done(false),
        );
    });
    sock.once('data', (d: Buffer) => done(d[0] === 1));
  });
}

/** Why a `ready` record's session cannot be adopted, or undefined if everything is there and alive. */
export async function whyNotAdoptable(
  rec: SessionRecord,
  runtime: OciRuntime,
  paths: { x11Socket: string; rtDir: string; sessionDir: string },
): Promise<string | undefined> {
  if (rec.phase !== 'ready') return `the daemon stopped while the session was ${rec.phase}`;
  if (!rec.init || !isAlive(rec.init)) return 'its init process is gone';
  const st = await runtime.state(rec.names.container);
  if (st?.status !== 'running' || st.pid !== rec.init.pid) return `its container is ${st ? st.status : 'missing'}`;
  if (!existsSync(`/run/netns/${rec.names.netns}`)) return 'its network namespace is missing';
  if (!existsSync(`/sys/class/net/${rec.names.hostVeth}`)) return 'its veth is missing';
  if (!existsSync(rec.imageDir)) return 'its image is gone';
  const mounts: [string, string][] = [
    ['root filesystem', join(paths.sessionDir, 'bundle', 'rootfs')],
    ['disk', join(paths.sessionDir, 'disk')],
    ['runtime tmpfs', paths.rtDir],
    ...(rec.uids
      ? ([
          ['user namespace pin', join(paths.sessionDir, 'userns')],
          ['idmapped image', join(paths.sessionDir, 'lower')],
        ] as [string, string][])
      : []),
  ];
  for (const [what, mp] of mounts) if (!mountsUnder(mp).includes(mp)) return `its ${what} is not mounted`;
  // The socket file itself (pinSocket): a link the session put in its place is not even connected to.
  const x11 = (path: string) => xAnswers(path, 2000, rec.names.cgroup, rec.xCookie);
  if (!(await withPinnedSocket(dirname(paths.x11Socket), basename(paths.x11Socket), x11).catch(() => false)))
    return 'its X server does not answer (from inside the session)';
  return undefined;
}

export interface AdoptionPlan {
  adopt: SessionRecord[];
  /** `standby`: the objects of a standby, not of a client's session. */
  swept: { id: string; why: string; standby?: boolean }[];
}

/** Reads the instance's records and judges each session: adopt it, or sweep it (and say why). */
export async function planAdoption(inst: Instance, runtime: OciRuntime): Promise<AdoptionPlan> {
  const { records, corrupt } = readRecords(inst.sessionsDir, inst.name);
  const plan: AdoptionPlan = { adopt: [], swept: [...corrupt] };
  for (const rec of records) {
    if (rec.standbyOf) {
      plan.swept.push({ id: rec.id, why: 'a standby is made anew, never adopted', standby: true });
      continue;
    }
    const slot = rec.slot ?? rec.id;
    const why = await whyNotAdoptable(rec, runtime, {
      x11Socket: join(inst.rtDir, slot, 'x11', 'X0'),
      rtDir: join(inst.rtDir, slot),
      sessionDir: join(inst.sessionsDir, slot),
    });
    if (why) plan.swept.push({ id: rec.id, why });
    else plan.adopt.push(rec);
  }
  // Two ready records of one session cannot both be adopted (the daemon writes the old one 'resetting'
  // before the new one 'ready'); should it happen, the newest generation wins and the other is swept.
  const byId = new Map<string, SessionRecord>();
  for (const rec of plan.adopt) {
    const other = byId.get(rec.id);
    if (!other || other.generation < rec.generation) byId.set(rec.id, rec);
  }
  for (const rec of plan.adopt) if (byId.get(rec.id) !== rec) plan.swept.push({ id: rec.id, why: 'an older generation of an adopted session' });
  plan.adopt = [...byId.values()];
  return plan;
}
