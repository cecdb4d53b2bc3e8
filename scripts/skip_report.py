#!/usr/bin/env python3
"""Lists the tests CTest skipped, each with the reason it printed, from CTest's JUnit report
(ctest --output-junit FILE): Catch2 v2 has no SKIP, so a skip exists only as exit code 77, and
CTest's own summary names the test without saying why.

  skip_report.py JUNIT_FILE [--allow NAME ...]   (a NAME may be a pattern: '*_cuda')

Exits 1 when a test other than the allowed ones was skipped: scripts/test.sh installs everything
the tests need, so there a skip means a missing install step, not a choice. The reason shown is
the test's line containing "skipped" (every skipping test prints one), else its last line."""
import argparse
import fnmatch
import sys
import xml.etree.ElementTree as ET


def reason(case):
    out = case.findtext("system-out") or ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    said = [line for line in lines if "skipped" in line.lower()]
    if said:
        return said[-1]
    return lines[-1] if lines else "(it printed nothing)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit")
    parser.add_argument("--allow", nargs="*", default=[], help="tests that may be skipped (absent hardware)")
    args = parser.parse_args()
    try:
        cases = ET.parse(args.junit).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        print(f"skip_report: cannot read CTest's report {args.junit}: {e}", file=sys.stderr)
        return 2
    skipped = [(c.get("name"), reason(c)) for c in cases if c.find("skipped") is not None]
    if not skipped:
        print("skip_report: no test was skipped")
        return 0

    def allowed(name):
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in args.allow)

    unexpected = [name for name, _ in skipped if not allowed(name)]
    print(f"skip_report: {len(skipped)} test(s) skipped:")
    for name, why in skipped:
        mark = "" if allowed(name) else "  <- not allowed"
        print(f"  {name}: {why}{mark}")
    if unexpected:
        print(f"skip_report: error: {', '.join(unexpected)} skipped although the set-up installed what the tests "
              "need: a missing install step or data (see each reason above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
