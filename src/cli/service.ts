import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEFAULT_STATE_DIR } from '../host/instance.ts';

const ROOT = resolve(import.meta.dirname, '..', '..');

/** The systemd unit (scripts/drums.service) with this checkout's paths filled in. */
export function renderUnit(stateDir = process.env.DRUMS_STATE_DIR || DEFAULT_STATE_DIR): string {
  return readFileSync(join(ROOT, 'scripts', 'drums.service'), 'utf8')
    .replaceAll('@ROOT@', ROOT)
    .replaceAll('@STATE_DIR@', resolve(stateDir));
}

/** Writes the unit to `dir` (default /etc/systemd/system); returns its path. */
export function installUnit(dir = '/etc/systemd/system'): string {
  if (!existsSync(dir)) throw new Error(`${dir} does not exist: is this a systemd host? Use --print and install the unit by hand`);
  const path = join(dir, 'drums.service');
  writeFileSync(path, renderUnit(), { mode: 0o644 });
  return path;
}
