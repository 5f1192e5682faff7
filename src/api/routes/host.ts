import { Hono } from 'hono';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, statfsSync, writeFileSync } from 'node:fs';
import { availableParallelism, hostname, loadavg } from 'node:os';
import { join } from 'node:path';
import { DrumsError, ValidationError } from '../../common/errors.ts';
import { checkBody } from '../spec-validate.ts';
import { loopbackPeerUid } from '../../common/peer-uid.ts';
import { ClientJoinError, joinClientCgroupFor } from '../../host/resources.ts';
import { listImages } from '../../image/store.ts';
import type { Instance } from '../../host/instance.ts';
import type { SessionManager } from '../../session/manager.ts';
import { listPools, type PoolManager } from '../../pools/pools.ts';
import type { RouteContext } from '../request.ts';

const VERSION = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
const STATES = ['creating', 'ready', 'resetting', 'broken', 'destroying'] as const;

/**
 * The stable host id: DRUMS_HOST_ID (e.g. the Kubernetes node name), else an id
 * generated on first start and kept in the state dir, so it survives restarts.
 */
export function hostId(inst: Instance, configured?: string): string {
  if (configured) return configured;
  const path = join(inst.stateDir, 'host-id');
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const id = `${hostname()}-${randomUUID().slice(0, 8)}`;
  writeFileSync(path, id + '\n', { mode: 0o644 });
  return id;
}

/** Throws 503 host_draining while the host drains (POST /v1/sessions: creates and claims; forks and pool refills check it too). */
export function refuseIfDraining(mgr: SessionManager): void {
  const since = mgr.drainingSince;
  if (since)
    throw new DrumsError('host_draining', `this host has been draining since ${since} and takes no new sessions; place the session on another host`, {
      details: { since },
    });
}

function memory() {
  const info = readFileSync('/proc/meminfo', 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(info)?.[1] ?? 0) * 1024;
  return { totalBytes: kb('MemTotal'), availableBytes: kb('MemAvailable') };
}

function disk(path: string) {
  try {
    const s = statfsSync(path);
    return { path, totalBytes: s.blocks * s.bsize, availableBytes: s.bavail * s.bsize };
  } catch {
    return { path, totalBytes: 0, availableBytes: 0 };
  }
}

/** The built images, re-read at most every 10 s: listing reads every manifest, and clients poll this route. */
let imagesCache: { dir: string; at: number; images: { name: string; hash: string; current: boolean; builtAt: string }[] } | undefined;
function builtImages(imagesDir: string) {
  if (!imagesCache || imagesCache.dir !== imagesDir || Date.now() - imagesCache.at > 10_000) {
    const images = listImages({ imagesDir }).map((i) => ({ name: i.name, hash: i.hash, current: i.current, builtAt: i.manifest.builtAt }));
    imagesCache = { dir: imagesDir, at: Date.now(), images };
  }
  return imagesCache.images;
}

/**
 * `GET /v1/host`: what this host says about itself, for cluster placement.
 * `admission` is what memory and disk admission allow (src/session/admission.ts), `pools` the warm
 * pools and their fill; `capacity.sessions` is the placement figure clients use.
 */
export function hostReport(mgr: SessionManager, pools: PoolManager, ids: { hostId: string; instanceId: string; startedAt: string }) {
  const sessions = mgr.list();
  const byState = Object.fromEntries(STATES.map((s) => [s, 0])) as Record<(typeof STATES)[number], number>;
  for (const s of sessions) byState[s.state]++;
  const draining = mgr.drainingSince === undefined ? undefined : { since: mgr.drainingSince };
  const bySessionCap = Math.max(0, mgr.maxSessions - sessions.length);
  const [load1, load5, load15] = loadavg();
  const admission = mgr.capacity();
  return {
    hostId: ids.hostId,
    instanceId: ids.instanceId,
    instance: mgr.inst.name,
    version: VERSION,
    startedAt: ids.startedAt,
    draining: draining !== undefined,
    ...(draining ? { drainingSince: draining.since } : {}),
    sessions: { held: sessions.length, max: mgr.maxSessions, byState },
    capacity: {
      // The most sessions it can take now: the lowest of the session cap and memory/disk
      // admission (src/session/admission.ts), zero while draining.
      sessions: draining ? 0 : Math.min(bySessionCap, admission.moreSessions),
      bySessionCap,
      byAdmission: admission.moreSessions,
    },
    resources: {
      memory: memory(),
      cpu: { cores: availableParallelism(), load1, load5, load15 },
      disk: { state: disk(mgr.inst.stateDir), images: disk(mgr.inst.imagesDir) },
    },
    admission,
    pools: listPools(pools),
    images: builtImages(mgr.inst.imagesDir),
  };
}

/** GET /v1/host, POST and DELETE /v1/host/drain, and the draining check in front of POST /v1/sessions. */
export function hostRoutes(ctx: RouteContext) {
  const { mgr, pools } = ctx;
  // The host id is read (or made) on first use, so building the app touches no state dir.
  let id: string | undefined;
  const ids = {
    get hostId() {
      return (id ??= hostId(mgr.inst, mgr.config.hostId));
    },
    instanceId: randomUUID(),
    startedAt: new Date().toISOString(),
  };
  const app = new Hono();
  app.use('/v1/sessions', async (c, next) => {
    if (c.req.method === 'POST') refuseIfDraining(mgr);
    return next();
  });
  app.get('/v1/host', (c) => c.json(hostReport(mgr, pools, ids)));
  app.post('/v1/host/drain', (c) => {
    mgr.drainingSince ??= new Date().toISOString();
    return c.json(hostReport(mgr, pools, ids));
  });
  app.delete('/v1/host/drain', (c) => {
    mgr.drainingSince = undefined;
    pools.resumeRefills();
    mgr.resumeStandbys();
    return c.json(hostReport(mgr, pools, ids));
  });
  // A local client's process joins the instance's client CPU cgroup (beside the daemon's, with its weight:
  // docs/api-host.md). The caller is the owner of the connection's peer socket, read from the kernel's
  // socket table (the TCP twin of SO_PEERCRED); it may move only its own processes (root: any but the
  // sessions' and the daemon's). The pid is checked and moved through a held /proc/<pid> descriptor.
  app.post('/v1/host/client-cgroup', async (c) => {
    const body = (await c.req.json().catch(() => {
      throw new DrumsError('invalid_json', 'the body is not valid JSON; send {"pid": <your process id>}');
    })) as { pid?: unknown } | null;
    const pid = body?.pid;
    if (typeof pid !== 'number' || !Number.isSafeInteger(pid) || pid < 1 || pid > 0x3fffffff)
      throw new ValidationError('pid', 'must be the id of a running process of yours (a positive integer)', 'invalid_request');
    checkBody('joinClientCgroup', body);
    const sock = (c.env as { incoming?: { socket?: Parameters<typeof loopbackPeerUid>[0] } } | undefined)?.incoming?.socket;
    const uid = sock ? loopbackPeerUid(sock) : undefined;
    if (uid === undefined)
      throw new DrumsError('caller_not_local', 'only a client on this host, over loopback, can join the client cgroup: the daemon could not tell who called');
    try {
      const cgroup = joinClientCgroupFor(mgr.inst.name, pid, uid);
      return c.json({ pid, cgroup });
    } catch (e) {
      if (!(e instanceof ClientJoinError)) throw e;
      const code = e.reason === 'not_found' ? 'process_not_found' : e.reason === 'not_owned' ? 'process_not_owned' : 'client_cgroup_unavailable';
      throw new DrumsError(code, e.message, { details: { pid } });
    }
  });
  return app;
}
