"""The bench of GRPO groups (``drums osworld run --group``, drums.osworld_group, measured): per task, a group of N
ready to act by one setup and N-1 disk forks against N parallel setups (record ``osworld-group-*.json``;
docs/bench.md). Not shipped with the SDK: run from the checkout,

    PYTHONPATH=sdk/python .runtime/venv/bin/python sdk/python/bench/osworld_group_bench.py TASK.json... --n 8 --out FILE

with the daemon from DRUMS_URL/DRUMS_TOKEN."""

from __future__ import annotations

import concurrent.futures
import copy
import os
import sys
import time
from typing import Any, Optional

from drums.osworld import adopt_next, load_tasks
from drums.osworld_group import REPLAY_IN_COPY


def _ready_fresh(task: dict, n: int, cache_root: str) -> dict:
    """N independent setups of one task, in parallel: seconds from the start until each is ready to act."""
    from desktop_env.desktop_env import DesktopEnv

    t0 = time.monotonic()
    envs: list[Any] = [None] * n
    ready: list[Optional[float]] = [None] * n
    errors: list[str] = []

    def one(i: int) -> None:
        try:
            envs[i] = DesktopEnv(
                provider_name="drums",
                action_space="pyautogui",
                require_a11y_tree=False,
                cache_dir=os.path.join(cache_root, f"fresh{i}"),
            )
            envs[i].reset(task_config=copy.deepcopy(task))
            ready[i] = round(time.monotonic() - t0, 2)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
        list(ex.map(one, range(n)))
    for e in envs:
        if e is not None:
            try:
                e.close()
            except Exception as ce:
                errors.append(f"close: {ce}")
    done = [r for r in ready if r is not None]
    return {
        "first_ready_s": min(done) if done else None,
        "all_ready_s": max(done) if len(done) == n else None,
        "errors": errors,
    }


def _ready_group(task: dict, n: int, cache_root: str, mode: str = "disk") -> dict:
    """One setup, then N-1 forks made ready (app-starting steps replayed): seconds until each member is ready."""
    from desktop_env.desktop_env import DesktopEnv

    t0 = time.monotonic()
    errors: list[str] = []
    env = DesktopEnv(
        provider_name="drums",
        action_space="pyautogui",
        require_a11y_tree=False,
        cache_dir=os.path.join(cache_root, "setup"),
    )
    members: list[Any] = []
    out: dict = {}
    try:
        env.reset(task_config=copy.deepcopy(task))
        setup_s = round(time.monotonic() - t0, 2)
        copies = env.provider.fork(n - 1, mode)
        fork_s = round(time.monotonic() - t0, 2)
        ready: list[float] = [setup_s]

        def one(c: dict) -> None:
            adopt_next(c)
            m = DesktopEnv(
                provider_name="drums",
                action_space="pyautogui",
                require_a11y_tree=False,
                cache_dir=os.path.join(cache_root, c["id"]),
            )
            members.append(m)
            m._set_task_info(copy.deepcopy(task))
            replay = [s for s in (task.get("config") or []) if s.get("type") in REPLAY_IN_COPY]
            if replay:
                m.setup_controller.setup(replay, False)
            ready.append(round(time.monotonic() - t0, 2))

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(copies))) as ex:
            for f in [ex.submit(one, c) for c in copies]:
                try:
                    f.result()
                except Exception as e:
                    errors.append(f"{type(e).__name__}: {e}")
        out = {
            "setup_s": setup_s,
            "forked_s": fork_s,
            "first_ready_s": min(ready),
            "all_ready_s": max(ready) if len(ready) == n else None,
            "replayed": [s["type"] for s in (task.get("config") or []) if s.get("type") in REPLAY_IN_COPY],
        }
    finally:
        for m in members + [env]:
            try:
                m.close()
            except Exception as ce:
                errors.append(f"close: {ce}")
    out["errors"] = errors
    return out


def bench_main(argv: list[str]) -> int:
    import argparse
    import json
    import platform
    import tempfile

    ap = argparse.ArgumentParser(
        prog="osworld_group_bench.py",
        description="A group of N ready to act: by fork against N setups, per task.",
    )
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load0 = os.getloadavg()
    rows = []
    for src, task in load_tasks(a.tasks):
        if isinstance(task, Exception):
            continue
        cache = tempfile.mkdtemp(prefix="drums-oswg-bench-")
        print(f"{task['id']}: group of {a.n} by fork", file=sys.stderr, flush=True)
        try:
            g = _ready_group(task, a.n, cache)
        except Exception as e:
            g = {"errors": [f"{type(e).__name__}: {e}"]}
        print(f"{task['id']}: {a.n} setups", file=sys.stderr, flush=True)
        f = _ready_fresh(task, a.n, cache)
        ratio = round(g["all_ready_s"] / f["all_ready_s"], 3) if g.get("all_ready_s") and f.get("all_ready_s") else None
        rows.append(
            {
                "task": task["id"],
                "file": src,
                "setup_types": [s.get("type") for s in task.get("config") or []],
                "fork": g,
                "fresh": f,
                "all_ready_ratio": ratio,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    rec = {
        "schemaVersion": 1,
        "kind": "osworld-group",
        "started": started,
        "n": a.n,
        "fork_mode": "disk",
        "host": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "loadavg_before": load0,
            "loadavg_after": os.getloadavg(),
        },
        "tasks": rows,
        "notes": [
            "ready = the setup done (fresh) or the fork made and the setup's app-starting steps replayed (fork), measured from the group's start",
            "all_ready_ratio = fork all-ready / fresh all-ready (below 1: the group by fork is ready sooner)",
        ],
    }
    with open(a.out, "w") as fh:
        json.dump(rec, fh, indent=2)
    print(f"record: {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(sys.argv[1:]))
