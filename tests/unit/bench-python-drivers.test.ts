import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { driverPythonPath, PYTHON } from '../../bench/python-driver.ts';

// `bin/drums bench` runs its Python drivers as `python -m NAME` (bench/python-driver.ts). They are benches, so
// they live in sdk/python/bench, out of the shipped package (sdk/python/tests/test_typing.py checks the wheel): each
// name a bench passes must start with the PYTHONPATH the driver gives it, and must not be a module of drums.
const REPO = fileURLToPath(new URL('../../', import.meta.url));

test('every Python bench driver starts from sdk/python/bench with the path the bench gives it', () => {
  const dir = join(REPO, 'bench');
  const names = readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .flatMap((f) => [...readFileSync(join(dir, f), 'utf8').matchAll(/runPythonDriver\(\s*'([\w.]+)'/g)].map((m) => m[1]));
  assert.ok(names.length >= 2, `found ${names.join(', ')}`);
  // The fast tier runs before OSWorld's checkout is set up, as on a fresh CI host: `--help` must work without
  // desktop_env, which this machine may have installed. A package of that name that fails to import stands in.
  const blocker = mkdtempSync(join(tmpdir(), 'drums-no-desktop-env-'));
  mkdirSync(join(blocker, 'desktop_env'));
  writeFileSync(join(blocker, 'desktop_env', '__init__.py'), 'raise ModuleNotFoundError("desktop_env is not importable in the fast tier")\n');
  try {
    for (const name of names) {
      assert.ok(existsSync(join(REPO, 'sdk', 'python', 'bench', `${name}.py`)), `${name}: not in sdk/python/bench`);
      assert.ok(!name.startsWith('drums.'), `${name}: a module of the shipped package`);
      const r = spawnSync(PYTHON, ['-m', name, '--help'], {
        cwd: '/',
        env: { ...process.env, PYTHONPATH: `${blocker}:${driverPythonPath()}` },
        encoding: 'utf8',
        timeout: 120_000,
      });
      assert.equal(r.status, 0, `${name}: ${r.stderr}`);
      assert.match(r.stdout, /^usage: /, name);
    }
  } finally {
    rmSync(blocker, { recursive: true, force: true });
  }
});
