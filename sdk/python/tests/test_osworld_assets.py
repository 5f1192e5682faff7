"""The OSWorld asset cache (drums.osworld_assets): its layout is the one the real desktop_env reads,
fetch resumes and verifies sizes against a loopback store serving files made here, check reports
what is missing or wrong. No daemon needed."""

import hashlib
import io
import json
import os
import subprocess
import sys
import uuid

import pytest

# drums.osworld itself (needs_internet, the CLI) is imported by the tests that use it: importing it imports
# desktop_env, which scripts/test.sh installs after the fast tier, where the other tests here run.
from drums import osworld_assets as assets

from osworld_store import Store

U = assets.STORE + "libreoffice_calc/t1/"


def task(tid="t1", **kw):
    t = {
        "id": tid,
        "instruction": "x",
        "related_apps": ["libreoffice_calc"],
        "config": [
            {"type": "download", "parameters": {"files": [{"url": U + "in.xlsx", "path": "/home/user/in.xlsx"}]}},
            {"type": "open", "parameters": {"path": "/home/user/in.xlsx"}},
        ],
        "evaluator": {
            "func": "compare_table",
            "result": {"type": "vm_file", "path": "/home/user/in.xlsx", "dest": "in.xlsx"},
            "expected": {"type": "cloud_file", "path": U + "gold.xlsx", "dest": "gold.xlsx"},
        },
    }
    t.update(kw)
    return t


def xlsx(value) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    wb.active["A1"] = value
    b = io.BytesIO()
    wb.save(b)
    return b.getvalue()


@pytest.fixture()
def store(tmp_path):
    s = Store(str(tmp_path / "store"))
    yield s
    s.close()


def tree_digest(root) -> dict:
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def test_layout_is_desktop_envs(tmp_path, monkeypatch):
    """desktop_env itself finds the files where task_assets puts them, and fetches nothing."""
    import requests

    import drums.osworld  # noqa: F401 (as a user does first: the provider and the stand-ins of optional packages)
    from desktop_env.controllers.setup import SetupController
    from desktop_env.evaluators.getters.file import get_cloud_file

    t = task(
        config=[
            {"type": "download", "parameters": {"files": [{"url": U + "in.xlsx", "path": "/home/user/in.xlsx"}]}},
            {"type": "update_browse_history", "parameters": {"history": []}},
        ]
    )
    names = {a.rel: a for a in assets.task_assets(t)}
    assert f"t1/{uuid.uuid5(uuid.NAMESPACE_URL, U + 'in.xlsx')}_in.xlsx" in names
    assert "t1/gold.xlsx" in names and "t1/history_new.sqlite" in names
    cache = tmp_path / "cache"
    for rel in names:
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / rel).write_bytes(b"data of " + rel.encode())

    def no_net(*a, **k):
        raise AssertionError(f"desktop_env went to the network: {a}")

    uploads = []

    class R:
        status_code = 200
        text = "ok"

    monkeypatch.setattr(requests, "get", no_net)
    monkeypatch.setattr(requests, "post", lambda url, **k: uploads.append((url, k)) or R())
    sc = SetupController(vm_ip="127.0.0.1", server_port=9, cache_dir=str(cache / "t1"))
    sc._download_setup(t["config"][0]["parameters"]["files"])
    assert uploads and uploads[0][0].endswith("/setup/upload")

    class Env:
        cache_dir = str(cache / "t1")

    assert get_cloud_file(Env, t["evaluator"]["expected"]) == str(cache / "t1" / "gold.xlsx")


@pytest.mark.fast  # pure: npm run check runs it
def test_malformed_file_lists_are_task_errors():
    with pytest.raises(assets.AssetError, match="task id"):
        assets.task_assets(task(tid="../etc"))
    with pytest.raises(assets.AssetError, match="relative path"):
        assets.task_assets(
            task(evaluator={"func": "f", "expected": {"type": "cloud_file", "path": U + "x", "dest": "../../x"}})
        )
    with pytest.raises(assets.AssetError, match="URL"):
        assets.task_assets(
            task(config=[{"type": "download", "parameters": {"files": [{"url": "file:///etc/passwd", "path": "p"}]}}])
        )


@pytest.mark.fast
def test_fonts_for_impress_tasks_only():
    assert not any(a.kind == "fonts" for a in assets.task_assets(task()))
    imp = assets.task_assets(task(related_apps=["libreoffice_impress"]))
    assert [a.url for a in imp if a.kind == "fonts"] == [assets.FONTS_URL]


def test_internet_classes_without_cache_files():
    import drums.osworld as osw

    assert osw.needs_internet(task()) is None  # downloads and cloud_file come from the cache
    assert (
        osw.needs_internet({"config": [], "evaluator": {"func": "f", "result": {"type": "rule_relativeTime"}}}) is None
    )
    assert "chrome_open_tabs" in osw.needs_internet(
        {"config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://x"]}}], "evaluator": {}}
    )
    assert "googledrive_file" in osw.needs_internet(
        {"config": [], "evaluator": {"result": {"type": "googledrive_file"}}}
    )


