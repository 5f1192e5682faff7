"""Stand-in files for OSWorld's asset cache: for every file a task fetches, a valid file of its type
under the name the task expects, so a task's real setup path (download, open, launch, execute) can run
on a host that cannot reach OSWorld's file store (docs/osworld.md, "Stand-in files").

Each file is made with the library its app's own files are made with: openpyxl, python-docx,
python-pptx and odfpy for office documents, PyMuPDF for PDFs, Pillow for images, ffmpeg (Debian's)
for video and audio, and the standard library for archives, text, wave and sqlite. The content says
nothing about the task: it checks the product (Drums serving the setup), not the task's solution.

- **Gold files differ from inputs.** A ``cloud_file`` (what an evaluator compares against) is made
  with the role ``gold`` and an input (``download``) with ``input``; every maker puts the role and the
  file's name into the content, so no task starts solved because its input already equals its gold.
- **Archives hold what the setup expects.** A zip or tar's members are the paths the task's later
  steps open, launch or ``cd`` into below the directory it is unpacked to (``unzip -d``, ``tar -C``,
  ``cd DIR && unzip``), each a stand-in of its own type (a path without an extension is a folder).
  A Thunderbird profile tar (``thunderbird-profile*.tar.gz``) is a profile as Thunderbird lays it out.
- **Never the shared cache.** ``make_standins`` refuses the shared cache (``default_cache_dir()``):
  stand-ins live in a test cache given with ``--cache``.
- **Unknown types fail loudly**: ``StandinError`` names the task, the URL and the extension.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import wave
import zipfile
from typing import Any, Callable, Optional
from urllib.parse import unquote, urlparse

from . import osworld_assets as assets

#: The install hash Debian's Thunderbird (/usr/lib/thunderbird) gives itself: without a profiles.ini
#: [Install...] entry naming the tar's profile, Thunderbird ignores Default=1 and makes a fresh one.
TB_INSTALL = "FDC34C9F024745EB"


class StandinError(ValueError):
    """No stand-in can be made for this file (unknown or unmakeable type)."""


class Spec:
    """What one stand-in is: its file name, its role (input | gold), its task and a seed."""

    def __init__(self, name: str, role: str, task: Optional[dict] = None, url: str = "", guest_path: str = ""):
        self.name = name
        self.role = role
        self.task = task or {}
        self.url = url
        self.guest_path = guest_path
        self.seed = int(hashlib.sha256(f"{role}\0{name}\0{url}".encode()).hexdigest()[:8], 16)

    @property
    def label(self) -> str:
        return f"Drums stand-in ({self.role}) for {self.name}"


# ------------------------------------------------------------------------------------ makers


def _rows(s: Spec) -> list[list]:
    base = s.seed % 97 + (1000 if s.role == "gold" else 0)
    return [["Name", "Value", "Note"]] + [[f"Item {i}", base + 7 * i, s.role] for i in range(1, 6)]


def _expected_sheets(task: dict) -> list[str]:
    """Sheet names the evaluator's compare_table rules look for in the expected file ("EN<name>")."""
    out: list[str] = []
    opts = (task.get("evaluator") or {}).get("options")
    for o in opts if isinstance(opts, list) else [opts]:
        rules = o.get("rules") if isinstance(o, dict) else None
        for r in rules if isinstance(rules, list) else []:
            for v in r.values() if isinstance(r, dict) else []:
                if isinstance(v, str) and v.startswith("EN") and len(v) > 2 and v[2:] not in out:
                    out.append(v[2:][:31])  # Excel's limit on a sheet name
    return out


