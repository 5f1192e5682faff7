// Action normalization: every vocabulary, scaling, and every validation error path. No X needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { normalizeAction, normalizeActions, MAX_TEXT_LENGTH, DEFAULT_WAIT_MS } from '../../src/display/actions/index.ts';
import { isDisplayError } from '../../src/display/errors.ts';
import { keysymFromName, splitChord, charToKeysyms } from '../../src/display/keysyms.ts';

const screen = { width: 1280, height: 800 };
const n = (a: unknown, scale?: { width: number; height: number }) => normalizeAction(a, { screen, scale });

function rejects(a: unknown, message: RegExp, code: 'invalid_action' | 'invalid_key' = 'invalid_action', scale?: { width: number; height: number }) {
  assert.throws(
    () => normalizeActions([a], { screen, scale }),
    (err: unknown) => {
      assert.ok(isDisplayError(err, code), `expected ${code}, got ${(err as Error).message}`);
      assert.match((err as Error).message, message);
      return true;
    },
  );
}

test('canonical actions pass through unchanged (idempotent)', () => {
  const all = [
    { type: 'move', x: 1, y: 2 },
    { type: 'click', x: 3, y: 4, button: 'right', count: 2, modifiers: ['ctrl'] },
    { type: 'click', button: 'left', count: 1 },
    { type: 'mouse_down', button: 'middle' },
    { type: 'mouse_up', button: 'left', x: 5, y: 6 },
    {
      type: 'drag',
      path: [
        { x: 1, y: 1 },
        { x: 100, y: 100 },
      ],
      button: 'left',
    },
    { type: 'scroll', x: 10, y: 10, dx: 0, dy: -3 },
    { type: 'key', keys: ['ctrl', 'shift', 't'] },
    { type: 'key_down', key: 'shift' },
    { type: 'key_up', key: 'shift' },
    { type: 'type', text: 'héllo 日本 😀\n' },
    { type: 'wait', ms: 250 },
    { type: 'screenshot', format: 'jpeg', quality: 70, region: { x: 0, y: 0, width: 10, height: 10 } },
    { type: 'cursor_position' },
    { type: 'done', status: 'fail' },
  ];
  for (const a of all) assert.deepEqual(n(a), [a], JSON.stringify(a));
  assert.deepEqual(normalizeActions(all, { screen }), all);
});

test('canonical defaults', () => {
  assert.deepEqual(n({ type: 'click' }), [{ type: 'click', button: 'left', count: 1 }]);
  assert.deepEqual(n({ type: 'key', keys: 'ctrl+c' }), [{ type: 'key', keys: ['ctrl', 'c'] }]);
  assert.deepEqual(n({ type: 'key', keys: ['ctrl+shift', 't'] }), [{ type: 'key', keys: ['ctrl', 'shift', 't'] }]);
  assert.deepEqual(n({ type: 'drag', path: [[5, 6]] }), [{ type: 'drag', path: [{ x: 5, y: 6 }], button: 'left' }]);
  assert.deepEqual(n({ type: 'wait' }), [{ type: 'wait', ms: DEFAULT_WAIT_MS }]);
  assert.deepEqual(n({ type: 'move', coordinate: [7, 8] }), [{ type: 'move', x: 7, y: 8 }]);
});

