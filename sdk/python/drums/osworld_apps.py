"""Which app windows an OSWorld task's setup should leave on screen, and waiting for them.

`drums osworld run` records, after `reset()`, the session's windows and which of the apps the
setup starts have no window (`missing_windows`), so a setup that "succeeds" while its app never
came up shows as such (docs/osworld.md, "Running tasks").
"""

from __future__ import annotations

import os
import re
import shlex
import time
from typing import Any, Optional

#: App name -> the pattern its top-level window matches (title, WM_CLASS instance or class).
APP_WINDOWS = {
    "chrome": r"chromium|google-chrome",
    "gimp": r"gimp",
    "vlc": r"vlc",
    "thunderbird": r"thunderbird",
    "libreoffice": r"libreoffice|soffice",
    "nautilus": r"nautilus",
    "terminal": r"gnome-terminal",
    "gedit": r"gedit",
    "evince": r"evince",
    "eog": r"\beog\b",
}

#: Program names (argv[0] basenames) that start each app.
_PROGRAMS = {
    "google-chrome": "chrome",
    "google-chrome-stable": "chrome",
    "chromium": "chrome",
    "gimp": "gimp",
    "gimp-2.10": "gimp",
    "vlc": "vlc",
    "thunderbird": "thunderbird",
    "libreoffice": "libreoffice",
    "soffice": "libreoffice",
    "localc": "libreoffice",
    "lowriter": "libreoffice",
    "loimpress": "libreoffice",
    "nautilus": "nautilus",
    "gnome-terminal": "terminal",
    "gedit": "gedit",
    "evince": "evince",
    "eog": "eog",
}

#: What `open` (xdg-open, the image's mimeapps.list) starts for a file extension.
_OPENERS = {
    "libreoffice": ("xlsx", "xls", "ods", "csv", "docx", "doc", "odt", "rtf", "pptx", "ppt", "odp"),
    "evince": ("pdf",),
    "gedit": ("txt", "json", "py", "sh", "md"),
    "vlc": ("mp4",),
    "eog": ("png", "jpg", "jpeg", "gif", "svg"),
}


def _argv(command: Any) -> list[str]:
    if isinstance(command, list):
        return [str(c) for c in command]
    if isinstance(command, str):
        try:
            return shlex.split(command)
        except ValueError:
            return command.split()
    return []


def _apps_of_command(command: Any) -> set[str]:
    argv = _argv(command)
    # `VLC_VERBOSE=-1 vlc ...` and `sudo x`: skip assignments and sudo to reach the program.
    while argv and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]) or argv[0] in ("sudo", "-S", "nohup", "setsid")):
        argv = argv[1:]
    if not argv:
        return set()
    app = _PROGRAMS.get(os.path.basename(argv[0]))
    return {app} if app else set()


def expected_apps(task: dict) -> list[str]:
    """The apps the task's setup (config, not postconfig) launches or opens a file in."""
    apps: set[str] = set()
    for st in task.get("config") or []:
        if not isinstance(st, dict):
            continue
        p = st.get("parameters") or {}
        t = st.get("type")
        if t in ("launch", "execute", "command"):
            apps |= _apps_of_command(p.get("command"))
        elif t == "open":
            path = str(p.get("path", ""))
            ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else ""
            for app, exts in _OPENERS.items():
                if ext in exts:
                    apps.add(app)
    return sorted(apps)


def _matches(app: str, w: dict) -> bool:
    text = " ".join(str(w.get(k, "")) for k in ("title", "instance", "className"))
    return re.search(APP_WINDOWS[app], text, re.IGNORECASE) is not None


def wait_for_app_windows(api: Any, sid: str, apps: list[str], timeout: float) -> tuple[list[dict], list[str]]:
    """Polls the session's windows until every app has one or `timeout` passes.
    Returns (windows as {title, className, instance}, apps still without a window)."""
    deadline = time.monotonic() + timeout
    while True:
        view = api._call("GET", f"/v1/sessions/{sid}/windows")
        wins = [{"title": w["title"], "className": w["className"], "instance": w["instance"]} for w in view["windows"]]
        missing = [a for a in apps if not any(_matches(a, w) for w in wins)]
        if not missing or time.monotonic() >= deadline:
            return wins, missing
        time.sleep(0.5)


def record_windows(env: Any, task: dict, res: dict, timeout: Optional[float] = None) -> None:
    """Fills res["windows"] and res["missing_windows"] for a DesktopEnv on the drums provider."""
    provider = getattr(env, "provider", None)
    if provider is None or not getattr(provider, "session", None):
        return
    if timeout is None:
        timeout = float(os.environ.get("DRUMS_OSWORLD_WINDOW_WAIT", "60"))
    apps = expected_apps(task)
    wins, missing = wait_for_app_windows(provider.api, provider.session["id"], apps, timeout if apps else 0)
    res["apps"] = apps
    res["windows"] = wins
    res["missing_windows"] = missing
