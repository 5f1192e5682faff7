// The TypeScript client's error classes: one per spec code, rebuilt from real answers of a real
// app (createApp over an in-memory manager, served on loopback), plus its timeout and no-daemon errors.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { serve } from '@hono/node-server';
import { createApp } from '../../src/api/app.ts';
import {
  ClientTimeoutError,
  DrumsApiError,
  DrumsClient,
  ERROR_CLASSES,
  NoDaemonError,
  SessionNotFoundError,
  StaleGenerationError,
  UnauthorizedError,
} from '../../src/client/client.ts';
import { ERROR_CODES } from '../../src/protocol/generated/error-codes.ts';
import { DisplayService } from '../../src/session/display-service.ts';
import type { SessionManager } from '../../src/session/manager.ts';
import { FakeManager } from './fakes.ts';

const listen = (s: { once: (e: string, f: () => void) => unknown; address: () => unknown }) =>
  new Promise<number>((r) => s.once('listening', () => r((s.address() as AddressInfo).port)));

describe('TypeScript client errors', () => {
  let server: ReturnType<typeof serve>;
  let url: string;
  before(async () => {
    const app = createApp(new FakeManager() as unknown as SessionManager, new DisplayService(), {
      token: 't0',
      allowedHosts: ['127.0.0.1'],
      rateLimit: { perSecond: 0, burst: 1 },
    });
    server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    url = `http://127.0.0.1:${await listen(server)}`;
  });
  after(() => {
    server.close();
  });

  it('has one class per spec code, each a DrumsApiError named after its code', () => {
    assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), Object.keys(ERROR_CODES).sort());
    for (const [code, Cls] of Object.entries(ERROR_CLASSES)) {
      const e = new Cls(400, code, 'm');
      assert.ok(e instanceof DrumsApiError);
      assert.equal(
        e.name,
        code
          .split('_')
          .map((p) => p[0]!.toUpperCase() + p.slice(1))
          .join('') + 'Error',
      );
    }
  });

  it('rebuilds the class of the code the daemon answered with', async () => {
    const c = new DrumsClient(url, 't0');
    await assert.rejects(c.getSession('s0000000009'), (e: unknown) => e instanceof SessionNotFoundError && e.status === 404 && e.code === 'session_not_found');
    const s = await c.createSession({});
    await assert.rejects(c.request('GET', `/v1/sessions/${s.id}?generation=7`), (e: unknown) => e instanceof StaleGenerationError && e.status === 409);
    await assert.rejects(new DrumsClient(url, 'wrong').listSessions(), (e: unknown) => e instanceof UnauthorizedError && e.status === 401);
  });

  it('gives up after its timeout with ClientTimeoutError, and says NoDaemonError when nothing listens', async () => {
    const silent = createServer(() => {
      /* never answers */
    });
    silent.listen(0, '127.0.0.1');
    const port = await listen(silent);
    try {
      const t0 = performance.now();
      await assert.rejects(
        new DrumsClient(`http://127.0.0.1:${port}`, 't0', { timeoutMs: 200 }).listSessions(),
        (e: unknown) => e instanceof ClientTimeoutError && e.status === 0,
      );
      assert.ok(performance.now() - t0 < 10_000);
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
    // The silent server's port is closed now: nothing answers there.
    await assert.rejects(
      new DrumsClient(`http://127.0.0.1:${port}`, 't0').listSessions(),
      (e: unknown) => e instanceof NoDaemonError && e.code === 'no_daemon',
    );
  });
});
