"""Pools of set-up OSWorld tasks: ``DesktopEnv.reset(task_config=task)`` in milliseconds.

A task pool is a daemon pool (docs/pools.md, "Pools of set-up tasks") whose ``task`` names one
OSWorld task. Its members are sessions with that task already set up. The daemon keeps and hands
them out; it does not make them, because the setup is desktop_env's SetupController (Python, the
task's own steps) run against the session's guest contract, which is what this SDK already does
for every reset. So the *filler* is here:

    from drums import osworld_pool
    osworld_pool.declare("writer-0810", task, size=4, cache=cache)   # refused at once if it cannot run
    osworld_pool.fill("writer-0810", task, cache=cache)              # one setup, then forks to fill

``fill`` sets the task up once in a fresh session, then forks that session: a memory fork when the
daemon can checkpoint it (the copy keeps its apps), else a disk fork (the copy gets the files the
setup wrote, and the setup steps that only start or arrange apps are replayed in it, as in
``drums osworld run --group``), else (no fork at all) one setup per member. Every member is added
with how it was made, and the pool's view counts them (``fill``).

A ``DesktopEnv`` on the ``drums`` provider then claims: its ``reset(task_config=task)`` looks for a
pool whose task digest is this task's and whose image is the env's, and takes a ready member
(``onEmpty: fail``, so an empty pool costs one request and the ordinary reset runs). The env's
previous session is destroyed in the background. ``DRUMS_OSWORLD_POOLS=0`` turns claiming off.

The claimer's ``cache_dir`` must hold the task's files as for an ordinary reset: the evaluator's
``cloud_file`` expectations are read from there (``drums.osworld_assets.materialize``).
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Optional

from . import errors
from .client import Client
from .osworld import (
    APP_COMMANDS,
    adopt_next,
    cache_preflight,
    claim_into,
    destroy_quietly,
    needs_internet,
    task_digest,
    validate_task,
)

__all__ = ["task_digest", "task_apps", "declare", "fill", "claim_into"]

#: Setup steps that start or arrange apps: replayed in a disk-forked copy (its desktop restarted).
REPLAY_IN_COPY = {"launch", "open", "activate_window", "sleep", "chrome_open_tabs", "close_window"}


def task_apps(task: dict) -> list[str]:
    """The commands the task's related_apps need on the image (what the daemon checks at declare)."""
    apps = task.get("related_apps") or []
    cmds = {
        APP_COMMANDS.get(str(a).strip().lower().replace(" ", "_")) for a in (apps if isinstance(apps, list) else [])
    }
    return sorted(c for c in cmds if c)


def declare(
    name: str,
    task: dict,
    size: int,
    *,
    cache: Optional[str] = None,
    image: Optional[str] = None,
    allow_internet: bool = False,
    client: Optional[Client] = None,
) -> dict:
    """Creates (or changes) the task pool ``name``. A task that cannot run here is refused now with
    ``task_not_runnable`` (422) and ``details.reason``: ``file_missing`` (its files are not in the
    asset cache: checked here, the daemon cannot see the cache), ``app_missing`` or
    ``needs_internet`` (checked by the daemon against the image and the template)."""
    from . import osworld_assets as assets

    client = client or Client()
    validate_task(task)
    cache = cache or assets.default_cache_dir()
    refused, _warnings = cache_preflight(task, cache, allow_internet)
    if refused:
        raise errors.TaskNotRunnable(
            f"task {task['id']}: {refused}",
            status=422,
            details={"field": "task", "reason": "file_missing"},
        )
    template: dict = {
        "image": image or os.environ.get("DRUMS_OSWORLD_IMAGE", "osworld"),
        "labels": {"drums.osworld": "1"},
    }
    if allow_internet:
        template["egress"] = True
    body = {
        "size": size,
        "template": template,
        "task": {
            "id": task["id"],
            "digest": task_digest(task),
            "apps": task_apps(task),
            "internet": needs_internet(task),
        },
    }
    # Not client.pools.put: that one takes a template's fields, not a task.
    return client.request("PUT", f"/v1/pools/{name}", json=body).json()


def _env(cache_dir: str, image: str):
    from desktop_env.desktop_env import DesktopEnv

    env = DesktopEnv(provider_name="drums", action_space="pyautogui", path_to_vm=f"drums:{image}", cache_dir=cache_dir)
    env._drums_no_pool = True  # the filler sets up; it never claims from its own pool
    return env


