import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { budgetsProbe, daemonNodePid } from '../../bench/host-probes/budgets.ts';
import type { DrumsApiError } from '../../src/client/client.ts';
import { startPrivateDaemon, type PrivateDaemon } from '../../src/client/private-daemon.ts';
import { DRUMS, assertClean, removeStateDir, runPrefix } from '../helpers.ts';

// Issue 27, findings 4 and 7: every read of what a session controls has a byte budget. The status file attacks
// are the audit's host probe (bench/host-probes/budgets.ts); exec and OSWorld's /execute are tried here with
// output far past their budgets, watching the daemon's peak RSS.

const MiB = 1024 * 1024;
/** Reset the daemon's peak RSS to its current RSS (clear_refs 5), so VmHWM is this request's peak. */
const resetPeak = (pid: number) => writeFileSync(`/proc/${pid}/clear_refs`, '5');
const kib = (pid: number, field: 'VmHWM' | 'VmRSS') => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

describe('byte budgets on what a session controls', () => {
  let d: PrivateDaemon;
  let pid: number;
  const alive = () => d.proc.exitCode === null && d.proc.signalCode === null;
  before(async () => {
    d = await startPrivateDaemon({ DRUMS_USERNS: '1' }, { instance: runPrefix(), stateDirPrefix: '/var/tmp/drums-test-' });
    pid = daemonNodePid(d.pid);
  });
  after(async () => {
    if (alive()) {
      for (const s of await d.client.listSessions()) await d.client.destroySession(s.id).catch(() => {});
      await d.kill();
    } else {
      // The daemon died (the unfixed status watcher): its sessions are swept as after a crash.
      execFileSync(DRUMS, ['sweep'], { env: d.env, stdio: 'ignore' });
    }
    assertClean(d.instance, d.stateDir);
    removeStateDir(d.stateDir);
  });

  it("status file: a 1T truncate and a byte-by-byte appender leave the daemon up and others working; the attacker's session is broken", async () => {
    const probes = await budgetsProbe({ d, arm: 'test', progress: () => {} });
    assert.deepEqual(
      probes.map((p) => p.id),
      ['host.budgets.status-byte-appender', 'host.budgets.status-sparse-terabyte'],
    );
    for (const p of probes) process.stderr.write(`${p.id}: ${p.result}: ${p.detail}\n`);
    for (const p of probes) assert.equal(p.result, 'pass', `${p.id}: ${p.detail}`);
    assert.ok(alive());
  });

  it('exec: maxOutputBytes over 64 MiB is a 400; output far past the cap is cut, and the peak RSS grows by about twice the cap', async () => {
    assert.ok(alive(), 'the daemon is up');
    const s = await d.client.createSession({ image: 'minimal' });
    try {
      const flood = 'head -c 256M /dev/zero | tr "\\0" x';
      const e = await d.client.exec(s.id, { shell: flood, maxOutputBytes: 2048 * MiB, timeoutMs: 120_000 }).then(
        (r) => assert.fail(`answered ${r.stdout.length} bytes of output`),
        (err: DrumsApiError) => err,
      );
      assert.equal(e.status, 400);
      assert.equal(e.code, 'invalid_exec');
      assert.match(e.message, /at most 67108864/);

      resetPeak(pid);
      const base = kib(pid, 'VmHWM');
      const t0 = performance.now();
      const r = await d.client.exec(s.id, { shell: flood, maxOutputBytes: 64 * MiB, timeoutMs: 120_000 });
      const grew = (kib(pid, 'VmHWM') - base) / 1024;
      assert.equal(r.truncated, true);
      assert.equal(r.stdout.length, 64 * MiB);
      assert.equal(r.timedOut, false);
      // The answer is held once, as its JSON body (plus the allocator's and the socket's slack), never the 256 MiB
      // printed: about 2x the cap measured here, 6x before the body was built as the output arrived.
      assert.ok(grew < 2.5 * 64, `the daemon's peak RSS grew by ${grew.toFixed(0)} MiB for a 64 MiB answer`);
      process.stderr.write(`exec: 256 MiB printed, 64 MiB answered in ${Math.round(performance.now() - t0)} ms, peak RSS +${grew.toFixed(0)} MiB\n`);
    } finally {
      await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it('streamed exec: a client that does not read holds the command, not the daemon', async () => {
    assert.ok(alive(), 'the daemon is up');
    const s = await d.client.createSession({ image: 'minimal' });
    try {
      resetPeak(pid);
      const base = kib(pid, 'VmHWM');
      const res = await fetch(`${d.url}/v1/sessions/${s.id}/exec?stream=1`, {
        method: 'POST',
        headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ shell: 'head -c 60M /dev/zero | tr "\\0" x', maxOutputBytes: 64 * MiB, timeoutMs: 120_000 }),
      });
      assert.equal(res.status, 200);
      // Nothing read for 3 s: the command's 60 MiB must wait in it, not in the daemon.
      await new Promise((r) => setTimeout(r, 3000));
      const waiting = (kib(pid, 'VmHWM') - base) / 1024;
      let bytes = 0;
      let exit: { exitCode?: number; truncated?: boolean } = {};
      let rest = '';
      for await (const chunk of res.body!) {
        const lines = (rest + Buffer.from(chunk).toString()).split('\n');
        rest = lines.pop()!;
        for (const l of lines) {
          const o = JSON.parse(l) as { data?: string; exitCode?: number };
          if (o.data !== undefined) bytes += o.data.length;
          else exit = o;
        }
      }
      assert.equal(exit.exitCode, 0);
      assert.equal(bytes, 60 * MiB);
      assert.ok(waiting < 24, `the daemon's peak RSS grew by ${waiting.toFixed(0)} MiB while the client did not read`);
      process.stderr.write(`streamed exec: peak RSS +${waiting.toFixed(0)} MiB while the client did not read 60 MiB\n`);
    } finally {
      await d.client.destroySession(s.id).catch(() => {});
    }
  });

  it("OSWorld /execute printing 100 MiB: OSWorld's 500 error, the command stopped, the peak RSS grows by at most the budget", async () => {
    assert.ok(alive(), 'the daemon is up');
    const s = (await d.client.createSession({ image: 'osworld' } as never)) as unknown as { id: string; osworld: { serverPort: number } };
    try {
      const post = (body: unknown) =>
        fetch(`http://127.0.0.1:${s.osworld.serverPort}/execute`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      // A first request prepares the session for OSWorld (once): not part of what is measured.
      assert.equal(((await (await post({ command: ['true'] })).json()) as { returncode: number }).returncode, 0);
      resetPeak(pid);
      const base = kib(pid, 'VmHWM');
      const t0 = performance.now();
      // The shell writes a marker after the flood: a command stopped at the budget never writes it. The sleep is
      // longer than the in-session timeout's 2 s KILL: with `sleep 2` the marker raced that KILL (two CI runs failed
      // so), which says the TERM alone did not end the shell there (not understood yet).
      const res = await post({ command: 'head -c 100M /dev/zero | tr "\\0" x; sleep 6; touch /tmp/flood-finished', shell: true, timeout: 60 });
      const ms = performance.now() - t0;
      const grew = (kib(pid, 'VmHWM') - base) / 1024;
      const body = (await res.json()) as { status: string; message?: string; output?: string };
      assert.equal(res.status, 500, `status ${res.status}, output ${body.output?.length} bytes`);
      assert.equal(body.status, 'error');
      assert.match(body.message ?? '', /output went past 67108864 bytes .* stopped/);
      // At most the 64 MiB held before the command was stopped (dropped then), and the allocator's slack.
      assert.ok(grew < 64 + 16, `the daemon's peak RSS grew by ${grew.toFixed(0)} MiB`);
      await new Promise((r) => setTimeout(r, 8000));
      const left = await post({ command: 'test -e /tmp/flood-finished; echo $?', shell: true });
      assert.equal(((await left.json()) as { output: string }).output.trim(), '1', 'the flooding command was stopped');
      // The session goes on.
      const ok = (await (await post({ command: ['echo', 'still here'] })).json()) as { output: string };
      assert.equal(ok.output, 'still here\n');
      process.stderr.write(`/execute: 100 MiB printed, refused in ${Math.round(ms)} ms, peak RSS +${grew.toFixed(0)} MiB\n`);
    } finally {
      await d.client.destroySession(s.id).catch(() => {});
    }
  });
});
