"""Reading OSWorld task files: ``load_tasks`` and ``validate_task`` (also importable from ``drums.osworld``).

A module of its own so that ``drums osworld assets`` reads tasks without importing ``drums.osworld``, whose
import registers the provider and so imports ``desktop_env`` and every metric module (25 s on a loaded host).
"""

from __future__ import annotations

import json
import os
from typing import Any


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
