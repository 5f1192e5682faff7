"""OSWorld on Drums: a ``drums`` provider for the real ``desktop_env`` package.

    import drums.osworld                     # registers the provider
    from desktop_env.desktop_env import DesktopEnv
    env = DesktopEnv(provider_name="drums", action_space="pyautogui")
    obs = env.reset(task_config=task)        # a Drums reset when the env was used
    env.step("pyautogui.click(960, 540)")
    score = env.evaluate()
    env.close()                              # destroys the session

Each DesktopEnv owns one Drums session (image ``osworld`` unless
``path_to_vm="drums:<image>"`` or ``DRUMS_OSWORLD_IMAGE``). The daemon serves
OSWorld's guest contract for that session on 127.0.0.1 (the session view's
``osworld`` endpoint), so DesktopEnv's own PythonController and
SetupController talk to it unchanged.

How it plugs in (desktop_env has no provider registry): ``register()`` wraps
``create_vm_manager_and_provider`` (in ``desktop_env.providers`` and where
``desktop_env.desktop_env`` imported it) so that ``"drums"`` yields the Drums
manager and provider, and wraps ``DesktopEnv.__init__`` so that the name passes
its fixed provider-name check (it is treated like ``docker``: a fresh session
is clean, so ``is_environment_used`` starts False).

``desktop_env`` imports every metric module at import time, and a few of them
import heavy optional packages (easyocr pulls torch). ``register()`` installs
an import hook that, **only for those listed packages and only when they are
not installed**, provides a placeholder module whose every use raises
ModuleNotFoundError naming the package. Metrics that need them fail loudly;
everything else is the real code. Install the package to get the real one.

``register()`` also swaps every metric for one that runs in a sandbox, never in this
process: ``check_python_file_by_test_suite`` in a throwaway Drums session, the rest under
bubblewrap (``drums.osworld_sandbox``; ``DRUMS_OSWORLD_SANDBOX=0`` turns it off).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Optional

import requests

from ._optional import OPTIONAL_HEAVY
from ._optional import OptionalFinder as _OptionalFinder
from ._optional import install_finder as _install_finder

__all__ = ["register", "DrumsAPI", "DrumsProvider", "DrumsVMManager", "OPTIONAL_HEAVY"]


# --------------------------------------------------------------------- Drums HTTP API (minimal)


class DrumsAPI:
    """Just what the provider needs from the Drums daemon's HTTP API."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 300):
        state = os.environ.get("DRUMS_STATE_DIR", "/var/lib/drums")
        if url is None:
            url = os.environ.get("DRUMS_URL")
            if not url:
                with open(os.path.join(state, "daemon.json")) as f:
                    url = json.load(f)["url"]
        if token is None:
            token = os.environ.get("DRUMS_TOKEN")
            if not token:
                with open(os.path.join(state, "token")) as f:
                    token = f.read().strip()
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Bearer {token}"

    def _call(self, method: str, path: str, **kw) -> Any:
        r = self.s.request(method, self.url + path, timeout=self.timeout, **kw)
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
                msg = f"{err['code']}: {err['message']}"
            except Exception:
                msg = r.text[:500]
            raise RuntimeError(f"Drums {method} {path} failed ({r.status_code}): {msg}")
        return r.json() if r.content else None

    def create(self, spec: dict) -> dict:
        return self._call("POST", "/v1/sessions", json=spec)

    def get(self, sid: str) -> dict:
        return self._call("GET", f"/v1/sessions/{sid}")

    def reset(self, sid: str) -> dict:
        return self._call("POST", f"/v1/sessions/{sid}/reset")

    def destroy(self, sid: str) -> None:
        self._call("DELETE", f"/v1/sessions/{sid}")

    def fork(self, sid: str, count: int, mode: str = "disk") -> dict:
        return self._call("POST", f"/v1/sessions/{sid}/fork", json={"count": count, "mode": mode})

    def set_outcome(self, sid: str, generation: int, body: dict) -> dict:
        return self._call("POST", f"/v1/sessions/{sid}/episodes/{int(generation)}/outcome", json=body)


#: A session the next DrumsProvider started on this thread adopts instead of creating one
#: (a forked copy of a set-up task; see drums.osworld_group and DrumsProvider.fork).
_handoff = threading.local()


def adopt_next(session: dict) -> None:
    """The next ``DesktopEnv(provider_name="drums")`` made on this thread runs on ``session``."""
    _handoff.session = session


# --------------------------------------------------------------------- provider


def _base_classes():
    from desktop_env.providers.base import Provider, VMManager

    return Provider, VMManager


def _parse_path(path_to_vm: Optional[str]) -> tuple[str, Optional[str]]:
    """``drums:<image>[:<W>x<H>]`` → (image, screen)."""
    image, screen = os.environ.get("DRUMS_OSWORLD_IMAGE", "osworld"), None
    if path_to_vm and path_to_vm.startswith("drums:"):
        parts = path_to_vm.split(":")
        if len(parts) > 1 and parts[1]:
            image = parts[1]
        if len(parts) > 2 and parts[2]:
            screen = parts[2]
    return image, screen


