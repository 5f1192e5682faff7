// Kubernetes probes for one Drums daemon (deploy/kubernetes/daemonset.yaml), using GET /v1/host:
//   node scripts/host-probe.ts ready            exit 0 if the host answers and is not draining
//   node scripts/host-probe.ts drain [--wait S]  POST /v1/host/drain, then wait up to S seconds
//                                               (default 0) until it holds no session
// The daemon is DRUMS_URL, else http://DRUMS_LISTEN:DRUMS_PORT; the token is DRUMS_TOKEN.
import { DrumsClient } from '../src/client/client.ts';

const env = process.env;
const listen = env.DRUMS_LISTEN || '127.0.0.1';
const url = env.DRUMS_URL || `http://${listen.includes(':') ? `[${listen}]` : listen}:${env.DRUMS_PORT || '7450'}`;
const client = new DrumsClient(url, env.DRUMS_TOKEN ?? '');
const [cmd, flag, value] = process.argv.slice(2);

async function main(): Promise<number> {
  if (cmd === 'ready') {
    const r = await client.host();
    if (r.draining) {
      console.error(`not ready: draining since ${r.drainingSince}`);
      return 1;
    }
    return 0;
  }
  if (cmd === 'drain') {
    const waitS = flag === '--wait' ? Number(value) : 0;
    if (!Number.isFinite(waitS) || waitS < 0) throw new Error(`--wait: a number of seconds, got '${value}'`);
    let r = await client.drainHost();
    const deadline = Date.now() + waitS * 1000;
    while (r.sessions.held > 0 && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, Math.min(2000, Math.max(0, deadline - Date.now()))));
      r = await client.host();
    }
    console.log(`drained: ${r.sessions.held} session(s) still held`);
    return 0;
  }
  console.error('usage: host-probe.ts ready | drain [--wait SECONDS]');
  return 2;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`host-probe: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  },
);
