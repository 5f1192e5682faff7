"""Oracles score 1.0 through the real evaluator: per domain, real OSWorld tasks (from
../shared/osworld-tasks, never copied into the repo) driven through env.step by the actions in
tests/fixtures/osworld/oracles.py; without the actions the same tasks score 0.0. The input files
of cache tasks are made here, with the libraries the tasks' authors would use (openpyxl,
python-docx, python-pptx, tarfile), served from a loopback stand-in for OSWorld's file store and
fetched into the run's cache with `drums osworld assets fetch --mirror`.
(The os domain's are run by tests/integration/osworld-tasks.test.ts
from oracle-os.json, and its cache tasks' by test_osworld_cache_run.py.)"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from drums import osworld_assets as assets
from drums import osworld_standins as standins

from _data import missing, missing_tasks, need, osworld_tasks
from osworld_store import Store

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"
TASKS = osworld_tasks()
_spec = importlib.util.spec_from_file_location("osworld_oracles", ROOT / "tests/fixtures/osworld/oracles.py")
oracles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracles)


def test_json_fixtures_match_the_module():
    for domain in oracles.ORACLES:
        assert (
            json.loads((ROOT / f"tests/fixtures/osworld/oracle-{domain}.json").read_text()) == oracles.ORACLES[domain]
        ), (
            f"regenerate: python tests/fixtures/osworld/oracles.py {domain} > tests/fixtures/osworld/oracle-{domain}.json"
        )


def _weekly_sales(profit: bool) -> bytes:
    """1e8df695's sheet (Week, Sales, COGS), and with ``profit`` its expected one: Profit = Sales - COGS."""
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["Week", "Sales", "COGS"] + (["Profit"] if profit else []))
    for w in range(1, 6):
        sales, cogs = 1000 + 137 * w, 600 + 59 * w
        ws.append([f"Week {w}", sales, cogs] + ([sales - cogs] if profit else []))
    b = io.BytesIO()
    wb.save(b)
    return b.getvalue()


def _xlsx(rows: list[list], freeze: str | None = None, zoom: int | None = None) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    for row in rows:
        ws.append(row)
    if freeze:
        ws.freeze_panes = freeze
    if zoom:
        ws.sheet_view.zoomScale = zoom
    b = io.BytesIO()
    wb.save(b)
    return b.getvalue()


def _docx(paragraphs: list[str], font: str | None = None) -> bytes:
    import docx

    d = docx.Document()
    for text in paragraphs:
        run = d.add_paragraph().add_run(text)
        if font:
            run.font.name = font
    b = io.BytesIO()
    d.save(b)
    return b.getvalue()


def _pptx(slides: list[tuple[str, str]], width_in: float = 13.333, height_in: float = 7.5) -> bytes:
    """A deck of title-and-content slides, 16:9 landscape unless told otherwise."""
    import pptx
    from pptx.util import Inches

    p = pptx.Presentation()
    p.slide_width, p.slide_height = Inches(width_in), Inches(height_in)
    for title, body in slides:
        s = p.slides.add_slide(p.slide_layouts[1])
        s.shapes.title.text = title
        s.placeholders[1].text = body
    b = io.BytesIO()
    p.save(b)
    return b.getvalue()


# 4188d3a4 and 1334ca3e: a staff table; the gold files hold the same cells (the rules compare them
# and, apart from that, the freeze pane / only the result's zoom).
_STAFF = [["Name", "Dept", "Q1", "Q2"]] + [
    [f"Person {i}", ("Sales", "Ops", "R&D")[i % 3], 100 + 7 * i, 200 + 3 * i] for i in range(1, 25)
]
# d53ff5ee: a text with capitals; the gold is the same text in lowercase.
_INSTRUCTIONS = [
    "PRESENTATION INSTRUCTIONS - FEBRUARY 2023",
    "EACH GROUP PRESENTS ITS PROJECT FOR TEN MINUTES, FOLLOWED BY FIVE MINUTES OF QUESTIONS.",
    "Slides Are Due By 9 AM On The Day Of The Presentation.",
    "SEND THEM TO THE COURSE ADDRESS AS ONE PDF FILE.",
]