def _make_classes():
    Provider, VMManager = _base_classes()

    class DrumsVMManager(VMManager):
        """No registry: every DesktopEnv gets its own session."""

        def initialize_registry(self, **kwargs):
            pass

        def add_vm(self, vm_path, **kwargs):
            pass

        def delete_vm(self, vm_path, **kwargs):
            pass

        def occupy_vm(self, vm_path, pid, **kwargs):
            pass

        def list_free_vms(self, **kwargs):
            return []

        def check_and_clean(self, **kwargs):
            pass

        def get_vm_path(self, os_type="Ubuntu", region=None, screen_size=(1920, 1080), **kwargs):
            image = os.environ.get("DRUMS_OSWORLD_IMAGE", "osworld")
            return f"drums:{image}:{int(screen_size[0])}x{int(screen_size[1])}"

    class DrumsProvider(Provider):
        """start = create a session (or wait for the current one), revert = reset, stop = destroy."""

        ready_timeout = float(os.environ.get("DRUMS_OSWORLD_READY_TIMEOUT", "300"))

        def __init__(self, region=None, api: Optional[DrumsAPI] = None):
            super().__init__(region)
            self.api = api or DrumsAPI()
            self.session: Optional[dict] = None
            self.labels = {"drums.osworld": "1"}

        def start_emulator(self, path_to_vm: str, headless: bool = True, os_type: str = "Ubuntu", *args):
            if self.session is None and getattr(_handoff, "session", None) is not None:
                self.session, _handoff.session = _handoff.session, None
            if self.session is None:
                image, screen = _parse_path(path_to_vm)
                spec: dict = {"image": image, "labels": self.labels}
                # Web tasks need the session's browser on the web (OSWorld's VM has it); Drums sessions
                # have no egress unless asked. `drums osworld run --allow-internet` sets this.
                if os.environ.get("DRUMS_OSWORLD_EGRESS") == "1":
                    spec["egress"] = True
                # Resets served by standbys (docs/pools.md, "Standbys"): each costs a whole idle session.
                standbys = int(os.environ.get("DRUMS_OSWORLD_STANDBYS", "0") or 0)
                if standbys:
                    spec["standbys"] = standbys
                # `drums osworld run --record`: the daemon records every attempt (docs/episodes.md).
                if os.environ.get("DRUMS_OSWORLD_RECORD"):
                    spec["record"] = json.loads(os.environ["DRUMS_OSWORLD_RECORD"])
                if screen:
                    spec["screen"] = screen
                self.session = self.api.create(spec)
            self._wait_ready()

        def _wait_ready(self):
            # Like the docker provider: poll GET /screenshot until it answers 200.
            assert self.session is not None
            deadline = time.monotonic() + self.ready_timeout
            last = None
            while time.monotonic() < deadline:
                s = self.api.get(self.session["id"])
                self.session = s
                if s["state"] == "ready" and s.get("osworld"):
                    url = f"http://127.0.0.1:{s['osworld']['serverPort']}/screenshot"
                    try:
                        r = requests.get(url, timeout=(10, 10))
                        if r.status_code == 200:
                            return
                        last = f"/screenshot {r.status_code}"
                    except requests.RequestException as e:
                        last = str(e)
                elif s["state"] == "broken":
                    raise RuntimeError(f"Drums session {s['id']} is broken: {s.get('brokenReason')}")
                elif s["state"] == "ready":
                    raise RuntimeError(
                        f"Drums session {s['id']} has no OSWorld endpoint (image {s['image']!r}; use the osworld image or label drums.osworld=1)"
                    )
                time.sleep(0.5)
            raise TimeoutError(f"Drums session not ready for OSWorld within {self.ready_timeout}s ({last})")

        def fork(self, count: int, mode: str = "disk") -> list[dict]:
            """``count`` copies of this provider's session (e.g. after a task's setup), for ``adopt_next``."""
            assert self.session is not None, "start_emulator first"
            return self.api.fork(self.session["id"], count, mode)["copies"]

        def get_ip_address(self, path_to_vm: str) -> str:
            assert self.session is not None, "start_emulator first"
            return self.session["osworld"]["address"]

        def save_state(self, path_to_vm: str, snapshot_name: str):
            raise NotImplementedError("Drums sessions always reset to their image; there are no snapshots to save")

        def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str):
            if self.session is None:
                return None
            self.session = self.api.reset(self.session["id"])
            return None

        def stop_emulator(self, path_to_vm: str, *args, **kwargs):
            if self.session is not None:
                sid = self.session["id"]
                self.session = None
                try:
                    self.api.destroy(sid)
                except RuntimeError as e:
                    if "session_not_found" not in str(e):
                        raise

    return DrumsVMManager, DrumsProvider