test('Anthropic computer_20250124 / 20251124', () => {
  assert.deepEqual(n({ action: 'mouse_move', coordinate: [10, 20] }), [{ type: 'move', x: 10, y: 20 }]);
  assert.deepEqual(n({ action: 'left_click', coordinate: [10, 20] }), [{ type: 'click', x: 10, y: 20, button: 'left', count: 1 }]);
  assert.deepEqual(n({ action: 'left_click' }), [{ type: 'click', button: 'left', count: 1 }]);
  assert.deepEqual(n({ action: 'left_click', coordinate: [1, 2], text: 'shift' }), [
    { type: 'click', x: 1, y: 2, button: 'left', count: 1, modifiers: ['shift'] },
  ]);
  assert.deepEqual(n({ action: 'right_click', coordinate: [1, 2] })[0], { type: 'click', x: 1, y: 2, button: 'right', count: 1 });
  assert.deepEqual(n({ action: 'middle_click' })[0], { type: 'click', button: 'middle', count: 1 });
  assert.deepEqual(n({ action: 'double_click', coordinate: [1, 2] })[0], { type: 'click', x: 1, y: 2, button: 'left', count: 2 });
  assert.deepEqual(n({ action: 'triple_click', coordinate: [1, 2] })[0], { type: 'click', x: 1, y: 2, button: 'left', count: 3 });
  assert.deepEqual(n({ action: 'left_mouse_down' }), [{ type: 'mouse_down', button: 'left' }]);
  assert.deepEqual(n({ action: 'left_mouse_up', coordinate: [3, 4] }), [{ type: 'mouse_up', button: 'left', x: 3, y: 4 }]);
  assert.deepEqual(n({ action: 'left_click_drag', start_coordinate: [1, 2], coordinate: [30, 40] }), [
    {
      type: 'drag',
      path: [
        { x: 1, y: 2 },
        { x: 30, y: 40 },
      ],
      button: 'left',
    },
  ]);
  assert.deepEqual(n({ action: 'left_click_drag', coordinate: [30, 40] }), [{ type: 'drag', path: [{ x: 30, y: 40 }], button: 'left' }]);
  assert.deepEqual(n({ action: 'key', text: 'ctrl+a Delete' }), [
    { type: 'key', keys: ['ctrl', 'a'] },
    { type: 'key', keys: ['Delete'] },
  ]);
  assert.deepEqual(n({ action: 'key', text: 'Return' }), [{ type: 'key', keys: ['Return'] }]);
  assert.deepEqual(n({ action: 'type', text: 'hi' }), [{ type: 'type', text: 'hi' }]);
  assert.deepEqual(n({ action: 'hold_key', text: 'shift', duration: 0.5 }), [
    { type: 'key_down', key: 'shift' },
    { type: 'wait', ms: 500 },
    { type: 'key_up', key: 'shift' },
  ]);
  assert.deepEqual(n({ action: 'scroll', coordinate: [5, 5], scroll_direction: 'up', scroll_amount: 3 }), [{ type: 'scroll', x: 5, y: 5, dx: 0, dy: -3 }]);
  assert.deepEqual(n({ action: 'scroll', scroll_direction: 'right', scroll_amount: 2, text: 'ctrl' }), [{ type: 'scroll', dx: 2, dy: 0, modifiers: ['ctrl'] }]);
  assert.deepEqual(n({ action: 'wait', duration: 1.5 }), [{ type: 'wait', ms: 1500 }]);
  assert.deepEqual(n({ action: 'screenshot' }), [{ type: 'screenshot' }]);
  assert.deepEqual(n({ action: 'cursor_position' }), [{ type: 'cursor_position' }]);
  assert.deepEqual(n({ action: 'zoom', region: [100, 50, 300, 150] }), [{ type: 'screenshot', region: { x: 100, y: 50, width: 200, height: 100 } }]);
});

