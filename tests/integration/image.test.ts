// Image builder tests. The build tests need root, network access to a Debian
// mirror and reuse the shared images dir (DRUMS_IMAGE_DIR or
// /var/lib/drums/images): images are content-addressed, so a cached `minimal`
// is reused and a missing one is built (about 1.5 minutes).

import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import {
  acquireLock,
  buildImage,
  debianMirrors,
  findImage,
  listImages,
  loadRecipe,
  processStartTime,
  recipeHash,
  removeImage,
  renderProgressToStderr,
  REPO_ROOT,
  resolveRecipe,
  type BuildProgress,
} from '../../src/image/index.ts';
import { loadConfig } from '../../src/common/config.ts';
import { loopsBackedBy, makeSessionDisk, unmountSessionDisk } from '../../src/host/disk.ts';
import { skipUnlessCI } from '../helpers.ts';

const IMAGES_DIR = process.env.DRUMS_IMAGE_DIR || '/var/lib/drums/images';
const isRoot = process.getuid?.() === 0;
const BUILD_TIMEOUT = 20 * 60_000;

function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `drums-image-test-${prefix}-`));
}

function errorOf(fn: () => unknown): Error & { code?: string; field?: string } {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof Error, 'thrown value is an Error');
    return err as Error & { code?: string; field?: string };
  }
  assert.fail('expected an error');
}

/** A copy of the repo's recipes and guest files, so tests can edit them. */
function scratchRepo(): string {
  const root = tempDir('repo');
  cpSync(join(REPO_ROOT, 'images'), join(root, 'images'), { recursive: true });
  cpSync(join(REPO_ROOT, 'guest'), join(root, 'guest'), { recursive: true });
  return root;
}

const MINIMAL_OK = {
  name: 'probe',
  base: { debootstrap: { suite: 'bookworm', variant: 'minbase' } },
  packages: ['xvfb'],
  users: [{ name: 'user', uid: 1000, home: '/home/user', shell: '/bin/bash', groups: [] }],
  files: [{ src: 'guest/session-init', dest: '/usr/lib/drums/session-init', mode: '0755' }],
};

