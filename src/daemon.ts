import { serve } from '@hono/node-server';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type ConfigOverrides, type DaemonConfig, loadConfig } from './common/config.ts';
import { DrumsError } from './common/errors.ts';
import { configureLog, log } from './common/log.ts';
import { resolveInstance, type Instance } from './host/instance.ts';
import { procStartTime } from './host/proc.ts';
import { createApp, sessionView } from './api/app.ts';
import { attachUpgrades } from './api/frames/upgrade.ts';
import { rateLimitOf } from './api/request.ts';
import { startIdleGc, watchEventLoop } from './api/metrics.ts';
import { FairScheduler, fairShareOf } from './policy/fair-share.ts';
import { DisplayService } from './session/display-service.ts';
import { SessionManager, type Session } from './session/manager.ts';
import { PoolManager } from './pools/pools.ts';
import { VncServers } from './session/vnc-server.ts';
import { OsworldService } from './osworld/service.ts';
import { startEpisodeFrames } from './session/episode-frames.ts';
import { daemonFile, liveDaemon, sweepInstance } from './session/sweep.ts';
import { CpuGuard } from './policy/cpu-guard.ts';
import { enterDaemonCgroup, leaveDaemonCgroup } from './host/resources.ts';

export interface ServeOptions {
  /** Overrides the config's DRUMS_PORT (arguments win over the environment). */
  port?: number;
  /** Overrides the config's DRUMS_LISTEN. */
  host?: string;
  /** Listening beyond loopback needs this explicit opt-in (there is no TLS yet). */
  allowRemote?: boolean;
  /** The whole config; else loadConfig(env, overrides). */
  config?: DaemonConfig;
  /** Where the config's variables come from (default process.env). */
  env?: Record<string, string | undefined>;
  /** Fields that win over the environment. */
  overrides?: ConfigOverrides;
  /** stop() leaves the sessions running, for the next daemon of the instance to adopt (DRUMS_KEEP_SESSIONS=1). */
  keepSessions?: boolean;
}

/** The bearer token: the config's DRUMS_TOKEN, else one generated on first start and kept in the state dir. */
export function loadToken(inst: Instance, configured: string | undefined): string {
  if (configured) return configured;
  const path = join(inst.stateDir, 'token');
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const token = randomBytes(24).toString('base64url');
  writeFileSync(path, token + '\n', { mode: 0o600 });
  return token;
}

const LOOPBACK = ['127.0.0.1', '::1', 'localhost'];

