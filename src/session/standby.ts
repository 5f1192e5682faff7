/**
 * Standbys: a reset at the speed of a claim (docs/pools.md, "Standbys").
 *
 * A session whose spec asks for `standbys: N` keeps N fresh sessions of its own spec ready,
 * hidden from clients. A reset then swaps one in instead of booting a new generation: the
 * session keeps its id (and its Session object, so everything that holds it follows), its
 * generation goes up, and it takes over the standby's host objects: container, netns and veth,
 * subnet (so its address changes), uid range, cgroup, disk, directories and X socket. The old
 * generation's objects become a "husk" that is torn down behind the answer, like a destroy.
 *
 * Identity, and why each part follows the swap:
 *  - Host objects stay named with their owner: a standby's id, the key of all of its objects, is
 *    `<owner id>-<hex>`, and the owner's record then lives in that directory with `slot` naming it
 *    (src/session/adopt.ts reads it back; the sweep keeps a session's objects by slot).
 *  - Inside, a standby already is its owner: host name, DRUMS_SESSION_ID and the X authority name
 *    the owner's id (identityOf), so nothing in the swapped-in desktop names the standby.
 *  - The OSWorld endpoint's listeners stay (they belong to the session id); its forwarders read
 *    the session's address per connection, the guest routes look the session up by id.
 *  - The display service, AT-SPI clients, VNC and take-overs are per generation: they reconnect to
 *    the new X socket and bus. The fair share is per session id. The episode of the old attempt is
 *    closed before the swap and the new one opened after, as in a reset.
 *  - A standby is never handed out twice and never seen by a client before it is swapped in, so
 *    no attempt has touched it. A standby is not adopted after a daemon restart (the sweep removes
 *    it; the session makes a new one): a restarted daemon cannot vouch that nobody reached it.
 *
 * Cost: each standby is a whole session (its memory, its disk, one subnet and one uid range, a
 * share of the host's session limit and admission), idle. It is made like any create, through the
 * admission limit, so a full host makes fewer standbys (the session view says why).
 */
import { randomBytes } from 'node:crypto';
import type { Session } from './session.ts';
import { POOL_LABEL, STANDBY_LABEL, type SessionSpec } from './spec.ts';

/** A fresh id for a standby of `owner`: named with the owner's id, unlike any in `taken`. */
export function standbyId(owner: Session, taken: (id: string) => boolean): string {
  for (;;) {
    const id = `${owner.id}-${randomBytes(3).toString('hex')}`;
    if (!taken(id)) return id;
  }
}

/**
 * A standby's spec: the owner's, with no TTL (the owner's applies), no recording (the owner's
 * episode opens at the swap), no standbys of its own, no pool label and no test hooks (a hook
 * meant for the owner's create must not fire in a standby's), and the standby label.
 */
export function standbySpec(owner: Session): SessionSpec {
  const spec = structuredClone(owner.spec);
  const labels = Object.fromEntries(Object.entries(spec.labels).filter(([k]) => k !== POOL_LABEL && !k.startsWith('drums.test.')));
  delete spec.record;
  delete spec.standbys;
  return { ...spec, ttlSeconds: 0, labels: { ...labels, [STANDBY_LABEL]: owner.id } };
}

/** The fields of a session that are its host identity: what a swap moves from the standby to its owner. */
const IDENTITY = [
  'slot',
  'subnet',
  'uids',
  'names',
  'dir',
  'runDir',
  'x11Socket',
  'xCookie',
  'busSocket',
  'imageDir',
  'initPid',
  'init',
  '_disk',
  '_watcher',
] as const;

/**
 * Moves the standby's host identity into `s` (in place: every holder of the Session object
 * follows) and returns the husk: a detached Session holding `s`'s old identity, for teardown.
 */
export function swapIdentity(s: Session, sb: Session): Session {
  const husk: Session = {
    id: s.slot ?? s.id,
    state: 'destroying',
    spec: s.spec,
    generation: s.generation,
    attempt: s.attempt,
    createdAt: s.createdAt,
    subnet: s.subnet,
    names: s.names,
    dir: s.dir,
    runDir: s.runDir,
    x11Socket: s.x11Socket,
    busSocket: s.busSocket,
    imageDir: s.imageDir,
    timings: {},
  };
  const rec = s as unknown as Record<string, unknown>;
  const from = sb as unknown as Record<string, unknown>;
  const old = husk as unknown as Record<string, unknown>;
  for (const k of IDENTITY) {
    old[k] = rec[k];
    if (from[k] === undefined) delete rec[k];
    else rec[k] = from[k];
  }
  husk.slot = husk.id;
  s.slot = sb.id;
  return husk;
}

/** What the session view shows of a session's standbys (undefined: it keeps none). */
export function standbyView(s: Session): { target: number; ready: number; making: number; lastError?: string } | undefined {
  if (!s.spec.standbys) return undefined;
  const st = s._standby;
  return { target: s.spec.standbys, ready: st?.ready.length ?? 0, making: st?.making ?? 0, ...(st?.lastError ? { lastError: st.lastError } : {}) };
}
