"""Where the tests find OSWorld's data, and what a test does when something it needs is missing.
The same as src/testing/osworld-data.ts (read that for the why).

  DRUMS_OSWORLD_TASKS     the task directory, one folder per domain (OSWorld's evaluation_examples/examples);
                          default ../shared/osworld-tasks next to the repository.
  DRUMS_OSWORLD_CHECKOUT  an OSWorld checkout; default ../shared/osworld-src next to the repository.

Both are found from this checkout, never from the current directory or an absolute path (in a git worktree,
the main checkout's ../shared is looked at too). DRUMS_OSWORLD_SRC is not one of them: `drums osworld run
--osworld-src DIR` sets it for its driver.

``missing(why)``: outside CI a skip with the message; under CI=true a failure (conftest.py also turns any other
skip into a failure there, unless it was made with ``not_here``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NoReturn, Optional

import pytest

ROOT = Path(__file__).resolve().parents[3]
CI = os.environ.get("CI", "").lower() in ("true", "1")
# A skip that CI=true accepts: the test cannot run on any host this project tests on, and says why.
NOT_HERE = "not run on this kind of host: "

HOW_TASKS = (
    "put OSWorld's task files (evaluation_examples/examples of https://github.com/xlang-ai/OSWorld, a folder per "
    "domain) in ../shared/osworld-tasks next to the repository, or set DRUMS_OSWORLD_TASKS to such a directory"
)
HOW_CHECKOUT = (
    "put an OSWorld checkout (git clone https://github.com/xlang-ai/OSWorld) in ../shared/osworld-src next to "
    "the repository, or set DRUMS_OSWORLD_CHECKOUT to one"
)


def _shared_candidates() -> list[Path]:
    out = [ROOT.parent / "shared"]
    git = ROOT / ".git"
    try:
        if git.is_file():  # a worktree: `gitdir: <main>/.git/worktrees/<name>`, whose commondir is <main>/.git
            m = re.search(r"^gitdir: (.+)$", git.read_text(), re.M)
            gitdir = (ROOT / m.group(1).strip()).resolve()
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
            out.append(common.parent.parent / "shared")
    except (OSError, AttributeError):
        pass
    seen: list[Path] = []
    for p in out:
        p = p.resolve()
        if p not in seen:
            seen.append(p)
    return seen


def _locate(variable: str, rel: str) -> tuple[Path, str]:
    v = os.environ.get(variable)
    if v:
        return (ROOT / v).resolve(), f"{variable}={v}"
    tried = [s / rel for s in _shared_candidates()]
    found = next((p for p in tried if p.exists()), tried[0])
    return found, "tried " + ", ".join(map(str, tried))


def osworld_tasks() -> Path:
    """The task directory (one folder per domain)."""
    return _locate("DRUMS_OSWORLD_TASKS", "osworld-tasks")[0]


def osworld_checkout() -> Path:
    """The OSWorld checkout the tests use as a user's ``--osworld-src``."""
    return _locate("DRUMS_OSWORLD_CHECKOUT", "osworld-src")[0]


def missing_tasks(*domains: str) -> Optional[str]:
    """Why the task files of ``domains`` cannot be read (None when they can), saying how to get them."""
    path, where = _locate("DRUMS_OSWORLD_TASKS", "osworld-tasks")
    if not path.is_dir():
        return f"no OSWorld task files at {path} ({where}): {HOW_TASKS}"
    lacking = [d for d in domains if not (path / d).is_dir()]
    if lacking:
        return f"the OSWorld task directory {path} has no {', '.join(lacking)} folder ({where}): {HOW_TASKS}"
    return None


def missing_checkout() -> Optional[str]:
    """Why the OSWorld checkout cannot be used (None when it can), saying how to get one."""
    path, where = _locate("DRUMS_OSWORLD_CHECKOUT", "osworld-src")
    if not (path / "desktop_env" / "desktop_env.py").is_file():
        return f"no OSWorld checkout at {path} (no desktop_env/desktop_env.py; {where}): {HOW_CHECKOUT}"
    return None


def missing(why: str) -> NoReturn:
    """The test cannot run because something is missing (``why`` says what and how to get it):
    a skip outside CI, a failure under CI=true."""
    if CI:
        pytest.fail(f"CI=true and a test cannot run: {why}", pytrace=False)
    pytest.skip(why)


def need(why: Optional[str]) -> None:
    """``missing(why)`` when ``why`` is set."""
    if why:
        missing(why)


def not_here(why: str) -> NoReturn:
    """The test cannot run on any host of this kind, CI's included (no GPU, no cloud account...): a skip that
    CI=true accepts, because it says why."""
    pytest.skip(NOT_HERE + why)
