import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { startDaemon, type TestDaemon } from '../helpers.ts';

/** Fraction of pixels within `tol` of an RGB colour. */
async function colourShare(png: Buffer, rgb: [number, number, number], tol = 12): Promise<number> {
  const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  let hit = 0;
  for (let i = 0; i < data.length; i += 3) {
    if (Math.abs(data[i]! - rgb[0]) <= tol && Math.abs(data[i + 1]! - rgb[1]) <= tol && Math.abs(data[i + 2]! - rgb[2]) <= tol) hit++;
  }
  return hit / (info.width * info.height);
}

describe('Chromium in a session', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    await d.finish();
  });

  it("`drums session create --url` shows Chromium on the session's own display", async () => {
    // Two sessions with different page colours: each screenshot shows only its own.
    const page = (hex: string, label: string) => `data:text/html,<body style="background:%23${hex};margin:0"><h1>${label}</h1></body>`;
    const c1 = d.cli(['session', 'create', '--url', page('2e8b57', 'one'), '--json']);
    assert.equal(c1.status, 0, c1.stderr);
    const c2 = d.cli(['session', 'create', '--url', page('8b2e6f', 'two'), '--screen', '1024x768', '--json']);
    assert.equal(c2.status, 0, c2.stderr);
    const s1 = JSON.parse(c1.stdout) as { id: string; timings: Record<string, number> };
    const s2 = JSON.parse(c2.stdout) as { id: string };
    const dir = mkdtempSync('/tmp/drums-shot-');
    try {
      assert.ok(s1.timings.browserReadyMs! > 0);
      const wins = await d.client.exec(s1.id, { shell: 'xdotool search --onlyvisible --class chromium | head -1' });
      assert.match(wins.stdout, /^\d+/);
      // The page paints shortly after the window maps: poll screenshots (bounded) until it shows.
      let share1 = 0,
        share2 = 0,
        png1 = Buffer.alloc(0);
      for (let i = 0; i < 60 && (share1 < 0.3 || share2 < 0.3); i++) {
        assert.equal(d.cli(['session', 'screenshot', s1.id, '-o', join(dir, '1.png')]).status, 0);
        assert.equal(d.cli(['session', 'screenshot', s2.id, '-o', join(dir, '2.png')]).status, 0);
        png1 = readFileSync(join(dir, '1.png'));
        share1 = await colourShare(png1, [0x2e, 0x8b, 0x57]);
        share2 = await colourShare(readFileSync(join(dir, '2.png')), [0x8b, 0x2e, 0x6f]);
        if (share1 < 0.3 || share2 < 0.3) await new Promise((r) => setTimeout(r, 250));
      }
      const meta1 = await sharp(png1).metadata();
      assert.deepEqual([meta1.width, meta1.height, meta1.format], [1280, 800, 'png']);
      const meta2 = await sharp(readFileSync(join(dir, '2.png'))).metadata();
      assert.deepEqual([meta2.width, meta2.height], [1024, 768]);
      assert.ok(share1 > 0.3, `session 1 shows its page (${share1})`);
      assert.ok(share2 > 0.3, `session 2 shows its page (${share2})`);
      assert.ok((await colourShare(png1, [0x8b, 0x2e, 0x6f])) < 0.01, 'session 1 shows nothing of session 2');
      assert.equal(d.cli(['session', 'screenshot', s1.id, '-o', join(dir, '1.jpg'), '--format', 'jpeg']).status, 0);
      assert.equal((await sharp(readFileSync(join(dir, '1.jpg'))).metadata()).format, 'jpeg');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      d.cli(['session', 'rm', s1.id, s2.id]);
    }
  });
});
