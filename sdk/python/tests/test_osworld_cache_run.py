"""`drums osworld run` with the asset cache, end to end on a private daemon (the `daemon` fixture):
real OSWorld `os` tasks (from ../shared/osworld-tasks, never copied into the repo) whose input files
this test makes itself, in the cache layout, served by a loopback stand-in for OSWorld's file store.

- cache tasks set up and score 0.0 before acting, and 1.0 after an oracle typed into a terminal;
- bad input is a per-task error and the run goes on: a half-filled cache, a file of the wrong size,
  a malformed task, a task for an app the image lacks; a bad --osworld-src is refused at once;
- the shared cache is byte-for-byte the same after the runs;
- --osworld-src uses the checkout's desktop_env, and `drums osworld exec` runs an OSWorld-style
  multi-process script started with --provider_name drums (a fake checkout made here from the
  installed desktop-env, with one getter added)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from drums import osworld_assets as assets

from _data import missing_tasks, need, osworld_tasks
from osworld_store import Store

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"
TASKS = osworld_tasks() / "os"


@pytest.fixture(autouse=True, scope="module")
def _task_data():
    need(missing_tasks("os"))  # a skip outside CI, a failure under CI=true


PHOTOS = "23393935-50c7-4a86-aeea-2b78fd089c5c"  # copy the .jpg files out of a photo tree
PERMS = "4d117223-a354-47fb-8b45-62ab1390a95f"  # chmod 644 every regular file (setup.sh, eval.sh)
TRASH = "5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"  # a .webp poster in the trash
HALF = "5c1075ca-bb34-46a3-a7a0-029bd7463e79"  # its setup.sh is never put in the cache
WRONG = "6f56bf42-85b8-4fbb-8e06-6c44960184ba"  # its setup.sh has the wrong size

SETUP_SH = """#!/bin/bash
# Made by the test, as the task's author would: a tree of files with assorted modes.
mkdir -p testDir/a/b testDir/c
for f in testDir/x.txt testDir/a/y.sh testDir/a/b/z.md testDir/c/w.bin; do echo "$f" > "$f"; done
chmod 755 testDir/x.txt; chmod 600 testDir/a/y.sh; chmod 777 testDir/a/b/z.md; chmod 640 testDir/c/w.bin
"""
EVAL_SH = """#!/bin/bash
bad=$(find testDir -type f ! -perm 644 | wc -l)
n=$(find testDir -type f | wc -l)
if [ "$n" -eq 4 ] && [ "$bad" -eq 0 ]; then echo "All files have the correct permissions."; else echo "$bad of $n files are wrong."; fi
"""


def image_bytes(fmt: str, color) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(b, format=fmt)
    return b.getvalue()


def load(tid: str) -> dict:
    return json.loads((TASKS / f"{tid}.json").read_text())


def digest(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cli(args: list[str], daemon, cache: Path, **env) -> subprocess.CompletedProcess:
    e = {**os.environ, "DRUMS_URL": daemon.url, "DRUMS_TOKEN": daemon.token, "DRUMS_OSWORLD_CACHE": str(cache), **env}
    return subprocess.run([str(DRUMS), "osworld", *args], capture_output=True, text=True, env=e, timeout=900)


# Oracle actions, sent through env.step: keys typed into a terminal, as an agent would, each
# waiting (with a deadline) for what it needs to see instead of sleeping a fixed time.
WAIT_TERMINAL = textwrap.dedent("""
    import subprocess, time
    def terminal_up():
        out = subprocess.run(['wmctrl', '-l'], capture_output=True, text=True).stdout
        return any('Terminal' in l or 'user@' in l for l in out.splitlines())
    if not terminal_up():
        pyautogui.hotkey('ctrl', 'alt', 't')
    deadline = time.time() + 60
    while not terminal_up():
        assert time.time() < deadline, 'no terminal window'
        time.sleep(0.2)
    subprocess.run(['wmctrl', '-a', 'Terminal'])
    time.sleep(0.5)
