"""drums.osworld_standins (`drums osworld assets standins`): each type's stand-in is a file its app's own
library opens (openpyxl, python-docx, python-pptx, odfpy, PyMuPDF, Pillow, ffprobe, wave, tarfile,
zipfile, sqlite3, email, compile, sh -n); gold files differ from inputs; archives hold what a task's
steps open below where they unpack it; an unknown type is an error naming the task and URL; the shared
cache is refused. No daemon: the run of real tasks through a stand-in cache is test_osworld_standins_run.py."""

from __future__ import annotations

import csv
import email
import gzip
import io
import json
import lzma
import os
import shutil
import sqlite3
import struct
import subprocess
import tarfile
import wave
import zipfile

import pytest

from drums import osworld_assets as assets
from drums import osworld_standins as st

from _data import missing, need, missing_tasks, osworld_tasks

STORE = assets.STORE + "demo/"


def _open_check(ext: str, data: bytes, name: str) -> str:
    """Opens ``data`` with the library (or tool) of its type; returns something of its content."""
    b = io.BytesIO(data)
    if ext == "xlsx":
        import openpyxl

        return str(openpyxl.load_workbook(b).active["A2"].value)
    if ext == "docx":
        import docx

        return docx.Document(b).paragraphs[0].text
    if ext == "pptx":
        import pptx

        return str(len(pptx.Presentation(b).slides))
    if ext in ("ods", "odt"):
        from odf.opendocument import load

        return load(b).mimetype
    if ext == "pdf":
        import pymupdf

        return pymupdf.open(stream=data, filetype="pdf")[0].get_text()
    if ext in ("png", "jpg", "jpeg", "gif", "webp"):
        from PIL import Image

        im = Image.open(b)
        im.load()
        return f"{im.format} {im.size}"
    if ext in ("mp4", "mp3"):
        if not shutil.which("ffprobe"):
            missing("no ffprobe on this host (Debian's ffmpeg; scripts/setup.sh installs it with DRUMS_SETUP_TEST=1)")
        p = subprocess.run(
            ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name", "-of", "json", "-"],
            input=data,
            capture_output=True,
            check=True,
        )
        codecs = [s["codec_name"] for s in json.loads(p.stdout)["streams"]]
        assert codecs, p.stderr
        return ",".join(codecs)
    if ext == "wav":
        with wave.open(b) as w:
            assert w.getnframes() > 0
            return str(w.getframerate())
    if ext == "eml":
        return email.message_from_bytes(data)["Subject"]
    if ext in ("zip", "whl", "vsix", "epub"):
        with zipfile.ZipFile(b) as z:
            assert z.testzip() is None
            if ext == "epub":
                assert z.namelist()[0] == "mimetype" and z.read("mimetype") == b"application/epub+zip"
            return ",".join(z.namelist())
    if ext in ("gz", "xz"):
        if name.endswith((".tar.gz", ".tar.xz")):
            with tarfile.open(fileobj=b) as t:
                return ",".join(t.getnames())
        return (gzip.decompress(data) if ext == "gz" else lzma.decompress(data)).decode()
    if ext == "sqlite":
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
            f.write(data)
            f.flush()
            c = sqlite3.connect(f.name)
            c.execute(
                "INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time, hidden) VALUES ('u','t',1,0,1,0)"
            )
            c.execute(
                "INSERT INTO visits (url, visit_time, from_visit, transition, segment_id, visit_duration) VALUES (1,1,0,0,0,0)"
            )
            return dict(c.execute("SELECT key, value FROM meta"))["version"]
    if ext == "xcf":
        # GIMP's own reading is the run test's (gimp tasks open .xcf stand-ins); here the layout: header,
        # one RGBA layer, and its tile where the level's pointer says.
        assert data.startswith(b"gimp xcf file\0")
        w, h, base = struct.unpack(">III", data[14:26])
        assert (w, h, base) == (64, 64, 0)
        return "xcf"
    if ext == "raw":  # GIMP's raw-data import: width x height x RGB bytes
        assert len(data) == 320 * 240 * 3
        return "raw"
    text = data.decode()
    if ext == "json" or ext == "code-workspace":
        return str(json.loads(text))
    if ext == "csv":
        return str(list(csv.reader(io.StringIO(text)))[1])
    if ext == "py":
        compile(text, name, "exec")
    if ext == "sh":
        subprocess.run(["sh", "-n"], input=data, check=True)
    assert text.strip()
    return text