test('OSWorld computer_13 (nested and flat parameters, plain strings)', () => {
  assert.deepEqual(n({ action_type: 'MOVE_TO', parameters: { x: 10, y: 20 } }), [{ type: 'move', x: 10, y: 20 }]);
  assert.deepEqual(n({ action_type: 'CLICK', parameters: { button: 'right', x: 1, y: 2, num_clicks: 2 } }), [
    { type: 'click', x: 1, y: 2, button: 'right', count: 2 },
  ]);
  assert.deepEqual(n({ action_type: 'CLICK', x: 1, y: 2 }), [{ type: 'click', x: 1, y: 2, button: 'left', count: 1 }]);
  assert.deepEqual(n({ action_type: 'CLICK', parameters: {} }), [{ type: 'click', button: 'left', count: 1 }]);
  assert.deepEqual(n({ action_type: 'MOUSE_DOWN', parameters: { button: 'middle' } }), [{ type: 'mouse_down', button: 'middle' }]);
  assert.deepEqual(n({ action_type: 'MOUSE_UP', parameters: {} }), [{ type: 'mouse_up', button: 'left' }]);
  assert.deepEqual(n({ action_type: 'RIGHT_CLICK', parameters: { x: 1, y: 2 } })[0], { type: 'click', x: 1, y: 2, button: 'right', count: 1 });
  assert.deepEqual(n({ action_type: 'DOUBLE_CLICK', parameters: {} })[0], { type: 'click', button: 'left', count: 2 });
  assert.deepEqual(n({ action_type: 'DRAG_TO', parameters: { x: 9, y: 8 } }), [{ type: 'drag', path: [{ x: 9, y: 8 }], button: 'left' }]);
  assert.deepEqual(n({ action_type: 'SCROLL', parameters: { dy: 3 } }), [{ type: 'scroll', dx: 0, dy: -3 }], 'pyautogui vscroll(+) is up');
  assert.deepEqual(n({ action_type: 'SCROLL', parameters: { dx: -2, dy: -1 } }), [{ type: 'scroll', dx: -2, dy: 1 }]);
  assert.deepEqual(n({ action_type: 'TYPING', parameters: { text: 'a<b' } }), [{ type: 'type', text: 'a<b' }]);
  assert.deepEqual(n({ action_type: 'PRESS', parameters: { key: 'enter' } }), [{ type: 'key', keys: ['enter'] }]);
  assert.deepEqual(n({ action_type: 'KEY_DOWN', parameters: { key: 'ctrl' } }), [{ type: 'key_down', key: 'ctrl' }]);
  assert.deepEqual(n({ action_type: 'KEY_UP', parameters: { key: 'ctrl' } }), [{ type: 'key_up', key: 'ctrl' }]);
  assert.deepEqual(n({ action_type: 'HOTKEY', parameters: { keys: ['ctrl', 's'] } }), [{ type: 'key', keys: ['ctrl', 's'] }]);
  assert.deepEqual(n({ action_type: 'WAIT', parameters: {} }), [{ type: 'wait', ms: DEFAULT_WAIT_MS }]);
  assert.deepEqual(n({ action_type: 'DONE' }), [{ type: 'done', status: 'done' }]);
  assert.deepEqual(n({ action_type: 'FAIL' }), [{ type: 'done', status: 'fail' }]);
  assert.deepEqual(n('WAIT'), [{ type: 'wait', ms: DEFAULT_WAIT_MS }]);
  assert.deepEqual(n('DONE'), [{ type: 'done', status: 'done' }]);
  assert.deepEqual(n({ action_type: 'click', parameters: { x: 1, y: 1 } })[0].type, 'click');
});

test('E2B Desktop names', () => {
  assert.deepEqual(n({ action: 'leftClick', x: 1, y: 2 }), [{ type: 'click', x: 1, y: 2, button: 'left', count: 1 }]);
  assert.deepEqual(n({ action: 'rightClick' })[0], { type: 'click', button: 'right', count: 1 });
  assert.deepEqual(n({ action: 'middleClick', x: 1, y: 2 })[0], { type: 'click', x: 1, y: 2, button: 'middle', count: 1 });
  assert.deepEqual(n({ action: 'doubleClick', x: 1, y: 2 })[0], { type: 'click', x: 1, y: 2, button: 'left', count: 2 });
  assert.deepEqual(n({ action: 'moveMouse', x: 1, y: 2 }), [{ type: 'move', x: 1, y: 2 }]);
  assert.deepEqual(n({ action: 'move_mouse', x: 1, y: 2 }), [{ type: 'move', x: 1, y: 2 }]);
  assert.deepEqual(n({ action: 'mousePress', button: 'right' }), [{ type: 'mouse_down', button: 'right' }]);
  assert.deepEqual(n({ action: 'mouseRelease' }), [{ type: 'mouse_up', button: 'left' }]);
  assert.deepEqual(n({ action: 'drag', from: [1, 2], to: [3, 4] }), [
    {
      type: 'drag',
      path: [
        { x: 1, y: 2 },
        { x: 3, y: 4 },
      ],
      button: 'left',
    },
  ]);
  assert.deepEqual(n({ action: 'scroll', direction: 'up', amount: 2 }), [{ type: 'scroll', dx: 0, dy: -2 }]);
  assert.deepEqual(n({ action: 'scroll' }), [{ type: 'scroll', dx: 0, dy: 1 }]);
  assert.deepEqual(n({ action: 'write', text: 'abc' }), [{ type: 'type', text: 'abc' }]);
  assert.deepEqual(n({ action: 'press', key: 'enter' }), [{ type: 'key', keys: ['enter'] }]);
  assert.deepEqual(n({ action: 'press', key: ['ctrl', 'c'] }), [{ type: 'key', keys: ['ctrl', 'c'] }]);
  assert.deepEqual(n({ action: 'press', key: 'page_down' }), [{ type: 'key', keys: ['page_down'] }]);
  assert.deepEqual(n({ action: 'wait', ms: 20 }), [{ type: 'wait', ms: 20 }]);
  assert.deepEqual(n({ action: 'getCursorPosition' }), [{ type: 'cursor_position' }]);
});

