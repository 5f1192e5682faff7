"""GRPO groups of OSWorld tasks: set a task up once, fork the set-up session, score every copy.

``drums osworld run TASKS --group N`` (or ``python -m drums.osworld_cli run ... --group N``) runs,
per task:

1. one ``DesktopEnv`` (provider ``drums``) whose ``reset(task_config=task)`` runs the task's
   real setup: the group's *setup* member;
2. ``POST /v1/sessions/{id}/fork {count: N-1}`` on that session: the *fork* members. A disk
   fork copies the files the setup wrote and restarts the desktop, so the setup steps that only
   start or arrange apps (``launch``, ``open``, ``activate_window``, ``sleep``,
   ``chrome_open_tabs``, ``close_window``) are replayed in each copy; steps that write files
   (``download``, ``execute``, ``command``, ...) are not (their result is in the copied files);
3. every member is scored independently with the task's real evaluator (``env.evaluate()``),
   after the oracle's actions if one is given.

The result says, per member, whether it was the setup or a fork (and the fork mode and
replayed steps), its session, and its score. The group's ``score`` is the mean.
"""

from __future__ import annotations

import concurrent.futures
import copy
import os
import time
from typing import Any, Optional

from .client import Session
from .osworld import DEFAULT_OBSERVATION, adopt_next, attach_score, cache_preflight, check_observation, needs_internet

#: Setup steps that start or arrange apps (replayed in a disk-forked copy).
REPLAY_IN_COPY = {"launch", "open", "activate_window", "sleep", "chrome_open_tabs", "close_window"}


def _score(env: Any, oracle: Optional[list], pause: float) -> float:
    for a in oracle or []:
        env.step(a, pause)
    return float(env.evaluate())


def _member(
    task: dict, copy_info: dict, oracle: Optional[list], pause: float, cache_dir: str, mode: str, tree: bool = True
) -> dict:
    from desktop_env.desktop_env import DesktopEnv

    t0 = time.monotonic()
    m: dict = {
        "origin": "fork",
        "fork_mode": mode,
        "session": copy_info["id"],
        "score": None,
        "error": None,
        "replayed": [],
        "ready_s": None,
    }
    env = None
    try:
        adopt_next(copy_info)
        env = DesktopEnv(provider_name="drums", action_space="pyautogui", require_a11y_tree=tree, cache_dir=cache_dir)
        # The task's instruction and evaluator, without running its setup again.
        env._set_task_info(task)
        env.setup_controller.reset_cache_dir(env.cache_dir)
        replay = [s for s in (task.get("config") or []) if s.get("type") in REPLAY_IN_COPY]
        if replay:
            if mode == "disk":  # the source's app locks came with the copied files (drums.osworld_pool)
                from .osworld_pool import clear_app_locks

                clear_app_locks(env, task)
            env.setup_controller.setup(replay, False)
            env.is_environment_used = True
        m["replayed"] = [s["type"] for s in replay]
        m["ready_s"] = round(time.monotonic() - t0, 2)
        m["score"] = _score(env, oracle, pause)
        m["episode"] = attach_score(env, m["score"], task.get("id"))
    except Exception as e:
        m["error"] = f"{type(e).__name__}: {e}"
    finally:
        if env is not None:
            try:
                env.close()
            except Exception as e:
                m["error"] = (m["error"] or "") + f" (close: {e})"
        m["seconds"] = round(time.monotonic() - t0, 2)
    return m


