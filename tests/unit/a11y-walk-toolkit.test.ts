import assert from 'node:assert/strict';
import { test } from 'node:test';
import { A11yCallError } from '../../src/a11y/bus.ts';
import type { A11yNode } from '../../src/a11y/types.ts';
import { walk } from '../../src/a11y/walk.ts';

// Which calls the walk makes of an application depends on its toolkit: Properties.GetAll only where the
// bridge is known to answer it. A Qt 5 application dies on GetAll (the real crash is proven with VLC in
// tests/integration/osworld-a11y-survive.test.ts); here a stand-in bus records the calls and answers as
// each bridge does.

type Msg = { destination: string; path: string; interface: string; member: string; body?: unknown[] };

function fakeDesktop(toolkits: Record<string, string | undefined>, items?: (bus: string) => unknown) {
  const calls: Msg[] = [];
  const apps = Object.keys(toolkits);
  const client = {
    timeoutMs: 1000,
    closed: false,
    peer: async () => undefined,
    call: async (m: Msg) => {
      calls.push(m);
      await new Promise((r) => setImmediate(r));
      const registry = m.destination === 'org.a11y.atspi.Registry';
      const leaf = m.path.endsWith('/child');
      if (m.member === 'GetAll') {
        if (toolkits[m.destination] === 'Qt') throw new A11yCallError('dbus', 'Message recipient disconnected', 'org.freedesktop.DBus.Error.NoReply');
        return registry ? undefined : { Name: `all:${m.destination}`, ChildCount: leaf ? 0 : 1, Attributes: { toolkit: 'x' } };
      }
      if (m.member === 'Get') {
        const [iface, prop] = m.body as [string, string];
        if (iface === 'org.a11y.atspi.Application' && prop === 'ToolkitName') {
          const tk = toolkits[m.destination];
          if (tk === undefined) throw new A11yCallError('dbus', 'no such property', 'org.freedesktop.DBus.Error.UnknownMethod');
          return tk;
        }
        if (prop === 'Name') return registry ? 'main' : `get:${m.destination}`;
        if (prop === 'Description') return '';
        if (prop === 'ChildCount') return registry ? apps.length : leaf ? 0 : 1;
      }
      if (m.member === 'GetItems') {
        if (!items) throw new A11yCallError('dbus', 'no GetItems', 'org.freedesktop.DBus.Error.UnknownMethod');
        return items(m.destination);
      }
      switch (m.member) {
        case 'GetRole':
          return registry ? 14 : leaf ? 62 : 75;
        case 'GetState':
          return [0, 0];
        case 'GetInterfaces':
          return ['org.a11y.atspi.Accessible'];
        case 'GetAttributes':
          return {};
        case 'GetChildren':
          return registry ? apps.map((b) => [b, '/org/a11y/atspi/accessible/root']) : [[m.destination, `${m.path}/child`]];
        default:
          return [];
      }
    },
  };
  return { client: client as never, calls };
}

test('GetAll is asked only of toolkits that answer it; Qt and unknown toolkits are read property by property', async () => {
  const desk = fakeDesktop({ ':1.1': 'Qt', ':1.2': 'gtk', ':1.3': undefined, ':1.4': 'Chromium' });
  const r = await walk(desk.client, {});
  const getAllOn = new Set(desk.calls.filter((m) => m.member === 'GetAll').map((m) => m.destination));
  assert.deepEqual([...getAllOn].sort(), [':1.2', ':1.4', 'org.a11y.atspi.Registry']);
  // Every object of every application was read, with its name, whichever way.
  const names = (n: A11yNode): string[] => [n.name, ...n.children.flatMap(names)];
  assert.deepEqual(names(r.tree).sort(), ['all::1.2', 'all::1.2', 'all::1.4', 'all::1.4', 'get::1.1', 'get::1.1', 'get::1.3', 'get::1.3', 'main'].sort());
  assert.equal(r.stats.errors, 1, 'the one failed call is the ToolkitName of the app that has none');
  // One ToolkitName per application per walk, not one per object.
  const probes = desk.calls.filter((m) => m.member === 'Get' && (m.body as string[])[1] === 'ToolkitName');
  assert.deepEqual(probes.map((m) => m.destination).sort(), [':1.1', ':1.2', ':1.3', ':1.4']);
});

test('Cache.GetItems is asked only of GTK 4, once per walk, and stands for four calls per object but the root', async () => {
  const item = (bus: string) => [
    [bus, '/org/a11y/atspi/accessible/root/child'],
    [bus, '/org/a11y/atspi/accessible/root'],
    [bus, '/org/a11y/atspi/accessible/root'],
    0,
    0,
    ['org.a11y.atspi.Accessible'],
    `cache:${bus}`,
    62,
    '',
    [0, 0],
  ];
  const desk = fakeDesktop({ ':1.1': 'Qt', ':1.2': 'gtk', ':1.3': 'GTK' }, (bus) => [item(bus)]);
  const r = await walk(desk.client, {});
  assert.deepEqual(
    desk.calls.filter((m) => m.member === 'GetItems').map((m) => [m.destination, m.path]),
    [[':1.3', '/org/a11y/atspi/cache']],
  );
  const gtk4 = r.tree.children.find((a) => a.ref.bus === ':1.3')!;
  assert.equal(gtk4.name, 'all::1.3', "the application's root is read, not taken from the cache");
  assert.equal(gtk4.children[0]!.name, 'cache::1.3');
  assert.equal(gtk4.children[0]!.role, 'toggle button', 'role 62 from the cache');
  const onChild = desk.calls.filter((m) => m.destination === ':1.3' && m.path.endsWith('/child')).map((m) => m.member);
  assert.deepEqual(onChild.sort(), ['GetAttributes'], 'only what the cache lacks');
  // Without the cache (the reference walk) the same tree, call by call.
  const ref = fakeDesktop({ ':1.1': 'Qt', ':1.2': 'gtk', ':1.3': 'GTK' }, (bus) => [item(bus)]);
  const rr = await walk(ref.client, { cache: false });
  assert.equal(ref.calls.filter((m) => m.member === 'GetItems').length, 0);
  assert.equal(rr.tree.children.find((a) => a.ref.bus === ':1.3')!.children[0]!.name, 'all::1.3');
});

test("a malformed Cache.GetItems reply (the session's) is ignored item by item, and the objects are read call by call", async () => {
  const junk = (bus: string) => [
    'x',
    [],
    [[bus, 1], [bus, '/p'], [bus, '/p'], 0, 0, [], 'n', 1, '', []],
    [['other', '/org/a11y/atspi/accessible/root/child'], [bus, '/'], [bus, '/'], 0, 0, [], 'stolen', 1, '', []],
    [[bus, '/org/a11y/atspi/accessible/root/child'], [bus, '/'], [bus, '/'], 'zero', 0, [], 'bad', 1, '', []],
  ];
  const desk = fakeDesktop({ ':1.3': 'GTK' }, junk);
  const r = await walk(desk.client, {});
  assert.equal(r.tree.children[0]!.children[0]!.name, 'all::1.3');
  const garbage = fakeDesktop({ ':1.3': 'GTK' }, () => 'not a list');
  assert.equal((await walk(garbage.client, {})).tree.children[0]!.children[0]!.name, 'all::1.3');
});