def _xlsx(s: Spec) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for r in _rows(s):
        ws.append(r)
    ws["E1"] = s.label
    if s.role == "gold":
        # The sheets the evaluator's rules name in the expected file (compare_table's "EN<name>"), each
        # with a chart: without them, a rule that compares a sheet both files lack (calc 12382c62's
        # "Sheet2" chart) finds nothing on either side and the task starts solved.
        from openpyxl.chart import BarChart, Reference

        for name in [*_expected_sheets(s.task), "Gold"]:
            if name in wb.sheetnames:
                continue
            extra = wb.create_sheet(name)
            for r in _rows(s):
                extra.append(r)
            chart = BarChart()
            chart.title = s.label[:40]
            chart.add_data(Reference(extra, min_col=2, min_row=1, max_row=6), titles_from_data=True)
            extra.add_chart(chart, "E2")
    b = io.BytesIO()
    wb.save(b)
    return b.getvalue()


def _docx(s: Spec) -> bytes:
    import docx

    d = docx.Document()
    d.add_heading(s.label, level=1)
    for i in range(3):
        d.add_paragraph(f"Paragraph {i + 1} of the {s.role} document, number {s.seed % 1000}.")
    if s.role == "gold":  # metrics that compare only tables or images (compare_docx_tables, _images) differ too
        d.add_picture(io.BytesIO(_image("PNG")(s)))
        # compare_references scores 1 when neither file has a "References" section (multi_apps 2c1ebcd7).
        d.add_paragraph("References")
        d.add_paragraph(f"Drums. ({2000 + s.seed % 25}). {s.label}. Stand-in Press.")
        rows = _rows(s)
        t = d.add_table(rows=len(rows), cols=len(rows[0]))
        for r, row in enumerate(rows):
            for c, v in enumerate(row):
                t.cell(r, c).text = str(v)
    b = io.BytesIO()
    d.save(b)
    return b.getvalue()


def _pptx(s: Spec) -> bytes:
    import pptx

    p = pptx.Presentation()
    for i in range(3 if s.role == "gold" else 2):  # gold has a slide more: shape-by-shape metrics differ
        sl = p.slides.add_slide(p.slide_layouts[1])
        sl.shapes.title.text = f"{s.label}, slide {i + 1}"
        sl.placeholders[1].text = f"A {s.role} point, number {s.seed % 1000 + i}"
    b = io.BytesIO()
    p.save(b)
    return b.getvalue()


def _odf(kind: str) -> Callable[[Spec], bytes]:
    def make(s: Spec) -> bytes:
        from odf.opendocument import OpenDocumentSpreadsheet, OpenDocumentText
        from odf.table import Table, TableCell, TableRow
        from odf.text import P

        if kind == "ods":
            doc = OpenDocumentSpreadsheet()
            t = Table(name="Sheet1")
            for r in _rows(s):
                tr = TableRow()
                for v in r:
                    attrs = {"valuetype": "float", "value": v} if isinstance(v, int) else {"valuetype": "string"}
                    c = TableCell(**attrs)
                    c.addElement(P(text=str(v)))
                    tr.addElement(c)
                t.addElement(tr)
            doc.spreadsheet.addElement(t)
        else:
            doc = OpenDocumentText()
            doc.text.addElement(P(text=s.label))
            doc.text.addElement(P(text=f"A {s.role} paragraph, number {s.seed % 1000}."))
        b = io.BytesIO()
        doc.write(b)
        return b.getvalue()

    return make


def _pdf(s: Spec) -> bytes:
    import pymupdf as fitz

    doc = fitz.open()
    for i in range(2):
        page = doc.new_page()
        page.insert_text((72, 72), f"{s.label}, page {i + 1}", fontsize=14)
        page.insert_text((72, 100), f"{s.role} text {s.seed % 1000 + i}", fontsize=11)
    return doc.tobytes()


def _image(fmt: str) -> Callable[[Spec], bytes]:
    def make(s: Spec) -> bytes:
        from PIL import Image, ImageDraw

        colour = (s.seed % 200, (s.seed >> 8) % 200, (s.seed >> 16) % 200)
        im = Image.new("RGB", (320, 240), colour)
        dr = ImageDraw.Draw(im)
        dr.rectangle((40, 40, 200, 160), fill=(255, 255, 255) if s.role == "gold" else (20, 20, 20))
        dr.text((10, 210), s.label[:50], fill=(255, 255, 0))
        b = io.BytesIO()
        im.save(b, fmt)
        return b.getvalue()

    return make


