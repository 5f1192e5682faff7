#!/usr/bin/env bash
# OSWorld compatibility (docs/osworld.md): the desktop-env package without its heavy dependencies,
# plus the pinned packages its metrics import (sdk/python/osworld-deps.txt), into .runtime/venv.
# Skipped when the venv already has exactly these pins.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
stamp=.runtime/venv/.osworld-deps
if [[ -x .runtime/venv/bin/python ]] && cmp -s sdk/python/osworld-deps.txt "$stamp"; then exit 0; fi
echo "==> installing desktop-env and the OSWorld evaluators' dependencies into .runtime/venv" >&2
[[ -x .runtime/venv/bin/python ]] || /usr/bin/python3 -m venv .runtime/venv
.runtime/venv/bin/pip install -q --disable-pip-version-check --no-deps desktop-env==1.0.2
.runtime/venv/bin/pip install -q --disable-pip-version-check -r sdk/python/osworld-deps.txt
cp sdk/python/osworld-deps.txt "$stamp"
