"""Oracles score 1.0 through the real evaluator: per domain, real OSWorld tasks (from
../shared/osworld-tasks, never copied into the repo) driven through env.step by the actions in
tests/fixtures/osworld/oracles.py. (The os domain's are run by tests/integration/osworld-tasks.test.ts
from oracle-os.json, and its cache tasks' by test_osworld_cache_run.py.)"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"
TASKS = Path(os.environ.get("DRUMS_OSWORLD_TASKS", "/work/shared/osworld-tasks"))
_spec = importlib.util.spec_from_file_location("osworld_oracles", ROOT / "tests/fixtures/osworld/oracles.py")
oracles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracles)


def test_json_fixtures_match_the_module():
    for domain in ("os", "chrome", "gimp", "libreoffice_impress", "vlc"):
        assert (
            json.loads((ROOT / f"tests/fixtures/osworld/oracle-{domain}.json").read_text()) == oracles.ORACLES[domain]
        ), (
            f"regenerate: python tests/fixtures/osworld/oracles.py {domain} > tests/fixtures/osworld/oracle-{domain}.json"
        )


@pytest.mark.parametrize("domain", sorted(d for d in oracles.ORACLES if d != "os"))
def test_domain_oracles_score_1(daemon, tmp_path, domain):
    if not (TASKS / domain).is_dir():
        pytest.skip(f"no OSWorld task data at {TASKS / domain} (set DRUMS_OSWORLD_TASKS)")
    orc = oracles.ORACLES[domain]
    (tmp_path / "oracle.json").write_text(json.dumps(orc))
    out = tmp_path / "r.json"
    env = {
        **os.environ,
        "DRUMS_URL": daemon.url,
        "DRUMS_TOKEN": daemon.token,
        "DRUMS_OSWORLD_CACHE": str(tmp_path / "cache"),
    }
    r = subprocess.run(
        [
            str(DRUMS),
            "osworld",
            "run",
            *[str(TASKS / domain / f"{t}.json") for t in orc],
            "--parallel",
            "2",
            "--oracle",
            str(tmp_path / "oracle.json"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())["results"]["tasks"]
    assert len(res) == len(orc)
    lacking = [x for x in res if "lacks the app" in (x["error"] or "")]
    if lacking:
        pytest.skip(f"this checkout's osworld image lacks the {domain} app: {lacking[0]['error']}")
    for x in res:
        assert x["score"] == 1.0, x