def _raw(s: Spec) -> bytes:
    """Raw RGB pixels (GIMP's raw-data import asks for width, height and layout)."""
    v = s.seed % 256
    return bytes([v, 255 - v, 128]) * (320 * 240)


def _xcf(s: Spec) -> bytes:
    """A one-layer GIMP XCF (version 0: 32-bit offsets, uncompressed tiles), written from the format's
    documentation (GIMP's devel-docs/xcf.txt). Pillow and the other PyPI image libraries read XCF at
    most; none writes it."""
    import struct

    w, h = 64, 64
    colour = bytes([s.seed % 256, (s.seed >> 8) % 256, 255 if s.role == "gold" else 0, 255])
    name = s.name.encode() + b"\0"

    def prop(pid: int, payload: bytes) -> bytes:
        return struct.pack(">II", pid, len(payload)) + payload

    img_props = prop(17, b"\0") + prop(0, b"")  # PROP_COMPRESSION none, PROP_END
    header = b"gimp xcf file\0" + struct.pack(">III", w, h, 0)  # RGB
    layer_off = len(header) + len(img_props) + 8  # one layer pointer, then 0; then 0 channels
    layer_off += 4
    layer_props = prop(6, struct.pack(">I", 255)) + prop(8, struct.pack(">I", 1)) + prop(0, b"")  # opacity, visible
    layer_head = struct.pack(">III", w, h, 1) + struct.pack(">I", len(name)) + name + layer_props  # RGBA layer
    hier_off = layer_off + len(layer_head) + 8
    level_off = hier_off + 12 + 8  # w, h, bpp; one level pointer, then 0
    tile_off = level_off + 8 + 8  # w, h; one tile pointer, then 0
    tile = colour * (w * h)
    return (
        header
        + img_props
        + struct.pack(">II", layer_off, 0)
        + struct.pack(">I", 0)
        + layer_head
        + struct.pack(">II", hier_off, 0)
        + struct.pack(">III", w, h, 4)
        + struct.pack(">II", level_off, 0)
        + struct.pack(">II", w, h)
        + struct.pack(">II", tile_off, 0)
        + tile
    )


def _ffmpeg(args: list[str], ext: str) -> bytes:
    ff = shutil.which("ffmpeg")
    if not ff:
        raise StandinError(
            "ffmpeg is needed to make video and audio stand-ins (Debian's ffmpeg; scripts/setup.sh installs it with DRUMS_SETUP_TEST=1)"
        )
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out." + ext)
        subprocess.run([ff, "-hide_banner", "-loglevel", "error", "-y", *args, out], check=True, timeout=120)
        with open(out, "rb") as f:
            return f.read()


def _mp4(s: Spec) -> bytes:
    freq = 440 + s.seed % 200 + (300 if s.role == "gold" else 0)
    return _ffmpeg(
        [
            "-f",
            "lavfi",
            "-i",
            "testsrc=duration=8:size=640x360:rate=25",
            "-f",
            "lavfi",
            "-i",
            f"sine=frequency={freq}:duration=8",
        ]
        + ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"],
        "mp4",
    )


def _mp3(s: Spec) -> bytes:
    freq = 440 + s.seed % 200 + (300 if s.role == "gold" else 0)
    return _ffmpeg(["-f", "lavfi", "-i", f"sine=frequency={freq}:duration=8", "-c:a", "libmp3lame", "-q:a", "6"], "mp3")


def _wav(s: Spec) -> bytes:
    import math

    freq = 440 + s.seed % 200 + (300 if s.role == "gold" else 0)
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(
            b"".join(
                int(8000 * math.sin(2 * math.pi * freq * i / 16000)).to_bytes(2, "little", signed=True)
                for i in range(16000)
            )
        )
    return b.getvalue()