/** Composition root: instance → manager → display → HTTP. Resolves once listening. */
export async function startDaemon(opts: ServeOptions = {}) {
  const base = opts.config ?? loadConfig(opts.env ?? process.env, opts.overrides);
  const config: DaemonConfig = { ...base, ...(opts.port !== undefined ? { port: opts.port } : {}), ...(opts.host !== undefined ? { listen: opts.host } : {}) };
  configureLog(config);
  const inst = resolveInstance(config);
  const host = config.listen;
  if (!LOOPBACK.includes(host) && !opts.allowRemote) {
    throw new DrumsError('invalid_config', `refusing to listen on ${host} without TLS; pass --allow-remote to accept the risk`);
  }
  const live = liveDaemon(inst);
  if (live) throw new DrumsError('daemon_running', `a daemon (pid ${live.pid}) already serves ${inst.stateDir} at ${live.url}`);
  // (The per-uid inotify budget matters only to sessions without a user namespace: the manager warns for those.)
  const token = loadToken(inst, config.token);
  const mgr = new SessionManager(inst, { config });
  await mgr.init();
  const cgroup = enterDaemonCgroup(inst.name);
  // Sessions that keep a contended host's CPU busy are demoted (cpu.idle, low weight, a small quota), so interactive neighbours go first.
  // Sessions being created or reset are left alone: runc writes their cpu.shares, which the kernel refuses
  // (EINVAL) once the guard has set cpu.idle there (a reset of a demoted session broke so); and so are
  // sessions being stopped, whose demotion is lifted so their processes exit at once (releaseCpu).
  const handsOff = new Set(['creating', 'resetting', 'destroying']);
  const cpuGuard = new CpuGuard(() => new Map(mgr.list().map((s) => [s.id, { cgroup: s.names.cgroup, cpus: s.spec.cpus, starting: handsOff.has(s.state) }])));
  cpuGuard.start();
  const display = new DisplayService({
    onLost: (s, generation, reason) => mgr.markBroken(s, generation, reason),
    a11yMirrorIdleS: config.a11yMirrorIdleS,
    a11yDeadlineMs: config.a11yDeadlineMs,
    storedFrame: config.benchStoredFrame,
  });
  if (config.benchStoredFrame) log('warn', 'DRUMS_BENCH_STORED_FRAME=1: API screenshots are stored frames, not the screen (a bench ceiling arm only)');
  // One fair share between sessions of their observe/act work: the API's routes, the OSWorld guest's, episode frames.
  const fair = new FairScheduler(fairShareOf(config));
  // Damage-driven frames of sessions recorded with `record.frames` (docs/episodes.md).
  const episodeFrames = startEpisodeFrames(() => mgr.list(), display, fair);
  mgr.hooks.recording.push(() => episodeFrames.wake());
  const osworld = new OsworldService(mgr, display, fair);
  mgr.hooks.ready.push((s) => osworld.attach(s));
  mgr.hooks.destroyed.push((id) => osworld.detach(id));
  await mgr.announceAdopted();
  // Warm pools from DRUMS_POOLS / DRUMS_POOLS_FILE, then those saved from the API (pools.json); they start filling in the background.
  const pools = new PoolManager(mgr);
  pools.loadConfig();
  pools.loadSaved();
  // On-demand x11vnc per session, for the API's VNC WebSocket.
  const vnc = new VncServers(mgr);
  const port = config.port;
  const allowedHosts = [...new Set([...LOOPBACK, host])];
  const viewExtras = (s: Session) => {
    const endpoint = osworld.endpointOf(s.id);
    return endpoint ? { osworld: endpoint } : {};
  };
  const app = createApp(mgr, display, { token, allowedHosts, viewExtras, rateLimit: rateLimitOf(config), cpuGuard, fair, pools, vnc });
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port, hostname: host }, () => resolve(s));
    s.once('error', reject);
  });
  // Note: Node closes an idle keep-alive socket after 5 s, the same moment a client may reuse it
  // ("other side closed" under load). A long server timeout leaves the idle close to the client,
  // which learns it from the Keep-Alive header and always closes first.
  const http = server as HttpServer;
  http.keepAliveTimeout = 65_000;
  http.headersTimeout = 70_000;
  // WebSocket upgrades (frame streams, VNC) go through the same app and its checks.
  const closeUpgrades = attachUpgrades(http, app.fetch);
  const idleGc = startIdleGc(http);
  const stopLoopWatch = watchEventLoop();
  const addr = server.address() as AddressInfo;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${addr.port}`;
  writeFileSync(daemonFile(inst), JSON.stringify({ pid: process.pid, startTime: procStartTime(process.pid), url }) + '\n');
  log('info', 'drums daemon listening', { url, instance: inst.name, stateDir: inst.stateDir, runtime: mgr.runtime.info.name, cgroup });

  const keepSessions = opts.keepSessions ?? config.keepSessions;
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      server.close();
      closeUpgrades();
      idleGc.stop();
      stopLoopWatch();
      cpuGuard.stop();
      episodeFrames.stop();
      await pools.stop();
      vnc.closeAll();
      osworld.closeAll();
      display.closeAll();
      if (keepSessions) {
        // The sessions live on; their records let the next daemon of this instance adopt them (and record on).
        await mgr.episodes.detach();
        mgr.detach();
        rmSync(daemonFile(inst), { force: true });
        leaveDaemonCgroup(inst.name);
        log('info', 'daemon stopped; sessions kept for the next daemon', { sessions: mgr.list().length });
        return;
      }
      await mgr.shutdown();
      rmSync(daemonFile(inst), { force: true });
      leaveDaemonCgroup(inst.name);
      await sweepInstance(inst).catch((e) => log('warn', 'final sweep failed', { error: String(e) }));
    })());
  /** The JSON view of a session, as GET /v1/sessions/:id serves it (for the API bench's in-process baseline). */
  const view = (id: string) => sessionView(mgr.get(id), viewExtras);
  return { url, token, inst, mgr, app, view, stop, keepSessions };
}
