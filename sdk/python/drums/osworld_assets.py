"""OSWorld's asset cache: the input and expected files tasks fetch from OSWorld's file store.

desktop_env already caches what a task downloads, in a directory per task, and skips
the download when the file is there:

- a ``download`` setup step: ``<cache>/<task id>/<uuid5(NAMESPACE_URL, url)>_<basename(path)>``
  (``controllers/setup.py`` ``_download_setup``);
- a ``cloud_file`` getter: ``<cache>/<task id>/<dest>`` (``getters/file.py`` ``get_cloud_file``);
- ``update_browse_history``: ``<cache>/<task id>/history_new.sqlite``, a copy of the History template.

Drums keeps **one shared host cache** in that layout (``DRUMS_OSWORLD_CACHE``, default
``$DRUMS_STATE_DIR/osworld-cache``). Only ``drums osworld assets fetch`` writes it. A run
copies a task's files into a private per-task directory (``materialize``) and hands that to
DesktopEnv, so ``vm_file`` outputs and anything desktop_env writes land in the copy.

``fetch`` resumes partial downloads (``<file>.part`` and an HTTP Range request), and records
each file's size (from Content-Length / Content-Range) in ``<cache>/<task id>/.drums-assets.json``;
``check`` compares the files against those sizes. OSWorld's font pack (the VM guide installs
it into /usr/share/fonts for Impress tasks) lives in the same cache under ``fonts/``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

#: OSWorld's file store. ``--mirror BASE`` (or DRUMS_OSWORLD_MIRROR) replaces this prefix.
STORE = "https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/"
#: The Chrome History template that ``update_browse_history`` copies (hard-coded in desktop_env).
HISTORY_URL = STORE + "chrome/44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true"
#: The font pack of OSWorld's VM guide (``desktop_env/server/README.md``, "LibreOffice font installation").
FONTS_URL = STORE + "fonts_20250608_fixed.zip"
FONTS_REL = "fonts/fonts_20250608_fixed.zip"
MANIFEST = ".drums-assets.json"
#: Apps whose tasks get the font pack installed into their session.
FONT_APPS = {"libreoffice_impress"}

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def default_cache_dir() -> str:
    return os.environ.get("DRUMS_OSWORLD_CACHE") or os.path.join(
        os.environ.get("DRUMS_STATE_DIR", "/var/lib/drums"), "osworld-cache"
    )


@dataclass(frozen=True)
class Asset:
    url: str
    rel: str  # path inside the cache directory: "<task id>/<name>" or "fonts/<name>"
    kind: str  # download | cloud_file | history | fonts


class AssetError(ValueError):
    """A task whose file list cannot be worked out safely (a malformed task)."""


def _safe_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise AssetError(f"{what} must be a non-empty string, got {name!r}")
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise AssetError(f"{what} {name!r} must be a relative path inside the task's cache directory")
    return name


def task_id(task: dict) -> str:
    tid = task.get("id")
    if not isinstance(tid, str) or not _SAFE_ID.match(tid) or tid in (".", ".."):
        raise AssetError(f"task id {tid!r} is not usable as a cache directory name (letters, digits, . _ -)")
    return tid


def _url(u: Any, what: str) -> str:
    if not isinstance(u, str) or not re.match(r"^https?://", u):
        raise AssetError(f"{what} must be an http(s) URL, got {u!r}")
    return u


def wants_fonts(task: dict) -> bool:
    apps = task.get("related_apps") or []
    return bool(FONT_APPS & set(apps if isinstance(apps, list) else [])) or task.get("snapshot") in FONT_APPS


def task_assets(task: dict, fonts: bool = True) -> list[Asset]:
    """Every file desktop_env would fetch for this task, at its place in the cache.
    Raises AssetError for a task whose steps cannot be read (a malformed task)."""
    tid = task_id(task)
    ev = task.get("evaluator") or {}
    out: dict[str, Asset] = {}
    steps = list(task.get("config") or []) + list(ev.get("postconfig") or [])
    for i, st in enumerate(steps):
        if not isinstance(st, dict):
            continue
        kind = st.get("type")
        params = st.get("parameters") or {}
        if kind == "download":
            files = params.get("files")
            if not isinstance(files, list):
                raise AssetError(f"download step {i}: 'files' must be a list of {{url, path}}")
            for f in files:
                if not isinstance(f, dict):
                    raise AssetError(f"download step {i}: each file must be an object with url and path")
                url = _url(f.get("url"), f"download step {i} url")
                path = f.get("path")
                if not isinstance(path, str) or not path:
                    raise AssetError(f"download step {i}: 'path' must be a non-empty string")
                name = _safe_name(f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}", "download name")
                out[name] = Asset(url, f"{tid}/{name}", "download")
        elif kind == "update_browse_history":
            out["history_new.sqlite"] = Asset(HISTORY_URL, f"{tid}/history_new.sqlite", "history")
    for key in ("result", "expected"):
        cfgs = ev.get(key)
        for c in cfgs if isinstance(cfgs, list) else [cfgs]:
            if not isinstance(c, dict) or c.get("type") != "cloud_file":
                continue
            if c.get("multi"):
                paths, dests = c.get("path"), c.get("dest")
                if not isinstance(paths, list) or not isinstance(dests, list):
                    raise AssetError("cloud_file with multi: 'path' and 'dest' must be lists")
            else:
                paths, dests = [c.get("path")], [c.get("dest")]
            for p, d in zip(paths, dests, strict=False):
                name = _safe_name(d, "cloud_file dest")
                out[name] = Asset(_url(p, "cloud_file path"), f"{tid}/{name}", "cloud_file")
    assets = list(out.values())
    if fonts and wants_fonts(task):
        assets.append(Asset(FONTS_URL, FONTS_REL, "fonts"))
    return assets


# --------------------------------------------------------------------- state of the cache


def _manifest_path(cache: str, rel: str) -> str:
    return os.path.join(cache, os.path.dirname(rel), MANIFEST)


def _read_manifest(path: str) -> dict:
    try:
        with open(path) as f:
            m = json.load(f)
        return m if isinstance(m, dict) else {}
    except (OSError, ValueError):
        return {}


def recorded_size(cache: str, a: Asset) -> Optional[int]:
    e = _read_manifest(_manifest_path(cache, a.rel)).get(os.path.basename(a.rel))
    if isinstance(e, dict) and e.get("url") == a.url and isinstance(e.get("size"), int):
        return e["size"]
    return None


def status(cache: str, a: Asset) -> tuple[str, str]:
    """("ok" | "missing" | "bad", detail) for one asset in the shared cache."""
    p = os.path.join(cache, a.rel)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        part = p + ".part"
        extra = f" ({os.path.getsize(part)} bytes of a partial download in {part})" if os.path.exists(part) else ""
        return "missing", f"{a.url} -> {p}{extra}"
    if not os.path.isfile(p):
        return "bad", f"{p} is not a regular file"
    want = recorded_size(cache, a)
    if want is not None and st.st_size != want:
        return (
            "bad",
            f"{p} has {st.st_size} bytes but {a.url} has {want} (recorded when it was fetched); run `drums osworld assets fetch` again",
        )
    if st.st_size == 0:
        return "bad", f"{p} is empty (a failed download?); delete it and run `drums osworld assets fetch` again"
    return "ok", p


def check_task(cache: str, task: dict, fonts: bool = True) -> dict:
    """{"missing": [urls], "bad": [details], "ok": n, "fonts": status or None}."""
    res: dict = {"missing": [], "bad": [], "ok": 0, "fonts": None}
    for a in task_assets(task, fonts=fonts):
        st, detail = status(cache, a)
        if a.kind == "fonts":
            res["fonts"] = st if st == "ok" else f"{st}: {detail}"
            continue
        if st == "ok":
            res["ok"] += 1
        elif st == "missing":
            res["missing"].append(a.url)
        else:
            res["bad"].append(detail)
    return res


def materialize(cache: str, task: dict, dest_root: str, fonts: bool = True) -> Optional[str]:
    """Copies the task's cached files into ``dest_root/<task id>/`` (real copies: a write must not
    reach the shared file). Returns the name under which the font pack was placed, if it was."""
    tid = task_id(task)
    d = os.path.join(dest_root, tid)
    os.makedirs(d, exist_ok=True)
    font_name = None
    for a in task_assets(task, fonts=fonts):
        src = os.path.join(cache, a.rel)
        if not os.path.isfile(src):
            continue
        if a.kind == "fonts":
            font_name = f"{uuid.uuid5(uuid.NAMESPACE_URL, a.url)}_{os.path.basename(a.rel)}"
            dst = os.path.join(d, font_name)
        else:
            dst = os.path.join(dest_root, a.rel)
        shutil.copyfile(src, dst)
    return font_name


def font_steps(font_name: str) -> list[dict]:
    """Setup steps that install the cached font pack as OSWorld's VM guide does (unzip into
    /usr/share/fonts), through desktop_env's own download (served from the per-task cache)."""
    zip_in_guest = "/tmp/" + os.path.basename(FONTS_REL)
    unzip = "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])"
    return [
        {"type": "download", "parameters": {"files": [{"url": FONTS_URL, "path": zip_in_guest}]}},
        {
            "type": "execute",
            "parameters": {
                "command": [
                    "/bin/sh",
                    "-c",
                    f"echo password | sudo -S python3 -c '{unzip}' {zip_in_guest} /usr/share/fonts/osworld && rm -f {zip_in_guest} && fc-cache -f /usr/share/fonts/osworld >/dev/null",
                ]
            },
        },
    ]