test('cua computer-server commands', () => {
  assert.deepEqual(n({ command: 'left_click', params: { x: 1, y: 2 } }), [{ type: 'click', x: 1, y: 2, button: 'left', count: 1 }]);
  assert.deepEqual(n({ command: 'right_click', params: {} })[0], { type: 'click', button: 'right', count: 1 });
  assert.deepEqual(n({ command: 'double_click', x: 1, y: 2 })[0], { type: 'click', x: 1, y: 2, button: 'left', count: 2 });
  assert.deepEqual(n({ command: 'move_cursor', params: { x: 1, y: 2 } }), [{ type: 'move', x: 1, y: 2 }]);
  assert.deepEqual(n({ command: 'drag_to', params: { x: 1, y: 2 } }), [{ type: 'drag', path: [{ x: 1, y: 2 }], button: 'left' }]);
  assert.deepEqual(
    n({
      command: 'drag',
      params: {
        path: [
          [1, 2],
          [3, 4],
        ],
        button: 'right',
      },
    }),
    [
      {
        type: 'drag',
        path: [
          { x: 1, y: 2 },
          { x: 3, y: 4 },
        ],
        button: 'right',
      },
    ],
  );
  assert.deepEqual(n({ command: 'mouse_down', params: { button: 'left', x: 1, y: 2 } }), [{ type: 'mouse_down', button: 'left', x: 1, y: 2 }]);
  assert.deepEqual(n({ command: 'type_text', params: { text: 'x' } }), [{ type: 'type', text: 'x' }]);
  assert.deepEqual(n({ command: 'press_key', params: { key: 'esc' } }), [{ type: 'key', keys: ['esc'] }]);
  assert.deepEqual(n({ command: 'hotkey', params: { keys: ['ctrl', 'alt', 't'] } }), [{ type: 'key', keys: ['ctrl', 'alt', 't'] }]);
  assert.deepEqual(n({ command: 'key_down', params: { key: 'alt' } }), [{ type: 'key_down', key: 'alt' }]);
  assert.deepEqual(n({ command: 'scroll', params: { x: 0, y: 3 } }), [{ type: 'scroll', dx: 0, dy: -3 }]);
  assert.deepEqual(n({ command: 'scroll_down', params: { clicks: 4 } }), [{ type: 'scroll', dx: 0, dy: 4 }]);
  assert.deepEqual(n({ command: 'scroll_up', params: {} }), [{ type: 'scroll', dx: 0, dy: -1 }]);
  assert.deepEqual(n({ command: 'scroll_direction', params: { direction: 'left', clicks: 2 } }), [{ type: 'scroll', dx: -2, dy: 0 }]);
  assert.deepEqual(n({ command: 'get_cursor_position', params: {} }), [{ type: 'cursor_position' }]);
  assert.deepEqual(n({ command: 'screenshot' }), [{ type: 'screenshot' }]);
});

test('scale maps agent-space coordinates back to the screen', () => {
  const scale = { width: 1024, height: 768 };
  assert.deepEqual(n({ action: 'left_click', coordinate: [512, 384] }, scale), [{ type: 'click', x: 640, y: 400, button: 'left', count: 1 }]);
  assert.deepEqual(n({ action: 'mouse_move', coordinate: [1023, 767] }, scale), [{ type: 'move', x: 1279, y: 799 }]);
  assert.deepEqual(n({ action: 'zoom', region: [0, 0, 1024, 768] }, scale), [{ type: 'screenshot', region: { x: 0, y: 0, width: 1280, height: 800 } }]);
  assert.deepEqual(n({ action: 'screenshot' }, scale), [{ type: 'screenshot', scale: { width: 1024, height: 768 } }]);
  rejects({ action: 'left_click', coordinate: [1100, 10] }, /^actions\[0\]\.coordinate\[0\]: must be an integer within 0\.\.1023$/, 'invalid_action', scale);
  assert.deepEqual(
    n(
      {
        type: 'drag',
        path: [
          { x: 0, y: 0 },
          { x: 512, y: 384 },
        ],
      },
      scale,
    )[0],
    {
      type: 'drag',
      path: [
        { x: 0, y: 0 },
        { x: 640, y: 400 },
      ],
      button: 'left',
    },
  );
});

