import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { missingOsworldTasks, osworldTasksDir, REPO_ROOT } from '../../src/testing/osworld-data.ts';

// A test that needs what this host lacks is skipped outside CI and fails under CI=true
// (tests/helpers.ts skipUnlessCI); the OSWorld task directory comes from DRUMS_OSWORLD_TASKS or
// the checkout, never from the current directory.
const HELPERS = join(import.meta.dirname, '..', 'helpers.ts');

function runTestFile(env: NodeJS.ProcessEnv) {
  const dir = mkdtempSync(join(tmpdir(), 'drums-ci-skips-'));
  try {
    const file = join(dir, 'needs.test.ts');
    writeFileSync(
      file,
      `import { test } from 'node:test';\nimport { skipUnlessCI } from ${JSON.stringify(HELPERS)};\n` +
        `test('needs a thing', { skip: skipUnlessCI('no frobnicator here (apt install frobnicator)') }, () => {});\n`,
    );
    // Without NODE_TEST_CONTEXT: set for this file by the runner, it would make the child report to us, not print.
    const { CI: _ci, NODE_TEST_CONTEXT: _ctx, ...rest } = process.env;
    return spawnSync(process.execPath, ['--test', '--test-reporter=spec', file], { env: { ...rest, ...env }, encoding: 'utf8', cwd: dir });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('outside CI a test that cannot run is skipped with the reason; under CI=true it fails with it', () => {
  const out = runTestFile({});
  assert.equal(out.status, 0, out.stdout + out.stderr);
  assert.match(out.stdout, /# no frobnicator here \(apt install frobnicator\)/);
  assert.match(out.stdout, /ℹ skipped 1/);
  const ci = runTestFile({ CI: 'true' });
  assert.equal(ci.status, 1, ci.stdout + ci.stderr);
  assert.match(ci.stdout + ci.stderr, /CI=true and a test cannot run: no frobnicator here \(apt install frobnicator\)/);
  assert.match(ci.stdout, /ℹ fail 1/);
});

test('the task directory: DRUMS_OSWORLD_TASKS, relative to the checkout, else ../shared next to it', (t) => {
  const saved = process.env.DRUMS_OSWORLD_TASKS;
  const cwd = process.cwd();
  // A fresh directory to stand in, not tmpdir() itself: the checkout may be under it (a fresh clone in /tmp).
  const elsewhere = mkdtempSync(join(tmpdir(), 'drums-ci-skips-cwd-'));
  t.after(() => {
    if (saved === undefined) delete process.env.DRUMS_OSWORLD_TASKS;
    else process.env.DRUMS_OSWORLD_TASKS = saved;
    process.chdir(cwd);
    rmSync(elsewhere, { recursive: true, force: true });
  });
  process.chdir(elsewhere);
  process.env.DRUMS_OSWORLD_TASKS = 'some/tasks';
  assert.equal(osworldTasksDir(), join(REPO_ROOT, 'some/tasks'));
  process.env.DRUMS_OSWORLD_TASKS = '/nonexistent-drums-tasks';
  assert.match(missingOsworldTasks(['os']) ?? '', /^no OSWorld task files at \/nonexistent-drums-tasks \(DRUMS_OSWORLD_TASKS=.*set DRUMS_OSWORLD_TASKS/);
  process.env.DRUMS_OSWORLD_TASKS = REPO_ROOT; // a directory without domain folders
  assert.match(missingOsworldTasks(['os', 'vlc']) ?? '', /has no os, vlc folder/);
  delete process.env.DRUMS_OSWORLD_TASKS;
  assert.ok(osworldTasksDir().endsWith('/shared/osworld-tasks'), osworldTasksDir());
  assert.ok(!osworldTasksDir().startsWith(elsewhere));
});
