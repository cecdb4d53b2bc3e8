#!/usr/bin/env python3
"""bench_kernels' JSON report as one compact Markdown table, every row kept: the device's measured
ceilings first, then a row per kernel version and shape (µs, GB/s, GFLOP/s, the share of the
ceiling, whether ember uses it), refused rows with their reason.

  bench_table.py BENCH.json"""
import json
import sys


def number(value, digits):
    return "" if value is None else f"{value:,.{digits}f}"


def main():
    report = json.load(open(sys.argv[1]))
    for c in report.get("ceilings", []):
        print(f"- {c['device']}: copy {number(c['copy_gb_per_s'], 1)} GB/s ({c['copy']}); "
              f"GEMM {number(c['gemm_gflop_per_s'], 0)} GFLOP/s ({c['gemm']})")
    print("\n| family | version | shape | µs | GB/s | GFLOP/s | of max | used |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = report.get("results", [])
    for r in rows:
        if r.get("status") == "refused":
            print(f"| {r['family']} | {r['version']} | {r['shape']} | REFUSED: {r.get('reason', '')} | | | | |")
            continue
        share = r.get("fraction_of_ceiling")
        print(f"| {r['family']} | {r['version']} | {r['shape']} | {number(r.get('time_us'), 2)} | "
              f"{number(r.get('gb_per_s'), 1)} | {number(r.get('gflop_per_s'), 0)} | "
              f"{'' if share is None else f'{100 * share:.0f}%'} | {'yes' if r.get('in_use') else ''} |")
    print(f"\n{len(rows)} rows ({sum(r.get('status') == 'refused' for r in rows)} refused).")


if __name__ == "__main__":
    sys.exit(main())
