# What the command-line test scripts share (sourced): pass and fail, counted in $failures, and
# expect, which runs a command with its output in $work/out.txt and $work/err.txt.
failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

# expect CODE PATTERN DESCRIPTION -- COMMAND...: exit code CODE and PATTERN on stderr.
expect() {
  local code=$1 pattern=$2 what=$3
  shift 4
  "$@" >"$work/out.txt" 2>"$work/err.txt"
  local got=$?
  if [ $got -ne "$code" ]; then fail "$what: exit $got, expected $code ($(head -c 300 "$work/err.txt"))"; return; fi
  if [ -n "$pattern" ] && ! grep -q -- "$pattern" "$work/err.txt"; then
    fail "$what: stderr lacks '$pattern': $(head -c 300 "$work/err.txt")"
    return
  fi
  pass "$what"
}
