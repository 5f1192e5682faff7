// Input over XTEST, verified by effect: a second X connection records the events a window
// receives, and text typed into xterm lands in a file through `cat`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import x11 from 'x11';
import type { XClient, XEvent } from 'x11';
import { startXvfb, waitExit, type XvfbHandle } from '../../src/testing/xvfb.ts';
import { XDisplay } from '../../src/display/x-display.ts';
import { runActions } from '../../src/display/actions/index.ts';
import { isDisplayError } from '../../src/display/errors.ts';

let h: XvfbHandle;
let d: XDisplay;
let tmp: string;

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'drums-display-input-'));
  h = await startXvfb({ windowManager: true });
  d = await XDisplay.open(h.socketPath, { cookie: h.cookie, timeoutMs: 5000 });
});

after(async () => {
  await d?.close();
  await h?.stop();
  for (const c of [h.xvfb, ...h.children]) assert.ok(c.exitCode !== null || c.signalCode !== null, 'child still running');
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** A second client with an override-redirect window at (100,100) 400x300 recording its events. */
async function recorder(): Promise<{ events: XEvent[]; sync(): Promise<void>; close(): void }> {
  const events: XEvent[] = [];
  const X = await new Promise<XClient>((resolve, reject) => {
    // The server's cookie (x11 writes the auth data as a latin1 string).
    const auth = { name: 'MIT-MAGIC-COOKIE-1', data: Buffer.from(h.cookie, 'hex').toString('latin1') };
    const c = x11.createClient({ display: `:${h.display}`, auth }, (err) => (err ? reject(err) : resolve(c)));
    c.on('error', () => {});
  });
  const root = X.display.screen[0].root;
  const wid = X.AllocID();
  const em = x11.eventMask;
  X.CreateWindow(wid, root, 100, 100, 400, 300, 0, 0, 0, 0, {
    overrideRedirect: 1,
    backgroundPixel: 0x00ff00,
    eventMask: em.ButtonPress | em.ButtonRelease | em.PointerMotion | em.Exposure,
  });
  X.MapWindow(wid);
  X.on('event', (ev: XEvent) => {
    if (ev.name !== 'Expose') events.push(ev);
  });
  // A round trip on the recorder's own connection: the server sends a client its events in
  // order with its replies, so once this answers, every event the input made so far has arrived.
  const sync = () =>
    new Promise<void>((r) =>
      X.GetInputFocus(() => {
        r();
        return true;
      }),
    );
  await sync();
  return { events, sync, close: () => X.terminate() };
}

test('click, double click, right click and mouse down/up reach the window at the right place', async () => {
  const rec = await recorder();
  try {
    await d.click({ x: 200, y: 150 });
    await d.click({ x: 210, y: 160, count: 2 });
    await d.click({ x: 220, y: 170, button: 'right' });
    await d.mouseDown('middle', { x: 230, y: 180 });
    await d.mouseUp('middle');
    await rec.sync();
    const presses = rec.events.filter((e) => e.name === 'ButtonPress').map((e) => [e.keycode, e.x, e.y]);
    assert.deepEqual(presses, [
      [1, 100, 50],
      [1, 110, 60],
      [1, 110, 60],
      [3, 120, 70],
      [2, 130, 80],
    ]);
    assert.equal(rec.events.filter((e) => e.name === 'ButtonRelease').length, 5);
    assert.deepEqual(await d.cursorPosition(), { x: 230, y: 180 });
  } finally {
    rec.close();
  }
});

test('scroll sends wheel buttons 4/5/6/7 per click', async () => {
  const rec = await recorder();
  try {
    await d.scroll({ x: 300, y: 200, dy: 3 });
    await d.scroll({ dy: -2 });
    await d.scroll({ dx: 1 });
    await d.scroll({ dx: -1 });
    await rec.sync();
    const buttons = rec.events.filter((e) => e.name === 'ButtonPress').map((e) => e.keycode);
    assert.deepEqual(buttons, [5, 5, 5, 4, 4, 7, 6]);
  } finally {
    rec.close();
  }
});

test('drag presses, moves through intermediate points with the button held, releases at the end', async () => {
  const rec = await recorder();
  try {
    await d.drag([
      { x: 150, y: 150 },
      { x: 350, y: 250 },
    ]);
    await rec.sync();
    const names = rec.events.map((e) => e.name);
    const press = names.indexOf('ButtonPress'),
      release = names.lastIndexOf('ButtonRelease');
    assert.ok(press >= 0 && release > press);
    const motions = rec.events.slice(press, release).filter((e) => e.name === 'MotionNotify');
    assert.ok(motions.length >= 5, `only ${motions.length} motion events while dragging`);
    for (const m of motions) assert.ok(((m.buttons as number) & 0x100) !== 0, 'Button1 not held during motion');
    const last = rec.events[release];
    assert.deepEqual([last.x, last.y], [250, 150]);
  } finally {
    rec.close();
  }
});

test('runActions executes canonical and foreign actions and reports per-step results', async () => {
  const rec = await recorder();
  try {
    const results = await runActions(d, [
      { action: 'left_click', coordinate: [150, 150] },
      { action_type: 'CLICK', parameters: { x: 160, y: 160, button: 'right' } },
      { type: 'scroll', x: 200, y: 200, dx: 0, dy: 2 },
      { action: 'cursor_position' },
      { action: 'screenshot' },
    ]);
    await rec.sync();
    assert.deepEqual(
      results.map((r) => r.type),
      ['click', 'click', 'scroll', 'cursor_position', 'screenshot'],
    );
    assert.deepEqual(results[3].cursor, { x: 200, y: 200 });
    assert.equal(results[4].screenshot?.width, 1280);
    const presses = rec.events.filter((e) => e.name === 'ButtonPress').map((e) => e.keycode);
    assert.deepEqual(presses, [1, 3, 5, 5]);
  } finally {
    rec.close();
  }
});

test('runActions validates everything before running anything', async () => {
  const rec = await recorder();
  try {
    await assert.rejects(
      runActions(d, [
        { type: 'click', x: 150, y: 150 },
        { type: 'click', x: 5000, y: 1 },
      ]),
      (err: unknown) => isDisplayError(err, 'invalid_action') && /^actions\[1\]\.x: must be an integer within 0\.\.1279/.test((err as Error).message),
    );
    await rec.sync();
    assert.equal(rec.events.filter((e) => e.name === 'ButtonPress').length, 0);
  } finally {
    rec.close();
  }
});

test('unknown key names are rejected with invalid_key', async () => {
  await assert.rejects(d.key('ctrl+nosuchkey'), (err: unknown) => isDisplayError(err, 'invalid_key') && /nosuchkey/.test((err as Error).message));
});

test('typing ASCII, shifted characters and Unicode into xterm, then ctrl+d', async () => {
  const out = path.join(tmp, 'typed.txt');
  const title = `drums-type-${process.pid}`;
  const xterm = h.spawnClient('xterm', ['-T', title, '-geometry', '80x10+0+0', '-e', 'sh', '-c', `cat > '${out}'`], {
    env: { LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' },
  });
  const w = await d.waitForWindow((win) => win.title === title && win.mapped, { timeoutMs: 30_000 });
  await d.activateWindow(w.id);
  await d.click({ x: w.x + Math.floor(w.width / 2), y: w.y + Math.floor(w.height / 2) }); // inside, whatever its size
  // > 19 distinct unmapped characters forces evicting spare keycodes mid-string.
  const many = 'αβγδεζηθικλμνξοπρστυφχψω';
  const text = `Hello, World! <>?:"{}|~!@#$%^&*()_+ é ß 日本 😀 ${many}\nline2 \`-=[]\\;',./\n`;
  await d.type(text);
  await d.key('ctrl+d');
  assert.ok(await waitExit(xterm, 10_000), 'xterm did not exit after ctrl+d');
  assert.equal(fs.readFileSync(out, 'utf8'), text);
});

test('keyboard mapping is restored after typing (spare keycodes back to NoSymbol)', async () => {
  await d.restoreKeymap();
  const before = await d.conn.request<number[][]>('GetKeyboardMapping', (cb) => d.conn.x.GetKeyboardMapping(8, 248, cb));
  await d.type('€ ✓ Ω');
  const during = await d.conn.request<number[][]>('GetKeyboardMapping', (cb) => d.conn.x.GetKeyboardMapping(8, 248, cb));
  assert.notDeepEqual(during, before);
  await d.restoreKeymap();
  const afterMap = await d.conn.request<number[][]>('GetKeyboardMapping', (cb) => d.conn.x.GetKeyboardMapping(8, 248, cb));
  assert.deepEqual(afterMap, before);
});

// Every keymap change makes openbox re-grab its keys (~50-75 ms CPU each), so after the Unicode
// typing test openbox may need seconds before it maps the next window: hence the long waits. An
// xterm started during keymap churn can also come up tiny (10x17): only require it to be mapped.
test('key_down / key_up hold a modifier across other actions', async () => {
  const out = path.join(tmp, 'held.txt');
  const title = `drums-held-${process.pid}`;
  const xterm = h.spawnClient('xterm', ['-T', title, '-geometry', '80x10+0+0', '-e', 'sh', '-c', `cat > '${out}'`], {
    env: { LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' },
  });
  const w = await d.waitForWindow((win) => win.title === title && win.mapped, { timeoutMs: 30_000 });
  await d.activateWindow(w.id);
  await d.click({ x: w.x + Math.floor(w.width / 2), y: w.y + Math.floor(w.height / 2) });
  await runActions(d, [
    { action: 'hold_key', text: 'shift', duration: 0.01 },
    { type: 'key_down', key: 'shift' },
    { type: 'type', text: 'abc' },
    { type: 'key_up', key: 'shift' },
    { type: 'key', keys: ['x'] },
    { action: 'key', text: 'Return ctrl+d' },
  ]);
  const exited = await waitExit(xterm, 10_000);
  assert.equal(fs.readFileSync(out, 'utf8'), 'ABCx\n');
  assert.ok(exited, 'xterm did not exit');
});
