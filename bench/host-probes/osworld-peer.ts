/**
 * Host probes of a session's OSWorld guest server (docs/osworld.md "Who can connect"): who may reach it on
 * loopback, and whether a web page may drive it.
 *
 * - `host.osworld.peer-timewait-twin` (host uid 65534): leave a TIME_WAIT entry 127.0.0.1:C → the server
 *   (the kernel lists it with uid 0), then connect from 127.0.0.2:C. A check that matched ports alone in
 *   /proc/net/tcp took the entry for the connection and served uid 65534 as root.
 * - `host.osworld.peer-plain` (host uid 65534): a plain connection.
 * - `host.osworld.peer-loopback-alias` (host root): a connection from 127.0.0.2; only 127.0.0.1 is served.
 * - `host.osworld.host-header` / `host.osworld.origin-header` (host root): a request as a browser sends it
 *   after DNS rebinding (a foreign Host) or cross-origin (a foreign Origin) must get 403.
 *
 * - `host.osworld.devtools-*`: the peer attacks again on the DevTools forwarder (raw TCP into the session).
 *
 * A refusal by peer is a connection closed without an answer. Controls first: root's own request (Host
 * 127.0.0.1:PORT and localhost:PORT, as OSWorld's desktop_env sends them) must be answered 200; if not, every
 * probe is invalid. The attacker is a small Python script (/usr/bin/python3), run as the attacking uid.
 */
import { execFile } from 'node:child_process';
import type { Probe } from '../probe.ts';
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';

/** The unprivileged host uid the attacks run as. */
export const NOBODY = 65534;

/** One raw HTTP GET of /platform per question; prints one JSON line of answers. */
const CLIENT = String.raw`
import json, socket, sys, time
port = int(sys.argv[1]); asks = json.loads(sys.argv[2])
def get(src=None, host=None, origin=None):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(5)
    try:
        if src: s.bind(tuple(src))
        s.connect(('127.0.0.1', port))
        req = 'GET /platform HTTP/1.1\r\nHost: %s\r\n' % (host or '127.0.0.1:%d' % port)
        if origin: req += 'Origin: %s\r\n' % origin
        s.sendall((req + 'Connection: close\r\n\r\n').encode())
        data = b''
        while True:
            d = s.recv(65536)
            if not d: break
            data += d
    except OSError as e:
        return {'status': None, 'error': repr(e)}
    finally:
        s.close()
    if not data: return {'status': None, 'error': 'closed without an answer'}
    head, _, body = data.partition(b'\r\n\r\n')
    return {'status': int(head.split()[1]), 'body': body[:300].decode(errors='replace')}
def listed(c, state):
    want = ('0100007F:%04X' % c, '0100007F:%04X' % port, state)
    for line in open('/proc/net/tcp').read().splitlines()[1:]:
        f = line.split()
        if (f[1], f[2], f[3]) == want: return True
    return False
def twin():
    # The client closes first, so its end (127.0.0.1:C) is left in TIME_WAIT, listed with uid 0.
    for _ in range(10):
        a = socket.socket(); a.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        a.bind(('127.0.0.1', 0)); a.connect(('127.0.0.1', port)); c = a.getsockname()[1]; a.close()
        for _ in range(50):
            if listed(c, '06'):
                r = get(src=('127.0.0.2', c)); r['timewait'] = True; r['port'] = c
                return r
            time.sleep(0.02)
    return {'status': None, 'timewait': False}
out = {}
for name, ask in asks.items():
    out[name] = twin() if ask.get('twin') else get(ask.get('src'), ask.get('host'), ask.get('origin'))
print(json.dumps(out))
`;

interface Answer {
  status: number | null;
  body?: string;
  error?: string;
  timewait?: boolean;
}

/** Runs the client as `uid` (0: root) against 127.0.0.1:`port`; one answer per question. */
export function askAs(uid: number, port: number, asks: Record<string, { src?: [string, number]; host?: string; origin?: string; twin?: boolean }>) {
  return new Promise<Record<string, Answer>>((resolve, reject) => {
    execFile(
      '/usr/bin/python3',
      ['-c', CLIENT, String(port), JSON.stringify(asks)],
      { uid, gid: uid, cwd: '/', timeout: 60_000, env: { PATH: '/usr/bin:/bin' } },
      (e, stdout, stderr) => {
        if (e) return reject(new Error(`the client as uid ${uid} failed: ${e.message} ${stderr.slice(-500)}`));
        try {
          resolve(JSON.parse(stdout) as Record<string, Answer>);
        } catch {
          reject(new Error(`the client as uid ${uid} printed no answers: ${stdout.slice(-300)} ${stderr.slice(-300)}`));
        }
      },
    );
  });
}

const show = (a: Answer | undefined) =>
  a ? (a.status === null ? `no answer (${a.error ?? 'closed'})` : `${a.status} ${(a.body ?? '').replace(/\s+/g, ' ').trim().slice(0, 80)}`) : 'missing';

