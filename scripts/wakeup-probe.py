"""Wakeup-latency probe for noisy-neighbour diagnosis (docs/bench.md, day 11).

Sleeps 1 ms in a loop, pinned to one CPU, and prints each wakeup that came more than
--late-ms late, as "<CLOCK_MONOTONIC s> <ms late>" (the clock of perf and of the kernel's
trace). Run one per CPU and per scheduling setting beside a bench, then line the lines up
with the record's phases. Stop it by its PID or let --seconds run out.

    python3 scripts/wakeup-probe.py --cpu 1 --seconds 600 > /tmp/probe-cfs-1.log &
    python3 scripts/wakeup-probe.py --cpu 1 --fifo 50 --seconds 600 > /tmp/probe-fifo-1.log &

--fifo N runs it SCHED_FIFO at priority N (root); --slice-us N gives it a custom EEVDF slice
(sched_setattr sched_runtime, Linux 6.12+); --cgroup NAME moves it into the v1 cpu and cpuacct
cgroups, or the v2 cgroup, of that name at the root once that exists (waiting for it: a bench's
drums-<inst>/client is made when the bench starts), and back to the root when --seconds run
out. While it is in there, that cgroup cannot be removed: a bench that ends first leaves it,
empty once the probe is gone, for `rmdir` (or the instance's `drums sweep`). It makes nothing.
"""

import argparse
import ctypes
import os
import struct
import sys
import time

SYS_SCHED_SETATTR = 314  # x86_64


def set_slice(ns: int) -> None:
    attr = struct.pack("IIQiIQQQII", 56, 0, 0, 0, 0, ns, 0, 0, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_SCHED_SETATTR, 0, ctypes.create_string_buffer(attr), 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_setattr")


def cgroup_dirs(name: str) -> list[str]:
    v1 = [f"/sys/fs/cgroup/{c}/{name}" for c in ("cpu", "cpuacct")]
    v2 = f"/sys/fs/cgroup/{name}"
    return [d for d in v1 if os.path.isdir(d)] or ([v2] if os.path.isdir(v2) else [])


def move_to(dirs: list[str]) -> None:
    for d in dirs:
        with open(f"{d}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", type=int, required=True)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--late-ms", type=float, default=30)
    p.add_argument("--fifo", type=int, default=0)
    p.add_argument("--slice-us", type=int, default=0)
    p.add_argument("--cgroup", default="")
    a = p.parse_args()
    os.sched_setaffinity(0, {a.cpu})
    if a.fifo:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.fifo))
    if a.slice_us:
        set_slice(a.slice_us * 1000)
    joined: list[str] = []
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        if a.cgroup and not joined and (joined := cgroup_dirs(a.cgroup)):
            move_to(joined)
            print(f"{time.monotonic():.3f} joined {a.cgroup}", flush=True)
        t = time.monotonic()
        time.sleep(0.001)
        late = (time.monotonic() - t - 0.001) * 1000
        if late > a.late_ms:
            print(f"{t:.3f} {late:.0f}", flush=True)
    move_to([os.path.dirname(d) for d in joined])


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
