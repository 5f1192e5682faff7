import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkRootOnly, copyTree, relinkBeneath, removeTree, unlinkBeneath } from '../../src/host/safe-fs.ts';

// src/host/safe-fs.ts: the daemon's hands in trees a session writes never follow a link.
describe('safe-fs', () => {
  const scratch = () => mkdtempSync(join(tmpdir(), 'drums-safe-fs-'));

  it('unlinkBeneath removes a file, or a final symlink itself, and refuses a link on the way', () => {
    const d = scratch();
    try {
      const tree = join(d, 'tree');
      const outside = join(d, 'outside');
      mkdirSync(join(tree, 'etc'), { recursive: true });
      mkdirSync(outside);
      writeFileSync(join(outside, 'machine-id'), 'host\n');
      writeFileSync(join(tree, 'etc', 'hostname'), 'x\n');
      symlinkSync(join(outside, 'machine-id'), join(tree, 'etc', 'machine-id'));
      symlinkSync(outside, join(tree, 'link'));
      assert.deepEqual(unlinkBeneath(tree, 'etc/hostname'), { result: 'removed' });
      assert.equal(existsSync(join(tree, 'etc', 'hostname')), false);
      // A final symlink goes; what it names stays.
      assert.deepEqual(unlinkBeneath(tree, 'etc/machine-id'), { result: 'removed' });
      assert.equal(readFileSync(join(outside, 'machine-id'), 'utf8'), 'host\n');
      // A link on the way: nothing removed.
      const r = unlinkBeneath(tree, 'link/machine-id');
      assert.equal(r.result, 'refused');
      assert.match(r.why ?? '', /symlink/);
      assert.equal(readFileSync(join(outside, 'machine-id'), 'utf8'), 'host\n');
      assert.equal(unlinkBeneath(tree, 'missing/file').result, 'absent');
      assert.equal(unlinkBeneath(tree, 'etc/none').result, 'absent');
      assert.equal(unlinkBeneath(tree, 'etc').result, 'refused');
      assert.throws(() => unlinkBeneath(tree, '../outside/machine-id'), /plain relative path/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });

  it('relinkBeneath rewrites a symlink in place, never through a link on the way', () => {
    const d = scratch();
    try {
      const tree = join(d, 'tree');
      const outside = join(d, 'outside');
      mkdirSync(join(tree, 'a', 'chromium'), { recursive: true });
      mkdirSync(join(tree, 'b'), { recursive: true });
      mkdirSync(outside);
      symlinkSync('src-1', join(tree, 'a', 'chromium', 'SingletonLock'));
      symlinkSync('src-1', join(outside, 'SingletonLock'));
      symlinkSync(outside, join(tree, 'b', 'chromium'));
      const map = (t: string) => (t.startsWith('src-') ? `copy-${t.slice(4)}` : undefined);
      const { uid, gid } = statSync(d);
      assert.equal(relinkBeneath(tree, 'a/chromium/SingletonLock', map, uid, gid), true);
      assert.equal(readlinkSync(join(tree, 'a', 'chromium', 'SingletonLock')), 'copy-1');
      assert.equal(relinkBeneath(tree, 'b/chromium/SingletonLock', map, uid, gid), false);
      assert.equal(readlinkSync(join(outside, 'SingletonLock')), 'src-1');
      assert.equal(relinkBeneath(tree, 'a/chromium/none', map, uid, gid), false);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });

  it('copyTree keeps links as links and holes as holes; removeTree removes without following', async () => {
    const d = scratch();
    try {
      const from = join(d, 'from');
      const outside = join(d, 'outside');
      mkdirSync(join(from, 'sub'), { recursive: true });
      mkdirSync(outside);
      writeFileSync(join(outside, 'keep'), 'keep\n');
      symlinkSync(outside, join(from, 'link'));
      writeFileSync(join(from, 'sub', 'f'), 'f\n');
      // 1 TiB of hole.
      writeFileSync(join(from, 'sparse'), '');
      truncateSync(join(from, 'sparse'), 2 ** 40);
      const to = join(d, 'to');
      await copyTree(from, to);
      assert.equal(lstatSync(join(to, 'link')).isSymbolicLink(), true);
      assert.equal(readlinkSync(join(to, 'link')), outside);
      assert.equal(readFileSync(join(to, 'sub', 'f'), 'utf8'), 'f\n');
      const st = statSync(join(to, 'sparse'));
      assert.equal(st.size, 2 ** 40);
      assert.ok(st.blocks * 512 < 1024 ** 2, `${st.blocks} blocks`);
      await removeTree(to);
      assert.equal(existsSync(to), false);
      assert.equal(readFileSync(join(outside, 'keep'), 'utf8'), 'keep\n');
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });

  it('checkRootOnly refuses a directory others can write (and, for a non-root caller, any of its own)', () => {
    const d = scratch();
    try {
      chmodSync(d, 0o777);
      assert.throws(() => checkRootOnly(d), /writable by group or others|not root/);
      chmodSync(d, 0o700);
      if (process.getuid?.() === 0) {
        checkRootOnly(d);
        mkdirSync(join(d, 'open'), { mode: 0o700 });
        chmodSync(d, 0o777);
        // A parent others can write (and not sticky) lets them swap the child.
        assert.throws(() => checkRootOnly(join(d, 'open')), /writable by group or others/);
        chmodSync(d, 0o1777);
        checkRootOnly(join(d, 'open'));
      } else assert.throws(() => checkRootOnly(d), /not root/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
