"""The observation measures of OSWorld on Drums, per app, as its users run it (``drums bench a11y-osworld``,
bench/a11y-osworld-bench.ts, runs this against a private daemon):

- **first observation after reset**: a checkout's own ``DesktopEnv`` (``provider_name="drums"``,
  ``require_a11y_tree=True``, 1920x1080 unless told) resets to one task of the app's domain, ``rounds`` times; the
  observation ``reset()`` itself ends with (``_get_obs()``: the screenshot, then the tree, through the guest
  contract) is timed call by call, with the tree's size and the applications in it. That observation is taken the
  moment the setup returns, before the app may be up; the record also has the time until the app's window is up
  and until the app is in the tree (LibreOffice joins it seconds after its window maps).
- **the tree with the app's file open**: once the app is in the tree, ``reads`` reads of ``/accessibility`` in a
  row (alone), then the same in ``sessions`` sessions of that app at once (a DesktopEnv each, all reading each
  round together).

Each app's task is the first of its domain (by file name, those starting the app alone first) that needs no web and
no account, whose setup starts the app, and whose files (from OSWorld's file store) get stand-ins (drums.osworld_standins) in a test cache of the
run's own. ``os`` has no task that starts an app: its task gets one more setup step that launches gnome-terminal
(the record says so). VS Code is absent from the image and not measured."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Optional

#: app -> (domain, the app name of drums.osworld_apps, what its application is called in the tree)
APPS: dict[str, tuple[str, str, str]] = {
    "chrome": ("chrome", "chrome", r"chrom"),
    "vlc": ("vlc", "vlc", r"vlc"),
    "calc": ("libreoffice_calc", "libreoffice", r"soffice|libreoffice"),
    "writer": ("libreoffice_writer", "libreoffice", r"soffice|libreoffice"),
    "impress": ("libreoffice_impress", "libreoffice", r"soffice|libreoffice"),
    "gimp": ("gimp", "gimp", r"gimp"),
    "thunderbird": ("thunderbird", "thunderbird", r"thunderbird"),
    "os": ("os", "terminal", r"terminal"),
}
TERMINAL_STEP = {"type": "launch", "parameters": {"command": ["gnome-terminal"]}}


def quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    q = lambda p: s[min(len(s) - 1, max(0, int(round(p * (len(s) - 1)))))]  # noqa: E731 (nearest rank)
    return {"n": len(s), "p50": round(q(0.5), 3), "p99": round(q(0.99), 3), "max": round(s[-1], 3)}


def tree_facts(tree: Any) -> dict:
    if not isinstance(tree, str) or not tree:
        return {"chars": 0, "nodes": 0, "apps": []}
    try:
        root = ET.fromstring(tree)
    except ET.ParseError:
        return {"chars": len(tree), "nodes": None, "apps": [], "error": "not XML"}
    nodes = sum(1 for _ in root.iter())
    apps = sorted({str(a.get("name")) for a in root.iter() if a.tag.endswith("application")})
    return {"chars": len(tree), "nodes": nodes, "apps": apps}


def pick_task(checkout: str, app: str, cache: str) -> tuple[Optional[dict], str]:
    """The app's task (stand-ins made into ``cache``), or None and why not."""
    from drums import osworld as ow
    from drums import osworld_standins as standins
    from drums.osworld_apps import expected_apps

    domain, app_name, _ = APPS[app]
    folder = os.path.join(checkout, "evaluation_examples", "examples", domain)
    if not os.path.isdir(folder):
        return None, f"no {folder}"
    tried = 0
    tasks = [t for _src, t in sorted(ow.load_tasks([folder]), key=lambda x: x[0]) if not isinstance(t, Exception)]
    # The app alone first (a vlc task that also opens a PDF in evince measures both).
    tasks.sort(key=lambda t: expected_apps(t) != [app_name])
    for task in tasks:
        needs = ow.task_needs(task)
        if needs["web"] or needs["account"] or needs["vs_code"]:
            continue
        if app != "os" and app_name not in expected_apps(task):
            continue
        tried += 1
        try:
            made = standins.make_standins(cache, [task])
        except standins.StandinError:
            continue
        if made["failed"]:
            continue
        refused, _ = ow.cache_preflight(task, cache, False)
        if refused:
            continue
        if app == "os":
            task = dict(task, config=list(task.get("config") or []) + [TERMINAL_STEP])
        return task, ""
    return (
        None,
        f"none of the {tried} task(s) of {domain} that start the app without the web could be set up from stand-ins",
    )


