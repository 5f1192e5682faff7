#!/usr/bin/env bash
# OSWorld compatibility (docs/osworld.md): the desktop-env package without its heavy dependencies,
# plus the pinned packages its metrics import (sdk/python/osworld-deps.txt), into .runtime/venv.
# Skipped when the venv already has exactly these pins.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
stamp=.runtime/venv/.osworld-deps
# Locked by sha256: sdk/python/osworld-deps.lock (from osworld-deps.in by pip-compile --generate-hashes)
# and, for desktop-env alone (without its dependencies), sdk/python/desktop-env.lock.
if [[ -x .runtime/venv/bin/python ]] && cat sdk/python/desktop-env.lock sdk/python/osworld-deps.lock | cmp -s - "$stamp"; then exit 0; fi
echo "==> installing desktop-env and the OSWorld evaluators' dependencies into .runtime/venv" >&2
[[ -x .runtime/venv/bin/python ]] || /usr/bin/python3 -m venv .runtime/venv
.runtime/venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r sdk/python/desktop-env.lock
.runtime/venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps --no-build-isolation -r sdk/python/osworld-deps.lock
cat sdk/python/desktop-env.lock sdk/python/osworld-deps.lock > "$stamp"
