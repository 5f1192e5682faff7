#!/usr/bin/env bash
# Starts Drums on a fresh Debian 12 / Ubuntu 24.04 host, as root: installs what
# the host lacks, builds the default image on first run (with progress), then
# runs the daemon in the foreground on 127.0.0.1:7450.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
"$root/bin/drums" image build default
bash "$root/scripts/osworld-deps.sh"  # `drums osworld run` (docs/osworld.md)
exec "$root/bin/drums" serve "$@"
