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

import hashlib
import json
import os
import sys
import threading
import time
from typing import Any, Optional

import httpx

from . import errors
from ._optional import OPTIONAL_HEAVY
from ._optional import OptionalFinder as _OptionalFinder
from ._optional import install_finder as _install_finder
from .client import Client, Session
from .osworld_tasks import load_tasks, validate_task  # noqa: F401  (public here too; light, for the assets CLI)

__all__ = ["register", "DrumsProvider", "DrumsVMManager", "OPTIONAL_HEAVY"]


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
        """start = create a session (or wait for the current one), revert = reset, stop = destroy.

        Talks to the daemon through ``client``, a ``drums.Client`` (by default found as ``Client()``
        finds it: DRUMS_URL/DRUMS_TOKEN or the state dir), so its failures are the typed
        ``drums.errors``. ``session`` is the session's view (a dict), as ``adopt_next`` hands it
        on; ``handle()`` is a ``drums.Session`` on it, pinned to the generation last read."""

        ready_timeout = float(os.environ.get("DRUMS_OSWORLD_READY_TIMEOUT", "300"))

        def __init__(self, region=None, client: Optional[Client] = None):
            super().__init__(region)
            self.client = client or Client()
            self.session: Optional[dict] = None
            self.labels = {"drums.osworld": "1"}
            # A claim from a pool of set-up tasks (drums.osworld_pool.claim_into): the member is ready.
            self.trust_ready = False
            # Earlier sessions being destroyed in the background after a claim (joined on stop).
            self.pending: list[threading.Thread] = []

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
                self.session = dict(self.client.sessions.create(**spec).info)
            if not self.trust_ready:
                self._wait_ready()

        def handle(self) -> Session:
            """This provider's session as a ``drums.Session`` (its calls carry the generation last read)."""
            assert self.session is not None, "start_emulator first"
            return Session(self.client, self.session)  # type: ignore[arg-type]

        def _wait_ready(self):
            # Like the docker provider: poll GET /screenshot until it answers 200.
            assert self.session is not None
            deadline = time.monotonic() + self.ready_timeout
            last = None
            while time.monotonic() < deadline:
                s = self.session = dict(self.client.sessions.get(self.session["id"]).info)
                if s["state"] == "ready" and s.get("osworld"):
                    # The session's guest contract (OSWorld's server), not the Drums API.
                    url = f"http://127.0.0.1:{s['osworld']['serverPort']}/screenshot"
                    try:
                        r = httpx.get(url, timeout=10)
                        if r.status_code == 200:
                            return
                        last = f"/screenshot {r.status_code}"
                    except httpx.HTTPError as e:
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
            return [dict(c.info) for c in self.handle().fork(count, mode=mode)]

        def get_ip_address(self, path_to_vm: str) -> str:
            assert self.session is not None, "start_emulator first"
            return self.session["osworld"]["address"]

        def save_state(self, path_to_vm: str, snapshot_name: str):
            raise NotImplementedError("Drums sessions always reset to their image; there are no snapshots to save")

        def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str):
            if self.session is None:
                return None
            # Pinned: a reset another client made since this provider last read the session is a
            # StaleGeneration (409), not a second reset.
            self.session = dict(self.handle().reset().info)
            return None

        def stop_emulator(self, path_to_vm: str, *args, **kwargs):
            for t in self.pending:
                t.join()
            self.pending.clear()
            if self.session is not None:
                s, self.session = self.handle(), None
                s.destroy()  # a session already gone (not found, expired) is fine

    return DrumsVMManager, DrumsProvider


DrumsVMManager = None  # set by register()
DrumsProvider = None


# --------------------------------------------------------------------- optional heavy imports

_finder: Optional[_OptionalFinder] = None  # set by register()
_registered = False


# --------------------------------------------------------------------- claims from task pools


