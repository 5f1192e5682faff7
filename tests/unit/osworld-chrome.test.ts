import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { A11yNode } from '../../src/a11y/types.ts';
import { asGoogleChrome, chromiumWindowName } from '../../src/osworld/chrome.ts';

const node = (role: string, name: string, children: A11yNode[] = []): A11yNode => ({
  role,
  name,
  states: [],
  attributes: {},
  interfaces: [],
  children,
  ref: { bus: ':1.1', path: '/x' },
});

describe('osworld: Chromium as Google Chrome', () => {
  it('renames the Chromium application, not pages or other apps, and leaves the input alone', () => {
    const page = node('document web', 'Chromium');
    const tree = node('desktop frame', 'main', [
      node('application', 'Chromium', [node('frame', 'x - Chromium', [page])]),
      node('application', 'gnome-terminal-server'),
    ]);
    const out = asGoogleChrome(tree);
    assert.deepEqual(
      out.children.map((a) => a.name),
      ['Google Chrome', 'gnome-terminal-server'],
    );
    assert.equal(out.children[0]!.children[0]!.name, 'x - Chromium');
    assert.equal(out.children[0]!.children[0]!.children[0], page);
    assert.equal(tree.children[0]!.name, 'Chromium');
    const none = node('desktop frame', 'main', [node('application', 'soffice')]);
    assert.equal(asGoogleChrome(none), none);
  });

  it('spells a window name that mentions Google Chrome as Chromium does', () => {
    assert.equal(chromiumWindowName('Google Chrome'), 'Chromium');
    assert.equal(chromiumWindowName('New Tab - google chrome'), 'New Tab - Chromium');
    assert.equal(chromiumWindowName('google-chrome.Google-chrome'), 'Chromium.Chromium');
    assert.equal(chromiumWindowName('Terminal'), undefined);
    assert.equal(chromiumWindowName('Chromium'), undefined);
  });
});
