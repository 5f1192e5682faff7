#!/usr/bin/env bash
# Runs Drums' whole test suite on a fresh Debian 12 / Ubuntu 24.04 host, as root, in named tiers:
#
#   fast    scripts/check.ts (= npm run check): types, spec drift, layers, lint, format, unit tests; under a minute
#   main    node --test: tests/unit and tests/integration, one file at a time, except the quiet ones
#   quiet   node --test: the integration files that judge the CPU or disk the host gives right now, or turn
#           host-wide knobs (QUIET below); run when nothing else of this run is running
#   vm      tests/vm/cgroup-v2-vm.test.ts: the resource tests on cgroup v2, in a QEMU VM (TCG, one host thread)
#   python  pytest over sdk/python/tests, one pytest per file: the SDK, the gym env, OSWorld, the fuzz runs; with
#           the fast tier in the run, less the pure tests (@pytest.mark.fast) that check.ts has run already
#   slow    tests/slow/*.test.ts: outside the default run
#
#   scripts/test.sh                    set-up, then the default tiers: fast main quiet vm python
#   scripts/test.sh --tier T[,T...]    set-up, then those tiers (e.g. --tier fast, --tier vm,python, --tier slow)
#   scripts/test.sh FILE...            set-up, fast, then those files (.ts with node --test, .py with pytest)
#
# A run with main (docs/architecture.md, "Tests"): set-up; fast; the images; the vm tier starts in the
# background as soon as its images are there (its QEMU keeps one core busy for some 11 minutes) while
# main runs in the foreground; whichever of the two is done first takes pytest files from the python
# queue, then the other joins; when all are done, quiet runs alone. The background's output is printed
# whole at the end. The last line gives each tier's exit code and wall time; the exit code is 0 only
# if every tier passed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

DEFAULT_TIERS=(fast main quiet vm python)
ALL_TIERS="fast, main, quiet, vm, python, slow"
# Integration files whose verdicts rest on the CPU or disk the host can give right now, or that turn
# host-wide knobs other tests would feel: the CPU guard (demotes on host contention), CPU weights and
# OOM, the fair share's latencies, disk read and write rate limits, the daemon's CPU cost under byte
# attacks, and the KSM and zram arms (host-wide KSM, a zram swap device).
QUIET=(
  tests/integration/cpu-guard.test.ts
  tests/integration/session-fairness.test.ts
  tests/integration/api-fair-share.test.ts
  tests/integration/session-quota.test.ts
  tests/integration/budgets.test.ts
  tests/integration/bench-memory-arms.test.ts
)
VM_FILE=tests/vm/cgroup-v2-vm.test.ts
# The longest pytest files go first, so the two streams end close together; the rest follow by name.
PY_FIRST=(test_osworld_oracles.py test_fuzz.py test_osworld_scripts.py test_osworld_cache_run.py test_osworld_pool.py test_osworld_standins_run.py test_osworld_metric_sandbox.py test_fuzz_guest.py)

