"""DesktopEnv on Drums, measured: `python sdk/python/bench/osworld_perf.py [--out DIR] [--resets N] [--steps N]`.

Times the unmodified desktop_env.DesktopEnv with the `drums` provider: start_emulator
(a session create), reset() with a one-step task setup (a Drums reset plus the
SetupController), and step() of a pyautogui click (OSWorld's own path: python -c
inside the session, then an observation). Writes a JSON record (schemaVersion 1).
The daemon comes from DRUMS_URL/DRUMS_TOKEN or the state directory."""

import argparse
import datetime
import json
import os
import platform
import statistics
import time

import drums.osworld  # noqa: F401  (registers the provider)

TASK = {
    "id": "drums-perf",
    "instruction": "noop",
    "config": [{"type": "execute", "parameters": {"command": "true", "shell": True}}],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "echo yes", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
    },
}


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/records")
    ap.add_argument("--resets", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5, help="clicks after each reset")
    a = ap.parse_args()
    from desktop_env.desktop_env import DesktopEnv

    t = time.time()
    env = DesktopEnv(provider_name="drums", action_space="pyautogui", require_a11y_tree=False)
    start_s = time.time() - t
    resets, steps = [], []
    try:
        for i in range(a.resets + 1):
            t = time.time()
            env.reset(task_config=TASK)
            if i:  # the first reset is a warm-up
                resets.append(time.time() - t)
            for j in range(a.steps):
                t = time.time()
                env.step("pyautogui.click(%d, %d)" % (200 + j, 300), pause=0)
                steps.append(time.time() - t)
    finally:
        env.close()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat()
    record = {
        "schemaVersion": 1,
        "experiment": "osworld-desktop-env",
        "started": started,
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "config": {
            "resets": a.resets,
            "stepsPerReset": a.steps,
            "task": "one execute step in setup",
            "screen": "1920x1080 (osworld image)",
        },
        "results": {
            "startEmulatorS": round(start_s, 3),
            "resetS": {
                "n": len(resets),
                "p50": round(statistics.median(resets), 3),
                "p95": round(pct(resets, 0.95), 3),
            },
            "stepClickMs": {
                "n": len(steps),
                "p50": round(statistics.median(steps) * 1000, 1),
                "p95": round(pct(steps, 0.95) * 1000, 1),
            },
        },
        "bars": {
            "resetP50S": {
                "value": round(statistics.median(resets), 3),
                "bar": 1.0,
                "pass": statistics.median(resets) <= 1.0,
            }
        },
        "notes": [
            "the docker provider's design boots a VM per environment and allows 300 s for it; its reset is a VM snapshot revert",
            "step() runs OSWorld's own `python -c 'import pyautogui; ...'` inside the session, so it includes a Python start and a pyautogui import",
        ],
    }
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "osworld-desktop-env-%s.json" % started.replace(":", "-").replace(".", "-")[:23])
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(json.dumps(record["results"]))
    print("record:", path)


if __name__ == "__main__":
    main()
