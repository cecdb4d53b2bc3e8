#!/usr/bin/env bash
# The GPU check, made for one call of about 10 minutes on a machine with an NVIDIA GPU, the CUDA
# toolkit and Python with PyTorch but no package registry (scripts/prepare_gpu_check.sh fetches
# .deps and data/mnist beforehand, and writes .deps/gpu_check_plan.txt: the sections whose code
# changed since the ledger's last run on a GPU). The sections (scripts/gpu_check/*.sh):
#
#   facts        the GPU, the driver's CUDA version against the toolkit's (the build adapts or stops)
#   build        Release for sm_90 against the unpacked .deps: the library, the GPU tests, 4 programs
#   test         test_cuda, then every *_cuda device test: correctness first
#   train        mnist_train --device cuda: MLP (against the CPU), bf16, the CNN, a stop and resume
#   vit          mnist_train --model vit on the GPU against the CPU, same seed; images/s
#   transformer  attention and layer_norm against PyTorch's, CUDA events on both sides
#   bench        bench_kernels against the copy and GEMM ceilings, every row in the report
#   sanitize     compute-sanitizer memcheck, initcheck and racecheck on ember's kernels
#   compare      the MLP steps and the CNN (batch 64 and 256) against PyTorch eager, bf16 autocast, torch.compile
#   mixed        the MLP in f32, bf16 and f16 next to PyTorch eager and bf16 autocast
#   loader       bench_loader: pinned staging, copies hidden behind compute
#   devices      bench_devices: when the GPU beats the CPU
#   distributed  two GPUs through mpirun (skipped on one)
#
# Which run first when time is short: facts and build always (nothing runs without them); then the
# sections whose code changed since the last run on a GPU (the plan), because what a GPU has never
# run is what the call is for; then the rest, in the order above: correctness before figures (a
# wrong kernel makes its figure worthless), the figures never measured (transformer, bench rows)
# before those measured before (compare, mixed), the quick ones last, and two GPUs last of all.
#
# Each section writes its part of report.md when it starts (a header) and when it ends (status,
# figures), and a comparison's lines as they are measured: a timeout, a kill or a failure keeps
# everything before it, and the report says what did not finish or did not run. A section's
# processes all end with it: over budget, its process group and every process that carries its
# token in the environment (GNU timeout moves itself and its child into a group of their own) get
# SIGTERM, then SIGKILL 3 s later; and whatever it left running is ended when it returns.
#
#   scripts/gpu_check.sh [--dry-run] [--deadline SECONDS] [--only S,S] [--skip S,S] [--budget S=SECONDS]... [--list]
#
# --deadline: the call's limit in seconds (the run's timeout, default 600). No section starts, and a
# running one is cut, 20 s before it (the summary's reserve). The budgets are sized for a 600-s call;
# a shorter one shrinks every budget but facts' and build's in proportion (docs/benchmarking.md: a
# second call). --budget sets one section's budget, never scaled (a second call, or a test:
# --budget test=1 must leave "did not finish"). --dry-run (CI): unpacks .deps and builds exactly as
# the GPU machine will, then walks every other section's path (its command lines, printed instead
# of run, its report writer, its timeout). Output: $OUT (else ./gpu-report), at most 8 files.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Budgets in seconds for a 600-s call, and why each is that size. "est." marks an estimate that
# this run measures and records in the report ("took"), for the next call's budgets.
declare -A budget=(
  [facts]=20         # nvidia-smi, nvcc --version, importing torch (took 9 s)
  [build]=150        # configure and build on 16 cores (took 64-66 s), est. 90 s with the transformer's kernels
  [test]=120         # test_cuda at full sizes (took 23-28 s), then 5 device tests and install_example (26 s)
  [train]=40         # five short runs of mnist_train (10,000 images each epoch) and a stop and resume (took 7 s)
  [vit]=60           # est.: 3 epochs of the ViT on the GPU (twice) and on every CPU core
  [transformer]=60   # est.: bench_kernels' two families and PyTorch's import and timings
  [bench]=75         # bench_kernels at 1M and 64M elements, 10 timed repeats per kernel (took 50 s)
  [sanitize]=150     # start-up, then memcheck, initcheck and racecheck in thirds (took 18-35 s at small sizes)
  [compare]=180      # MLP eager (took 30 s), the CNN at two batches, est. 60 s; torch.compile's cold compiles last
  [mixed]=120        # the MLP in 3 precisions on both sides, one round (took 71-77 s)
  [loader]=15        # 5 epochs of streaming, pinned and pageable (took under 1 s)
  [devices]=25       # 20 steps per model on each device (took 4 s)
  [distributed]=30   # two 2-epoch runs
  [stubborn]=5       # not a check: a planted child that ignores SIGTERM (the watchdog's test; --only)
)
default_order=(facts build stubborn test train vit transformer bench sanitize compare mixed loader devices distributed)
reference_call=600
reserve=20