NAMES = {
    "xlsx": "sheet.xlsx",
    "docx": "doc.docx",
    "pptx": "slides.pptx",
    "ods": "sheet.ods",
    "odt": "doc.odt",
    "pdf": "paper.pdf",
    "png": "pic.png",
    "jpg": "pic.jpg",
    "jpeg": "pic.jpeg",
    "gif": "clip.gif",
    "webp": "poster.webp",
    "raw": "photo.raw",
    "xcf": "layers.xcf",
    "mp4": "video.mp4",
    "mp3": "song.mp3",
    "wav": "planet.wav",
    "eml": "mail.eml",
    "epub": "book.epub",
    "whl": "cssselect-1.3.0-py3-none-any.whl",
    "vsix": "ext.vsix",
    "sqlite": "history.sqlite",
    "zip": "bundle.zip",
    "gz": "doc.tar.gz",
    "tgz": "doc.tgz",
    "xz": ".projects.tar.xz",
}


@pytest.mark.parametrize("ext", sorted(st.MAKERS))
def test_each_type_opens_with_its_library_and_gold_differs(ext):
    name = NAMES.get(ext, f"file.{ext}")
    url = STORE + name
    inp = st.make(name, "input", {"id": "t1"}, url)
    gold = st.make(name, "gold", {"id": "t1"}, url)
    assert inp and gold and inp != gold, f"{ext}: the gold file must differ from the input"
    kind = "tgz" if ext == "tgz" else ext
    got_in = _open_check("gz" if kind == "tgz" else kind, inp, name if kind != "tgz" else "doc.tar.gz")
    got_gold = _open_check("gz" if kind == "tgz" else kind, gold, name if kind != "tgz" else "doc.tar.gz")
    assert got_in is not None and got_gold is not None


def test_gold_office_files_differ_where_table_and_shape_metrics_look():
    import docx
    import pptx

    # compare_docx_tables compares only tables; multi_apps 00fa164e started solved when neither file had one.
    assert len(docx.Document(io.BytesIO(st.make("a.docx", "input"))).tables) == 0
    assert len(docx.Document(io.BytesIO(st.make("a_gt.docx", "gold"))).tables) == 1
    # compare_docx_images (writer 6ada715d) compares the pictures: the gold has one, the input none.
    assert len(docx.Document(io.BytesIO(st.make("a_gt.docx", "gold"))).inline_shapes) == 1
    assert len(docx.Document(io.BytesIO(st.make("a.docx", "input"))).inline_shapes) == 0
    # compare_references (multi_apps 2c1ebcd7) scores 1 when neither document has a References section.
    assert "References" in [p.text for p in docx.Document(io.BytesIO(st.make("a_gt.docx", "gold"))).paragraphs]
    assert "References" not in [p.text for p in docx.Document(io.BytesIO(st.make("a.docx", "input"))).paragraphs]
    assert len(pptx.Presentation(io.BytesIO(st.make("a.pptx", "input"))).slides) != len(
        pptx.Presentation(io.BytesIO(st.make("a.pptx", "gold"))).slides
    )


def test_gold_sheet_has_the_sheets_and_charts_the_rules_name():
    import openpyxl

    # libreoffice_calc 12382c62: a chart rule on "Sheet2", which neither stand-in had, scored 1.0 before acting.
    task = {
        "id": "t",
        "evaluator": {"options": {"rules": [{"type": "chart", "sheet_idx0": "RNSheet2", "sheet_idx1": "ENSheet2"}]}},
    }
    gold = openpyxl.load_workbook(io.BytesIO(st.make("a_gt.xlsx", "gold", task)))
    inp = openpyxl.load_workbook(io.BytesIO(st.make("a.xlsx", "input", task)))
    assert "Sheet2" in gold.sheetnames and gold["Sheet2"]._charts and "Sheet2" not in inp.sheetnames


