import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, lstatSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DrumsError, errorMessage } from '../common/errors.ts';
import { run } from '../common/exec.ts';
import { log } from '../common/log.ts';
import { cgroupBases, cgroupDir } from '../host/cgroup-fs.ts';
import { CGROUP_ENV, type Criu, criuLogTail, DUMP_GID_ENV, DUMP_UID_ENV, installCriu, USERNS_ENV, adoptTaskNamespaces } from '../host/criu.ts';
import { shiftOwnership } from '../host/userns.ts';
import { copyTree, readCapped, relinkBeneath, removeSockets, removeTree, unlinkBeneath } from '../host/safe-fs.ts';
import { findImage } from '../image/index.ts';
import { DESKTOP_GID, DESKTOP_HOME, DESKTOP_UID } from './desktop-user.ts';
import type { RestoreSeed, Session, SessionManager } from './manager.ts';
import { slotOf } from './session.ts';
import { STATUS_MAX_BYTES } from './status-watcher.ts';
import { hostIds, usernsPaths } from './userns.ts';

/**
 * Memory fork: a CRIU checkpoint of the whole running session (processes, windows,
 * page state, memory, tmpfs contents) restored into N fresh sessions.
 *
 * 1. The source is frozen (`runc pause`). While it is, its writable layer, its
 *    /run/drums and its /tmp/.X11-unix are copied, and runc checkpoints it with
 *    `--leave-running` into a directory in the source's own session directory
 *    (so a dead daemon's leftovers go with the session). Then it runs on.
 * 2. Each copy is an ordinary create (own id, attempt token, subnet and veth,
 *    cgroup, disk, record) whose upper layer and runtime directories start from
 *    the copies, and whose container is `runc restore`d from the checkpoint
 *    instead of booted: the restored processes join the copy's netns, cgroup and
 *    mounts (runc maps the bind mounts and the netns to the copy's).
 * 3. Identity: the copy's /etc/machine-id is new (a file), its hostname is set in
 *    its restored UTS namespace, Chromium's SingletonLock names the new host.
 *    What lives in memory is the source's: a process's RNG state, D-Bus's cached
 *    machine id, DRUMS_SESSION_ID in the processes' environment, Chromium's
 *    per-profile ids (docs/pools.md).
 * 4. The checkpoint is removed.
 */

/** The tools image whose CRIU the daemon runs (images/criu-tools.json). */
export const CRIU_IMAGE = 'criu-tools';
/** The CRIU flags of every dump and restore (runc's flags): Chromium's LevelDB holds fcntl locks. */
const CRIU_FLAGS = ['--file-locks'];

/**
 * Where CRIU looks for the directories the desktop's apps watch with inotify (src/host/criu.ts): GTK's
 * recent files and GIO's monitors (LibreOffice, GIMP, Thunderbird) watch ~/.local/share and ~/.config.
 * `.local`, not `.local/share`: every component of a scan path but its last is followed, and the desktop
 * user owns `.local` (a link there would point the walk at a host directory named `share`).
 */
const DESKTOP_SCAN_PATHS = [`${DESKTOP_HOME}/.config`, `${DESKTOP_HOME}/.local`];

const criuOf = new WeakMap<SessionManager, Promise<Criu>>();

/** The daemon's CRIU (installed once per manager from the built tools image), or 501 memory_fork_unavailable. */
export async function criuFor(mgr: SessionManager): Promise<Criu> {
  let p = criuOf.get(mgr);
  if (!p) {
    p = (async () => {
      const img = findImage(CRIU_IMAGE, { imagesDir: mgr.inst.imagesDir });
      if (!img) throw new Error(`the tools image '${CRIU_IMAGE}' is not built; run 'drums image build ${CRIU_IMAGE}' (scripts/setup.sh does)`);
      return installCriu(img.rootfs, join(mgr.inst.stateDir, 'criu'), DESKTOP_UID, DESKTOP_GID, DESKTOP_SCAN_PATHS);
    })();
    criuOf.set(mgr, p);
    p.catch(() => criuOf.delete(mgr));
  }
  try {
    return await p;
  } catch (e) {
    throw new DrumsError(
      'memory_fork_unavailable',
      `a memory fork needs CRIU >= 4.1, which this daemon cannot run: ${errorMessage(e)}; fork with {"mode": "disk"} (files copied, apps restarted)`,
      {
        details: { alternative: 'disk' },
      },
    );
  }
}

