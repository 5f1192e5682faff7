"""Which app windows an OSWorld task's setup should leave on screen, and waiting for them.

`drums osworld run` records, after `reset()`, the session's windows and which of the apps the
setup starts have no window (`missing_windows`), so a setup that "succeeds" while its app never
came up shows as such (docs/osworld.md, "Running tasks"); then, after the agent's first
observation (`observe_first`), which of those apps lost their window (`lost`).
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


def wait_for_app_windows(session: Any, apps: list[str], timeout: float) -> tuple[list[dict], list[str]]:
    """Polls the windows of ``session`` (a ``drums.Session``) until every app has one or ``timeout`` passes.
    Returns (windows as {title, className, instance}, apps still without a window)."""
    deadline = time.monotonic() + timeout
    while True:
        view = session.windows()
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
    wins, missing = wait_for_app_windows(provider.handle(), apps, timeout if apps else 0)
    res["apps"] = apps
    res["windows"] = wins
    res["missing_windows"] = missing


def observe_first(env: Any, observation: str, res: dict, settle: Optional[float] = None) -> None:
    """The agent's first observation, as OSWorld's lib_run_single takes it once the setup is done
    (``env._get_obs()``: the screenshot, and the accessibility tree when the env was made with
    ``require_a11y_tree``), then the session's windows again: ``res["lost"]`` lists the apps that had a
    window after setup (``record_windows``) and have none ``settle`` seconds after the observation
    (an app that crashes when its tree is read). ``res["observation"]`` says what came back."""
    import xml.etree.ElementTree as ET

    if settle is None:
        settle = float(os.environ.get("DRUMS_OSWORLD_OBSERVE_SETTLE", "2"))
    t0 = time.monotonic()
    obs: dict = {"type": observation, "ok": False, "screenshot_bytes": None, "tree_chars": None, "error": None}
    res["observation"] = obs
    problems: list[str] = []
    try:
        o = env._get_obs()
    except Exception as e:
        problems.append(f"{type(e).__name__}: {e}")
        o = {}
    shot, tree = o.get("screenshot"), o.get("accessibility_tree")
    if isinstance(shot, (bytes, bytearray)):
        obs["screenshot_bytes"] = len(shot)
    if not (isinstance(shot, (bytes, bytearray)) and bytes(shot[:8]) == b"\x89PNG\r\n\x1a\n"):
        problems.append("no PNG screenshot")
    if isinstance(tree, str):
        obs["tree_chars"] = len(tree)
    if observation != "screenshot":
        # a11y_tree, screenshot_a11y_tree and som: the agent parses the tree (som draws its nodes'
        # boxes on the screenshot), so an empty or unparsable tree is a failed observation.
        if not isinstance(tree, str) or not tree:
            problems.append("no accessibility tree")
        else:
            try:
                root = ET.fromstring(tree)
                # What the agent sees of the apps (an app can have its window and no tree yet).
                obs["tree_apps"] = sorted({str(a.get("name")) for a in root.iter() if a.tag.endswith("application")})[
                    :20
                ]
            except ET.ParseError as e:
                problems.append(f"the accessibility tree is not XML: {e}")
    obs["ok"] = not problems
    obs["error"] = "; ".join(problems) or None
    obs["seconds"] = round(time.monotonic() - t0, 2)
    provider = getattr(env, "provider", None)
    had = [a for a in res.get("apps") or [] if a not in (res.get("missing_windows") or [])]
    if not had or provider is None or not getattr(provider, "session", None):
        return
    time.sleep(settle)
    wins, lost = wait_for_app_windows(provider.handle(), had, 0)
    res["windows_after_observing"] = wins
    res["lost"] = lost