test('validation errors name the failing field', () => {
  rejects({ action: 'left_click', coordinate: [1280, 5] }, /^actions\[0\]\.coordinate\[0\]: must be an integer within 0\.\.1279$/);
  rejects({ action: 'left_click', coordinate: [5, 800] }, /^actions\[0\]\.coordinate\[1\]: must be an integer within 0\.\.799$/);
  rejects({ action: 'left_click', coordinate: [5.5, 8] }, /^actions\[0\]\.coordinate\[0\]: must be an integer/);
  rejects({ action: 'left_click', coordinate: [5] }, /^actions\[0\]\.coordinate: must be \[x, y\]$/);
  rejects({ action: 'left_click', coordinate: 'x' }, /^actions\[0\]\.coordinate: must be \[x, y\] or \{x, y\}$/);
  rejects({ type: 'move', x: 1 }, /^actions\[0\]\.y: is required when x is given$/);
  rejects({ type: 'move', y: 1 }, /^actions\[0\]\.x: is required when y is given$/);
  rejects({ type: 'move' }, /^actions\[0\]\.coordinate: is required/);
  rejects({ type: 'click', x: -1, y: 0 }, /^actions\[0\]\.x: must be an integer within 0\.\.1279$/);
  rejects({ type: 'click', count: 4 }, /^actions\[0\]\.count: must be an integer within 1\.\.3$/);
  rejects({ type: 'click', button: 'huge' }, /^actions\[0\]\.button: must be one of left, middle, right, back, forward$/);
  rejects({ action_type: 'CLICK', parameters: { num_clicks: 0 } }, /^actions\[0\]\.parameters\.num_clicks: must be an integer within 1\.\.3$/);
  rejects({ action_type: 'MOVE_TO', parameters: { x: 5000, y: 1 } }, /^actions\[0\]\.parameters\.x: must be an integer within 0\.\.1279$/);
  rejects({ action_type: 'NOPE' }, /^actions\[0\]\.action_type: unknown action "NOPE"$/);
  rejects({ action_type: 'HOTKEY', parameters: { keys: 'ctrl+s' } }, /^actions\[0\]\.parameters\.keys: must be an array/);
  rejects({ command: 'fly', params: {} }, /^actions\[0\]\.command: unknown command "fly"$/);
  rejects({ type: 'teleport' }, /^actions\[0\]\.type: unknown action "teleport"$/);
  rejects({ action: 'teleport' }, /^actions\[0\]\.action: unknown action "teleport"$/);
  rejects({ foo: 1 }, /^actions\[0\]\.type: is required$/);
  rejects({ type: 5 }, /^actions\[0\]\.type: must be a string$/);
  rejects(42, /^actions\[0\]: must be an object$/);
  rejects('pyautogui.click(1, 2)', /^actions\[0\]: must be an action object/);
  rejects({ type: 'type', text: 'x'.repeat(MAX_TEXT_LENGTH + 1) }, /^actions\[0\]\.text: is too long \(10001 characters, max 10000\)$/);
  rejects({ type: 'type' }, /^actions\[0\]\.text: is required/);
  rejects({ type: 'type', text: 'ok\u0001' }, /^actions\[0\]\.text\[2\]: cannot type control character U\+0001$/);
  rejects({ type: 'key', keys: [] }, /^actions\[0\]\.keys: must name at least one key$/);
  rejects({ type: 'key', keys: 7 }, /^actions\[0\]\.keys: must be a key name/);
  rejects({ type: 'key', keys: ['ctrl', 'bogus'] }, /^actions\[0\]\.keys\[1\]: unknown key "bogus"$/, 'invalid_key');
  rejects({ action: 'key', text: 'ctrl+bogus' }, /^actions\[0\]\.text: unknown key "bogus"$/, 'invalid_key');
  rejects({ action: 'key', text: '  ' }, /^actions\[0\]\.text: must name at least one key$/);
  rejects({ type: 'key_down' }, /^actions\[0\]\.key: must be a non-empty key name$/);
  rejects({ type: 'wait', ms: 60_001 }, /^actions\[0\]\.ms: must be a number within 0\.\.60000$/);
  rejects({ action: 'wait', duration: -1 }, /^actions\[0\]\.duration: must be a number within 0\.\.60$/);
  rejects({ type: 'scroll', dx: 0, dy: 0 }, /^actions\[0\]: scroll needs a non-zero amount$/);
  rejects({ type: 'scroll', dy: 1001 }, /^actions\[0\]\.dy: must be an integer within -1000\.\.1000$/);
  rejects({ action: 'scroll', scroll_direction: 'sideways', scroll_amount: 1 }, /^actions\[0\]\.scroll_direction: must be one of up, down, left, right$/);
  rejects({ type: 'drag', path: [] }, /^actions\[0\]\.path: must be an array of at least one point$/);
  rejects(
    {
      type: 'drag',
      path: [
        { x: 1, y: 1 },
        { x: 1, y: 9999 },
      ],
    },
    /^actions\[0\]\.path\[1\]\.y: must be an integer within 0\.\.799$/,
  );
  rejects({ action: 'zoom', region: [10, 10, 5, 20] }, /^actions\[0\]\.region\[2\]: must be an integer within 11\.\.1280$/);
  rejects({ action: 'zoom', region: [10, 10] }, /^actions\[0\]\.region: must be \[x0, y0, x1, y1\]$/);
  rejects({ type: 'screenshot', format: 'gif' }, /^actions\[0\]\.format: must be one of png, jpeg, webp, raw$/);
  rejects({ type: 'screenshot', quality: 0 }, /^actions\[0\]\.quality: must be an integer within 1\.\.100$/);
  rejects({ type: 'screenshot', region: { x: 1200, y: 0, width: 100, height: 10 } }, /^actions\[0\]\.region\.width: must be an integer within 1\.\.80$/);
  rejects({ type: 'done', status: 'maybe' }, /^actions\[0\]\.status: must be done or fail$/);
  rejects({ action: 'hold_key', text: 'shift' }, /^actions\[0\]\.duration: is required/);
  assert.throws(() => normalizeActions({} as never, { screen }), /^DisplayError: actions: must be an array$/);
  // The index in the path is the index of the failing input.
  assert.throws(
    () =>
      normalizeActions(
        [
          { type: 'wait', ms: 1 },
          { type: 'wait', ms: 1 },
          { action: 'left_click', coordinate: [0, 900] },
        ],
        { screen },
      ),
    /actions\[2\]\.coordinate\[1\]: must be an integer within 0\.\.799/,
  );
});