""")


def typed(cmd: str, until: str) -> str:
    return WAIT_TERMINAL + textwrap.dedent(f"""
        pyautogui.write({cmd!r}, interval=0.02); pyautogui.press('enter')
        deadline = time.time() + 60
        while subprocess.run(['bash', '-c', {until!r}]).returncode != 0:
            assert time.time() < deadline, 'the command did not take effect'
            time.sleep(0.2)
    """)


ORACLE = {
    PHOTOS: [
        typed(
            "find ~/Desktop/photos -name '*.jpg' -exec cp {} ~/Desktop/cpjpg/ \\;",
            "test $(ls ~/Desktop/cpjpg | wc -l) -eq 4",
        )
    ],
    PERMS: [typed("find . -type f -exec chmod 644 {} +", 'test -z "$(find ~/testDir -type f ! -perm 644)"')],
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The shared cache, filled the way a user would: `assets fetch` from a mirror (here a loopback store)."""
    base = tmp_path_factory.mktemp("osw-cache")
    cache, store = base / "cache", Store(str(base / "store"))
    try:
        photos = load(PHOTOS)
        colors = iter([(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200)])
        for st in photos["config"]:
            if st["type"] == "download":
                for f in st["parameters"]["files"]:
                    store.put(f["url"], image_bytes("PNG" if f["path"].endswith(".png") else "JPEG", next(colors)))
        perms = load(PERMS)
        for st in perms["config"] + perms["evaluator"]["postconfig"]:
            if st["type"] == "download":
                for f in st["parameters"]["files"]:
                    store.put(f["url"], (SETUP_SH if f["path"] == "setup.sh" else EVAL_SH).encode())
        trash = load(TRASH)
        store.put(trash["config"][0]["parameters"]["files"][0]["url"], image_bytes("WEBP", (120, 20, 160)))
        wrong = load(WRONG)
        for st in wrong["config"] + wrong["evaluator"].get("postconfig", []):
            if st["type"] == "download":
                for f in st["parameters"]["files"]:
                    store.put(f["url"], b"#!/bin/bash\nmkdir -p dir1 dir2 dir3; echo hi > file1\n")
        ids = [PHOTOS, PERMS, TRASH, WRONG]
        r = subprocess.run(
            [
                str(DRUMS),
                "osworld",
                "assets",
                "fetch",
                *[str(TASKS / f"{t}.json") for t in ids],
                "--cache",
                str(cache),
                "--mirror",
                store.url,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        # The wrong-size file: its bytes changed after the fetch recorded the size.
        w = [a for a in assets.task_assets(wrong) if a.kind == "download"][0]
        with open(cache / w.rel, "ab") as f:
            f.write(b"# truncated or altered\n")
        yield cache
    finally:
        store.close()


def test_cache_tasks_score_0_before_and_1_after_acting_and_bad_input_is_per_task(daemon, shared, tmp_path):
    before = digest(shared)
    bad = tmp_path / "malformed.json"
    bad.write_text('{"id": "m", "instruction": ')
    noapp = tmp_path / "noapp.json"
    noapp.write_text(
        json.dumps(
            {
                "id": "drums-needs-vscode",
                "instruction": "x",
                "related_apps": ["vs_code"],
                "config": [],
                "evaluator": {
                    "func": "exact_match",
                    "result": {"type": "vm_command_line", "command": "echo a", "shell": True},
                    "expected": {"type": "rule", "rules": {"expected": "a\n"}},
                },
            }
        )
    )
    files = [TASKS / f"{t}.json" for t in (PHOTOS, PERMS, TRASH, HALF, WRONG)] + [bad, noapp]
    out = tmp_path / "r.json"
    r = cli(["run", *map(str, files), "--parallel", "2", "--out", str(out)], daemon, shared)
    assert r.returncode == 0, r.stderr
    res = {x["task"]: x for x in json.loads(out.read_text())["results"]["tasks"]}
    for t in (PHOTOS, PERMS, TRASH):
        assert res[t]["setup_ok"] and res[t]["score"] == 0.0, res[t]
    assert (
        res[HALF]["score"] is None
        and "not in the asset cache" in res[HALF]["error"]
        and all(f["url"] in res[HALF]["error"] for f in load(HALF)["config"][0]["parameters"]["files"])
    )
    assert res[HALF]["seconds"] < 5, res[HALF]
    assert res[WRONG]["score"] is None and "bytes" in res[WRONG]["error"] and "bad file" in res[WRONG]["error"]
    assert "malformed task JSON" in res["malformed.json"]["error"]
    assert res["drums-needs-vscode"]["setup_ok"] is False and "lacks the app" in res["drums-needs-vscode"]["error"]
    # With the oracle: actions in a terminal, through env.step, score 1.0 through the real evaluator.
    orc = tmp_path / "oracle.json"
    orc.write_text(json.dumps(ORACLE))
    r = cli(
        [
            "run",
            str(TASKS / f"{PHOTOS}.json"),
            str(TASKS / f"{PERMS}.json"),
            "--parallel",
            "2",
            "--oracle",
            str(orc),
            "--out",
            str(out),
            "--record",
        ],
        daemon,
        shared,
    )
    assert r.returncode == 0, r.stderr
    # --record: each attempt recorded, its score attached to its episode (the session is gone; the episode stays).
    from drums import Client

    with Client(daemon.url, daemon.token) as c:
        for x in json.loads(out.read_text())["results"]["tasks"]:
            assert x["score"] == 1.0, x
            ep = x["episode"]
            assert ep and "error" not in ep, x
            summary = c.episodes.get(ep["session"], ep["generation"], limit=1)["episode"]
            assert summary["outcome"]["reward"] == 1.0 and summary["outcome"]["outcome"] == "success", summary
            assert summary["outcome"]["details"] == {"task": x["task"]}
            assert summary["steps"] >= 1 and summary["record"] == {"frames": 2, "a11y": True}, summary
    # No run wrote into the shared cache (vm_file outputs and desktop_env's writes went to per-task copies).
    assert digest(shared) == before


def test_bad_osworld_src_is_refused_at_once(daemon, shared, tmp_path):
    (tmp_path / "desktop_env").mkdir()
    r = cli(["run", "--osworld-src", str(tmp_path), str(TASKS / f"{TRASH}.json")], daemon, shared)
    assert r.returncode == 2 and "is not an OSWorld checkout" in r.stderr and "desktop_env/desktop_env.py" in r.stderr


def test_checkout_whose_desktop_env_cannot_be_imported_says_why(daemon, shared, tmp_path):
    # It has the files of a checkout, but importing its desktop_env fails (a requirement not installed).
    for f in (
        "desktop_env/desktop_env.py",
        "desktop_env/evaluators/metrics/__init__.py",
        "desktop_env/evaluators/getters/__init__.py",
    ):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    (tmp_path / "desktop_env/__init__.py").write_text("import drums_test_no_such_requirement\n")
    r = cli(["run", "--osworld-src", str(tmp_path), str(TASKS / f"{TRASH}.json")], daemon, shared)
    assert r.returncode == 2, r.stderr
    assert f"cannot import desktop_env from --osworld-src {tmp_path}" in r.stderr, r.stderr
    assert "ModuleNotFoundError: No module named 'drums_test_no_such_requirement'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def fake_checkout(tmp_path_factory):
    """A tiny OSWorld checkout: the installed desktop-env package plus a getter 1.0.2 lacks, and a
    run script shaped like OSWorld's run_multienv.py (fixed --provider_name choices, spawned workers)."""
    import desktop_env

    root = tmp_path_factory.mktemp("osworld-src")
    shutil.copytree(
        os.path.dirname(desktop_env.__file__), root / "desktop_env", ignore=shutil.ignore_patterns("__pycache__")
    )
    with open(root / "desktop_env/evaluators/getters/__init__.py", "a") as f:
        f.write("\n\ndef get_drums_checkout_marker(env, config):\n    return 'from the checkout'\n")
    (root / "scripts/python").mkdir(parents=True)
    (root / "scripts/python/run_fake.py").write_text(
        textwrap.dedent("""
        import argparse, json, multiprocessing, sys
        def worker(provider, task, out):
            from desktop_env.desktop_env import DesktopEnv
            env = DesktopEnv(provider_name=provider, action_space="pyautogui", require_a11y_tree=False)
            try:
                env.reset(task_config=task)
                score = env.evaluate()
            finally:
                env.close()
            import desktop_env
            open(out, "w").write(json.dumps({"score": score, "desktop_env": desktop_env.__file__}))
        if __name__ == "__main__":
            ap = argparse.ArgumentParser()
            ap.add_argument("--provider_name", type=str, default="docker", choices=["aws", "vmware", "docker"])
            ap.add_argument("--task"); ap.add_argument("--out")
            a = ap.parse_args()
            task = json.load(open(a.task))
            p = multiprocessing.get_context("spawn").Process(target=worker, args=(a.provider_name, task, a.out))
            p.start(); p.join()
            sys.exit(p.exitcode)
    """)
    )
    return root


MARKER_TASK = {
    "id": "drums-checkout-marker",
    "instruction": "x",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "drums_checkout_marker"},
        "expected": {"type": "rule", "rules": {"expected": "from the checkout"}},
    },
}