@pytest.mark.fast  # no app library, no daemon: npm run check runs it
def test_unknown_type_names_the_task_and_url():
    url = STORE + "weird.qqq"
    with pytest.raises(st.StandinError) as e:
        st.make("weird.qqq", "input", {"id": "task-x"}, url)
    assert "task-x" in str(e.value) and url in str(e.value) and ".qqq" in str(e.value)
    with pytest.raises(st.StandinError) as e:
        st.make("noext", "gold", {"id": "task-y"}, STORE + "noext")
    assert "task-y" in str(e.value) and "no extension" in str(e.value)
    with pytest.raises(st.StandinError) as e:
        st.make("old.xls", "input", {"id": "task-z"}, STORE + "old.xls")
    assert "task-z" in str(e.value) and "legacy binary Excel" in str(e.value)
    # An extension-less name takes the URL's type (multi_apps 78aed49a: have_seen_gold from have_seen.bin).
    assert st.make("have_seen_gold", "gold", {"id": "t"}, STORE + "have_seen.bin")


def _task(config: list, expected: dict | None = None) -> dict:
    return {
        "id": "0123abcd-demo",
        "instruction": "demo",
        "config": config,
        "evaluator": {"func": "x", **({"expected": expected} if expected else {})},
    }


def test_archives_hold_what_the_steps_open_below_the_unpack_dir(tmp_path):
    url = STORE + "exam.zip"
    task = _task(
        [
            {"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/exam.zip"}]}},
            {"type": "execute", "parameters": {"command": ["unzip", "/home/user/exam.zip", "-d", "/home/user/"]}},
            {"type": "launch", "parameters": {"command": ["libreoffice", "--writer", "/home/user/exam/Answers.docx"]}},
            {"type": "launch", "parameters": {"command": ["nautilus", "/home/user/exam/"]}},
            {"type": "open", "parameters": {"path": "/home/user/exam/sub dir/grades.xlsx"}},
            {"type": "execute", "parameters": {"command": ["mkdir", "-p", "/home/user/made/by/setup"]}},
        ]
    )
    res = st.make_standins(str(tmp_path / "cache"), [task])
    assert res["made"] == 1 and not res["failed"], res
    (a,) = assets.task_assets(task, fonts=False)
    with zipfile.ZipFile(tmp_path / "cache" / a.rel) as z:
        names = set(z.namelist())
        assert {"exam/Answers.docx", "exam/sub dir/grades.xlsx", "exam/exam-input.txt"} <= names, names
        assert not any(n.startswith("made/") for n in names)
        _open_check("docx", z.read("exam/Answers.docx"), "Answers.docx")
    # `cd DIR && tar -x` and `-C DIR` forms
    assert (
        st._unpack_dir("/home/user/Downloads/a.zip", ["cd /home/user/Downloads && unzip -q a.zip"])
        == "/home/user/Downloads"
    )
    assert (
        st._unpack_dir("/home/user/.p.tar.xz", ["tar -xJvf /home/user/.p.tar.xz -C '/home/user/Doc s'"])
        == "/home/user/Doc s"
    )


