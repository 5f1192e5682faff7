import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { apiError, startDaemon, type TestDaemon } from '../helpers.ts';

// Memory fork (CRIU 4.x from the criu-tools image, which scripts/setup.sh builds): each copy is
// restored from a checkpoint of the running source, so processes, memory, tmpfs files and the
// screen equal the source's; the identity is the copy's own.
describe('fork (memory)', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_TEST_HOOKS: '1', DRUMS_MAX_SESSIONS: '4' });
  });
  after(async () => {
    await d.finish();
  });

  // A default session: without a user namespace its Chromium runs --no-zygote (the zygote's unread
  // hello, SCM_CREDENTIALS, can't be dumped), so it can be memory-forked as it is.
  // Host ids (userns false): a default session has a user namespace, whose sandboxed Chromium CRIU refuses (below).
  const spec = { image: 'default', url: 'about:blank', labels: { task: 'm1' }, userns: false };

  // Let the browser finish starting: a dump taken while Chromium still opens its short-lived
  // sockets can be refused by CRIU (SO_PASSCRED on a socket that is going away), a refusal (409)
  // that none of these tests is about. Settled = a mapped window and the same browser processes
  // twice in a row, 1 s apart.
  const settle = async (id: string) => {
    const settleBy = Date.now() + 60_000;
    let prev = '';
    for (;;) {
      const procs = (await d.client.exec(id, { shell: "pgrep -d ' ' chrom || true" })).stdout;
      const win = (await d.client.windows(id)).windows.length > 0;
      if (win && procs === prev) return;
      assert.ok(Date.now() < settleBy, 'the source did not settle in 60 s');
      prev = procs;
      await new Promise((r) => setTimeout(r, 1000));
    }
  };

  it('restores N copies with the source processes, memory and files, each with its own identity; the source runs on', async () => {
    const src = await d.client.createSession(spec);
    const made: string[] = [src.id];
    try {
      // State only a memory fork carries: a process (its PID and its memory: a variable of a
      // running shell) and a file on a tmpfs; and a file on disk.
      await d.client.exec(src.id, { shell: 'echo tmp-7 > /tmp/t && echo disk-9 > /home/user/f' });
      await d.client.exec(src.id, { shell: 'nohup sh -c "v=mem-$$; while :; do echo \\$v > /tmp/live; sleep 0.2; done" >/dev/null 2>&1 & echo $! > /tmp/pid' });
      const deadline = Date.now() + 20_000;
      let live = '';
      while (!live && Date.now() < deadline) live = (await d.client.exec(src.id, { shell: 'cat /tmp/live 2>/dev/null' })).stdout;
      assert.match(live, /^mem-\d+\n$/);
      const pid = (await d.client.exec(src.id, { argv: ['cat', '/tmp/pid'] })).stdout.trim();
      const srcIdent = (await d.client.exec(src.id, { shell: 'cat /etc/machine-id; hostname' })).stdout;
      // A session that was looked at (a screenshot maps the daemon's MIT-SHM segment into its X server) forks too.
      await d.client.screenshot(src.id);
      await settle(src.id);

      const r = await d.client.forkSession(src.id, { count: 2, mode: 'memory' });
      made.push(...r.copies.map((c) => c.id));
      assert.equal(r.mode, 'memory');
      assert.equal(r.copies.length, 2);
      assert.ok(r.timings.pausedMs > 0 && r.timings.totalMs >= r.timings.snapshotMs);
      const addrs = new Set([src.network.address]);
      const idents = new Set([srcIdent]);
      for (const c of r.copies) {
        assert.equal(c.state, 'ready');
        assert.deepEqual(c.labels, { ...spec.labels, 'drums.fork.source': src.id, 'drums.fork.mode': 'memory' });
        addrs.add(c.network.address);
        // The spec's sysctls hold in a restored copy too (runc sets them only at create).
        assert.equal((await d.client.exec(c.id, { argv: ['cat', '/proc/sys/net/ipv6/conf/all/disable_ipv6'] })).stdout.trim(), '1');
        // Its own cgroup namespace rooted at its cgroup (an unprivileged dump records no cgroups, so
        // CRIU would restore it into the host's), with only its own cgroup under /sys/fs/cgroup.
        const cg = await d.client.exec(c.id, { shell: 'readlink /proc/1/ns/cgroup; cat /proc/1/cgroup; ls /sys/fs/cgroup/pids', root: true });
        assert.notEqual(cg.stdout.split('\n')[0], readlinkSync('/proc/self/ns/cgroup'), cg.stdout);
        assert.ok(
          cg.stdout
            .split('\n')
            .filter((l) => /^\d+:/.test(l))
            .every((l) => l.endsWith(':/')),
          cg.stdout,
        );
        assert.doesNotMatch(cg.stdout, /drums-/, cg.stdout);
        // The same process, with the same PID and the same memory, still running.
        const p = await d.client.exec(c.id, { shell: `cat /proc/${pid}/cmdline | tr '\\0' ' '; rm -f /tmp/live; sleep 1; cat /tmp/live` });
        assert.match(p.stdout, /^sh -c .*\n?mem-\d+\n$/s, p.stdout + p.stderr);
        assert.ok(p.stdout.endsWith(live), `copy ${c.id} process memory: ${p.stdout} vs ${live}`);
        assert.equal((await d.client.exec(c.id, { argv: ['cat', '/tmp/t', '/home/user/f'] })).stdout, 'tmp-7\ndisk-9\n');
        // Chromium and the X server came through: the same windows.
        assert.ok((await d.client.exec(c.id, { shell: 'pgrep -c chromium' })).stdout.trim() !== '0');
        const wins = (await d.client.windows(c.id)).windows;
        assert.ok(
          wins.some((w) => /about:blank|Chromium/i.test(w.title ?? '')),
          JSON.stringify(wins),
        );
        const ident = (await d.client.exec(c.id, { shell: 'cat /etc/machine-id; hostname' })).stdout;
        assert.match(ident, new RegExp(`^[0-9a-f]{32}\\n${c.id}\\n$`));
        idents.add(ident);
      }
      assert.equal(addrs.size, 3);
      assert.equal(idents.size, 3);
      // Copies are independent of the source and of each other.
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
      await d.client.exec(r.copies[0]!.id, { shell: 'echo changed > /tmp/t' });
      assert.equal((await d.client.exec(src.id, { argv: ['cat', '/tmp/t'] })).stdout, 'tmp-7\n');
      assert.equal((await d.client.exec(r.copies[1]!.id, { argv: ['cat', '/tmp/t'] })).stdout, 'tmp-7\n');
      // The checkpoint (disk) is gone from the source's directory.
      assert.deepEqual(
        readdirSync(join(d.stateDir, 'sessions', src.id)).filter((f) => f.startsWith('ckpt-')),
        [],
      );
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });

  it('a memory fork whose copy fails midway leaves no copy, no checkpoint, and the source untouched', async () => {
    const src = await d.client.createSession({ ...spec, labels: { 'drums.test.forkFailStep': 'ready' } });
    try {
      await d.client.exec(src.id, { shell: 'echo keep > /tmp/k' });
      await settle(src.id);
      const e = await apiError(() => d.client.forkSession(src.id, { count: 2, mode: 'memory' }));
      assert.deepEqual([e.status, e.code], [500, 'fork_failed'], e.message);
      assert.deepEqual(
        (await d.client.listSessions()).map((s) => s.id),
        [src.id],
      );
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
      assert.equal((await d.client.exec(src.id, { argv: ['cat', '/tmp/k'] })).stdout, 'keep\n');
      assert.deepEqual(
        readdirSync(join(d.stateDir, 'sessions', src.id)).filter((f) => f.startsWith('ckpt-')),
        [],
      );
    } finally {
      await d.client.destroySession(src.id).catch(() => {});
    }
  });

  it('retries a failed dump once: the fork succeeds, the source runs on, no checkpoint is left', async () => {
    // The test hook fails the first dump after the source was frozen and its files copied (a real
    // transient refusal, SO_PASSCRED on a socket going away during Chromium's start-up, can't be
    // made on demand); the retry freezes, copies and dumps again.
    const src = await d.client.createSession({ ...spec, labels: { 'drums.test.dumpFailOnce': '1' } });
    const made: string[] = [src.id];
    try {
      await settle(src.id);
      const r = await d.client.forkSession(src.id, { count: 1, mode: 'memory' });
      made.push(...r.copies.map((c) => c.id));
      assert.equal(r.copies.length, 1);
      assert.equal(r.copies[0]!.state, 'ready');
      assert.ok((await d.client.exec(r.copies[0]!.id, { shell: 'pgrep -c chromium' })).stdout.trim() !== '0');
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
      assert.deepEqual(
        readdirSync(join(d.stateDir, 'sessions', src.id)).filter((f) => f.startsWith('ckpt-')),
        [],
      );
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });

  // A session with a user namespace of its own: each copy is restored inside its own user namespace
  // (own uid range, own network namespace owned by it), so the ids the session sees are the same and
  // the host ids are the copy's. Its Chromium runs without its sandbox here (browserFlags --no-zygote):
  // the sandbox's nested namespaces can't be checkpointed (next test).
  it('restores a userns session into copies with their own uid ranges and user and network namespaces', async () => {
    const src = await d.client.createSession({ ...spec, userns: true, browserFlags: ['--no-zygote'] });
    const made: string[] = [src.id];
    try {
      await d.client.exec(src.id, { shell: 'echo tmp-7 > /tmp/t && echo disk-9 > /home/user/f' });
      await d.client.exec(src.id, { shell: 'nohup sh -c "v=mem-$$; while :; do echo \\$v > /tmp/live; sleep 0.2; done" >/dev/null 2>&1 & echo $! > /tmp/pid' });
      const pid = (await d.client.exec(src.id, { argv: ['cat', '/tmp/pid'] })).stdout.trim();
      await settle(src.id);
      const live = (await d.client.exec(src.id, { argv: ['cat', '/tmp/live'] })).stdout;
      assert.match(live, /^mem-\d+\n$/);
      const nsOf = async (id: string) =>
        (await d.client.exec(id, { shell: 'cat /proc/self/uid_map; readlink /proc/self/ns/user /proc/self/ns/net', root: true })).stdout;
      const seen = new Set([await nsOf(src.id)]);
      const srcBase = Number((await nsOf(src.id)).trim().split(/\s+/)[1]);
      const r = await d.client.forkSession(src.id, { count: 2, mode: 'memory' });
      made.push(...r.copies.map((c) => c.id));
      assert.equal(r.copies.length, 2);
      for (const c of r.copies) {
        assert.equal(c.state, 'ready');
        const ns = await nsOf(c.id);
        seen.add(ns);
        const [inside, base, size] = ns.trim().split(/\s+/).map(Number);
        assert.deepEqual([inside, size], [0, 65536], ns);
        assert.notEqual(base, srcBase, ns);
        // The same ids inside; the copy's range outside (processes and the copied files).
        assert.equal((await d.client.exec(c.id, { shell: 'id -u; stat -c %u:%g /home/user/f /tmp/t' })).stdout, '1000\n1000:1000\n1000:1000\n');
        assert.equal(statSync(join(d.stateDir, 'sessions', c.id, 'disk', 'upper', 'home', 'user', 'f')).uid, base! + 1000);
        const p = await d.client.exec(c.id, { shell: `cat /proc/${pid}/status | grep ^Uid; rm -f /tmp/live; sleep 1; cat /tmp/live` });
        assert.match(p.stdout, /^Uid:\s+1000\s/, p.stdout);
        assert.ok(p.stdout.endsWith(live), `copy ${c.id} process memory: ${p.stdout} vs ${live}`);
        assert.equal((await d.client.exec(c.id, { argv: ['cat', '/tmp/t', '/home/user/f'] })).stdout, 'tmp-7\ndisk-9\n');
        assert.ok((await d.client.exec(c.id, { shell: 'pgrep -c chromium' })).stdout.trim() !== '0');
        assert.ok((await d.client.windows(c.id)).windows.length > 0);
        assert.equal((await d.client.exec(c.id, { argv: ['hostname'] })).stdout.trim(), c.id);
      }
      // Three user namespaces, three ranges, three network namespaces.
      assert.equal(seen.size, 3);
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });

  // The osworld image with an office app holding a document with unsaved text, and VLC: the apps are
  // restored, not restarted (their windows and PIDs, the unsaved text), in copies with their own identity,
  // uid range and netns. LibreOffice (GTK's recent files, GIO's monitors) watches ~/.local/share and ~/.config, which
  // CRIU must find by scanning (overlayfs file handles can't be opened): before, the dump was refused
  // with "fsnotify: Can't dump that handle".
  it('restores an osworld session with Chromium, LibreOffice Writer (unsaved text) and VLC into copies of their own', async () => {
    const src = await d.client.createSession({ image: 'osworld', url: 'about:blank', browserSandbox: false } as never);
    const made: string[] = [src.id];
    try {
      const sh = async (id: string, shell: string, root = false) => (await d.client.exec(id, { shell, root })).stdout;
      await sh(src.id, 'printf "first line\\n" > /home/user/doc.txt; nohup soffice --writer /home/user/doc.txt >/dev/null 2>&1 & nohup vlc >/dev/null 2>&1 &');
      // VLC too: it holds an IP socket, which CRIU before 4.2 can't dump on Linux >= 6.16 (SO_PASSCRED).
      const titles = async (id: string) => (await d.client.windows(id)).windows.map((w) => w.title ?? '').join('\n');
      const writer = async (id: string) => /doc\.txt - LibreOffice Writer/.test(await titles(id)) && /VLC media player/.test(await titles(id));
      for (const by = Date.now() + 300_000; !(await writer(src.id)); await new Promise((r) => setTimeout(r, 1000)))
        assert.ok(Date.now() < by, 'no Writer and VLC windows in 300 s');
      // The document's text as its running Writer holds it (select all, copy, read the clipboard), within `ms`.
      const win = "xdotool search --name 'doc.txt - LibreOffice Writer' | head -1";
      const read = `w=$(${win}); xdotool windowactivate --sync $w key --clearmodifiers ctrl+a ctrl+c; sleep 0.5; timeout 5 xclip -o -selection clipboard 2>/dev/null`;
      const text = async (id: string, ms = 60_000, before = async () => {}) => {
        for (const by = Date.now() + ms; ; await new Promise((r) => setTimeout(r, 1000))) {
          await before();
          const out = await sh(id, read);
          if (out.includes('drums-unsaved-42') || Date.now() > by) return out;
        }
      };
      // Unsaved text, typed into the document (XTEST, to the focused window: LibreOffice ignores sent events;
      // again if a loaded Writer was not taking input yet): only the running process has it.
      const type = () =>
        sh(src.id, `w=$(${win}); xdotool windowactivate --sync $w key --clearmodifiers ctrl+End type --delay 20 ' drums-unsaved-42'`).then(() => {});
      assert.match(await text(src.id, 120_000, type), /drums-unsaved-42/);
      const pidOf = (id: string) => sh(id, 'pgrep -x soffice.bin; pgrep -x vlc');
      const srcPid = (await pidOf(src.id)).trim();
      assert.match(srcPid, /^\d+\n\d+$/);
      await settle(src.id);
      const nsOf = async (id: string) => sh(id, 'cat /proc/self/uid_map; readlink /proc/self/ns/user /proc/self/ns/net; hostname; cat /etc/machine-id', true);
      const seen = new Set([await nsOf(src.id)]);
      const addrs = new Set([src.network.address]);
      const r = await d.client.forkSession(src.id, { count: 2, mode: 'memory' });
      made.push(...r.copies.map((c) => c.id));
      assert.equal(r.copies.length, 2);
      for (const c of r.copies) {
        assert.equal(c.state, 'ready');
        // Writer and VLC were restored, not started again: the same processes (PIDs) with their windows, and the unsaved text.
        assert.equal((await pidOf(c.id)).trim(), srcPid);
        assert.ok(await writer(c.id), await titles(c.id));
        assert.ok((await d.client.windows(c.id)).windows.some((w) => /Chromium/.test(w.title ?? '')));
        assert.match(await text(c.id), /drums-unsaved-42/);
        // Its own identity, uid range, user and network namespaces and address.
        const ns = await nsOf(c.id);
        seen.add(ns);
        assert.ok(ns.includes(`\n${c.id}\n`), ns);
        addrs.add(c.network.address);
      }
      assert.equal(seen.size, 3);
      assert.equal(new Set([...seen].map((ns) => ns.trim().split(/\s+/)[1])).size, 3, [...seen].join('\n'));
      assert.equal(addrs.size, 3);
      assert.equal((await d.client.getSession(src.id)).state, 'ready');
    } finally {
      for (const id of made) await d.client.destroySession(id).catch(() => {});
    }
  });

  it('refuses a userns session whose Chromium runs its sandbox (nested namespaces): 409, not retried, the source untouched', async () => {
    const src = await d.client.createSession({ ...spec, userns: true });
    try {
      await settle(src.id);
      assert.doesNotMatch((await d.client.exec(src.id, { shell: 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "' })).stdout, /--no-sandbox/);
      await assertRefused(d, src.id, /nested \w+ namespace/, /sandbox.*browserSandbox false/);
    } finally {
      await d.client.destroySession(src.id).catch(() => {});
    }
  });
});

// A daemon that keeps Chromium's zygote (DRUMS_BROWSER_ZYGOTE=1) makes sessions a memory fork
// refuses, clearly: 409 with CRIU's reason and the disk fork offered; the source runs on.
describe('fork (memory) of a Chromium with its zygote', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_BROWSER_ZYGOTE: '1', DRUMS_MAX_SESSIONS: '2' });
  });
  after(async () => {
    await d.finish();
  });

  it('is refused (409 memory_fork_refused naming the zygote, disk offered), not retried; the source is untouched', async () => {
    const src = await d.client.createSession({ image: 'default', url: 'about:blank', userns: false });
    try {
      assert.match((await d.client.exec(src.id, { shell: 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "' })).stdout, /--type=zygote/);
      // The zygote's message lasts: not retried (as the sandbox's nesting).
      await assertRefused(d, src.id, /Control messages in queue/, /zygote/);
    } finally {
      await d.client.destroySession(src.id).catch(() => {});
    }
  });
});

/**
 * A memory fork of `id` is refused for good: 409 memory_fork_refused with CRIU's reason and the
 * disk fork offered, tried once; the source is ready and alone, with no checkpoint left.
 */
async function assertRefused(d: TestDaemon, id: string, criu: RegExp, message: RegExp): Promise<void> {
  const e = await apiError(() => d.client.forkSession(id, { count: 1, mode: 'memory' }));
  const details = e.details as { alternative?: string; criu?: string; attempts?: number } | undefined;
  assert.deepEqual([e.status, e.code, details?.alternative], [409, 'memory_fork_refused', 'disk'], e.message);
  assert.match(details?.criu ?? '', criu);
  assert.match(e.message, message);
  assert.equal(details?.attempts, 1);
  assert.equal((await d.client.getSession(id)).state, 'ready');
  assert.deepEqual(
    (await d.client.listSessions()).map((s) => s.id),
    [id],
  );
  assert.deepEqual(
    readdirSync(join(d.stateDir, 'sessions', id)).filter((f) => f.startsWith('ckpt-')),
    [],
  );
}
