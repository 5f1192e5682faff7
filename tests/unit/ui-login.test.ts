import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { UiLogins } from '../../src/api/ui-login.ts';

const own = 'http://127.0.0.1:7450';
const req = (cookie: string, secFetchSite?: string, extra: { origin?: string; path?: string } = {}) => ({
  cookie,
  secFetchSite,
  origin: extra.origin,
  ownOrigin: own,
  method: 'GET',
  path: extra.path ?? '/v1/sessions',
});

describe('dashboard login codes', () => {
  it('a code buys one login, once; an expired or made-up code buys nothing', (t) => {
    // A virtual clock: with real time a loaded host let the 50 ms code expire before it was redeemed.
    t.mock.timers.enable({ apis: ['Date'], now: 1_000_000 });
    const l = new UiLogins('t1', { codeTtlMs: 50 });
    const { code, expiresAt } = l.issue();
    assert.match(code, /^[A-Za-z0-9_-]{43}$/);
    assert.ok(Date.parse(expiresAt) > Date.now());
    const login = l.redeem(code);
    assert.ok(login);
    assert.equal(l.redeem(code), undefined, 'spent');
    assert.equal(l.redeem('x'.repeat(43)), undefined);
    const late = l.issue().code;
    t.mock.timers.tick(49);
    const early = l.issue().code;
    t.mock.timers.tick(31);
    assert.equal(l.redeem(late), undefined, 'expired');
    assert.ok(l.redeem(early), 'a code is good until its time is up');
    assert.equal(l.setCookie(login), `drums_ui_t1=${login}; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200`);
  });

  it("the cookie counts only on the daemon's own page's requests, or a typed /ui", () => {
    const l = new UiLogins('t2');
    const login = l.redeem(l.issue().code)!;
    const jar = `other=1; drums_ui_t2=${login}`;
    assert.equal(l.authenticates(req(jar, 'same-origin')), true);
    assert.equal(l.authenticates(req(jar, undefined, { origin: own })), true);
    assert.equal(l.authenticates(req(jar, 'none', { path: '/ui' })), true);
    assert.equal(l.authenticates(req(jar, 'none')), false);
    assert.equal(l.authenticates(req(jar, 'same-site')), false);
    assert.equal(l.authenticates(req(jar, 'cross-site')), false);
    assert.equal(l.authenticates(req(jar, undefined)), false);
    assert.equal(l.authenticates(req(jar, undefined, { origin: 'http://127.0.0.1:8080' })), false);
    assert.equal(l.authenticates(req(`drums_ui_t1=${login}`, 'same-origin')), false, "another instance's cookie");
    assert.equal(l.authenticates(req(`drums_ui_t2=${'A'.repeat(43)}`, 'same-origin')), false);
  });
});
