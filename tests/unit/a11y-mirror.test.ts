import assert from 'node:assert/strict';
import { test } from 'node:test';
import { A11yMirror } from '../../src/a11y/mirror.ts';
import type { A11ySignal } from '../../src/a11y/client.ts';
import { walk } from '../../src/a11y/walk.ts';

// The mirror's rules, on a stand-in bus (the real apps are in tests/integration/a11y-fast-read.test.ts): a read
// through it equals a walk; an object touched by an event is read again and only it; an event that lands while
// the object is being read keeps that read out of the mirror; untrusted toolkits and managed descendants are
// always walked; a flood or the memory bound stops it, and reads are walks again.

type Msg = { destination: string; path: string; interface: string; member: string; body?: unknown[] };
const ROOT = '/org/a11y/atspi/accessible/root';

/** One app per toolkit: root → frame → 3 labels (or, with `manages`, a table of 3 cells). */
function fakeDesktop(toolkits: Record<string, string>, o: { manages?: boolean } = {}) {
  const calls: Msg[] = [];
  const names = new Map<string, string>();
  let onCall: ((m: Msg) => void) | undefined;
  const kids = (path: string): string[] => {
    if (path === ROOT) return [`${ROOT}/frame`];
    if (path.endsWith('/frame')) return [0, 1, 2].map((i) => `${ROOT}/frame/${i}`);
    return [];
  };
  const client = {
    timeoutMs: 1000,
    closed: false,
    peer: async () => undefined,
    call: async (m: Msg) => {
      calls.push(m);
      onCall?.(m);
      await new Promise((r) => setImmediate(r));
      const registry = m.destination === 'org.a11y.atspi.Registry';
      if (m.member === 'GetAll') {
        if (registry) return undefined;
        const k = kids(m.path);
        return { Name: names.get(`${m.destination} ${m.path}`) ?? `n${m.path.slice(-6)}`, Description: '', ChildCount: k.length, Attributes: {} };
      }
      if (m.member === 'Get') {
        const [, prop] = m.body as [string, string];
        if (prop === 'ToolkitName') return toolkits[m.destination];
        if (prop === 'Name') return 'main';
        if (prop === 'Description') return '';
        if (prop === 'ChildCount') return Object.keys(toolkits).length;
      }
      switch (m.member) {
        case 'GetRole':
          return registry ? 14 : 29;
        case 'GetState': {
          // visible + showing (states 30, 25); the frame manages its descendants (state 31) if asked
          const w0 = (1 << 30) | (1 << 25) | (o.manages && m.path.endsWith('/frame') ? 1 << 31 : 0);
          return [w0 >>> 0, 0];
        }
        case 'GetInterfaces':
          return ['org.a11y.atspi.Accessible', 'org.a11y.atspi.Component'];
        case 'GetAttributes':
          return {};
        case 'GetExtents':
          return [1, 2, 3, 4];
        case 'GetChildren':
          return registry ? Object.keys(toolkits).map((b) => [b, ROOT]) : kids(m.path).map((p) => [m.destination, p]);
        default:
          return [];
      }
    },
  };
  return {
    client: client as never,
    calls,
    names,
    setOnCall: (f: typeof onCall) => {
      onCall = f;
    },
  };
}

/** A stand-in event connection: records subscriptions, answers pings, hands signals to the mirror. */
function fakeEvents() {
  let handler: ((s: A11ySignal) => void) | undefined;
  const calls: Msg[] = [];
  let closed = false;
  const client = {
    call: async (m: Msg) => {
      calls.push(m);
      if (closed) throw new Error('closed');
      return undefined;
    },
    onSignal: (h: (s: A11ySignal) => void) => {
      handler = h;
    },
    close: async () => {
      closed = true;
    },
  };
  const emit = (sender: string, path: string, member = 'StateChanged') =>
    handler?.({ sender, path, interface: 'org.a11y.atspi.Event.Object', member, body: ['focused', 1, 0, 0, {}] });
  return { client: client as never, calls, emit, isClosed: () => closed };
}

const callsOn = (calls: Msg[], bus: string) => calls.filter((m) => m.destination === bus);

test('a read through the mirror equals a walk, and asks a trusted app only for extents once filled', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk', ':1.2': 'Chromium' });
  const ev = fakeEvents();
  const mirror = await A11yMirror.start(ev.client);
  assert.ok(ev.calls.some((m) => m.member === 'AddMatch'));
  assert.ok(ev.calls.some((m) => m.member === 'RegisterEvent' && (m.body as string[])[0] === 'object:text-changed'));
  const plain = await walk(desk.client, {});
  const first = await walk(desk.client, { mirror });
  assert.deepEqual(first.tree, plain.tree);
  desk.calls.length = 0;
  const second = await walk(desk.client, { mirror });
  assert.deepEqual(second.tree, plain.tree);
  assert.equal(second.stats.mirrored, 5, 'the gtk app: root, frame, 3 labels');
  const gtk = callsOn(desk.calls, ':1.1').map((m) => m.member);
  assert.deepEqual([...new Set(gtk)].sort(), ['Get', 'GetExtents'], 'ToolkitName once, then only extents');
  // Chromium is walked in full every read.
  assert.ok(callsOn(desk.calls, ':1.2').some((m) => m.member === 'GetChildren'));
  assert.equal(mirror.status().state, 'live');
});

