import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StatusWatcher } from '../../src/session/status-watcher.ts';

// The status file is in a directory the session can write: what it plants there must not hang or mislead the daemon.
describe('StatusWatcher on a session-planted status file', () => {
  const withDir = (f: (dir: string) => void) => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-status-'));
    try {
      f(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  it('reads stages from a regular file', () =>
    withDir((dir) => {
      writeFileSync(join(dir, 'status'), 'x11\nwm\n');
      const w = new StatusWatcher(join(dir, 'status'));
      w.poll();
      w.close();
      assert.deepEqual([...w.marks.keys()], ['x11', 'wm']);
    }));

  it('ignores a symlink (to another file, or to /dev/zero) and a FIFO, without blocking', () =>
    withDir((dir) => {
      writeFileSync(join(dir, 'other'), 'x11\nwm\nbrowser\n');
      symlinkSync(join(dir, 'other'), join(dir, 'status'));
      const w = new StatusWatcher(join(dir, 'status'));
      w.poll();
      w.close();
      assert.equal(w.marks.size, 0);
      rmSync(join(dir, 'status'));
      symlinkSync('/dev/zero', join(dir, 'status'));
      const z = new StatusWatcher(join(dir, 'status'));
      z.poll();
      z.close();
      assert.equal(z.marks.size, 0);
      rmSync(join(dir, 'status'));
      execFileSync('mkfifo', [join(dir, 'status')]);
      const f = new StatusWatcher(join(dir, 'status'));
      f.poll();
      f.close();
      assert.equal(f.marks.size, 0);
    }));
});
