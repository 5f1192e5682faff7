import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// The guest server's /setup/upload is atomic: a failed upload leaves the old file as it was, and no temporary file.
type S = { id: string; osworld?: { serverPort: number } };
const KiB = 1024;
const MiB = 1024 * KiB;
const LIMIT = MiB;

describe('osworld guest upload: atomic', () => {
  let d: TestDaemon;
  let s: S;
  let base: string;
  before(async () => {
    d = await startDaemon({ DRUMS_OSWORLD_MAX_BODY: String(LIMIT) });
    s = (await d.client.createSession({ image: 'minimal', diskMb: 64, labels: { 'drums.osworld': '1' } } as never)) as unknown as S;
    base = `http://127.0.0.1:${s.osworld!.serverPort}`;
  });
  after(async () => {
    try {
      if (s) await d.client.destroySession(s.id).catch(() => {});
    } finally {
      await d.finish();
    }
  });

  const sh = async (cmd: string) => (await d.client.exec(s.id, { shell: cmd })).stdout;
  const upload = (bytes: number, path: string, fill = 0x61) => {
    const form = new FormData();
    form.set('file_path', path);
    form.set('file_data', new Blob([Buffer.alloc(bytes, fill)]), 'f');
    return fetch(`${base}/setup/upload`, { method: 'POST', body: form });
  };

  it('an upload that fails on a full disk leaves the old file intact and no temporary file', async () => {
    await sh("mkdir -p /home/user/up && printf 'old contents\\n' > /home/user/up/keep && chmod 640 /home/user/up/keep");
    // Fill the session's disk (its own 64 MiB quota), then upload more than is left over the old file.
    await sh('dd if=/dev/zero of=/home/user/fill bs=1M 2>/dev/null; sync; true');
    const r = await upload(900 * KiB, '/home/user/up/keep');
    const body = await r.text();
    assert.equal(r.status, 507, body);
    assert.match((JSON.parse(body) as { error: string }).error, /Failed to upload file: .*No space left on device/);
    assert.equal(await sh('cat /home/user/up/keep'), 'old contents\n', 'the old file is as it was');
    assert.equal(await sh('ls -A /home/user/up'), 'keep\n', 'no temporary file is left');
    // With room again the same upload replaces the file whole and keeps its mode.
    await sh('rm -f /home/user/fill');
    const ok = await upload(900 * KiB, '/home/user/up/keep');
    assert.equal(ok.status, 200, await ok.text());
    assert.equal((await sh('stat -c "%s %a" /home/user/up/keep')).trim(), `${900 * KiB} 640`);
    assert.equal(await sh('ls -A /home/user/up'), 'keep\n');
    // A new file in a new directory gets the umask's mode; a directory target is 400 and stays a directory.
    const fresh = await upload(10, '/home/user/up/new/dir/f');
    assert.equal(fresh.status, 200, await fresh.text());
    assert.equal((await sh('stat -c "%s %a" /home/user/up/new/dir/f')).trim(), '10 644');
    const dir = await upload(10, '/home/user/up/new');
    assert.equal(dir.status, 400, await dir.text());
    assert.equal(await sh('ls -A /home/user/up/new'), 'dir\n');
  });
});
