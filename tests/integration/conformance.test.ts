import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { assertClean, removeStateDir, startDaemon, type TestDaemon } from '../helpers.ts';

// The black-box conformance suite against a real daemon, plus what it cannot
// check from outside one daemon: the rate limit and a real browser's cross-origin fetch.
describe('API conformance', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    await d.finish();
  });

  it('drums conformance passes every check (≥ 40) and leaves no session', async () => {
    const r = d.cli(['conformance', d.url, '--token', d.token, '--image', 'minimal']);
    process.stdout.write(r.stdout);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    const m = /^(\d+)\/(\d+) checks passed$/m.exec(r.stdout);
    assert.ok(m, r.stdout);
    assert.equal(m[1], m[2]);
    assert.ok(Number(m[2]) >= 40, `only ${m[2]} checks`);
    assert.deepEqual(await d.client.listSessions(), []);
  });

  it('drums conformance exits non-zero when a check fails (wrong token)', () => {
    const r = d.cli(['conformance', d.url, '--token', 'wrong', '--filter', 'meta']);
    assert.notEqual(r.status, 0);
    assert.match(r.stdout, /^FAIL /m);
  });

  it('a per-token rate limit answers 429 rate_limited with Retry-After', async () => {
    const small = await startDaemon({ DRUMS_RATE_LIMIT: '5', DRUMS_RATE_BURST: '5' });
    try {
      const statuses: number[] = [];
      let limited: Response | undefined;
      for (let i = 0; i < 12; i++) {
        const r = await fetch(`${small.url}/v1/sessions`, { headers: { authorization: `Bearer ${small.token}` } });
        statuses.push(r.status);
        if (r.status === 429) limited ??= r;
        else await r.arrayBuffer();
      }
      assert.ok(
        statuses.slice(0, 5).every((s) => s === 200),
        statuses.join(','),
      );
      assert.ok(limited, statuses.join(','));
      assert.equal(((await limited.json()) as { error: { code: string } }).error.code, 'rate_limited');
      assert.ok(Number(limited.headers.get('retry-after')) >= 1);
      // Another token (a wrong one) has its own bucket: 401, not 429.
      assert.equal((await fetch(`${small.url}/v1/sessions`, { headers: { authorization: 'Bearer other' } })).status, 401);
    } finally {
      await small.stop();
      assertClean(small.instance, small.stateDir);
      removeStateDir(small.stateDir);
    }
  });

  it('a web page on another 127.0.0.1 origin cannot drive the daemon (headless Chromium)', async () => {
    const { chromium } = await import('playwright-core');
    const page = `<!doctype html><title>evil</title><script>
      window.results = (async () => {
        const out = {};
        try {
          const r = await fetch(${JSON.stringify(d.url)} + '/v1/sessions', { method: 'POST', headers: { authorization: 'Bearer ${d.token}', 'content-type': 'application/json' }, body: '{"image":"minimal"}' });
          out.cors = 'status ' + r.status;
        } catch (e) { out.cors = 'refused: ' + e.name; }
        try {
          const r = await fetch(${JSON.stringify(d.url)} + '/v1/sessions', { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: '{"image":"minimal"}' });
          out.simple = 'opaque ' + r.type;
        } catch (e) { out.simple = 'refused: ' + e.name; }
        return out;
      })();
    </script>`;
    const site = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(page);
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    const sitePort = (site.address() as AddressInfo).port;
    const before = await forbiddenOriginCount(d);
    const profile = mkdtempSync('/var/tmp/drums-test-chromium-');
    let browser: Awaited<ReturnType<typeof chromium.launchPersistentContext>> | undefined;
    try {
      browser = await chromium.launchPersistentContext(profile, {
        executablePath: '/usr/bin/chromium',
        headless: true,
        args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      });
      const p = await browser.newPage();
      await p.goto(`http://127.0.0.1:${sitePort}/`);
      const results = (await p.evaluate('window.results')) as { cors: string; simple: string };
      // The preflight (OPTIONS with Origin) is refused, so the real request is never sent.
      assert.match(results.cors, /^refused/, JSON.stringify(results));
      // A "simple" no-cors POST reaches the daemon but is refused on its Origin.
      assert.equal(results.simple, 'opaque opaque', JSON.stringify(results));
    } finally {
      await browser?.close();
      site.close();
      rmSync(profile, { recursive: true, force: true });
    }
    assert.deepEqual(await d.client.listSessions(), [], 'the page created a session');
    assert.ok((await forbiddenOriginCount(d)) >= before + 2, 'the daemon did not see and refuse both requests');
  });
});

async function forbiddenOriginCount(d: TestDaemon): Promise<number> {
  const text = await (await fetch(`${d.url}/metrics`, { headers: { authorization: `Bearer ${d.token}` } })).text();
  return Number(/^drums_http_errors_total\{code="forbidden_origin"\} (\d+)$/m.exec(text)?.[1] ?? 0);
}
