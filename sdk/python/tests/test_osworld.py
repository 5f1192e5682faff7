"""drums.osworld: the desktop_env provider hook and the task runner's checks.
The live test needs a daemon (DRUMS_URL/DRUMS_TOKEN or the state dir) with the osworld image built."""

import importlib
import json

import pytest

import drums.osworld as osw
from drums import Client, errors
from _data import not_here


def test_registers_into_desktop_env(daemon):  # the provider finds the daemon through DRUMS_URL/DRUMS_TOKEN
    import desktop_env.desktop_env as de
    import desktop_env.providers as providers

    manager, provider = providers.create_vm_manager_and_provider("drums", None)
    assert type(provider).__name__ == "DrumsProvider"
    # The provider talks through drums.Client (typed errors), not a client of its own.
    assert isinstance(provider.client, Client) and not hasattr(osw, "DrumsAPI")
    assert manager.get_vm_path(screen_size=(1920, 1080)).endswith(":1920x1080")
    assert de.create_vm_manager_and_provider is providers.create_vm_manager_and_provider
    with pytest.raises(NotImplementedError):
        providers.create_vm_manager_and_provider("nope", None)


def test_missing_heavy_package_fails_loudly_on_use():
    # A heavy package that desktop_env imports and this host does not have (scripts/osworld-deps.sh leaves
    # some out, easyocr for one): its placeholder imports, and any use of it raises, naming the package.
    if not osw._finder.missing:
        not_here(
            f"every optional heavy package is installed for real ({', '.join(osw.OPTIONAL_HEAVY)}): no placeholder"
        )
    name = sorted(osw._finder.missing)[0]
    mod = importlib.import_module(name)

    with pytest.raises(ModuleNotFoundError, match=name):
        mod.anything()


def test_needs_internet_and_validation(tmp_path):
    # Downloads and cloud_file getters are served by the asset cache (test_osworld_assets.py), not the live web.
    assert (
        osw.needs_internet(
            {
                "config": [{"type": "download", "parameters": {"files": [{"url": "https://x/y", "path": "a"}]}}],
                "evaluator": {},
            }
        )
        is None
    )
    assert osw.needs_internet({"config": [{"type": "login", "parameters": {}}], "evaluator": {"func": "f"}})
    assert osw.needs_internet({"config": [], "evaluator": {"func": "f", "result": {"type": "pdf_from_url"}}})
    assert osw.needs_internet({"config": [{"type": "execute", "parameters": {}}], "evaluator": {"func": "f"}}) is None
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "nofunc.json").write_text(json.dumps({"id": "x", "instruction": "i", "evaluator": {}}))
    loaded = dict(osw.load_tasks([str(tmp_path)]))
    assert all(isinstance(v, ValueError) for v in loaded.values())


def test_desktop_env_reset_step_evaluate(daemon):
    # The `daemon` fixture (conftest.py) starts a private daemon and exports DRUMS_URL/DRUMS_TOKEN,
    # which the provider reads. (A collection-time probe would run before the fixture and skip.)
    from desktop_env.desktop_env import DesktopEnv

    env = DesktopEnv(provider_name="drums", action_space="pyautogui", require_a11y_tree=False)
    try:
        sid = env.provider.session["id"]
        task = {
            "id": "drums-probe",
            "instruction": "make ~/probe",
            "config": [{"type": "execute", "parameters": {"command": "true", "shell": True}}],
            "evaluator": {
                "func": "exact_match",
                "result": {
                    "type": "vm_command_line",
                    "command": "test -d ~/probe && echo yes || echo no",
                    "shell": True,
                },
                "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
            },
        }
        obs = env.reset(task_config=task)
        assert obs["screenshot"][:4] == b"\x89PNG"
        assert env.evaluate() == 0
        env.step("import os; os.makedirs(os.path.expanduser('~/probe'))", pause=0)
        assert env.evaluate() == 1
        # A used env is reverted with a Drums reset: same session, fresh upper layer.
        env.reset(task_config=task)
        assert env.provider.session["id"] == sid
        assert env.evaluate() == 0
        # The provider's reset is pinned to the generation it last read: after a reset by another client
        # it is a typed StaleGeneration, not a second reset of a session someone else is using.
        gen = env.provider.session["generation"]
        with Client() as other:
            assert other.sessions.get(sid).reset().generation == gen + 1
        with pytest.raises(errors.StaleGeneration):
            env.provider.revert_to_snapshot(env.path_to_vm, "init_state")
        with Client() as other:
            assert other.sessions.get(sid).generation == gen + 1
    finally:
        env.close()


def test_an_unknown_observation_type_is_a_clear_error(tmp_path):
    # `python -m drums.osworld_cli run --observation X` (what `drums osworld run` calls) refuses anything
    # but run.py's four types before starting anything, and so does run_task called directly.
    import subprocess
    import sys

    (tmp_path / "t.json").write_text(json.dumps({"id": "t", "instruction": "i", "evaluator": {"func": "infeasible"}}))
    p = subprocess.run(
        [sys.executable, "-m", "drums.osworld_cli", "run", "--observation", "a11y", str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "--observation: invalid choice: 'a11y'" in p.stderr
    assert "screenshot_a11y_tree" in p.stderr
    with pytest.raises(ValueError, match="unknown observation type 'SOM': use one of screenshot, a11y_tree"):
        osw.run_task("t.json", {"id": "t"}, None, 0, False, str(tmp_path), observation="SOM")
    assert osw.DEFAULT_OBSERVATION == "a11y_tree"


def test_task_needs_puts_each_task_in_its_classes():
    dl = {"type": "download", "parameters": {"files": [{"url": "https://x/y.xlsx", "path": "/home/user/y.xlsx"}]}}
    n = osw.task_needs({"id": "a", "config": [dl], "evaluator": {"func": "f"}, "related_apps": ["libreoffice_calc"]})
    assert n == {"files": 1, "web": None, "account": None, "vs_code": False}
    n = osw.task_needs({"id": "b", "config": [{"type": "googledrive", "parameters": {}}], "evaluator": {"func": "f"}})
    assert n["account"] == "setup step 'googledrive'" and n["web"] is None
    n = osw.task_needs({"id": "c", "config": [], "evaluator": {"func": "f", "result": {"type": "page_info"}}})
    assert n["web"] == "evaluator getter 'page_info'"
    assert osw.task_needs({"id": "d", "config": [], "evaluator": {"func": "f"}, "related_apps": ["vs_code"]})["vs_code"]
    assert osw.task_needs(ValueError("bad")) == {"files": 0, "web": None, "account": None, "vs_code": False}
