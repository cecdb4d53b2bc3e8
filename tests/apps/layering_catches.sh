#!/usr/bin/env bash
# The layering check fails on a tree that breaks its rules: a layer calling kernels/ directly, a
# kernel including a core header beyond error.h, and core naming the software GPU. (Run against a
# copy, never the real tree.)
set -u
check=$1 work=$2
rm -rf "$work" && mkdir -p "$work/layers" "$work/kernels" "$work/core/base" "$work/core/tensor"
printf '#include "kernels/elementwise.h"\n' >"$work/layers/bad.cpp"
printf '#include "core/tensor/tensor.h"\n' >"$work/kernels/bad.h"
printf '#include "ember_sim/device.h"\n' >"$work/core/bad.cpp"
printf '#include "core/tensor/tensor.h"\n' >"$work/core/base/bad.h"
printf '#include "core/ops/ops.h"\n' >"$work/core/tensor/bad.h"
out=$("$check" "$work")
status=$?
echo "$out"
[ $status -ne 0 ] || { echo "layering_catches: the check passed a broken tree"; exit 1; }
echo "$out" | grep -q "layers/bad.cpp includes kernels/elementwise.h" &&
  echo "$out" | grep -q "kernels/bad.h includes core/tensor/tensor.h" &&
  echo "$out" | grep -q "core/bad.cpp includes ember_sim/device.h" &&
  echo "$out" | grep -q "core/base/bad.h includes core/tensor/tensor.h" &&
  echo "$out" | grep -q "core/tensor/bad.h includes core/ops/ops.h" || { echo "layering_catches: a violation went unreported"; exit 1; }
echo "layering_catches: ok"