def _text(body: Callable[[Spec], str]) -> Callable[[Spec], bytes]:
    return lambda s: body(s).encode()


_TEXT: dict[str, Callable[[Spec], str]] = {
    "txt": lambda s: f"{s.label}\nline two {s.seed % 1000}\n",
    "md": lambda s: f"# {s.label}\n\nA {s.role} paragraph.\n",
    "csv": lambda s: "".join(",".join(map(str, r)) + "\n" for r in _rows(s)),
    "py": lambda s: (
        f'"""{s.label}"""\n\n\ndef main():\n    print({s.seed % 1000})\n\n\nif __name__ == "__main__":\n    main()\n'
    ),
    "sh": lambda s: f"#!/bin/sh\n# {s.label}\necho {s.role} {s.seed % 1000}\n",
    "js": lambda s: f"// {s.label}\nconsole.log({s.seed % 1000});\n",
    "css": lambda s: f"/* {s.label} */\nbody {{ margin: {s.seed % 20}px; }}\n",
    "html": lambda s: (
        f"<!DOCTYPE html>\n<html><head><title>{s.label}</title></head><body><p>{s.role} {s.seed % 1000}</p></body></html>\n"
    ),
    "json": lambda s: json.dumps({"standin": s.label, "role": s.role, "value": s.seed % 1000}, indent=2) + "\n",
    "code-workspace": lambda s: (
        json.dumps({"folders": [{"path": "."}], "settings": {"drums.standin": s.role}}, indent=2) + "\n"
    ),
    "bib": lambda s: (
        f"@article{{standin{s.seed % 1000},\n  title = {{{s.label}}},\n  author = {{Drums}},\n  year = {{2024}}\n}}\n"
    ),
    "tex": lambda s: f"\\documentclass{{article}}\n\\begin{{document}}\n{s.label}\n\\end{{document}}\n",
    "srt": lambda s: (
        f"1\n00:00:01,000 --> 00:00:03,000\n{s.label}\n\n2\n00:00:04,000 --> 00:00:06,000\n{s.role} {s.seed % 1000}\n"
    ),
    "bin": lambda s: f"{s.label}\n",
}


def _eml(s: Spec) -> bytes:
    from email.message import EmailMessage

    m = EmailMessage()
    m["From"] = "Drums <standin@example.com>"
    m["To"] = "anonym-x2024@outlook.com"
    m["Subject"] = s.label
    m.set_content(f"A {s.role} message, number {s.seed % 1000}.\n")
    return bytes(m)


def _epub(s: Spec) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")  # first and stored, as EPUB requires
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        z.writestr(
            "content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
            f'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">drums-{s.seed}</dc:identifier>'
            f"<dc:title>{s.label}</dc:title><dc:language>en</dc:language></metadata>"
            '<manifest><item id="c" href="c.xhtml" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="c"/></spine></package>',
        )
        z.writestr("c.xhtml", f'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>{s.label}</p></body></html>')
    return b.getvalue()


