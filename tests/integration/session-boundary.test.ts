import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { realpathSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, runPrefix, type TestDaemon } from '../helpers.ts';

// The daemon reaches each session's X server and AT-SPI bus through sockets in directories the session itself
// can write (/tmp/.X11-unix is 1777, /run/drums belongs to the desktop user). A session that swaps its socket
// for a symlink to a sibling's socket must never make the daemon observe or drive the sibling.
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
        assert.match(act, /not served from inside the session/);
        assert.match(shot, /not served from inside the session/);
        // The sibling itself is untouched and still served.
        await d.client.act(b.id, { actions: [{ type: 'move', x: 7, y: 9 }] });
        assert.match(await pointer(b), /X=7\nY=9/);
      } finally {
        for (const s of [a, b]) await d.client.destroySession(s.id).catch(() => {});
      }
    });

  it('a bus_0 symlink to a sibling’s AT-SPI bus: the a11y tree is never the sibling’s', async () => {
    const marker = `victim-${prefix}`;
    const [a, b] = await Promise.all([
      d.client.createSession({ image: 'default', url: page(`own-${prefix}`) }),
      d.client.createSession({ image: 'default', url: page(marker) }),
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
      assert.match(ta, /^error: .*not served from inside the session/);
    } finally {
      for (const s of [a, b]) await d.client.destroySession(s.id).catch(() => {});
    }
  });
});
