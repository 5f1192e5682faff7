#!/usr/bin/env bash
# Runs a command of this checkout inside a cgroup v2 Linux VM (QEMU, software-emulated: TCG), as
# root, on any host (this one is cgroup v1 hybrid and cannot switch). The VM is Debian trixie with
# its own kernel (images/cgv2-vm.json, built and cached like every image); it boots with cgroup v2
# only, sees this checkout read-only over virtio-9p at /drums and the session image on an ext4
# disk at /var/lib/drums/images, runs the command there (scripts/cgv2-vm/guest.sh) and powers off.
#
#   scripts/cgv2-vm.sh [--timeout SECONDS] [--image NAME] [--keep] -- COMMAND...
#
# COMMAND runs under sh in /drums; its output is printed and its exit code is this script's.
# Disks are cached in /var/lib/drums/vm by content (the images' hashes); the VM writes to
# throw-away snapshots of them, so nothing it does outlives it. Needs qemu-system-x86
# (scripts/setup.sh installs it with DRUMS_SETUP_TEST=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
timeout_s=1500 image=minimal keep=
while (($#)); do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; break ;;
    *) echo "cgv2-vm.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "usage: scripts/cgv2-vm.sh [--timeout S] [--image NAME] [--keep] -- COMMAND..." >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "cgv2-vm.sh: run as root" >&2; exit 1; }
if ! command -v qemu-system-x86_64 >/dev/null; then
  # scripts/setup.sh installs it with DRUMS_SETUP_TEST=1 (scripts/test.sh); this covers a run without that.
  echo "cgv2-vm.sh: installing qemu-system-x86" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
ts() { date +%s.%N; }
el() { awk -v a="$1" -v b="$(ts)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "cgv2-vm: $*" >&2; }

t_all=$(ts)
# The VM rootfs and the session image: content-addressed directories under /var/lib/drums/images.
vm_rootfs=$(bin/drums image build cgv2-vm | tail -n1 | awk '{print $3}')
img_rootfs=$(bin/drums image build "$image" | tail -n1 | awk '{print $3}')
vm_dir=$(dirname "$vm_rootfs") img_dir=$(dirname "$img_rootfs")
cache=/var/lib/drums/vm
mkdir -p "$cache"

# An ext4 disk of a directory, made without mounting anything (mkfs.ext4 -d), cached by name.
# $1 disk file, $2 source dir, $3 name of the source inside the disk ("" = the dir is the disk's root),
# $4 MiB of room on top of the content.
make_disk() {
  local disk=$1 src=$2 sub=$3 room=$4
  [[ -s $disk ]] && return 0
  exec 9>"$disk.lock"
  flock 9
  if [[ ! -s $disk ]]; then
    local t=$(ts) staged=$src
    local mib=$(( $(du -sxm "$src" | cut -f1) * 12 / 10 + room ))
    if [[ -n $sub ]]; then
      # mkfs.ext4 -d copies a directory's content: stage the one image as <name-hash>/ with hard links.
      staged="$disk.staging"
      rm -rf "$staged" && mkdir -p "$staged"
      cp -al "$src" "$staged/$sub"
    fi
    rm -f "$disk.new"
    mkfs.ext4 -q -F -E root_owner=0:0 -O ^has_journal -L drums -d "$staged" "$disk.new" "${mib}M"
    [[ -n $sub ]] && rm -rf "$staged"
    mv "$disk.new" "$disk"
    say "made $(basename "$disk") (${mib} MiB) in $(el "$t")s"
  fi
  exec 9>&-
}
root_disk="$cache/$(basename "$vm_dir").ext4"
img_disk="$cache/$(basename "$img_dir").ext4"
make_disk "$root_disk" "$vm_rootfs" "" 8192
make_disk "$img_disk" "$img_dir" "$(basename "$img_dir")" 256

kernel=$(ls "$vm_rootfs"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$vm_rootfs"/boot/initrd.img-* | sort -V | tail -1)
run=$(mktemp -d /var/tmp/drums-cgv2-vm-XXXXXX)
mkdir -p "$run/results" "$run/tmp"
printf '%s\n' "$*" > "$run/results/cmd"
qpid=
cleanup() {
  if [[ -n $qpid ]] && kill -0 "$qpid" 2>/dev/null; then kill -KILL "$qpid" 2>/dev/null || true; wait "$qpid" 2>/dev/null || true; fi
  if [[ -n $keep ]]; then say "kept $run"; else rm -rf "$run"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A checkout whose .runtime or node_modules is a symlink out of it (a git worktree using another
# checkout's): the guest sees the target too, read-only, at the same path (scripts/cgv2-vm/guest.sh).
links=() n=0
: >"$run/results/mounts"
for l in .runtime node_modules; do
  [[ -L $l ]] || continue
  target=$(readlink -f "$l")
  [[ -d $target && $target != "$root"/* ]] || continue
  n=$((n + 1))
  links+=(-virtfs "local,path=$target,mount_tag=link$n,security_model=none,readonly=on")
  echo "link$n $target" >>"$run/results/mounts"
done

say "booting (kernel $(basename "$kernel"), timeout ${timeout_s}s)"
t_boot=$(ts)
# thread=single: with thread=multi (one host thread per vCPU), code patched at run time crashed
# now and then: Node's V8 at start ("Check failed: it->second.Size() > offset", SIGTRAP/SIGSEGV,
# with -cpu max and Nehalem) and once the guest kernel (an oops with RIP inside a patched 5-byte
# NOP in __alloc_pages): cross-vCPU self-modifying code under QEMU 7.2's multi-threaded TCG.
# snapshot=on: the VM's writes go to temporary files in TMPDIR, deleted when QEMU exits.
TMPDIR="$run/tmp" qemu-system-x86_64 \
  -accel tcg,thread=single -cpu Nehalem -smp 2 -m 4G -no-reboot -nodefaults -display none -monitor none \
  -serial "file:$run/results/console.log" -nic none \
  -kernel "$kernel" -initrd "$initrd" \
  -append "root=/dev/vda rw console=ttyS0 init=/sbin/drums-vm-init panic=-1 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 psi=1 loglevel=4" \
  -drive "file=$root_disk,format=raw,if=virtio,snapshot=on,cache=unsafe" \
  -drive "file=$img_disk,format=raw,if=virtio,snapshot=on,cache=unsafe" \
  -virtfs "local,path=$root,mount_tag=drums,security_model=none,readonly=on" \
  -virtfs "local,path=$run/results,mount_tag=results,security_model=none" "${links[@]}" &
qpid=$!
deadline=$((SECONDS + timeout_s))
while kill -0 "$qpid" 2>/dev/null; do
  if ((SECONDS > deadline)); then say "timed out after ${timeout_s}s: killing the VM"; kill -KILL "$qpid"; break; fi
  sleep 1
done
wait "$qpid" 2>/dev/null || true
qpid=
say "VM ran $(el "$t_boot")s (all: $(el "$t_all")s)"
[[ -f $run/results/guest.log ]] && sed 's/^/  /' "$run/results/guest.log" >&2
[[ -f $run/results/out.log ]] && cat "$run/results/out.log"
if [[ ! -f $run/results/rc ]]; then
  say "the command did not finish; console tail:"
  tail -n 40 "$run/results/console.log" >&2 || true
  exit 125
fi
exit "$(cat "$run/results/rc")"
