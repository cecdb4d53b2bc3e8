#!/usr/bin/env bash
# Fuzzes one of ember's parsers with libFuzzer (clang 16 or newer, with AddressSanitizer and
# UBSan), then minimizes what it found into tests/fuzz/corpus/<target>, which every build replays.
# It starts from that corpus and from the seeds kept by name in tests/fuzz/seeds/<target>, if any.
#   scripts/fuzz.sh TARGET [RUNS]      TARGET: safetensors | idx | image    RUNS: default 10,000,000
# EMBER_FUZZ_JOBS=N builds with N jobs (default: one per core).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [RUNS]}
runs=${2:-10000000}
cxx=$(command -v clang++-19 || command -v clang++-16 || true)
[ -n "$cxx" ] || { echo "fuzz: needs clang++-16 or newer (apt-get install clang-16 libclang-rt-16-dev)" >&2; exit 2; }
cc=${cxx/clang++/clang}
build=build-fuzz
CC=$cc CXX=$cxx cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_CUDA=OFF -DEMBER_FUZZ=ON \
  -DEMBER_SANITIZE=address,undefined -DEMBER_BUILD_APPS=ON >/dev/null
cmake --build "$build" -j "${EMBER_FUZZ_JOBS:-$(nproc)}" --target "fuzz_$target"
kept=tests/fuzz/corpus/$target
work=$build/corpus-$target
mkdir -p "$kept" "$work"
cp -n "$kept"/* "$work"/ 2>/dev/null || true
cp -n tests/fuzz/seeds/"$target"/* "$work"/ 2>/dev/null || true
start=$(date +%s)
"$build/tests/fuzz_$target" "$work" -runs="$runs" -max_len=4096 -timeout=10 -print_final_stats=1 2>&1 | tail -20
echo "fuzz: $runs runs in $(($(date +%s) - start)) s"
# Keep a minimal set of inputs that covers everything the fuzzer reached.
rm -rf "$kept.new" && mkdir -p "$kept.new"
"$build/tests/fuzz_$target" -set_cover_merge=1 "$kept.new" "$work" 2>&1 | tail -2
rm -rf "$kept" && mv "$kept.new" "$kept"
echo "fuzz: kept $(ls "$kept" | wc -l) inputs in $kept ($(du -sh "$kept" | cut -f1))"
