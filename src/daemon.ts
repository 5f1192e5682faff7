import { serve } from '@hono/node-server';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { DrumsError } from './common/errors.ts';
import { log } from './common/log.ts';
import { resolveInstance, type Instance } from './host/instance.ts';
import { procStartTime } from './host/proc.ts';
import { createApp } from './api/app.ts';
import { DisplayService } from './api/display-service.ts';
import { SessionManager } from './session/manager.ts';
import { OsworldService } from './osworld/service.ts';
import { daemonFile, liveDaemon, sweepInstance } from './session/sweep.ts';
import { enterDaemonCgroup, leaveDaemonCgroup } from './host/resources.ts';

export interface ServeOptions {
  port?: number;
  host?: string;
  /** Listening beyond loopback needs this explicit opt-in (there is no TLS yet). */
  allowRemote?: boolean;
  /** stop() leaves the sessions running, for the next daemon of the instance to adopt (DRUMS_KEEP_SESSIONS=1). */
  keepSessions?: boolean;
}

/** The bearer token: DRUMS_TOKEN, else one generated on first start and kept in the state dir. */
export function loadToken(inst: Instance, env = process.env): string {
  if (env.DRUMS_TOKEN) return env.DRUMS_TOKEN;
  const path = join(inst.stateDir, 'token');
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const token = randomBytes(24).toString('base64url');
  writeFileSync(path, token + '\n', { mode: 0o600 });
  return token;
}

const LOOPBACK = ['127.0.0.1', '::1', 'localhost'];

/** Composition root: instance → manager → display → HTTP. Resolves once listening. */
export async function startDaemon(opts: ServeOptions = {}) {
  const inst = resolveInstance();
  const host = opts.host ?? process.env.DRUMS_LISTEN ?? '127.0.0.1';
  if (!LOOPBACK.includes(host) && !opts.allowRemote) {
    throw new DrumsError('invalid_config', `refusing to listen on ${host} without TLS; pass --allow-remote to accept the risk`);
  }
  const live = liveDaemon(inst);
  if (live) throw new DrumsError('daemon_running', `a daemon (pid ${live.pid}) already serves ${inst.stateDir} at ${live.url}`);
  // Each session holds a few inotify instances as the same uid; the kernel default (128) caps a host near 40 sessions.
  const inotify = Number(readFileSync('/proc/sys/fs/inotify/max_user_instances', 'utf8'));
  if (inotify < 1024) log('warn', 'fs.inotify.max_user_instances is low; raise it (scripts/setup.sh sets 8192) to hold more than ~40 sessions', { value: inotify });
  const token = loadToken(inst);
  const mgr = new SessionManager(inst);
  await mgr.init();
  const cgroup = enterDaemonCgroup(inst.name);
  const display = new DisplayService();
  const osworld = new OsworldService(mgr, display);
  mgr.hooks.ready.push((s) => osworld.attach(s));
  mgr.hooks.destroyed.push((id) => osworld.detach(id));
  await mgr.announceAdopted();
  const port = opts.port ?? Number(process.env.DRUMS_PORT ?? 7450);
  const allowedHosts = [...new Set([...LOOPBACK, host])];
  const app = createApp(mgr, display, { token, allowedHosts });
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port, hostname: host }, () => resolve(s));
    s.once('error', reject);
  });
  // Keep idle client connections well past a client's own idle timeout, so a client whose event
  // loop was blocked for a few seconds never reuses a socket the server has just closed.
  (server as import('node:http').Server).keepAliveTimeout = 65_000;
  const addr = server.address() as AddressInfo;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${addr.port}`;
  writeFileSync(daemonFile(inst), JSON.stringify({ pid: process.pid, startTime: procStartTime(process.pid), url }) + '\n');
  log('info', 'drums daemon listening', { url, instance: inst.name, stateDir: inst.stateDir, runtime: mgr.runtime.info.name, cgroup });

  const keepSessions = opts.keepSessions ?? process.env.DRUMS_KEEP_SESSIONS === '1';
  let stopping: Promise<void> | undefined;
  const stop = () => (stopping ??= (async () => {
    server.close();
    osworld.closeAll();
    display.closeAll();
    if (keepSessions) {
      // The sessions live on; their records let the next daemon of this instance adopt them.
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
  return { url, token, inst, mgr, app, stop, keepSessions };
}
