#!/bin/sh
# Runs in the cgroup v2 test VM as PID 1's child (scripts/cgv2-vm/init): sets the VM up as a
# host like any other (cgroup v2 only, loopback, the modules the daemon needs, the session
# images on ext4), then runs the command the host left in /results/cmd from the checkout
# (/drums, read-only) and writes its output and exit code to /results (virtio-9p, tag results).
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
t0=$(cut -d' ' -f1 /proc/uptime)
mkdir -p /results
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 results /results || exit 1
log() { echo "guest: [$(cut -d' ' -f1 /proc/uptime)s] $*" | tee -a /results/guest.log >&2; }
log "kernel $(uname -r), init took ${t0}s"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts 2>/dev/null || { mkdir -p /dev/pts && mount -t devpts -o ptmxmode=0666,mode=0620 devpts /dev/pts; }
mkdir -p /dev/shm && mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run
mount -t tmpfs -o nosuid,nodev tmpfs /tmp
# cgroup v2 only (the kernel runs with cgroup_no_v1=all): every controller on for the subtree.
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup
ctrls=$(cat /sys/fs/cgroup/cgroup.controllers)
for c in $ctrls; do echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || log "cannot enable $c"; done
log "cgroup2: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
for m in overlay loop veth nf_tables nft_chain_nat nft_ct nft_nat nft_masq nft_reject_inet nft_fib_inet nf_conntrack br_netfilter; do
  modprobe -q "$m" || log "no module $m"
done
ip link set lo up
hostname drums-cgv2
# The session images (a virtio disk made by scripts/cgv2-vm.sh from /var/lib/drums/images/<image>-<hash>).
mkdir -p /var/lib/drums/images
mount -t ext4 /dev/vdb /var/lib/drums/images || log "cannot mount the images disk"
log "images: $(ls /var/lib/drums/images | tr '\n' ' ')"
# What the checkout's .runtime or node_modules links to outside it (scripts/cgv2-vm.sh), read-only.
while read -r tag path; do
  mkdir -p "$path" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,ro "$tag" "$path" || log "cannot mount $tag at $path"
done </results/mounts
cmd=$(cat /results/cmd)
log "running: $cmd"
cd /drums
( eval "$cmd" ) > /results/out.log 2>&1 < /dev/null
rc=$?
log "exit $rc"
echo "$rc" > /results/rc
sync