def _time_controller_calls() -> None:
    """Each PythonController keeps its last screenshot and tree call, timed, in ``_drums_calls`` (idempotent)."""
    from desktop_env.controllers.python import PythonController

    for name in ("get_screenshot", "get_accessibility_tree"):
        orig = getattr(PythonController, name)
        if getattr(orig, "_drums_timed", False):
            continue

        def timed(self, *a, _orig=orig, _name=name, **kw):
            t = time.monotonic()
            out = _orig(self, *a, **kw)
            self.__dict__.setdefault("_drums_calls", {})[_name] = (time.monotonic() - t, out)  # the last of each
            return out

        timed._drums_timed = True  # type: ignore[attr-defined]
        setattr(PythonController, name, timed)


class Env:
    """One DesktopEnv on the drums provider whose controller calls are timed."""

    def __init__(self, cache: str, screen: tuple[int, int]):
        from desktop_env.desktop_env import DesktopEnv

        from drums import osworld_assets as assets

        _time_controller_calls()
        self.base = tempfile.mkdtemp(prefix="observe-")
        self.cache = cache
        self.assets = assets
        self.env = DesktopEnv(
            provider_name="drums",
            action_space="pyautogui",
            require_a11y_tree=True,
            screen_size=screen,
            cache_dir=self.base,
        )
        self.sid = self.env.provider.session["id"]

    def reset(self, task: dict) -> dict:
        """reset() to the task; what its closing observation took and held."""
        self.assets.materialize(self.cache, task, self.base)
        self.env.controller.__dict__["_drums_calls"] = {}
        t0 = time.monotonic()
        self.env.reset(task_config=task)
        reset_s = time.monotonic() - t0
        # reset() makes a new controller when it reverts the session (desktop_env's _start_emulator).
        calls = self.env.controller.__dict__.get("_drums_calls", {})
        shot = calls.get("get_screenshot")
        tree = calls.get("get_accessibility_tree")
        return {
            "reset_s": round(reset_s, 3),
            "screenshot_s": round(shot[0], 3) if shot else None,
            "screenshot_bytes": len(shot[1]) if shot and isinstance(shot[1], (bytes, bytearray)) else None,
            "tree_s": round(tree[0], 3) if tree else None,
            "observation_s": round(shot[0] + tree[0], 3) if shot and tree else None,
            **{f"tree_{k}": v for k, v in tree_facts(tree[1] if tree else None).items()},
        }

    def read_tree(self) -> tuple[float, dict]:
        t = time.monotonic()
        tree = self.env.controller.get_accessibility_tree()
        return time.monotonic() - t, tree_facts(tree)

    def wait_up(self, app: str, timeout: float) -> dict:
        """Seconds until the app's window is up, then from there until a tree read holding its application returns
        (None: not by timeout)."""
        from drums.osworld_apps import wait_for_app_windows

        t0 = time.monotonic()
        _, missing = wait_for_app_windows(self.env.provider.handle(), [APPS[app][1]], timeout)
        out: dict = {"window_s": None if missing else round(time.monotonic() - t0, 2), "in_tree_s": None}
        t1 = time.monotonic()
        while time.monotonic() - t1 < timeout:
            _, facts = self.read_tree()
            if any(re.search(APPS[app][2], a, re.I) for a in facts["apps"]):
                out["in_tree_s"] = round(time.monotonic() - t1, 2)
                out["in_tree_after_reset_apps"] = facts["apps"]
                break
            time.sleep(0.5)
        return out

    def close(self) -> None:
        try:
            self.env.close()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def measure_app(
    app: str, task: dict, cache: str, screen: tuple[int, int], rounds: int, reads: int, sessions: int, wait: float,
    progress: Callable[[str], None],
) -> dict:  # fmt: skip
    out: dict = {"task": task.get("id"), "domain": APPS[app][0], "added_terminal": app == "os", "resets": []}
    env = Env(cache, screen)
    try:
        for i in range(rounds):
            r = env.reset(task)
            r.update(env.wait_up(app, wait))
            out["resets"].append(r)
            progress(
                f"{app} reset {i + 1}/{rounds}: observation {r['observation_s']} s (tree {r['tree_s']} s, {r['tree_chars']} chars), window {r['window_s']} s, in tree {r['in_tree_s']} s"
            )
        rs = out["resets"]
        out["first_observation"] = {
            "observation_s": quantiles([r["observation_s"] for r in rs if r["observation_s"] is not None]),
            "screenshot_s": quantiles([r["screenshot_s"] for r in rs if r["screenshot_s"] is not None]),
            "tree_s": quantiles([r["tree_s"] for r in rs if r["tree_s"] is not None]),
            "tree_chars": quantiles([r["tree_chars"] for r in rs]),
            "app_in_first_tree": sum(1 for r in rs if any(re.search(APPS[app][2], a, re.I) for a in r["tree_apps"])),
            "window_s": quantiles([r["window_s"] for r in rs if r["window_s"] is not None]),
            "in_tree_s": quantiles([r["in_tree_s"] for r in rs if r["in_tree_s"] is not None]),
        }
        # Alone: reads in a row with the file open and the app in the tree.
        ts, facts = [], {}
        for _ in range(reads):
            t, facts = env.read_tree()
            ts.append(t)
        out["alone"] = {
            "read_s": quantiles(ts),
            "chars": facts.get("chars"),
            "nodes": facts.get("nodes"),
            "apps": facts.get("apps"),
        }
        progress(f"{app} alone: {out['alone']['read_s']} {facts.get('chars')} chars")
    finally:
        env.close()
    if sessions > 0:
        out["concurrent"] = concurrent(app, task, cache, screen, reads, sessions, wait, progress)
    return out


