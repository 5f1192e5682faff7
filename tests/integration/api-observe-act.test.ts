import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { randomInt } from 'node:crypto';
import { rmSync } from 'node:fs';
import sharp from 'sharp';
import type { DrumsApiError, SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// Observe and act through the daemon's HTTP API on a real `default` session: every action type is
// verified by the events the session's Chromium receives (a page served by a task server on the
// session's gateway address records them and posts them back).

type Ev = { t: string; [k: string]: unknown };

const PAGE = `<!doctype html><html><head><title>drums-events</title><style>
html,body{margin:0;height:100%;overflow:hidden}
#pad{position:fixed;left:0;top:0;width:100%;height:100%;background:#204060}
#t{position:fixed;left:700px;top:100px;width:400px;height:200px;box-sizing:border-box;background:#ffff00;font-size:20px}
</style></head><body><div id=pad></div><textarea id=t aria-label="notes"></textarea><script>
const q=[];let timer;
function log(o){q.push(o);clearTimeout(timer);timer=setTimeout(flush,20);}
function flush(){if(!q.length)return;fetch('/log',{method:'POST',body:JSON.stringify(q.splice(0))});}
for(const t of ['mousedown','mouseup','click','dblclick','contextmenu','auxclick'])addEventListener(t,e=>{if(t==='contextmenu'||(t==='mousedown'&&e.button===1))e.preventDefault();log({t,b:e.button,x:e.screenX,y:e.screenY,cx:e.clientX,cy:e.clientY,d:e.detail})},true);
addEventListener('mousemove',e=>{if(e.buttons)log({t:'mousemove',x:e.screenX,y:e.screenY,buttons:e.buttons})},true);

addEventListener('wheel',e=>{e.preventDefault();log({t:'wheel',dx:e.deltaX,dy:e.deltaY,x:e.screenX,y:e.screenY})},{capture:true,passive:false});
addEventListener('keydown',e=>log({t:'keydown',k:e.key,ctrl:e.ctrlKey,shift:e.shiftKey}),true);
addEventListener('keyup',e=>log({t:'keyup',k:e.key}),true);
document.getElementById('t').addEventListener('input',e=>log({t:'value',v:e.target.value}));
log({t:'load'});
</script></body></html>`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('observe and act through the API (default image, Chromium)', () => {
  let d: TestDaemon;
  let s: SessionInfo;
  let server: Server;
  const port = randomInt(20000, 60000);
  const events: Ev[] = [];
  /** Screen offset of the page's viewport (learned from the first click). */
  let off = { x: 0, y: 0 };

  const until = async <T>(what: string, fn: () => T | undefined | false | Promise<T | undefined | false>, ms = 20_000): Promise<T> => {
    const end = Date.now() + ms;
    for (;;) {
      const v = await fn();
      if (v) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; events: ${JSON.stringify(events.slice(-12))}`);
      await sleep(50);
    }
  };
  const act = (actions: unknown[], extra: Record<string, unknown> = {}) => d.client.act(s.id, { actions, ...extra });
  const since = (n: number) => events.slice(n);

  before(async () => {
    d = await startDaemon();
    s = await d.client.createSession({ image: 'default', url: 'about:blank', hostPorts: [port], screen: '1280x800' });
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => {
        body += c;
      });
      req.on('end', () => {
        if (req.method === 'POST' && req.url === '/log') {
          try {
            events.push(...(JSON.parse(body) as Ev[]));
          } catch {}
          res.end('ok');
        } else {
          res.setHeader('content-type', 'text/html; charset=utf-8');
          res.end(PAGE);
        }
      });
    });
    await new Promise<void>((r, j) => {
      server.once('error', j);
      server.listen(port, s.network.gateway, () => r());
    });
    // Navigate like an agent would: focus the omnibox, type the URL, press Enter.
    await until('the Chromium window', async () => (await d.client.windows(s.id)).windows.find((w) => /chromium/i.test(w.className)));
    const url = `http://${s.network.gateway}:${port}/events`;
    for (let i = 0; i < 3 && !events.some((e) => e.t === 'load'); i++) {
      await act([
        { type: 'key', keys: ['ctrl', 'l'] },
        { type: 'wait', ms: 300 },
        { type: 'type', text: url + '\n' },
      ]);
      await until('the page to load', () => events.some((e) => e.t === 'load'), 15_000).catch(() => {});
    }
    assert.ok(
      events.some((e) => e.t === 'load'),
      'the event page loaded',
    );
    await sleep(500);
  });

  after(async () => {
    server?.close();
    if (s) await d.client.destroySession(s.id).catch(() => {});
    await d.finish();
  });

  it('left click lands at the screen coordinates sent', async () => {
    const n = events.length;
    const r = await act([{ type: 'click', x: 200, y: 400 }]);
    assert.equal(r.generation, 1);
    const click = await until('click', () => since(n).find((e) => e.t === 'click'));
    const down = since(n).find((e) => e.t === 'mousedown')!;
    assert.equal(down.b, 0);
    assert.deepEqual([click.x, click.y], [200, 400], 'screenX/screenY equal the coordinates sent');
    off = { x: 200 - (click.cx as number), y: 400 - (click.cy as number) };
    assert.ok(off.y > 30 && off.y < 200, `viewport offset below the browser UI: ${JSON.stringify(off)}`);
  });

  it('double, triple, right and middle clicks', async () => {
    await sleep(1000); // past the multi-click interval
    let n = events.length;
    await act([{ type: 'click', x: 300, y: 450, count: 2 }]);
    await until('dblclick', () => since(n).find((e) => e.t === 'dblclick' && e.x === 300 && e.y === 450));
    await sleep(1000);
    n = events.length;
    await act([{ type: 'click', x: 320, y: 470, button: 'right' }]);
    const ctx = await until('contextmenu', () => since(n).find((e) => e.t === 'contextmenu'));
    assert.deepEqual([ctx.x, ctx.y, ctx.b], [320, 470, 2]);
    n = events.length;
    await act([{ action_type: 'CLICK', parameters: { button: 'middle', x: 330, y: 480 } }]); // OSWorld vocabulary
    const mid = await until('middle mousedown', () => since(n).find((e) => e.t === 'mousedown' && e.b === 1));
    assert.deepEqual([mid.x, mid.y], [330, 480]);
  });

  // Presses sent within the same X millisecond made Chromium count 1, 2, 2 (a press with the
  // previous one's timestamp is not a new click); input.ts spaces them by MULTI_CLICK_GAP_MS.
  it('triple click reaches Chromium as a triple click', async () => {
    await sleep(1000);
    const n = events.length;
    await act([{ action: 'triple_click', coordinate: [310, 460] }]); // Anthropic vocabulary
    await until('3rd mousedown', () => since(n).find((e) => e.t === 'mousedown' && e.d === 3), 3000);
  });

  it('mouse down/up and a drag with intermediate motion', async () => {
    // The triple click above selected text; pressing on a selection and moving starts a
    // drag-and-drop, which swallows the mouseup. Clear the selection first.
    await act([{ type: 'click', x: 1000, y: 750 }]);
    await sleep(1000);
    let n = events.length;
    await act([
      { type: 'move', x: 100, y: 500 },
      { type: 'mouse_down', button: 'left' },
      { type: 'wait', ms: 50 },
      { type: 'mouse_up', button: 'left', x: 120, y: 520 },
    ]);
    const up = await until('mouseup', () => since(n).find((e) => e.t === 'mouseup'));
    const down = since(n).find((e) => e.t === 'mousedown')!;
    assert.deepEqual([down.x, down.y, up.x, up.y], [100, 500, 120, 520]);
    await sleep(600);
    n = events.length;
    await act([
      {
        type: 'drag',
        path: [
          { x: 100, y: 600 },
          { x: 400, y: 650 },
        ],
      },
    ]);
    const dragUp = await until('drag mouseup', () => since(n).find((e) => e.t === 'mouseup'));
    const evs = since(n);
    const dDown = evs.find((e) => e.t === 'mousedown')!;
    // Chromium's X11 event source merges queued motion events, so it sees at least one motion while
    // pressed (the intermediate steps are there on the wire; Chromium coalesces them).
    const moves = evs.filter((e) => e.t === 'mousemove' || e.t === 'pmove');
    assert.ok(moves.length >= 1, `motion while pressed (${moves.length})`);
    const upIdx = evs.indexOf(dragUp),
      downIdx = evs.indexOf(dDown);
    assert.ok(
      evs.findIndex((e) => e.t === 'mousemove') > downIdx && evs.findIndex((e) => e.t === 'mousemove') < upIdx,
      'the motion comes between press and release',
    );
  });

  it('vertical and horizontal scrolling', async () => {
    let n = events.length;
    await act([{ type: 'scroll', x: 400, y: 500, dy: 2, dx: 0 }]);
    await until('wheel down', () => since(n).filter((e) => e.t === 'wheel' && (e.dy as number) > 0).length >= 2);
    n = events.length;
    await act([{ action: 'scroll', coordinate: [400, 500], scroll_direction: 'up', scroll_amount: 1 }]);
    await until('wheel up', () => since(n).find((e) => e.t === 'wheel' && (e.dy as number) < 0));
    n = events.length;
    await act([{ type: 'scroll', x: 400, y: 500, dx: 1, dy: 0 }]);
    await until('wheel right', () => since(n).find((e) => e.t === 'wheel' && (e.dx as number) > 0));
    n = events.length;
    await act([{ type: 'scroll', x: 400, y: 500, dx: -1, dy: 0 }]);
    await until('wheel left', () => since(n).find((e) => e.t === 'wheel' && (e.dx as number) < 0));
  });

  it('keys, hotkeys, key down/up and Unicode typing into a textarea', async () => {
    // Focus the textarea (client 700..1100 × 100..300).
    await act([{ type: 'click', x: off.x + 900, y: off.y + 200 }]);
    let n = events.length;
    await act([{ type: 'key', keys: ['ctrl', 'b'] }]);
    await until('ctrl+b', () => since(n).find((e) => e.t === 'keydown' && e.k === 'b' && e.ctrl === true));
    n = events.length;
    await act([{ action_type: 'HOTKEY', parameters: { keys: ['shift', 'a'] } }]);
    await until('shift+a', () => since(n).find((e) => e.t === 'keydown' && e.k === 'A' && e.shift === true));
    n = events.length;
    await act([
      { type: 'key_down', key: 'shift' },
      { type: 'key_up', key: 'shift' },
    ]);
    await until('Shift down/up', () => since(n).find((e) => e.t === 'keyup' && e.k === 'Shift'));
    assert.ok(since(n).find((e) => e.t === 'keydown' && e.k === 'Shift'));
    // Clear, then type the hard strings.
    await act([
      { type: 'key', keys: ['ctrl', 'a'] },
      { type: 'key', keys: ['BackSpace'] },
    ]);
    const text = 'é ß 日本 😀 <>?:"{}|~!@#$%^&*()_+ done';
    n = events.length;
    await act([{ type: 'type', text }]);
    const v = await until(
      'typed value',
      () =>
        since(n)
          .filter((e) => e.t === 'value')
          .at(-1)?.v === text && text,
    );
    assert.equal(v, text);
    n = events.length;
    await act([{ action_type: 'TYPING', parameters: { text: '\nline2' } }]);
    await until(
      'newline typed',
      () =>
        since(n)
          .filter((e) => e.t === 'value')
          .at(-1)?.v ===
          text + '\nline2' || undefined,
    );
  });

  it('wait waits, cursor_position reports, and the batch returns a screenshot', async () => {
    const t0 = performance.now();
    const r = await act([{ type: 'move', x: 640, y: 700 }, { type: 'wait', ms: 250 }, { type: 'cursor_position' }], {
      screenshot: { format: 'jpeg', quality: 50, scale: { width: 640, height: 400 } },
    });
    assert.ok(performance.now() - t0 >= 250);
    assert.ok(r.results[1]!.ms >= 249, `wait took ${r.results[1]!.ms} ms`);
    assert.deepEqual(r.results[2]!.cursor, { x: 640, y: 700 });
    assert.ok(r.screenshot);
    const meta = await sharp(Buffer.from(r.screenshot.data, 'base64')).metadata();
    assert.deepEqual([meta.format, meta.width, meta.height], ['jpeg', 640, 400]);
    // Agent-space coordinates: with scale 640x400, (100, 200) is screen (200, 400).
    const n = events.length;
    await act([{ type: 'click', x: 100, y: 200 }], { scale: { width: 640, height: 400 } });
    const c = await until('scaled click', () => since(n).find((e) => e.t === 'click'));
    assert.deepEqual([c.x, c.y], [200, 400]);
  });

  it('a batch is validated whole: a bad action names its field and nothing runs', async () => {
    await sleep(300);
    const n = events.length;
    const cases: [unknown[], string, string][] = [
      [
        [
          { type: 'click', x: 10, y: 10 },
          { type: 'click', x: 5000, y: 10 },
        ],
        'invalid_action',
        'actions[1].x',
      ],
      [
        [
          { type: 'click', x: 10, y: 10 },
          { action: 'left_click', coordinate: [-1, 3] },
        ],
        'invalid_action',
        'actions[1].coordinate[0]',
      ],
      [
        [
          { type: 'click', x: 10, y: 10 },
          { type: 'key', keys: ['NoSuchKey'] },
        ],
        'invalid_key',
        'actions[1]',
      ],
      [[{ type: 'click', x: 10, y: 10 }, { type: 'teleport' }], 'invalid_action', 'actions[1].type'],
      [
        [
          { type: 'click', x: 10, y: 10 },
          { type: 'screenshot', region: { x: 0, y: 0, width: 5000, height: 10 } },
        ],
        'invalid_action',
        'actions[1].region.width',
      ],
    ];
    for (const [actions, code, field] of cases) {
      await assert.rejects(act(actions), (e: DrumsApiError) => {
        assert.equal(e.status, 400, e.message);
        assert.equal(e.code, code, e.message);
        assert.ok(e.message.startsWith(field), `${e.message} names ${field}`);
        return true;
      });
    }
    await assert.rejects(
      act([{ type: 'click', x: 1, y: 1 }], { screenshot: { format: 'gif' } }),
      (e: DrumsApiError) => e.status === 400 && e.code === 'invalid_format',
    );
    await assert.rejects(
      act([{ type: 'click', x: 1, y: 1 }], { screenshot: { format: 'png', region: { x: 1270, y: 0, width: 20, height: 5 } } }),
      (e: DrumsApiError) => e.status === 400 && e.code === 'invalid_region' && e.message.startsWith('screenshot.region.width'),
    );
    await assert.rejects(act([], { bogus: 1 }), (e: DrumsApiError) => e.status === 400);
    await assert.rejects(act([{ type: 'click', x: 1, y: 1 }], { generation: 7 }), (e: DrumsApiError) => e.status === 409 && e.code === 'stale_generation');
    await sleep(500);
    assert.deepEqual(
      since(n).filter((e) => e.t === 'mousedown'),
      [],
      'no click of a refused batch ran',
    );
  });

  it('screenshots: formats, region, scale, headers and bad parameters', async () => {
    const raw = await d.client.screenshotEx(s.id, { format: 'raw', region: { x: 10, y: 20, width: 100, height: 50 } });
    assert.equal(raw.data.length, 100 * 50 * 3);
    assert.deepEqual([raw.width, raw.height, raw.generation], [100, 50, 1]);
    // The textarea is yellow (#ffff00): sample its middle from a raw region.
    const y = await d.client.screenshotEx(s.id, { format: 'raw', region: { x: off.x + 1000, y: off.y + 280, width: 4, height: 4 }, cursor: false });
    assert.ok(y.data[0]! > 240 && y.data[1]! > 240 && y.data[2]! < 20, `textarea pixel is yellow: ${[...y.data.subarray(0, 3)]}`);
    const scaled = await d.client.screenshotEx(s.id, { format: 'webp', scale: { width: 640, height: 400 } });
    assert.deepEqual([scaled.width, scaled.height, scaled.scaleX, scaled.scaleY], [640, 400, 2, 2]);
    assert.equal((await sharp(scaled.data).metadata()).format, 'webp');
    const png = await d.client.screenshotEx(s.id, {});
    assert.equal(png.data.subarray(1, 4).toString(), 'PNG');
    const j80 = await d.client.screenshotEx(s.id, { format: 'jpeg', quality: 80 });
    assert.equal(j80.mimeType, 'image/jpeg');
    const bad = async (q: string, status: number, code: string) => {
      const r = await fetch(`${d.url}/v1/sessions/${s.id}/screenshot?${q}`, { headers: { authorization: `Bearer ${d.token}` } });
      assert.equal(r.status, status, q);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, code, q);
    };
    await bad('format=gif', 400, 'invalid_format');
    await bad('quality=0&format=jpeg', 400, 'invalid_format');
    await bad('region=0,0,5000,10', 400, 'invalid_region');
    await bad('region=1,2,3', 400, 'invalid_region');
    await bad('scale=0x10', 400, 'invalid_region');
    await bad('generation=9', 409, 'stale_generation');
  });

  it('a11y: OSWorld XML of the page (tags, namespaces, coordinates, states) and JSON', async () => {
    const xml = await until(
      'Chromium in the a11y tree',
      async () => {
        const x = (await d.client.a11y(s.id)) as string;
        return x.includes('name="notes"') && x;
      },
      30_000,
    );
    assert.match(xml, /^<desktop-frame xmlns:st="[^"]+" xmlns:attr="[^"]+" xmlns:cp="[^"]+"/);
    assert.match(xml, /<application name="Chromium"/);
    assert.match(xml, /<\/desktop-frame>$/);
    // The textarea: an entry named "notes" at its screen position and size, multi-line and focusable.
    const m = /<(\w[\w-]*) name="notes"([^>]*)>/.exec(xml);
    assert.ok(m, 'the textarea is in the tree');
    const [, tag, attrs] = m;
    assert.equal(tag, 'entry');
    assert.match(attrs!, /st:multi-line="true"|st:multi_line="true"/);
    assert.match(attrs!, /st:focusable="true"/);
    assert.match(attrs!, /st:editable="true"/);
    assert.ok(attrs!.includes(`cp:screencoord="(${off.x + 700}, ${off.y + 100})"`), `screencoord of the textarea: ${attrs}`);
    assert.ok(attrs!.includes('cp:size="(400, 200)"'), `size of the textarea: ${attrs}`);
    const json = (await d.client.a11y(s.id, { format: 'json', maxDepth: 3 })) as { tree: { children: { name: string }[] }; generation: number };
    assert.equal(json.generation, 1);
    assert.ok(json.tree.children.some((a) => a.name === 'Chromium'));
    const t = await d.client.terminal(s.id);
    assert.equal(t.text, null, 'no terminal application in this session');
    const r = await fetch(`${d.url}/v1/sessions/${s.id}/a11y?format=html`, { headers: { authorization: `Bearer ${d.token}` } });
    assert.equal(r.status, 400);
  });

  it('windows: list, activate, close', async () => {
    const w = await d.client.windows(s.id);
    assert.deepEqual(w.screen, { width: 1280, height: 800 });
    const chrome = w.windows.find((x) => /chromium/i.test(x.className));
    assert.ok(chrome, JSON.stringify(w));
    assert.match(chrome.title, /drums-events/);
    assert.equal(typeof chrome.pid, 'number');
    await d.client.exec(s.id, { shell: 'xterm -T drums-xterm -geometry 40x10+50+50 >/dev/null 2>&1 &' });
    const xt = await until('xterm window', async () => (await d.client.windows(s.id)).windows.find((x) => /xterm/i.test(x.className)), 30_000);
    assert.equal((await d.client.activateWindow(s.id, chrome.id)).ok, true);
    await until('chromium active', async () => (await d.client.windows(s.id)).active === chrome.id);
    await d.client.closeWindow(s.id, xt.id);
    await until('xterm closed', async () => !(await d.client.windows(s.id)).windows.some((x) => x.id === xt.id));
    await assert.rejects(d.client.activateWindow(s.id, 0x7fffff), (e: DrumsApiError) => e.status === 404 && e.code === 'window_not_found');
    const r = await fetch(`${d.url}/v1/sessions/${s.id}/windows/zzz/close`, { method: 'POST', headers: { authorization: `Bearer ${d.token}` } });
    assert.equal(r.status, 400);
    // CLI
    const cli = d.cli(['session', 'windows', s.id, '--json']);
    assert.equal(cli.status, 0, cli.stderr);
    assert.ok((JSON.parse(cli.stdout) as { windows: unknown[] }).windows.length >= 1);
  });

  it('CLI: act with --screenshot, screenshot with region/scale, a11y', async () => {
    const out = `/tmp/drums-act-${process.pid}.png`;
    try {
      const r = d.cli(['session', 'act', s.id, '--json', JSON.stringify([{ type: 'move', x: 5, y: 5 }, { type: 'cursor_position' }]), '--screenshot', out]);
      assert.equal(r.status, 0, r.stderr);
      const j = JSON.parse(r.stdout) as { results: { cursor?: { x: number } }[] };
      assert.equal(j.results[1]!.cursor!.x, 5);
      assert.equal((await sharp(out).metadata()).width, 1280);
      const sh = d.cli(['session', 'screenshot', s.id, '-o', out, '--region', '0,0,200,100', '--scale', '100x50']);
      assert.equal(sh.status, 0, sh.stderr);
      assert.deepEqual([(await sharp(out).metadata()).width, (await sharp(out).metadata()).height], [100, 50]);
      const bad = d.cli(['session', 'act', s.id, '--json', '[{"type":"click","x":-4,"y":1}]']);
      assert.equal(bad.status, 2);
      assert.match(bad.stderr, /invalid_action/);
      const a = d.cli(['session', 'a11y', s.id]);
      assert.equal(a.status, 0, a.stderr);
      assert.match(a.stdout, /^<desktop-frame/);
    } finally {
      rmSync(out, { force: true });
    }
  });
});
