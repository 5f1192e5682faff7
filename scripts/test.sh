#!/usr/bin/env bash
# Runs Drums' whole test suite on a fresh Debian 12 / Ubuntu 24.04 host, as root, in named tiers:
#
#   fast    scripts/check.ts (= npm run check): types, spec drift, layers, lint, format, unit tests; no root, under a minute
#   main    node --test: tests/unit and tests/integration, one file at a time, except the quiet ones
#   quiet   node --test: the integration files that measure CPU shares, rates or host-wide knobs (QUIET below),
#           run when nothing else of this run is running, so a busy core does not decide their verdicts
#   vm      tests/vm/cgroup-v2-vm.test.ts: the resource tests on cgroup v2, in a QEMU VM (TCG, one host thread)
#   python  pytest sdk/python/tests: the SDK, the gym env, OSWorld, the schemathesis fuzz run
#   slow    tests/slow/*.test.ts: outside the default run
#
#   scripts/test.sh                    set-up, then the default tiers: fast main quiet vm python
#   scripts/test.sh --tier T[,T...]    set-up, then those tiers (e.g. --tier fast, --tier vm,python, --tier slow)
#   scripts/test.sh FILE...            set-up, fast, then those files (.ts with node --test, .py with pytest)
#
# The order of a default run (docs/architecture.md, "Tests"): set-up; fast; the images; then the vm tier
# starts in the background (its QEMU keeps one of the host's cores busy for some 11 minutes) and runs
# the python tier after it, while main runs in the foreground on the other core; when both streams
# are done, quiet runs alone. Each background tier's output is printed whole when the run ends. The
# last line names each tier's exit code and wall time; the exit code is 0 only if every tier passed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

DEFAULT_TIERS=(fast main quiet vm python)
# Integration files whose verdicts rest on the CPU or the disk the host can give right now, or that turn
# host-wide knobs other tests would feel: the CPU guard (demotes on host contention), CPU weights and
# OOM, the fair share's latencies, disk read/write rate limits, the daemon's CPU cost under byte attacks,
# and the KSM/zram arms (host-wide KSM and a zram swap device).
QUIET=(
  tests/integration/cpu-guard.test.ts
  tests/integration/session-fairness.test.ts
  tests/integration/api-fair-share.test.ts
  tests/integration/session-quota.test.ts
  tests/integration/budgets.test.ts
  tests/integration/bench-memory-arms.test.ts
)
VM_FILE=tests/vm/cgroup-v2-vm.test.ts