def _font_pack() -> bytes:
    """OSWorld's font pack (a zip of fonts that a run installs for Impress tasks), here one small font."""
    import zipfile

    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

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
    fb.setupNameTable({"familyName": "DrumsOracleFont", "styleName": "Regular"})
    fb.setupOS2()
    fb.setupPost()
    ttf, z = io.BytesIO(), io.BytesIO()
    fb.save(ttf)
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("fonts/DrumsOracleFont-Regular.ttf", ttf.getvalue())
    return z.getvalue()


# A cache file's maker by its name in the task (a download's cache name is "<uuid>_<its name>").
MAKERS = {
    os.path.basename(assets.FONTS_REL): _font_pack,
    "WeeklySales.xlsx": lambda: _weekly_sales(False),
    "6_WeeklySales_gt1.xlsx": lambda: _weekly_sales(True),
    "Freeze_row_column.xlsx": lambda: _xlsx(_STAFF),
    "Freeze_row_column_gold.xlsx": lambda: _xlsx(_STAFF, freeze="C2"),
    "Zoom_Out_Oversized_Cells.xlsx": lambda: _xlsx(_STAFF, zoom=300),
    "Zoom_Out_Oversized_Cells_gold.xlsx": lambda: _xlsx(_STAFF),
    "presentation_instruction_2023_Feb.docx": lambda: _docx(_INSTRUCTIONS),
    "presentation_instruction_2023_Feb_Gold.docx": lambda: _docx([t.lower() for t in _INSTRUCTIONS]),
    "Dublin_Zoo_Intro.docx": lambda: _docx(
        [
            "Dublin Zoo",
            "Dublin Zoo is a zoo in Phoenix Park, Dublin, Ireland, and one of the oldest in Europe.",
            "It opened in 1831 and is home to some four hundred animals.",
        ],
        font="Calibri",
    ),
    "AM_Last_Page_Template.pptx": lambda: _pptx([("Thank you", "Questions?"), ("Contact", "am@example.org")]),
    "multimedia_classroom_podium-2020.pptx": lambda: _pptx(
        [("Multimedia classroom podium", "Turn on the projector"), ("Presenting", "Use the podium screen")]
    ),
}


