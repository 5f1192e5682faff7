// Debian's Chromium passing as Google Chrome where OSWorld tasks look for it, on the host side.
// The image side (a process named chrome, google-chrome-stable, Chrome's profile path) is in
// images/osworld.json and guest/osworld/google-chrome; docs/osworld.md, "The browser".

import type { A11yNode } from '../a11y/types.ts';

/** The name Chromium registers on AT-SPI (its compiled-in product name). */
export const CHROMIUM_NAME = 'Chromium';
/** The name tasks expect: desktop_env's a11y getters select `application[name=Google\ Chrome]` on x86. */
export const CHROME_NAME = 'Google Chrome';

/**
 * The tree with each application named Chromium renamed Google Chrome (applications only; a page or a
 * window title that says Chromium is left alone). In the osworld image every Chromium is the browser
 * the google-chrome launcher started, so this is the name the VM's browser would report.
 */
export function asGoogleChrome(tree: A11yNode): A11yNode {
  if (!tree.children.some((a) => a.name === CHROMIUM_NAME)) return tree;
  return { ...tree, children: tree.children.map((a) => (a.name === CHROMIUM_NAME ? { ...a, name: CHROME_NAME } : a)) };
}

/**
 * For a window name that mentions Google Chrome, the same name as Chromium's windows spell it (titles end
 * in "- Chromium": the product name is compiled in). Undefined when the name does not mention Chrome.
 */
export function chromiumWindowName(name: string): string | undefined {
  const re = /google[ -]chrome/gi;
  return re.test(name) ? name.replace(re, CHROMIUM_NAME) : undefined;
}