tiers=() files=()
while (($#)); do
  case $1 in
    --tier | --tiers)
      [[ $# -ge 2 ]] || { echo "test.sh: --tier needs a value (fast, main, quiet, vm, python, slow)" >&2; exit 2; }
      IFS=, read -r -a more <<<"$2"
      tiers+=("${more[@]}")
      shift 2
      ;;
    --tier=*) IFS=, read -r -a more <<<"${1#--tier=}"; tiers+=("${more[@]}"); shift ;;
    -h | --help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test.sh: unknown option $1 (see scripts/test.sh --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
for t in "${tiers[@]}"; do
  case $t in fast | main | quiet | vm | python | slow) ;; *) echo "test.sh: unknown tier '$t' (fast, main, quiet, vm, python, slow)" >&2; exit 2 ;; esac
done
if ((${#files[@]})) && ((${#tiers[@]})); then echo "test.sh: give tiers or files, not both" >&2; exit 2; fi
((${#tiers[@]} || ${#files[@]})) || tiers=("${DEFAULT_TIERS[@]}")
# With files: the fast tier, then the files as one tier of their own.
((${#files[@]})) && tiers=(fast files)
want() {
  local t
  for t in "${tiers[@]}"; do [[ $t == "$1" ]] && return 0; done
  return 1
}
shopt -s nullglob
node_test=(.runtime/node/bin/node --test --test-concurrency=1 --test-reporter=spec)
pytest=(.runtime/venv/bin/python -m pytest -ra -p no:cacheprovider -W ignore::DeprecationWarning)
main_files() {
  local f q
  for f in tests/unit/*.test.ts tests/integration/*.test.ts; do
    for q in "${QUIET[@]}"; do [[ $f == "$q" ]] && continue 2; done
    echo "$f"
  done
}

logs=$(mktemp -d /var/tmp/drums-test-logs-XXXXXX)
t_run=$SECONDS
bg=
# If the run ends before the background stream does, its process group (our own child's, by its PID)
# is stopped: QEMU (scripts/cgv2-vm.sh kills it on TERM), node and pytest with their daemons.
cleanup() {
  if [[ -n $bg ]] && kill -0 "$bg" 2>/dev/null; then
    echo "==> stopping the background tiers" >&2
    kill -TERM -- "-$bg" 2>/dev/null || true
    wait "$bg" 2>/dev/null || true
  fi
  rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_tier NAME COMMAND...: runs it, records its exit code and wall time in $logs/NAME.result.
run_tier() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "==> $name tier: $*" >&2
  "$@" || rc=$?
  echo "$rc $((SECONDS - t0))" >"$logs/$name.result"
  echo "==> $name tier: exit $rc in $((SECONDS - t0)) s" >&2
}
tier_fast() { .runtime/node/bin/node scripts/check.ts; }
tier_main() {
  local fs
  mapfile -t fs < <(main_files)
  "${node_test[@]}" "${fs[@]}"
}
tier_quiet() { "${node_test[@]}" "${QUIET[@]}"; }
tier_vm() { "${node_test[@]}" "$VM_FILE"; }
# pytest exit 5 (nothing collected) counts as a failure.
tier_python() { "${pytest[@]}" sdk/python/tests; }
tier_slow() {
  local fs=(tests/slow/*.test.ts)
  ((${#fs[@]})) || { echo "no tests in tests/slow" >&2; return 1; }
  "${node_test[@]}" "${fs[@]}"
}
tier_files() {
  local f node=() py=() rc=0
  for f in "${files[@]}"; do if [[ $f == *.py || $f == *.py::* ]]; then py+=("$f"); else node+=("$f"); fi; done
  if ((${#node[@]})); then "${node_test[@]}" "${node[@]}" || rc=$?; fi
  if ((${#py[@]})); then "${pytest[@]}" "${py[@]}" || rc=$?; fi
  return "$rc"
}

DRUMS_SETUP_TEST=1 bash scripts/setup.sh
want fast && run_tier fast tier_fast

# With main, vm and python run in a background stream beside it (vm first: the longest); else in turn.
stream=()
if want main; then for t in vm python; do want "$t" && stream+=("$t"); done; fi
in_stream() { [[ " ${stream[*]} " == *" $1 "* ]]; }
start_stream() {
  echo "==> background: the ${stream[*]} tier(s) (output at the end)" >&2
  local t
  set -m
  for t in "${stream[@]}"; do
    # python's sessions need the images the foreground builds next.
    if [[ $t != vm ]]; then until [[ -e $logs/images.ready ]]; do sleep 2; done; fi
    run_tier "$t" "tier_$t" >"$logs/$t.log" 2>&1
    echo "==> $t tier (background): exit $(cut -d' ' -f1 "$logs/$t.result") in $(cut -d' ' -f2 "$logs/$t.result") s" >&2
  done &
  # Job control for this one job gives it a process group of its own (its PID), so the cleanup
  # reaches every process of the stream, also one whose parent has already exited.
  bg=$!
  set +m
}
# The images: the VM's first (so it can start), then those the sessions of the other tiers use.
vm_image=
want vm && vm_image=1
for f in "${files[@]}"; do [[ $f == tests/vm/* || $f == */tests/vm/* ]] && vm_image=1; done
if [[ -n $vm_image ]]; then
  bin/drums image build minimal
  # The VM's rootfs (Debian trixie with its kernel).
  bin/drums image build cgv2-vm
  in_stream vm && start_stream
fi
if want main || want quiet || want python || want slow || want files; then
  bin/drums image build minimal
  bin/drums image build default
  bin/drums image build osworld
  # OSWorld compatibility (docs/osworld.md): desktop-env without its heavy dependencies, plus what its metrics import.
  bash scripts/osworld-deps.sh
fi
touch "$logs/images.ready"
[[ -z $bg && ${#stream[@]} -gt 0 ]] && start_stream

# The foreground: main (beside the background stream), the tiers not in it, then, alone, quiet and slow.
want main && run_tier main tier_main
for t in vm python; do want "$t" && ! in_stream "$t" && run_tier "$t" "tier_$t"; done
want files && run_tier files tier_files
if [[ -n $bg ]]; then
  wait "$bg" || true
  bg=
  for t in "${stream[@]}"; do
    echo "==> output of the $t tier (ran in the background)" >&2
    cat "$logs/$t.log"
  done
fi
want quiet && run_tier quiet tier_quiet
want slow && run_tier slow tier_slow

summary=() ok=1
for t in fast main quiet vm python slow files; do
  want "$t" || continue
  read -r rc s <"$logs/$t.result" 2>/dev/null || { rc=none s=0; }
  [[ $rc == 0 ]] || ok=
  summary+=("$t exit $rc ($s s)")
done
line=$(printf '%s, ' "${summary[@]}")
echo "==> summary: ${line%, }; all $((SECONDS - t_run)) s" >&2
[[ -n $ok ]]
