// The VNC input gate (src/api/frames/rfb-gate.ts): the handshake and pixel requests always
// pass, input passes only while allowed, split and merged chunks parse the same, and anything
// unparsable ends the connection.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_CUT_TEXT, RfbGateError, RfbInputGate } from '../../src/api/frames/rfb-gate.ts';

const HANDSHAKE = Buffer.concat([Buffer.from('RFB 003.008\n'), Buffer.from([1]), Buffer.from([1])]);
const FB_REQUEST = Buffer.from([3, 0, 0, 0, 0, 0, 0, 16, 0, 16]);
const SET_ENCODINGS = Buffer.from([2, 0, 0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x21]);
const KEY = Buffer.from([4, 1, 0, 0, 0, 0, 0, 0x61]);
const POINTER = Buffer.from([5, 1, 0, 10, 0, 20]);
const cut = (text: string) => {
  const b = Buffer.alloc(8);
  b[0] = 6;
  b.writeUInt32BE(Buffer.byteLength(text), 4);
  return Buffer.concat([b, Buffer.from(text)]);
};
const DESKTOP_SIZE = Buffer.concat([Buffer.from([251, 0, 0x05, 0, 0x04, 0, 1, 0]), Buffer.alloc(16)]);
const QEMU_KEY = Buffer.from([255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 30]);

test('view-only: the handshake and pixel requests pass, every kind of input is dropped', () => {
  const g = new RfbInputGate(() => false);
  const stream = Buffer.concat([HANDSHAKE, SET_ENCODINGS, FB_REQUEST, KEY, POINTER, cut('secret'), DESKTOP_SIZE, QEMU_KEY, FB_REQUEST]);
  assert.ok(g.feed(stream).equals(Buffer.concat([HANDSHAKE, SET_ENCODINGS, FB_REQUEST, FB_REQUEST])));
  assert.equal(g.dropped, 5);
});

test('while allowed, everything passes byte for byte, however the bytes are split', () => {
  let allow = true;
  const g = new RfbInputGate(() => allow);
  const stream = Buffer.concat([HANDSHAKE, SET_ENCODINGS, KEY, POINTER, cut('héllo'), FB_REQUEST]);
  const out: Buffer[] = [];
  for (let i = 0; i < stream.length; i += 3) out.push(g.feed(stream.subarray(i, i + 3)));
  assert.ok(Buffer.concat(out).equals(stream));
  assert.equal(g.dropped, 0);
  // The take-over ends: the very next input is dropped.
  allow = false;
  assert.equal(g.feed(Buffer.concat([POINTER, FB_REQUEST])).length, FB_REQUEST.length);
  assert.equal(g.dropped, 1);
});

test('RFB 3.3 has no security selection from the client', () => {
  const g = new RfbInputGate(() => false);
  const out = g.feed(Buffer.concat([Buffer.from('RFB 003.003\n'), Buffer.from([1]), FB_REQUEST, KEY]));
  assert.equal(out.length, 12 + 1 + FB_REQUEST.length);
});

test('unparsable input ends the connection', () => {
  const fresh = () => {
    const g = new RfbInputGate(() => true);
    g.feed(HANDSHAKE);
    return g;
  };
  assert.throws(() => new RfbInputGate(() => true).feed(Buffer.from('GET / HTTP/1.1\r\n')), RfbGateError);
  assert.throws(() => new RfbInputGate(() => true).feed(Buffer.from('RFB 003.008\n\x02')), RfbGateError, 'VNC auth is not served');
  assert.throws(() => fresh().feed(Buffer.from([9, 0, 0, 0])), RfbGateError);
  assert.throws(() => fresh().feed(Buffer.from([255, 1, 0, 0])), RfbGateError);
  const huge = Buffer.alloc(8);
  huge[0] = 6;
  huge.writeUInt32BE(MAX_CUT_TEXT + 1, 4);
  assert.throws(() => fresh().feed(huge), RfbGateError);
});
