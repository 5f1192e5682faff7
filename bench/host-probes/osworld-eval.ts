/**
 * An OSWorld agent against the harness host, through the guest contract's `sudo` rule (issue 27,
 * finding 5). An agent's action reaches the session as desktop_env's PythonController posts it for
 * every `env.step`: `/execute` with `["python", "-c", "<pyautogui prefix>; <action>"]`. When any
 * command whose text mentioned `sudo` ran as root-in-session, `# sudo` at the end of an action made
 * the agent root in its session: it could replace `gsettings` (or anything an evaluator getter runs)
 * with a program whose output the harness then parses; `check_gnome_favorite_apps` `eval`s it.
 * The fence: only the harness's set-up routes (`/setup/...`) elevate, and only a command that really
 * runs sudo. A control shows that a task's own set-up step with `echo password | sudo -S` still runs
 * as root, so a pass is the rule, not a broken sudo path.
 */
import type { PrivateDaemon } from '../../src/client/private-daemon.ts';
import type { Probe } from '../probe.ts';

/** desktop_env's PythonController.pkgs_prefix (what every pyautogui action is wrapped in). */
const PKGS_PREFIX = 'import pyautogui; import time; pyautogui.FAILSAFE = False; ';

interface OsworldEndpoint {
  serverPort: number;
}

async function post(port: number, path: string, body: unknown): Promise<{ status: number; output: string }> {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  const j = (await r.json().catch(() => ({}))) as { output?: unknown };
  return { status: r.status, output: typeof j.output === 'string' ? j.output.trim() : '' };
}

/** A HostProbe (index.ts; its context spelled out here, so the registry's import of this file makes no cycle). */
export async function osworldEvalProbes({ d, arm, progress }: { d: PrivateDaemon; arm: string; progress: (s: string) => void }): Promise<Probe[]> {
  // A control that does not hold makes the probes meaningless ('invalid'), not failed.
  const probe = (id: string, category: string, held: boolean, detail: string): Probe => ({
    arm,
    id,
    category,
    as: 'user',
    result: held ? 'pass' : category === 'control' ? 'invalid' : 'fail',
    detail,
  });
  progress('osworld-eval: an osworld session');
  const s = await d.client.createSession({ image: 'osworld', labels: { 'drums.osworld': '1', 'drums.probe': 'osworld-eval' } } as never);
  try {
    const ep = (s as unknown as { osworld?: OsworldEndpoint }).osworld;
    if (!ep) throw new Error(`session ${s.id} has no OSWorld endpoint`);
    const out: Probe[] = [];
    // The agent's step, as PythonController.execute_python_command sends it.
    const step = await post(ep.serverPort, '/execute', {
      command: ['python', '-c', `${PKGS_PREFIX}import os; print(os.getuid())  # sudo`],
      shell: false,
    });
    out.push(
      probe(
        'host.osworld.step-sudo',
        'host',
        step.status === 200 && step.output === '1000',
        `an env.step action ending in '# sudo' ran as uid ${step.output || '?'} (HTTP ${step.status}); 1000 is the desktop user, 0 root-in-session`,
      ),
    );
    // The same through a shell and through the verification route, with sudo really invoked: still not root.
    const sh = await post(ep.serverPort, '/execute_with_verification', { command: 'echo password | sudo -S id -u', shell: true });
    out.push(
      probe(
        'host.osworld.execute-sudo',
        'host',
        sh.output !== '0',
        `'echo password | sudo -S id -u' on /execute_with_verification printed ${JSON.stringify(sh.output.slice(-200))} (HTTP ${sh.status}); '0' would be root-in-session`,
      ),
    );
    // The desktop user with the root shim (only on root's PATH, but a path is no secret) and the real sudo.
    const shim = await post(ep.serverPort, '/execute', {
      command:
        'echo password | /usr/lib/drums/osworld/bin/sudo -S id -u; echo password | /usr/bin/sudo -S id -u 2>/dev/null; echo password | /usr/lib/drums/osworld/bin/sudo -S -u root id -u 2>&1',
      shell: true,
    });
    out.push(
      probe(
        'host.osworld.sudo-shim-as-user',
        'host',
        shim.status === 200 && /^1000$/m.test(shim.output) && !/^0$/m.test(shim.output),
        `the desktop user running the sudo shim and /usr/bin/sudo printed ${JSON.stringify(shim.output.slice(-300))} (HTTP ${shim.status}); a line '0' would be root`,
      ),
    );
    // Control: a task's set-up step (SetupController posts /setup/execute) still gets root, as its task expects.
    const setup = await post(ep.serverPort, '/setup/execute', { command: 'echo password | sudo -S id -u', shell: true });
    out.push(
      probe(
        'host.osworld.setup-sudo',
        'control',
        setup.status === 200 && setup.output === '0',
        `a set-up step 'echo password | sudo -S id -u' printed ${JSON.stringify(setup.output.slice(-200))} (HTTP ${setup.status}); expected 0`,
      ),
    );
    return out;
  } finally {
    await d.client.destroySession(s.id).catch(() => {});
  }
}