describe('recipe validation', () => {
  const cases: Array<[string, (r: Record<string, any>) => void, string]> = [
    [
      'unknown top-level field',
      (r) => {
        r.colour = 'blue';
      },
      'colour',
    ],
    [
      'missing base',
      (r) => {
        delete r.base;
      },
      'base',
    ],
    [
      'packages not an array',
      (r) => {
        r.packages = 'xvfb';
      },
      'packages',
    ],
    [
      'package of the wrong type',
      (r) => {
        r.packages = ['xvfb', 42];
      },
      'packages[1]',
    ],
    [
      'package that looks like an option',
      (r) => {
        r.packages = ['-oAPT::Foo=1'];
      },
      'packages[0]',
    ],
    [
      'pip requirement with a space',
      (r) => {
        r.pip = ['requests; rm -rf /'];
      },
      'pip[0]',
    ],
    [
      'uid as a string',
      (r) => {
        r.users[0].uid = '1000';
      },
      'users[0].uid',
    ],
    [
      'uid 0',
      (r) => {
        r.users[0].uid = 0;
      },
      'users[0].uid',
    ],
    [
      'unknown user field',
      (r) => {
        r.users[0].admin = true;
      },
      'users[0].admin',
    ],
    [
      'relative home',
      (r) => {
        r.users[0].home = 'home/user';
      },
      'users[0].home',
    ],
    [
      'bad file mode',
      (r) => {
        r.files[0].mode = 'rwxr-xr-x';
      },
      'files[0].mode',
    ],
    [
      'file src escaping the repo',
      (r) => {
        r.files[0].src = '../etc/passwd';
      },
      'files[0].src',
    ],
    [
      'absolute file src',
      (r) => {
        r.files[0].src = '/etc/passwd';
      },
      'files[0].src',
    ],
    [
      'relative file dest',
      (r) => {
        r.files[0].dest = 'usr/lib/x';
      },
      'files[0].dest',
    ],
    [
      'both debootstrap and from',
      (r) => {
        r.base.from = 'minimal';
      },
      'base',
    ],
    [
      'unknown variant',
      (r) => {
        r.base.debootstrap.variant = 'fat';
      },
      'base.debootstrap.variant',
    ],
    [
      'unknown debootstrap field',
      (r) => {
        r.base.debootstrap.mirror = 'http://x';
      },
      'base.debootstrap.mirror',
    ],
    [
      'name not matching the file',
      (r) => {
        r.name = 'other';
      },
      'name',
    ],
    [
      'env value not a string',
      (r) => {
        r.env = { FOO: 1 };
      },
      'env.FOO',
    ],
    [
      'empty run command',
      (r) => {
        r.run = ['  '];
      },
      'run[0]',
    ],
  ];
  for (const [title, mutate, field] of cases) {
    test(`rejects ${title}`, () => {
      const dir = tempDir('recipes');
      try {
        const recipe = structuredClone(MINIMAL_OK) as Record<string, any>;
        mutate(recipe);
        writeFileSync(join(dir, 'probe.json'), JSON.stringify(recipe));
        const err = errorOf(() => loadRecipe('probe', { recipesDir: dir }));
        assert.equal(err.code, 'invalid_recipe', err.message);
        assert.equal(err.field, field);
        assert.match(err.message, new RegExp(field.replace(/[[\].]/g, '\\$&')));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  test('accepts a valid recipe and fills in defaults', () => {
    const dir = tempDir('recipes');
    try {
      writeFileSync(join(dir, 'probe.json'), JSON.stringify(MINIMAL_OK));
      const r = loadRecipe('probe', { recipesDir: dir });
      assert.deepEqual(r.pip, []);
      assert.deepEqual(r.run, []);
      assert.deepEqual(r.env, {});
      assert.equal(r.files[0].mode, '0755');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('rejects invalid JSON', () => {
    const dir = tempDir('recipes');
    try {
      writeFileSync(join(dir, 'probe.json'), '{ "name": "probe", ');
      assert.equal(errorOf(() => loadRecipe('probe', { recipesDir: dir })).code, 'invalid_recipe');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('rejects a missing parent and a from-cycle', () => {
    const dir = tempDir('recipes');
    try {
      writeFileSync(join(dir, 'a.json'), JSON.stringify({ name: 'a', base: { from: 'nope' } }));
      const missing = errorOf(() => recipeHash('a', { recipesDir: dir }));
      assert.equal(missing.code, 'invalid_recipe');
      assert.equal(missing.field, 'base.from');
      writeFileSync(join(dir, 'a.json'), JSON.stringify({ name: 'a', base: { from: 'b' } }));
      writeFileSync(join(dir, 'b.json'), JSON.stringify({ name: 'b', base: { from: 'a' } }));
      const cycle = errorOf(() => recipeHash('a', { recipesDir: dir }));
      assert.equal(cycle.code, 'invalid_recipe');
      assert.match(cycle.message, /cycle/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('unknown recipe names are image_not_found', () => {
    assert.equal(errorOf(() => loadRecipe('no-such-recipe')).code, 'image_not_found');
    assert.equal(errorOf(() => findImage('no-such-recipe', { imagesDir: '/nonexistent' })).code, 'image_not_found');
  });

  test('the shipped recipes are valid', () => {
    assert.equal(loadRecipe('minimal').name, 'minimal');
    assert.deepEqual(loadRecipe('default').base, { from: 'minimal' });
  });
});

describe('recipe hash', () => {
  test('is stable and independent of where the repo lives', () => {
    const root = scratchRepo();
    try {
      const opts = { recipesDir: join(root, 'images'), repoRoot: root };
      const h = recipeHash('minimal');
      assert.match(h, /^[0-9a-f]{64}$/);
      assert.equal(recipeHash('minimal'), h);
      assert.equal(recipeHash('minimal', opts), h);
      assert.equal(recipeHash('default', opts), recipeHash('default'));
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test('ignores key order and whitespace', () => {
    const root = scratchRepo();
    try {
      const opts = { recipesDir: join(root, 'images'), repoRoot: root };
      const before = recipeHash('minimal', opts);
      const file = join(root, 'images/minimal.json');
      const obj = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      const reversed = Object.fromEntries(Object.entries(obj).reverse());
      writeFileSync(file, JSON.stringify(reversed));
      assert.equal(recipeHash('minimal', opts), before);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test('changes when a copied file changes, also for child recipes', () => {
    const root = scratchRepo();
    try {
      const opts = { recipesDir: join(root, 'images'), repoRoot: root };
      // osworld copies guest/osworld/google-chrome in; a recipe built from it inherits the change.
      const [osw, def] = [recipeHash('osworld', opts), recipeHash('default', opts)];
      writeFileSync(join(root, 'images', 'child.json'), JSON.stringify({ name: 'child', base: { from: 'osworld' }, packages: ['less'] }));
      const child = recipeHash('child', opts);
      writeFileSync(join(root, 'guest/osworld/google-chrome'), `${readFileSync(join(root, 'guest/osworld/google-chrome'), 'utf8')}\n# changed\n`);
      assert.notEqual(recipeHash('osworld', opts), osw);
      assert.notEqual(recipeHash('child', opts), child, 'a child recipe changes with its parent');
      assert.equal(recipeHash('default', opts), def, 'a recipe that does not copy the file keeps its hash');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test('changes when a package is added', () => {
    const root = scratchRepo();
    try {
      const opts = { recipesDir: join(root, 'images'), repoRoot: root };
      const [min, def] = [recipeHash('minimal', opts), recipeHash('default', opts)];
      const file = join(root, 'images/default.json');
      const obj = JSON.parse(readFileSync(file, 'utf8')) as { packages: string[] };
      obj.packages.push('less');
      writeFileSync(file, JSON.stringify(obj));
      assert.equal(recipeHash('minimal', opts), min);
      assert.notEqual(recipeHash('default', opts), def);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('pip lock', () => {
  const errorOf = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      return e as { code?: string; message: string };
    }
    assert.fail('no error');
  };

  test('the shipped recipes with pip packages are locked; the lock is in the hash; a mismatch or a missing lock is refused', () => {
    const root = scratchRepo();
    try {
      const opts = { recipesDir: join(root, 'images'), repoRoot: root };
      for (const name of ['osworld', 'seed-guest']) assert.ok(resolveRecipe(name, opts).pipLock?.includes('--hash=sha256:'), name);
      const lock = join(root, 'images/osworld.pip.lock');
      const text = readFileSync(lock, 'utf8');
      const [osw, seed] = [recipeHash('osworld', opts), recipeHash('seed-guest', opts)];
      // Another hash for the same pins: a new image, for the child too.
      writeFileSync(lock, text.replace(/sha256:[0-9a-f]{64}/, `sha256:${'0'.repeat(64)}`));
      assert.notEqual(recipeHash('osworld', opts), osw);
      assert.notEqual(recipeHash('seed-guest', opts), seed);
      // A pin in the lock the recipe does not list.
      writeFileSync(lock, `${text}extra==1.0 \\\n    --hash=sha256:${'1'.repeat(64)}\n`);
      assert.match(errorOf(() => recipeHash('osworld', opts)).message, /not in the recipe: extra==1\.0/);
      // A pin without a hash.
      writeFileSync(lock, `${text}extra==1.0\n`);
      assert.match(errorOf(() => recipeHash('osworld', opts)).message, /--hash=sha256/);
      writeFileSync(lock, text);
      // The recipe moves a version the lock does not have.
      const file = join(root, 'images/osworld.json');
      const obj = JSON.parse(readFileSync(file, 'utf8')) as { pip: string[] };
      obj.pip[obj.pip.indexOf('pysrt==1.1.2')] = 'pysrt==1.1.3';
      writeFileSync(file, JSON.stringify(obj));
      assert.match(errorOf(() => recipeHash('osworld', opts)).message, /not locked: pysrt==1\.1\.3/);
      // A range instead of a pin.
      obj.pip[obj.pip.indexOf('pysrt==1.1.3')] = 'pysrt>=1.1';
      writeFileSync(file, JSON.stringify(obj));
      assert.match(errorOf(() => recipeHash('osworld', opts)).message, /exact pin/);
      rmSync(lock);
      obj.pip[obj.pip.indexOf('pysrt>=1.1')] = 'pysrt==1.1.2';
      writeFileSync(file, JSON.stringify(obj));
      assert.match(errorOf(() => recipeHash('osworld', opts)).message, /missing: write it with 'bin\/drums image pip-lock osworld'/);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('build lock', () => {
  test('is created with pid and start time and removed on release', async () => {
    const dir = tempDir('lock');
    try {
      const path = join(dir, 'x.lock');
      const lock = await acquireLock(path);
      assert.equal(readFileSync(path, 'utf8'), `${process.pid} ${processStartTime(process.pid)}\n`);
      lock.release();
      assert.equal(existsSync(path), false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('waits for a live holder, then times out', async () => {
    const dir = tempDir('lock');
    try {
      const path = join(dir, 'x.lock');
      const held = await acquireLock(path);
      await assert.rejects(acquireLock(path, { timeoutMs: 300, pollMs: 50 }), { code: 'image_lock_timeout' });
      const waiting = acquireLock(path, { timeoutMs: 5000, pollMs: 50 });
      setTimeout(() => held.release(), 200);
      (await waiting).release();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('takes over locks of dead and reused pids', async () => {
    const dir = tempDir('lock');
    try {
      const path = join(dir, 'x.lock');
      writeFileSync(path, '999999999 12345\n'); // beyond pid_max: never alive
      (await acquireLock(path, { timeoutMs: 1000 })).release();
      writeFileSync(path, `${process.pid} 1\n`); // our pid, but a different start time
      (await acquireLock(path, { timeoutMs: 1000 })).release();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('progress renderer', () => {
  const fakeStream = (tty: boolean): { stream: NodeJS.WriteStream; out: () => string } => {
    let buf = '';
    const stream = {
      isTTY: tty,
      columns: 80,
      write: (s: string) => {
        buf += s;
        return true;
      },
    };
    return { stream: stream as unknown as NodeJS.WriteStream, out: () => buf };
  };

  test('prints one line per step when not a TTY', () => {
    const { stream, out } = fakeStream(false);
    const cb = renderProgressToStderr({ stream });
    cb({ step: 'debootstrap', index: 1, total: 2, elapsedMs: 0 });
    cb({ step: 'clean up', index: 2, total: 2, elapsedMs: 12_345 });
    cb({ step: 'done', index: 2, total: 2, elapsedMs: 13_000 });
    assert.deepEqual(out().trimEnd().split('\n'), ['[1/2] debootstrap (0.0s)', '[2/2] clean up (12.3s)', 'done (13.0s)']);
  });

  test('redraws a single spinner line on a TTY', () => {
    const { stream, out } = fakeStream(true);
    const cb = renderProgressToStderr({ stream });
    cb({ step: 'debootstrap', index: 1, total: 2, elapsedMs: 1000 });
    cb({ step: 'done', index: 2, total: 2, elapsedMs: 2000 });
    assert.match(out(), /^\r\x1b\[2K\S \[1\/2\] debootstrap \(1\.\ds\)\r\x1b\[2K✓ done \(2\.0s\)\n$/);
  });
});

test('DRUMS_DEBIAN_MIRROR overrides the mirror', () => {
  const c = loadConfig({ DRUMS_DEBIAN_MIRROR: 'http://mirror.example/debian/' });
  assert.equal(debianMirrors(c).main, 'http://mirror.example/debian');
  assert.match(debianMirrors(loadConfig({})).main, /^https?:\/\/\S+\/debian$/);
});

describe('removeImage', () => {
  function fakeImage(imagesDir: string, hash: string): string {
    const dir = join(imagesDir, `minimal-${hash.slice(0, 12)}`);
    mkdirSync(join(dir, 'rootfs'), { recursive: true });
    writeFileSync(join(dir, 'image.json'), JSON.stringify({ name: 'minimal', hash, builtAt: new Date().toISOString() }));
    return dir;
  }

  test('removes all builds of a name and reports unknown ones', () => {
    const images = tempDir('images');
    try {
      const a = fakeImage(images, 'a'.repeat(64));
      const b = fakeImage(images, 'b'.repeat(64));
      assert.equal(listImages({ imagesDir: images }).length, 2);
      assert.equal(
        listImages({ imagesDir: images }).some((i) => i.current),
        false,
      );
      assert.deepEqual(
        removeImage(`minimal-${'a'.repeat(12)}`, { imagesDir: images }).map((i) => i.dir),
        [a],
      );
      assert.equal(existsSync(a), false);
      assert.deepEqual(
        removeImage('minimal', { imagesDir: images }).map((i) => i.dir),
        [b],
      );
      assert.deepEqual(readdirSync(images), []);
      assert.throws(() => removeImage('minimal', { imagesDir: images }), { code: 'image_not_found' });
    } finally {
      rmSync(images, { recursive: true, force: true });
    }
  });

  test('refuses to remove an image that is mounted', {
    skip: skipUnlessCI(!isRoot && 'mounting needs root (run the integration tests as root, as scripts/test.sh does)'),
  }, () => {
    const images = tempDir('images');
    let mounted = '';
    try {
      const dir = fakeImage(images, 'c'.repeat(64));
      execFileSync('mount', ['-t', 'tmpfs', 'drums-test', join(dir, 'rootfs')]);
      mounted = join(dir, 'rootfs');
      assert.throws(() => removeImage('minimal', { imagesDir: images }), { code: 'image_in_use' });
      assert.ok(existsSync(dir));
    } finally {
      if (mounted) execFileSync('umount', [mounted]);
      rmSync(images, { recursive: true, force: true });
    }
  });
});

describe('building', { skip: skipUnlessCI(!isRoot && 'image builds need root (run the integration tests as root, as scripts/test.sh does)') }, () => {
  test('minimal has the session essentials', { timeout: BUILD_TIMEOUT }, async () => {
    const events: BuildProgress[] = [];
    const img = await buildImage('minimal', { imagesDir: IMAGES_DIR, onProgress: (e) => events.push(e) });
    assert.equal(events.at(-1)?.step, 'done');
    assert.equal(img.hash, recipeHash('minimal'));
    assert.equal(img.dir, join(IMAGES_DIR, `minimal-${img.hash.slice(0, 12)}`));
    const r = (p: string): string => join(img.rootfs, p);
    for (const bin of ['usr/bin/Xvfb', 'usr/bin/openbox', 'usr/bin/tini', 'usr/bin/xterm', 'usr/bin/xdpyinfo']) {
      assert.ok(statSync(r(bin)).isFile(), `${bin} exists`);
    }
    assert.match(readFileSync(r('etc/passwd'), 'utf8'), /^user:x:1000:1000:[^:]*:\/home\/user:\/bin\/bash$/m);
    assert.equal(statSync(r('home/user')).uid, 1000);
    // The session init is not baked in: the daemon binds its own copy in read-only.
    assert.equal(existsSync(r('usr/lib/drums/session-init')), false);
    assert.equal(statSync(r('etc/machine-id')).size, 0, '/etc/machine-id is empty');
    assert.equal(readlinkSync(r('var/lib/dbus/machine-id')), '/etc/machine-id');
    assert.equal(existsSync(r('usr/sbin/policy-rc.d')), false, 'policy-rc.d removed');
    assert.deepEqual(
      readdirSync(r('var/lib/apt/lists')).filter((f) => f !== 'partial' && f !== 'lock'),
      [],
    );
    assert.equal(readdirSync(r('var/cache/apt/archives')).filter((f) => f.endsWith('.deb')).length, 0);
    const m = img.manifest;
    assert.equal(m.name, 'minimal');
    assert.equal(m.debianSuite, 'bookworm');
    assert.ok(m.packageCount > 100, `package count ${m.packageCount}`);
    assert.ok(m.sizeBytes > 100e6, `size ${m.sizeBytes}`);
    assert.ok(existsSync(join(img.dir, 'build.log')));
    assert.equal(findImage('minimal', { imagesDir: IMAGES_DIR })?.dir, img.dir);
    assert.ok(listImages({ imagesDir: IMAGES_DIR }).some((i) => i.dir === img.dir && i.current));
  });

  test('a second build is a cache hit', { timeout: BUILD_TIMEOUT }, async () => {
    const first = await buildImage('minimal', { imagesDir: IMAGES_DIR });
    const events: BuildProgress[] = [];
    const t0 = Date.now();
    const again = await buildImage('minimal', { imagesDir: IMAGES_DIR, onProgress: (e) => events.push(e) });
    assert.ok(Date.now() - t0 < 2000, `cache hit took ${Date.now() - t0}ms`);
    assert.equal(again.dir, first.dir);
    assert.equal(again.manifest.builtAt, first.manifest.builtAt);
    assert.deepEqual(
      events.map((e) => e.step),
      ['done'],
    );
    assert.match(events[0].message ?? '', /^cached /);
  });

  test('a failing build reports the step and leaves nothing behind', { timeout: BUILD_TIMEOUT }, async () => {
    const parent = await buildImage('minimal', { imagesDir: IMAGES_DIR });
    const recipes = tempDir('recipes');
    const images = tempDir('images');
    try {
      cpSync(join(REPO_ROOT, 'images/minimal.json'), join(recipes, 'minimal.json'));
      writeFileSync(
        join(recipes, 'broken.json'),
        JSON.stringify({
          name: 'broken',
          base: { from: 'minimal' },
          packages: ['drums-no-such-package-zzz'],
        }),
      );
      // Reuse the shared minimal build as the parent instead of bootstrapping another.
      symlinkSync(parent.dir, join(images, `minimal-${parent.hash.slice(0, 12)}`));
      const events: BuildProgress[] = [];
      await assert.rejects(
        buildImage('broken', { recipesDir: recipes, imagesDir: images, onProgress: (e) => events.push(e) }),
        (err: Error & { code?: string; step?: string }) => {
          assert.equal(err.code, 'image_build_failed');
          assert.match(err.step ?? '', /^install packages/);
          assert.match(err.message, /install packages/);
          assert.match(err.message, /Unable to locate package drums-no-such-package-zzz/);
          return true;
        },
      );
      assert.equal(events.at(-1)?.step, 'failed');
      const left = readdirSync(images);
      assert.deepEqual(
        left.filter((e) => e.startsWith('.tmp-') || e.startsWith('.lock-') || e.startsWith('broken-')),
        [],
      );
      assert.ok(lstatSync(join(images, `minimal-${parent.hash.slice(0, 12)}`)).isSymbolicLink());
      const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .filter((l) => l.includes(images));
      assert.deepEqual(mounts, []);
      assert.equal(findImage('broken', { recipesDir: recipes, imagesDir: images }), undefined);
    } finally {
      rmSync(recipes, { recursive: true, force: true });
      rmSync(images, { recursive: true, force: true });
    }
  });

  test('a build step holds no copy of host mounts (a session disk unmounted meanwhile is freed)', { timeout: BUILD_TIMEOUT }, async () => {
    // The host mount stands for a session's disk: a step whose mount namespace kept a copy of
    // it would pin its loop device and deleted image until the step ended.
    const parent = await buildImage('minimal', { imagesDir: IMAGES_DIR });
    const recipes = tempDir('recipes');
    const images = tempDir('images');
    const disk = tempDir('disk');
    const image = join(disk, 'disk.img');
    let build: Promise<unknown> | undefined;
    try {
      await makeSessionDisk(image, join(disk, 'mnt'), 32 * 1024 ** 2);
      cpSync(join(REPO_ROOT, 'images/minimal.json'), join(recipes, 'minimal.json'));
      writeFileSync(join(recipes, 'probe.json'), JSON.stringify({ name: 'probe', base: { from: 'minimal' }, run: ['sleep 20'] }));
      symlinkSync(parent.dir, join(images, `minimal-${parent.hash.slice(0, 12)}`));
      let inStep: () => void = () => {};
      const stepStarted = new Promise<void>((res) => (inStep = res));
      let finished = false;
      build = buildImage('probe', { recipesDir: recipes, imagesDir: images, onProgress: (e) => /^run/.test(e.step) && inStep() }).finally(
        () => (finished = true),
      );
      await stepStarted;
      await new Promise((r) => setTimeout(r, 2000));
      await unmountSessionDisk(image, join(disk, 'mnt'));
      for (let i = 0; i < 30 && loopsBackedBy(disk).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(finished, false, 'the step ended before the check');
      assert.deepEqual(loopsBackedBy(disk), [], 'the running step pins the unmounted disk');
      const img = (await build) as Awaited<ReturnType<typeof buildImage>>;
      assert.equal(existsSync(join(img.rootfs, '.drums-host-root')), false);
    } finally {
      await build?.catch(() => {});
      await unmountSessionDisk(image, join(disk, 'mnt'));
      rmSync(disk, { recursive: true, force: true });
      rmSync(recipes, { recursive: true, force: true });
      rmSync(images, { recursive: true, force: true });
    }
  });

  test('an aborted build stops its running step and leaves nothing behind', { timeout: BUILD_TIMEOUT }, async () => {
    const parent = await buildImage('minimal', { imagesDir: IMAGES_DIR });
    const recipes = tempDir('recipes');
    const images = tempDir('images');
    try {
      cpSync(join(REPO_ROOT, 'images/minimal.json'), join(recipes, 'minimal.json'));
      // A step that would run for 10 minutes, and leaves a marker when it ends normally.
      writeFileSync(join(recipes, 'slow.json'), JSON.stringify({ name: 'slow', base: { from: 'minimal' }, run: ['sleep 600; touch /slow-finished'] }));
      symlinkSync(parent.dir, join(images, `minimal-${parent.hash.slice(0, 12)}`));
      const ac = new AbortController();
      const t0 = performance.now();
      let abortedAt = 0;
      const onProgress = (e: BuildProgress) => {
        // Abort once the slow step has had a moment to start.
        if (/^run/.test(e.step) && !abortedAt)
          setTimeout(() => {
            abortedAt = performance.now();
            ac.abort();
          }, 500);
      };
      await assert.rejects(
        buildImage('slow', { recipesDir: recipes, imagesDir: images, onProgress, signal: ac.signal }),
        (err: Error & { code?: string; step?: string }) => {
          assert.equal(err.code, 'image_build_failed');
          assert.match(err.step ?? '', /^run/);
          assert.match(err.message, /cancelled/);
          return true;
        },
      );
      assert.ok(abortedAt > 0, 'the run step never started');
      assert.ok(performance.now() - abortedAt < 30_000, `the build took ${Math.round(performance.now() - abortedAt)} ms to stop after the abort`);
      assert.ok(performance.now() - t0 < 300_000);
      assert.deepEqual(
        readdirSync(images).filter((e) => e.startsWith('.tmp-') || e.startsWith('.lock-') || e.startsWith('slow-')),
        [],
      );
      const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .filter((l) => l.includes(images));
      assert.deepEqual(mounts, []);
      // No sleep of that step is left running on the host.
      const sleepers = readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('sleep 600; touch /slow-finished');
          } catch {
            return false;
          }
        });
      assert.deepEqual(sleepers, []);
    } finally {
      rmSync(recipes, { recursive: true, force: true });
      rmSync(images, { recursive: true, force: true });
    }
  });
});