dry_run=0
only=""
skip=""
deadline=$reference_call
deadline_given=0
declare -A fixed_budget=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --only) only=${2:-}; shift ;;
    --skip) skip=${2:-}; shift ;;
    --deadline) deadline=${2:-}; deadline_given=1; shift ;;
    --budget)
      entry=${2:-}
      shift
      [[ "$entry" =~ ^([a-z]+)=([0-9]+)$ ]] && [ -n "${budget[${BASH_REMATCH[1]}]:-}" ] ||
        { echo "gpu_check: --budget takes SECTION=SECONDS with a section of --list, not '$entry'" >&2; exit 2; }
      budget[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
      fixed_budget[${BASH_REMATCH[1]}]=1
      ;;
    --list) list=1 ;;
    -h | --help) sed -n '2,44p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for s in ${only//,/ } ${skip//,/ }; do
  [ -n "${budget[$s]:-}" ] || { echo "gpu_check: unknown section '$s' (see --list)" >&2; exit 2; }
done
[[ "$deadline" =~ ^[0-9]+$ ]] && [ "$deadline" -gt "$reserve" ] ||
  { echo "gpu_check: --deadline takes the call's limit in seconds (over $reserve), not '$deadline'" >&2; exit 2; }

# The plan: the sections whose code changed since the last run on a GPU, first after facts and build.
plan=${GPU_CHECK_PLAN:-$root/.deps/gpu_check_plan.txt}  # another file for the tests
changed=""
[ -f "$plan" ] && changed=$(sed -n 's/^changed: *//p' "$plan")
order=(facts build stubborn)
for s in "${default_order[@]:3}"; do [[ " $changed " == *" $s "* ]] && order+=("$s"); done
for s in "${default_order[@]:3}"; do [[ " $changed " == *" $s "* ]] || order+=("$s"); done
# A shorter call shrinks the budgets in proportion; facts and build need what they need.
scale_percent=$((deadline >= reference_call ? 100 : deadline * 100 / reference_call))
for s in "${!budget[@]}"; do
  case "$s" in facts | build) continue ;; esac
  [ -n "${fixed_budget[$s]:-}" ] || budget[$s]=$((budget[$s] * scale_percent / 100))
done
if [ -n "${list:-}" ]; then
  for s in "${order[@]}"; do echo "$s (budget ${budget[$s]} s)$([[ " $changed " == *" $s "* ]] && echo ', changed')"; done
  exit 0
fi
cutoff=$((deadline - reserve))

out=${OUT:-$root/gpu-report}
mkdir -p "$out"
report=$out/report.md
runs=$out/runs.log   # every section's short output; the build, the tests and the sanitizer have their own logs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deps=$root/.deps/root
build=$root/build-gpu$([ $dry_run = 1 ] && echo -dryrun)
jobs=$(nproc)
started=$(date +%s)
: >"$runs"

elapsed() { echo $(($(date +%s) - started)); }
log() { echo "[gpu_check $(elapsed)s] $*"; }
# A section runs when --only names it (or --only is empty, but for the planted one) and --skip does not.
wanted() {
  { { [ -z "$only" ] && [ "$1" != stubborn ]; } || [[ ",$only," == *",$1,"* ]]; } && [[ ",$skip," != *",$1,"* ]]
}
# A line of the report, written at once.
say() { printf '%s\n' "$*" >>"$report"; }
# A section's one-line note, for its status line and the summary table.
note() { printf '%s' "$*" >"$work/note"; }
# A command under a time limit that ends it: SIGTERM at SECONDS, SIGKILL 5 s later.
limit() { timeout -k 5 "$@"; }
# A GPU command: run it, or in a dry run print it and take a second (so that a 1-second budget
# times out as a real command would).
gpu() {
  if [ $dry_run = 1 ]; then
    echo "[dry run] $*"
    sleep 1
  else
    "$@"
  fi
}
# The section's own log lines in the report, fenced.
quote() { [ -s "$1" ] && { say '```'; grep -E "${2:-.}" "$1" | head -${3:-40} >>"$report"; say '```'; }; }

