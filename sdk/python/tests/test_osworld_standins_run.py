"""Cache tasks' real setup paths through a stand-in cache, end to end on a private daemon (the `daemon`
fixture): `drums osworld assets standins` fills a test cache (never the shared one) for a sample of real
tasks from ../shared/osworld-tasks, one per domain, and `drums osworld run --cache` with the checkout's
desktop_env (../shared/osworld-src) runs their download, open, launch and execute steps. Each sets up,
every app its setup starts has a window, and it scores 0.0 before acting.

A sample, not the whole set: the run over every cache task is a bench (docs/osworld.md, "Stand-in
files", gives the command and its result)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from _data import missing, missing_checkout, missing_tasks, need, osworld_checkout, osworld_tasks

ROOT = Path(__file__).resolve().parents[3]
DRUMS = ROOT / "bin" / "drums"

# One task per domain, each a different kind of file and setup step.
SAMPLE = {
    "chrome": "44ee5668-ecd5-4366-a6ce-c1c9b8d4e938",  # update_browse_history: the History template (sqlite)
    "gimp": "734d6579-c07d-47a8-9ae2-13339795476b",  # gimp opens an .xcf
    "libreoffice_calc": "01b269ae-2111-4a07-81fd-3fcd711993b0",  # open an .xlsx; gold .xlsx
    "libreoffice_impress": "04578141-1d42-4146-b9cf-6fab4ce5fd74",  # open a .pptx
    "libreoffice_writer": "0810415c-bde4-4443-9047-d5f70165a697",  # open a .docx
    "thunderbird": "08c73485-7c6d-4681-999d-919f5c32dcfa",  # tar -xz a profile, launch thunderbird
    "vlc": "386dbd0e-0241-4a0a-b6a2-6704fba26b1c",  # two downloads, vlc opens an .mp4
    "multi_apps": "5df7b33a-9f77-4101-823e-02f863e1c1ae",  # unzip a book/ folder, nautilus in it, evince its PDF
    "os": "5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57",  # a .webp poster
}


def test_sample_of_cache_tasks_sets_up_with_standins_and_scores_0(daemon, tmp_path):
    need(missing_tasks(*SAMPLE))
    need(missing_checkout())
    files = [osworld_tasks() / d / f"{t}.json" for d, t in SAMPLE.items()]
    cache = tmp_path / "standin-cache"
    shared = tmp_path / "shared-cache"  # what the run would use without --cache: must stay untouched
    env = {**os.environ, "DRUMS_URL": daemon.url, "DRUMS_TOKEN": daemon.token, "DRUMS_OSWORLD_CACHE": str(shared)}
    r = subprocess.run(
        [str(DRUMS), "osworld", "assets", "standins", *map(str, files), "--cache", str(cache)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "r.json"
    r = subprocess.run(
        [
            str(DRUMS),
            "osworld",
            "run",
            *map(str, files),
            "--cache",
            str(cache),
            "--osworld-src",
            str(osworld_checkout()),
        ]
        + ["--parallel", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())["results"]["tasks"]
    assert len(res) == len(SAMPLE)
    lacking = [x for x in res if "lacks the app" in (x["error"] or "")]
    if lacking:
        missing(f"this checkout's osworld image lacks an app: {lacking[0]['error']} (bin/drums image build osworld)")
    for x in res:
        assert x["setup_ok"] and x["error"] is None, json.dumps(x)
        assert x["missing_windows"] == [], json.dumps(x)
        assert x["score"] == 0.0, json.dumps(x)
    assert not shared.exists()
