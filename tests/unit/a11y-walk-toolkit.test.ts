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

function fakeDesktop(toolkits: Record<string, string | undefined>) {
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
