import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
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

  it('refuses a sparse terabyte without reading it: a bounded failure, not a thrown RangeError', () =>
    withDir((dir) => {
      writeFileSync(join(dir, 'status'), 'x\n');
      truncateSync(join(dir, 'status'), 1024 ** 4);
      const w = new StatusWatcher(join(dir, 'status'));
      const fails: string[] = [];
      w.on('fail', (why: string) => fails.push(why));
      const t0 = performance.now();
      w.poll();
      w.close();
      assert.ok(performance.now() - t0 < 100, `poll took ${performance.now() - t0} ms`);
      assert.equal(fails.length, 1);
      assert.match(w.failure ?? '', /over the \d+ bytes an init writes/);
      assert.equal(w.marks.size, 0);
    }));

  it('fails once on a hole, a shrink or an over-long line; lines before it count', async () =>
    withDir((dir) => {
      const f = join(dir, 'status');
      const cases: [string, () => void, RegExp][] = [
        ['hole', () => truncateSync(f, 5000), /NUL bytes/],
        ['shrink', () => writeFileSync(f, ''), /shrank/],
        ['long line', () => appendFileSync(f, 'y'.repeat(10_000)), /line is over/],
      ];
      for (const [name, attack, why] of cases) {
        writeFileSync(f, 'x\ndbus\n');
        const w = new StatusWatcher(f);
        let fails = 0;
        w.on('fail', () => fails++);
        w.poll();
        attack();
        w.poll();
        w.poll();
        w.close();
        assert.deepEqual([...w.marks.keys()], ['x', 'dbus'], name);
        assert.equal(fails, 1, name);
        assert.match(w.failure ?? '', why, name);
      }
    }));

  it('rejects a readiness wait with the failure, at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-status-'));
    try {
      writeFileSync(join(dir, 'status'), 'x\n');
      const w = new StatusWatcher(join(dir, 'status'));
      const waiting = w.waitFor(['x', 'wm'], 2000);
      truncateSync(join(dir, 'status'), 2 * 1024 ** 2);
      await assert.rejects(waiting, /over the \d+ bytes an init writes/);
      w.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rate-limits a byte-by-byte appender and reads the rest in bounded polls', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-status-'));
    try {
      const f = join(dir, 'status');
      writeFileSync(f, '');
      const w = new StatusWatcher(f);
      let polls = 0;
      const poll = w.poll.bind(w);
      w.poll = () => {
        polls++;
        poll();
      };
      let marks = 0;
      w.on('mark', () => marks++);
      // Another process appends one byte a millisecond for a second: each append an inotify event.
      const t0 = performance.now();
      const py =
        'import os, sys, time\nfd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\nfor i in range(1000):\n    os.write(fd, b"a" if i % 2 == 0 else b"\\n"); time.sleep(0.001)';
      await new Promise<void>((resolve, reject) => execFile('python3', ['-c', py, f], (e) => (e ? reject(e) : resolve())));
      const ms = performance.now() - t0;
      await new Promise((r) => setTimeout(r, 200));
      w.close();
      // A burst of 32, then 20 a second (and the polls that picked up the rest).
      assert.ok(polls <= 32 + Math.ceil((ms + 200) / 50) + 2, `${polls} polls in ${Math.round(ms)} ms`);
      assert.equal(marks, 500);
      assert.equal(w.failure, undefined);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
