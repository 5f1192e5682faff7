#!/usr/bin/env bash
# Runs Drums' whole test suite on a fresh Debian 12 / Ubuntu 24.04 host, as root:
# host set-up, the fast tier (npm run check: types, spec drift, layers, lint, unit tests; no root
# needed), the images the tests use, then unit and integration tests and the cgroup v2 VM test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
DRUMS_SETUP_TEST=1 bash scripts/setup.sh
echo "==> check (scripts/check.ts)" >&2
.runtime/node/bin/node scripts/check.ts
shopt -s nullglob
# The default run: unit and integration tests, then the cgroup v2 VM test (tests/slow/ runs only when named) (tests/vm/cgroup-v2-vm.test.ts boots
# the VM and runs tests/vm/cgroup-v2.test.ts and the resource tests inside it; docs/architecture.md).
files=(tests/unit/*.test.ts tests/integration/*.test.ts tests/vm/cgroup-v2-vm.test.ts)
if [[ $# -gt 0 ]]; then files=("$@"); fi
bin/drums image build minimal
bin/drums image build default
bin/drums image build osworld
# The VM's rootfs (Debian trixie with its kernel), only for a run that boots the VM.
for f in "${files[@]}"; do
  if [[ $f == tests/vm/* || $f == */tests/vm/* ]]; then bin/drums image build cgv2-vm; break; fi
done
# OSWorld compatibility (docs/osworld.md): desktop-env without its heavy dependencies, plus what its metrics import.
bash scripts/osworld-deps.sh
echo "==> tests" >&2
node_rc=0
.runtime/node/bin/node --test --test-concurrency=1 --test-reporter=spec "${files[@]}" || node_rc=$?
if [[ $# -gt 0 ]]; then exit "$node_rc"; fi
# Python SDK, gym env and the schemathesis fuzz run (pytest exit 5 = nothing collected counts as a failure).
echo "==> python SDK tests (pytest)" >&2
py_rc=0
.runtime/venv/bin/python -m pytest sdk/python/tests -ra -p no:cacheprovider -W ignore::DeprecationWarning || py_rc=$?
echo "==> summary: node --test exit $node_rc, pytest exit $py_rc" >&2
(( node_rc == 0 && py_rc == 0 ))
