import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FIELDS, configTable, loadConfig } from '../../src/common/config.ts';
import { DrumsError } from '../../src/common/errors.ts';

describe('loadConfig', () => {
  it('resolves argument, then environment, then default', () => {
    const env = { DRUMS_PORT: '8000', DRUMS_MAX_SESSIONS: '7' };
    const c = loadConfig(env, { port: 9000 });
    assert.equal(c.port, 9000);
    assert.equal(c.maxSessions, 7);
    assert.equal(c.startConcurrency, 4);
    assert.equal(c.stateDir, '/var/lib/drums');
    assert.equal(loadConfig({ DRUMS_PORT: '' }).port, 7450, 'an empty variable is unset');
    assert.equal(
      loadConfig({ DRUMS_STATE_DIR: 'rel/state' }).stateDir,
      `${process.cwd()}/rel/state`,
      'a relative directory is taken from the working directory',
    );
  });

  it('parses typed fields', () => {
    const c = loadConfig({ DRUMS_OSWORLD_UIDS: '1001, 1002', DRUMS_OSWORLD_PEER_CHECK: '0', DRUMS_LOG: 'json', DRUMS_RATE_LIMIT: '0', DRUMS_TEST_HOOKS: '1' });
    assert.deepEqual(c.osworldUids, [1001, 1002]);
    assert.equal(c.osworldPeerCheck, false);
    assert.equal(c.logFormat, 'json');
    assert.equal(c.rateLimit, 0);
    assert.equal(c.testHooks, true);
  });

  for (const [name, value] of [
    ['DRUMS_PORT', '70000'],
    ['DRUMS_MAX_SESSIONS', 'many'],
    ['DRUMS_LOG_LEVEL', 'loud'],
    ['DRUMS_INSTANCE', 'TOO-LONG'],
    ['DRUMS_RATE_LIMIT', '-1'],
    ['DRUMS_RATE_BURST', '0'],
    ['DRUMS_OSWORLD_PEER_CHECK', 'maybe'],
    ['DRUMS_OSWORLD_UIDS', 'root'],
  ] as const) {
    it(`refuses ${name}=${value} with invalid_config naming the variable`, () => {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (e: unknown) => {
          assert.ok(e instanceof DrumsError);
          assert.equal(e.code, 'invalid_config');
          assert.equal(e.details?.variable, name);
          assert.match(e.message, new RegExp(`^${name}=`));
          return true;
        },
      );
    });
  }

  it('documents every field in the README table, each variable once', () => {
    const table = configTable();
    const vars = Object.values(FIELDS).map((f) => f.env);
    assert.equal(new Set(vars).size, vars.length);
    for (const v of vars) assert.equal(table.split(`\n| \`${v}\` |`).length - 1, 1, v);
  });
});
