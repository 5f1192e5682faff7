#!/usr/bin/env bash
# OSWorld compatibility (docs/osworld.md): the desktop-env package without its heavy dependencies,
# plus the pinned packages its metrics import (sdk/python/osworld-deps.txt), into .runtime/venv; and a
# second venv, .runtime/osworld-agent-venv, for OSWorld's own run.py / run_multienv.py with PromptAgent
# (sdk/python/osworld-agent.txt; `drums osworld exec` with DRUMS_PYTHON pointing there).
# Each is skipped when its venv already has exactly these pins.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
stamp=.runtime/venv/.osworld-deps
# Locked by sha256: sdk/python/osworld-deps.lock (from osworld-deps.in by pip-compile --generate-hashes)
# and, for desktop-env alone (without its dependencies), sdk/python/desktop-env.lock.
if ! { [[ -x .runtime/venv/bin/python ]] && cat sdk/python/desktop-env.lock sdk/python/osworld-deps.lock | cmp -s - "$stamp"; }; then
  echo "==> installing desktop-env and the OSWorld evaluators' dependencies into .runtime/venv" >&2
  [[ -x .runtime/venv/bin/python ]] || /usr/bin/python3 -m venv .runtime/venv
  .runtime/venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r sdk/python/desktop-env.lock
  .runtime/venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps --no-build-isolation -r sdk/python/osworld-deps.lock
  cat sdk/python/desktop-env.lock sdk/python/osworld-deps.lock > "$stamp"
fi
# The agent venv: desktop_env's needs again plus PromptAgent's imports (sdk/python/osworld-agent.lock, from
# osworld-agent.in). A venv of its own because google-generativeai needs protobuf < 6 and .runtime/venv has 7.
# Only the checkout's own code is imported from outside it (PYTHONPATH), never desktop-env from PyPI.
agent=.runtime/osworld-agent-venv
if ! { [[ -x $agent/bin/python ]] && cmp -s sdk/python/osworld-agent.lock "$agent/.osworld-agent"; }; then
  echo "==> installing PromptAgent's imports (OSWorld's run.py, run_multienv.py) into $agent" >&2
  [[ -x $agent/bin/python ]] || /usr/bin/python3 -m venv "$agent"
  "$agent/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps --no-build-isolation -r sdk/python/osworld-agent.lock
  cp sdk/python/osworld-agent.lock "$agent/.osworld-agent"
fi