def test_osworld_src_uses_the_checkouts_desktop_env(daemon, shared, fake_checkout, tmp_path):
    tf = tmp_path / "marker.json"
    tf.write_text(json.dumps(MARKER_TASK))
    out = tmp_path / "r.json"
    r = cli(["run", str(tf), "--out", str(out)], daemon, shared)  # the installed desktop-env lacks the getter
    assert r.returncode == 0, r.stderr
    x = json.loads(out.read_text())["results"]["tasks"][0]
    assert x["score"] is None and "drums_checkout_marker" in (x["error"] or ""), x
    r = cli(["run", "--osworld-src", str(fake_checkout), str(tf), "--out", str(out)], daemon, shared)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    assert rec["results"]["tasks"][0]["score"] == 1.0, rec["results"]["tasks"][0]
    assert rec["config"]["desktop_env"] == str(fake_checkout / "desktop_env")


def test_exec_runs_an_osworld_script_with_provider_drums(daemon, shared, fake_checkout, tmp_path):
    tf = tmp_path / "marker.json"
    tf.write_text(json.dumps(MARKER_TASK))
    out = tmp_path / "score.json"
    e = {**os.environ, "DRUMS_URL": daemon.url, "DRUMS_TOKEN": daemon.token}
    r = subprocess.run(
        [
            str(DRUMS),
            "osworld",
            "exec",
            "scripts/python/run_fake.py",
            "--provider_name",
            "drums",
            "--task",
            str(tf),
            "--out",
            str(out),
        ],
        cwd=fake_checkout,
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(out.read_text())
    assert got["score"] == 1.0 and got["desktop_env"].startswith(str(fake_checkout)), got


def test_font_pack_from_the_cache_is_installed_for_impress_tasks(daemon, tmp_path):
    """OSWorld's font pack goes through the cache: `assets fetch` gets it for an Impress task, and
    the run unzips it into the session's /usr/share/fonts before the task's own setup."""
    import zipfile
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    family = "DrumsTestFont" + os.urandom(3).hex()
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder([".notdef", "A"])
    fb.setupCharacterMap({65: "A"})
    pen = TTGlyphPen(None)
    pen.moveTo((0, 0))
    pen.lineTo((500, 0))
    pen.lineTo((250, 700))
    pen.closePath()
    fb.setupGlyf({".notdef": TTGlyphPen(None).glyph(), "A": pen.glyph()})
    fb.setupHorizontalMetrics({".notdef": (500, 0), "A": (500, 0)})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": family, "styleName": "Regular"})
    fb.setupOS2()
    fb.setupPost()
    ttf, zbuf = io.BytesIO(), io.BytesIO()
    fb.save(ttf)
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("fonts/DrumsTest-Regular.ttf", ttf.getvalue())
    store = Store(str(tmp_path / "store"))
    cache = tmp_path / "cache"
    try:
        store.put(assets.FONTS_URL, zbuf.getvalue())
        tf = tmp_path / "impress.json"
        tf.write_text(
            json.dumps(
                {
                    "id": "drums-font-pack",
                    "instruction": "x",
                    "snapshot": "libreoffice_impress",
                    "config": [],
                    "evaluator": {
                        "func": "check_include_exclude",
                        "result": {"type": "vm_command_line", "command": "fc-list : family", "shell": True},
                        "expected": {"type": "rule", "rules": {"include": [family], "exclude": []}},
                    },
                }
            )
        )
        out = tmp_path / "r.json"
        r = cli(["run", str(tf), "--out", str(out)], daemon, cache)  # no font pack cached yet: a warning, and no font
        assert r.returncode == 0, r.stderr
        x = json.loads(out.read_text())["results"]["tasks"][0]
        assert x["score"] == 0.0 and any("font pack" in w for w in x["warnings"]), x
        r = cli(["assets", "fetch", str(tf), "--mirror", store.url], daemon, cache)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (cache / assets.FONTS_REL).is_file()
        r = cli(["run", str(tf), "--out", str(out)], daemon, cache)
        assert r.returncode == 0, r.stderr
        x = json.loads(out.read_text())["results"]["tasks"][0]
        assert x["score"] == 1.0 and x["warnings"] == [], x
    finally:
        store.close()


def test_group_runs_use_the_cache(daemon, shared, tmp_path):
    """`--group N` reads the shared cache as plain runs do: the set-up member's setup and every
    member's evaluator (PERMS' postconfig downloads eval.sh) are served from per-member copies; a
    half-filled cache is refused at once; nothing is written into the shared cache."""
    before = digest(shared)
    orc = tmp_path / "oracle.json"
    orc.write_text(json.dumps({PERMS: ORACLE[PERMS]}))
    out = tmp_path / "g.json"
    r = cli(
        ["run", str(TASKS / f"{PERMS}.json"), str(TASKS / f"{HALF}.json"), "--group", "2", "--oracle", str(orc)]
        + ["--out", str(out)],
        daemon,
        shared,
    )
    assert r.returncode == 0, r.stderr
    res = {x["task"]: x for x in json.loads(out.read_text())["results"]["tasks"]}
    g = res[PERMS]
    assert g["setup_ok"] and g["error"] is None, g
    assert [m["origin"] for m in g["group"]["members"]] == ["setup", "fork"], g
    for m in g["group"]["members"]:
        assert m["score"] == 1.0, m
    h = res[HALF]
    assert h["score"] is None and "not in the asset cache" in h["error"] and h["seconds"] < 5, h
    assert digest(shared) == before