DrumsVMManager = None  # set by register()
DrumsProvider = None


# --------------------------------------------------------------------- optional heavy imports

_finder: Optional[_OptionalFinder] = None  # set by register()
_registered = False


def register() -> None:
    """Makes ``DesktopEnv(provider_name="drums")`` work (idempotent)."""
    global _finder, _registered, DrumsVMManager, DrumsProvider
    if _registered:
        return
    import warnings

    warnings.filterwarnings(
        "ignore", message="The `fitz` API is deprecated", category=FutureWarning
    )  # desktop_env imports fitz
    if _finder is None:
        _finder = _install_finder(OPTIONAL_HEAVY)
    import desktop_env.providers as providers
    import desktop_env.desktop_env as de

    DrumsVMManager, DrumsProvider = _make_classes()
    original = providers.create_vm_manager_and_provider

    def create_vm_manager_and_provider(provider_name: str, region: str, use_proxy: bool = False):
        if provider_name.lower().strip() == "drums":
            return DrumsVMManager(), DrumsProvider(region)
        return original(provider_name, region, use_proxy)

    providers.create_vm_manager_and_provider = create_vm_manager_and_provider
    de.create_vm_manager_and_provider = create_vm_manager_and_provider

    init = de.DesktopEnv.__init__

    def __init__(self, provider_name: str = "vmware", *args, **kwargs):
        if isinstance(provider_name, str) and provider_name.lower().strip() == "drums":
            # Pass the fixed name check as "docker" (clean on start); the factory call inside sees "drums".
            de.create_vm_manager_and_provider = lambda _n, region, use_proxy=False: create_vm_manager_and_provider(
                "drums", region, use_proxy
            )
            try:
                init(self, "docker", *args, **kwargs)
            finally:
                de.create_vm_manager_and_provider = create_vm_manager_and_provider
            self.provider_name = "drums"
            return
        init(self, provider_name, *args, **kwargs)

    de.DesktopEnv.__init__ = __init__
    if os.environ.get("DRUMS_OSWORLD_SANDBOX", "1") != "0":
        from . import osworld_sandbox

        osworld_sandbox.install()  # every metric runs in a sandbox (docs/osworld.md)
    _registered = True


try:
    register()
except Exception as e:
    if __name__ != "__main__":
        raise
    # `drums osworld run|assets`: a desktop_env that cannot be imported (a checkout given with --osworld-src
    # whose requirements are not installed, say) is one line that says why, not a traceback.
    _src = os.environ.get("DRUMS_OSWORLD_SRC")
    print(
        f"drums osworld: cannot import desktop_env{f' from --osworld-src {_src}' if _src else ''}: "
        f"{type(e).__name__}: {e} (install what it needs into {sys.executable}'s environment, "
        f"e.g. pip install -r {_src or '<checkout>'}/requirements.txt)",
        file=sys.stderr,
    )
    sys.exit(2)


# --------------------------------------------------------------------- task runner (drums osworld run)

#: Setup/getter types that reach beyond the guest and that no cache can serve (live pages, accounts).
#: ``download``/``update_browse_history`` steps and ``cloud_file`` getters are served by the asset
#: cache (drums.osworld_assets); ``rule_relativeTime`` computes dates locally.
INTERNET_SETUP = {"chrome_open_tabs", "googledrive", "login", "proxy"}
INTERNET_GETTERS = {"googledrive_file", "info_from_website", "page_info", "pdf_from_url", "number_of_search_results"}


def needs_internet(task: dict) -> Optional[str]:
    """Why a task needs the live internet (None if it does not): open tabs, accounts, live pages.
    Files from OSWorld's file store are not counted here: they come from the asset cache."""
    ev = task.get("evaluator") or {}
    steps = list(task.get("config") or []) + list(ev.get("postconfig") or [])
    for st in steps:
        if isinstance(st, dict) and st.get("type") in INTERNET_SETUP:
            urls = (st.get("parameters") or {}).get("urls_to_open") or []
            return f"setup step '{st.get('type')}'" + (f" opens {urls[0]}" if urls and isinstance(urls[0], str) else "")
    for key in ("result", "expected"):
        cfgs = ev.get(key)
        for c in cfgs if isinstance(cfgs, list) else [cfgs]:
            if isinstance(c, dict) and c.get("type") in INTERNET_GETTERS:
                return f"evaluator getter '{c.get('type')}'"
    return None


#: Setup and getter types that need a Google account (PyDrive and a browser login to drive.google.com).
ACCOUNT_SETUP = {"googledrive", "login"}
ACCOUNT_GETTERS = {"googledrive_file"}


