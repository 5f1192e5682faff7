import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, startDaemon, type TestDaemon } from '../helpers.ts';

// OSWorld's guest contract served per session by the daemon, driven by desktop_env's
// real PythonController and SetupController, plus the error shapes and isolation.
const PY = join(ROOT, '.runtime', 'venv', 'bin', 'python');

interface Osw {
  host: string;
  serverPort: number;
  chromiumPort: number;
  vncPort: number;
  vlcPort: number;
  address: string;
}
type S = { id: string; state: string; screen: { width: number; height: number }; osworld?: Osw; brokenReason?: string };

describe('osworld guest contract (osworld image)', () => {
  let d: TestDaemon;
  let s: S;
  let base: string;
  before(async () => {
    d = await startDaemon();
    s = (await d.client.createSession({ image: 'osworld' } as never)) as unknown as S;
    base = `http://127.0.0.1:${s.osworld!.serverPort}`;
  });
  after(async () => {
    for (const x of await d.client.listSessions()) await d.client.destroySession(x.id).catch(() => {});
    await d.finish();
  });

  const post = (path: string, body: unknown) =>
    fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('reports a docker-style endpoint and a 1920x1080 default screen', () => {
    assert.deepEqual(s.screen, { width: 1920, height: 1080, depth: 24 });
    const o = s.osworld!;
    assert.equal(o.address, `127.0.0.1:${o.serverPort}:${o.chromiumPort}:0:${o.vlcPort}`);
  });

  it('serves every route to the real PythonController and SetupController', () => {
    const r = spawnSync(PY, [join(ROOT, 'tests/fixtures/osworld/contract_client.py'), s.osworld!.address], { encoding: 'utf8', timeout: 240_000 });
    const line = r.stdout.split('\n').find((l) => l.startsWith('REPORT '));
    assert.ok(line, `no report; stderr: ${r.stderr.slice(-3000)}`);
    const rep = JSON.parse(line.slice(7));
    assert.equal(rep.screenshot_png, true);
    assert.equal(rep.execute.status, 'success');
    assert.match(rep.execute.output, /Size\(width=1920, height=1080\)/);
    assert.equal(rep.platform, 'Linux');
    assert.deepEqual(rep.screen_size, { width: 1920, height: 1080 });
    assert.equal(rep.desktop_path, '/home/user/Desktop');
    assert.equal(rep.setup_ok, true);
    assert.equal(rep.file, 'hello from the host\n');
    assert.equal(rep.size_file, '1920x1080\n');
    assert.equal(rep.rootdir_owner, '0', 'a set-up step with sudo (/setup/execute) runs as root-in-session');
    assert.equal(rep.tree.type, 'directory');
    assert.equal(rep.tree.name, 'Desktop');
    const names = rep.tree.children.map((c: { name: string }) => c.name).sort();
    assert.deepEqual(names, ['rootdir', 'sub']);
    assert.equal(typeof rep.window_size.width, 'number');
    assert.ok('terminal' in rep);
    assert.ok(rep.a11y_prefix.startsWith('<desktop-frame xmlns:st="https://accessi'), rep.a11y_prefix);
    assert.equal(rep.run_python.status, 'success');
    assert.equal(rep.run_python.output, 'py-out\n');
    assert.equal(rep.run_python.return_code, 0);
    assert.deepEqual(rep.run_bash, { status: 'error', output: 'bash-out\nbash-err\n', error: '', returncode: 3 });
    assert.ok(rep.recording_bytes > 1000, `recording ${rep.recording_bytes} bytes`);
    assert.equal(rep.wallpaper_setup_ok, true);
    assert.equal(rep.wallpaper_same, true, 'the wallpaper read back is the file set');
    assert.equal(rep.verify_ok, 'passed');
    assert.equal(rep.verify_fail, 'verification_failed');
    assert.deepEqual(rep.download, [200, 'File downloaded successfully']);
    assert.equal(rep.downloaded, true);
    assert.equal(rep.download_missing, 500);
  });

  it("answers bad input with the contract's own error shapes", async () => {
    assert.equal((await fetch(base + '/')).status, 404);
    assert.equal((await fetch(base + '/execute')).status, 405);
    let r = await post('/execute', { command: 42 });
    assert.equal(r.status, 500);
    assert.equal(((await r.json()) as { status: string }).status, 'error');
    r = await post('/execute', { command: ['no-such-program-xyz'] });
    assert.equal(r.status, 500);
    assert.match(((await r.json()) as { message: string }).message, /No such file or directory/);
    r = await post('/execute', { command: 'exit 5', shell: true });
    assert.deepEqual(await r.json(), { status: 'success', output: '', error: '', returncode: 5 });
    r = await post('/execute', { command: ['sleep', '30'], timeout: 1 });
    assert.equal(r.status, 500);
    assert.match(((await r.json()) as { message: string }).message, /timed out after 1 seconds/);
    r = await fetch(base + '/execute', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{not json' });
    assert.equal(r.status, 400);
    r = await fetch(base + '/file', { method: 'POST', body: new URLSearchParams({}) });
    assert.deepEqual([r.status, await r.json()], [400, { error: 'file_path is required' }]);
    r = await fetch(base + '/file', { method: 'POST', body: new URLSearchParams({ file_path: '/nope/missing' }) });
    assert.deepEqual([r.status, await r.json()], [404, { error: 'File not found' }]);
    const fd = new FormData();
    fd.set('file_path', '/etc/drums-should-not-write');
    fd.set('file_data', new Blob(['x']), 'x');
    r = await fetch(base + '/setup/upload', { method: 'POST', body: fd });
    // Upstream answers 500; Drums answers a refused path with 403 (docs/osworld.md), same body.
    assert.equal(r.status, 403);
    assert.match(((await r.json()) as { error: string }).error, /^Failed to upload file: .*Permission denied/);
    r = await fetch(base + '/setup/upload', { method: 'POST', body: new FormData() });
    assert.deepEqual([r.status, await r.json()], [400, { error: 'file_path and file_data are required' }]);
    r = await post('/list_directory', {});
    assert.deepEqual([r.status, await r.json()], [400, { error: "Missing 'path' parameter" }]);
    r = await post('/list_directory', { path: '/etc/hostname' });
    assert.deepEqual([r.status, await r.json()], [400, { error: 'The provided path is not a directory' }]);
    r = await post('/setup/open_file', { path: '/home/user/none.txt' });
    assert.equal(r.status, 404);
    r = await post('/setup/activate_window', {});
    assert.deepEqual([r.status, await r.text()], [400, 'window_name required']);
    r = await post('/run_python', {});
    assert.deepEqual([r.status, await r.json()], [400, { status: 'error', message: 'Code not supplied!' }]);
    r = await post('/run_bash_script', { script: 'true', working_dir: '/no/such/dir' });
    assert.deepEqual(
      [r.status, await r.json()],
      [400, { status: 'error', output: 'Working directory does not exist: /no/such/dir', error: '', returncode: -1 }],
    );
    r = await fetch(base + '/window_size', { method: 'POST', body: new URLSearchParams({}) });
    assert.deepEqual([r.status, await r.json()], [400, { error: 'app_class_name is required' }]);
    r = await post('/end_recording', {});
    assert.equal(r.status, 400);
    const pos = await (await fetch(base + '/cursor_position')).json();
    assert.ok(Array.isArray(pos) && pos.length === 2);
    assert.equal(await (await fetch(base + '/platform')).text(), 'Linux');
    // The daemon is still fine.
    assert.equal((await d.client.getSession(s.id)).state, 'ready');
  });

  it('open_file is bounded and stops when the client goes away', async () => {
    // The premise: xdg-open succeeds but no window ever appears. So the file's type gets a handler
    // of the test's own that opens nothing (the user's mimeapps.list wins over the image's), instead
    // of depending on which handlers or browser fallbacks the image happens to have.
    const handler = '[Desktop Entry]\\nType=Application\\nName=No window\\nExec=true %%f\\nMimeType=text/plain;\\n';
    const setup = await post('/execute', {
      command:
        'mkdir -p ~/.local/share/applications ~/.config' +
        ` && printf '${handler}' > ~/.local/share/applications/drums-no-window.desktop` +
        ' && cp -f ~/.config/mimeapps.list ~/.config/mimeapps.list.drums-test 2>/dev/null; xdg-mime default drums-no-window.desktop text/plain' +
        ' && echo text > ~/never-a-window.txt && xdg-mime query filetype ~/never-a-window.txt && xdg-mime query default text/plain',
      shell: true,
    });
    assert.equal(((await setup.json()) as { output: string }).output, 'text/plain\ndrums-no-window.desktop\n');
    try {
      const ac = new AbortController();
      const t0 = Date.now();
      const p = fetch(base + '/setup/open_file', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ path: '~/never-a-window.txt', timeout: 60 }),
        signal: ac.signal,
      });
      void p.catch(() => {});
      const r = await fetch(base + '/setup/open_file', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ path: '~/never-a-window.txt', timeout: 2 }),
      });
      assert.equal(r.status, 500);
      assert.match(await r.text(), /within 2 seconds/);
      ac.abort();
      assert.ok(Date.now() - t0 < 20_000);
    } finally {
      await post('/execute', {
        command:
          'rm -f ~/.local/share/applications/drums-no-window.desktop ~/never-a-window.txt ~/.config/mimeapps.list' +
          ' && { mv -f ~/.config/mimeapps.list.drums-test ~/.config/mimeapps.list 2>/dev/null || true; }',
        shell: true,
      });
    }
  });

  it('forwards the DevTools port into the session (socat 9222 -> 1337, as tasks do)', async () => {
    const launch = (command: string[]) => post('/setup/launch', { command });
    // Note: an earlier test's xdg-open may have started a browser on the default profile, and a
    // second google-chrome on that profile would only hand its URL over; use a profile of its own.
    assert.equal((await launch(['google-chrome', '--remote-debugging-port=1337', '--user-data-dir=/tmp/drums-cdp-profile', 'about:blank'])).status, 200);
    assert.equal((await launch(['socat', 'tcp-listen:9222,fork', 'tcp:localhost:1337'])).status, 200);
    let version: { Browser?: string } = {};
    for (let i = 0; i < 120 && !version.Browser; i++) {
      try {
        version = (await (await fetch(`http://127.0.0.1:${s.osworld!.chromiumPort}/json/version`)).json()) as { Browser?: string };
      } catch {
        /* not up yet */
      }
      if (!version.Browser) await new Promise((r) => setTimeout(r, 500));
    }
    assert.match(version.Browser ?? '', /Chrome/);
  });

  it("refuses local users other than the daemon's (peer uid check)", () => {
    const r = spawnSync(
      'setpriv',
      [
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        PY,
        '-c',
        `import urllib.request,sys\ntry:\n  urllib.request.urlopen('${base}/platform', timeout=5); print('ALLOWED')\nexcept Exception as e: print('REFUSED', e)`,
      ],
      { encoding: 'utf8' },
    );
    assert.match(r.stdout, /^REFUSED/, r.stderr);
  });

  it('two sessions do not interfere; pkill Xvfb breaks only its own session until reset', async () => {
    const t = (await d.client.createSession({ image: 'osworld', screen: '1024x768' } as never)) as unknown as S;
    const tb = `http://127.0.0.1:${t.osworld!.serverPort}`;
    assert.notEqual(t.osworld!.serverPort, s.osworld!.serverPort);
    await post('/execute', { command: 'echo one > ~/who', shell: true });
    const other = (await (
      await fetch(tb + '/execute', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ command: 'cat ~/who || echo none', shell: true }),
      })
    ).json()) as { output: string };
    assert.equal(other.output, 'none\n');
    const size = await (await fetch(tb + '/screen_size', { method: 'POST' })).json();
    assert.deepEqual(size, { width: 1024, height: 768 });
    await fetch(tb + '/execute', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'pkill Xvfb', shell: true }),
    });
    let state = '';
    for (let i = 0; i < 40 && state !== 'broken'; i++) {
      state = (await d.client.getSession(t.id)).state;
      if (state !== 'broken') await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(state, 'broken');
    assert.equal((await fetch(tb + '/screenshot')).status, 503);
    assert.equal((await fetch(base + '/screenshot')).status, 200);
    assert.equal((await d.client.getSession(s.id)).state, 'ready');
    const rs = (await d.client.resetSession(t.id)) as unknown as S;
    assert.equal(rs.state, 'ready');
    assert.equal(rs.osworld!.serverPort, t.osworld!.serverPort, 'reset keeps the ports');
    assert.equal((await fetch(tb + '/screenshot')).status, 200);
    await d.client.destroySession(t.id);
    await assert.rejects(fetch(tb + '/platform'));
  });
});

