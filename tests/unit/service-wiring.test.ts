// How the daemon's parts reach each other: every command in a session goes through the one exec primitive,
// and services are built by the daemon and handed on, not found through a map keyed by the manager.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** The src/ files whose text matches `re`, relative to the checkout. */
function filesMatching(re: RegExp): string[] {
  return sources(join(ROOT, 'src'))
    .filter((f) => re.test(readFileSync(f, 'utf8')))
    .map((f) => relative(ROOT, f))
    .sort();
}

describe('service wiring', () => {
  it('only the exec primitive (src/session/exec.ts) spawns a process in a session', () => {
    // x11vnc, the OSWorld guest's commands, files and exec all go through spawnInSession/runInSession,
    // so the desktop user, the capabilities and the environment are decided in one place.
    assert.deepEqual(filesMatching(/\.spawnExec\(/), ['src/session/exec.ts']);
  });

  it('no service is looked up through a WeakMap keyed by the session manager', () => {
    // The daemon builds the pools and the VNC servers and hands them to the routes (RouteContext).
    // memfork.ts's cache of the daemon's CRIU install is the one left (issue 32: its CRIU use is being reworked).
    assert.deepEqual(filesMatching(/WeakMap<SessionManager/), ['src/session/memfork.ts']);
  });
});
