// Drums on a cgroup v2 host, for real, on any host: scripts/cgv2-vm.sh boots a Debian trixie VM
// (QEMU, software-emulated) with cgroup v2 only and runs, inside it, with this checkout, the v2
// test (tests/vm/cgroup-v2.test.ts) and the resource tests that run on this v1 host too: the
// same assertions, now on the unified hierarchy, with real daemons and real sessions.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { ROOT } from '../helpers.ts';

/** The files run in the VM, one after another (each starts its own private daemons there). */
export const VM_FILES = [
  'tests/vm/cgroup-v2.test.ts',
  'tests/integration/session-fairness.test.ts',
  'tests/integration/session-quota.test.ts',
  'tests/integration/session-sweep.test.ts',
];
/** The VM's own run (boot, the files, power-off); measured 7-11 min under TCG on a 2-core host, alone.
 * scripts/test.sh runs it beside the main tier, which takes the other core and some of this one. */
const VM_TIMEOUT_S = 1500;
/** Image builds and disk making before the boot, on a cache miss (cgv2-vm.sh's timeout counts from the boot). */
const BUILD_S = 900;
/** The four files hold 12 tests (3 + 2 + 5 + 2): fewer means a file was not loaded. */
const MIN_VM_TESTS = 12;

function runInVm(command: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    // The script kills its QEMU (by PID) and removes its files on exit, also on SIGTERM.
    const child = spawn('bash', ['scripts/cgv2-vm.sh', '--timeout', String(VM_TIMEOUT_S), '--', command], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (process.env.DRUMS_TEST_VERBOSE) process.stderr.write(d);
    });
    const guard = setTimeout(() => child.kill('SIGTERM'), (VM_TIMEOUT_S + BUILD_S) * 1000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('cgroup v2, in a VM', () => {
  it('quota, fairness, OOM, PSI, admission, CPU guard and sweep pass on a cgroup v2 host with crun and runc', {
    timeout: (VM_TIMEOUT_S + BUILD_S + 120) * 1000,
  }, async (t) => {
    const node = '.runtime/node/bin/node --test --test-concurrency=1 --test-reporter=spec';
    const r = await runInVm(`DRUMS_TEST_TIME_SCALE=4 ${node} ${VM_FILES.join(' ')}`);
    const out = r.stdout + r.stderr;
    // The VM really was cgroup v2 only, with every controller delegated.
    assert.match(r.stderr, /guest: .* cgroup2: .*\bcpu\b.*\bio\b.*\bmemory\b.*\bpids\b/, r.stderr);
    const count = (what: string) => Number(new RegExp(`^ℹ ${what} (\\d+)$`, 'm').exec(r.stdout)?.[1] ?? Number.NaN);
    const tests = count('tests');
    const passed = count('pass');
    if (r.code !== 0 || passed !== tests) t.diagnostic(out.slice(-20_000));
    assert.equal(r.code, 0, `the tests in the VM failed (exit ${r.code})`);
    // Every test ran and passed: none failed, was skipped, cancelled or left todo.
    assert.ok(tests >= MIN_VM_TESTS, `tests run in the VM: ${tests}`);
    assert.equal(passed, tests, `passed ${passed} of ${tests} in the VM`);
    t.diagnostic(`in the VM: ${passed} of ${tests} tests passed`);
    for (const line of r.stderr.split('\n').filter((l) => /^cgv2-vm: (made|VM ran)/.test(l))) t.diagnostic(line);
  });
});
