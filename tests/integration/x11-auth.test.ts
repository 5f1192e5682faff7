// Each session's X server has its own cookie (issue 27, finding 3), and `drums session vnc` serves only its own uid
// (finding 7). The attacks are the audit's host probes (bench/host-probes/x11.ts), run here against a daemon with
// a user namespace per session; then a session still works end to end with its cookie, a reset makes a new one, and a
// memory fork's copy carries its source's.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';
import { clientAs, recordedCookie, x11Probes, xSetup } from '../../bench/host-probes/x11.ts';
import { parseXauthority } from '../../src/display/xauth.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

describe('X cookies and VNC against local host users', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_USERNS: '1', DRUMS_MAX_SESSIONS: '4' });
  });
  after(async () => {
    await d.finish();
  });

  const x0 = (id: string) => join(realpathSync(d.stateDir), 'rt', id, 'x11', 'X0');
  /** The first byte of the X server's answer to a connection setup sent as host root: 0 Failed, 1 Success. */
  const setupAsRoot = async (id: string, cookie?: string) => (await clientAs(undefined, x0(id), xSetup(cookie), 1)).got[0];
  const cookieOf = (id: string) => {
    const c = recordedCookie(d.stateDir, id);
    assert.match(c ?? '', /^[0-9a-f]{32}$/, 'the session record keeps a cookie');
    return c!;
  };
  /** An X client of the minimal image (xprop: no xdotool there) setting and reading a root property. */
  const inSessionClient = 'xprop -root -f DRUMS_T 8s -set DRUMS_T ok && xprop -root DRUMS_T';
  /** The Xauthority file the session's clients read, as the desktop user sees it. */
  const sessionXauth = async (id: string) => {
    const r = await d.client.exec(id, { shell: 'test "$XAUTHORITY" = /run/drums/Xauthority && stat -c %a:%U "$XAUTHORITY" && base64 -w0 "$XAUTHORITY"' });
    assert.equal(r.exitCode, 0, r.stderr);
    const [mode, b64] = r.stdout.trim().split('\n');
    return { mode, entries: parseXauthority(Buffer.from(b64!, 'base64')) };
  };

  it('host probes: no host uid and no root without the cookie gets past the X setup; VNC serves only its own uid', { timeout: 240_000 }, async () => {
    const progress: string[] = [];
    const pd = { ...d, pid: d.proc.pid!, kill: d.stop } as unknown as PrivateDaemon;
    const probes = await x11Probes({ d: pd, arm: 'test', progress: (s) => progress.push(s) });
    for (const p of probes) process.stderr.write(`  ${p.id} [${p.as}]: ${p.result}: ${p.detail}\n`);
    assert.deepEqual(
      probes.map((p) => p.id),
      ['host.x11.setup-no-cookie-root', 'host.x11.setup-no-cookie', 'host.vnc.cli-listener', 'host.vnc.x11vnc-socket'],
    );
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id}: ${p.detail}`);
  });

  it('a session works end to end with its cookie: screenshot, act, xdotool and python-xlib as the desktop user and root, Chromium', {
    timeout: 240_000,
  }, async () => {
    const title = 'drums-x11-auth';
    const s = await d.client.createSession({ image: 'default', screen: '1024x768', url: `data:text/html,<title>${title}</title><h1>${title}</h1>` });
    try {
      const cookie = cookieOf(s.id);
      // The session's file: 0600, the desktop user's, this cookie for the session's host name and for any address.
      const xa = await sessionXauth(s.id);
      assert.equal(xa.mode, '600:user');
      assert.deepEqual(
        xa.entries.map((e) => [e.family, e.address.toString(), e.number, e.name, e.data.toString('hex')]),
        [
          [256, s.id, '0', 'MIT-MAGIC-COOKIE-1', cookie],
          [65535, '', '0', 'MIT-MAGIC-COOKIE-1', cookie],
        ],
      );
      assert.equal(await setupAsRoot(s.id), 0, 'no cookie: Failed');
      assert.equal(await setupAsRoot(s.id, cookie), 1, 'the cookie: Success');

      const png = await d.client.screenshot(s.id);
      assert.ok(png.length > 1000);
      await d.client.act(s.id, { actions: [{ type: 'move', x: 123, y: 45 }] });
      for (const root of [false, true]) {
        const r = await d.client.exec(s.id, { shell: 'xdotool getmouselocation --shell', root });
        assert.equal(r.exitCode, 0, r.stderr);
        assert.match(r.stdout, /^X=123$/m);
        assert.match(r.stdout, /^Y=45$/m);
      }
      // python-xlib (pyautogui's X library) matches only a FamilyLocal entry for the host name.
      const py = await d.client.exec(s.id, {
        argv: ['python3', '-c', 'from Xlib.display import Display; s = Display().screen(); print(s.width_in_pixels, s.height_in_pixels)'],
      });
      assert.equal(py.exitCode, 0, py.stderr);
      assert.equal(py.stdout.trim(), '1024 768');
      assert.doesNotMatch(py.stderr, /xauthority|Authorization/i);
      // The default Chromium page loaded (its window title is the page's).
      const w = await d.client.windows(s.id);
      assert.ok(
        w.windows.some((x) => x.title.includes(title)),
        JSON.stringify(w.windows.map((x) => x.title)),
      );
      // Without the cookie a client in the session is refused too: the server checks every connection.
      const bare = await d.client.exec(s.id, { shell: 'XAUTHORITY=/nonexistent xdotool getmouselocation' });
      assert.notEqual(bare.exitCode, 0, 'xdotool without the cookie was let in');
    } finally {
      await d.client.destroySession(s.id);
    }
  });

  it('a reset makes a new cookie: the old one is refused, the new one works', { timeout: 240_000 }, async () => {
    const s = await d.client.createSession({ image: 'minimal', screen: '800x600' });
    try {
      const c1 = cookieOf(s.id);
      await d.client.screenshot(s.id);
      await d.client.resetSession(s.id);
      const c2 = cookieOf(s.id);
      assert.notEqual(c2, c1);
      assert.equal(await setupAsRoot(s.id, c1), 0, 'the last generation’s cookie: Failed');
      assert.equal(await setupAsRoot(s.id, c2), 1);
      assert.equal((await sessionXauth(s.id)).entries[0]!.data.toString('hex'), c2);
      await d.client.screenshot(s.id);
      const r = await d.client.exec(s.id, { shell: inSessionClient });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.match(r.stdout, /DRUMS_T\(STRING\) = "ok"/);
    } finally {
      await d.client.destroySession(s.id);
    }
  });

  it('a memory fork’s copy keeps its source’s cookie (its X server is the source’s, restored) and works', { timeout: 300_000 }, async () => {
    // minimal: no Chromium, whose sandbox in a user-namespace session CRIU cannot dump.
    const src = await d.client.createSession({ image: 'minimal', screen: '800x600' });
    const made = [src.id];
    try {
      const cookie = cookieOf(src.id);
      const r = await d.client.forkSession(src.id, { count: 1, mode: 'memory' });
      made.push(...r.copies.map((c) => c.id));
      const copy = r.copies[0]!.id;
      assert.equal(cookieOf(copy), cookie);
      assert.equal(await setupAsRoot(copy), 0);
      assert.equal(await setupAsRoot(copy, cookie), 1);
      // The copy's file names the copy's host name (python-xlib), with the same cookie.
      const xa = await sessionXauth(copy);
      assert.deepEqual([xa.entries[0]!.address.toString(), xa.entries[0]!.data.toString('hex')], [copy, cookie]);
      await d.client.screenshot(copy);
      await d.client.act(copy, { actions: [{ type: 'move', x: 7, y: 9 }] });
      assert.deepEqual((await d.client.windows(copy)).cursor, { x: 7, y: 9 });
      const x = await d.client.exec(copy, { shell: inSessionClient });
      assert.equal(x.exitCode, 0, x.stderr);
      assert.match(x.stdout, /DRUMS_T\(STRING\) = "ok"/);
      // Its next generation has a cookie of its own.
      await d.client.resetSession(copy);
      assert.notEqual(cookieOf(copy), cookie);
      // The record is the daemon's: the session cannot change the cookie the daemon sends.
      const rec = JSON.parse(readFileSync(join(d.stateDir, 'sessions', copy, 'session.json'), 'utf8')) as { xCookie: string };
      assert.equal(rec.xCookie, cookieOf(copy));
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });
});