test('an event re-reads just the object it names', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk' });
  const ev = fakeEvents();
  const mirror = await A11yMirror.start(ev.client);
  await walk(desk.client, { mirror });
  desk.names.set(`:1.1 ${ROOT}/frame/1`, 'renamed');
  // Without an event the mirror keeps the old name (this is what "trusted toolkit" means)...
  const stale = await walk(desk.client, { mirror });
  assert.equal(stale.tree.children[0]!.children[0]!.children[1]!.name, 'nrame/1');
  // ...and with one, that object (only) is read again.
  ev.emit(':1.1', `${ROOT}/frame/1`, 'PropertyChange');
  desk.calls.length = 0;
  const fresh = await walk(desk.client, { mirror });
  assert.equal(fresh.tree.children[0]!.children[0]!.children[1]!.name, 'renamed');
  const reread = new Set(desk.calls.filter((m) => m.member === 'GetAll' && m.destination === ':1.1').map((m) => m.path));
  assert.deepEqual([...reread], [`${ROOT}/frame/1`]);
  assert.deepEqual(fresh.tree, (await walk(desk.client, {})).tree);
});

test('an event that lands while its object is read keeps that read out of the mirror', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk' });
  const ev = fakeEvents();
  const mirror = await A11yMirror.start(ev.client);
  // The event is emitted after the GetAll of frame/2 is sent, before its reply is used.
  desk.setOnCall((m) => {
    if (m.member === 'GetAll' && m.path.endsWith('/frame/2')) ev.emit(':1.1', m.path);
  });
  await walk(desk.client, { mirror });
  desk.setOnCall(undefined);
  assert.equal(mirror.get(':1.1', `${ROOT}/frame/2`), undefined, 'not kept');
  assert.ok(mirror.get(':1.1', `${ROOT}/frame/1`), 'its siblings are');
});

test('nothing below an object that manages its descendants is served', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk' }, { manages: true });
  const ev = fakeEvents();
  const mirror = await A11yMirror.start(ev.client);
  await walk(desk.client, { mirror });
  desk.calls.length = 0;
  const r = await walk(desk.client, { mirror });
  assert.equal(r.stats.mirrored, 1, 'the app root only');
  assert.ok(desk.calls.some((m) => m.member === 'GetChildren' && m.path.endsWith('/frame')));
  assert.ok(desk.calls.some((m) => m.member === 'GetAll' && m.path.endsWith('/frame/0')));
});

test('a flood of events stops the mirror: it unsubscribes, forgets, and reads are walks', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk' });
  const ev = fakeEvents();
  let stopped = '';
  const mirror = await A11yMirror.start(ev.client, { maxEventsPerSecond: 10, eventBurst: 100, onStop: (r) => (stopped = r) });
  await walk(desk.client, { mirror });
  assert.ok(mirror.status().objects > 0);
  for (let i = 0; i < 10_000; i++) ev.emit(':1.1', `/x/${i}`);
  assert.match(stopped, /event flood/);
  assert.ok(ev.isClosed(), 'its connection is closed (the registry drops its listener)');
  const st = mirror.status();
  assert.equal(st.state, 'stopped');
  assert.equal(st.objects, 0);
  assert.ok(st.events <= 101, `events handled after the flood began: ${st.events}`);
  const r = await walk(desk.client, { mirror });
  assert.equal(r.stats.mirrored, undefined);
  assert.deepEqual(r.tree, (await walk(desk.client, {})).tree);
});

test('the memory bound stops the mirror', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk' });
  const ev = fakeEvents();
  const mirror = await A11yMirror.start(ev.client, { maxObjects: 3 });
  const r = await walk(desk.client, { mirror });
  assert.deepEqual(r.tree, (await walk(desk.client, {})).tree);
  assert.equal(mirror.status().state, 'stopped');
  assert.match(mirror.status().reason ?? '', /memory bound/);
});

test('an application that leaves the bus is forgotten', async () => {
  const desk = fakeDesktop({ ':1.1': 'gtk' });
  const ev = fakeEvents();
  let handler: ((s: A11ySignal) => void) | undefined;
  const client = ev.client as unknown as { onSignal: (h: (s: A11ySignal) => void) => void };
  const orig = client.onSignal;
  client.onSignal = (h) => {
    handler = h;
    orig(h);
  };
  const mirror = await A11yMirror.start(ev.client);
  await walk(desk.client, { mirror });
  assert.ok(mirror.status().objects >= 5);
  handler!({
    sender: 'org.freedesktop.DBus',
    path: '/org/freedesktop/DBus',
    interface: 'org.freedesktop.DBus',
    member: 'NameOwnerChanged',
    body: [':1.1', ':1.1', ''],
  });
  assert.equal(mirror.status().objects, 0);
});
