"""A pool of set-up OSWorld tasks, end to end on a private daemon (the `daemon` fixture): a LibreOffice
Writer task (download a .docx, open it) with its files from stand-ins in a test cache (never the shared
one) is declared as a task pool of 2, filled (one setup, then a fork), and claimed through
``DesktopEnv.reset(task_config=task)``: the claimed session has the document on the Desktop and its
Writer window up, scores 0.0, and the reset took a claim, not a setup; the env made no session of its own
before that claim. A task that cannot run here
is refused when declared, naming why. Everything is cleaned up."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import drums.osworld  # noqa: F401  (registers the provider)
from drums import Client, errors, osworld_pool
from _data import missing_tasks, need, osworld_tasks

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"
TASK = ("libreoffice_writer", "0810415c-bde4-4443-9047-d5f70165a697")  # download a .docx, open it
DOC = "/home/user/Desktop/Novels_Intro_Packet.docx"


def test_a_task_that_cannot_run_here_is_refused_when_declared(daemon, tmp_path):
    need(missing_tasks(TASK[0]))
    task = json.loads((osworld_tasks() / TASK[0] / f"{TASK[1]}.json").read_text())
    client = Client(daemon.url, daemon.token)
    name = f"p{os.getpid()}-refused"
    # Its files are not in the (empty) cache: refused by the SDK, which is where the cache is.
    with pytest.raises(errors.TaskNotRunnable) as e:
        osworld_pool.declare(name, task, 1, cache=str(tmp_path / "empty"), client=client)
    assert e.value.details["reason"] == "file_missing" and "not in the asset cache" in e.value.message
    # An app the image lacks (VS Code), and the live web: refused by the daemon (422).
    bare = {"id": "probe", "instruction": "x", "config": [], "evaluator": {"func": "infeasible"}}
    with pytest.raises(errors.TaskNotRunnable) as e:
        osworld_pool.declare(
            name, dict(bare, related_apps=["vs_code"]), 1, cache=str(tmp_path / "empty"), client=client
        )
    assert (
        e.value.status == 422 and e.value.details["reason"] == "app_missing" and e.value.details["missing"] == ["code"]
    )
    web = dict(bare, config=[{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://example.com"]}}])
    with pytest.raises(errors.TaskNotRunnable) as e:
        osworld_pool.declare(name, web, 1, cache=str(tmp_path / "empty"), client=client)
    assert e.value.status == 422 and e.value.details["reason"] == "needs_internet"
    assert all(p["name"] != name for p in client.pools.list())


def test_task_pool_fills_by_fork_and_reset_claims_a_set_up_member(daemon, tmp_path):
    need(missing_tasks(TASK[0]))
    from desktop_env.desktop_env import DesktopEnv

    from drums import osworld_assets as assets
    from drums.osworld_apps import expected_apps, wait_for_app_windows

    task_file = osworld_tasks() / TASK[0] / f"{TASK[1]}.json"
    task = json.loads(task_file.read_text())
    cache = tmp_path / "standin-cache"
    env_vars = {
        **os.environ,
        "DRUMS_URL": daemon.url,
        "DRUMS_TOKEN": daemon.token,
        "DRUMS_OSWORLD_CACHE": str(tmp_path / "shared"),
    }
    r = subprocess.run(
        [str(DRUMS), "osworld", "assets", "standins", str(task_file), "--cache", str(cache)],
        capture_output=True, text=True, env=env_vars, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    client = Client(daemon.url, daemon.token)
    name = f"p{os.getpid()}-writer"
    env = None
    try:
        view = osworld_pool.declare(name, task, 2, cache=str(cache), client=client)
        assert view["filler"] == "client" and view["task"]["apps"] == ["libreoffice"] and view["ready"] == 0
        filled = osworld_pool.fill(name, task, cache=str(cache), client=client)
        view = client.pools.get(name)
        assert view["ready"] == 2, (filled, view)
        # One setup; the other member by the first fork mode that worked (memory refused here: disk).
        assert view["fill"]["setup"] == 1 and view["fill"]["forkDisk"] + view["fill"]["forkMemory"] == 1, (filled, view)
        members = {m["session"] for m in filled["added"]}
        print(f"fill: {json.dumps(filled)}")

        claimer = tmp_path / "claimer"
        assets.materialize(str(cache), task, str(claimer), fonts=False)  # the evaluator's gold files
        listed = {s["id"] for s in client.request("GET", "/v1/sessions").json()["sessions"]}
        env = DesktopEnv(
            provider_name="drums", action_space="pyautogui", require_a11y_tree=False, cache_dir=str(claimer)
        )
        # A task pool of the env's image exists: the env makes no session up front that its first reset's claim
        # would throw away (it did: one create wasted per env); the reset makes or claims it.
        assert env.provider.session is None, "a session was made before the reset that claims"
        assert {s["id"] for s in client.request("GET", "/v1/sessions").json()["sessions"]} == listed
        t0 = time.monotonic()
        obs = env.reset(task_config=task)
        claim_s = time.monotonic() - t0
        sid = env.provider.session["id"]
        print(f"claim through DesktopEnv.reset: {claim_s:.3f} s (setup it replaces: {filled['setup_s']} s)")
        assert sid in members and obs["screenshot"], (sid, members)
        assert client.pools.get(name)["hits"] == 1
        # The set-up state is there: the document on the Desktop and its Writer window up.
        assert env.controller.get_file(DOC), "the task's document is not in the claimed session"
        _, missing = wait_for_app_windows(client.sessions.get(sid), expected_apps(task), 60)
        assert missing == [], missing
        assert float(env.evaluate()) == 0.0
        # The claimed session is the env's, and goes with it.
        env.close()
        env = None
        ids = [s["id"] for s in client.request("GET", "/v1/sessions").json()["sessions"]]
        assert sid not in ids
    finally:
        if env is not None:
            env.close()
        try:
            client.pools.delete(name)  # destroys the member still in it
        except errors.DrumsError:
            pass
    # Nothing left: the pool's last member (hidden) is destroyed too, not only the visible sessions.
    deadline = time.monotonic() + 120
    while client.host()["sessions"]["held"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.host()["sessions"]["held"] == 0
    assert all(p["name"] != name for p in client.pools.list())
