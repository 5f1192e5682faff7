import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { startPrivateDaemon, type PrivateDaemon } from '../../src/client/private-daemon.ts';

// io_uring_setup(1, &params) through ctypes: the errno name, or 'fd N' if the kernel gave a ring.
const PROBE = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(425, 1, ctypes.create_string_buffer(120))
print(errno.errorcode.get(ctypes.get_errno(), '?') if r == -1 else 'fd %d' % r)
`;

// Issue 27, finding 7: the seccomp profile left io_uring open.
describe('seccomp: io_uring is closed to sessions', () => {
  let d: PrivateDaemon;
  before(async () => {
    d = await startPrivateDaemon({ DRUMS_USERNS: '1' });
  });
  after(async () => {
    await d?.stop();
  });

  it('io_uring_setup fails with ENOSYS for the desktop user and root-in-session; the host itself has io_uring', async () => {
    // The same call on the host gets a ring, so the ENOSYS below is the session's filter, not the kernel.
    assert.match(execFileSync('python3', ['-c', PROBE], { encoding: 'utf8' }).trim(), /^fd \d+$/, 'this kernel has no io_uring: the test cannot tell');
    const s = await d.client.createSession({ image: 'default' });
    try {
      for (const root of [false, true]) {
        const r = await d.client.exec(s.id, { argv: ['python3', '-c', PROBE], root });
        assert.equal(r.exitCode, 0, r.stderr);
        assert.equal(r.stdout.trim(), 'ENOSYS', `root=${root}`);
      }
    } finally {
      await d.client.destroySession(s.id);
    }
  });
});