def _detach(env: Any) -> Optional[str]:
    """Lets go of an env's session without destroying it (it belongs to the pool now)."""
    sid = env.provider.session["id"] if env.provider.session else None
    env.provider.session = None
    env.close()
    return sid


#: Lock files an app leaves in its profile or beside an open document. A disk fork copies them with
#: the source's files, and the copy's restarted app then finds them held by another host (the source's
#: hostname) and stops at a dialog: LibreOffice asks "another instance is accessing your personal
#: settings", Thunderbird says it is already running, Chrome that the profile is in use.
_CLEAR_LOCKS = (
    # LibreOffice also lists the documents it had open as to recover, and the copy's restarted Writer
    # would stop at "Document Recovery" instead of opening the replayed file.
    "sed -i '/org.openoffice.Office.Recovery\\/RecoveryList/d' \"$HOME/.config/libreoffice/4/user/registrymodifications.xcu\" 2>/dev/null; "
    'rm -f "$HOME/.config/libreoffice/4/.lock" "$HOME"/.config/google-chrome/Singleton* '
    '"$HOME"/.thunderbird/*/lock "$HOME"/.thunderbird/*/.parentlock; '
    'for f in "$@"; do rm -f "$(dirname "$f")/.~lock.$(basename "$f")#"; done'
)


def clear_app_locks(env: Any, task: dict) -> None:
    """In a disk-forked copy, before its apps start again: removes the locks the source's apps held
    (their profiles, and the documents the task's ``open`` steps open)."""
    import requests

    opened = [
        str((s.get("parameters") or {}).get("path", "")) for s in task.get("config") or [] if s.get("type") == "open"
    ]
    r = requests.post(
        env.controller.http_server + "/execute",
        json={"command": ["sh", "-c", _CLEAR_LOCKS, "sh", *[p for p in opened if p]], "shell": False},
        timeout=60,
    )
    r.raise_for_status()


def _replay(task: dict, copy_info: dict, cache_dir: str, image: str) -> str:
    """A disk-forked copy: the app-starting setup steps again (its files came with the fork)."""
    adopt_next(copy_info)
    env = _env(cache_dir, image)
    try:
        env._set_task_info(task)
        env.setup_controller.reset_cache_dir(env.cache_dir)
        clear_app_locks(env, task)
        replay = [s for s in (task.get("config") or []) if s.get("type") in REPLAY_IN_COPY]
        if replay and not env.setup_controller.setup(replay, False):
            raise RuntimeError(f"replaying {[s['type'] for s in replay]} in copy {copy_info['id']} failed")
    except BaseException:
        env.close()  # destroys the copy
        raise
    return _detach(env) or copy_info["id"]


