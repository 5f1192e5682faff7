import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { loopsBackedBy, makeSessionDisk, unmountSessionDisk } from '../../src/host/disk.ts';
import { runPrefix } from '../helpers.ts';

const MiB = 1024 ** 2;

// Session disks made and removed 8 at once, as parallel creates and destroys do. A loop device's
// name is reused the moment the kernel frees it, so an unmount that detached a device by a name
// it had read before the release could take a neighbour's fresh device between its attach and its
// mount ("can't read superblock", exit 32). Before the fix, 3 of about 700 such cycles failed while
// other daemons made and removed disks on the host too; alone, the old code rarely loses the race.
describe('session disks, 8 at once', () => {
  const dir = mkdtempSync(`/var/tmp/drums-test-${runPrefix()}-disk-`);
  after(() => {
    const mounted = readFileSync('/proc/self/mountinfo', 'utf8').includes(dir);
    rmSync(dir, { recursive: true, force: true });
    assert.equal(mounted, false, 'a session disk is still mounted');
  });

  it('every mount succeeds, and no loop device or mount outlives its unmount', async () => {
    const failures: string[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        const image = join(dir, `d${w}.img`);
        const mountpoint = join(dir, `m${w}`);
        try {
          for (let k = 0; k < 25; k++) {
            try {
              await makeSessionDisk(image, mountpoint, 64 * MiB);
            } catch (e) {
              failures.push(`worker ${w}, cycle ${k}: ${String(e).slice(0, 200)}`);
            }
            await unmountSessionDisk(image, mountpoint);
          }
        } finally {
          await unmountSessionDisk(image, mountpoint);
        }
      }),
    );
    assert.deepEqual(failures, []);
    // Nothing bound to a (deleted) image of this run, once the kernel has had a moment.
    for (let i = 0; i < 20 && loopsBackedBy(dir).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(loopsBackedBy(dir), []);
  });
});
