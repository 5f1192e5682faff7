// Binary step responses: which Accept headers ask for image bytes, and the header-safe JSON.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { asciiJson, wantsBinary } from '../../src/api/routes/actions.ts';
import { parseStreamQuery } from '../../src/api/frames/stream.ts';

test('Accept: the exact type, image/* for images, never JSON-only or absent', () => {
  assert.equal(wantsBinary('image/png', 'image/png'), true);
  assert.equal(wantsBinary('image/png, application/json', 'image/png'), true);
  assert.equal(wantsBinary('image/webp;q=0.9', 'image/webp'), true);
  assert.equal(wantsBinary('image/*', 'image/jpeg'), true);
  assert.equal(wantsBinary('image/*', 'application/octet-stream'), false);
  assert.equal(wantsBinary('application/octet-stream', 'application/octet-stream'), true);
  assert.equal(wantsBinary('image/png', 'image/jpeg'), false);
  assert.equal(wantsBinary('application/json', 'image/png'), false);
  assert.equal(wantsBinary('*/*', 'image/png'), false);
  assert.equal(wantsBinary(undefined, 'image/png'), false);
});

test('asciiJson escapes every non-ASCII character and stays the same JSON', () => {
  const v = { t: 'héllo 日本 😀', n: 1 };
  const s = asciiJson(v);
  assert.match(s, /^[\x20-\x7e]*$/);
  assert.deepEqual(JSON.parse(s), v);
});

test('stream query: defaults, factors and sizes, and stable codes for bad values', () => {
  const screen = { width: 1280, height: 800 };
  assert.deepEqual(parseStreamQuery({}, screen), { fps: 5, format: 'jpeg', quality: 70, scale: undefined, cursor: true });
  assert.deepEqual(parseStreamQuery({ scale: '0.25' }, screen).scale, { width: 320, height: 200 });
  assert.deepEqual(parseStreamQuery({ scale: '640x400', fps: '0.5', format: 'webp', quality: '90', cursor: 'false' }, screen), {
    fps: 0.5,
    format: 'webp',
    quality: 90,
    scale: { width: 640, height: 400 },
    cursor: false,
  });
  assert.equal(parseStreamQuery({ scale: '1280x800' }, screen).scale, undefined);
  for (const [q, code] of [
    [{ fps: '0' }, 'invalid_request'],
    [{ fps: '30.5' }, 'invalid_request'],
    [{ fps: '1e1' }, 'invalid_request'],
    [{ format: 'raw' }, 'invalid_format'],
    [{ quality: '0' }, 'invalid_format'],
    [{ quality: '7.5' }, 'invalid_format'],
    [{ scale: '0' }, 'invalid_region'],
    [{ scale: '1281x10' }, 'invalid_region'],
    [{ scale: '-1x5' }, 'invalid_region'],
    [{ cursor: 'maybe' }, 'invalid_request'],
    [{ nope: '1' }, 'invalid_request'],
  ] as const) {
    assert.throws(
      () => parseStreamQuery(q as Record<string, string>, screen),
      (e: { code?: string }) => e.code === code,
      JSON.stringify(q),
    );
  }
});