def fill(
    name: str,
    task: dict,
    *,
    cache: Optional[str] = None,
    modes: tuple[str, ...] = ("memory", "disk"),
    client: Optional[Client] = None,
) -> dict:
    """Tops the task pool ``name`` up to its size: one setup, then forks (``modes`` tried in order;
    ``()`` means one setup per member). Returns what it added, how, and the time it took."""
    from . import osworld_assets as assets

    client = client or Client()
    t0 = time.monotonic()
    view: Any = client.pools.get(name)
    if (view.get("task") or {}).get("digest") != task_digest(task):
        raise ValueError(f"pool '{name}' is not a pool of this task (declare it first: drums.osworld_pool.declare)")
    image = view["template"].get("image", "osworld")
    need = view["size"] - view["ready"]
    out: dict = {
        "pool": name,
        "added": [],
        "origin": None,
        "setup_s": None,
        "fork_s": None,
        "notes": [],
        "seconds": None,
    }
    if need <= 0:
        out["seconds"] = round(time.monotonic() - t0, 2)
        return out
    cache = cache or assets.default_cache_dir()
    # Members must be made from the template (the daemon checks): egress as the pool was declared.
    egress_was = os.environ.get("DRUMS_OSWORLD_EGRESS")
    os.environ["DRUMS_OSWORLD_EGRESS"] = "1" if view["template"].get("egress") else "0"
    root = tempfile.mkdtemp(prefix="drums-pool-")
    envs: list = []
    copies: list[dict] = []
    try:

        def setup_one() -> Any:
            d = tempfile.mkdtemp(dir=root)
            font = assets.materialize(cache, task, d)
            run = dict(task, config=assets.font_steps(font) + list(task.get("config") or [])) if font else task
            env = _env(d, image)
            envs.append(env)
            env.reset(task_config=run)
            return env

        def add(sid: str, origin: str) -> None:
            try:
                client.request("POST", f"/v1/pools/{name}/members", json={"session": sid, "origin": origin})
            except BaseException:
                destroy_quietly(client, sid)  # detached from its env: nobody else would destroy it
                raise
            out["added"].append({"session": sid, "origin": origin})

        t1 = time.monotonic()
        seed = setup_one()
        out["setup_s"] = round(time.monotonic() - t1, 2)
        origin = "setup"
        if need > 1:
            for mode in modes:
                t2 = time.monotonic()
                try:
                    copies = seed.provider.fork(need - 1, mode)
                except errors.DrumsError as e:  # refused: 409 memory_fork_refused, 501 unavailable, ...
                    out["notes"].append(f"fork {mode}: {e.code}: {str(e.message)[:300]}")
                    continue
                out["fork_s"] = round(time.monotonic() - t2, 2)
                origin = f"fork-{mode}"
                break
            if copies and origin == "fork-disk":
                dirs = [tempfile.mkdtemp(dir=root) for _ in copies]
                for d in dirs:
                    assets.materialize(cache, task, d, fonts=False)
                with concurrent.futures.ThreadPoolExecutor(max_workers=len(copies)) as ex:
                    futs = [ex.submit(_replay, copy.deepcopy(task), c, dirs[i], image) for i, c in enumerate(copies)]
                    copies = []  # each replay owns its copy now: added below, or destroyed by it on failure
                    done = []
                    for f in futs:
                        try:
                            done.append(f.result())
                        except Exception as e:  # one copy that would not come up: the pool is short by one
                            out["notes"].append(f"replay: {type(e).__name__}: {str(e)[:300]}")
                for i, sid in enumerate(done):
                    try:
                        add(sid, origin)
                    except BaseException:
                        for rest in done[i + 1 :]:
                            destroy_quietly(client, rest)
                        raise
            elif copies:
                for c in copies:
                    add(c["id"], origin)
                copies = []
            else:  # no fork worked: one setup per member
                for _ in range(need - 1):
                    add(_detach(setup_one()), "setup")
        out["origin"] = origin
        add(_detach(seed), "setup")
    finally:
        for env in envs:
            if env.provider.session is not None:
                try:
                    env.close()
                except Exception as e:
                    out["notes"].append(f"close: {e}")
        for c in copies:
            destroy_quietly(client, c["id"])
        shutil.rmtree(root, ignore_errors=True)
        if egress_was is None:
            os.environ.pop("DRUMS_OSWORLD_EGRESS", None)
        else:
            os.environ["DRUMS_OSWORLD_EGRESS"] = egress_was
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out


def pool_main(argv: list[str]) -> int:
    """``drums osworld pool TASK --name N --size K``: declare, fill, and with --watch keep filling."""
    import argparse

    from .osworld import load_tasks

    ap = argparse.ArgumentParser(prog="drums osworld pool", description="A pool of this task already set up.")
    ap.add_argument("task")
    ap.add_argument("--name", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--image", default=None)
    ap.add_argument("--allow-internet", action="store_true")
    ap.add_argument("--watch", type=float, default=None)
    a = ap.parse_args(argv)
    [(_src, task)] = load_tasks([a.task])
    if isinstance(task, Exception):
        print(f"drums osworld pool: {task}", file=sys.stderr)
        return 2
    try:
        view = declare(a.name, task, a.size, cache=a.cache, image=a.image, allow_internet=a.allow_internet)
    except errors.DrumsError as e:
        print(f"drums osworld pool: {e.code}: {e.message}", file=sys.stderr)
        return 1
    print(json.dumps({"declared": view}), flush=True)
    while True:
        print(json.dumps({"fill": fill(a.name, task, cache=a.cache)}), flush=True)
        if a.watch is None:
            return 0
        time.sleep(a.watch)


if __name__ == "__main__":
    # The bench of task pools is sdk/python/bench/osworld_pool_bench.py (not shipped).
    if len(sys.argv) > 1 and sys.argv[1] == "pool":
        sys.exit(pool_main(sys.argv[2:]))
    print("usage: python -m drums.osworld_pool pool TASK --name N --size K", file=sys.stderr)
    sys.exit(2)
