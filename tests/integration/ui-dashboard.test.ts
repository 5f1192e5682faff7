// The live dashboard (/ui) in a real browser (Playwright driving Debian's Chromium): it shows
// every session with live thumbnails, a click and keys typed in the page reach the session, and
// a take-over from the page blocks the agent (409) until it is released. The browser logs in with a
// one-time code (`drums ui`): no secret in any URL it keeps, a used or expired code refused, and the
// login cookie honoured only on the daemon's own page's requests.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
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
  const login = async () => {
    const r = await fetch(`${d.url}/v1/ui/login`, { method: 'POST', headers: { authorization: `Bearer ${d.token}` } });
    assert.equal(r.status, 201);
    return (await r.json()) as { url: string; code: string; expiresAt: string };
  };
  /** A code issued in `before`, left unused until the last test: it must have expired by then. */
  let stale: { url: string; code: string; expiresAt: string };
  const agentAct = (id: string) =>
    fetch(`${d.url}/v1/sessions/${id}/actions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ actions: [{ type: 'move', x: 3, y: 3 }] }),
    });

  before(async () => {
    d = await startDaemon();
    stale = await login();
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

  it('is refused without a login; the token is no longer accepted in a URL', async () => {
    assert.equal((await fetch(`${d.url}/ui`)).status, 401);
    assert.equal((await fetch(`${d.url}/ui?token=wrong`)).status, 401);
    const withToken = await fetch(`${d.url}/ui?token=${d.token}`);
    assert.equal(withToken.status, 401);
    assert.match(((await withToken.json()) as { error: { message: string } }).error.message, /drums ui/);
    assert.equal((await fetch(`${d.url}/ui?code=${'A'.repeat(43)}`, { redirect: 'manual' })).status, 401);
    const p = await browser!.newPage();
    const r = await p.goto(`${d.url}/ui`);
    assert.equal(r?.status(), 401);
    await p.close();
  });

  it("a code works once; the cookie counts only on the daemon's own page", async () => {
    // The CLI prints the link (one per call).
    const cli = execFileSync('bin/drums', ['ui'], { env: { ...process.env, DRUMS_URL: d.url, DRUMS_TOKEN: d.token }, encoding: 'utf8' }).trim();
    assert.match(cli, new RegExp(`^${d.url.replace(/[.]/g, '\\.')}/ui\\?code=[A-Za-z0-9_-]{43}$`));
    const first = await fetch(cli, { redirect: 'manual' });
    assert.equal(first.status, 303);
    assert.equal(first.headers.get('location'), '/ui');
    const cookie = first.headers.get('set-cookie') ?? '';
    assert.match(cookie, /^drums_ui_[a-z0-9]+=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+$/);
    const jar = cookie.split(';')[0]!;
    // Spent: the same link again is refused.
    assert.equal((await fetch(cli, { redirect: 'manual' })).status, 401);
    const get = (path: string, h: Record<string, string>) => fetch(`${d.url}${path}`, { headers: { cookie: jar, ...h }, redirect: 'manual' });
    assert.equal((await get('/v1/sessions', { 'sec-fetch-site': 'same-origin' })).status, 200);
    assert.equal((await get('/ui', { 'sec-fetch-site': 'none' })).status, 200);
    // Another port of 127.0.0.1 is the same site: its page's requests would carry a SameSite=Strict cookie.
    for (const site of ['same-site', 'cross-site']) assert.equal((await get('/v1/sessions', { 'sec-fetch-site': site })).status, 401, site);
    assert.equal((await get('/v1/sessions', {})).status, 401, 'no Sec-Fetch-Site');
    assert.equal((await get('/v1/sessions', { 'sec-fetch-site': 'none' })).status, 401, 'a typed URL other than /ui');
    assert.equal(
      (await fetch(`${d.url}/v1/sessions`, { headers: { cookie: `${jar.split('=')[0]}=${'B'.repeat(43)}`, 'sec-fetch-site': 'same-origin' } })).status,
      401,
    );
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
    const link = await login();
    await p.goto(link.url);
    // No secret in the address bar, in the tab's history or in the page's reach.
    assert.equal(p.url(), `${d.url}/ui`);
    const cdp = await browser!.newCDPSession(p);
    const { entries } = (await cdp.send('Page.getNavigationHistory')) as { entries: { url: string }[] };
    await cdp.detach();
    assert.deepEqual(
      entries.map((e) => e.url).filter((u) => u !== 'about:blank'),
      [`${d.url}/ui`],
    );
    assert.deepEqual(await p.evaluate(() => [document.cookie, sessionStorage.length, localStorage.length]), ['', 0, 0]);
    const [c] = (await browser!.cookies(d.url)).filter((x) => x.name.startsWith('drums_ui_'));
    assert.ok(c && c.httpOnly && c.sameSite === 'Strict', JSON.stringify(c));
    assert.ok(!(await p.content()).includes(d.token) && !(await p.content()).includes(link.code));
    // The code is spent: the same link in another tab gets nothing.
    const again = await browser!.newPage();
    assert.equal((await again.goto(link.url))?.status(), 401);
    await again.close();
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

  it('lists episodes, filters them by outcome, and replays one: frames, actions drawn and captioned, tree', async () => {
    // A recorded session: three steps (a click, a drag, keys and text), a tree read after the first; a reset, then
    // one more step. Generation 1 failed, generation 2 succeeded.
    const r = await d.client.createSession({ image: 'minimal', screen: '800x600', labels: { role: 'recorded' }, record: { frames: 2, a11y: true } });
    sessions.push(r);
    await d.client.act(r.id, { actions: [{ type: 'click', x: 100, y: 120 }], screenshot: true });
    await d.client.a11y(r.id);
    await d.client.act(r.id, {
      actions: [
        {
          type: 'drag',
          path: [
            { x: 200, y: 200 },
            { x: 300, y: 250 },
          ],
        },
      ],
      screenshot: true,
    });
    await d.client.act(r.id, {
      actions: [
        { type: 'type', text: 'hello' },
        { type: 'key', keys: ['ctrl', 'a'] },
      ],
      screenshot: true,
    });
    await d.client.resetSession(r.id);
    await d.client.act(r.id, { actions: [{ type: 'click', x: 10, y: 10 }], screenshot: true });
    await d.client.setEpisodeOutcome(r.id, 1, { reward: 0, outcome: 'failure' });
    await d.client.setEpisodeOutcome(r.id, 2, { reward: 1, outcome: 'success' });
    const api1 = await d.client.getEpisode(r.id, 1, { steps: true });

    const p = await browser!.newPage();
    const errors: string[] = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto((await login()).url);
    // The session's own list, from its detail view: both attempts, newest first.
    await p.locator(`.card[data-id="${r.id}"]`).click();
    await p.locator('#sessep').click();
    const rows = p.locator('#eplist tr.ep');
    await until("the session's episodes", async () => (await rows.count()) === 2);
    assert.deepEqual(await rows.evaluateAll((trs) => trs.map((t) => (t as HTMLElement).dataset.key)), [`${r.id}/2`, `${r.id}/1`]);
    // Every episode, failures only, then successes only.
    await p.locator('#epback').click();
    await p.locator('#allep').click();
    await p.locator('#outcome').selectOption('failure');
    await until('the failures', async () => {
      const keys = await rows.evaluateAll((trs) => trs.map((t) => `${(t as HTMLElement).dataset.key} ${(t as HTMLElement).dataset.outcome}`));
      return keys.length === 1 && keys[0] === `${r.id}/1 failure`;
    });
    await p.locator('#outcome').selectOption('success');
    await until('the successes', async () => (await rows.evaluateAll((trs) => trs.map((t) => (t as HTMLElement).dataset.key))).join() === `${r.id}/2`);
    await p.locator('#outcome').selectOption('failure');
    await until('the failures again', async () => (await rows.count()) === 1 && (await rows.first().getAttribute('data-key')) === `${r.id}/1`);
    await rows.first().click();

    // The replay of generation 1: its generation and outcome, then step by step.
    await until('the replay', async () => (await p.locator('#rpgen').innerText()) === '1');
    assert.match(await p.locator('#rpoutcome').innerText(), /failure reward 0/);
    const frame = p.locator('#frame');
    /** Whether the canvas is the marks' red at a screen point (the frame is drawn 1:1, 800x600). */
    const red = async (x: number, y: number) => {
      const [r0, g, b] = await frame.evaluate((c: HTMLCanvasElement, [px, py]) => Array.from(c.getContext('2d')!.getImageData(px!, py!, 1, 1).data), [x, y]);
      return r0! > 200 && g! < 60 && b! < 60;
    };
    /** Presses ▶ until the scrubber shows the step's first position (the frame drawn). */
    const toStep = async (n: number) => {
      await until(`step ${n} on the scrubber`, async () => {
        if (Number(await frame.getAttribute('data-step')) >= n) return true;
        await p.locator('#next').click();
        return false;
      });
      assert.equal(Number(await frame.getAttribute('data-step')), n);
    };
    await toStep(1);
    const files1 = new Set([api1.steps![0]!.frame, ...api1.timeline!.filter((f) => f.step === 1).map((f) => f.file)]);
    assert.ok(files1.has(await frame.getAttribute('data-file')), 'a frame of step 1');
    assert.equal(await frame.getAttribute('data-marks'), 'click@100,120');
    assert.ok(await red(100, 120), 'the click drawn where it happened');
    assert.match(await p.locator('#caption').innerText(), /step 1 \(api\)\nclick 100,120/);
    await until('the tree read after step 1', async () => /<|accessib/i.test(await p.locator('#tree').innerText()));
    assert.equal(await p.locator('#tree').isVisible(), true);
    await toStep(2);
    assert.equal(await frame.getAttribute('data-marks'), 'drag@300,250');
    assert.ok(await red(300, 250), "the drag's end drawn");
    assert.ok(await red(250, 225), "the drag's path drawn");
    assert.match(await p.locator('#caption').innerText(), /drag 200,200 → 300,250/);
    await toStep(3);
    const cap = await p.locator('#caption').innerText();
    assert.match(cap, /type "hello"/);
    assert.match(cap, /key ctrl\+a/);
    assert.equal(await frame.getAttribute('data-marks'), '');
    // And back with the scrubber itself.
    await p.locator('#scrub').evaluate((el: HTMLInputElement) => {
      el.value = '0';
      el.dispatchEvent(new Event('input'));
    });
    await until('the start', async () => (await frame.getAttribute('data-step')) === '0' || (await frame.getAttribute('data-step')) === '1');
    assert.deepEqual(errors, []);
    await p.close();
  });

  it('an unused code has expired after 60 s', async () => {
    const wait = Date.parse(stale.expiresAt) - Date.now() + 500;
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const p = await browser!.newPage();
    assert.equal((await p.goto(stale.url))?.status(), 401);
    assert.equal(p.url(), stale.url);
    await p.close();
  });
});