/** The probes against a session's guest server on `port` (exported for the tests, which run it on a session of their own). */
export async function probeGuestPort(arm: string, port: number): Promise<Probe[]> {
  const probe = (id: string, as: string, result: Probe['result'], detail: string): Probe => ({ arm, id, category: 'host', as, result, detail });
  const root = await askAs(0, port, {
    control: {},
    controlLocalhost: { host: `localhost:${port}` },
    alias: { src: ['127.0.0.2', 0] },
    host: { host: `rebind.drums.invalid:${port}` },
    origin: { origin: 'http://rebind.drums.invalid' },
  });
  const nobody = await askAs(NOBODY, port, { plain: {}, twin: { twin: true } });
  const controlsOk = root.control?.status === 200 && root.controlLocalhost?.status === 200;
  const controls = `root's own requests: ${show(root.control)}; Host localhost: ${show(root.controlLocalhost)}`;
  const out: Probe[] = [];
  const refused = (id: string, as: string, a: Answer | undefined, what: string) => {
    if (!controlsOk) out.push(probe(id, as, 'invalid', `the control failed (${controls})`));
    else out.push(probe(id, as, a?.status === null ? 'pass' : 'fail', `${what}: ${show(a)}`));
  };
  const twin = nobody.twin;
  if (controlsOk && !twin?.timewait)
    out.push(probe('host.osworld.peer-timewait-twin', 'host-uid', 'invalid', 'no TIME_WAIT entry 127.0.0.1:C → the server could be made'));
  else refused('host.osworld.peer-timewait-twin', 'host-uid', twin, `uid ${NOBODY} from 127.0.0.2:C beside a TIME_WAIT 127.0.0.1:C (uid 0)`);
  refused('host.osworld.peer-plain', 'host-uid', nobody.plain, `uid ${NOBODY}, a plain connection`);
  refused('host.osworld.peer-loopback-alias', 'host', root.alias, 'root from 127.0.0.2');
  const forbidden = (id: string, a: Answer | undefined, code: string, what: string) => {
    if (!controlsOk) out.push(probe(id, 'host', 'invalid', `the control failed (${controls})`));
    else out.push(probe(id, 'host', a?.status === 403 && (a.body ?? '').includes(code) ? 'pass' : 'fail', `${what}: ${show(a)}`));
  };
  forbidden('host.osworld.host-header', root.host, 'forbidden_host', 'Host rebind.drums.invalid (DNS rebinding)');
  forbidden('host.osworld.origin-header', root.origin, 'forbidden_origin', 'Origin http://rebind.drums.invalid (a web page)');
  return out;
}

/**
 * The same peer attacks on the DevTools forwarder (`chromiumPort`, into the session's 9222), which carries raw TCP:
 * a server the guest server starts in the session on 9222 answers anything, so any answer means the connection
 * was let through. Control: root's own connection is answered.
 */
export async function probeForwarder(arm: string, guestPort: number, forwardPort: number): Promise<Probe[]> {
  const probe = (id: string, as: string, result: Probe['result'], detail: string): Probe => ({ arm, id, category: 'host', as, result, detail });
  const ids: [string, string][] = [
    ['host.osworld.devtools-timewait-twin', 'host-uid'],
    ['host.osworld.devtools-plain', 'host-uid'],
    ['host.osworld.devtools-loopback-alias', 'host'],
  ];
  const launched = await fetch(`http://127.0.0.1:${guestPort}/setup/launch`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ command: ['python3', '-m', 'http.server', '9222'] }),
  }).catch((e: Error) => e);
  let control: Answer | undefined;
  for (let i = 0; i < 40 && control?.status == null; i++) {
    if (i) await new Promise((r) => setTimeout(r, 250));
    control = (await askAs(0, forwardPort, { control: {} })).control;
  }
  if (control?.status == null) {
    const why = launched instanceof Error ? launched.message : `launch ${launched.status}`;
    return ids.map(([id, as]) => probe(id, as, 'invalid', `the control failed: no server answered through the forwarder (${why}; ${show(control)})`));
  }
  const root = await askAs(0, forwardPort, { alias: { src: ['127.0.0.2', 0] } });
  const nobody = await askAs(NOBODY, forwardPort, { plain: {}, twin: { twin: true } });
  const seen: (Answer | undefined)[] = [nobody.twin, nobody.plain, root.alias];
  const what = [`uid ${NOBODY} from 127.0.0.2:C beside a TIME_WAIT 127.0.0.1:C (uid 0)`, `uid ${NOBODY}, a plain connection`, 'root from 127.0.0.2'];
  return ids.map(([id, as], i) => {
    const a = seen[i];
    if (i === 0 && !a?.timewait) return probe(id, as, 'invalid', 'no TIME_WAIT entry 127.0.0.1:C → the forwarder could be made');
    return probe(id, as, a?.status === null ? 'pass' : 'fail', `${what[i]}: ${show(a)} (root's own: ${show(control)})`);
  });
}

/**
 * The HostProbe (index.ts; its context spelled out here, since importing index.ts would be a cycle): makes an
 * OSWorld-enabled session on the audited daemon, probes its guest server, removes it.
 */
export async function osworldPeerProbe({ d, arm, progress }: { d: PrivateDaemon; arm: string; progress: (s: string) => void }): Promise<Probe[]> {
  progress('osworld peer: a session with an OSWorld endpoint');
  const s = (await d.client.createSession({ image: 'default', labels: { 'drums.osworld': '1' } } as never)) as unknown as {
    id: string;
    osworld?: { serverPort: number; chromiumPort: number };
  };
  try {
    if (!s.osworld?.serverPort) {
      return [
        { arm, id: 'host.osworld.peer-timewait-twin', category: 'host', as: 'host-uid', result: 'invalid', detail: 'the session has no OSWorld endpoint' },
      ];
    }
    const out = await probeGuestPort(arm, s.osworld.serverPort);
    progress('osworld peer: the DevTools forwarder');
    return [...out, ...(await probeForwarder(arm, s.osworld.serverPort, s.osworld.chromiumPort))];
  } finally {
    await d.client.destroySession(s.id).catch(() => {});
  }
}
