// The frame path through the API: binary POST /actions responses (image body, JSON in a header)
// beside the JSON one, and the frame cache seen from outside (same screen → same bytes).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import sharp from 'sharp';
import type { SessionInfo } from '../../src/client/client.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

describe('frames through the API (minimal image)', () => {
  let d: TestDaemon;
  let s: SessionInfo;

  before(async () => {
    d = await startDaemon();
    s = await d.client.createSession({ image: 'minimal', screen: '800x600' });
  });
  after(async () => {
    try {
      if (s) await d.client.destroySession(s.id);
    } finally {
      await d?.finish();
    }
  });

  const post = (body: unknown, accept?: string) =>
    fetch(`${d.url}/v1/sessions/${s.id}/actions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json', ...(accept ? { accept } : {}) },
      body: JSON.stringify(body),
    });

  it('answers image bytes with the JSON in x-drums-actions when asked, and JSON otherwise', async () => {
    const body = { actions: [{ type: 'move', x: 40, y: 30 }], screenshot: { format: 'png' } };
    const bin = await post(body, 'image/png');
    assert.equal(bin.status, 200);
    assert.equal(bin.headers.get('content-type'), 'image/png');
    const meta = JSON.parse(bin.headers.get('x-drums-actions')!);
    assert.equal(meta.generation, 1);
    assert.equal(meta.results[0].type, 'move');
    assert.equal(bin.headers.get('x-drums-width'), '800');
    const png = Buffer.from(await bin.arrayBuffer());
    const js = await post(body);
    assert.equal(js.headers.get('content-type')?.startsWith('application/json'), true);
    const j = (await js.json()) as { screenshot: { data: string } };
    // Nothing changed in between: the same encoding (from the frame cache) either way.
    assert.ok(Buffer.from(j.screenshot.data, 'base64').equals(png));
    const px = await sharp(png).raw().toBuffer({ resolveWithObject: true });
    assert.deepEqual([px.info.width, px.info.height], [800, 600]);
    // Asking for an image type other than the format's gets JSON; image/* matches any image format.
    assert.ok((await post({ ...body, screenshot: { format: 'jpeg' } }, 'image/png')).headers.get('content-type')!.startsWith('application/json'));
    assert.equal((await post({ ...body, screenshot: { format: 'webp' } }, 'image/*')).headers.get('content-type'), 'image/webp');
    // No screenshot asked: JSON, whatever Accept says.
    assert.ok((await post({ actions: [] }, 'image/png')).headers.get('content-type')!.startsWith('application/json'));
  });

  it('the client uses it, and falls back to JSON for results too big for a header', async () => {
    const r = await d.client.actImage(s.id, { actions: [{ type: 'move', x: 10, y: 10 }], screenshot: { format: 'raw', scale: { width: 400, height: 300 } } });
    assert.equal(r.image!.data.length, 400 * 300 * 3);
    assert.deepEqual([r.image!.width, r.image!.height, r.image!.scaleX], [400, 300, 2]);
    const many = Array.from({ length: 600 }, (_, i) => ({ type: 'move', x: i % 800, y: 5 }));
    const raw = await post({ actions: many, screenshot: { format: 'png' } }, 'image/png');
    assert.ok(raw.headers.get('content-type')!.startsWith('application/json'), 'fallback to JSON');
    await raw.arrayBuffer();
    const big = await d.client.actImage(s.id, { actions: many, screenshot: { format: 'png' } });
    assert.equal(big.results.length, 600);
    assert.equal(big.image!.data.subarray(1, 4).toString(), 'PNG');
  });

  it('bad screenshot options are 400 with their codes before anything runs', async () => {
    for (const [shot, code] of [
      [{ format: 'gif' }, 'invalid_format'],
      [{ format: 'jpeg', quality: 0 }, 'invalid_format'],
      [{ scale: { width: 0, height: 1 } }, 'invalid_region'],
    ] as const) {
      const r = await post({ actions: [{ type: 'move', x: 1, y: 1 }], screenshot: shot }, 'image/png');
      assert.equal(r.status, 400);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, code);
    }
  });
});
