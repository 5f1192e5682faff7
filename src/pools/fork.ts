import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DrumsError, ValidationError, errorMessage } from '../common/errors.ts';
import { run } from '../common/exec.ts';
import { log } from '../common/log.ts';
import { copyTree, removeTree, unlinkBeneath } from '../host/safe-fs.ts';
import type { Session, SessionManager } from '../session/manager.ts';
import type { SessionSpec } from '../session/spec.ts';
import { checkpointDir, checkpointSource, criuFor, restoreSeed } from '../session/memfork.ts';

/**
 * fork(N) of a live session.
 *
 * `disk`: the copies get the source's writable layer (its upper directory,
 * copied while the source is frozen, so the copy is consistent) on the same
 * image, and start their apps afresh: files equal the source's, processes,
 * windows and memory do not. Each copy is an ordinary create (own id, attempt
 * token, subnet, hostname, a fresh /etc/machine-id), labelled
 * `drums.fork.source` and `drums.fork.mode=disk`.
 *
 * `memory`: a CRIU checkpoint of the running session restored into each copy
 * (src/session/memfork.ts): processes, windows and memory equal the source's
 * too. A state CRIU can't dump is 409 memory_fork_refused, a daemon without
 * CRIU 501 memory_fork_unavailable, both naming `disk` as the alternative.
 */
export type ForkMode = 'disk' | 'memory';
export const MAX_FORK = 64;

/**
 * Files in a copied upper layer that carry the source's identity or locks; the copy gets its own.
 * They are removed from the copy without following a link at any component (unlinkBeneath): the
 * session owns that tree, and its desktop user can make `~/.config/chromium`, its root `etc`, a link
 * to a host directory.
 */
const IDENTITY_FILES = [
  'etc/machine-id',
  'etc/hostname',
  'var/lib/dbus/machine-id',
  'home/user/.config/chromium/SingletonLock',
  'home/user/.config/chromium/SingletonSocket',
  'home/user/.config/chromium/SingletonCookie',
];

const forking = new Set<string>();

export function parseFork(body: unknown): { count: number; mode: ForkMode } {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ValidationError('body', 'must be a JSON object like {"count": 4}', 'invalid_fork');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (k !== 'count' && k !== 'mode') throw new ValidationError(k, 'unknown field; allowed: count, mode', 'invalid_fork');
  const count = b.count ?? 1;
  if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > MAX_FORK)
    throw new ValidationError('count', `must be an integer within 1..${MAX_FORK}, got ${JSON.stringify(count)}`, 'invalid_fork');
  const mode = b.mode ?? 'disk';
  if (mode !== 'disk' && mode !== 'memory') throw new ValidationError('mode', 'must be "disk" (files copied, apps restarted) or "memory"', 'invalid_fork');
  return { count, mode };
}

/** A create body that makes a session of the same spec (TTL and labels as given). */
function bodyOf(spec: SessionSpec, labels: Record<string, string>): Record<string, unknown> {
  return {
    image: spec.image,
    ...(spec.url ? { url: spec.url } : {}),
    screen: spec.screen,
    memoryMb: spec.memoryBytes / 1024 ** 2,
    ...(spec.cpus ? { cpus: spec.cpus } : {}),
    pids: spec.pids,
    egress: spec.egress,
    hostPorts: spec.hostPorts,
    browserFlags: spec.browserFlags,
    ...(spec.browserSandbox === false ? { browserSandbox: false } : {}),
    ttlSeconds: spec.ttlSeconds,
    labels,
    ...(spec.userns === undefined ? {} : { userns: spec.userns }),
  };
}

/**
 * Makes `count` copies with `create` (given each copy's labels), all or nothing: when one fails,
 * the ones made are destroyed and the fork is 500 fork_failed.
 */
async function makeCopies(
  mgr: SessionManager,
  src: Session,
  count: number,
  mode: ForkMode,
  create: (labels: Record<string, string>) => Promise<Session>,
): Promise<Session[]> {
  const labels: Record<string, string> = { ...src.spec.labels, 'drums.fork.source': src.id, 'drums.fork.mode': mode };
  delete labels['drums.pool'];
  // Test hook (DRUMS_TEST_HOOKS=1): the source's label drums.test.forkFailStep makes the last copy fail at that step.
  const failStep = mgr.config.testHooks ? labels['drums.test.forkFailStep'] : undefined;
  const labelsOf = (i: number) => (failStep && i === count - 1 ? { ...labels, 'drums.test.failStep': failStep } : labels);
  const results = await Promise.allSettled(Array.from({ length: count }, (_, i) => create(labelsOf(i))));
  const copies: Session[] = [];
  for (const r of results) if (r.status === 'fulfilled') copies.push(r.value);
  const failed = results.find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined;
  if (failed) {
    for (const c of copies) await mgr.destroy(c.id, 'fork_failed').catch(() => {});
    const cause = failed.reason;
    throw new DrumsError('fork_failed', `${mode} fork of ${src.id} failed, no copy is left and the source runs on: ${errorMessage(cause)}`, {
      cause,
      details: { mode, ...(cause instanceof DrumsError ? { causeCode: cause.code, ...cause.details } : {}) },
    });
  }
  return copies;
}

