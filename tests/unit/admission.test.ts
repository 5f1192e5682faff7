import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DrumsError } from '../../src/common/errors.ts';
import { diskSpace } from '../../src/host/disk.ts';
import { Admission, type AdmittedSession, meminfo } from '../../src/session/admission.ts';
import type { SessionSpec } from '../../src/session/spec.ts';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** A spec with only what admission reads. */
const spec = (o: Partial<Pick<SessionSpec, 'memoryBytes' | 'diskBytes' | 'cpus'>> = {}) =>
  ({ memoryBytes: 256 * MiB, diskBytes: 64 * MiB, cpus: 1, ...o }) as SessionSpec;

const refused = (code: string) => (e: unknown) => e instanceof DrumsError && e.code === code;

// Admission's arithmetic on the real host's numbers (statfs of a temporary directory, /proc/meminfo):
// reserves are set relative to what the host has now, with margins of half a session or more.
describe('admission', () => {
  it("disk: every session's unwritten quota is held back, so the sum of quotas never exceeds free disk minus the reserve", () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-admission-'));
    try {
      const Q = GiB;
      const free = diskSpace(dir).freeBytes;
      // Room for 1.5 quotas above the reserve.
      const a = new Admission(dir, {
        memoryReserveBytes: -64 * GiB,
        sessionMemoryBytes: MiB,
        diskReserveBytes: free - 1.5 * Q,
        diskOvercommit: 1,
        diskReadMbps: 0,
        diskWriteMbps: 0,
      });
      a.check(spec({ diskBytes: Q }), []);
      // One session of quota Q that has written nothing yet (a sparse image): its whole quota is promised.
      const img = join(dir, 'disk.img');
      writeFileSync(img, '');
      truncateSync(img, Q);
      const one: AdmittedSession[] = [{ state: 'ready', spec: spec({ diskBytes: Q }), diskImage: img }];
      assert.throws(() => a.check(spec({ diskBytes: Q }), one), refused('insufficient_disk'));
      const cap = a.capacity(one, spec({ diskBytes: Q }));
      assert.ok(cap.disk.committedBytes >= Q - MiB && cap.disk.committedBytes <= Q, String(cap.disk.committedBytes));
      assert.equal(cap.disk.moreSessions, 0);
      // A smaller new session still fits beside it.
      a.check(spec({ diskBytes: Q / 4 }), one);
      // Overcommit 0.5 counts half of every quota: Q is left, and two more of 0.8 Q (0.4 Q each) fit where none did.
      assert.equal(a.capacity(one, spec({ diskBytes: 0.8 * Q })).disk.moreSessions, 0);
      const half = new Admission(dir, { ...a.cfg, diskOvercommit: 0.5 });
      assert.equal(half.capacity(one, spec({ diskBytes: 0.8 * Q })).disk.moreSessions, 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('memory: creates in flight count their expected footprint; ready sessions are in MemAvailable already', () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-admission-'));
    try {
      const per = 4 * GiB;
      const avail = meminfo().MemAvailable!;
      // Room for 1.5 sessions' footprint above the reserve (a 2 GiB margin either way for the host's own churn).
      const a = new Admission(dir, {
        memoryReserveBytes: avail - 1.5 * per,
        sessionMemoryBytes: per,
        diskReserveBytes: 0,
        diskOvercommit: 1,
        diskReadMbps: 0,
        diskWriteMbps: 0,
      });
      const s = (state: string): AdmittedSession => ({ state, spec: spec({ memoryBytes: 8 * GiB, diskBytes: 0 }), diskImage: join(dir, 'none') });
      a.check(spec({ memoryBytes: 8 * GiB, diskBytes: MiB }), [s('ready'), s('ready')]);
      for (const busy of ['creating', 'resetting']) {
        assert.throws(() => a.check(spec({ memoryBytes: 8 * GiB, diskBytes: MiB }), [s(busy)]), refused('insufficient_memory'), busy);
      }
      // A session's expected footprint is its limit when that is smaller than the configured one.
      a.check(spec({ memoryBytes: GiB, diskBytes: MiB }), [{ ...s('creating'), spec: spec({ memoryBytes: GiB }) }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a limit the host could never give is 422 limit_exceeds_host naming the field, whatever is free', () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-admission-'));
    try {
      const a = new Admission(dir, {
        memoryReserveBytes: 0,
        sessionMemoryBytes: MiB,
        diskReserveBytes: 0,
        diskOvercommit: 1,
        diskReadMbps: 0,
        diskWriteMbps: 0,
      });
      const total = diskSpace(dir).totalBytes;
      for (const [s, field] of [
        [spec({ memoryBytes: meminfo().MemTotal! + MiB }), 'memoryMb'],
        [spec({ diskBytes: total + MiB }), 'diskMb'],
        [spec({ cpus: cpus().length + 1 }), 'cpus'],
      ] as const) {
        assert.throws(
          () => a.check(s, []),
          (e: unknown) => refused('limit_exceeds_host')(e) && (e as DrumsError).details?.field === field,
          field,
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
