import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { IO_URING, seccompProfile } from '../../src/host/seccomp.ts';

describe('seccomp profile', () => {
  it('denies io_uring with ENOSYS in every variant', () => {
    for (const opts of [{}, { sandboxNamespaces: true }, { allowMemoryMerge: true }]) {
      const rule = seccompProfile(opts).syscalls.find((r) => r.names.includes('io_uring_setup'));
      assert.ok(rule, JSON.stringify(opts));
      assert.deepEqual([...rule.names].sort(), [...IO_URING].sort());
      assert.equal(rule.action, 'SCMP_ACT_ERRNO');
      assert.equal(rule.errnoRet, 38);
      assert.equal('args' in rule, false);
    }
  });
});
