/**
 * X authorization: one MIT-MAGIC-COOKIE-1 per X server, and the Xauthority file that hands it
 * to the server (`Xvfb -auth`) and to its clients (XAUTHORITY).
 *
 * Why a cookie: a session's X socket is a path on the host, so without one any host user who
 * can reach the path could watch, type into and read the clipboard of the session (issue 27,
 * finding 3). With `-auth`, the server refuses a connection setup that does not carry the
 * cookie, whoever opens the socket.
 *
 * The file format is libXau's (Xau(3), `XauWriteAuth`): entries of five fields, each a
 * big-endian u16 (the family) or a u16 length and that many bytes (address, display number,
 * auth name, auth data). Written here rather than with xauth(1): the daemon writes the file
 * before the session starts, without running a tool in a directory the session owns.
 */
import { randomBytes } from 'node:crypto';

export const XAUTH_NAME = 'MIT-MAGIC-COOKIE-1';
/** Xau families: a local (unix socket) connection to a named host, and any address. */
export const FAMILY_LOCAL = 256;
export const FAMILY_WILD = 65535;
const COOKIE_RE = /^[0-9a-f]{32}$/;

export interface XauthEntry {
  family: number;
  address: Buffer;
  number: string;
  name: string;
  data: Buffer;
}

/** A fresh cookie: 16 random bytes, as hex (what xauth(1) prints and the session record keeps). */
export function newXCookie(): string {
  return randomBytes(16).toString('hex');
}

/** The cookie's 16 bytes; throws on anything but 32 hex digits (a record the daemon did not write). */
export function cookieBytes(hex: string): Buffer {
  if (!COOKIE_RE.test(hex)) throw new Error('an X cookie is 32 lowercase hex digits');
  return Buffer.from(hex, 'hex');
}

/**
 * The Xauthority file for display `display` with `cookie`: a FamilyLocal entry for `hostname`
 * (python-xlib, thus pyautogui, matches only family, address and number exactly) and a
 * FamilyWild one (libXau: Xlib and xcb clients, whatever the host name says).
 */
export function xauthorityFile(cookie: string, hostname: string, display = '0'): Buffer {
  const data = cookieBytes(cookie);
  const entries: XauthEntry[] = [
    { family: FAMILY_LOCAL, address: Buffer.from(hostname), number: display, name: XAUTH_NAME, data },
    { family: FAMILY_WILD, address: Buffer.alloc(0), number: display, name: XAUTH_NAME, data },
  ];
  const parts: Buffer[] = [];
  const field = (b: Buffer) => {
    const n = Buffer.alloc(2);
    n.writeUInt16BE(b.length);
    parts.push(n, b);
  };
  for (const e of entries) {
    const f = Buffer.alloc(2);
    f.writeUInt16BE(e.family);
    parts.push(f);
    field(e.address);
    field(Buffer.from(e.number));
    field(Buffer.from(e.name));
    field(e.data);
  }
  return Buffer.concat(parts);
}

/** The entries of an Xauthority file (a truncated last entry is dropped, as libXau does). */
export function parseXauthority(buf: Buffer): XauthEntry[] {
  const out: XauthEntry[] = [];
  let o = 0;
  const field = (): Buffer | undefined => {
    if (o + 2 > buf.length) return undefined;
    const n = buf.readUInt16BE(o);
    if (o + 2 + n > buf.length) return undefined;
    const b = buf.subarray(o + 2, o + 2 + n);
    o += 2 + n;
    return b;
  };
  while (o + 2 <= buf.length) {
    const family = buf.readUInt16BE(o);
    o += 2;
    const address = field();
    const number = field();
    const name = field();
    const data = field();
    if (!address || !number || !name || !data) break;
    out.push({ family, address, number: number.toString('latin1'), name: name.toString('latin1'), data });
  }
  return out;
}

/** The connection setup request (byte order 'l', protocol 11.0) with `cookie`, or with no authorization. */
export function setupRequest(cookie?: string): Buffer {
  const name = cookie ? Buffer.from(XAUTH_NAME) : Buffer.alloc(0);
  const data = cookie ? cookieBytes(cookie) : Buffer.alloc(0);
  const pad = (n: number) => (4 - (n % 4)) % 4;
  const head = Buffer.alloc(12);
  head.write('l', 0);
  head.writeUInt16LE(11, 2);
  head.writeUInt16LE(name.length, 6);
  head.writeUInt16LE(data.length, 8);
  return Buffer.concat([head, name, Buffer.alloc(pad(name.length)), data, Buffer.alloc(pad(data.length))]);
}
