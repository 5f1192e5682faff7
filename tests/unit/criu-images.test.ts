import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adoptTaskNamespaces, criuLogTail } from '../../src/host/criu.ts';

// A tiny protobuf writer for the test's images (varint and length-delimited fields only).
const varint = (v: number): number[] => {
  const out: number[] = [];
  do {
    let c = v & 0x7f;
    v = Math.floor(v / 128);
    if (v) c |= 0x80;
    out.push(c);
  } while (v);
  return out;
};
const vf = (num: number, v: number) => Buffer.from([...varint(num * 8), ...varint(v)]);
const lf = (num: number, b: Buffer) => Buffer.concat([Buffer.from([...varint(num * 8 + 2), ...varint(b.length)]), b]);
const image = (magics: number, entry: Buffer) => {
  const head = Buffer.alloc(4 * magics + 4);
  for (let i = 0; i < magics; i++) head.writeUInt32LE(0x54564319 + i, 4 * i);
  head.writeUInt32LE(entry.length, 4 * magics);
  return Buffer.concat([head, entry]);
};
/** task_kobj_ids_entry: vm, files, fs, sighand, then pid, net, ipc, uts, mnt, user namespace ids. */
const ids = (uts: number, user: number) =>
  Buffer.concat([vf(1, 1), vf(2, 2), vf(3, 3), vf(4, 4), vf(5, 5), vf(6, 6), vf(7, 7), vf(8, uts), vf(9, 9), vf(10, user)]);
/** Parses the varint and length-delimited fields of a protobuf message (what the test writes). */
const fields = (b: Buffer): { num: number; v?: number; raw?: Buffer }[] => {
  const out: { num: number; v?: number; raw?: Buffer }[] = [];
  let at = 0;
  const rv = () => {
    let v = 0;
    let m = 1;
    for (;;) {
      const c = b[at++]!;
      v += (c & 0x7f) * m;
      m *= 128;
      if (!(c & 0x80)) return v;
    }
  };
  while (at < b.length) {
    const key = rv();
    if ((key & 7) === 0) out.push({ num: key >> 3, v: rv() });
    else {
      const n = rv();
      out.push({ num: key >> 3, raw: b.subarray(at, at + n) });
      at += n;
    }
  }
  return out;
};
/** The inventory's fields, and its root ids' UTS and user namespace ids. */
const inventory = (file: string) => {
  const b = readFileSync(file);
  const top = fields(b.subarray(8, 8 + b.readUInt32LE(4)));
  const root = fields(top.find((f) => f.num === 3)!.raw!);
  return { top: top.map((f) => [f.num, f.v ?? -1]), uts: root.find((f) => f.num === 8)?.v, user: root.find((f) => f.num === 10)?.v, rootFields: root.length };
};

describe('adoptTaskNamespaces (CRIU images of a userns session)', () => {
  it("rewrites the inventory's root user and UTS namespace ids to the root task's, keeping the rest; idempotent", () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-criu-img-'));
    try {
      writeFileSync(join(dir, 'pstree.img'), image(2, Buffer.concat([vf(1, 1), vf(2, 0), vf(3, 1), vf(4, 1)])));
      writeFileSync(join(dir, 'ids-1.img'), image(2, ids(41, 42)));
      writeFileSync(join(dir, 'inventory.img'), image(1, Buffer.concat([vf(1, 2), lf(3, ids(11, 12)), vf(8, 123456)])));
      assert.deepEqual([inventory(join(dir, 'inventory.img')).uts, inventory(join(dir, 'inventory.img')).user], [11, 12]);
      assert.equal(adoptTaskNamespaces(dir), true);
      const r = inventory(join(dir, 'inventory.img'));
      assert.deepEqual([r.uts, r.user, r.rootFields], [41, 42, 10]);
      assert.deepEqual(r.top, [
        [1, 2],
        [3, -1],
        [8, 123456],
      ]);
      assert.equal(adoptTaskNamespaces(dir), false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses images without a root task or its namespace ids', () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-criu-img-'));
    try {
      writeFileSync(join(dir, 'pstree.img'), image(2, Buffer.alloc(0)));
      assert.throws(() => adoptTaskNamespaces(dir), /no root task/);
      writeFileSync(join(dir, 'pstree.img'), image(2, vf(1, 7)));
      writeFileSync(join(dir, 'ids-7.img'), image(2, Buffer.concat([vf(1, 1), vf(8, 3)])));
      writeFileSync(join(dir, 'inventory.img'), image(1, Buffer.concat([vf(1, 2), lf(3, ids(11, 12))])));
      assert.throws(() => adoptTaskNamespaces(dir), /no namespace id 10/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('criuLogTail', () => {
  it('reads only the end of a large log, finds its error lines there, and never blocks on a FIFO or follows a link', () => {
    const dir = mkdtempSync(join(tmpdir(), 'drums-criu-log-'));
    try {
      // 64 MiB of chatter, an early error (past the tail: not read), then the error that matters.
      const chatter = `(00.000001) ${'x'.repeat(100)}\n`.repeat((64 * 1024 ** 2) / 113);
      writeFileSync(join(dir, 'dump.log'), `(00.0) Error (early): not read\n${chatter}(01.5) Error (criu/cr-dump.c:1): the cause\n(01.6) done\n`);
      assert.equal(criuLogTail(dir, 'dump.log'), '(01.5) Error (criu/cr-dump.c:1): the cause');
      execFileSync('mkfifo', [join(dir, 'restore.log')]);
      assert.equal(criuLogTail(dir, 'restore.log'), '');
      writeFileSync(join(dir, 'secret'), 'Error (host): a host file\n');
      symlinkSync(join(dir, 'secret'), join(dir, 'link.log'));
      assert.equal(criuLogTail(dir, 'link.log'), '');
      assert.equal(criuLogTail(dir, 'missing.log'), '');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
