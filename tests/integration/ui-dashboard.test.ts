// The live dashboard (/ui) in a real browser (Playwright driving Debian's Chromium): it shows
// every session with live thumbnails, a click and keys typed in the page reach the session, and
// a take-over from the page blocks the agent (409) until it is released.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

type Ctx = Awaited<ReturnType<typeof import('playwright-core').chromium.launchPersistentContext>>;

describe('dashboard in Chromium (minimal image)', () => {
  let d: TestDaemon;
  const sessions: SessionInfo[] = [];
  let browser: Ctx | undefined;
  let profile = '';

  const until = async <T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 30_000): Promise<T> => {
    const end = Date.now() + ms;
    let last: unknown;
    for (;;) {
      try {
        const v = await fn();
        if (v) return v;
      } catch (e) {
        last = e;
      }
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const agentAct = (id: string) =>
    fetch(`${d.url}/v1/sessions/${id}/actions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ actions: [{ type: 'move', x: 3, y: 3 }] }),
    });

  before(async () => {
    d = await startDaemon();
    sessions.push(await d.client.createSession({ image: 'minimal', screen: '800x600', labels: { role: 'watched' } }));
    sessions.push(await d.client.createSession({ image: 'minimal', screen: '800x600', labels: { role: 'other' } }));
    const { chromium } = await import('playwright-core');
    profile = mkdtempSync('/var/tmp/drums-test-chromium-');
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: '/usr/bin/chromium',
      headless: true,
      viewport: { width: 1400, height: 1000 },
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  after(async () => {
    try {
      await browser?.close();
      if (profile) rmSync(profile, { recursive: true, force: true });
      for (const s of sessions) await d.client.destroySession(s.id).catch(() => {});
    } finally {
      await d?.finish();
    }
  });

  it('is refused without the token', async () => {
    assert.equal((await fetch(`${d.url}/ui`)).status, 401);
    assert.equal((await fetch(`${d.url}/ui?token=wrong`)).status, 401);
    const p = await browser!.newPage();
    const r = await p.goto(`${d.url}/ui`);
    assert.equal(r?.status(), 401);
    await p.close();
  });

  it('shows every session live, a click and keys reach it, a take-over blocks the agent', async () => {
    const [a, b] = sessions;
    // A window in session a that writes what is typed into it to a file.
    const typer = d.client
      .exec(a.id, { shell: 'timeout 120 xterm -geometry 60x10+0+0 -e sh -c "cat > /tmp/typed" & echo $! > /tmp/typer.pid; wait', timeoutMs: 150_000 })
      .catch(() => undefined);
    const p = await browser!.newPage();
    const errors: string[] = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(`${d.url}/ui?token=${d.token}`);
    // The token leaves the address bar.
    assert.equal(new URL(p.url()).search, '');
    for (const s of [a, b]) {
      const card = p.locator(`.card[data-id="${s.id}"]`);
      await card.waitFor({ timeout: 30_000 });
      await until(`a live thumbnail of ${s.id}`, async () => Number(await card.locator('img').getAttribute('data-frames')) >= 1);
      const text = await card.locator('.meta').innerText();
      assert.match(text, /ready/);
      assert.match(text, /gen 1/);
      assert.match(text, /minimal/);
      assert.match(text, new RegExp(`role=${s.labels!.role}`));
    }
    await until('CPU and memory on the cards', async () => /mem \d+ MiB/.test(await p.locator(`.card[data-id="${a.id}"] .meta`).innerText()));

    // Watch a, take it over.
    await p.locator(`.card[data-id="${a.id}"]`).click();
    const view = p.locator('#view');
    await until('full-rate frames', async () => Number(await view.getAttribute('data-frames')) >= 1);
    await p.locator('#take').click();
    await p.locator('#release').waitFor({ state: 'visible' });
    const held = (await (await fetch(`${d.url}/v1/sessions/${a.id}/takeover`, { headers: { authorization: `Bearer ${d.token}` } })).json()) as {
      takeover: { holder: string } | null;
    };
    assert.equal(held.takeover?.holder, 'dashboard');
    // The session view and the list name the holder and the time, and so does the card.
    const view1 = await d.client.getSession(a.id);
    assert.equal(view1.takeover?.holder, 'dashboard');
    assert.ok(Math.abs(Date.parse(view1.takeover!.since) - Date.now()) < 120_000, `since ${view1.takeover?.since}`);
    const listed = await d.client.listSessions();
    assert.deepEqual(listed.find((s) => s.id === a.id)?.takeover, view1.takeover);
    assert.equal(listed.find((s) => s.id === b.id)?.takeover, null);
    await until('the card shows the holder', async () => /taken over by dashboard since/.test(await p.locator(`.card[data-id="${a.id}"] .meta`).innerText()));
    const blocked = await agentAct(a.id);
    assert.equal(blocked.status, 409);
    assert.equal(((await blocked.json()) as { error: { code: string } }).error.code, 'session_taken_over');
    assert.equal((await agentAct(b.id)).status, 200, 'the other session is not held');

    // Wait for the xterm, then click into it in the page and type.
    await until('the xterm window', async () => (await d.client.windows(a.id)).windows.some((w) => w.className === 'XTerm'));
    await until('frames after the xterm appeared', async () => Number(await view.getAttribute('data-frames')) >= 2);
    const box = (await view.boundingBox())!;
    const nat = (await view.evaluate((img: HTMLImageElement) => [img.naturalWidth, img.naturalHeight])) as number[];
    assert.deepEqual(nat, [800, 600]);
    const [tx, ty] = [120, 40]; // screen pixels inside the xterm
    await p.mouse.click(box.x + (tx * box.width) / 800, box.y + (ty * box.height) / 600);
    await until('the pointer at the clicked place', async () => {
      const c = (await d.client.windows(a.id)).cursor;
      return Math.abs(c.x - tx) <= 2 && Math.abs(c.y - ty) <= 2;
    });
    await until('the click results', async () => Number(await view.getAttribute('data-results')) >= 2);
    await p.keyboard.type('hi drums');
    await p.keyboard.press('Enter');
    await until('the typed text in the session', async () => {
      const r = await d.client.exec(a.id, { argv: ['cat', '/tmp/typed'] });
      return r.stdout === 'hi drums\n';
    });

    // Release from the page: the agent acts again.
    await p.locator('#release').click();
    await p.locator('#take').waitFor({ state: 'visible' });
    await until('the agent unblocked', async () => (await agentAct(a.id)).status === 200);
    assert.equal((await d.client.getSession(a.id)).takeover, null);
    await until('the card no longer shows a holder', async () => !/taken over/.test(await p.locator(`.card[data-id="${a.id}"] .meta`).innerText()));
    assert.deepEqual(errors, []);
    await p.close();
    await d.client.exec(a.id, { shell: 'kill "$(cat /tmp/typer.pid)"' });
    await typer;
  });
});
