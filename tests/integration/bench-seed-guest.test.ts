import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARMS } from '../../bench/arms.ts';
import { validateRecord, type BenchRecord } from '../../bench/record.ts';
import { importedModules, NO_SRC_REASON, serverFiles } from '../../bench/seed-guest.ts';
import { DRUMS, ROOT } from '../helpers.ts';

// The seed-guest-server arm without an OSWorld checkout (CI has none, and no
// network): its skip reasons through the arm and through the CLI, and which
// files of a checkout it would copy into a session (a made-up checkout).
// No daemon, no session; about a second.
describe('bench arm seed-guest-server: skip reasons and the files it seeds', () => {
  const tmp = mkdtempSync('/var/tmp/drums-seedguest-test-');
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const arm = ARMS['seed-guest-server']!;

  const runBench = (args: string[]) => {
    const out = mkdtempSync(join(tmp, 'records-'));
    let stderr = '';
    try {
      execFileSync(DRUMS, ['bench', 'run', 'density', '--quick', '--arms', 'seed-guest-server', '--out', out, ...args], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        cwd: ROOT,
      });
    } catch (e) {
      stderr = (e as { stderr: string }).stderr;
    }
    const files = readdirSync(out);
    assert.equal(files.length, 1, `one record expected (${stderr})`);
    return JSON.parse(readFileSync(join(out, files[0]!), 'utf8')) as BenchRecord;
  };

  it('is skipped with the reason when no --osworld-src is given', () => {
    assert.equal(arm.unavailable({}), NO_SRC_REASON);
    assert.match(NO_SRC_REASON, /--osworld-src DIR/);
    const r = runBench([]);
    assert.deepEqual(validateRecord(r), []);
    const a = r.arms.find((x) => x.name === 'seed-guest-server')!;
    assert.equal(a.status, 'skipped');
    assert.equal(a.reason, NO_SRC_REASON);
    assert.equal(r.trials.length, 0);
    assert.ok(r.incompleteReasons.some((x) => x.includes(NO_SRC_REASON)));
  });

  it('names the path it expected when the directory is not an OSWorld checkout', () => {
    const dir = join(tmp, 'not-osworld');
    mkdirSync(join(dir, 'desktop_env'), { recursive: true });
    const why = arm.unavailable({ osworldSrc: dir });
    assert.ok(why?.includes(`${dir}/desktop_env/server/main.py`), String(why));
    assert.match(why!, /not an OSWorld checkout/);
    // The CLI passes --osworld-src through to the arm.
    const a = runBench(['--osworld-src', dir]).arms.find((x) => x.name === 'seed-guest-server')!;
    assert.equal(a.status, 'skipped');
    assert.equal(a.reason, why);
  });

  it('seeds main.py and the sibling modules it imports, nothing else of the checkout', () => {
    const dir = join(tmp, 'fake-checkout');
    const server = join(dir, 'desktop_env', 'server');
    mkdirSync(join(server, 'helpers', 'sub'), { recursive: true });
    writeFileSync(
      join(server, 'main.py'),
      [
        'import os, json',
        'import flask',
        'from pyxcursor import Xcursor',
        'import helpers.sub as hs  # a package',
        'if True:',
        '    from lxml.etree import _Element',
        '',
      ].join('\n'),
    );
    writeFileSync(join(server, 'pyxcursor.py'), 'import ctypes\nimport common\n');
    writeFileSync(join(server, 'common.py'), 'X = 1\n');
    writeFileSync(join(server, 'helpers', '__init__.py'), '');
    writeFileSync(join(server, 'helpers', 'sub', 'mod.py'), 'Y = 2\n');
    writeFileSync(join(server, 'unused.py'), 'Z = 3\n');
    writeFileSync(join(server, 'README.md'), 'readme\n');
    assert.deepEqual(importedModules(readFileSync(join(server, 'main.py'), 'utf8')).sort(), ['flask', 'helpers', 'json', 'lxml', 'os', 'pyxcursor']);
    const files = serverFiles(dir)
      .map((f) => f.rel)
      .sort();
    assert.deepEqual(files, ['common.py', 'helpers/__init__.py', 'helpers/sub/mod.py', 'main.py', 'pyxcursor.py']);
    // A checkout passes the checkout checks; what remains is the image (built or not on this host).
    const why = arm.unavailable({ osworldSrc: dir });
    assert.ok(why === null || /drums image build seed-guest/.test(why), String(why));
  });
});