def _wheel(s: Spec) -> bytes:
    """A pure-Python wheel named as the task names it (dist-name-version-py3-none-any.whl)."""
    m = re.match(r"^([A-Za-z0-9_.]+)-([0-9][^-]*)-", s.name)
    dist, ver = (m.group(1), m.group(2)) if m else ("standin", "0.0.0")
    mod = dist.replace("-", "_").lower()
    di = f"{dist}-{ver}.dist-info"
    files = {
        f"{mod}/__init__.py": f'"""{s.label}"""\n__version__ = "{ver}"\n',
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {ver}\nSummary: {s.label}\n",
        f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: drums\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{di}/RECORD", "".join(f"{k},,\n" for k in files) + f"{di}/RECORD,,\n")
    return b.getvalue()


def _sqlite(s: Spec) -> bytes:
    """An empty Chrome History at the schema version of the image's Chromium (meta version 70), with
    the urls and visits tables desktop_env's update_browse_history inserts into. Chromium creates the
    other tables itself at start; a file without a version it knows it razes, and with it the
    history the task's setup put there (chrome 44ee5668 would then start solved)."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "h.sqlite")
        c = sqlite3.connect(p)
        c.executescript(
            "CREATE TABLE meta(key LONGVARCHAR NOT NULL UNIQUE PRIMARY KEY, value LONGVARCHAR);"
            "INSERT INTO meta VALUES ('mmap_status', '-1'), ('version', '70'), ('last_compatible_version', '16');"
            "CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT, url LONGVARCHAR, title LONGVARCHAR,"
            " visit_count INTEGER DEFAULT 0 NOT NULL, typed_count INTEGER DEFAULT 0 NOT NULL,"
            " last_visit_time INTEGER NOT NULL, hidden INTEGER DEFAULT 0 NOT NULL);"
            "CREATE TABLE visits(id INTEGER PRIMARY KEY AUTOINCREMENT, url INTEGER NOT NULL, visit_time INTEGER NOT NULL,"
            " from_visit INTEGER, external_referrer_url TEXT, transition INTEGER DEFAULT 0 NOT NULL, segment_id INTEGER,"
            " visit_duration INTEGER DEFAULT 0 NOT NULL, incremented_omnibox_typed_score BOOLEAN DEFAULT FALSE NOT NULL,"
            " opener_visit INTEGER, originator_cache_guid TEXT, originator_visit_id INTEGER, originator_from_visit INTEGER,"
            " originator_opener_visit INTEGER, is_known_to_sync BOOLEAN DEFAULT FALSE NOT NULL,"
            " consider_for_ntp_most_visited BOOLEAN DEFAULT FALSE NOT NULL, visited_link_id INTEGER DEFAULT 0 NOT NULL, app_id TEXT);"
        )
        c.execute("INSERT INTO meta VALUES ('drums.standin', ?)", (s.role,))  # Chromium ignores keys it does not know
        c.commit()
        c.close()
        with open(p, "rb") as f:
            return f.read()


# --- archives ------------------------------------------------------------------------------


def _thunderbird_profile(s: Spec) -> dict[str, bytes]:
    """The tasks' profile (t5q2a5hp.default-release) as Thunderbird lays it out: an IMAP account
    anonym-x2024@outlook.com (never reached: sessions have no network) and Local Folders."""
    d = "t5q2a5hp.default-release"
    prefs: dict[str, Any] = {
        "mail.shell.checkDefaultClient": False,
        "mailnews.start_page.enabled": False,
        "mail.accountmanager.accounts": "account1,account2",
        "mail.accountmanager.defaultaccount": "account1",
        "mail.accountmanager.localfoldersserver": "server2",
        "mail.account.account1.identities": "id1",
        "mail.account.account1.server": "server1",
        "mail.account.account2.server": "server2",
        "mail.identity.id1.fullName": "Anonym Tester",
        "mail.identity.id1.useremail": "anonym-x2024@outlook.com",
        "mail.identity.id1.valid": True,
        "mail.server.server1.hostname": "outlook.office365.com",
        "mail.server.server1.name": "anonym-x2024@outlook.com",
        "mail.server.server1.type": "imap",
        "mail.server.server1.userName": "anonym-x2024@outlook.com",
        "mail.server.server1.port": 993,
        "mail.server.server1.socketType": 3,
        "mail.server.server1.login_at_startup": False,
        "mail.server.server1.check_new_mail": False,
        "mail.server.server1.directory-rel": "[ProfD]ImapMail/outlook.office365.com",
        "mail.server.server2.hostname": "Local Folders",
        "mail.server.server2.name": "Local Folders",
        "mail.server.server2.type": "none",
        "mail.server.server2.userName": "nobody",
        "mail.server.server2.directory-rel": "[ProfD]Mail/Local Folders",
        "drums.standin": s.role,
    }
    return {
        ".thunderbird/profiles.ini": (
            f"[Profile0]\nName=default-release\nIsRelative=1\nPath={d}\nDefault=1\n\n"
            f"[General]\nStartWithLastProfile=1\nVersion=2\n\n[Install{TB_INSTALL}]\nDefault={d}\nLocked=1\n"
        ).encode(),
        ".thunderbird/installs.ini": f"[{TB_INSTALL}]\nDefault={d}\nLocked=1\n".encode(),
        f".thunderbird/{d}/prefs.js": "".join(
            f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items()
        ).encode(),
        f".thunderbird/{d}/Mail/Local Folders/Inbox": (
            f"From - Mon Jan  1 00:00:00 2024\nFrom: Drums <standin@example.com>\nSubject: {s.label}\n\nA {s.role} message.\n\n"
        ).encode(),
    }


_GUEST_PATH = re.compile(r"(/home/user/[^\s'\";|&]+)")


def _strings(x: Any) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, list):
        return [y for e in x for y in _strings(e)]
    if isinstance(x, dict):
        return [y for e in x.values() for y in _strings(e)]
    return []


def _step_paths(task: dict) -> tuple[set[str], list[str]]:
    """(paths the config's steps use, the steps' command lines as text)."""
    paths: set[str] = set()
    texts: list[str] = []
    for st in task.get("config") or []:
        if not isinstance(st, dict):
            continue
        p = st.get("parameters") or {}
        if st.get("type") == "open" and isinstance(p.get("path"), str):
            paths.add(p["path"])
        cmd = p.get("command")
        if isinstance(cmd, list) and cmd and os.path.basename(str(cmd[0])) == "mkdir":
            continue  # folders the setup makes itself, not an archive's
        if isinstance(cmd, list):
            paths.update(c for c in cmd if isinstance(c, str) and c.startswith("/home/user/"))
            texts.append(shlex.join([str(c) for c in cmd]))
        elif isinstance(cmd, str):
            texts.append(cmd)
            try:
                paths.update(t for t in shlex.split(cmd) if t.startswith("/home/user/"))
            except ValueError:
                paths.update(_GUEST_PATH.findall(cmd))
    return paths, texts


def _unpack_dir(guest_path: str, texts: list[str]) -> str:
    """Where the task's steps unpack the archive at ``guest_path``."""
    base = os.path.basename(guest_path)
    for t in texts:
        if base not in t:
            continue
        try:
            toks = shlex.split(t)
        except ValueError:
            toks = t.split()
        for flag in ("-d", "-C"):
            if flag in toks and toks.index(flag) + 1 < len(toks):
                return toks[toks.index(flag) + 1].rstrip("/")
        m = re.search(r"\bcd\s+(\S+)\s*&&[^&]*" + re.escape(base), t)
        if m:
            return m.group(1).strip("'\"").rstrip("/")
    return os.path.dirname(guest_path)


def _members(s: Spec) -> dict[str, bytes]:
    """The archive's files: what the task's steps open below where it is unpacked, each a stand-in of its type."""
    if "thunderbird-profile" in s.name.lower():
        return _thunderbird_profile(s)
    out: dict[str, bytes] = {}
    stem = re.sub(r"(\.tar)?\.[A-Za-z0-9]+$", "", os.path.basename(s.name)).lstrip(".") or "standin"
    stem = f"{stem}-{s.role}"
    if s.task and s.guest_path:
        paths, texts = _step_paths(s.task)
        downloads = {
            f.get("path")
            for st in s.task.get("config") or []
            if isinstance(st, dict) and st.get("type") == "download"
            for f in (st.get("parameters") or {}).get("files") or []
            if isinstance(f, dict)
        }
        d = _unpack_dir(s.guest_path, texts)
        for p in sorted(paths - downloads):
            if not p.startswith(d + "/"):
                continue
            rel = p[len(d) + 1 :].rstrip("/")
            if not rel or rel.startswith("../"):
                continue
            ext = _ext(rel)
            if ext and ext in MAKERS and ext not in ARCHIVES:
                out[rel] = MAKERS[ext](Spec(os.path.basename(rel), s.role, url=s.url + "#" + rel))
            elif not ext:
                # Named after the archive: two archives unpacked into one folder must not both hold a
                # file of one name (unzip would stop to ask whether to replace it).
                out[f"{rel}/{stem}.txt"] = f"{s.label}: the folder {rel}\n".encode()
    if not out:
        out[f"{stem}.txt"] = f"{s.label}\n".encode()
    return out


def _zip(s: Spec) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in _members(s).items():
            z.writestr(k, v)
    return b.getvalue()


def _tar(mode: str) -> Callable[[Spec], bytes]:
    def make(s: Spec) -> bytes:
        b = io.BytesIO()
        with tarfile.open(fileobj=b, mode=mode) as t:
            for k, v in _members(s).items():
                info = tarfile.TarInfo(k)
                info.size, info.mode, info.mtime = len(v), 0o644, 1700000000
                t.addfile(info, io.BytesIO(v))
        return b.getvalue()

    return make


def _gz(s: Spec) -> bytes:
    if s.name.lower().endswith((".tar.gz", ".tgz")):
        return _tar("w:gz")(s)
    return gzip.compress(f"{s.label}\n".encode(), mtime=0)


def _xz(s: Spec) -> bytes:
    if s.name.lower().endswith(".tar.xz"):
        return _tar("w:xz")(s)
    return lzma.compress(f"{s.label}\n".encode())


MAKERS: dict[str, Callable[[Spec], bytes]] = {
    "xlsx": _xlsx,
    "docx": _docx,
    "pptx": _pptx,
    "ods": _odf("ods"),
    "odt": _odf("odt"),
    "pdf": _pdf,
    "png": _image("PNG"),
    "jpg": _image("JPEG"),
    "jpeg": _image("JPEG"),
    "gif": _image("GIF"),
    "webp": _image("WEBP"),
    "raw": _raw,
    "xcf": _xcf,
    "mp4": _mp4,
    "mp3": _mp3,
    "wav": _wav,
    "eml": _eml,
    "epub": _epub,
    "whl": _wheel,
    "vsix": _zip,
    "sqlite": _sqlite,
    "zip": _zip,
    "gz": _gz,
    "tgz": _tar("w:gz"),
    "xz": _xz,
    **{k: _text(v) for k, v in _TEXT.items()},
}
ARCHIVES = {"zip", "gz", "tgz", "xz", "vsix", "whl", "epub"}
#: Types known but not makeable from PyPI or Debian libraries on the host: legacy binary Office formats.
UNMAKEABLE = {
    "xls": "the legacy binary Excel format (no maintained Python library writes it)",
    "ppt": "the legacy binary PowerPoint format (no maintained Python library writes it)",
    "doc": "the legacy binary Word format (no maintained Python library writes it)",
}


def _ext(name: str) -> str:
    base = os.path.basename(name)
    return base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""


def make(name: str, role: str, task: Optional[dict] = None, url: str = "", guest_path: str = "") -> bytes:
    """One stand-in's bytes. The type comes from ``name`` (the name the task expects), else from the URL's path."""
    ext = _ext(name) or _ext(unquote(urlparse(url).path))
    tid = (task or {}).get("id", "?")
    if ext in UNMAKEABLE:
        raise StandinError(f"task {tid}: cannot make a stand-in for {url or name}: .{ext} is {UNMAKEABLE[ext]}")
    maker = MAKERS.get(ext)
    if maker is None:
        raise StandinError(
            f"task {tid}: no stand-in maker for {url or name} (type {'.' + ext if ext else 'unknown: no extension'}); "
            f"known types: {', '.join(sorted(MAKERS))}"
        )
    return maker(Spec(name, role, task, url, guest_path))


# ------------------------------------------------------------------------------------ the cache


def _roles(task: dict) -> dict[str, tuple[str, str]]:
    """cache file name -> (role, guest path) for each file the task fetches."""
    out: dict[str, tuple[str, str]] = {}
    for st in list(task.get("config") or []) + list((task.get("evaluator") or {}).get("postconfig") or []):
        if isinstance(st, dict) and st.get("type") == "download":
            for f in (st.get("parameters") or {}).get("files") or []:
                if isinstance(f, dict) and isinstance(f.get("url"), str) and isinstance(f.get("path"), str):
                    import uuid

                    name = f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{os.path.basename(f['path'])}"
                    out[name] = ("input", f["path"])
    return out


def task_standins(task: dict) -> list[tuple[assets.Asset, str, str, str]]:
    """(asset, the name the task expects, role, guest path) for every file the task fetches (no font pack)."""
    roles = _roles(task)
    out = []
    for a in assets.task_assets(task, fonts=False):
        cname = os.path.basename(a.rel)
        if a.kind == "download":
            role, guest = roles.get(cname, ("input", ""))
            expects = os.path.basename(guest) or cname
        elif a.kind == "history":
            role, guest, expects = "input", "", "history_new.sqlite"
        else:  # cloud_file: what the evaluator compares the result against
            role, guest, expects = "gold", "", cname
        out.append((a, expects, role, guest))
    return out


def _private_dir(path: str) -> str:
    """Makes ``path`` (if missing) and checks it is a real directory of ours that no one else may write:
    the command often runs as root, and a link or a file planted by another user in the test cache
    would otherwise have root write where that user chose."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    st = os.lstat(path)
    import stat as _stat

    if not _stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise StandinError(
            f"{path} must be a directory owned by uid {os.geteuid()} that only its owner may write "
            f"(it is {'a link' if _stat.S_ISLNK(st.st_mode) else oct(st.st_mode)} of uid {st.st_uid}); "
            "give --cache a directory of your own"
        )
    return path


def make_standins(cache: str, tasks: list[dict], force: bool = False) -> dict:
    """Writes a stand-in for every file the tasks fetch into ``cache`` (a test cache, never the shared one),
    in desktop_env's layout and recorded in each task's manifest. {"made", "present", "failed": [msg]}."""
    shared = os.path.realpath(assets.default_cache_dir())
    if os.path.realpath(cache) == shared:
        raise StandinError(
            f"{cache} is the shared asset cache; stand-ins go into a test cache of their own (--cache DIR)"
        )
    res: dict = {"made": 0, "present": 0, "failed": [], "bytes": 0}
    _private_dir(cache)
    for task in tasks:
        for a, expects, role, guest in task_standins(task):
            dst = os.path.join(cache, a.rel)
            if not force and assets.status(cache, a)[0] == "ok":
                res["present"] += 1
                continue
            try:
                data = make(expects, role, task, a.url, guest)
            except StandinError as e:
                res["failed"].append(str(e))
                continue
            except Exception as e:  # a library failing on a name: still name the task and URL
                res["failed"].append(
                    f"task {task.get('id')}: making a stand-in for {a.url} failed: {type(e).__name__}: {e}"
                )
                continue
            d = _private_dir(os.path.dirname(dst))
            fd, tmp = tempfile.mkstemp(prefix=".standin-", dir=d)  # O_EXCL: never an existing file or link
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.chmod(tmp, 0o644)
                os.replace(tmp, dst)
            except BaseException:
                os.unlink(tmp)
                raise
            assets._record(cache, a, len(data), standin=role)
            res["made"] += 1
            res["bytes"] += len(data)
    return res