@pytest.mark.fast  # no app library, no daemon: npm run check runs it
def test_thunderbird_profile_tar_is_a_profile_thunderbird_uses():
    data = st.make("thunderbird-profile.tar.gz", "input", {"id": "t"}, STORE + "thunderbird-profile.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        ini = t.extractfile(".thunderbird/profiles.ini").read().decode()
        names = t.getnames()
    assert f"[Install{st.TB_INSTALL}]" in ini and "Default=1" in ini
    assert ".thunderbird/t5q2a5hp.default-release/prefs.js" in names


def test_cache_layout_manifest_and_check(tmp_path):
    cache = tmp_path / "cache"
    url_in, url_gold = STORE + "in.xlsx", STORE + "gold.xlsx"
    task = _task(
        [{"type": "download", "parameters": {"files": [{"url": url_in, "path": "/home/user/in.xlsx"}]}}],
        {"type": "cloud_file", "path": url_gold, "dest": "gold.xlsx"},
    )
    res = st.make_standins(str(cache), [task])
    assert res["made"] == 2, res
    chk = assets.check_task(str(cache), task, fonts=False)
    assert chk["ok"] == 2 and not chk["missing"] and not chk["bad"]
    man = json.loads((cache / task["id"] / assets.MANIFEST).read_text())
    assert sorted(e["standin"] for e in man.values()) == ["gold", "input"]
    again = st.make_standins(str(cache), [task])
    assert again["made"] == 0 and again["present"] == 2


@pytest.mark.fast  # no app library, no daemon: npm run check runs it
def test_shared_cache_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DRUMS_OSWORLD_CACHE", str(tmp_path / "shared"))
    with pytest.raises(st.StandinError, match="shared asset cache"):
        st.make_standins(str(tmp_path / "shared"), [])
    assert not (tmp_path / "shared").exists()


@pytest.mark.fast  # no app library, no daemon: npm run check runs it
def test_every_task_file_has_a_maker_or_a_stated_reason():
    """Over ../shared/osworld-tasks: every file a task fetches has a type the generator makes, or one
    it refuses with a reason (the legacy binary Office formats); no unknown type."""
    need(missing_tasks("libreoffice_calc", "multi_apps"))
    unknown, unmakeable = [], []
    for f in sorted(osworld_tasks().glob("*/*.json")):
        task = json.loads(f.read_text())
        for a, expects, _role, _guest in st.task_standins(task):
            ext = st._ext(expects) or st._ext(a.url.split("?")[0])
            if ext in st.UNMAKEABLE:
                unmakeable.append((task["id"], ext))
            elif ext not in st.MAKERS:
                unknown.append((task["id"], a.url))
    assert not unknown, unknown
    assert len(unmakeable) <= 2, unmakeable  # multi_apps f8cfa149 (.xls), 869de13e (.ppt)


def test_cli_refuses_the_shared_cache_and_reports_unknown(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    t = tmp_path / "t.json"
    t.write_text(
        json.dumps(
            _task(
                [{"type": "download", "parameters": {"files": [{"url": STORE + "x.qqq", "path": "/home/user/x.qqq"}]}}]
            )
        )
    )
    env = {**os.environ, "DRUMS_OSWORLD_CACHE": str(tmp_path / "shared")}
    drums = os.path.join(root, "bin", "drums")
    r = subprocess.run(
        [drums, "osworld", "assets", "standins", str(t), "--cache", str(tmp_path / "shared")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "shared asset cache" in r.stderr, r.stderr
    r = subprocess.run(
        [drums, "osworld", "assets", "standins", str(t), "--cache", str(tmp_path / "c")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "0123abcd-demo" in r.stdout and STORE + "x.qqq" in r.stdout, r.stdout + r.stderr


def test_a_cache_another_user_can_write_or_a_linked_task_dir_is_refused(tmp_path):
    """The command often runs as root: a test cache under a directory others write must not let them
    choose where it writes (a task folder that is a link, a cache of another uid or writable by all)."""
    url = STORE + "in.xlsx"
    task = _task([{"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/in.xlsx"}]}}])
    target = tmp_path / "elsewhere"
    target.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / task["id"]).symlink_to(target)
    with pytest.raises(st.StandinError, match="a link"):
        st.make_standins(str(cache), [task])
    assert list(target.iterdir()) == []
    open_cache = tmp_path / "open"
    open_cache.mkdir()
    os.chmod(open_cache, 0o777)
    with pytest.raises(st.StandinError, match="only its owner may write"):
        st.make_standins(str(open_cache), [task])
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(st.StandinError, match="uid 65534"):
            st.make_standins(str(theirs), [task])