# --------------------------------------------------------------------- fetching


def mirror_url(url: str, mirror: Optional[str]) -> str:
    if mirror and url.startswith(STORE):
        return mirror.rstrip("/") + "/" + url[len(STORE) :]
    return url


def _total_from(resp) -> Optional[int]:
    cr = resp.headers.get("Content-Range")
    if cr and "/" in cr:
        t = cr.rsplit("/", 1)[1].strip()
        return int(t) if t.isdigit() else None
    cl = resp.headers.get("Content-Length")
    return int(cl) if cl and cl.isdigit() else None


class FetchError(RuntimeError):
    pass


def _record(cache: str, a: Asset, size: int, standin: Optional[str] = None) -> None:
    mp = _manifest_path(cache, a.rel)
    with open(mp + ".lock", "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        m = _read_manifest(mp)
        m[os.path.basename(a.rel)] = {
            "url": a.url,
            "size": size,
            "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if standin:  # made by drums.osworld_standins, not fetched: its role (input | gold)
            m[os.path.basename(a.rel)]["standin"] = standin
        tmp = mp + f".tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(m, f, indent=1, sort_keys=True)
        os.replace(tmp, mp)


def fetch_one(
    cache: str,
    a: Asset,
    mirror: Optional[str] = None,
    session=None,
    progress: Optional[Callable[[int, Optional[int]], None]] = None,
    retries: int = 3,
    timeout: float = 60,
) -> int:
    """Downloads one asset into the cache, resuming ``<file>.part`` with a Range request.
    Verifies the final size against the server's and records it. Returns the size."""
    import requests

    s = session or requests.Session()
    final = os.path.join(cache, a.rel)
    part = final + ".part"
    os.makedirs(os.path.dirname(final), exist_ok=True)
    url = mirror_url(a.url, mirror)
    last: Optional[Exception] = None
    with open(part, "ab") as out:
        fcntl.flock(out, fcntl.LOCK_EX)  # two fetches of one file: the second waits, then finds it done
        if os.path.isfile(final) and status(cache, a)[0] == "ok":
            if os.fstat(out.fileno()).st_size == 0:
                os.unlink(part)
            return os.path.getsize(final)
        for attempt in range(retries):
            have = os.fstat(out.fileno()).st_size
            headers = {"Range": f"bytes={have}-"} if have else {}
            try:
                with s.get(url, headers=headers, stream=True, timeout=timeout) as r:
                    if r.status_code == 416 and have:
                        # Nothing past what we have: the partial file may be the whole file.
                        total = _total_from(r)
                        if total is None or total != have:
                            out.truncate(0)
                            raise FetchError(f"{url}: server refused the range {have}- (416); starting over")
                    else:
                        r.raise_for_status()
                        if r.status_code == 200 and have:  # no range support: start again
                            out.truncate(0)
                            have = 0
                        total = _total_from(r)
                        if r.status_code == 200 and total is not None and r.headers.get("Content-Encoding"):
                            total = None  # Content-Length is the encoded size
                        done = have
                        for chunk in r.iter_content(chunk_size=1 << 16):
                            if chunk:
                                out.write(chunk)
                                done += len(chunk)
                                if progress:
                                    progress(done, total)
                        out.flush()
                size = os.fstat(out.fileno()).st_size
                if total is not None and size != total:
                    raise FetchError(f"{url}: got {size} of {total} bytes")
                if size == 0:
                    raise FetchError(f"{url}: the server sent an empty file")
                os.replace(part, final)
                _record(cache, a, size)
                return size
            except Exception as e:  # network errors, short reads: retry, resuming from what we have
                last = e
                if (
                    isinstance(e, requests.HTTPError)
                    and e.response is not None
                    and e.response.status_code in (401, 403, 404)
                ):
                    break
                time.sleep(min(2**attempt, 5))
    raise FetchError(f"could not fetch {url}: {last}")


def _human(n: Optional[int]) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def fetch_assets(cache: str, assets: Iterable[Asset], mirror: Optional[str] = None, out=sys.stderr) -> dict:
    """Fetches every asset not already (correctly) in the cache. {"fetched", "present", "failed": [msg]}."""
    import requests

    todo = list({a.rel: a for a in assets}.values())
    res: dict = {"fetched": 0, "present": 0, "failed": [], "bytes": 0}
    s = requests.Session()
    tty = out.isatty() if hasattr(out, "isatty") else False
    for i, a in enumerate(todo, 1):
        st, detail = status(cache, a)
        if st == "ok":
            res["present"] += 1
            continue
        if st == "bad":
            # A wrong-size or empty file: keep its bytes as the partial download only if it is a prefix we can resume.
            p = os.path.join(cache, a.rel)
            if os.path.isfile(p):
                os.remove(p)
        label = f"[{i}/{len(todo)}] {a.rel}"
        last_print = [0.0]

        def progress(done: int, total: Optional[int], label=label, last_print=last_print):
            now = time.monotonic()
            if now - last_print[0] < (0.2 if tty else 5):
                return
            last_print[0] = now
            pct = f" {100 * done / total:5.1f}%" if total else ""
            print(f"{label}: {_human(done)} of {_human(total)}{pct}", end="\r" if tty else "\n", file=out, flush=True)

        try:
            n = fetch_one(cache, a, mirror, s, progress)
            res["fetched"] += 1
            res["bytes"] += n
            print(f"{label}: {_human(n)} ok" + (" " * 20 if tty else ""), file=out, flush=True)
        except Exception as e:
            res["failed"].append(f"{a.rel}: {e}")
            print(f"{label}: FAILED {e}", file=out, flush=True)
    return res
