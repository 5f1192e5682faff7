import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// POST /v1/host/client-cgroup and `drums client run`: a local client's process joins the instance's
// client CPU cgroup, and a local user (host uid 65534) cannot move a process that is not its own.

/** The CPU cgroup line of /proc/<pid>/cgroup (v1: the cpu controller's; v2: the unified one). */
function cpuCgroup(pid: number | 'self', text = readFileSync(`/proc/${pid}/cgroup`, 'utf8')): string {
  const lines = text.split('\n');
  const v1 = lines.find((l) => /^\d+:[^:]*\bcpu\b[^:]*:/.test(l));
  return (v1 ?? lines.find((l) => l.startsWith('0::')) ?? '').replace(/^[^:]*:[^:]*:/, '');
}

/** POST /v1/host/client-cgroup from a process of `uid` (curl): [status, body]. */
function joinAs(d: TestDaemon, uid: number, body: string): [number, { error?: { code: string; message: string }; cgroup?: string }] {
  const out = execFileSync(
    'curl',
    [
      '-sS',
      '-o',
      '-',
      '-w',
      '\n%{http_code}',
      '-H',
      `Authorization: Bearer ${d.token}`,
      '-H',
      'content-type: application/json',
      '--data-binary',
      body,
      `${d.url}/v1/host/client-cgroup`,
    ],
    { uid, gid: uid, encoding: 'utf8', timeout: 60_000 },
  );
  const i = out.lastIndexOf('\n');
  return [Number(out.slice(i + 1)), JSON.parse(out.slice(0, i))];
}

describe('the client cgroup', () => {
  let d: TestDaemon;
  const kids: ChildProcess[] = [];
  const sleeper = (uid?: number) => {
    const p = spawn('sleep', ['600'], { stdio: 'ignore', ...(uid === undefined ? {} : { uid, gid: uid }) });
    kids.push(p);
    return p.pid!;
  };
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    // Ours to stop, by handle; the cgroup empties only once they are reaped.
    await Promise.all(
      kids.map((k) => (k.exitCode !== null || k.signalCode !== null ? undefined : new Promise((r) => (k.once('close', r), k.kill('SIGKILL'))))),
    );
    await d?.finish();
  });

  it('moves a process of the caller, and refuses another uid’s, the daemon and a pid that is gone', () => {
    const client = `/drums-${d.instance}/client`;
    const rootsPid = sleeper();
    const before = cpuCgroup(rootsPid);
    const daemonPid = d.proc.pid!;
    // uid 65534 against root's process and the daemon: 403, and nothing moves.
    for (const pid of [rootsPid, daemonPid]) {
      const [status, body] = joinAs(d, 65534, JSON.stringify({ pid }));
      assert.equal(status, 403, JSON.stringify(body));
      assert.equal(body.error?.code, 'process_not_owned');
    }
    assert.equal(cpuCgroup(rootsPid), before);
    assert.notEqual(cpuCgroup(daemonPid), client);
    // A pid that names no process (one that ended and was reaped), and a bad one.
    const gone = spawn('true');
    const gonePid = gone.pid!;
    return new Promise<void>((resolve) => gone.once('close', () => resolve())).then(() => {
      const [s404, b404] = joinAs(d, 65534, JSON.stringify({ pid: gonePid }));
      // The pid may have been reused meanwhile, by a process that is not 65534's: 403 then, still a refusal.
      assert.ok((s404 === 404 && b404.error?.code === 'process_not_found') || (s404 === 403 && b404.error?.code === 'process_not_owned'), JSON.stringify(b404));
      const [s400, b400] = joinAs(d, 65534, JSON.stringify({ pid: -1 }));
      assert.deepEqual([s400, b400.error?.code], [400, 'invalid_request']);
      // Its own process: moved.
      const mine = sleeper(65534);
      const [s200, b200] = joinAs(d, 65534, JSON.stringify({ pid: mine }));
      assert.equal(s200, 200, JSON.stringify(b200));
      assert.equal(b200.cgroup, `drums-${d.instance}/client`);
      assert.equal(cpuCgroup(mine), client);
    });
  });

  it('drums client run: the command runs in the client cgroup', () => {
    const r = d.cli(['client', 'run', '--', 'cat', '/proc/self/cgroup']);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(cpuCgroup('self', r.stdout), `/drums-${d.instance}/client`);
    const bad = d.cli(['client', 'run', '--', 'sh', '-c', 'exit 7']);
    assert.equal(bad.status, 7);
  });
});
