import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020Module from 'ajv/dist/2020.js';
import type { DrumsApiError, HostReport } from '../../src/client/client.ts';
import { ROOT, startDaemon, type TestDaemon } from '../helpers.ts';

const NODE = process.execPath;
const PROBE = join(ROOT, 'scripts', 'host-probe.ts');

const Ajv2020 = Ajv2020Module as unknown as typeof Ajv2020Module.default;

/** The spec's HostReport schema, to check the daemon's answer against (responses are built by hand). */
function hostReportValidator() {
  const doc = JSON.parse(readFileSync(new URL('../../src/protocol/generated/openapi.json', import.meta.url), 'utf8'));
  const text = JSON.stringify(doc.components.schemas).replaceAll('#/components/schemas/', '#/$defs/');
  const ajv = new Ajv2020({ strict: false, allowUnionTypes: true, validateFormats: false });
  return ajv.compile({ $defs: JSON.parse(text), $ref: '#/$defs/HostReport' });
}

// GET /v1/host and POST /v1/host/drain against a real daemon (minimal image).
describe('host report and drain', () => {
  const daemons: TestDaemon[] = [];
  after(async () => {
    for (const d of daemons.reverse()) await d.finish().catch(() => {});
  });

  it('reports sessions, capacity, resources and images; ids survive/change over a restart; drain refuses creates', async () => {
    const validate = hostReportValidator();
    const d1 = await startDaemon({ DRUMS_MAX_SESSIONS: '2' });
    const r0 = await d1.client.host();
    assert.ok(validate(r0), JSON.stringify(validate.errors));
    assert.deepEqual([r0.sessions.held, r0.sessions.max, r0.capacity.sessions, r0.draining, r0.instance], [0, 2, 2, false, d1.instance]);
    assert.ok(r0.resources.memory.availableBytes > 0 && r0.resources.memory.availableBytes <= r0.resources.memory.totalBytes);
    assert.ok(r0.resources.cpu.cores >= 1 && r0.resources.disk.state.availableBytes > 0);
    assert.ok(
      r0.images.some((i) => i.name === 'minimal' && i.current),
      JSON.stringify(r0.images),
    );
    // Admission's own figures; placement reads the lowest limit.
    const adm = r0.admission as { moreSessions: number; memory: { moreSessions: number }; disk: { moreSessions: number } };
    assert.equal(adm.moreSessions, Math.min(adm.memory.moreSessions, adm.disk.moreSessions));
    assert.equal(r0.capacity.byAdmission, adm.moreSessions);
    assert.equal(r0.capacity.sessions, Math.min(r0.capacity.bySessionCap, adm.moreSessions));
    assert.deepEqual(r0.pools, []);

    const s = await d1.client.createSession({ image: 'minimal' });
    const r1 = await d1.client.host();
    assert.deepEqual([r1.sessions.held, r1.sessions.byState.ready, r1.capacity.sessions, r1.instanceId], [1, 1, 1, r0.instanceId]);

    // The Kubernetes probes (scripts/host-probe.ts): ready now; a preStop drain waits for the held session.
    const probeEnv = { ...process.env, DRUMS_URL: d1.url, DRUMS_TOKEN: d1.token };
    assert.equal(spawnSync(NODE, [PROBE, 'ready'], { env: probeEnv }).status, 0);
    const preStop = spawn(NODE, [PROBE, 'drain', '--wait', '120'], { env: probeEnv, stdio: ['ignore', 'pipe', 'inherit'] });
    let preStopOut = '';
    preStop.stdout.on('data', (b: Buffer) => {
      preStopOut += b;
    });
    const preStopExit = new Promise<number | null>((res) => preStop.on('exit', res));
    let drained: HostReport = await d1.client.host();
    for (const t0 = Date.now(); !drained.draining && Date.now() - t0 < 30_000; drained = await d1.client.host()) await new Promise((r) => setTimeout(r, 100));
    // Drain: creates are 503 host_draining, the held session still resets and is destroyed.
    assert.deepEqual([drained.draining, drained.capacity.sessions, drained.capacity.bySessionCap], [true, 0, 1]);
    assert.ok(drained.drainingSince);
    await assert.rejects(d1.client.createSession({ image: 'minimal' }), (e: DrumsApiError) => e.status === 503 && e.code === 'host_draining');
    assert.equal((await d1.client.drainHost()).drainingSince, drained.drainingSince, 'drain is idempotent');
    const reset = await d1.client.request('POST', `/v1/sessions/${s.id}/reset`, {});
    assert.equal(((await reset.json()) as { generation: number }).generation, 2);
    assert.equal(preStop.exitCode, null, 'the preStop drain waits while a session is held');
    await d1.client.destroySession(s.id);
    assert.equal((await d1.client.host()).sessions.held, 0);
    assert.equal(await preStopExit, 0);
    assert.match(preStopOut, /drained: 0 session\(s\) still held/);
    assert.equal(spawnSync(NODE, [PROBE, 'ready'], { env: probeEnv }).status, 1, 'a draining host is not ready');
    // DELETE cancels the drain: creates are taken again.
    const undrained = await d1.client.undrainHost();
    assert.deepEqual([undrained.draining, undrained.capacity.sessions, undrained.drainingSince], [false, 2, undefined]);
    await d1.client.destroySession((await d1.client.createSession({ image: 'minimal' })).id);
    // Unauthenticated: 401 like every other route.
    const anon = await fetch(`${d1.url}/v1/host`);
    assert.equal(anon.status, 401);
    await d1.stop();

    // Same state dir after a restart: same hostId, new instanceId, not draining.
    const d2 = await startDaemon({ DRUMS_STATE_DIR: d1.stateDir, DRUMS_INSTANCE: d1.instance, DRUMS_MAX_SESSIONS: '2' });
    daemons.push(d2);
    const r2 = await d2.client.host();
    assert.equal(r2.hostId, r0.hostId);
    assert.notEqual(r2.instanceId, r0.instanceId);
    assert.equal(r2.draining, false);
    // DRUMS_HOST_ID overrides (the Kubernetes DaemonSet sets it to the node name).
    await d2.stop();
    const d3 = await startDaemon({ DRUMS_STATE_DIR: d1.stateDir, DRUMS_INSTANCE: d1.instance, DRUMS_HOST_ID: 'node-a' });
    daemons.push(d3);
    assert.equal((await d3.client.host()).hostId, 'node-a');
  });
});