def task_needs(task: Any) -> dict:
    """What a task needs beyond this host, from its JSON alone (for the record's per-domain table):
    ``files`` (how many files from OSWorld's file store: the asset cache, or stand-ins for it), ``web``
    (why it needs the live web, or None), ``account`` (why it needs a Google account, or None) and
    ``vs_code`` (VS Code among its apps, which the image lacks). The web by instruction alone (a task
    whose agent must browse) is not visible in the JSON and is not counted."""
    out: dict = {"files": 0, "web": None, "account": None, "vs_code": False}
    if not isinstance(task, dict):
        return out
    from .osworld_assets import task_assets

    try:
        out["files"] = len(task_assets(task, fonts=False))
    except Exception:
        pass
    ev = task.get("evaluator") if isinstance(task.get("evaluator"), dict) else {}
    for st in list(task.get("config") or []) + list(ev.get("postconfig") or []):
        if isinstance(st, dict) and st.get("type") in ACCOUNT_SETUP:
            out["account"] = f"setup step '{st.get('type')}'"
            break
    if out["account"] is None:
        for key in ("result", "expected"):
            cfgs = ev.get(key)
            for c in cfgs if isinstance(cfgs, list) else [cfgs]:
                if isinstance(c, dict) and c.get("type") in ACCOUNT_GETTERS:
                    out["account"] = f"evaluator getter '{c.get('type')}'"
    if out["account"] is None:
        out["web"] = needs_internet(task)
    apps = task.get("related_apps") or []
    out["vs_code"] = any(
        APP_COMMANDS.get(str(a).strip().lower().replace(" ", "_")) == "code"
        for a in (apps if isinstance(apps, list) else [])
    )
    return out


#: The observation types of OSWorld's run.py (``--observation_type``), and its default. All but
#: ``screenshot`` make DesktopEnv read the accessibility tree with every observation
#: (``require_a11y_tree``); ``som`` is the screenshot and the tree, which the agent marks up itself.
OBSERVATIONS = ("screenshot", "a11y_tree", "screenshot_a11y_tree", "som")
DEFAULT_OBSERVATION = "a11y_tree"


def check_observation(observation: Any) -> str:
    if observation not in OBSERVATIONS:
        raise ValueError(
            f"unknown observation type {observation!r}: use one of {', '.join(OBSERVATIONS)} (OSWorld run.py's --observation_type)"
        )
    return observation


def validate_task(task: Any) -> None:
    if not isinstance(task, dict):
        raise ValueError("a task must be a JSON object")
    for k in ("id", "instruction", "evaluator"):
        if k not in task:
            raise ValueError(f"task is missing '{k}'")
    if not isinstance(task.get("config", []), list):
        raise ValueError("'config' must be a list of {type, parameters} steps")
    for i, st in enumerate(task.get("config", [])):
        if not isinstance(st, dict) or not isinstance(st.get("type"), str):
            raise ValueError(f"config[{i}] must be an object with a string 'type'")
    if not isinstance(task["evaluator"], dict) or "func" not in task["evaluator"]:
        raise ValueError("'evaluator' must be an object with 'func'")
    from .osworld_assets import task_assets

    task_assets(task)  # ids and file names that are safe as cache paths (AssetError is a ValueError)


