// OSWorld's accessibility-tree XML (the `AT` string of GET /accessibility) and its /terminal lookup, written
// from the contract in docs (reference: osworld-contract.md §2.3 and §3). The output matches what an lxml
// `tostring(..., encoding="unicode")` of the same tree gives: namespaces declared once on the root, no
// whitespace between elements, `<x/>` for empty elements, libxml2's escaping.

import { OSWORLD_MAX_DEPTH, OSWORLD_MAX_WIDTH, OSWORLD_NS } from './atspi-constants.ts';
import type { A11yNode } from './types.ts';

export type OsworldXmlOptions = {
  /** Nodes at this depth (applications = 1) are written without children. Default 50. */
  maxDepth?: number;
  /** At most this many children per node. Default 1024. */
  maxWidth?: number;
};

const NS_URI = new Map(OSWORLD_NS.map(([prefix, uri]) => [prefix, uri]));

// Characters XML 1.0 cannot carry at all; lxml refuses them, we drop them.
const INVALID_XML_CHARS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/gu;

function clean(s: string): string {
  return s.replace(INVALID_XML_CHARS, '');
}

/** libxml2's attribute escaping: & < > " and the three whitespace controls. */
export function escapeAttribute(s: string): string {
  return clean(s).replace(/[&<>"\n\r\t]/g, (c) => {
    switch (c) {
      case '&':
        return '&amp;';
      case '<':
        return '&lt;';
      case '>':
        return '&gt;';
      case '"':
        return '&quot;';
      case '\n':
        return '&#10;';
      case '\r':
        return '&#13;';
      default:
        return '&#9;';
    }
  });
}

/** libxml2's text escaping: & < > and carriage return. */
export function escapeText(s: string): string {
  return clean(s).replace(/[&<>\r]/g, (c) => (c === '&' ? '&amp;' : c === '<' ? '&lt;' : c === '>' ? '&gt;' : '&#13;'));
}

// An XML NCName, close enough: the ASCII rules exactly, and non-ASCII letters allowed.
const NCNAME = /^[A-Za-z_\u00C0-\uFFFF][-.0-9A-Za-z_\u00B7\u00C0-\uFFFF]*$/u;