def run_group(
    src: str,
    task: Any,
    oracle: Optional[list],
    pause: float,
    allow_internet: bool,
    cache_root: str,
    n: int,
    mode: str = "disk",
    asset_cache: Optional[str] = None,
    observation: str = DEFAULT_OBSERVATION,
) -> dict:
    """One task's group. Its files come from the shared asset cache as in a plain run
    (``drums.osworld.run_task``): refused at once when the cache cannot serve them, else copied
    into a private directory per member (the forks' evaluators read ``cloud_file`` expectations
    from there), never written back."""
    from desktop_env.desktop_env import DesktopEnv

    from . import osworld_assets as assets

    tree = check_observation(observation) != "screenshot"  # every member observes as run.py's agent would
    t0 = time.monotonic()
    tid = task.get("id", os.path.basename(src)) if isinstance(task, dict) else os.path.basename(src)
    res: dict = {
        "task": tid,
        "file": src,
        "setup_ok": False,
        "score": None,
        "oracle": oracle is not None,
        "error": None,
        "session": None,
        "reset_s": None,
        "warnings": [],
        "seconds": None,
        "group": {"size": n, "setups": 0, "forks": 0, "fork_s": None, "members": []},
        "observation_type": observation,
    }
    if isinstance(task, Exception):
        res["error"] = str(task)
        return res
    why = None if allow_internet else needs_internet(task)
    if why:
        res["error"] = (
            f"needs the internet ({why}); this host has no egress, so the task was not started (pass --allow-internet on a host that has it)"
        )
        res["seconds"] = round(time.monotonic() - t0, 2)
        return res
    cache = asset_cache or assets.default_cache_dir()
    refused, res["warnings"] = cache_preflight(task, cache, allow_internet)
    if refused:
        res["error"] = refused
        res["seconds"] = round(time.monotonic() - t0, 2)
        return res
    env = None
    copies: list[dict] = []
    try:
        setup_dir = os.path.join(cache_root, tid, "setup")
        font_name = assets.materialize(cache, task, setup_dir)
        run = dict(task, config=assets.font_steps(font_name) + list(task.get("config") or [])) if font_name else task
        env = DesktopEnv(provider_name="drums", action_space="pyautogui", require_a11y_tree=tree, cache_dir=setup_dir)
        t1 = time.monotonic()
        env.reset(task_config=run)
        res["reset_s"] = round(time.monotonic() - t1, 2)
        # After the reset: a deferred env (a task pool of its image exists) has its session from it.
        res["session"] = env.provider.session["id"] if env.provider.session else None
        res["setup_ok"] = True
        res["group"]["setups"] = 1
        # Fork the set-up session before anyone acts in it.
        if n > 1:
            t2 = time.monotonic()
            copies = env.provider.fork(n - 1, mode)
            res["group"]["fork_s"] = round(time.monotonic() - t2, 2)
            res["group"]["forks"] = len(copies)
        fork_dirs = [os.path.join(cache_root, tid, f"fork{i}") for i in range(len(copies))]
        for d in fork_dirs:  # the fonts are in the copied disk already
            assets.materialize(cache, task, d, fonts=False)
        members = [
            {"origin": "setup", "session": res["session"], "score": None, "error": None, "ready_s": res["reset_s"]}
        ]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(copies))) as ex:
            futs = [
                ex.submit(_member, copy.deepcopy(task), c, oracle, pause, fork_dirs[i], mode, tree)
                for i, c in enumerate(copies)
            ]
            try:
                members[0]["score"] = _score(env, oracle, pause)
                members[0]["episode"] = attach_score(env, members[0]["score"], task.get("id"))
            except Exception as e:
                members[0]["error"] = f"{type(e).__name__}: {e}"
            members += [f.result() for f in futs]
        copies = []  # each member's env destroyed its own copy
        res["group"]["members"] = members
        scores = [m["score"] for m in members if m["score"] is not None]
        res["score"] = round(sum(scores) / len(scores), 3) if scores else None
        errs = [f"{m['origin']} {m['session']}: {m['error']}" for m in members if m["error"]]
        if errs:
            res["error"] = "; ".join(errs)[:2000]
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        if env is not None:
            try:
                env.close()
            except Exception as e:
                res["error"] = (res["error"] or "") + f" (close: {e})"
        for c in copies:  # forked but never handed to a member
            try:
                if env is not None:
                    Session(env.provider.client, c).destroy()
            except Exception:
                pass
        res["seconds"] = round(time.monotonic() - t0, 2)
    return res