// The guest server's body limit (DRUMS_OSWORLD_MAX_BODY): a request over it is 413 with the contract's JSON error,
// written nowhere; one under it goes through; the session and the daemon carry on.
describe('osworld guest body limit', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startDaemon({ DRUMS_OSWORLD_MAX_BODY: String(1024 * 1024) });
  });
  after(async () => {
    await d.finish();
  });

  it('a body over DRUMS_OSWORLD_MAX_BODY is 413 and nothing is written; one under it is stored', async () => {
    const s = (await d.client.createSession({ image: 'minimal', labels: { 'drums.osworld': '1' } } as never)) as unknown as S;
    try {
      const base = `http://127.0.0.1:${s.osworld!.serverPort}`;
      const upload = (bytes: number, path: string) => {
        const form = new FormData();
        form.set('file_path', path);
        form.set('file_data', new Blob([Buffer.alloc(bytes, 0x61)]), 'f');
        return fetch(`${base}/setup/upload`, { method: 'POST', body: form });
      };
      const big = await upload(2 * 1024 * 1024, '/home/user/big');
      assert.equal(big.status, 413);
      assert.match(((await big.json()) as { message: string }).message, /over 1048576 bytes/);
      const ls = await d.client.exec(s.id, { shell: 'ls /home/user/big 2>&1; true' });
      assert.match(ls.stdout, /No such file/);
      const small = await upload(512 * 1024, '/home/user/small');
      assert.equal(small.status, 200, await small.text());
      assert.equal((await d.client.exec(s.id, { shell: 'stat -c %s /home/user/small' })).stdout.trim(), String(512 * 1024));
    } finally {
      await d.client.destroySession(s.id);
    }
  });
});
