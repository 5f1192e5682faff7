"""The OSWorld command line: ``drums osworld run|assets`` (src/osworld/run.ts) runs
``python -m drums.osworld_cli run TASKS... | assets fetch|check|standins TASKS...``.
``python -m drums.osworld ...``, the older spelling, runs this same CLI.

It sits apart from ``drums.osworld`` (the provider and one task's run) so that the provider
module never imports the group runner, which imports the provider: with the CLI inside
``drums.osworld`` that was the SDK's only import cycle (tests/test_imports.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

from ._optional import cannot_import_desktop_env

USAGE = "usage: python -m drums.osworld_cli run TASKS... | assets fetch|check|standins TASKS..."


def main(argv: list[str]) -> int:
    cmds = {"run": run_main, "assets": assets_main}
    if not argv or argv[0] not in cmds:
        print(USAGE, file=sys.stderr)
        return 2
    # Only `run` needs the provider; `assets` reads task files and the cache and never imports desktop_env
    # (drums.osworld_tasks), which costs tens of seconds of metric-module imports.
    if argv[0] == "run":
        try:
            from . import osworld  # noqa: F401  (registers the drums provider: imports desktop_env)
        except Exception as e:
            print(cannot_import_desktop_env(e), file=sys.stderr)
            return 2
    return cmds[argv[0]](argv[1:])


def check_osworld_src() -> Optional[str]:
    """With DRUMS_OSWORLD_SRC set (drums osworld run --osworld-src): an error unless desktop_env came from there."""
    src = os.environ.get("DRUMS_OSWORLD_SRC")
    if not src:
        return None
    import desktop_env

    where = os.path.realpath(os.path.dirname(desktop_env.__file__))
    want = os.path.realpath(os.path.join(src, "desktop_env"))
    if where != want:
        return f"--osworld-src {src}: desktop_env was imported from {where}, not from the checkout"
    return None


def run_main(argv: list[str]) -> int:
    import argparse
    import concurrent.futures
    import logging
    import shutil
    import tempfile

    from .osworld import DEFAULT_OBSERVATION, OBSERVATIONS, load_tasks, run_task
    from .osworld_assets import default_cache_dir
    from .osworld_group import run_group

    ap = argparse.ArgumentParser(
        prog="drums osworld run", description="Run OSWorld task JSONs on Drums sessions with the real desktop_env."
    )
    ap.add_argument("tasks", nargs="+", help="task JSON files or directories of them")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument(
        "--oracle", help="JSON {task_id: [pyautogui code | 'FAIL' | 'DONE' | 'WAIT', ...]} applied through env.step"
    )
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds env.step sleeps after each action")
    ap.add_argument("--allow-internet", action="store_true", help="start tasks that need the internet")
    ap.add_argument(
        "--group",
        type=int,
        default=0,
        help="GRPO groups: set each task up once, fork N-1 copies, score all N (drums.osworld_group)",
    )
    ap.add_argument(
        "--cache",
        help="the shared asset cache (default $DRUMS_OSWORLD_CACHE or $DRUMS_STATE_DIR/osworld-cache); never written by a run",
    )
    ap.add_argument(
        "--observation",
        choices=OBSERVATIONS,
        default=DEFAULT_OBSERVATION,
        help=f"what each task is observed with, as an agent of OSWorld's run.py --observation_type would be (default {DEFAULT_OBSERVATION}, run.py's)",
    )
    ap.add_argument(
        "--record",
        nargs="?",
        const=2.0,
        type=float,
        metavar="FPS",
        help="record every attempt as an episode (frames at FPS, default 2; trees kept) and attach each task's score to it (docs/episodes.md)",
    )
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.ERROR)
    err = check_osworld_src()
    if err:
        print(err, file=sys.stderr)
        return 2
    oracles: dict = {}
    if a.oracle:
        with open(a.oracle) as f:
            oracles = json.load(f)
    tasks = load_tasks(a.tasks)
    if not tasks:
        print("no task files found", file=sys.stderr)
        return 2
    asset_cache = a.cache or default_cache_dir()
    if a.allow_internet:
        # Without egress a web task's pages never load in the session, and one that checks something is
        # gone (chrome 7b6c7e24: no amazon.com cookies) scores 1.0 before acting.
        os.environ["DRUMS_OSWORLD_EGRESS"] = "1"
    if a.record is not None:
        if not 0 <= a.record <= 30:
            print("--record FPS must be within 0..30", file=sys.stderr)
            return 2
        os.environ["DRUMS_OSWORLD_RECORD"] = json.dumps({"frames": a.record, "a11y": True})
    cache_root = tempfile.mkdtemp(prefix="drums-osworld-")
    results: list[dict] = []
    n = len(tasks)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t_run = time.monotonic()
    print(f"running {n} task(s), {a.parallel} at a time, observed as {a.observation}", file=sys.stderr, flush=True)

    def write_out(done: list[dict], complete: bool) -> None:
        """The results so far (after each task, so a long run that is stopped keeps them), then all of them."""
        if not a.out:
            return
        import platform
        import desktop_env

        results = list(done)
        wall = round(time.monotonic() - t_run, 1)
        summary = {
            "tasks": n,
            "setup_ok": sum(1 for r in results if r["setup_ok"]),
            "scored_1": sum(1 for r in results if r["score"] == 1),
            "scored_0": sum(1 for r in results if r["score"] == 0),
            "not_started": sum(1 for r in results if r["score"] is None),
            "live": sum(1 for r in results if r.get("live")),
            "started_solved": sum(1 for r in results if r.get("started_solved")),
            "lost_app": sum(1 for r in results if r.get("lost")),
            "wall_seconds": wall,
            "complete": complete,
        }
        tmp = f"{a.out}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(
                {
                    "schemaVersion": 1,
                    "experiment": "osworld-tasks",
                    "started": started,
                    "config": {
                        "parallel": a.parallel,
                        "tasks": a.tasks,
                        "oracle": bool(a.oracle),
                        "pause": a.pause,
                        "allow_internet": a.allow_internet,
                        "cache": asset_cache,
                        "desktop_env": os.path.dirname(desktop_env.__file__),
                        "osworld_src": os.environ.get("DRUMS_OSWORLD_SRC"),
                        "group": a.group,
                        "observation": a.observation,
                        "record": a.record,
                    },
                    "host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version()},
                    "results": {"summary": summary, "tasks": results},
                    "notes": [
                        "wall_seconds: from the first task's start to the last task's end, tasks run through desktop_env.DesktopEnv on Drums sessions (provider drums)",
                        "live: set up, and every app its setup starts had a window after the first observation (observation_type, as OSWorld's run.py --observation_type); started_solved: scored other than 0.0 with no action; lost: apps whose window was there after setup and gone after observing",
                    ],
                },
                f,
                indent=2,
            )
        os.replace(tmp, a.out)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as ex:
            futs = {}
            for src, t in tasks:
                tid = t.get("id") if isinstance(t, dict) else None
                orc = oracles.get(tid) if (a.oracle and tid) else None
                if a.group > 0:
                    futs[
                        ex.submit(
                            run_group,
                            src,
                            t,
                            orc,
                            a.pause,
                            a.allow_internet,
                            cache_root,
                            a.group,
                            asset_cache=asset_cache,
                            observation=a.observation,
                        )
                    ] = src
                else:
                    futs[
                        ex.submit(
                            run_task, src, t, orc, a.pause, a.allow_internet, cache_root, asset_cache, a.observation
                        )
                    ] = src
            for i, fut in enumerate(concurrent.futures.as_completed(futs), 1):
                r = fut.result()
                results.append(r)
                write_out(results, False)
                status = "ok " if r["setup_ok"] else "ERR"
                lost = f"  lost after observing: {', '.join(r['lost'])}" if r.get("lost") else ""
                print(
                    f"[{i}/{n}] {status} {r['task'][:36]:36} score={r['score']} {r['seconds']}s"
                    + (f"  {r['error'][:300]}" if r["error"] else "")
                    + lost,
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    order = {src: i for i, (src, _) in enumerate(tasks)}
    results.sort(key=lambda r: order.get(r["file"], 0))
    print(f"{'task':38} {'setup':5} {'score':>5} {'time':>7}  error")
    for r in results:
        sc = "-" if r["score"] is None else f"{r['score']:.1f}"
        print(
            f"{r['task'][:38]:38} {('ok' if r['setup_ok'] else 'no'):5} {sc:>5} {r['seconds']:>6}s  {(r['error'] or '')[:100]}"
        )
    wall = round(time.monotonic() - t_run, 1)
    print(f"{n} task(s) in {wall} s at --parallel {a.parallel}", file=sys.stderr)
    write_out(results, True)
    return 0


def standins_main(argv: list[str]) -> int:
    """drums osworld assets standins TASKS... --cache DIR [--force] [--json]"""
    import argparse

    from . import osworld_standins as standins
    from .osworld_tasks import load_tasks

    ap = argparse.ArgumentParser(
        prog="drums osworld assets standins",
        description="stand-in files for every file the tasks fetch, in a test cache (docs/osworld.md, 'Stand-in files')",
    )
    ap.add_argument("tasks", nargs="+", help="task JSON files or directories of them")
    ap.add_argument("--cache", required=True, help="the test cache to fill (never the shared cache)")
    ap.add_argument("--force", action="store_true", help="remake files already there")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    tasks, bad = [], []
    for src, t in load_tasks(a.tasks):
        if isinstance(t, Exception):
            bad.append(f"{src}: {t}")
        else:
            tasks.append(t)
    try:
        res = standins.make_standins(a.cache, tasks, force=a.force)
    except standins.StandinError as e:
        print(f"drums osworld assets standins: {e}", file=sys.stderr)
        return 2
    res["failed"] = bad + res["failed"]
    if a.json:
        print(json.dumps({"cache": a.cache, **res}, indent=2))
    else:
        for f in res["failed"]:
            print(f"ERR  {f}")
        print(
            f"made {res['made']} stand-in file(s) ({res['bytes']} bytes) in {a.cache}, {res['present']} already there, "
            f"{len(res['failed'])} failed",
            file=sys.stderr,
        )
    return 1 if res["failed"] else 0


def assets_main(argv: list[str]) -> int:
    """drums osworld assets fetch|check TASKS... [--cache DIR] [--mirror URL] [--fonts] [--json]"""
    if argv[:1] == ["standins"]:
        return standins_main(argv[1:])
    import argparse

    from . import osworld_assets as assets
    from .osworld_tasks import load_tasks

    ap = argparse.ArgumentParser(prog="drums osworld assets", description="OSWorld's asset cache (docs/osworld.md)")
    ap.add_argument("action", choices=["fetch", "check"])
    ap.add_argument("tasks", nargs="+", help="task JSON files or directories of them")
    ap.add_argument("--cache", help="cache directory (default $DRUMS_OSWORLD_CACHE or $DRUMS_STATE_DIR/osworld-cache)")
    ap.add_argument(
        "--mirror",
        default=os.environ.get("DRUMS_OSWORLD_MIRROR"),
        help=f"fetch from this base URL instead of {assets.STORE}",
    )
    ap.add_argument("--fonts", action="store_true", help="include OSWorld's font pack even if no Impress task is named")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    cache = a.cache or assets.default_cache_dir()
    per_task: list[dict] = []
    todo: list = []
    for src, t in load_tasks(a.tasks):
        if isinstance(t, Exception):
            per_task.append({"file": src, "task": None, "error": str(t)})
            continue
        files = assets.task_assets(t)
        todo += files
        per_task.append({"file": src, "task": t["id"], "files": files})
    if a.fonts:
        todo.append(assets.Asset(assets.FONTS_URL, assets.FONTS_REL, "fonts"))
    fetched = None
    if a.action == "fetch":
        os.makedirs(cache, exist_ok=True)
        fetched = assets.fetch_assets(cache, todo, a.mirror)
    report = []
    bad_any = False
    for e in per_task:
        if e.get("error"):
            report.append({"file": e["file"], "task": None, "error": e["error"]})
            bad_any = True
            continue
        missing, bad, ok = [], [], 0
        for f in e["files"]:
            st, detail = assets.status(cache, f)
            if st == "ok":
                ok += 1
            elif st == "missing":
                missing.append({"url": f.url, "path": os.path.join(cache, f.rel), "detail": detail})
            else:
                bad.append({"url": f.url, "path": os.path.join(cache, f.rel), "detail": detail})
        bad_any = bad_any or bool(missing or bad)
        report.append(
            {"file": e["file"], "task": e["task"], "files": len(e["files"]), "ok": ok, "missing": missing, "bad": bad}
        )
    if a.json:
        print(json.dumps({"cache": cache, "tasks": report, "fetch": fetched}, indent=2))
    else:
        for r in report:
            if r.get("error"):
                print(f"ERR  {r['file']}: {r['error']}")
                continue
            mark = "ok  " if not (r["missing"] or r["bad"]) else "MISS"
            print(f"{mark} {r['task']}  {r['ok']}/{r['files']} file(s) cached")
            for m in r["missing"]:
                print(f"       missing {m['url']}")
            for b in r["bad"]:
                print(f"       bad     {b['detail']}")
        if fetched is not None:
            print(
                f"fetched {fetched['fetched']} file(s) ({fetched['bytes']} bytes), {fetched['present']} already cached, {len(fetched['failed'])} failed",
                file=sys.stderr,
            )
    return 1 if bad_any else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
