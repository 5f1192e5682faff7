// The fast tree read (each application over its own socket, GTK 4's objects from Cache.GetItems) gives the same
// XML, byte for byte, as the reference walk (every object call by call over the bus), on the osworld image's
// apps that are in the tree, before and after scripted changes; an app that hangs or dies during a read costs that
// read only; bad parameters are 400s with stable codes. One session, five apps (docs/a11y.md, "Fast paths").
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { A11yTree } from '../../src/client/client.ts';
import { DESKTOP_APPS, missingApps, openDesktop } from '../../src/bench/a11y-desktop.ts';
import { apiError, skipUnlessCI, startDaemon, TIME_SCALE, type TestDaemon } from '../helpers.ts';

// LibreOffice Calc (atk-bridge, 'gtk'), gedit and evince (GTK 3), Chromium, nautilus (GTK 4: Cache.GetItems).
// GIMP 2.10 and Thunderbird do not register with the session's AT-SPI registry at all (neither read sees them).
const APPS = ['calc', 'gedit', 'evince', 'chromium', 'nautilus'];

describe('a11y fast read: byte-identical to the reference walk', () => {
  let d: TestDaemon;
  let id = '';
  let skip: string | false = false;
  const t0 = Date.now();

  const sh = async (shell: string) => {
    const r = await d.client.exec(id, { shell, timeoutMs: 60_000 });
    assert.equal(r.exitCode, 0, `${shell}\n${r.stdout}\n${r.stderr}`);
    return r.stdout.trim();
  };
  const xml = async (reference: boolean) => String(await d.client.a11y(id, { format: 'xml', reference }));

  /**
   * A fast read equals a reference read taken just before or just after it. If the three differ, the desktop
   * changed by itself between reads (a clock, a cursor): try again, at most 4 times; a fast read that differs
   * from two equal reference reads around it fails at once.
   */
  async function sameAsReference(what: string): Promise<string> {
    let last = '';
    for (let attempt = 1; attempt <= 4; attempt++) {
      const before = await xml(true);
      const fast = await xml(false);
      const afterRef = await xml(true);
      if (fast === before || fast === afterRef) return fast;
      if (before === afterRef) {
        const at = [...fast].findIndex((ch, i) => ch !== before[i]);
        assert.fail(
          `${what}: the fast read differs from the reference at byte ${at}:\nfast: ${fast.slice(Math.max(0, at - 200), at + 200)}\nref:  ${before.slice(Math.max(0, at - 200), at + 200)}`,
        );
      }
      last = `${fast.length} vs ${before.length}/${afterRef.length} bytes`;
    }
    assert.fail(`${what}: the desktop kept changing between reads (${last})`);
  }

  before(async () => {
    d = await startDaemon();
    const s = await d.client.createSession({ image: 'osworld' } as never);
    id = s.id;
    const missing = await missingApps(d.client, id, APPS);
    skip = skipUnlessCI(missing.length ? `not in the osworld image: ${missing.join(', ')}` : null);
    if (skip) return;
    await openDesktop(d.client, id, { names: APPS, timeoutMs: 240_000 * TIME_SCALE });
  });
  after(async () => {
    if (d) {
      for (const x of await d.client.listSessions()) await d.client.destroySession(x.id).catch(() => {});
      await d.finish();
    }
    process.stderr.write(`a11y-fast-read: ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
  });

  it('reads every app the fast way: apps over their own sockets, nautilus from its cache', async (t) => {
    if (skip) return t.skip(skip);
    // Note: GTK 4's cache holds the objects its bridge has exported, which a first read does: the second uses it.
    await d.client.a11y(id, { format: 'json' });
    const { tree, stats } = (await d.client.a11y(id, { format: 'json' })) as A11yTree;
    const apps = new Map(tree.children.map((a) => [a.name, a.ref.bus]));
    for (const name of ['soffice', 'gedit', 'evince', 'Chromium', 'org.gnome.Nautilus']) assert.ok(apps.has(name), `${name} in the tree: ${[...apps.keys()]}`);
    // Every atk-bridge app over its socket (connected as the desktop user, served from inside the session).
    for (const name of ['soffice', 'gedit', 'evince', 'Chromium'])
      assert.ok(stats.directApps.includes(apps.get(name)!), `${name} read directly: ${stats.directApps}`);
    assert.equal(stats.profile?.byKind['GetItems']?.calls, 1, 'one Cache.GetItems (nautilus)');
    const ref = (await d.client.a11y(id, { format: 'json', reference: true })) as A11yTree;
    assert.deepEqual(ref.stats.directApps, []);
    assert.equal(ref.stats.profile?.byKind['GetItems'], undefined);
    const nautilus = apps.get('org.gnome.Nautilus')!;
    const fastCalls = stats.profile!.byBus[nautilus]!.calls;
    const refCalls = ref.stats.profile!.byBus[nautilus]!.calls;
    assert.ok(fastCalls < refCalls * 0.7, `nautilus: ${fastCalls} calls fast, ${refCalls} walked`);
    t.diagnostic(`fast ${stats.calls} calls in ${stats.durationMs} ms, reference ${ref.stats.calls} calls in ${ref.stats.durationMs} ms`);
  });

  it('gives the reference XML byte for byte, before and after changes', async (t) => {
    if (skip) return t.skip(skip);
    const first = await sameAsReference('at rest');
    assert.match(first, /<application name="org.gnome.Nautilus"/);
    // Type into gedit (text-changed), open its open-file dialog (a new window, children-changed), close evince,
    // open nautilus's location entry.
    const win = async (re: RegExp) => {
      const ws = (await d.client.windows(id)).windows as Array<{ id: number; title: string }>;
      const w = ws.find((x) => re.test(x.title));
      assert.ok(w, `a window ${re}: ${ws.map((x) => x.title).join(' | ')}`);
      return w;
    };
    const gedit = await win(DESKTOP_APPS.find((a) => a.name === 'gedit')!.window);
    await d.client.activateWindow(id, gedit.id);
    await d.client.act(id, { actions: [{ type: 'type', text: 'fast path ' }] } as never);
    await new Promise((r) => setTimeout(r, 1000));
    const typed = await sameAsReference('after typing in gedit');
    assert.match(typed, /fast path/);
    await d.client.act(id, { actions: [{ type: 'key', keys: ['ctrl', 'o'] }] } as never);
    await new Promise((r) => setTimeout(r, 2000));
    const dialog = await sameAsReference('with a dialog open');
    assert.notEqual(dialog, typed, 'the dialog changed the tree');
    await d.client.act(id, { actions: [{ type: 'key', keys: ['Escape'] }] } as never);
    await sh('pkill -TERM -x evince || true');
    await new Promise((r) => setTimeout(r, 2000));
    const closed = await sameAsReference('after closing evince');
    assert.doesNotMatch(closed, /<application name="evince"/);
    // nautilus (read from its cache): open its location entry, which adds objects and changes states.
    const files = await win(DESKTOP_APPS.find((a) => a.name === 'nautilus')!.window);
    await d.client.activateWindow(id, files.id);
    await d.client.act(id, { actions: [{ type: 'key', keys: ['ctrl', 'l'] }] } as never);
    await new Promise((r) => setTimeout(r, 1500));
    const located = await sameAsReference('with nautilus location entry open');
    assert.notEqual(located, closed, 'the location entry changed the tree');
  });

  it('a hung or killed app costs one read, not the session or the daemon', async (t) => {
    if (skip) return t.skip(skip);
    const pid = await sh('pgrep -o -x gedit');
    await sh(`kill -STOP ${pid}`);
    try {
      const { tree, stats } = (await d.client.a11y(id, { format: 'json' })) as A11yTree;
      assert.ok(stats.hungApps.length >= 1, `gedit marked hung: ${JSON.stringify(stats)}`);
      assert.ok(
        tree.children.some((a) => a.name === 'org.gnome.Nautilus'),
        'the other apps are read',
      );
    } finally {
      await sh(`kill -CONT ${pid}`);
    }
    // Killed during a read: that read returns; the next is whole again without it.
    const reading = d.client.a11y(id, { format: 'json' });
    await new Promise((r) => setTimeout(r, 100));
    await sh(`kill -KILL ${pid}`);
    await reading;
    const after = String(await d.client.a11y(id, { format: 'xml' }));
    assert.doesNotMatch(after, /<application name="gedit"/);
    assert.match(after, /<application name="org.gnome.Nautilus"/);
    assert.equal((await d.client.getSession(id)).state, 'ready');
  });

  it('refuses bad parameters with 400 and a stable code', async (t) => {
    if (skip) return t.skip(skip);
    const get = (q: string) =>
      fetch(`${d.url}/v1/sessions/${id}/a11y?${q}`, { headers: { authorization: `Bearer ${d.token}` } }).then(async (r) => ({
        status: r.status,
        code: ((await r.json()) as { error?: { code?: string } }).error?.code,
      }));
    for (const [q, code] of [
      ['format=html', 'invalid_format'],
      ['maxDepth=0', 'invalid_request'],
      ['maxDepth=1001', 'invalid_request'],
      ['maxWidth=abc', 'invalid_request'],
      ['maxWidth=100001', 'invalid_request'],
      ['reference=yes', 'invalid_request'],
    ]) {
      assert.deepEqual(await get(q!), { status: 400, code }, q);
    }
    assert.equal((await apiError(d.client.a11y(id, { maxDepth: 5000 }))).status, 400);
  });
});