def _photo(fmt: str) -> bytes:
    """A photo-like picture for the gimp tasks (a sky gradient, a sun, hills, a "dog"), made with Pillow."""
    from PIL import Image, ImageDraw

    w, h = 640, 480
    img = Image.new("RGB", (w, h))
    d = ImageDraw.Draw(img)
    for y in range(h):
        d.line([(0, y), (w, y)], fill=(90 + y // 8, 150 + y // 12, 230 - y // 4))
    d.ellipse([470, 40, 570, 140], fill=(250, 220, 60))
    d.polygon([(0, 330), (180, 240), (360, 320), (520, 260), (640, 300), (640, 480), (0, 480)], fill=(60, 140, 70))
    d.ellipse([230, 300, 390, 400], fill=(140, 90, 40))
    d.ellipse([370, 270, 440, 340], fill=(120, 75, 35))
    b = io.BytesIO()
    img.save(b, fmt, **({"quality": 92} if fmt == "JPEG" else {}))
    return b.getvalue()


def _song() -> bytes:
    """2 minutes of a tone as an MP3 for the vlc task (long enough to still play while the task runs), made with ffmpeg."""
    import shutil
    import tempfile

    if not shutil.which("ffmpeg"):
        missing(
            "no ffmpeg on this host to make the vlc task's song (scripts/setup.sh installs it with DRUMS_SETUP_TEST=1)"
        )
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.mp3")
        subprocess.run(
            [
                "ffmpeg",
                "-loglevel",
                "error",
                "-f",
                "lavfi",
                "-i",
                "sine=frequency=440:duration=120",
                "-c:a",
                "libmp3lame",
                out,
            ],
            check=True,
            timeout=120,
        )
        return Path(out).read_bytes()


def _lecture_pdf() -> bytes:
    """386dbd0e's lecture notes: one page, with the title that its setup's window activation names, made with Pillow."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (850, 1100), "white")
    ImageDraw.Draw(img).text((80, 80), "Lecture 2: Data Structures", fill="black")
    b = io.BytesIO()
    img.save(b, "PDF", title="6.006 Introduction to Algorithms, Lecture 2: Data Structures")
    return b.getvalue()


# --- thunderbird: the tasks' profile is the stand-in generator's (drums.osworld_standins, whose tests
# open it with Thunderbird); the blank profile of the infeasible task is made here.


def _tar(files: dict[str, str]) -> bytes:
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return b.getvalue()


# --- multi_apps: the inputs of the tasks with oracles (python-docx via _docx above, openpyxl, odfpy, zipfile, csv) ---


def _binder_zip() -> bytes:
    """2c9fc0de's project: a folder binder/ (a Binder set-up) that the task unzips and git-inits."""
    import zipfile

    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("binder/README.md", "# binder\n\nLaunch the notebooks on Binder.\n")
        z.writestr("binder/requirements.txt", "numpy\npandas\nmatplotlib\n")
        z.writestr("binder/postBuild", "#!/bin/bash\njupyter lab build\n")
    return b.getvalue()


PEOPLE = [["First Name", "Last Name", "Gender", "Country", "Age"]] + [
    [f"Name{i}", f"Surname{i}", "Female" if i % 2 else "Male", ["United States", "France", "Japan"][i % 3], 20 + i]
    for i in range(1, 21)
]


def _people_ods() -> bytes:
    """ee9a3c83's sheet (one table of people), written with odfpy."""
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    doc = OpenDocumentSpreadsheet()
    table = Table(name="Sheet1")
    for row in PEOPLE:
        tr = TableRow()
        for v in row:
            c = TableCell(valuetype="float", value=v) if isinstance(v, int) else TableCell(valuetype="string")
            c.addElement(P(text=str(v)))
            tr.addElement(c)
        table.addElement(tr)
    doc.spreadsheet.addElement(table)
    b = io.BytesIO()
    doc.save(b)
    return b.getvalue()


def _people_csv() -> bytes:
    """ee9a3c83's expected CSV: the same rows, as the csv module writes them."""
    import csv

    s = io.StringIO()
    csv.writer(s, lineterminator="\n").writerows(PEOPLE)
    return s.getvalue().encode()


# 81c425f5's price list: text, and prices with a number format that Calc shows ("1,234.50").
ENVELOPES = [["Item", "Size", "Colour", "Price per 1000"]] + [
    [f"ENV-{100 + i}", ["DL", "C5", "C4"][i % 3], ["White", "Manila", "Kraft"][i % 3], 35.5 + 412.25 * i]
    for i in range(1, 9)
]


def _price_list_xlsx() -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    for row in ENVELOPES:
        ws.append(row)
    for (cell,) in ws.iter_rows(min_row=2, min_col=4, max_col=4):
        cell.number_format = "#,##0.00"
    b = io.BytesIO()
    wb.save(b)
    return b.getvalue()


def _price_docx() -> bytes:
    """81c425f5's expected document: one table with the sheet's cells as Calc shows them."""
    import docx

    d = docx.Document()
    t = d.add_table(rows=len(ENVELOPES), cols=len(ENVELOPES[0]))
    for i, row in enumerate(ENVELOPES):
        for j, v in enumerate(row):
            t.cell(i, j).text = f"{v:,.2f}" if isinstance(v, float) else v
    b = io.BytesIO()
    d.save(b)
    return b.getvalue()


MULTI_APPS_FILES = {
    "OSP_Envelope_Price-List_2023_5000.xlsx": _price_list_xlsx,
    "price_Gold.docx": _price_docx,
    "file_example_ODS_5000.ods": _people_ods,
    "file_example_ODS_5000_gold.csv": _people_csv,
    "15-MB-docx-file-download.docx": lambda: _docx([f"Paragraph {i}: a long document." for i in range(200)]),
    "secret.docx": lambda: _docx(["Secret document", "The code is 1234."]),
    "binder.zip": _binder_zip,
}


def make_file(path: str) -> bytes:
    """An input file for a cache task, by its name in the guest, as the task's author would make it."""
    name = os.path.basename(path)
    for key, make in MAKERS.items():
        if name == key or name.endswith("_" + key):
            return make()
    if path.endswith(".png"):
        return _photo("PNG")
    if path.endswith(".jpg"):
        return _photo("JPEG")
    if path.endswith(".mp3"):
        return _song()
    if path.endswith(".pdf"):
        return _lecture_pdf()
    for key, make in MULTI_APPS_FILES.items():
        if name == key or name.endswith("_" + key):
            return make()
    if path.endswith(".xlsx"):
        import openpyxl

        wb = openpyxl.Workbook()
        ws = wb.active
        ws.append(["Order ID", "Jan", "Feb", "Mar", "Chart"])
        for i in range(1, 6):
            ws.append([f"A{100 + i}", 10 * i, 12 * i + 3, 7 * i + 5, None])
        b = io.BytesIO()
        wb.save(b)
        return b.getvalue()
    if path.endswith(".docx"):
        import docx

        d = docx.Document()
        d.add_paragraph("Constitution of the Example Club")  # the heading, left-aligned
        for n in range(1, 4):
            d.add_paragraph(f"Article {n}. The members of the club agree to the rules of article {n}.")
        b = io.BytesIO()
        d.save(b)
        return b.getvalue()
    if name.endswith("_thunderbird-profile.tar.gz"):
        return standins.make(name, "input")  # t5q2a5hp.default-release, as the tasks' own tar lays it out
    if path.endswith("thunderbird-profile-blank.tar.gz"):
        return _tar(
            {
                ".thunderbird/profiles.ini": "[Profile0]\nName=default\nIsRelative=1\nPath=drums.default\nDefault=1\n\n"
                "[General]\nStartWithLastProfile=1\nVersion=2\n",
                ".thunderbird/drums.default/prefs.js": 'user_pref("mail.shell.checkDefaultClient", false);\n',
            }
        )
    raise AssertionError(f"no maker for the cache file {path}")


def fill_cache(cache: Path, store_dir: Path, task_files: list[Path]) -> None:
    """The task files' downloads made here, served by a loopback store, fetched into ``cache``."""
    need = {tf: assets.task_assets(json.loads(tf.read_text())) for tf in task_files}
    need = {tf: a for tf, a in need.items() if a}
    if not need:
        return
    store = Store(str(store_dir))
    try:
        for files in need.values():
            for a in files:
                store.put(a.url, make_file(a.rel))
        r = subprocess.run(
            [str(DRUMS), "osworld", "assets", "fetch", *map(str, need), "--cache", str(cache)]
            + ["--mirror", store.url],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        store.close()


def _run(daemon, tmp_path: Path, domain: str, tasks: list[str], oracle: dict | None) -> list[dict]:
    """``drums osworld run`` of the domain's ``tasks`` (with ``oracle``'s actions, or none: the
    score before acting), their cache files made here; the per-task results."""
    need(missing_tasks(domain))
    files = [TASKS / domain / f"{t}.json" for t in tasks]
    fill_cache(tmp_path / "cache", tmp_path / "store", files)
    out = tmp_path / "r.json"
    args = ["--parallel", "2", "--out", str(out)]
    if oracle is not None:
        (tmp_path / "oracle.json").write_text(json.dumps(oracle))
        args += ["--oracle", str(tmp_path / "oracle.json")]
    env = {
        **os.environ,
        "DRUMS_URL": daemon.url,
        "DRUMS_TOKEN": daemon.token,
        "DRUMS_OSWORLD_CACHE": str(tmp_path / "cache"),
    }
    r = subprocess.run(
        [str(DRUMS), "osworld", "run", *map(str, files), *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())["results"]["tasks"]
    assert len(res) == len(tasks)
    lacking = [x for x in res if "lacks the app" in (x["error"] or "")]
    if lacking:
        missing(
            f"this checkout's osworld image lacks the {domain} app: {lacking[0]['error']} (bin/drums image build osworld)"
        )
    return res


@pytest.mark.parametrize("domain", sorted(d for d in oracles.ORACLES if d != "os"))
def test_domain_oracles_score_1(daemon, tmp_path, domain):
    orc = oracles.ORACLES[domain]
    for x in _run(daemon, tmp_path, domain, list(orc), orc):
        assert x["score"] == 1.0, json.dumps(x)


# The same tasks without the oracle's actions score 0.0: an oracle's 1.0 is its own doing, not a
# set-up (or a test-made file) that already passes. Infeasible tasks are left out (FAIL is the act).
@pytest.mark.parametrize(
    "domain", sorted(d for d, o in oracles.ORACLES.items() if d != "os" and any(a != ["FAIL"] for a in o.values()))
)
def test_domain_oracle_tasks_score_0_before_acting(daemon, tmp_path, domain):
    tasks = [t for t, actions in oracles.ORACLES[domain].items() if actions != ["FAIL"]]
    for x in _run(daemon, tmp_path, domain, tasks, None):
        assert x["setup_ok"] and x["score"] == 0.0, json.dumps(x)
