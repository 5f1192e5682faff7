"""The bench of task pools: ``DesktopEnv.reset(task)`` of a set-up task claimed from a pool of set-up tasks
(drums.osworld_pool) against the reset + setup it replaces, one env each as an RL loop, with N plain sessions held
(docs/pools.md, "Pools of set-up tasks"; docs/bench.md). Not shipped with the SDK: run from the checkout,

    PYTHONPATH=sdk/python .runtime/venv/bin/python sdk/python/bench/osworld_pool_bench.py TASK.json --out FILE

with the daemon from DRUMS_URL/DRUMS_TOKEN."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Optional

from drums import Client, errors
from drums import osworld_assets as assets
from drums.osworld import destroy_quietly, load_tasks
from drums.osworld_pool import declare, fill


def _pct(xs: list[float], q: float) -> Optional[float]:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(round(q * (len(s) - 1))))], 4)


def _loop(task: dict, resets: int, cache_dir: str, image: str, claim: bool, a11y: bool) -> dict:
    """One env, ``resets`` resets of the task as an RL loop does them: claims from the pool, or setups."""
    from desktop_env.desktop_env import DesktopEnv

    env = DesktopEnv(
        provider_name="drums",
        action_space="pyautogui",
        path_to_vm=f"drums:{image}",
        cache_dir=cache_dir,
        require_a11y_tree=a11y,
    )
    env._drums_no_pool = not claim
    # The observation a reset ends with is the same work in both arms (a screenshot, and the a11y
    # tree with --a11y): timed apart, so `ready` is the part a claim replaces.
    obs_s: list[float] = []
    get_obs = env._get_obs

    def timed_obs():
        t = time.monotonic()
        try:
            return get_obs()
        finally:
            obs_s.append(time.monotonic() - t)

    env._get_obs = timed_obs
    times: list[float] = []
    hits = 0
    try:
        for _ in range(resets):
            before = env.provider.session["id"] if env.provider.session else None
            t = time.monotonic()
            env.reset(task_config=task)
            times.append(time.monotonic() - t)
            hits += env.provider.session is not None and env.provider.session["id"] != before
    finally:
        env.close()
    ready = [r - o for r, o in zip(times, obs_s, strict=False)]
    return {
        "n": len(times),
        "reset": {"p50_s": _pct(times, 0.5), "p99_s": _pct(times, 0.99), "min_s": _pct(times, 0)},
        "ready": {"p50_s": _pct(ready, 0.5), "p99_s": _pct(ready, 0.99), "min_s": _pct(ready, 0)},
        "observation": {"p50_s": _pct(obs_s, 0.5), "p99_s": _pct(obs_s, 0.99)},
        "claims": hits,
    }


def bench_main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="osworld_pool_bench.py",
        description="DesktopEnv.reset(task) of a set-up task: claimed from a task pool against the setup it replaces.",
    )
    ap.add_argument("task")
    ap.add_argument("--claims", type=int, default=10, help="resets claimed from the pool (its size)")
    ap.add_argument("--setups", type=int, default=3, help="resets that run the setup (pools off)")
    ap.add_argument("--held", type=int, default=0, help="plain sessions held during the run")
    ap.add_argument("--held-image", default="minimal")
    ap.add_argument("--cache", default=None, help="the asset cache (default: the shared one)")
    ap.add_argument("--image", default=os.environ.get("DRUMS_OSWORLD_IMAGE", "osworld"))
    ap.add_argument("--a11y", action="store_true", help="observe with the accessibility tree too (run.py's default)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    [(src, task)] = load_tasks([a.task])
    if isinstance(task, Exception):
        raise SystemExit(str(task))
    client = Client()
    cache = a.cache or assets.default_cache_dir()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load0 = os.getloadavg()
    name = f"bench-{os.getpid()}"
    held: list[str] = []
    root = tempfile.mkdtemp(prefix="drums-oswp-bench-")
    rec: dict = {"schemaVersion": 1, "kind": "osworld-task-pool", "started": started, "task": task["id"], "file": src}
    try:
        for _ in range(a.held):
            held.append(client.sessions.create(image=a.held_image, labels={"drums.bench": "held"}).id)
        assets.materialize(cache, task, root)
        print(f"{task['id']}: {a.setups} resets with setup", file=sys.stderr, flush=True)
        rec["setup"] = _loop(task, a.setups, root, a.image, claim=False, a11y=a.a11y)
        print(f"{task['id']}: task pool of {a.claims}: declare, fill", file=sys.stderr, flush=True)
        declare(name, task, a.claims, cache=cache, image=a.image, client=client)
        rec["fill"] = fill(name, task, cache=cache, client=client)
        rec["pool"] = client.pools.get(name)
        print(f"{task['id']}: {a.claims} resets claimed", file=sys.stderr, flush=True)
        rec["claim"] = _loop(task, a.claims, root, a.image, claim=True, a11y=a.a11y)
    finally:
        try:
            client.pools.delete(name)
        except errors.DrumsError:
            pass
        for sid in held:
            destroy_quietly(client, sid)
        shutil.rmtree(root, ignore_errors=True)
    s, c = rec["setup"]["ready"]["p50_s"], rec["claim"]["ready"]["p50_s"]
    rec["ready_p50_ratio"] = round(c / s, 5) if s and c else None
    rec["held"] = a.held
    rec["host"] = {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
    }
    rec["notes"] = [
        "setup: one DesktopEnv, each reset a Drums reset plus the task's setup (pools off); claim: the same env, each reset a claim of a set-up member (the previous session destroyed in the background)",
        "reset = env.reset(task) whole; observation = the _get_obs it ends with (the same work in both arms); ready = reset - observation, the part a claim replaces",
        "fill: one setup, then forks (memory refused for the osworld session, so disk with the app-starting steps replayed); fill.origin says which",
    ]
    with open(a.out, "w") as fh:
        json.dump(rec, fh, indent=2)
    print(json.dumps({k: rec[k] for k in ("setup", "claim", "ready_p50_ratio")}), file=sys.stderr)
    print(f"record: {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(sys.argv[1:]))
