"""What a user's type checker sees: the wheel `pip install sdk/python` builds, installed into a bare
environment of its own, then mypy on a snippet that uses drums as a user would. Pure: no daemon.

- The wheel ships drums/py.typed (PEP 561), without which mypy skips an installed drums altogether
  ("missing library stubs or py.typed marker"), and ships no bench (sdk/python/bench stays out).
- The per-code error classes are static (drums/_errors.py, generated from the spec): mypy sees
  StaleGeneration under Conflict, so catching or returning it type-checks, and a wrong base does not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # pure: npm run check runs it

SDK = Path(__file__).resolve().parents[1]
BENCH = sorted(p.stem for p in (SDK / "bench").glob("*.py"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout's sdk/python (a build writes build/ and
    *.egg-info next to its sources; the checkout stays as it is)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(SDK / "pyproject.toml", src)
    shutil.copytree(SDK / "drums", src / "drums", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*cmd, "--disable-pip-version-check", "--wheel-dir", str(out), str(src)], check=True)
    (whl,) = out.glob("drums-*.whl")
    return whl


def test_the_wheel_ships_py_typed_and_no_bench(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "drums/py.typed" in names
    assert {"drums/_errors.py", "drums/errors.py", "drums/client.py", "drums/integrations/gym.py"} <= names
    assert BENCH, "sdk/python/bench has no bench modules"
    shipped = {Path(n).stem for n in names if n.endswith(".py")}
    assert not shipped & set(BENCH), f"bench modules inside the wheel: {sorted(shipped & set(BENCH))}"
    with zipfile.ZipFile(wheel) as z:
        inside = [n for n in names if n.endswith(".py") and b"def bench_main(" in z.read(n)]
    assert not inside, f"bench code inside the wheel: {inside}"


def _mypy(env: Path, code: str) -> subprocess.CompletedProcess[str]:
    snippet = env.parent / "user.py"
    snippet.write_text(textwrap.dedent(code))
    # --python-executable: mypy finds drums in that environment's site-packages, as installed; the
    # snippet's folder holds nothing else, so no source tree stands in for the wheel.
    argv = [sys.executable, "-m", "mypy", "--no-incremental", "--python-executable", str(env / "bin" / "python")]
    return subprocess.run(
        [*argv, "--strict", str(snippet)], cwd=env.parent, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    pytest.importorskip("mypy", reason="mypy is in sdk/python/requirements-test.txt")
    env = tmp_path_factory.mktemp("user") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (site,) = (env / "lib").glob("python3*/site-packages")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*cmd, "--target", str(site), str(wheel)], check=True)
    return env


def test_mypy_sees_the_static_error_classes(installed):
    r = _mypy(
        installed,
        """
        from drums import DrumsError, errors
        from drums.errors import Conflict, SessionNotFound, StaleGeneration

        def retry(e: StaleGeneration) -> Conflict:
            return e

        def gone(e: SessionNotFound) -> errors.NotFound:
            return e

        def code(e: DrumsError) -> str:
            if isinstance(e, errors.InsufficientMemory):
                return e.code
            return errors.ERRORS["stale_generation"].__name__

        status: int = StaleGeneration.status
        """,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_rejects_a_wrong_base(installed):
    """The other side: the classes are not Any, mypy knows their bases."""
    r = _mypy(
        installed,
        """
        from drums.errors import NotFound, StaleGeneration

        def wrong(e: StaleGeneration) -> NotFound:
            return e
        """,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Incompatible return value type (got "StaleGeneration", expected "NotFound")' in r.stdout, r.stdout
