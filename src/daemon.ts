import { serve } from '@hono/node-server';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server as HttpServer } from 'node:http';
import { DrumsError } from './common/errors.ts';
import { log } from './common/log.ts';
import { resolveInstance, type Instance } from './host/instance.ts';
import { procStartTime } from './host/proc.ts';
import { createApp } from './api/app.ts';
import { DisplayService } from './api/display-service.ts';
import { SessionManager } from './session/manager.ts';
import { OsworldService } from './osworld/service.ts';
import { daemonFile, liveDaemon, sweepInstance } from './session/sweep.ts';

export interface ServeOptions {
  port?: number;
  host?: string;
  /** Listening beyond loopback needs this explicit opt-in (there is no TLS yet). */
  allowRemote?: boolean;
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
  const display = new DisplayService();
  const osworld = new OsworldService(mgr, display);
  mgr.hooks.ready.push((s) => osworld.attach(s));
  mgr.hooks.destroyed.push((id) => osworld.detach(id));
  const port = opts.port ?? Number(process.env.DRUMS_PORT ?? 7450);
  const allowedHosts = [...new Set([...LOOPBACK, host])];
  const app = createApp(mgr, display, { token, allowedHosts });
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
  const addr = server.address() as AddressInfo;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${addr.port}`;
  writeFileSync(daemonFile(inst), JSON.stringify({ pid: process.pid, startTime: procStartTime(process.pid), url }) + '\n');
  log('info', 'drums daemon listening', { url, instance: inst.name, stateDir: inst.stateDir, runtime: mgr.runtime.info.name });

  let stopping: Promise<void> | undefined;
  const stop = () => (stopping ??= (async () => {
    server.close();
    osworld.closeAll();
    display.closeAll();
    await mgr.shutdown();
    rmSync(daemonFile(inst), { force: true });
    await sweepInstance(inst).catch((e) => log('warn', 'final sweep failed', { error: String(e) }));
  })());
  return { url, token, inst, mgr, app, stop };
}