# The processes that carry section token $1 in their environment (their own or inherited).
token_pids() { grep -lzx "EMBER_GPU_CHECK_SECTION=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3; }
# SIGNAL to a section's process group and to every process that carries its token.
signal_section() {  # SIGNAL PGID TOKEN
  local pids
  kill -"$1" -- -"$2" 2>/dev/null
  pids=$(token_pids "$3")
  [ -z "$pids" ] || kill -"$1" $pids 2>/dev/null
}

# Runs section NAME under its budget, capped by the deadline: its header goes into the report
# first, its status line after. Over budget, the whole tree is ended (signal_section).
declare -a summary=()
run_section() {
  local name=$1 b=${budget[$1]} t0 rc status left token
  left=$((cutoff - $(elapsed)))
  if [ "$left" -lt 5 ]; then
    say "## $name: not run (the call's limit, ${deadline} s less ${reserve}, was reached)"
    summary+=("$name|NOT RUN|0|deadline reached")
    return
  fi
  [ "$b" -gt "$left" ] && b=$left
  say ""
  say "## $name (budget $b s; started at +$(elapsed) s$([[ " $changed " == *" $name "* ]] && echo '; changed'))"
  log "section $name (budget ${b}s)"
  : >"$work/note"
  t0=$(date +%s)
  token=$name-$$-$t0
  set -m
  ( export EMBER_GPU_CHECK_SECTION=$token; "section_$name" "$b" ) &
  local pid=$!
  ( sleep "$b"; signal_section TERM "$pid" "$token"; sleep 3; signal_section KILL "$pid" "$token" ) >/dev/null 2>&1 &
  local watchdog=$!
  set +m
  wait "$pid"
  rc=$?
  kill -- -"$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  # Whatever the section left running: a moment to end on the SIGTERM it may have had, then SIGKILL.
  local tries
  for tries in 1 2 3 4 5 6; do [ -z "$(token_pids "$token")" ] && break; sleep 0.5; done
  signal_section KILL "$pid" "$token"
  local took=$(($(date +%s) - t0))
  case $rc in
    0) status=PASS ;;
    3) status=SKIP ;;
    *) if [ "$took" -ge "$b" ]; then status=TIMEOUT; else status=FAIL; fi ;;
  esac
  local text
  text=$(cat "$work/note")
  [ $status = TIMEOUT ] && text="did not finish within its $b s${text:+; $text}"
  say "**$status** in $took s. $text"
  summary+=("$name|$status|$took|$text")
}

source "$root/scripts/gpu_check/setup.sh"
source "$root/scripts/gpu_check/correctness.sh"
source "$root/scripts/gpu_check/figures.sh"

# ---- main --------------------------------------------------------------------------------------
rm -f "$out/.stop"
{
  echo "# GPU check report"
  echo
  echo "Mode: $([ $dry_run = 1 ] && echo 'dry run (commands printed, not run; the build is real)' || echo full);" \
    "the call's limit $deadline s$([ $deadline_given = 0 ] && echo ' (the default: pass the call'"'"'s own with --deadline)')," \
    "budgets at ${scale_percent}% of a ${reference_call}-s call's; sections in order:" \
    "$(for s in "${order[@]}"; do wanted "$s" && printf '%s ' "$s"; done | sed 's/ $//')."
  if [ -f "$plan" ]; then
    echo
    echo "The plan: base $(sed -n 's/^base: *//p' "$plan"). Changed:" \
      "$(for s in "${order[@]}"; do [[ " $changed " == *" $s "* ]] && printf '%s ' "$s"; done | sed 's/ $//')." \
      "The commits since:"
    echo
    sed -n '/^commits:/,$p' "$plan" | tail -n +2 | sed 's/^/- /'
  else
    echo
    echo "No plan (.deps/gpu_check_plan.txt, from scripts/prepare_gpu_check.sh): the default order."
  fi
} >"$report"
for name in "${order[@]}"; do
  wanted "$name" || continue
  if [ -f "$out/.stop" ]; then
    say "## $name: not run (the facts section stopped the check)"
    summary+=("$name|NOT RUN|0|stopped by facts")
    continue
  fi
  [ $dry_run = 1 ] && [ "$name" = build ] && budget[build]=1800  # two CI cores build far slower
  [ $dry_run = 1 ] && [ "$name" = build ] && cutoff=$((cutoff + 1800))
  run_section "$name"
done
rm -f "$out/.stop"

{
  echo
  echo "## Summary ($(elapsed) s)"
  echo
  echo "| section | status | seconds | note |"
  echo "| --- | --- | --- | --- |"
  for line in "${summary[@]}"; do
    IFS='|' read -r name status secs text <<<"$line"
    echo "| $name | $status | $secs | $text |"
  done
} >>"$report"

echo
echo "==== gpu_check summary ($(elapsed) s; report: $report)"
printf '%s\n' "${summary[@]}" | column -t -s '|' 2>/dev/null || printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | grep -qE "\|(FAIL|TIMEOUT)\|" && exit 1
exit 0