def concurrent(
    app: str, task: dict, cache: str, screen: tuple[int, int], reads: int, n: int, wait: float, progress
) -> dict:
    envs: list[Optional[Env]] = [None] * n
    ups: list[dict] = [{}] * n
    errors: list[str] = []

    def up(i: int) -> None:
        try:
            e = Env(cache, screen)
            envs[i] = e
            e.reset(task)
            ups[i] = e.wait_up(app, wait)
        except Exception as x:
            errors.append(f"session {i}: {type(x).__name__}: {x}")

    try:
        th = [threading.Thread(target=up, args=(i,)) for i in range(n)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        live = [e for e in envs if e is not None]
        ts: list[float] = []
        sizes: list[int] = []
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, len(live))) as pool:
            for _ in range(reads):
                got = list(pool.map(lambda e: e.read_tree(), live))  # every session's read at once
                ts += [g[0] for g in got]
                sizes += [g[1]["chars"] for g in got]
        res = {
            "sessions": n,
            "up": len(live),
            "app_in_tree": sum(1 for u in ups if u.get("in_tree_s") is not None),
            "read_s": quantiles(ts),
            "chars": quantiles([float(s) for s in sizes]),
            "errors": errors,
        }
        progress(f"{app} {n} at once: {res['read_s']}")
        return res
    finally:
        for e in envs:
            if e is not None:
                try:
                    e.close()
                except Exception:
                    pass


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m osworld_observe")
    ap.add_argument("--checkout", required=True)
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--rounds", type=int, default=20, help="resets per app")
    ap.add_argument("--reads", type=int, default=20, help="tree reads in a row (alone) and rounds (at once)")
    ap.add_argument("--sessions", type=int, default=10, help="sessions of each app read at once (0: skip)")
    ap.add_argument("--screen", default="1920x1080")
    ap.add_argument("--wait", type=float, default=120, help="seconds to wait for a window and for the tree")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    # After the arguments: --help works where desktop_env is not importable yet (the fast test tier, before set-up
    # of OSWorld's checkout); drums.osworld registers its provider with desktop_env at import.
    from drums import osworld as ow

    err = ow.check_osworld_src()
    if err:
        ap.error(err)
    apps = a.apps.split(",")
    for x in apps:
        if x not in APPS:
            ap.error(f"--apps: {x} is not one of {', '.join(APPS)} (vs_code is not in the image)")
    w, h = (int(v) for v in a.screen.split("x"))

    def progress(m: str) -> None:
        print(m, flush=True)

    cache = tempfile.mkdtemp(prefix="drums-observe-standins-", dir="/var/tmp")
    results: dict = {}
    try:
        for app in apps:
            task, why = pick_task(a.checkout, app, cache)
            if task is None:
                results[app] = {"skipped": why}
                progress(f"{app}: skipped: {why}")
                continue
            try:
                results[app] = measure_app(app, task, cache, (w, h), a.rounds, a.reads, a.sessions, a.wait, progress)
            except Exception as e:
                results[app] = {"task": task.get("id"), "error": f"{type(e).__name__}: {e}"}
                progress(f"{app}: ERROR {type(e).__name__}: {e}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    out = {
        "screen": [w, h],
        "rounds": a.rounds,
        "reads": a.reads,
        "sessions": a.sessions,
        "apps": results,
        "complete": all("error" not in r and "skipped" not in r for r in results.values()),
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    return 0 if out["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
