import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { realpathSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type WebSocket from 'ws';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, runPrefix, type TestDaemon } from '../helpers.ts';

// The daemon reaches each session's X server and AT-SPI bus through sockets in directories the session itself
// can write (/tmp/.X11-unix is 1777, /run/drums belongs to the desktop user). A session that swaps its socket
// for a symlink to a sibling's socket must never make the daemon observe or drive the sibling.
/** The first RFB bytes a viewer gets, through to ServerInit's framebuffer size, or how the WebSocket closed first. */
function viewerSees(ws: WebSocket): Promise<string> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    let stage = 0;
    const send = (b: Buffer) => ws.send(b);
    ws.on('close', (code, reason) => resolve(`closed ${code} ${reason.toString()}`));
    ws.on('error', (e) => resolve(`error ${e.message}`));
    ws.on('message', (m) => {
      buf = Buffer.concat([buf, m as Buffer]);
      // RFB 3.8, security None, shared ClientInit; ServerInit starts with width and height.
      if (stage === 0 && buf.length >= 12) {
        buf = buf.subarray(12);
        send(Buffer.from('RFB 003.008\n'));
        stage = 1;
      }
      if (stage === 1 && buf.length >= 1 && buf.length >= 1 + buf[0]!) {
        buf = buf.subarray(1 + buf[0]!);
        send(Buffer.from([1]));
        stage = 2;
      }
      if (stage === 2 && buf.length >= 4) {
        buf = buf.subarray(4);
        send(Buffer.from([1]));
        stage = 3;
      }
      if (stage === 3 && buf.length >= 4) resolve(`framebuffer ${buf.readUInt16BE(0)}x${buf.readUInt16BE(2)}`);
    });
  });
}

