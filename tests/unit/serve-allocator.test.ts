import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { unpreloadAllocator } from '../../src/cli/commands/serve.ts';
import { skipUnlessCI } from '../helpers.ts';

const ROOT = join(import.meta.dirname, '..', '..');

test('the daemon drops the jemalloc preload for what it runs, and keeps anything else preloaded', () => {
  const env: NodeJS.ProcessEnv = { DRUMS_MALLOC: 'jemalloc', LD_PRELOAD: '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:/opt/other.so', MALLOC_CONF: 'x' };
  unpreloadAllocator(env);
  assert.equal(env.LD_PRELOAD, '/opt/other.so');
  assert.equal(env.MALLOC_CONF, undefined);
  const only: NodeJS.ProcessEnv = { DRUMS_MALLOC: 'jemalloc', LD_PRELOAD: '/usr/lib/libjemalloc.so.2', MALLOC_CONF: 'x' };
  unpreloadAllocator(only);
  assert.ok(!('LD_PRELOAD' in only) && !('MALLOC_CONF' in only));
  // Not preloaded by bin/drums: the user's own LD_PRELOAD and MALLOC_CONF stay as they were.
  const mine: NodeJS.ProcessEnv = { LD_PRELOAD: '/usr/lib/libjemalloc.so.2', MALLOC_CONF: 'y' };
  unpreloadAllocator(mine);
  assert.deepEqual(mine, { LD_PRELOAD: '/usr/lib/libjemalloc.so.2', MALLOC_CONF: 'y' });
});

test('bin/drums serve runs Node with jemalloc preloaded and a capped young generation', {
  skip: skipUnlessCI(!existsSync('/usr/lib/x86_64-linux-gnu/libjemalloc.so.2') && 'libjemalloc2 is not installed (scripts/setup.sh installs it)'),
}, () => {
  // `serve --help` goes through the same launcher path as the daemon, then prints and exits.
  assert.match(execFileSync(join(ROOT, 'bin', 'drums'), ['serve', '--help'], { encoding: 'utf8' }), /run the host daemon/);
  const trace = execFileSync('bash', ['-c', `bash -x "${ROOT}/bin/drums" serve --help 2>&1 >/dev/null | grep -E '^\\+ exec'`], { encoding: 'utf8' });
  assert.match(trace, /LD_PRELOAD=\S*libjemalloc\.so\.2/);
  assert.match(trace, /--max-semi-space-size=8/);
  const glibc = execFileSync('bash', ['-c', `DRUMS_MALLOC=glibc bash -x "${ROOT}/bin/drums" serve --help 2>&1 >/dev/null | grep -E '^\\+ exec'`], {
    encoding: 'utf8',
  });
  assert.doesNotMatch(glibc, /libjemalloc/);
});
