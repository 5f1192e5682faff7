import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, startDaemon, type TestDaemon } from '../helpers.ts';

// Every way an OSWorld task or an agent starts the browser in an osworld session opens a browser
// window, and it is one browser: Debian's Chromium run as `chrome` on Chrome's profile path.
// Each command starts from no browser at all (`pkill chrome` first, as tasks do), so a launch
// cannot pass by handing its URL to a browser an earlier one started.

const PY = join(ROOT, '.runtime', 'venv', 'bin', 'python');
interface Osw {
  serverPort: number;
  address: string;
}
type S = { id: string; osworld?: Osw; userns: { hostUidBase: number } | null };

describe('osworld image: starting the browser', () => {
  let d: TestDaemon;
  let s: S;
  let base: string;
  before(async () => {
    d = await startDaemon();
    s = (await d.client.createSession({ image: 'osworld', screen: '1280x800' } as never)) as unknown as S;
    base = `http://127.0.0.1:${s.osworld!.serverPort}`;
    // A page served inside the session (no network), for the URL forms.
    const html = (t: string) => `<html><head><title>${t}</title></head><body>${t}</body></html>`;
    const pages = ['xdg-url', 'xdg-file', 'x-www-browser', 'chromium', 'google-chrome', 'google-chrome-stable', 'desktop-file']
      .map((n) => `printf '%s' '${html(`drums-probe-${n}`)}' > ~/www/${n}.html`)
      .join(' && ');
    assert.match(await sh(`mkdir -p ~/www && ${pages} && echo ok`), /^ok/);
    const launched = await post('/setup/launch', { command: 'python3 -m http.server 8765 --bind 127.0.0.1 --directory /home/user/www', shell: true });
    assert.equal(launched.status, 200);
    await until(async () => /200/.test(await sh('curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8765/chromium.html')), 'the in-session web server');
  });
  after(async () => {
    for (const x of await d.client.listSessions()) await d.client.destroySession(x.id).catch(() => {});
    await d.finish();
  });

  const post = (path: string, body: unknown) =>
    fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const sh = async (command: string): Promise<string> => ((await (await post('/execute', { command, shell: true })).json()) as { output: string }).output;
  async function until(probe: () => Promise<boolean>, what: string, ms = 60_000): Promise<void> {
    const t0 = Date.now();
    while (!(await probe())) {
      if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }

  const cases: Array<[string, string]> = [
    ['xdg-open URL', 'xdg-open http://127.0.0.1:8765/xdg-url.html'],
    ['xdg-open FILE', 'xdg-open /home/user/www/xdg-file.html'],
    ['x-www-browser', 'x-www-browser http://127.0.0.1:8765/x-www-browser.html'],
    ['chromium', 'chromium http://127.0.0.1:8765/chromium.html'],
    ['google-chrome', 'google-chrome http://127.0.0.1:8765/google-chrome.html'],
    ['google-chrome-stable', '/usr/bin/google-chrome-stable http://127.0.0.1:8765/google-chrome-stable.html'],
    ['desktop-file', 'gio launch /usr/share/applications/google-chrome.desktop http://127.0.0.1:8765/desktop-file.html'],
  ];
  for (const [name, command] of cases) {
    it(`${name} opens a browser window, run as chrome on Chrome's profile`, async () => {
      await sh('pkill chrome; true');
      await until(async () => (await sh('pgrep chrome || echo none')).trim() === 'none', 'no browser left');
      assert.equal((await post('/setup/launch', { command, shell: true })).status, 200);
      const title = `drums-probe-${name === 'xdg-open URL' ? 'xdg-url' : name === 'xdg-open FILE' ? 'xdg-file' : name}`;
      await until(async () => (await sh('wmctrl -l')).includes(title), `a window titled ${title}`);
      // The browser is the one binary, named chrome (so `pkill chrome` works), and no process is named chromium.
      const procs = await sh('ps -eo comm= | sort | uniq -c');
      assert.match(procs, /\d+ chrome\n/);
      assert.doesNotMatch(procs, /chromium/);
      const args = await sh('for p in $(pgrep -x chrome); do tr "\\0" " " < /proc/$p/cmdline; echo; done');
      assert.match(args, /--user-data-dir=\/home\/user\/\.config\/google-chrome/);
      // Chromium's own sandbox where the session has a user namespace of its own (DRUMS_USERNS=1 or spec userns):
      // the renderers then sit in a nested user namespace; --no-sandbox without one.
      if (s.userns) {
        assert.doesNotMatch(args, /--no-sandbox/);
        const nested = await sh(
          'me=$(readlink /proc/self/ns/user); for p in $(pgrep -x chrome); do [ "$(readlink /proc/$p/ns/user)" != "$me" ] && echo nested; done | head -1',
        );
        assert.equal(nested.trim(), 'nested', 'a sandboxed child in a nested user namespace');
      } else assert.match(args, /--no-sandbox/);
      assert.match(await sh('ls ~/.config/google-chrome'), /Default/);
    });
  }

  // desktop_env's own getters, unmodified, against the running browser (getters_client.py).
  const getters = (calls: unknown[]): Record<string, unknown> => {
    const r = spawnSync(PY, [join(ROOT, 'tests/fixtures/osworld/getters_client.py'), s.osworld!.address, JSON.stringify(calls)], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    const line = r.stdout.split('\n').find((l) => l.startsWith('GETTERS '));
    assert.ok(line, `no getters output; stderr: ${r.stderr.slice(-2000)}`);
    return JSON.parse(line.slice(8)) as Record<string, unknown>;
  };

  it('passes as Google Chrome: AT-SPI name, window activation, pkill chrome, desktop file, profile paths', async () => {
    await sh('pkill chrome; true');
    await until(async () => (await sh('pgrep chrome || echo none')).trim() === 'none', 'no browser left');
    assert.equal(
      (await post('/setup/launch', { command: ['google-chrome', '--remote-debugging-port=1337', 'http://127.0.0.1:8765/google-chrome.html'] })).status,
      200,
    );
    await until(async () => (await sh('wmctrl -l')).includes('drums-probe-google-chrome'), 'the browser window');
    // The accessibility tree names the browser as tasks select it, and desktop_env's getter finds its address bar.
    await until(
      async () => /<application name="Google Chrome"/.test(((await (await fetch(base + '/accessibility')).json()) as { AT: string }).AT),
      'Google Chrome on AT-SPI',
    );
    const g = getters([['active_url_from_accessTree', { goto_prefix: 'http://' }]]);
    assert.equal(g.active_url_from_accessTree, 'http://127.0.0.1:8765/google-chrome.html');
    // activate_window "Google Chrome" (28 task steps) raises the browser over another window.
    assert.equal((await post('/setup/launch', { command: ['mousepad'] })).status, 200);
    await until(async () => /Mousepad/i.test(await sh('xdotool getactivewindow getwindowname')), 'mousepad in front');
    assert.equal((await post('/setup/activate_window', { window_name: 'Google Chrome' })).status, 200);
    await until(async () => /drums-probe-google-chrome - Chromium/.test(await sh('xdotool getactivewindow getwindowname')), 'the browser in front');
    // The profile is at Chrome's path; tasks' `pkill chrome` flushes and ends every browser process.
    assert.match(await sh('ls ~/.config/google-chrome/Default'), /^Preferences$/m);
    assert.match(await sh('pgrep -c chrome'), /^[1-9]/);
    await sh('pkill chrome');
    await until(async () => (await sh('pgrep chrome || echo none')).trim() === 'none', 'pkill chrome to end the browser');
    await sh(
      `jq '.default_search_provider_data.template_url_data.short_name = "DrumsSearch"' ~/.config/google-chrome/Default/Preferences > /tmp/p && mv /tmp/p ~/.config/google-chrome/Default/Preferences`,
    );
    assert.equal(getters([['default_search_engine', {}]]).default_search_engine, 'DrumsSearch');
    assert.equal((await sh('grep ^Exec= /usr/share/applications/google-chrome.desktop')).trim(), 'Exec=/usr/bin/google-chrome-stable %U');
    assert.equal(
      (await sh('readlink -f /usr/bin/google-chrome-stable /usr/bin/google-chrome /usr/bin/x-www-browser')).trim().split('\n').join(' '),
      '/opt/google/chrome/google-chrome /opt/google/chrome/google-chrome /opt/google/chrome/google-chrome',
    );
    // Not faked: the guest reports its real architecture (getters switch to snap paths on ARM).
    assert.equal((await sh('uname -m')).trim(), spawnSync('uname', ['-m'], { encoding: 'utf8' }).stdout.trim());
  });
});