def test_fetch_check_resume_and_sizes(tmp_path, store):
    cache = str(tmp_path / "cache")
    t = task()
    files = {U + "in.xlsx": xlsx("input"), U + "gold.xlsx": os.urandom(400_000)}
    for u, b in files.items():
        store.put(u, b)
    st = assets.check_task(cache, t)
    assert sorted(st["missing"]) == sorted(files) and st["ok"] == 0
    # The first response for gold.xlsx is cut after 300 kB; fetch resumes with a Range request.
    gold_path = "libreoffice_calc/t1/gold.xlsx"
    store.cut_after[gold_path] = 300_000
    res = assets.fetch_assets(cache, assets.task_assets(t), mirror=store.url, out=io.StringIO())
    assert res["failed"] == [] and res["fetched"] == 2
    ranges = [r for p, r in store.requests if p == gold_path]
    assert ranges[0] is None and len(ranges) == 2, store.requests
    assert ranges[1].startswith("bytes=") and 0 < int(ranges[1][6:-1]) <= 300_000, ranges
    assert open(os.path.join(cache, "t1/gold.xlsx"), "rb").read() == files[U + "gold.xlsx"]
    assert assets.check_task(cache, t) == {"missing": [], "bad": [], "ok": 2, "fonts": None}
    # A second fetch finds everything and downloads nothing.
    n = len(store.requests)
    assert assets.fetch_assets(cache, assets.task_assets(t), mirror=store.url, out=io.StringIO())["present"] == 2
    assert len(store.requests) == n
    # A file of the wrong size is reported, and fetch replaces it.
    p = os.path.join(cache, "t1/gold.xlsx")
    with open(p, "ab") as f:
        f.write(b"junk")
    st = assets.check_task(cache, t)
    assert len(st["bad"]) == 1 and "bytes" in st["bad"][0] and st["ok"] == 1
    assets.fetch_assets(cache, assets.task_assets(t), mirror=store.url, out=io.StringIO())
    assert assets.check_task(cache, t)["bad"] == []


@pytest.mark.fast
def test_fetch_without_range_support_and_missing_url(tmp_path, store):
    cache = str(tmp_path / "cache")
    t = task()
    src = store.put(U + "in.xlsx", os.urandom(5000))
    store.no_range = True
    store.cut_after["libreoffice_calc/t1/in.xlsx"] = 100
    res = assets.fetch_assets(cache, assets.task_assets(t), mirror=store.url, out=io.StringIO())
    assert res["fetched"] == 1
    assert len(res["failed"]) == 1 and "gold.xlsx" in res["failed"][0] and "404" in res["failed"][0]
    assert (
        open(os.path.join(cache, "t1", assets.task_assets(t)[0].rel.split("/")[1]), "rb").read()
        == open(src, "rb").read()
    )
    assert not os.path.exists(os.path.join(cache, "t1/gold.xlsx"))


def test_materialize_copies_not_links(tmp_path, store):
    cache = str(tmp_path / "cache")
    t = task()
    store.put(U + "in.xlsx", xlsx("input"))
    store.put(U + "gold.xlsx", xlsx("gold"))
    assets.fetch_assets(cache, assets.task_assets(t), mirror=store.url, out=io.StringIO())
    before = tree_digest(cache)
    dest = tmp_path / "run"
    assets.materialize(cache, t, str(dest))
    for f in (dest / "t1").iterdir():
        assert os.stat(f).st_nlink == 1
        f.write_bytes(b"overwritten by a run")
    assert tree_digest(cache) == before


def test_cli_check_and_fetch(tmp_path, store):
    """`python -m drums.osworld_cli assets ...` (what `drums osworld assets` runs): exit 1 and the URLs while
    missing. The first check runs the older spelling, `python -m drums.osworld assets`: the same CLI."""
    import drums.osworld as osw

    cache = str(tmp_path / "cache")
    tf = tmp_path / "t1.json"
    tf.write_text(json.dumps(task()))
    (tmp_path / "bad.json").write_text("{")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(osw.__file__))}
    cmd = [sys.executable, "-m", "drums.osworld_cli", "assets"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "drums.osworld",
            "assets",
            "check",
            str(tf),
            str(tmp_path / "bad.json"),
            "--cache",
            cache,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    good = [x for x in rep["tasks"] if x["task"] == "t1"][0]
    assert sorted(m["url"] for m in good["missing"]) == sorted([U + "in.xlsx", U + "gold.xlsx"])
    assert any("malformed" in (x.get("error") or "") for x in rep["tasks"])
    store.put(U + "in.xlsx", xlsx("input"))
    store.put(U + "gold.xlsx", xlsx("gold"))
    r = subprocess.run(
        cmd + ["fetch", str(tf), "--cache", cache, "--mirror", store.url], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fetched 2 file(s)" in r.stderr and "ok" in r.stdout
    r = subprocess.run(cmd + ["check", str(tf), "--cache", cache], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "2/2 file(s) cached" in r.stdout


def test_assets_cli_does_not_import_desktop_env(tmp_path):
    """`drums osworld assets` reads tasks and the cache only: it must not import desktop_env (its metric modules
    took ~25 s at load), so the task helpers live in drums.osworld_tasks. Run in a fresh interpreter, since this
    one imports drums.osworld (and so desktop_env) here. The names stay importable from drums.osworld."""
    import drums.osworld as osw

    tf = tmp_path / "t1.json"
    tf.write_text(json.dumps(task()))
    code = (
        "import sys\n"
        "from drums.osworld_cli import main\n"
        "rc = main(['assets', 'check', sys.argv[1], '--cache', sys.argv[2], '--json'])\n"
        "heavy = sorted(m for m in sys.modules if m == 'desktop_env' or m.startswith('desktop_env.') or m == 'drums.osworld')\n"
        "print('RC', rc, 'HEAVY', ','.join(heavy) or '-')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(osw.__file__))}
    r = subprocess.run(
        [sys.executable, "-c", code, str(tf), str(tmp_path / "cache")], capture_output=True, text=True, env=env
    )
    last = r.stdout.strip().splitlines()[-1]
    assert last == "RC 1 HEAVY -", r.stdout[-2000:] + r.stderr[-2000:]  # 1: the task's files are missing
    assert osw.load_tasks is __import__("drums.osworld_tasks", fromlist=["x"]).load_tasks
    assert osw.validate_task is not None
