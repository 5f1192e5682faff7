import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readRecords } from '../../src/session/adopt.ts';
import type { Session } from '../../src/session/session.ts';
import { parseSpec } from '../../src/session/spec.ts';
import { standbyId, standbySpec, swapIdentity } from '../../src/session/standby.ts';

/** A session record of the shape the manager keeps, with host objects keyed by `key`. */
function session(id: string, key: string, spec = parseSpec({}, 1)): Session {
  return {
    id,
    state: 'ready',
    spec,
    generation: 3,
    attempt: { generation: 3, token: 't' },
    createdAt: '2026-12-07T00:00:00.000Z',
    subnet: { slot: 1, cidr: `10.0.${key.length}.0/30`, gateway: 'g', address: `a-${key}` } as unknown as Session['subnet'],
    uids: { slot: 2, base: 100000, size: 65536 },
    names: { container: `drums-i-${key}`, netns: `drums-i-${key}`, hostVeth: `drih${key.length}`, cgroup: `/c/${key}`, overlaySource: 'drums-i' },
    dir: `/s/${key}`,
    runDir: `/rt/${key}/run`,
    x11Socket: `/rt/${key}/x11/X0`,
    busSocket: `/rt/${key}/run/bus`,
    xCookie: key.padEnd(32, '0').slice(0, 32),
    imageDir: '/img',
    initPid: key.length,
    init: { pid: key.length, startTime: 7 },
    timings: {},
  };
}

describe('standbys', () => {
  it('spec: the parser takes 0..4, leaves 0 out, and refuses the standby label', () => {
    assert.equal(parseSpec({ standbys: 2 }, 1).standbys, 2);
    assert.ok(!('standbys' in parseSpec({ standbys: 0 }, 1)), 'absent when 0: a template without standbys matches one made before the field');
    assert.throws(() => parseSpec({ standbys: 5 }, 1), /standbys/);
    assert.throws(() => parseSpec({ standbys: 1.5 }, 1), /standbys/);
    assert.throws(() => parseSpec({ labels: { 'drums.standby.of': 'x' } }, 1), /drums\.standby\.of/);
  });

  it("a standby's spec: no TTL, recording, standbys, pool label or test hooks; the owner's named", () => {
    const owner = session(
      'sabc',
      'sabc',
      parseSpec({ standbys: 2, ttlSeconds: 60, record: true, labels: { 'drums.pool': 'p', 'drums.test.killAtStep': 'ready', keep: 'me' } }, 1),
    );
    const spec = standbySpec(owner);
    assert.equal(spec.ttlSeconds, 0);
    assert.equal(spec.record, undefined);
    assert.equal(spec.standbys, undefined);
    assert.deepEqual(spec.labels, { keep: 'me', 'drums.standby.of': 'sabc' });
    // The owner's spec is not changed.
    assert.equal(owner.spec.standbys, 2);
    const id = standbyId(owner, () => false);
    assert.match(id, /^sabc-[0-9a-f]{6}$/);
  });

  it("a swap moves the standby's host objects into the session and gives back the old ones as a husk", () => {
    const s = session('sabc', 'sabc');
    const sb = session('sabc-0f0f0f', 'sabc-0f0f0f');
    const husk = swapIdentity(s, sb);
    // The session keeps its id, generation and attempt; its objects are the standby's.
    assert.equal(s.id, 'sabc');
    assert.equal(s.generation, 3);
    assert.equal(s.slot, 'sabc-0f0f0f');
    for (const k of ['names', 'subnet', 'uids', 'dir', 'runDir', 'x11Socket', 'busSocket', 'xCookie', 'init', 'initPid'] as const)
      assert.deepEqual(s[k], sb[k], k);
    // The husk holds every old object, keyed by the old slot.
    assert.equal(husk.id, 'sabc');
    assert.equal(husk.slot, 'sabc');
    assert.equal(husk.state, 'destroying');
    assert.equal(husk.names.container, 'drums-i-sabc');
    assert.equal(husk.dir, '/s/sabc');
    assert.equal(husk.x11Socket, '/rt/sabc/x11/X0');
    assert.equal(husk.init?.pid, 4);
    // A second swap: the husk is keyed by the slot the session had.
    const sb2 = session('sabc-aaaaaa', 'sabc-aaaaaa');
    const husk2 = swapIdentity(s, sb2);
    assert.equal(husk2.id, 'sabc-0f0f0f');
    assert.equal(husk2.slot, 'sabc-0f0f0f');
    assert.equal(s.slot, 'sabc-aaaaaa');
  });

  it('records: a session is read from its slot directory, and a slot that is not named with its id is refused', () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-standby-'));
    try {
      const write = (d: string, rec: Record<string, unknown>) => {
        mkdirSync(join(dir, d));
        writeFileSync(join(dir, d, 'session.json'), JSON.stringify(rec));
      };
      const base = {
        instance: 'i',
        phase: 'ready',
        generation: 2,
        attempt: { generation: 2, token: 't' },
        names: {},
        subnet: {},
        spec: {},
        imageDir: '/img',
      };
      write('sabc-0f0f0f', { ...base, id: 'sabc', slot: 'sabc-0f0f0f' });
      write('sdef', { ...base, id: 'sdef' });
      // A record in another's directory, or claiming a slot not named with its id: refused.
      write('sxyz-111111', { ...base, id: 'sabc', slot: 'sxyz-111111' });
      write('sghi', { ...base, id: 'sabc', slot: 'sghi' });
      const { records, corrupt } = readRecords(dir, 'i');
      assert.deepEqual(records.map((r) => [r.id, r.slot ?? null]).sort(), [
        ['sabc', 'sabc-0f0f0f'],
        ['sdef', null],
      ]);
      assert.deepEqual(corrupt.map((c) => c.id).sort(), ['sghi', 'sxyz-111111']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
