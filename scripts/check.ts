/**
 * `npm run check`: the fast tier. Type-check, generated code against the spec,
 * the layer rule, the README's variable table, Biome's lint and format, ruff's lint and format on the
 * Python SDK, then the unit tests (including the socket-free `app.request()` tests of the API) and the
 * Python SDK's pure tests (those marked `@pytest.mark.fast`). Needs no root, no image, no network; runs
 * first in scripts/test.sh. `npm run format` writes the formatting.
 *
 *   node scripts/check.ts
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');

const node = process.execPath;
const bin = (rel: string) => join(ROOT, rel);
const ruff = bin('.runtime/venv/bin/ruff');
const units = readdirSync(join(ROOT, 'tests/unit'))
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => join('tests/unit', f));
// The pytest files with a pure test in them (`pytest.mark.fast`); `-m fast` runs only those tests.
const PYTESTS = 'sdk/python/tests';
const pureTests = readdirSync(join(ROOT, PYTESTS))
  .filter((f) => /^test_.*\.py$/.test(f) && readFileSync(join(ROOT, PYTESTS, f), 'utf8').includes('pytest.mark.fast'))
  .map((f) => join(PYTESTS, f));

interface Step {
  name: string;
  argv: string[];
}
const steps: Step[] = [
  { name: 'tsc', argv: [node, bin('node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'] },
  { name: 'protocol drift', argv: [node, 'scripts/gen-protocol.ts', '--check'] },
  { name: 'layers', argv: [node, 'scripts/check-deps.ts'] },
  { name: 'config docs', argv: [node, 'scripts/gen-config-docs.ts'] },
  { name: 'biome lint', argv: [bin('node_modules/.bin/biome'), 'lint', '--no-errors-on-unmatched'] },
  { name: 'ruff', argv: [ruff, 'check', '--no-cache', 'sdk/python'] },
  { name: 'biome format', argv: [bin('node_modules/.bin/biome'), 'format'] },
  { name: 'ruff format', argv: [ruff, 'format', '--check', '--no-cache', 'sdk/python'] },
  { name: 'unit tests', argv: [node, '--test', '--test-concurrency=2', '--test-reporter=dot', ...units] },
  {
    name: 'pytest (pure)',
    argv: [bin('.runtime/venv/bin/python'), '-m', 'pytest', '-q', '-m', 'fast', '-p', 'no:cacheprovider', '-W', 'ignore::DeprecationWarning', ...pureTests],
  },
];
if (!existsSync(ruff)) {
  process.stderr.write(`check: ${ruff} is missing; run scripts/setup.sh with DRUMS_SETUP_TEST=1 (it installs sdk/python/requirements-test.txt)\n`);
  process.exit(2);
}

function run(s: Step): Promise<{ step: Step; code: number; out: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((done) => {
    const p = spawn(s.argv[0]!, s.argv.slice(1), { cwd: ROOT, env: { ...process.env, FORCE_COLOR: '0', NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    p.stderr.on('data', (d: Buffer) => {
      out += d;
    });
    p.on('error', (e) => done({ step: s, code: 127, out: out + String(e), ms: performance.now() - t0 }));
    p.on('close', (code) => done({ step: s, code: code ?? 1, out, ms: performance.now() - t0 }));
  });
}

// Two at a time: the box has two cores, and tsc alone keeps one busy.
const t0 = performance.now();
const queue = [...steps];
const results: Awaited<ReturnType<typeof run>>[] = [];
await Promise.all(
  [0, 1].map(async () => {
    for (let s = queue.shift(); s; s = queue.shift()) {
      const r = await run(s);
      results.push(r);
      process.stderr.write(`${r.code === 0 ? 'ok  ' : 'FAIL'} ${r.step.name} (${(r.ms / 1000).toFixed(1)} s)\n`);
      if (r.code !== 0) process.stderr.write(r.out.replace(/^/gm, '     ') + '\n');
    }
  }),
);
const failed = results.filter((r) => r.code !== 0);
process.stderr.write(`check: ${steps.length - failed.length}/${steps.length} passed in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
process.exit(failed.length ? 1 : 0);