test('key names from every vocabulary resolve', () => {
  const same: Array<[string, string]> = [
    ['enter', 'Return'],
    ['Return', 'Return'],
    ['esc', 'Escape'],
    ['pagedown', 'Next'],
    ['page_down', 'Next'],
    ['pgdn', 'Next'],
    ['win', 'Super_L'],
    ['super', 'Super_L'],
    ['cmd', 'Super_L'],
    ['ctrl', 'Control_L'],
    ['ctrlright', 'Control_R'],
    ['backspace', 'BackSpace'],
    ['BackSpace', 'BackSpace'],
    ['f5', 'F5'],
    ['F12', 'F12'],
    ['ArrowUp', 'Up'],
    ['caps_lock', 'Caps_Lock'],
    ['num7', 'KP_7'],
    ['\n', 'Return'],
    ['\t', 'Tab'],
    ['space', 'space'],
    [' ', 'space'],
    ['kp_enter', 'KP_Enter'],
    ['printscreen', 'Print'],
  ];
  for (const [a, b] of same) assert.equal(keysymFromName(a), keysymFromName(b), `${JSON.stringify(a)} vs ${b}`);
  assert.equal(keysymFromName('Return'), 0xff0d);
  assert.equal(keysymFromName('a'), 0x61);
  assert.equal(keysymFromName('A'), 0x41);
  assert.equal(keysymFromName('<'), 0x3c);
  assert.equal(keysymFromName('é'), 0xe9);
  assert.equal(keysymFromName('€'), 0x20ac);
  assert.equal(keysymFromName('😀'), 0x101f600);
  assert.equal(keysymFromName('U+263A'), 0x100263a);
  assert.equal(keysymFromName('volumeup'), 0x1008ff13);
  assert.throws(
    () => keysymFromName('nope'),
    (e: unknown) => isDisplayError(e, 'invalid_key') && /nope/.test((e as Error).message),
  );
  assert.deepEqual(splitChord('ctrl+shift+t'), ['ctrl', 'shift', 't']);
  assert.deepEqual(splitChord('ctrl++'), ['ctrl', '+']);
  assert.deepEqual(splitChord('+'), ['+']);
  assert.deepEqual(charToKeysyms('日'), [0x10065e5]);
  assert.deepEqual(charToKeysyms('α'), [0x7e1, 0x10003b1]);
});
