// The spec's request-body schemas as the server's backstop (src/api/spec-validate.ts). No daemon.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BODY_CODES, specBodies } from '../../src/api/spec-validate.ts';
import { normalizeActions } from '../../src/display/actions/index.ts';
import { parseSpec } from '../../src/session/spec.ts';

const v = specBodies();

function refuses(op: string, body: unknown, field: string, code: string, message?: RegExp) {
  const e = v.violation(op, body);
  assert.ok(e, `${op} ${JSON.stringify(body)} passed`);
  assert.equal(e.field, field, `${op} ${JSON.stringify(body)}: ${e.message}`);
  assert.equal(e.code, code);
  if (message) assert.match(e.message, message);
  // check() throws the route's error: 400 code, details.field, message starting with the field.
  assert.throws(
    () => v.check(op, body),
    (err: Error & { code: string; details?: { field?: string } }) => {
      assert.equal(err.code, code);
      assert.equal(err.details?.field, field);
      assert.ok(err.message.startsWith(`${field}: `), err.message);
      return true;
    },
  );
}

describe('spec body validation', () => {
  it('covers every operation with a JSON body, each with an error code', () => {
    assert.deepEqual([...v.operations].sort(), [
      'addPoolMember',
      'createSession',
      'execInSession',
      'forkSession',
      'joinClientCgroup',
      'putPool',
      'releaseSession',
      'resetSession',
      'runActions',
      'setEpisodeOutcome',
      'takeOver',
    ]);
    for (const op of v.operations) assert.ok(BODY_CODES[op], op);
  });

  it('accepts valid bodies', () => {
    const ok: [string, unknown][] = [
      ['createSession', {}],
      [
        'createSession',
        {
          image: 'minimal',
          url: null,
          screen: '1280x800x24',
          memoryMb: 512,
          cpus: 0.5,
          pids: 256,
          egress: false,
          hostPorts: [8080],
          browserFlags: ['--lang=en'],
          ttlSeconds: 60,
          labels: { 'drums.osworld': '1' },
        },
      ],
      ['createSession', { screen: { width: 800, height: 600, depth: 16 } }],
      ['execInSession', { argv: ['uname', '-a'] }],
      ['execInSession', { shell: 'echo hi', root: true, cwd: '/tmp', env: { A_1: 'x' }, stdin: '', timeoutMs: 1000, maxOutputBytes: 10 }],
      ['resetSession', {}],
      ['resetSession', { generation: 2 }],
      ['runActions', { actions: [] }],
      ['runActions', { actions: [{ type: 'click', x: 1, y: 2 }], generation: 1, scale: { width: 640, height: 400 }, screenshot: true }],
      [
        'runActions',
        {
          actions: [],
          screenshot: { format: 'jpeg', quality: 50, region: { x: 0, y: 0, width: 10, height: 10 }, scale: { width: 5, height: 5 }, cursor: false },
        },
      ],
    ];
    for (const [op, body] of ok) assert.equal(v.violation(op, body), undefined, `${op} ${JSON.stringify(body)}`);
  });

  it('accepts every action vocabulary the server accepts', () => {
    const actions = [
      { type: 'click', x: 3, y: 4, button: 'right', count: 2, modifiers: ['ctrl'] },
      {
        type: 'drag',
        path: [
          { x: 1, y: 1 },
          { x: 100, y: 100 },
        ],
        button: 'left',
      },
      { action: 'left_click', coordinate: [10, 20] },
      { action: 'key', text: 'ctrl+a' },
      { action_type: 'HOTKEY', parameters: { keys: ['ctrl', 'a'] } },
      { action_type: 'CLICK', x: 5, y: 5 },
      { command: 'move_cursor', params: { x: 1, y: 2 } },
      'WAIT',
      'done',
      'Fail',
    ];
    normalizeActions(actions, { screen: { width: 1280, height: 800 } }); // the server's own check
    assert.equal(v.violation('runActions', { actions }), undefined);
  });

  it('refuses what the spec forbids, naming the field like the hand-written validators', () => {
    // Each of these passes the hand-written validator first: the spec is the backstop.
    parseSpec({ screen: { width: 1280, height: 800, extra: 1 } });
    refuses('createSession', { screen: { width: 1280, height: 800, extra: 1 } }, 'screen.extra', 'invalid_spec', /^unknown field/);
    parseSpec({ image: null });
    refuses('createSession', { image: null }, 'image', 'invalid_spec', /must be string/);
    normalizeActions([{ type: 'click', action: 5 }], { screen: { width: 1280, height: 800 } });
    refuses(
      'runActions',
      {
        actions: [
          { type: 'click', x: 1, y: 1 },
          { type: 'click', action: 5 },
        ],
      },
      'actions[1].action',
      'invalid_action',
      /must be string/,
    );
    refuses('runActions', { actions: [], generation: '3' }, 'generation', 'invalid_request', /integer/);
    refuses('runActions', { actions: [], screenshot: { quality: '80' } }, 'screenshot.quality', 'invalid_format');
    refuses('runActions', { actions: [], screenshot: { region: { x: -1, y: 0, width: 1, height: 1 } } }, 'screenshot.region.x', 'invalid_region');
    refuses('runActions', { actions: [], scale: { width: 5 } }, 'scale.height', 'invalid_region', /^is required/);
    refuses('resetSession', { generation: '2' }, 'generation', 'invalid_request');
  });

  it('names the field of any violation: unknown fields, keys, items, the body itself', () => {
    refuses('createSession', { nope: 1 }, 'nope', 'invalid_spec', /unknown field/);
    refuses('createSession', { labels: { 'bad key': 'x' } }, 'labels.bad key', 'invalid_spec', /^key must match pattern/);
    refuses('createSession', { hostPorts: [80, 0] }, 'hostPorts[1]', 'invalid_spec', />= 1/);
    refuses('createSession', null, 'body', 'invalid_spec', /must be object/);
    refuses('execInSession', { argv: ['ls'], timeoutMs: 1.5 }, 'timeoutMs', 'invalid_exec', /must be integer/);
    refuses('execInSession', { argv: [] }, 'argv', 'invalid_exec');
    refuses('execInSession', { shell: 'x', env: { '1A': 'x' } }, 'env.1A', 'invalid_exec');
    refuses('runActions', { actions: ['JUMP'] }, 'actions[0]', 'invalid_action');
    refuses('runActions', { actions: new Array(1001).fill('WAIT') }, 'actions', 'invalid_action', /1000/);
    refuses('runActions', {}, 'actions', 'invalid_action', /^is required/);
    refuses('resetSession', { wipe: true }, 'wipe', 'invalid_request', /unknown field/);
  });
});