def load_tasks(paths: list[str]) -> list[tuple[str, Any]]:
    """(source path, task or Exception) for each file, directories expanded to their *.json."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".json"))
        else:
            files.append(p)
    out: list[tuple[str, Any]] = []
    for f in files:
        try:
            with open(f) as fh:
                t = json.load(fh)
            validate_task(t)
            out.append((f, t))
        except Exception as e:  # malformed task: reported, never fatal
            out.append((f, ValueError(f"malformed task JSON {f}: {e}")))
    return out


#: related_apps value (lower case, spaces as _) -> the command the image must have for the task to make sense.
APP_COMMANDS = {
    "chrome": "google-chrome",
    "browser": "google-chrome",
    "gimp": "gimp",
    "libreoffice": "libreoffice",
    "libreoffice_calc": "libreoffice",
    "calc": "libreoffice",
    "libreoffice_impress": "libreoffice",
    "libreoffice_writer": "libreoffice",
    "writer": "libreoffice",
    "vlc": "vlc",
    "thunderbird": "thunderbird",
    "vs_code": "code",
    "vscode": "code",
}


def missing_apps(task: dict, have: Any) -> list[str]:
    """The task's related_apps whose command the session's image lacks (``have(cmds) -> set of present``)."""
    apps = task.get("related_apps") or []
    need = {}
    for app in apps if isinstance(apps, list) else []:
        cmd = APP_COMMANDS.get(str(app).strip().lower().replace(" ", "_"))
        if cmd:
            need.setdefault(cmd, app)
    if not need:
        return []
    present = have(sorted(need))
    return [f"{app} (no '{cmd}' command)" for cmd, app in need.items() if cmd not in present]


def _image_has(env) -> Any:
    """A probe of the session's image: which of these commands exist on the desktop user's PATH."""

    def have(cmds: list[str]) -> set:
        r = requests.post(
            env.controller.http_server + "/execute",
            timeout=60,
            json={
                "command": ["sh", "-c", 'for c in "$@"; do command -v "$c" >/dev/null && echo "$c"; done', "sh", *cmds],
                "shell": False,
            },
        )
        r.raise_for_status()
        return set((r.json().get("output") or "").split())

    return have


def _step_noting_errors(env, action: str, pause: float, i: int, warnings: list) -> None:
    """env.step, noting in the result what desktop_env only logs: an action that raised in the guest."""
    ctl = env.controller
    real = ctl.execute_python_command
    seen: list = []

    def recording(command):
        r = real(command)
        seen.append(r)
        return r

    ctl.execute_python_command = recording
    try:
        env.step(action, pause)
    finally:
        ctl.execute_python_command = real
    for r in seen:
        if r is None:
            warnings.append(f"oracle step {i}: no answer from the guest (desktop_env gives an action 90 s)")
        elif isinstance(r, dict) and "Traceback" in str(r.get("error") or ""):
            warnings.append(f"oracle step {i}: " + str(r["error"]).strip().splitlines()[-1][:300])


def _refuse(res: dict, t0: float, msg: str) -> dict:
    res["error"] = msg
    res["seconds"] = round(time.monotonic() - t0, 2)
    return res


def cache_preflight(task: dict, cache: str, allow_internet: bool) -> tuple[Optional[str], list[str]]:
    """Whether the shared asset cache can serve the task: (why it is refused, or None; warnings).
    Used by plain runs and by groups (drums.osworld_group) alike."""
    from . import osworld_assets as assets

    st = assets.check_task(cache, task)
    if st["bad"]:
        return f"bad file(s) in the asset cache {cache}: " + "; ".join(st["bad"]), []
    if st["missing"] and not allow_internet:
        return (
            f"needs {len(st['missing'])} file(s) that are not in the asset cache {cache}: "
            + ", ".join(st["missing"])
            + " (run `drums osworld assets fetch` for this task on a host with internet, or pass --allow-internet)"
        ), []
    if st["fonts"] not in (None, "ok"):
        return None, [
            f"OSWorld's font pack is not installed (not cached: {assets.FONTS_URL}); slides may render with other fonts"
        ]
    return None, []


def run_task(
    src: str,
    task: Any,
    oracle: Optional[list],
    pause: float,
    allow_internet: bool,
    cache_root: str,
    asset_cache: Optional[str] = None,
    observation: str = DEFAULT_OBSERVATION,
) -> dict:
    """One task: set up with its real setup, observed once as an agent with ``observation`` would be,
    its apps' windows checked after setup and again after that observation, then scored (before
    acting, unless an oracle acts). The result says whether it was ``live`` (set up, its apps'
    windows up after the first observation), ``started_solved`` (a score other than 0.0 with no
    action) and which apps it ``lost`` after observing."""
    import shutil
    import tempfile
    from desktop_env.desktop_env import DesktopEnv
    from . import osworld_assets as assets

    check_observation(observation)
    t0 = time.monotonic()
    res: dict = {
        "task": task.get("id", os.path.basename(src)) if isinstance(task, dict) else os.path.basename(src),
        "file": src,
        "setup_ok": False,
        "score": None,
        "episode": None,
        "oracle": oracle is not None,
        "error": None,
        "warnings": [],
        "session": None,
        "reset_s": None,
        "seconds": None,
        "observation_type": observation,
        "needs": task_needs(task),
        "observation": None,
        "lost": [],
        "live": False,
        "started_solved": None,
    }
    if isinstance(task, Exception):
        return _refuse(res, t0, str(task))
    why = None if allow_internet else needs_internet(task)
    if why:
        return _refuse(
            res,
            t0,
            f"needs the internet ({why}); this host has no egress, so the task was not started (pass --allow-internet on a host that has it)",
        )
    cache = asset_cache or assets.default_cache_dir()
    refused, warnings = cache_preflight(task, cache, allow_internet)
    if refused:
        return _refuse(res, t0, refused)
    res["warnings"] += warnings
    env = None
    base = tempfile.mkdtemp(prefix="task-", dir=cache_root)  # this task's private copy of its cache files
    try:
        font_name = assets.materialize(cache, task, base)
        run = task
        if font_name:
            run = dict(task, config=assets.font_steps(font_name) + list(task.get("config") or []))
        env = DesktopEnv(
            provider_name="drums",
            action_space="pyautogui",
            require_a11y_tree=observation != "screenshot",  # as run.py makes it
            cache_dir=base,
        )
        res["session"] = env.provider.session["id"] if env.provider.session else None
        lacking = missing_apps(task, _image_has(env))
        if lacking:
            res["error"] = (
                f"the session's image ({env.provider.session.get('image') if env.provider.session else '?'}) lacks the app(s) "
                f"this task uses: {', '.join(lacking)}; use an image that has them (DRUMS_OSWORLD_IMAGE)"
            )
            return res
        t1 = time.monotonic()
        env.reset(task_config=run)
        res["reset_s"] = round(time.monotonic() - t1, 2)
        res["setup_ok"] = True
        from drums.osworld_apps import observe_first, record_windows

        record_windows(env, task, res)
        observe_first(env, observation, res)
        for i, a in enumerate(oracle or []):
            _step_noting_errors(env, a, pause, i, res["warnings"])
        res["score"] = float(env.evaluate())
        res["episode"] = attach_score(env, res["score"], res["task"])
        if oracle is None:
            res["started_solved"] = res["score"] != 0
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        if env is not None:
            try:
                env.close()
            except Exception as e:
                res["error"] = (res["error"] or "") + f" (close: {e})"
        shutil.rmtree(base, ignore_errors=True)
        res["seconds"] = round(time.monotonic() - t0, 2)
        obs = res["observation"] or {}
        res["live"] = bool(res["setup_ok"] and obs.get("ok") and not res.get("missing_windows") and not res["lost"])
    return res


def attach_score(env: Any, score: Optional[float], task_id: Any) -> Optional[dict]:
    """With ``--record``: the task's score on the episode of the attempt just scored (the session's current
    generation), as ``reward`` and ``outcome`` success (above 0) or failure. Returns ``{session, generation}``,
    or ``{error}`` when the daemon refused (the run goes on); None when not recording."""
    if not os.environ.get("DRUMS_OSWORLD_RECORD") or score is None or env is None or not env.provider.session:
        return None
    sid = env.provider.session["id"]
    try:
        gen = env.provider.api.get(sid)["generation"]
        body = {
            "reward": float(score),
            "outcome": "success" if score > 0 else "failure",
            "details": {"task": str(task_id)},
        }
        env.provider.api.set_outcome(sid, gen, body)
        return {"session": sid, "generation": gen}
    except Exception as e:  # the score stands; only its copy on the episode is missing
        return {"session": sid, "error": f"{type(e).__name__}: {e}"}


def check_osworld_src() -> Optional[str]:
    """With DRUMS_OSWORLD_SRC set (drums osworld run --osworld-src): an error unless desktop_env came from there."""
    src = os.environ.get("DRUMS_OSWORLD_SRC")
    if not src:
        return None
    import desktop_env

    where = os.path.realpath(os.path.dirname(desktop_env.__file__))
    want = os.path.realpath(os.path.join(src, "desktop_env"))
    if where != want:
        return f"--osworld-src {src}: desktop_env was imported from {where}, not from the checkout"
    return None


def run_main(argv: list[str]) -> int:
    import argparse
    import concurrent.futures
    import logging
    import shutil
    import tempfile

    ap = argparse.ArgumentParser(
        prog="drums osworld run", description="Run OSWorld task JSONs on Drums sessions with the real desktop_env."
    )
    ap.add_argument("tasks", nargs="+", help="task JSON files or directories of them")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument(
        "--oracle", help="JSON {task_id: [pyautogui code | 'FAIL' | 'DONE' | 'WAIT', ...]} applied through env.step"
    )
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds env.step sleeps after each action")
    ap.add_argument("--allow-internet", action="store_true", help="start tasks that need the internet")
    ap.add_argument(
        "--group",
        type=int,
        default=0,
        help="GRPO groups: set each task up once, fork N-1 copies, score all N (drums.osworld_group)",
    )
    ap.add_argument(
        "--cache",
        help="the shared asset cache (default $DRUMS_OSWORLD_CACHE or $DRUMS_STATE_DIR/osworld-cache); never written by a run",
    )
    ap.add_argument(
        "--observation",
        choices=OBSERVATIONS,
        default=DEFAULT_OBSERVATION,
        help=f"what each task is observed with, as an agent of OSWorld's run.py --observation_type would be (default {DEFAULT_OBSERVATION}, run.py's)",
    )
    ap.add_argument(
        "--record",
        nargs="?",
        const=2.0,
        type=float,
        metavar="FPS",
        help="record every attempt as an episode (frames at FPS, default 2; trees kept) and attach each task's score to it (docs/episodes.md)",
    )
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.ERROR)
    err = check_osworld_src()
    if err:
        print(err, file=sys.stderr)
        return 2
    oracles: dict = {}
    if a.oracle:
        with open(a.oracle) as f:
            oracles = json.load(f)
    tasks = load_tasks(a.tasks)
    if not tasks:
        print("no task files found", file=sys.stderr)
        return 2
    from .osworld_assets import default_cache_dir

    asset_cache = a.cache or default_cache_dir()
    if a.allow_internet:
        # Without egress a web task's pages never load in the session, and one that checks something is
        # gone (chrome 7b6c7e24: no amazon.com cookies) scores 1.0 before acting.
        os.environ["DRUMS_OSWORLD_EGRESS"] = "1"
    if a.record is not None:
        if not 0 <= a.record <= 30:
            print("--record FPS must be within 0..30", file=sys.stderr)
            return 2
        os.environ["DRUMS_OSWORLD_RECORD"] = json.dumps({"frames": a.record, "a11y": True})
    cache_root = tempfile.mkdtemp(prefix="drums-osworld-")
    results: list[dict] = []
    n = len(tasks)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t_run = time.monotonic()
    print(f"running {n} task(s), {a.parallel} at a time, observed as {a.observation}", file=sys.stderr, flush=True)

    def write_out(done: list[dict], complete: bool) -> None:
        """The results so far (after each task, so a long run that is stopped keeps them), then all of them."""
        if not a.out:
            return
        import platform
        import desktop_env

        results = list(done)
        wall = round(time.monotonic() - t_run, 1)
        summary = {
            "tasks": n,
            "setup_ok": sum(1 for r in results if r["setup_ok"]),
            "scored_1": sum(1 for r in results if r["score"] == 1),
            "scored_0": sum(1 for r in results if r["score"] == 0),
            "not_started": sum(1 for r in results if r["score"] is None),
            "live": sum(1 for r in results if r.get("live")),
            "started_solved": sum(1 for r in results if r.get("started_solved")),
            "lost_app": sum(1 for r in results if r.get("lost")),
            "wall_seconds": wall,
            "complete": complete,
        }
        tmp = f"{a.out}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(
                {
                    "schemaVersion": 1,
                    "experiment": "osworld-tasks",
                    "started": started,
                    "config": {
                        "parallel": a.parallel,
                        "tasks": a.tasks,
                        "oracle": bool(a.oracle),
                        "pause": a.pause,
                        "allow_internet": a.allow_internet,
                        "cache": asset_cache,
                        "desktop_env": os.path.dirname(desktop_env.__file__),
                        "osworld_src": os.environ.get("DRUMS_OSWORLD_SRC"),
                        "group": a.group,
                        "observation": a.observation,
                        "record": a.record,
                    },
                    "host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version()},
                    "results": {"summary": summary, "tasks": results},
                    "notes": [
                        "wall_seconds: from the first task's start to the last task's end, tasks run through desktop_env.DesktopEnv on Drums sessions (provider drums)",
                        "live: set up, and every app its setup starts had a window after the first observation (observation_type, as OSWorld's run.py --observation_type); started_solved: scored other than 0.0 with no action; lost: apps whose window was there after setup and gone after observing",
                    ],
                },
                f,
                indent=2,
            )
        os.replace(tmp, a.out)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as ex:
            futs = {}
            for src, t in tasks:
                tid = t.get("id") if isinstance(t, dict) else None
                orc = oracles.get(tid) if (a.oracle and tid) else None
                if a.group > 0:
                    from .osworld_group import run_group

                    futs[
                        ex.submit(
                            run_group,
                            src,
                            t,
                            orc,
                            a.pause,
                            a.allow_internet,
                            cache_root,
                            a.group,
                            asset_cache=asset_cache,
                            observation=a.observation,
                        )
                    ] = src
                else:
                    futs[
                        ex.submit(
                            run_task, src, t, orc, a.pause, a.allow_internet, cache_root, asset_cache, a.observation
                        )
                    ] = src
            for i, fut in enumerate(concurrent.futures.as_completed(futs), 1):
                r = fut.result()
                results.append(r)
                write_out(results, False)
                status = "ok " if r["setup_ok"] else "ERR"
                lost = f"  lost after observing: {', '.join(r['lost'])}" if r.get("lost") else ""
                print(
                    f"[{i}/{n}] {status} {r['task'][:36]:36} score={r['score']} {r['seconds']}s"
                    + (f"  {r['error'][:300]}" if r["error"] else "")
                    + lost,
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    order = {src: i for i, (src, _) in enumerate(tasks)}
    results.sort(key=lambda r: order.get(r["file"], 0))
    print(f"{'task':38} {'setup':5} {'score':>5} {'time':>7}  error")
    for r in results:
        sc = "-" if r["score"] is None else f"{r['score']:.1f}"
        print(
            f"{r['task'][:38]:38} {('ok' if r['setup_ok'] else 'no'):5} {sc:>5} {r['seconds']:>6}s  {(r['error'] or '')[:100]}"
        )
    wall = round(time.monotonic() - t_run, 1)
    print(f"{n} task(s) in {wall} s at --parallel {a.parallel}", file=sys.stderr)
    write_out(results, True)
    return 0


def standins_main(argv: list[str]) -> int:
    """drums osworld assets standins TASKS... --cache DIR [--force] [--json]"""
    import argparse
    from . import osworld_standins as standins

    ap = argparse.ArgumentParser(
        prog="drums osworld assets standins",
        description="stand-in files for every file the tasks fetch, in a test cache (docs/osworld.md, 'Stand-in files')",
    )
    ap.add_argument("tasks", nargs="+", help="task JSON files or directories of them")
    ap.add_argument("--cache", required=True, help="the test cache to fill (never the shared cache)")
    ap.add_argument("--force", action="store_true", help="remake files already there")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    tasks, bad = [], []
    for src, t in load_tasks(a.tasks):
        if isinstance(t, Exception):
            bad.append(f"{src}: {t}")
        else:
            tasks.append(t)
    try:
        res = standins.make_standins(a.cache, tasks, force=a.force)
    except standins.StandinError as e:
        print(f"drums osworld assets standins: {e}", file=sys.stderr)
        return 2
    res["failed"] = bad + res["failed"]
    if a.json:
        print(json.dumps({"cache": a.cache, **res}, indent=2))
    else:
        for f in res["failed"]:
            print(f"ERR  {f}")
        print(
            f"made {res['made']} stand-in file(s) ({res['bytes']} bytes) in {a.cache}, {res['present']} already there, "
            f"{len(res['failed'])} failed",
            file=sys.stderr,
        )
    return 1 if res["failed"] else 0


def assets_main(argv: list[str]) -> int:
    """drums osworld assets fetch|check TASKS... [--cache DIR] [--mirror URL] [--fonts] [--json]"""
    if argv[:1] == ["standins"]:
        return standins_main(argv[1:])
    import argparse
    from . import osworld_assets as assets

    ap = argparse.ArgumentParser(prog="drums osworld assets", description="OSWorld's asset cache (docs/osworld.md)")
    ap.add_argument("action", choices=["fetch", "check"])
    ap.add_argument("tasks", nargs="+", help="task JSON files or directories of them")
    ap.add_argument("--cache", help="cache directory (default $DRUMS_OSWORLD_CACHE or $DRUMS_STATE_DIR/osworld-cache)")
    ap.add_argument(
        "--mirror",
        default=os.environ.get("DRUMS_OSWORLD_MIRROR"),
        help=f"fetch from this base URL instead of {assets.STORE}",
    )
    ap.add_argument("--fonts", action="store_true", help="include OSWorld's font pack even if no Impress task is named")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    cache = a.cache or assets.default_cache_dir()
    per_task: list[dict] = []
    todo: list = []
    for src, t in load_tasks(a.tasks):
        if isinstance(t, Exception):
            per_task.append({"file": src, "task": None, "error": str(t)})
            continue
        files = assets.task_assets(t)
        todo += files
        per_task.append({"file": src, "task": t["id"], "files": files})
    if a.fonts:
        todo.append(assets.Asset(assets.FONTS_URL, assets.FONTS_REL, "fonts"))
    fetched = None
    if a.action == "fetch":
        os.makedirs(cache, exist_ok=True)
        fetched = assets.fetch_assets(cache, todo, a.mirror)
    report = []
    bad_any = False
    for e in per_task:
        if e.get("error"):
            report.append({"file": e["file"], "task": None, "error": e["error"]})
            bad_any = True
            continue
        missing, bad, ok = [], [], 0
        for f in e["files"]:
            st, detail = assets.status(cache, f)
            if st == "ok":
                ok += 1
            elif st == "missing":
                missing.append({"url": f.url, "path": os.path.join(cache, f.rel), "detail": detail})
            else:
                bad.append({"url": f.url, "path": os.path.join(cache, f.rel), "detail": detail})
        bad_any = bad_any or bool(missing or bad)
        report.append(
            {"file": e["file"], "task": e["task"], "files": len(e["files"]), "ok": ok, "missing": missing, "bad": bad}
        )
    if a.json:
        print(json.dumps({"cache": cache, "tasks": report, "fetch": fetched}, indent=2))
    else:
        for r in report:
            if r.get("error"):
                print(f"ERR  {r['file']}: {r['error']}")
                continue
            mark = "ok  " if not (r["missing"] or r["bad"]) else "MISS"
            print(f"{mark} {r['task']}  {r['ok']}/{r['files']} file(s) cached")
            for m in r["missing"]:
                print(f"       missing {m['url']}")
            for b in r["bad"]:
                print(f"       bad     {b['detail']}")
        if fetched is not None:
            print(
                f"fetched {fetched['fetched']} file(s) ({fetched['bytes']} bytes), {fetched['present']} already cached, {len(fetched['failed'])} failed",
                file=sys.stderr,
            )
    return 1 if bad_any else 0


if __name__ == "__main__":
    cmds = {"run": run_main, "assets": assets_main}
    if len(sys.argv) > 1 and sys.argv[1] in cmds:
        sys.exit(cmds[sys.argv[1]](sys.argv[2:]))
    print("usage: python -m drums.osworld run TASKS... | assets fetch|check|standins TASKS...", file=sys.stderr)
    sys.exit(2)