/** Python's `str(float)`: shortest round-trip digits, `1.0` not `1`, exponent form outside [1e-4, 1e16). */
export function pythonFloat(v: number): string {
  if (Number.isNaN(v)) return 'nan';
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf';
  if (v === 0) return Object.is(v, -0) ? '-0.0' : '0.0';
  const [mantissa, expText] = v.toExponential().split('e') as [string, string];
  const exp = Number(expText);
  if (exp < -4 || exp >= 16) {
    return `${mantissa}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  const digits = mantissa.replace('-', '').replace('.', '');
  const sign = v < 0 ? '-' : '';
  if (exp >= 0) {
    const intPart = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
    const frac = digits.slice(exp + 1);
    return `${sign}${intPart}.${frac === '' ? '0' : frac}`;
  }
  return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
}

/** OSWorld's tag for a role: spaces become dashes, empty becomes `unknown`. */
export function tagForRole(role: string): string {
  const tag = role.trim().replace(/ /g, '-');
  if (tag === '') return 'unknown';
  return NCNAME.test(tag) ? tag : 'unknown';
}

/** Text content as OSWorld writes it: U+FFFC and U+FFFD removed. */
function visibleText(node: A11yNode): string {
  return node.text === undefined ? '' : node.text.replace(/[\uFFFC\uFFFD]/g, '');
}

function nodeAttributes(node: A11yNode): Map<string, string> {
  // A Map keeps the first position of a key that is set again, as a Python dict does.
  const attrs = new Map<string, string>();
  const ns = (prefix: string, local: string, value: string) => {
    if (local !== '' && NCNAME.test(local)) attrs.set(`${prefix}:${local}`, value);
  };
  attrs.set('name', node.name);
  for (const state of node.states) ns('st', state, 'true');
  for (const [key, value] of Object.entries(node.attributes)) ns('attr', key, value);
  if (node.extents && node.states.includes('visible') && node.states.includes('showing')) {
    const { x, y, width, height } = node.extents;
    attrs.set('cp:screencoord', `(${x}, ${y})`);
    attrs.set('cp:size', `(${width}, ${height})`);
  }
  if (node.interfaces.includes('Image')) attrs.set('image', 'true');
  if (node.interfaces.includes('Selection')) attrs.set('selection', 'true');
  if (node.value) {
    const { current, min, max, step } = node.value;
    if (current !== undefined) attrs.set('val:value', pythonFloat(current));
    if (min !== undefined) attrs.set('val:min', pythonFloat(min));
    if (max !== undefined) attrs.set('val:max', pythonFloat(max));
    if (step !== undefined) attrs.set('val:step', pythonFloat(step));
  }
  for (const action of node.actions ?? []) {
    const name = action.name.replace(/ /g, '-');
    ns('act', `${name}_desc`, action.description);
    ns('act', `${name}_kb`, action.keyBinding);
  }
  return attrs;
}

function writeNode(node: A11yNode, depth: number, limits: Required<OsworldXmlOptions>, out: string[]): void {
  const tag = tagForRole(node.role);
  out.push('<', tag);
  for (const [key, value] of nodeAttributes(node)) out.push(' ', key, '="', escapeAttribute(value), '"');
  const text = visibleText(node);
  const children = depth >= limits.maxDepth ? [] : node.children.slice(0, limits.maxWidth).filter((c) => !c.stub);
  if (text === '' && children.length === 0) {
    out.push('/>');
    return;
  }
  out.push('>');
  if (text !== '') out.push(escapeText(text));
  for (const child of children) writeNode(child, depth + 1, limits, out);
  out.push('</', tag, '>');
}

/**
 * Serialize a walked tree as OSWorld's Linux accessibility XML. The root is `<desktop-frame>` carrying only the
 * namespace declarations; each application below it is written with its subtree. Application order is the
 * tree's (registry) order; upstream's order is whatever its thread pool finishes first.
 */
export function toOsworldXml(tree: A11yNode, options: OsworldXmlOptions = {}): string {
  const limits = { maxDepth: options.maxDepth ?? OSWORLD_MAX_DEPTH, maxWidth: options.maxWidth ?? OSWORLD_MAX_WIDTH };
  const out: string[] = ['<desktop-frame'];
  for (const [prefix, uri] of OSWORLD_NS) out.push(' xmlns:', prefix, '="', escapeAttribute(uri), '"');
  const apps = tree.children.filter((c) => !c.stub);
  if (apps.length === 0) return `${out.join('')}/>`;
  out.push('>');
  for (const app of apps) writeNode(app, 1, limits, out);
  out.push('</desktop-frame>');
  return out.join('');
}

/** Namespace URI of a prefix used in the XML (`st`, `attr`, `cp`, …). */
export function osworldNamespace(prefix: string): string | undefined {
  return NS_URI.get(prefix);
}

export type TerminalTextOptions = {
  /** Application names that count as terminals. Default `['gnome-terminal-server']`, as upstream. */
  apps?: readonly string[];
};

// Python's str.isspace() set at the end of a string (JS \s lacks U+001C–U+001F and U+0085).
const TRAILING_PY_WHITESPACE = /[\s\u001C-\u001F\u0085]+$/u;

function collectFocusedTerminals(node: A11yNode, out: A11yNode[]): void {
  for (const child of node.children) {
    if (child.stub) continue;
    if (tagForRole(child.role) === 'terminal' && child.states.includes('focused')) out.push(child);
    collectFocusedTerminals(child, out);
  }
}

/**
 * OSWorld's GET /terminal: the text of the one focused `terminal` inside an ACTIVE `frame` of a terminal
 * application, trailing whitespace removed. `null` when there is no such application frame or when zero or
 * several terminals match. (Upstream fails with a 500 when the match has no text; this returns ''.)
 */
export function terminalText(tree: A11yNode, options: TerminalTextOptions = {}): string | null {
  const names = new Set(options.apps ?? ['gnome-terminal-server']);
  const frames: A11yNode[] = [];
  for (const app of tree.children) {
    if (app.stub || tagForRole(app.role) !== 'application' || !names.has(app.name)) continue;
    for (const frame of app.children) {
      if (!frame.stub && tagForRole(frame.role) === 'frame' && frame.states.includes('active')) frames.push(frame);
    }
  }
  if (frames.length === 0) return null;
  const matches: A11yNode[] = [];
  for (const frame of frames) collectFocusedTerminals(frame, matches);
  if (matches.length !== 1) return null;
  return clean(visibleText(matches[0]!)).replace(TRAILING_PY_WHITESPACE, '');
}
