// OSWorld XML and /terminal semantics on hand-built trees (no desktop needed).

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pythonFloat, tagForRole, terminalText, toOsworldXml, type A11yNode } from '../../src/a11y/index.ts';

const NS =
  ' xmlns:st="https://accessibility.ubuntu.example.org/ns/state"' +
  ' xmlns:attr="https://accessibility.ubuntu.example.org/ns/attributes"' +
  ' xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"' +
  ' xmlns:doc="https://accessibility.ubuntu.example.org/ns/document"' +
  ' xmlns:docattr="https://accessibility.ubuntu.example.org/ns/document/attributes"' +
  ' xmlns:txt="https://accessibility.ubuntu.example.org/ns/text"' +
  ' xmlns:val="https://accessibility.ubuntu.example.org/ns/value"' +
  ' xmlns:act="https://accessibility.ubuntu.example.org/ns/action"';

function n(role: string, name: string, extra: Partial<A11yNode> = {}): A11yNode {
  return { role, name, states: [], attributes: {}, interfaces: ['Accessible'], children: [], ref: { bus: ':1.1', path: '/x' }, ...extra };
}

const desktop = (...apps: A11yNode[]) => n('desktop frame', 'main', { children: apps });

describe('toOsworldXml', () => {
  it('writes the root with only the namespace map', () => {
    assert.equal(toOsworldXml(desktop()), `<desktop-frame${NS}/>`);
  });

  it('orders attributes as OSWorld does and formats geometry as Python tuples', () => {
    const button = n('push button', 'OK "go" & <now>\n', {
      states: ['enabled', 'showing', 'visible'],
      attributes: { toolkit: 'gtk', 'xml-roles': 'button' },
      interfaces: ['Accessible', 'Action', 'Component', 'Image', 'Selection', 'Value'],
      extents: { x: -3, y: 20, width: 80, height: 24 },
      value: { current: 1, min: 0, max: 1e16, step: 0.00001 },
      actions: [
        { name: 'click', description: 'Clicks', keyBinding: '<Alt>o' },
        { name: 'show menu', description: '', keyBinding: '' },
      ],
      text: 'Ok\uFFFC\uFFFD & more\r',
    });
    assert.equal(
      toOsworldXml(desktop(n('application', 'app', { children: [button] }))),
      `<desktop-frame${NS}><application name="app">` +
        '<push-button name="OK &quot;go&quot; &amp; &lt;now&gt;&#10;" st:enabled="true" st:showing="true" st:visible="true"' +
        ' attr:toolkit="gtk" attr:xml-roles="button" cp:screencoord="(-3, 20)" cp:size="(80, 24)" image="true" selection="true"' +
        ' val:value="1.0" val:min="0.0" val:max="1e+16" val:step="1e-05"' +
        ' act:click_desc="Clicks" act:click_kb="&lt;Alt&gt;o" act:show-menu_desc="" act:show-menu_kb="">Ok &amp; more&#13;</push-button>' +
        '</application></desktop-frame>',
    );
  });

  it('writes geometry only for visible and showing nodes, and skips stubs', () => {
    const hidden = n('label', 'h', { states: ['visible'], extents: { x: 1, y: 2, width: 3, height: 4 } });
    const stub: A11yNode = { ...n('application', ''), stub: true, truncated: true, error: 'timeout' };
    assert.equal(
      toOsworldXml(desktop(n('application', 'a', { children: [hidden] }), stub)),
      `<desktop-frame${NS}><application name="a"><label name="h" st:visible="true"/></application></desktop-frame>`,
    );
  });

  it('applies depth and width limits', () => {
    const deep = n('panel', 'd1', { children: [n('panel', 'd2', { children: [n('panel', 'd3')] })] });
    const app = n('application', 'a', { children: [deep, n('panel', 'second')] });
    assert.equal(
      toOsworldXml(desktop(app), { maxDepth: 2, maxWidth: 1 }),
      `<desktop-frame${NS}><application name="a"><panel name="d1"/></application></desktop-frame>`,
    );
  });

  it('names tags from roles', () => {
    assert.equal(tagForRole('page tab list'), 'page-tab-list');
    assert.equal(tagForRole(''), 'unknown');
    assert.equal(tagForRole(' document web '), 'document-web');
  });

  it('formats floats like Python str()', () => {
    const cases: Array<[number, string]> = [
      [0, '0.0'],
      [42, '42.0'],
      [-1.5, '-1.5'],
      [0.1, '0.1'],
      [1e-4, '0.0001'],
      [1e-5, '1e-05'],
      [123456789012345680, '1.2345678901234568e+17'],
      [1e15, '1000000000000000.0'],
      [1e16, '1e+16'],
      [Infinity, 'inf'],
      [NaN, 'nan'],
      [2.5e-7, '2.5e-07'],
    ];
    for (const [v, s] of cases) assert.equal(pythonFloat(v), s, String(v));
  });
});

describe('terminalText', () => {
  const term = (text: string, focused = true) => n('terminal', '', { states: focused ? ['focused'] : [], text, interfaces: ['Accessible', 'Text'] });
  const gt = (active: boolean, ...kids: A11yNode[]) =>
    n('application', 'gnome-terminal-server', {
      children: [n('frame', 'Terminal', { states: active ? ['active'] : [], children: [n('filler', '', { children: kids })] })],
    });

  it('returns the focused terminal of the active frame, right-trimmed', () => {
    assert.equal(terminalText(desktop(gt(true, term('$ ls\nfile\uFFFC  \n\n')))), '$ ls\nfile');
  });

  it('is null without an active frame, or with zero or several matches', () => {
    assert.equal(terminalText(desktop(gt(false, term('x')))), null);
    assert.equal(terminalText(desktop(gt(true, term('x', false)))), null);
    assert.equal(terminalText(desktop(gt(true, term('a'), term('b')))), null);
    assert.equal(terminalText(desktop()), null);
  });

  it('accepts other terminal apps when asked', () => {
    const xterm = n('application', 'xfce4-terminal', { children: [n('frame', 'T', { states: ['active'], children: [term('hi ')] })] });
    assert.equal(terminalText(desktop(xterm)), null);
    assert.equal(terminalText(desktop(xterm), { apps: ['xfce4-terminal'] }), 'hi');
  });
});