/** The most of one process's /proc/<pid>/maps read (a session process can grow it to megabytes with many mappings). */
const MAPS_BUDGET = 1024 ** 2;

/**
 * Processes of the session that still map a MIT-SHM segment of the daemon's X connection (a host file CRIU can't
 * dump). Read off the event loop, within MAPS_BUDGET a process: a mapping past it is not seen, and CRIU then
 * refuses the dump (409 memory_fork_refused) for that session alone.
 */
async function hostShmMappers(src: Session): Promise<number[]> {
  const dir = cgroupDir('memory', src.names.cgroup);
  let pids: string[];
  try {
    pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const pid of pids) {
    try {
      if ((await readCapped(`/proc/${pid}/maps`, MAPS_BUDGET)).data.includes('/node-x11-shm-')) out.push(Number(pid));
    } catch {}
  }
  return out;
}

/**
 * Freezes the source, copies its files and checkpoints it into `dir`; the source runs on. A
 * failed dump is tried once more (withDumpRetry). Throws 409 memory_fork_refused (with CRIU's
 * reason) when CRIU can't dump its state. `pausedMs` is the time frozen over all attempts.
 */
export async function checkpointSource(mgr: SessionManager, src: Session, criu: Criu, dir: string): Promise<{ pausedMs: number; attempts: number }> {
  // The X server unmaps the daemon's screenshot segment when it sees that connection closed (the fork route drops it).
  for (const end = Date.now() + 10_000; (await hostShmMappers(src)).length && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
  const paused = { ms: 0 };
  const r = await withDumpRetry(
    async () => {
      await removeTree(dir);
      await freezeAndDump(mgr, src, criu, dir, paused);
    },
    () => criuLogTail(join(dir, 'work'), 'dump.log'),
    (why) => log('warn', 'memory fork: CRIU dump failed, retrying once', { id: src.id, criu: why }),
  );
  if (r.error) {
    const why = r.error;
    const hint = NESTED.test(why)
      ? ' (its Chromium runs its own sandbox, as it does by default in a session with a user namespace of its own, which puts the zygote and the renderers in nested user and PID namespaces that CRIU cannot checkpoint; such a session created with browserSandbox false runs Chromium without its sandbox and can be memory-forked (docs/security.md says what that gives up))'
      : ZYGOTE.test(why)
        ? ' (its Chromium runs with its zygote, as on a daemon with DRUMS_BROWSER_ZYGOTE=1; the default, --no-zygote in sessions without a user namespace, can be memory-forked)'
        : '';
    throw new DrumsError(
      'memory_fork_refused',
      `${TAMPERED_STATUS.test(why) ? `session ${src.id} cannot be memory-forked` : `CRIU could not checkpoint session ${src.id}`}${hint}${r.attempts > 1 ? ` (${r.attempts} attempts)` : ''}: ${why}; fork it with {"mode": "disk"} (files copied, apps restarted)`,
      {
        details: { alternative: 'disk', criu: why, attempts: r.attempts },
      },
    );
  }
  // The copies restore from inside their own user namespaces (src/host/criu.ts).
  // They read the images as their own root (not host root): readable by all, in a directory only host root reaches.
  if (src.uids) {
    adoptTaskNamespaces(join(dir, 'images'));
    await run(['chmod', '-R', 'a+rX', join(dir, 'images')]);
  }
  // The copies' identity files are their own (written by the create before the seed). The copied layer is
  // the session's: a link on the way (`etc -> /etc`) leaves the file where it is, never a host file removed.
  for (const f of ['etc/machine-id', 'etc/hostname', 'var/lib/dbus/machine-id']) {
    const r = unlinkBeneath(join(dir, 'upper'), f);
    if (r.result === 'refused') log('warn', 'memory fork: an identity file of the source was left in the copy', { id: src.id, file: f, why: r.why });
  }
  // CRIU binds the sockets anew.
  for (const d of ['run', 'x11']) await removeSockets(join(dir, d));
  return { pausedMs: paused.ms, attempts: r.attempts };
}

/**
 * Chromium's zygote greets the browser with a message carrying SCM_CREDENTIALS that the browser
 * reads only when it first needs the zygote; CRIU can't dump a queued control message. That
 * state lasts (a retry would be refused the same way).
 */
const ZYGOTE = /Control messages in queue/;
/**
 * Chromium's sandbox (in a session with its own user namespace) starts the zygote and each renderer
 * in nested user and PID namespaces; CRIU (4.1 to 4.2 at least) dumps one PID namespace only. Lasts too.
 */
const NESTED = /Can't dump nested \w+ namespace/;
/** How long the source runs between a failed dump and its retry (start-up sockets go away meanwhile). */
export const DUMP_RETRY_DELAY_MS = 1000;

/**
 * Runs `dump` and, if it fails for a reason other than a lasting one (the zygote's queued
 * message), once more after DUMP_RETRY_DELAY_MS: a dump taken while Chromium is still starting
 * can be refused on a socket that is going away (SO_PASSCRED), and the next one, a second
 * later, is not. Answers the number of attempts and the last failure's reason (CRIU's log, or
 * the error), if both failed.
 */
export async function withDumpRetry(
  dump: () => Promise<void>,
  reason: () => string,
  onRetry: (why: string) => void = () => {},
  delayMs = DUMP_RETRY_DELAY_MS,
): Promise<{ attempts: number; error?: string }> {
  for (let attempt = 1; ; attempt++) {
    try {
      await dump();
      return { attempts: attempt };
    } catch (e) {
      const why = reason() || errorMessage(e);
      if (attempt >= 2 || ZYGOTE.test(why) || NESTED.test(why) || TAMPERED_STATUS.test(why)) return { attempts: attempt, error: why };
      onRetry(why);
      await new Promise((r) => setTimeout(r, delayMs));
    }
  }
}

/** One attempt: freezes the source, copies its files and checkpoints it into `dir`, resumes it; adds the time frozen to `paused.ms`. */
async function freezeAndDump(mgr: SessionManager, src: Session, criu: Criu, dir: string, paused: { ms: number }): Promise<void> {
  const rt = [mgr.runtime.info.path, '--root', mgr.runtime.root];
  // Root's alone (in the session directory, root's too): nothing can plant a link in what the copies land in.
  mkdirSync(dir, { mode: 0o700 });
  for (const d of ['images', 'work']) mkdirSync(join(dir, d), { mode: 0o700 });
  const tp = performance.now();
  await run([...rt, 'pause', src.names.container]);
  try {
    // Open files must have the size they had at the dump (CRIU checks): copy while frozen. In child processes
    // (src/host/safe-fs.ts): links are copied as links, never followed; holes stay holes (a 1 TiB sparse file
    // in /run/drums costs nothing); the sources are bounded by their filesystems (the disk quota, the 16 MiB
    // runtime tmpfs); the event loop runs on.
    await copyTree(join(src.dir, 'disk', 'upper'), join(dir, 'upper'), { reflink: true });
    await copyTree(src.runDir, join(dir, 'run'));
    await copyTree(join(mgr.inst.rtDir, slotOf(src), 'x11'), join(dir, 'x11'));
    checkStatusCopy(join(dir, 'run'));
    // Test hook (DRUMS_TEST_HOOKS=1): the label drums.test.dumpFailOnce makes the first dump of the session fail.
    if (mgr.config.testHooks && src.spec.labels['drums.test.dumpFailOnce'] && !dumpFailed.has(src.id)) {
      dumpFailed.add(src.id);
      throw new Error('test hook: the first dump fails');
    }
    // CRIU runs as the uid the session's processes run as (their rlimits are readable only to it): its mapped desktop user.
    const ids = hostIds(src.uids);
    await mgr.runtime.checkpoint(src.names.container, {
      criu: criu.path,
      imagePath: join(dir, 'images'),
      workPath: join(dir, 'work'),
      flags: CRIU_FLAGS,
      env: { [DUMP_UID_ENV]: String(ids.desktopUid), [DUMP_GID_ENV]: String(ids.desktopGid) },
    });
  } finally {
    paused.ms += performance.now() - tp;
    await run([...rt, 'resume', src.names.container]).catch((e) =>
      log('warn', 'memory fork: resume of the source failed', { id: src.id, error: errorMessage(e) }),
    );
  }
}
const dumpFailed = new Set<string>();

/** The reason a copied status file is refused (lasting: the dump is not retried for it). */
const TAMPERED_STATUS = /status file is not the regular file its init writes/;

/**
 * Refuses a checkpoint whose copy of the source's /run/drums/status (in the checkpoint directory, root's
 * alone, so what is checked is what the copies get) is not what the session's init writes: a regular file
 * within the status budget. The desktop user owns /run/drums and can swap the file for a FIFO, a symlink
 * or a sparse giant. The copies' status watcher never follows or blocks on those (status-watcher.ts), but
 * it never sees a readiness mark in them either: every copy would wait out DRUMS_READY_TIMEOUT_MS and
 * the fork end 500 fork_failed. Refused here, the fork is a prompt 409 memory_fork_refused.
 */
export function checkStatusCopy(runCopy: string): void {
  const st = lstatSync(join(runCopy, 'status'), { throwIfNoEntry: false });
  const what = !st
    ? 'missing'
    : st.isSymbolicLink()
      ? 'a symlink'
      : st.isFIFO()
        ? 'a FIFO'
        : !st.isFile()
          ? 'not a regular file'
          : st.size > STATUS_MAX_BYTES
            ? `${st.size} bytes, over ${STATUS_MAX_BYTES}`
            : undefined;
  if (what)
    throw new Error(
      `the session's /run/drums/status file is not the regular file its init writes (${what}); reset the session (a fresh generation gets a fresh one), then fork it`,
    );
}

/** The restore seed of one copy from the checkpoint in `dir` of `src`. */
export function restoreSeed(mgr: SessionManager, src: Session, criu: Criu, dir: string): RestoreSeed {
  return {
    xCookie: src.xCookie,
    async seed(s: Session) {
      // The copy's runtime directories are the source's (in place of the fresh ones its layout made), copied
      // from the checkpoint (root's alone) into the copy's runtime tmpfs, which nothing runs in yet.
      for (const [from, to] of [
        [join(dir, 'run'), s.runDir],
        [join(dir, 'x11'), join(mgr.inst.rtDir, s.id, 'x11')],
      ] as const) {
        await removeTree(to);
        await copyTree(from, to);
        // From the source's uid range to the copy's (the upper layer is shifted by the create).
        await shiftOwnership(to, src.uids?.base ?? 0, s.uids?.base ?? 0);
      }
      // Chromium's profile lock names its host: a launcher in the copy must find its own host there. The
      // link is rewritten only where it is, never through a link (the desktop user may have made
      // ~/.config/chromium one to anywhere).
      const ids = hostIds(s.uids);
      relinkBeneath(
        join(s.dir, 'disk', 'upper'),
        `${DESKTOP_HOME.slice(1)}/.config/chromium/SingletonLock`,
        (target) => (target.startsWith(`${src.id}-`) ? `${s.id}-${target.slice(src.id.length + 1)}` : undefined),
        ids.desktopUid,
        ids.desktopGid,
      );
    },
    async start(s: Session, bundle: string, logFile: string) {
      let work = join(dir, `work-${s.id}`);
      mkdirSync(work, { mode: 0o700 });
      const here = join(s.dir, 'restore');
      if (s.uids) {
        // CRIU runs as the copy's root in its user namespace, which can open neither runc's descriptors
        // of the image and work directories nor anything in the source's directory: the images are
        // linked into the copy's own directory, named (with a work directory there) by a CRIU config
        // file that runc hands CRIU (the bundle's org.criu.config annotation).
        rmSync(here, { recursive: true, force: true });
        mkdirSync(here, { mode: 0o700 });
        await run(['cp', '-al', join(dir, 'images'), join(here, 'images')]);
        work = join(here, 'work');
        mkdirSync(work, { mode: 0o700 });
        for (const d of [here, work]) chownSync(d, s.uids.base, s.uids.base);
        // CRIU reads the images directory's path back with readlink (it expects /proc/<pid>/fd/<n>): a symlink.
        symlinkSync('images', join(here, 'images.link'));
        writeFileSync(join(here, 'criu.conf'), `unprivileged\nimages-dir ${join(here, 'images.link')}\nwork-dir ${work}\n`, { mode: 0o644 });
      }
      // runc applies the spec's sysctls (IPv6 off) when it creates a container, not when it
      // restores one: set the network ones in the copy's network namespace first.
      const cfg = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8')) as {
        linux?: { sysctl?: Record<string, string>; namespaces?: { type: string; path?: string }[] };
        annotations?: Record<string, string>;
      };
      if (s.uids) {
        cfg.annotations = { ...cfg.annotations, 'org.criu.config': join(here, 'criu.conf') };
        writeFileSync(join(bundle, 'config.json'), JSON.stringify(cfg, null, 2));
      }
      const netns = cfg.linux?.namespaces?.find((n) => n.type === 'network')?.path;
      for (const [k, v] of Object.entries(cfg.linux?.sysctl ?? {}))
        if (netns && k.startsWith('net.')) await run(['nsenter', `--net=${netns}`, 'tee', `/proc/sys/${k.replaceAll('.', '/')}`], { input: v });
      let started: { pid: number };
      try {
        started = await mgr.runtime.restore(s.names.container, bundle, logFile, {
          criu: criu.path,
          imagePath: join(dir, 'images'),
          workPath: work,
          flags: CRIU_FLAGS,
          // The copy's own cgroup namespace, rooted at its cgroup, as runc gives a created session.
          env: { [CGROUP_ENV]: prepareCgroup(s.names.cgroup).join(':'), ...(s.uids ? { [USERNS_ENV]: usernsPaths(s.dir).pin } : {}) },
        });
      } catch (e) {
        const why = criuLogTail(work, 'restore.log') || errorMessage(e);
        throw new Error(`CRIU restore failed: ${why}`);
      } finally {
        rmSync(here, { recursive: true, force: true });
      }
      // Test hook (DRUMS_TEST_HOOKS=1): a copy labelled drums.test.failStep 'restored' fails here, after CRIU
      // restored its processes into a runc container and before its step ends.
      if (mgr.config.testHooks && s.spec.labels['drums.test.failStep'] === 'restored') throw new Error('test hook: failed after the restore');
      // The restored UTS namespace still has the source's hostname.
      await run(['nsenter', `--uts=/proc/${started.pid}/ns/uts`, 'hostname', s.id]);
      return started;
    },
  };
}

/**
 * Makes the cgroup `path` (e.g. `/drums-<inst>/sessions/<id>`) in every hierarchy, as runc would
 * (a v1 cpuset directory gets its parent's cpus and mems, without which nothing can join it),
 * and answers its `cgroup.procs` files. The copy's destroy removes it like any session's.
 */
export function prepareCgroup(path: string): string[] {
  const procs: string[] = [];
  for (const base of cgroupBases()) {
    let dir = base;
    for (const part of path.split('/').filter(Boolean)) {
      const parent = dir;
      dir = join(dir, part);
      if (!existsSync(dir)) mkdirSync(dir);
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        const file = join(dir, f);
        if (existsSync(file) && !readFileSync(file, 'utf8').trim()) writeFileSync(file, readFileSync(join(parent, f), 'utf8'));
      }
    }
    procs.push(join(dir, 'cgroup.procs'));
  }
  return procs;
}

/** A fresh checkpoint directory's path in the source's session directory (removed by the caller; swept with the session). */
export function checkpointDir(src: Session): string {
  return join(src.dir, `ckpt-${randomBytes(4).toString('hex')}`);
}