/** True while a session is being forked (a second fork of it is 409 session_forking). */
export function isForking(id: string): boolean {
  return forking.has(id);
}

/**
 * Forks `count` copies of a ready session. All or nothing: if any copy fails,
 * the ones made are destroyed and the source is resumed untouched.
 */
export async function forkSession(
  mgr: SessionManager,
  src: Session,
  req: { count: number; mode: ForkMode },
): Promise<{ copies: Session[]; mode: ForkMode; snapshotMs: number; pausedMs: number }> {
  if (forking.has(src.id)) throw new DrumsError('session_forking', `session ${src.id} is already being forked; wait for that fork to finish`);
  if (src.state === 'resetting') throw new DrumsError('session_resetting', `session ${src.id} is resetting; fork it when it is ready`);
  if (src.state !== 'ready')
    throw new DrumsError(
      'session_broken',
      `session ${src.id} is ${src.state}${src.brokenReason ? `: ${src.brokenReason}` : ''}; only a ready session can be forked`,
    );
  const free = mgr.maxSessions - mgr.list().length;
  if (req.count > free)
    throw new DrumsError(
      'pool_exhausted',
      `a fork of ${req.count} needs ${req.count} free sessions; this daemon has ${free} of ${mgr.maxSessions} (DRUMS_MAX_SESSIONS)`,
      { details: { free, count: req.count } },
    );
  if (req.mode === 'memory') {
    const criu = await criuFor(mgr);
    forking.add(src.id);
    const dir = checkpointDir(src);
    try {
      const t0 = performance.now();
      const { pausedMs } = await checkpointSource(mgr, src, criu, dir);
      const snapshotMs = performance.now() - t0;
      const copies = await makeCopies(mgr, src, req.count, 'memory', (labels) =>
        mgr.create(bodyOf(src.spec, labels), { seedUpper: join(dir, 'upper'), seedBase: src.uids?.base ?? 0, restore: restoreSeed(mgr, src, criu, dir) }),
      );
      return { copies, mode: 'memory', snapshotMs, pausedMs };
    } finally {
      forking.delete(src.id);
      await removeTree(dir).catch((e) => log('warn', 'memory fork: the checkpoint could not be removed', { id: src.id, error: errorMessage(e) }));
    }
  }
  forking.add(src.id);
  const snap = join(src.dir, `fork-${randomBytes(4).toString('hex')}`);
  const copies: Session[] = [];
  try {
    // Freeze the source while its upper layer is copied: a consistent snapshot, and the source goes on after.
    const t0 = performance.now();
    mkdirSync(snap, { mode: 0o700 });
    const container = src.names.container;
    const rt = [mgr.runtime.info.path, '--root', mgr.runtime.root];
    await run([...rt, 'pause', container]);
    let pausedMs = 0;
    try {
      const tp = performance.now();
      // Into the fresh root-only directory, in a child process: links copied as links, holes kept (safe-fs.ts).
      await copyTree(join(src.dir, 'disk', 'upper'), join(snap, 'upper'), { reflink: true });
      pausedMs = performance.now() - tp;
    } finally {
      await run([...rt, 'resume', container]).catch((e) => log('warn', 'fork: resume of the source failed', { id: src.id, error: errorMessage(e) }));
    }
    for (const f of IDENTITY_FILES) {
      const r = unlinkBeneath(join(snap, 'upper'), f);
      if (r.result === 'refused') log('warn', 'fork: an identity file of the source was left in the copy', { id: src.id, file: f, why: r.why });
    }
    const snapshotMs = performance.now() - t0;
    copies.push(
      ...(await makeCopies(mgr, src, req.count, 'disk', (labels) =>
        mgr.create(bodyOf(src.spec, labels), { seedUpper: join(snap, 'upper'), seedBase: src.uids?.base ?? 0 }),
      )),
    );
    return { copies, mode: 'disk', snapshotMs, pausedMs };
  } finally {
    forking.delete(src.id);
    await removeTree(snap).catch((e) => log('warn', 'fork: the snapshot could not be removed', { id: src.id, error: errorMessage(e) }));
  }
}