tiers=() files=()
while (($#)); do
  case $1 in
    --tier | --tiers)
      [[ $# -ge 2 ]] || { echo "test.sh: --tier needs a value ($ALL_TIERS)" >&2; exit 2; }
      IFS=, read -r -a more <<<"$2"
      tiers+=("${more[@]}")
      shift 2
      ;;
    --tier=*) IFS=, read -r -a more <<<"${1#--tier=}"; tiers+=("${more[@]}"); shift ;;
    -h | --help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test.sh: unknown option $1 (see scripts/test.sh --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
for t in "${tiers[@]}"; do
  case $t in fast | main | quiet | vm | python | slow) ;; *) echo "test.sh: unknown tier '$t' ($ALL_TIERS)" >&2; exit 2 ;; esac
done
if ((${#files[@]})) && ((${#tiers[@]})); then echo "test.sh: give tiers or files, not both" >&2; exit 2; fi
((${#tiers[@]} || ${#files[@]})) || tiers=("${DEFAULT_TIERS[@]}")
# With files: the fast tier, then the files as a tier of their own.
((${#files[@]})) && tiers=(fast files)
want() {
  local t
  for t in "${tiers[@]}"; do [[ $t == "$1" ]] && return 0; done
  return 1
}

shopt -s nullglob
node_test=(.runtime/node/bin/node --test --test-concurrency=1 --test-reporter=spec)
# pytest's exit 5 (nothing collected) counts as a failure like any other.
pytest=(.runtime/venv/bin/python -m pytest -ra -p no:cacheprovider -W ignore::DeprecationWarning)
logs=$(mktemp -d /var/tmp/drums-test-logs-XXXXXX)
t_run=$SECONDS
bg=
# If the run ends before the background does, its process group (our own child's, by its PID) is
# stopped: QEMU (scripts/cgv2-vm.sh kills it on TERM), node and pytest with their daemons.
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

# run_tier NAME COMMAND...: runs it, and records its exit code and wall time in $logs/NAME.result.
run_tier() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "==> $name tier: $*" >&2
  # Its output also goes to $logs/tier-NAME.out, for the recap of failures at the end.
  "$@" > >(tee -a "$logs/tier-$name.out") 2>&1 || rc=$?
  wait $! 2>/dev/null || true # tee has written all
  echo "$rc $((SECONDS - t0))" >"$logs/$name.result"
  echo "==> $name tier: exit $rc in $((SECONDS - t0)) s" >&2
}
tier_fast() { .runtime/node/bin/node scripts/check.ts; }
tier_main() {
  local f q fs=()
  for f in tests/unit/*.test.ts tests/integration/*.test.ts; do
    for q in "${QUIET[@]}"; do [[ $f == "$q" ]] && continue 2; done
    fs+=("$f")
  done
  "${node_test[@]}" "${fs[@]}"
}
tier_quiet() { "${node_test[@]}" "${QUIET[@]}"; }
# Beside other work the VM gets a higher priority (nice -5): its QEMU is one thread that runs every
# guest CPU, so it never takes more than one core, and a starved guest fails its timeouts.
tier_vm() { nice -n -5 "${node_test[@]}" "$VM_FILE"; }
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

# The python tier is a queue of pytest files ($logs/pyq); a worker renames one into $logs/pyrun to take
# it (a rename happens once), runs pytest on it and writes its exit code next to it. Each pytest
# starts its own private daemon (sdk/python/tests/conftest.py), as the whole directory's run did.
# With the fast tier in this run, its pure tests (@pytest.mark.fast, run by check.ts) are not run again: a file
# marked fast whole (`pytestmark = pytest.mark.fast`) stays out of the queue, the others run with -m 'not fast'.
py_fast=()
python_queue() {
  mkdir -p "$logs/pyq" "$logs/pyrun"
  local f n=0 seen=" "
  want fast && py_fast=(-m 'not fast')
  for f in "${PY_FIRST[@]/#/sdk/python/tests/}" sdk/python/tests/test_*.py; do
    [[ -f $f && $seen != *" $f "* ]] || continue
    seen+="$f "
    if want fast && grep -q '^pytestmark = pytest\.mark\.fast' "$f"; then continue; fi
    n=$((n + 1))
    echo "$f" >"$logs/pyq/$(printf %03d "$n")"
  done
  ((n)) || echo "no sdk/python/tests/test_*.py" >"$logs/pyq/none"
}
python_worker() {
  local q n f rc t0
  [[ -e $logs/python.start ]] || echo "$SECONDS" >"$logs/python.start"
  for q in "$logs"/pyq/*; do
    n=$(basename "$q")
    mv "$q" "$logs/pyrun/$n" 2>/dev/null || continue
    f=$(cat "$logs/pyrun/$n")
    echo "==> python: $f" >&2
    rc=0 t0=$SECONDS
    if [[ $n == none ]]; then echo "$f" >&2; rc=5; else "${pytest[@]}" "${py_fast[@]}" "$f" || rc=$?; fi
    echo "$rc" >"$logs/pyrun/$n.rc"
    echo "==> python: $f exit $rc in $((SECONDS - t0)) s" >&2
    echo "$SECONDS" >"$logs/python.end"
  done
}
# The python tier's result once every worker is done: the first failing file's exit code, else 0.
python_result() {
  local q rc=0 r
  for q in "$logs"/pyq/*; do rc=1; echo "python: $(cat "$q") never ran" >&2; done
  for q in "$logs"/pyrun/*; do
    [[ $q == *.rc ]] && continue
    r=$(cat "$q.rc" 2>/dev/null || echo none)
    if [[ $r != 0 ]]; then
      echo "python: $(cat "$q") exit $r" >&2
      [[ $rc != 0 ]] || rc=$r
    fi
  done
  echo "$rc $(($(cat "$logs/python.end" 2>/dev/null || echo 0) - $(cat "$logs/python.start" 2>/dev/null || echo 0)))" >"$logs/python.result"
}
tier_python() { python_worker; }

DRUMS_SETUP_TEST=1 bash scripts/setup.sh
want fast && run_tier fast tier_fast

# With main: vm and python run beside it (the background: vm, then pytest files); else one after another.
beside=
want main && { want vm || want python; } && beside=1
want python && python_queue
start_background() {
  echo "==> background: $(want vm && echo "vm, then ")pytest files (output at the end)" >&2
  set -m
  {
    if want vm; then run_tier vm tier_vm >"$logs/vm.log" 2>&1; echo "==> vm tier (background): exit $(cut -d' ' -f1 "$logs/vm.result") in $(cut -d' ' -f2 "$logs/vm.result") s" >&2; fi
    # The pytest files' sessions need the images the foreground builds after the VM's.
    until [[ -e $logs/images.ready ]]; do sleep 2; done
    if want python; then python_worker >"$logs/python-background.log" 2>&1; fi
  } </dev/null &
  # Job control for this one job gives it a process group of its own (its PID), so the cleanup
  # reaches every process of the background, also one whose parent has exited.
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
  [[ -z $beside ]] || start_background
fi
if want main || want quiet || want python || want slow || want files; then
  bin/drums image build minimal
  bin/drums image build default
  bin/drums image build osworld
  # OSWorld compatibility (docs/osworld.md): desktop-env without its heavy dependencies, plus what its metrics import.
  bash scripts/osworld-deps.sh
fi
touch "$logs/images.ready"
[[ -z $beside || -n $bg ]] || start_background

if [[ -n $beside ]]; then
  run_tier main tier_main
  want python && python_worker > >(tee -a "$logs/python-foreground.out") 2>&1
  wait $! 2>/dev/null || true
  wait "$bg" || true
  bg=
  want python && python_result
  for f in vm python-background; do
    [[ -s $logs/$f.log ]] || continue
    echo "==> output of $f (ran in the background)" >&2
    cat "$logs/$f.log"
  done
  want python && echo "==> python tier: exit $(cut -d' ' -f1 "$logs/python.result") in $(cut -d' ' -f2 "$logs/python.result") s" >&2
else
  want vm && run_tier vm tier_vm
  if want python; then
    tier_python > >(tee -a "$logs/python-foreground.out") 2>&1
    wait $! 2>/dev/null || true
    python_result
    echo "==> python tier: exit $(cut -d' ' -f1 "$logs/python.result") in $(cut -d' ' -f2 "$logs/python.result") s" >&2
  fi
fi
want files && run_tier files tier_files
# Alone, with nothing else of this run beside them.
want quiet && run_tier quiet tier_quiet
want slow && run_tier slow tier_slow

# The failures again, last, so that the tail of the output (all a CI page may show) says what failed
# and why: node's "failing tests" section and pytest's failures, from every log of this run.
recap() {
  local f
  for f in "$logs"/*.out "$logs"/python-background.log; do
    [[ -f $f ]] || continue
    if grep -q '^✖ failing tests:' "$f"; then
      echo "==> failures in $(basename "$f"):"
      sed -n '/^✖ failing tests:/,$p' "$f" | head -150
    fi
    # pytest: FAILED/ERROR lines (-ra), SUBFAIL for a failed subtest (the fuzz tests), and the E lines.
    if grep -qE '^(FAILED|ERROR) | SUBFAIL |^E  ' "$f"; then
      echo "==> pytest failures in $(basename "$f"):"
      grep -E '^(FAILED|ERROR) | SUBFAIL |^E  ' "$f" | head -80
    fi
  done
}
recap >&2

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
