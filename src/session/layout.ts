/**
 * What a session is on disk before its container starts: the directories and identity files of
 * its writable layer and bound directories (prepareDirs), and its OCI bundle (writeBundle).
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DaemonConfig } from '../common/config.ts';
import type { Instance } from '../host/instance.ts';
import { blockDeviceOf } from '../host/disk-throttle.ts';
import { cgroupMode, swapLimitSupported } from '../host/cgroup-fs.ts';
import { buildSpec } from '../host/oci-spec.ts';
import { DESKTOP_ENV, DESKTOP_GID, DESKTOP_HOME, DESKTOP_UID } from './desktop-user.ts';
import { identityOf, slotOf, type Session } from './session.ts';
import { diskRates } from './spec.ts';
import { chownToSessionRoot, hostIds, usernsPaths } from './userns.ts';

/**
 * The directories and identity files of a fresh generation: its writable layer and runtime tmpfs are
 * new (makeSessionDisk, mountSessionTmpfs), so nothing here can meet a link the session planted.
 *
 * Who reaches what (docs/security.md, "The daemon's hands in a session's files"): the session directory and
 * the session's runtime tmpfs (`<rt>/<id>`, holding its /run/drums and its 1777 /tmp/.X11-unix) are
 * root's; with a user namespace their group is the session's root (host gid `base`) with search
 * only (0710), since runc's init runs as that root and must reach the bundle and the directories
 * it binds; without one they are 0700 (runc's init is host root). No other host user can list,
 * enter or create anything in them, and the session's root cannot rename or replace their entries.
 */
export function prepareDirs(inst: Instance, s: Session): void {
  const upper = join(s.dir, 'disk', 'upper');
  const ids = hostIds(s.uids);
  const rt = join(inst.rtDir, slotOf(s));
  mkdirSync(join(upper, 'etc'), { recursive: true });
  mkdirSync(join(s.dir, 'disk', 'work'), { recursive: true });
  mkdirSync(join(s.dir, 'bundle', 'rootfs'), { recursive: true });
  // Per-session identity: D-Bus and friends key on the machine id.
  writeFileSync(join(upper, 'etc', 'machine-id'), randomBytes(16).toString('hex') + '\n', { mode: 0o444 });
  writeFileSync(join(upper, 'etc', 'hostname'), `${identityOf(s)}\n`);
  // /run/drums (sockets and status) belongs to the desktop user; /tmp/.X11-unix is sticky, like /tmp.
  mkdirSync(join(s.runDir, 'xdg'), { recursive: true });
  writeFileSync(join(s.runDir, 'status'), '');
  for (const p of [s.runDir, join(s.runDir, 'xdg'), join(s.runDir, 'status')]) chownSync(p, ids.desktopUid, ids.desktopGid);
  chmodSync(join(s.runDir, 'xdg'), 0o700);
  mkdirSync(join(rt, 'x11'), { recursive: true });
  chmodSync(join(rt, 'x11'), 0o1777);
  // With a user namespace, what the daemon made in the writable layer and the X socket directory belong to root-in-session.
  chownToSessionRoot(s.uids, [
    upper,
    join(upper, 'etc'),
    join(upper, 'etc', 'machine-id'),
    join(upper, 'etc', 'hostname'),
    join(s.dir, 'disk', 'work'),
    join(rt, 'x11'),
  ]);
  if (s.uids) {
    // runc's init runs as the session's root: it must reach the bundle and the bound directories through the
    // state directory (traverse only, no listing).
    for (const d of [inst.stateDir, inst.sessionsDir]) chmodSync(d, 0o711);
  }
  for (const d of [s.dir, rt]) {
    chownSync(d, 0, s.uids ? s.uids.base : 0);
    chmodSync(d, s.uids ? 0o710 : 0o700);
  }
}

export function writeBundle(inst: Instance, config: DaemonConfig, s: Session): void {
  const { width, height, depth } = s.spec.screen;
  const spec = buildSpec({
    // A standby's processes already see its owner's id (src/session/standby.ts).
    hostname: identityOf(s),
    uid: DESKTOP_UID,
    gid: DESKTOP_GID,
    home: DESKTOP_HOME,
    args: ['/usr/bin/tini', '-s', '--', '/usr/lib/drums/session-init'],
    env: {
      ...DESKTOP_ENV,
      DRUMS_SCREEN: `${width}x${height}x${depth}`,
      DRUMS_SESSION_ID: identityOf(s),
      ...(s.spec.url ? { DRUMS_URL: s.spec.url } : {}),
      ...(s.spec.browserFlags.length ? { DRUMS_BROWSER_FLAGS: s.spec.browserFlags.join(' ') } : {}),
      ...(config.browserZygote ? { DRUMS_BROWSER_ZYGOTE: '1' } : {}),
      ...(s.spec.browserSandbox === false ? { DRUMS_BROWSER_SANDBOX: '0' } : {}),
      ...benchEnv(s.spec.labels, config.benchHooks),
    },
    netnsPath: `/var/run/netns/${s.names.netns}`,
    ...(s.uids ? { userns: { path: usernsPaths(s.dir).pin, base: s.uids.base, size: s.uids.size } } : {}),
    cgroupsPath: s.names.cgroup,
    runDir: s.runDir,
    x11Dir: join(inst.rtDir, slotOf(s), 'x11'),
    initPath: join(inst.rtDir, 'session-init'),
    allowMemoryMerge: benchEnv(s.spec.labels, config.benchHooks).DRUMS_KSM === '1',
    memoryBytes: s.spec.memoryBytes,
    // No swap: a session at its limit is OOM-killed in its own cgroup instead of thrashing the host.
    noSwap: swapLimitSupported(),
    pids: s.spec.pids,
    cpus: s.spec.cpus,
    cgroupV2: cgroupMode() === 'v2',
    // The limits go on the session's loop device, and its reads also on the disk under the image (the overlay's lower).
    ...(s._disk ? { disk: { ...s._disk, ...diskRates(s.spec, config), lower: blockDeviceOf(s.imageDir) } } : {}),
    shmBytes: 256 * 1024 ** 2,
    tmpBytes: 512 * 1024 ** 2,
  });
  writeFileSync(join(s.dir, 'bundle', 'config.json'), JSON.stringify(spec, null, 2));
}

/**
 * Bench-only session settings, honoured only when the daemon runs with
 * DRUMS_BENCH_HOOKS=1 (DrumsBench's private daemons): label drums.bench.ksm=1
 * makes the session init opt its process tree into KSM
 * (prctl(PR_SET_MEMORY_MERGE), guest/session-init), which merges pages across
 * sessions once the host runs ksmd: a cross-session timing channel, so never a
 * setting a client can ask a production daemon for.
 */
export function benchEnv(labels: Record<string, string>, benchHooks: boolean): Record<string, string> {
  if (!benchHooks) return {};
  return labels['drums.bench.ksm'] === '1' ? { DRUMS_KSM: '1' } : {};
}