def task_digest(task: dict) -> str:
    """The task's identity for pools: a hash of its JSON (keys sorted), so any edit is another task."""
    return hashlib.sha256(json.dumps(task, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def claim_into(env: Any, task: dict) -> bool:
    """Called by ``DesktopEnv.reset(task_config=task)`` on the drums provider: puts a set-up member
    of a matching pool (drums.osworld_pool) under ``env`` and says whether it did (else the ordinary
    reset runs). Here, not in drums.osworld_pool, because the provider's reset calls it and
    drums.osworld_pool imports this module (no import cycle: tests/test_imports.py)."""
    prov = env.provider
    image = prov.session.get("image") if prov.session is not None else _parse_path(getattr(env, "path_to_vm", None))[0]
    digest = task_digest(task)
    try:
        pools = prov.client.pools.list()
    except errors.DrumsError:
        return False
    for p in pools:
        if (p.get("task") or {}).get("digest") != digest or p["template"].get("image") != image or p["ready"] < 1:
            continue
        try:
            s = dict(prov.client.pools.claim(p["name"], on_empty="fail").info)
        except errors.PoolEmpty:
            continue
        break
    else:
        return False
    old, prov.session = prov.session, s
    prov.trust_ready = True  # a pool member is ready and set up: no screenshot poll
    try:
        env._start_emulator()  # controllers for the claimed session's guest contract
    except BaseException:
        prov.session = old  # _start_emulator destroyed the claimed one; the env keeps (and closes) its own
        raise
    finally:
        prov.trust_ready = False
    env._traj_no += 1
    env._step_no = 0
    env.action_history.clear()
    env._set_task_info(task)
    env.setup_controller.reset_cache_dir(env.cache_dir)
    env.is_environment_used = True
    if old is not None:
        t = threading.Thread(target=destroy_quietly, args=(prov.client, old["id"]), daemon=True)
        t.start()
        prov.pending.append(t)
    return True


def destroy_quietly(client: Client, sid: str) -> None:
    """Destroys a session, ignoring any error (a background clean-up: nobody waits for its answer)."""
    try:
        client.request("DELETE", f"/v1/sessions/{sid}")
    except Exception:
        pass


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

    # DesktopEnv's own name check admits only its providers, so a drums env passes it as "docker" and
    # the factory is told, on this thread only, that the env being made is a drums one. (Swapping the
    # module's factory for the call instead raced: `drums osworld run --parallel` makes envs on several
    # threads, and one thread's restore could hand another's env the docker provider.)
    making_drums = threading.local()

    def create_vm_manager_and_provider(provider_name: str, region: str, use_proxy: bool = False):
        if getattr(making_drums, "on", False) or provider_name.lower().strip() == "drums":
            return DrumsVMManager(), DrumsProvider(region)
        return original(provider_name, region, use_proxy)

    providers.create_vm_manager_and_provider = create_vm_manager_and_provider
    de.create_vm_manager_and_provider = create_vm_manager_and_provider

    init = de.DesktopEnv.__init__

    def __init__(self, provider_name: str = "vmware", *args, **kwargs):
        if isinstance(provider_name, str) and provider_name.lower().strip() == "drums":
            making_drums.on = True
            # The session is made after DesktopEnv's own init, which would start it first thing: so that it can
            # wait for the first reset when a task pool may serve that reset (_defer_start).
            self._start_emulator = _no_start
            try:
                init(self, "docker", *args, **kwargs)
            finally:
                del self._start_emulator
                making_drums.on = False
            self.provider_name = "drums"
            if _defer_start(self):
                self._drums_deferred = True
            else:
                self._start_emulator()
            return
        init(self, provider_name, *args, **kwargs)

    de.DesktopEnv.__init__ = __init__

    def __getattr__(self, name: str):
        # A deferred env used before its first reset (its image probed, a step): its session is made now.
        if name in _STARTED_ATTRS and self.__dict__.get("_drums_deferred"):
            _start_deferred(self)
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    de.DesktopEnv.__getattr__ = __getattr__

    reset = de.DesktopEnv.reset

    def reset_claiming(self, task_config=None, seed=None, options=None):
        # A task set up in a pool (drums.osworld_pool): claimed instead of set up, in milliseconds.
        if (
            task_config is not None
            and getattr(self, "provider_name", None) == "drums"
            and not getattr(self, "_drums_no_pool", False)
            and os.environ.get("DRUMS_OSWORLD_POOLS", "1") != "0"
        ):
            if claim_into(self, task_config):
                self._drums_deferred = False
                return self._get_obs()
        # A deferred env whose first reset claimed nothing: its session is made now, then reset as usual (a fresh
        # session is clean: no revert).
        if self.__dict__.get("_drums_deferred"):
            _start_deferred(self)
        return reset(self, task_config, seed, options)

    de.DesktopEnv.reset = reset_claiming
    if os.environ.get("DRUMS_OSWORLD_SANDBOX", "1") != "0":
        from . import osworld_sandbox

        osworld_sandbox.install()  # every metric runs in a sandbox (docs/osworld.md)
    _registered = True


#: What DesktopEnv._start_emulator sets on an env: reading one of these starts a deferred env's session.
_STARTED_ATTRS = frozenset({"controller", "setup_controller", "vm_ip"})


def _no_start() -> None:
    pass


def _defer_start(env: Any) -> bool:
    """Whether a new drums env waits for its first reset to make its session: only when a task pool of its image
    exists (drums.osworld_pool), whose member that reset may claim; otherwise the session made now would be thrown
    away by the claim (one wasted create per env). Not for an env handed a session (adopt_next) or with pools off."""
    if getattr(_handoff, "session", None) is not None or os.environ.get("DRUMS_OSWORLD_POOLS", "1") == "0":
        return False
    image = _parse_path(getattr(env, "path_to_vm", None))[0]
    try:
        pools = env.provider.client.pools.list()
    except errors.DrumsError:
        return False
    return any(p.get("task") and p.get("template", {}).get("image") == image for p in pools)


def _start_deferred(env: Any) -> None:
    env._drums_deferred = False
    env._start_emulator()


if __name__ != "__main__":
    # Importing drums.osworld registers the provider. Run as `python -m drums.osworld`, the CLI imports
    # drums.osworld itself (and says in one line why when desktop_env does not import).
    register()


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
        r = httpx.post(
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
        lacking = missing_apps(task, _image_has(env))  # (starts a deferred env's session: see _defer_start)
        res["session"] = env.provider.session["id"] if env.provider.session else None
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
    client = env.provider.client
    sid = env.provider.session["id"]
    try:
        gen = client.sessions.get(sid).info["generation"]
        client.episodes.set_outcome(
            sid,
            gen,
            reward=float(score),
            outcome="success" if score > 0 else "failure",
            details={"task": str(task_id)},
        )
        return {"session": sid, "generation": gen}
    except Exception as e:  # the score stands; only its copy on the episode is missing
        return {"session": sid, "error": f"{type(e).__name__}: {e}"}


if __name__ == "__main__":
    # `python -m drums.osworld run|assets ...`, the older spelling of the CLI (drums.osworld_cli). This copy of
    # the module, run as __main__, did not register (below); the CLI imports drums.osworld, which does, once.
    from drums.osworld_cli import main

    sys.exit(main(sys.argv[1:]))
