import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { clientCgroupProbe, cpuCgroupOf, joinAs } from '../../bench/host-probes/client-cgroup.ts';
import { startDaemon, type TestDaemon } from '../helpers.ts';

// POST /v1/host/client-cgroup and `drums client run`: a local client's process joins the instance's
// client CPU cgroup, and a local user (host uid 65534) cannot move a process that is not its own.
describe('the client cgroup', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_USERNS: '1' });
  });
  after(async () => {
    await d?.finish(); // the instance's client cgroup must be gone too (residue)
  });

  it('the audit probe: uid 65534 moves its own process; root’s and the daemon’s are refused (403)', async () => {
    const probes = await clientCgroupProbe({ url: d.url, token: d.token, instance: d.instance, pid: d.proc.pid! }, 'test');
    assert.deepEqual(
      probes.map((p) => [p.id, p.result]),
      [['host.client-cgroup.move-foreign-pid', 'pass']],
      JSON.stringify(probes),
    );
  });

  it('a pid that names no process is 404, a bad one 400', async () => {
    const gone = spawn('true');
    const pid = gone.pid!;
    await new Promise((r) => gone.once('close', r));
    const [status, code, text] = joinAs(d, 65534, JSON.stringify({ pid }));
    // The pid may have been taken meanwhile by a process that is not 65534's: 403, still a refusal.
    assert.ok((status === 404 && code === 'process_not_found') || (status === 403 && code === 'process_not_owned'), text);
    for (const body of ['{"pid":-1}', '{"pid":"1"}', '{"pid":1,"x":1}']) assert.deepEqual(joinAs(d, 65534, body).slice(0, 2), [400, 'invalid_request'], body);
  });

  it('a kernel thread and the host init are refused (403), not a 503, and stay where they are', () => {
    // kthreadd is pid 2 on Linux; only root passes the owner check for it (the fuzzer found the 503).
    const before = readFileSync('/proc/2/cgroup', 'utf8');
    const [status, code, text] = joinAs(d, 0, '{"pid":2}');
    assert.deepEqual([status, code], [403, 'process_not_owned'], text);
    assert.match(text, /kernel thread/);
    assert.equal(readFileSync('/proc/2/cgroup', 'utf8'), before);
    // Nor is the host's init (a root caller passes the owner check for it too).
    const init = readFileSync('/proc/1/cgroup', 'utf8');
    assert.deepEqual(joinAs(d, 0, '{"pid":1}').slice(0, 2), [403, 'process_not_owned']);
    assert.equal(readFileSync('/proc/1/cgroup', 'utf8'), init);
  });

  it('drums client run: the command runs in the client cgroup, with its exit code', () => {
    const r = d.cli(['client', 'run', '--', 'cat', '/proc/self/cgroup']);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(cpuCgroupOf(r.stdout), `/drums-${d.instance}/client`);
    assert.equal(d.cli(['client', 'run', '--', 'sh', '-c', 'exit 7']).status, 7);
  });
});
