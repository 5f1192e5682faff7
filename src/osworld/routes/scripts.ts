// Scripts: /run_python and /run_bash_script.

import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import { expandPath } from '../command.ts';
import { GUEST_OUTPUT_BYTES, HOME, overflowMessage, runGuest } from '../guest-exec.ts';
import { ensureReady, type Handler, json, parseJson, userEnv } from '../guest.ts';
import { prepare } from '../prepare.ts';

export const routeRunPython: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.code !== 'string' || !b.code) return json(400, { status: 'error', message: 'Code not supplied!' });
  ensureReady(s);
  await prepare(ctx, s);
  const id = randomUUID();
  const script = 'f=/tmp/python_exec_$1.py; cat > "$f"; /usr/bin/python3 "$f"; rc=$?; rm -f "$f"; exit $rc';
  const r = await runGuest(ctx.mgr, s, { argv: ['/bin/sh', '-c', script, 'sh', id], stdin: b.code, timeoutMs: 30_000, signal: req.signal });
  if (r.timedOut) {
    return json(500, {
      status: 'error',
      message: 'Execution timeout: Code execution exceeded 30 seconds',
      error: 'TimeoutExpired',
      need_more: false,
      output: null,
    });
  }
  if (r.overflow) {
    return json(500, { status: 'error', message: overflowMessage(GUEST_OUTPUT_BYTES), error: 'OutputTooLarge', need_more: false, output: null });
  }
  const out = r.stdout.toString('utf8');
  return json(200, {
    status: r.code === 0 ? 'success' : 'error',
    message: `${out}\n${r.stderr}`,
    need_more: false,
    output: out,
    error: r.stderr || (r.code !== 0 ? `Process exited with code ${r.code}` : ''),
    return_code: r.code,
  });
};

export const routeRunBash: Handler = async (ctx, s, req) => {
  const b = parseJson(req);
  if (typeof b.script !== 'string' || !b.script) return json(400, { status: 'error', output: 'Script not supplied!', error: '', returncode: -1 });
  const timeoutS = typeof b.timeout === 'number' && b.timeout > 0 ? b.timeout : 100;
  ensureReady(s);
  await prepare(ctx, s);
  let cwd = HOME;
  if (typeof b.working_dir === 'string' && b.working_dir) {
    cwd = posix.resolve(HOME, expandPath(b.working_dir, userEnv(ctx)));
    const t = await runGuest(ctx.mgr, s, { argv: ['test', '-d', cwd], timeoutMs: 10_000 });
    if (t.code !== 0) return json(400, { status: 'error', output: `Working directory does not exist: ${cwd}`, error: '', returncode: -1 });
  }
  const body = b.script.includes('#!/bin/bash') ? b.script : `#!/bin/bash\n\n${b.script}`;
  const id = randomUUID();
  const wrapper = 'f=/tmp/bash_script_$1.sh; cat > "$f"; chmod 755 "$f"; /bin/bash "$f"; rc=$?; rm -f "$f"; exit $rc';
  const r = await runGuest(ctx.mgr, s, {
    argv: ['/bin/sh', '-c', wrapper, 'sh', id],
    stdin: body,
    timeoutMs: timeoutS * 1000,
    cwd,
    mergeStderr: true,
    signal: req.signal,
  });
  if (r.timedOut) return json(500, { status: 'error', output: `Script execution timed out after ${timeoutS} seconds`, error: '', returncode: -1 });
  if (r.overflow) return json(500, { status: 'error', output: `Failed to execute script: ${overflowMessage(GUEST_OUTPUT_BYTES)}`, error: '', returncode: -1 });
  return json(200, { status: r.code === 0 ? 'success' : 'error', output: r.stdout.toString('utf8'), error: '', returncode: r.code });
};
