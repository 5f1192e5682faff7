import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { randomInt } from 'node:crypto';
import type { DrumsApiError, SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// End to end: a scripted agent completes a web form in the session's Chromium using ONLY
// screenshots and actions through the HTTP API (no DOM access, no exec): it finds the fields by
// colour in raw screenshots. A task server on the session's gateway address records each
// submission with the generation and attempt token the page URL carried; after a reset the old
// generation is refused and every row is attributed to the right attempt.

type Rgb = [number, number, number];
const RED: Rgb = [255, 0, 0],
  GREEN: Rgb = [0, 255, 0],
  BLUE: Rgb = [0, 0, 255],
  MAGENTA: Rgb = [255, 0, 255];

function formPage(attempt: string, generation: string): string {
  const esc = (v: string) => v.replace(/[^0-9A-Za-z-]/g, '');
  return `<!doctype html><html><head><title>task form</title><style>
body{margin:0;background:#f0f0f0;font:20px sans-serif}
input{position:absolute;border:0;outline:0;font-size:22px;box-sizing:border-box}
#name{left:120px;top:120px;width:360px;height:50px;background:#ff0000;color:#fff}
#email{left:120px;top:260px;width:360px;height:50px;background:#00ff00}
#go{left:620px;top:420px;width:200px;height:70px;background:#0000ff;color:#fff}
</style></head><body><form method=post action=/submit>
<input id=name name=name autocomplete=off><input id=email name=email autocomplete=off>
<input type=hidden name=attempt value="${esc(attempt)}"><input type=hidden name=generation value="${esc(generation)}">
<input id=go type=submit value=Send></form></body></html>`;
}
const DONE_PAGE = '<!doctype html><title>thanks</title><body style="margin:0;background:#ff00ff"><h1>thanks</h1></body>';

interface Row {
  name: string;
  email: string;
  attempt: string;
  generation: string;
  from: string;
}

describe('e2e: a screenshot-only agent completes a form, across a reset', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  let server: Server;
  const port = randomInt(20000, 60000);
  const rows: Row[] = [];

  before(async () => {
    d = await startDaemon();
    s = await d.client.createSession({ image: 'default', url: 'about:blank', hostPorts: [port], screen: '1280x800' });
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => {
        body += c;
      });
      req.on('end', () => {
        const u = new URL(req.url ?? '/', 'http://x');
        res.setHeader('content-type', 'text/html; charset=utf-8');
        if (req.method === 'POST' && u.pathname === '/submit') {
          const f = new URLSearchParams(body);
          rows.push({
            name: f.get('name') ?? '',
            email: f.get('email') ?? '',
            attempt: f.get('attempt') ?? '',
            generation: f.get('generation') ?? '',
            from: req.socket.remoteAddress ?? '',
          });
          res.end(DONE_PAGE);
        } else if (u.pathname === '/form') {
          res.end(formPage(u.searchParams.get('attempt') ?? '', u.searchParams.get('generation') ?? ''));
        } else {
          res.statusCode = 404;
          res.end('no');
        }
      });
    });
    await new Promise<void>((r, j) => {
      server.once('error', j);
      server.listen(port, s.network.gateway, () => r());
    });
  });

  after(async () => {
    server?.close();
    if (s) await d.client.destroySession(s.id).catch(() => {});
    await d.finish();
  });

  // ---- the agent: sees only raw screenshots, acts only through /actions ----
  async function look(generation: number) {
    const shot = await d.client.screenshotEx(s.id, { format: 'raw', cursor: false, generation });
    return shot;
  }
  function findBox(img: { data: Buffer; width: number; height: number }, rgb: Rgb): { x: number; y: number; n: number } | null {
    let sx = 0,
      sy = 0,
      n = 0;
    const { data, width } = img;
    for (let i = 0, p = 0; i < data.length; i += 3, p++) {
      if (Math.abs(data[i]! - rgb[0]) < 8 && Math.abs(data[i + 1]! - rgb[1]) < 8 && Math.abs(data[i + 2]! - rgb[2]) < 8) {
        sx += p % width;
        sy += Math.floor(p / width);
        n++;
      }
    }
    return n > 2000 ? { x: Math.round(sx / n), y: Math.round(sy / n), n } : null;
  }
  async function waitFor(generation: number, rgb: Rgb, ms = 20_000) {
    const end = Date.now() + ms;
    for (;;) {
      const box = findBox(await look(generation), rgb);
      if (box) return box;
      if (Date.now() > end) throw new Error(`the agent never saw colour ${rgb}`);
      await new Promise((r) => setTimeout(r, 150));
    }
  }
  async function runTask(generation: number, attempt: string, name: string, email: string) {
    const url = `http://${s.network.gateway}:${port}/form?attempt=${attempt}&generation=${generation}`;
    let red: { x: number; y: number } | null = null;
    for (let i = 0; i < 3 && !red; i++) {
      await d.client.act(s.id, {
        generation,
        actions: [
          { type: 'key', keys: ['ctrl', 'l'] },
          { type: 'wait', ms: 300 },
          { type: 'type', text: url + '\n' },
        ],
      });
      red = await waitFor(generation, RED, 15_000).catch(() => null);
    }
    assert.ok(red, 'the form is on screen');
    const shot = await look(generation);
    const green = findBox(shot, GREEN)!,
      blue = findBox(shot, BLUE)!;
    assert.ok(green && blue, 'all three targets are visible');
    // Each step: act, then look (the action response carries the next observation).
    const step = await d.client.act(s.id, {
      generation,
      actions: [
        // Like a real agent, give the page a moment between fields (keystrokes and the next
        // click travel to the renderer by different paths).
        { type: 'click', x: red.x, y: red.y },
        { type: 'wait', ms: 100 },
        { type: 'type', text: name },
        { type: 'wait', ms: 200 },
        { action: 'left_click', coordinate: [green.x, green.y] },
        { type: 'wait', ms: 100 },
        { action: 'type', text: email },
      ],
      screenshot: { format: 'png', scale: { width: 640, height: 400 } },
    });
    assert.equal(step.generation, generation);
    assert.ok(step.screenshot && step.screenshot.width === 640);
    await d.client.act(s.id, { generation, actions: [{ action_type: 'CLICK', parameters: { x: blue.x, y: blue.y } }] });
    await waitFor(generation, MAGENTA);
  }

  it('fills and submits the form, is refused with the old generation after a reset, and every row has the right attempt', async () => {
    const t0 = performance.now();
    await runTask(1, s.attempt.token, 'Ada Lovelace', 'ada@example.org');
    const firstMs = performance.now() - t0;
    assert.equal(rows.length, 1);
    assert.deepEqual(rows[0], { name: 'Ada Lovelace', email: 'ada@example.org', attempt: s.attempt.token, generation: '1', from: s.network.address });

    const r = await d.client.resetSession(s.id);
    assert.equal(r.generation, 2);
    assert.notEqual(r.attempt.token, s.attempt.token);
    // The agent of attempt 1 acts late: refused, nothing runs.
    await assert.rejects(
      d.client.act(s.id, {
        generation: 1,
        actions: [
          { type: 'click', x: 300, y: 145 },
          { type: 'type', text: 'late' },
        ],
      }),
      (e: DrumsApiError) => e.status === 409 && e.code === 'stale_generation' && (e.details as { current: number }).current === 2,
    );
    await assert.rejects(d.client.screenshotEx(s.id, { generation: 1 }), (e: DrumsApiError) => e.status === 409 && e.code === 'stale_generation');

    await runTask(2, r.attempt.token, 'Grace Hopper', 'grace@example.org');
    assert.deepEqual(
      rows.map((x) => [x.generation, x.attempt, x.name, x.email]),
      [
        ['1', s.attempt.token, 'Ada Lovelace', 'ada@example.org'],
        ['2', r.attempt.token, 'Grace Hopper', 'grace@example.org'],
      ],
    );
    process.stderr.write(`# e2e: first task completed in ${Math.round(firstMs)} ms\n`);
  });
});
