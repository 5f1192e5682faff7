import { DrumsClient } from '../client/client.ts';

/** Helpers the command modules share. */

/** The daemon named by the environment (DRUMS_URL, DRUMS_TOKEN, or the state dir's daemon.json). */
export const client = () => DrumsClient.fromEnv();

/** The host-side commands' config (sweep, image): the environment, resolved once; logging follows it. */
export const hostConfig = async () => {
  const [{ loadConfig }, { configureLog }] = await Promise.all([import('../common/config.ts'), import('../common/log.ts')]);
  const c = loadConfig(process.env);
  configureLog(c);
  return c;
};

/** Prints `value` as JSON, or `text()` for people. */
export const print = (json: boolean, value: unknown, text: () => string) => {
  process.stdout.write(json ? JSON.stringify(value, null, 2) + '\n' : text() + '\n');
};

/** Runs `fn` against the daemon at DRUMS_URL when it is set, else against a private daemon started (and stopped) for it. */
export async function withDaemon<T>(fn: (c: DrumsClient) => Promise<T>): Promise<T> {
  const daemon = process.env.DRUMS_URL ? { client: client(), stop: async () => {} } : await (await import('../client/private-daemon.ts')).startPrivateDaemon();
  try {
    return await fn(daemon.client);
  } finally {
    await daemon.stop();
  }
}

/** A progress callback that rewrites one stderr line: `[tag] message`. */
export const progressLine = (tag: string) => (m: string) => process.stderr.write(`\r\x1b[K[${tag}] ${m}`);
