import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { auditStatus } from '../../bench/audit.ts';

/** The verdicts runAudit makes for `drums audit --arms baseline,memfork`: each bar once per arm. */
function verdicts(failedBy: Record<string, boolean | null>): { arm: string; pass: boolean | null }[] {
  return Object.entries(failedBy).flatMap(([arm, pass]) => [
    { arm, pass: true },
    { arm, pass },
  ]);
}

describe('audit status', () => {
  it('fails the record when the memfork arm fails probes and the baseline passes', () => {
    assert.equal(auditStatus(verdicts({ baseline: true, memfork: false }), true), 'failed');
  });
  it('fails the record when the disk fork arm fails', () => {
    assert.equal(auditStatus(verdicts({ baseline: true, fork: false }), true), 'failed');
  });
  it('fails the record when the baseline fails', () => {
    assert.equal(auditStatus(verdicts({ baseline: false, memfork: true }), true), 'failed');
  });
  it('passes when every audited arm passes', () => {
    assert.equal(auditStatus(verdicts({ baseline: true, fork: true, memfork: true }), true), 'passed');
  });
  it('is inconclusive when a run was incomplete or a verdict has no value', () => {
    assert.equal(auditStatus(verdicts({ baseline: true, memfork: true }), false), 'inconclusive');
    assert.equal(auditStatus(verdicts({ baseline: true, memfork: null }), true), 'inconclusive');
  });
  it('does not fail the record on the shared-browser demonstration arm (failing by design)', () => {
    assert.equal(auditStatus(verdicts({ baseline: true, 'shared-browser': false }), true), 'passed');
  });
});
