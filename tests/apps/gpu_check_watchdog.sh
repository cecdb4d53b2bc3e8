#!/usr/bin/env bash
# scripts/gpu_check.sh's section watchdog: the planted section `stubborn` runs a child that ignores
# SIGTERM under a plain GNU timeout (a process group of its own, out of reach of a kill of the
# section's group). Given 2 s, the section must be cut ("did not finish"), leave neither the child
# nor its timeout behind, and the next section (loader) must start at once with its full budget.
#   gpu_check_watchdog.sh WORK_DIR
set -u
work=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
source "$root/tests/apps/expect.sh"

start=$(date +%s)
OUT=$work/out bash "$root/scripts/gpu_check.sh" --dry-run --only stubborn,loader --budget stubborn=2 \
  >"$work/stdout.txt" 2>&1
took=$(($(date +%s) - start))
report=$work/out/report.md
grep -A2 "^## stubborn (budget 2 s" "$report" | grep -q "TIMEOUT\*\* in [0-9]* s. did not finish within its 2 s" &&
  pass "the stubborn section is cut at its budget" || fail "stubborn: $(grep -A2 '^## stubborn' "$report")"
read -r child timer <"$work/out/stubborn.pid" || child="" timer=""
[ -n "$child" ] && [ -n "$timer" ] || fail "the planted child did not write its pid and its timeout's"
for pid in $child $timer; do
  if [ -d "/proc/$pid" ] && ! grep -q "^State:.*Z" "/proc/$pid/status" 2>/dev/null; then
    fail "process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline")) outlived its section"
    kill -KILL "$pid" 2>/dev/null
  else
    pass "process $pid ended with its section"
  fi
done
# The loader starts within the kill's 3 s grace (and a second's slack) after the 2-s budget, and
# keeps all of its own.
line=$(grep "^## loader (budget" "$report")
[[ "$line" =~ budget\ 15\ s\;\ started\ at\ \+([0-9]+)\ s ]] && [ "${BASH_REMATCH[1]}" -le 7 ] &&
  pass "the next section gets its full budget at once ($line)" || fail "loader: '$line'"
[ "$took" -le 20 ] && pass "the whole check ended in $took s" || fail "the check took $took s"
echo "gpu_check_watchdog: $failures failure(s)"
[ $failures = 0 ]