describe('the daemon reaches only the session’s own sockets', () => {
  let d: TestDaemon;
  let rt: string;
  const prefix = runPrefix();
  const page = (title: string) => `data:text/html,<title>${title}</title><h1>${title}</h1>`;
  const exec = (s: SessionInfo, shell: string) => d.client.exec(s.id, { shell, timeoutMs: 20_000 });
  const pointer = async (s: SessionInfo) => (await exec(s, 'xdotool getmouselocation --shell')).stdout;

  before(async () => {
    d = await startDaemon();
    rt = join(realpathSync(d.stateDir), 'rt');
  });
  after(async () => {
    await d.finish();
  });

  for (const userns of [false, true])
    it(`an X0 symlink to a sibling’s X socket: screenshot, actions and windows do not reach the sibling (userns ${userns})`, async () => {
      const [a, b] = await Promise.all([d.client.createSession({ image: 'default', userns }), d.client.createSession({ image: 'default', userns })]);
      try {
        // The sibling's pointer sits at a known place.
        await exec(b, 'xdotool mousemove 5 5');
        assert.match(await pointer(b), /X=5\nY=5/);
        // Session a (as its desktop user, before the daemon ever opened its display) points its X socket at b's.
        const plant = await exec(a, `ln -sfn ${join(rt, b.id, 'x11', 'X0')} /tmp/.X11-unix/X0 && ls -l /tmp/.X11-unix/X0`);
        assert.equal(plant.exitCode, 0, plant.stderr);
        assert.match(plant.stdout, /->/);
        const act = await d.client.act(a.id, { actions: [{ type: 'move', x: 321, y: 123 }] }).then(
          () => 'ok',
          (e: Error) => e.message,
        );
        const shot = await d.client.screenshot(a.id).then(
          () => 'ok',
          (e: Error) => e.message,
        );
        const wins = await d.client.windows(a.id).then(
          (w) => JSON.stringify(w.cursor),
          (e: Error) => e.message,
        );
        // The sibling's pointer did not move, and nothing the daemon answered for a came from b.
        assert.match(await pointer(b), /X=5\nY=5/, `act on a: ${act}; screenshot: ${shot}; windows: ${wins}`);
        assert.notEqual(act, 'ok', 'an action on a went through a socket that is not a’s own');
        assert.notEqual(shot, 'ok', 'a screenshot of a came through a socket that is not a’s own');
        assert.match(act, /not served from inside the session|not the session's own/);
        assert.match(shot, /not served from inside the session|not the session's own/);
        // The sibling itself is untouched and still served.
        await d.client.act(b.id, { actions: [{ type: 'move', x: 7, y: 9 }] });
        assert.match(await pointer(b), /X=7\nY=9/);
      } finally {
        for (const s of [a, b]) await d.client.destroySession(s.id).catch(() => {});
      }
    });

  it('a drums-vnc symlink to a sibling’s x11vnc: the viewer never gets the sibling’s framebuffer', { timeout: 180_000 }, async () => {
    const [a, b] = await Promise.all([
      d.client.createSession({ image: 'minimal', screen: '800x600' }),
      d.client.createSession({ image: 'minimal', screen: '1024x768' }),
    ]);
    const views: WebSocket[] = [];
    try {
      // A viewer on b keeps b's x11vnc (and its socket) up.
      const vb = d.client.webSocket(`/v1/sessions/${b.id}/vnc`, 'binary');
      views.push(vb);
      assert.equal(await viewerSees(vb), 'framebuffer 1024x768');
      // Session a keeps its VNC socket path pointing at b's (atomically re-planted, so it wins over its own x11vnc).
      const target = join(rt, b.id, 'x11', 'drums-vnc');
      const plant = await exec(
        a,
        `setsid sh -c 'while :; do ln -sfn ${target} /tmp/.X11-unix/.v && mv -Tf /tmp/.X11-unix/.v /tmp/.X11-unix/drums-vnc; sleep 0.02; done' ` +
          `>/dev/null 2>&1 </dev/null & sleep 0.5; ls -l /tmp/.X11-unix/drums-vnc`,
      );
      assert.match(plant.stdout, /->/, plant.stderr);
      const va = d.client.webSocket(`/v1/sessions/${a.id}/vnc`, 'binary');
      views.push(va);
      const seen = await viewerSees(va);
      assert.notEqual(seen, 'framebuffer 1024x768', 'a viewer of a got b’s framebuffer');
      assert.match(seen, /^closed 1011 vnc socket not the session’s own|^framebuffer 800x600$/);
    } finally {
      for (const v of views) v.terminate();
      for (const s of [a, b]) await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it('a bus_0 symlink to a sibling’s AT-SPI bus: the a11y tree is never the sibling’s', async () => {
    const marker = `victim-${prefix}`;
    // Host ids (userns false): the path where the daemon connects as root (a userns session's bus is
    // reached as the session's own uid, which cannot even open a sibling's socket).
    const [a, b] = await Promise.all([
      d.client.createSession({ image: 'default', url: page(`own-${prefix}`), userns: false }),
      d.client.createSession({ image: 'default', url: page(marker), userns: false }),
    ]);
    try {
      // The sibling's tree shows its page (which also makes sure its AT-SPI bus is up).
      let tb = '';
      for (let i = 0; i < 60 && !tb.includes(marker); i++) {
        tb = String(await d.client.a11y(b.id, { format: 'xml' }).catch(() => ''));
        if (!tb.includes(marker)) await sleep(500);
      }
      assert.ok(tb.includes(marker), 'the sibling’s page never showed in its own a11y tree');
      // Session a waits for its own AT-SPI bus, then replaces it with a symlink to b's (the daemon has not read a's tree yet).
      const plant = await exec(
        a,
        `for i in $(seq 100); do [ -S /run/drums/xdg/at-spi/bus_0 ] && break; sleep 0.2; done; ` +
          `ln -sfn ${join(rt, b.id, 'run', 'xdg', 'at-spi', 'bus_0')} /run/drums/xdg/at-spi/bus_0 && ls -l /run/drums/xdg/at-spi/bus_0`,
      );
      assert.equal(plant.exitCode, 0, plant.stderr);
      assert.match(plant.stdout, /->/);
      const ta = await d.client.a11y(a.id, { format: 'xml' }).then(
        (x) => String(x),
        (e: Error) => `error: ${e.message}`,
      );
      assert.ok(!ta.includes(marker), `a's a11y tree is the sibling's:\n${ta.slice(0, 2000)}`);
      assert.match(ta, /^error: .*(not served from inside the session|is a symlink: refused)/);
    } finally {
      for (const s of [a, b]) await d.client.destroySession(s.id).catch(() => {});
    }
  });
});
