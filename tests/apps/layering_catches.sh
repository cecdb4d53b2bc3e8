#!/usr/bin/env bash
# The layering check fails on a tree that breaks its rules: a layer calling kernels/ directly, a
# kernel including core/, core naming the software GPU, the floor (base/) including anything above
# it, the CUDA runtime's room including the tensor's, and a tensor header including the ops; and it
# passes the arrows that point down (a kernel on base/, the tensor on the CUDA runtime). (Run
# against a copy, never the real tree.)
set -u
check=$1 work=$2
rm -rf "$work" && mkdir -p "$work/layers" "$work/kernels" "$work/base" "$work/core/tensor" "$work/core/cuda"
printf '#include "kernels/elementwise.h"\n' >"$work/layers/bad.cpp"
printf '#include "core/tensor/tensor.h"\n' >"$work/kernels/bad.h"
printf '#include "ember_sim/device.h"\n' >"$work/core/bad.cpp"
printf '#include "core/tensor/tensor.h"\n#include "kernels/common.h"\n' >"$work/base/bad.h"
printf '#include "core/ops/ops.h"\n' >"$work/core/tensor/bad.h"
printf '#include "core/tensor/storage.h"\n' >"$work/core/cuda/bad.h"
printf '#include "base/error.h"\n' >"$work/kernels/good.h"
printf '#include "core/cuda/runtime.h"\n#include "base/device.h"\n' >"$work/core/tensor/good.h"
out=$("$check" "$work")
status=$?
echo "$out"
[ $status -ne 0 ] || { echo "layering_catches: the check passed a broken tree"; exit 1; }
echo "$out" | grep -q "layers/bad.cpp includes kernels/elementwise.h" &&
  echo "$out" | grep -q "kernels/bad.h includes core/tensor/tensor.h" &&
  echo "$out" | grep -q "core/bad.cpp includes ember_sim/device.h" &&
  echo "$out" | grep -q "base/bad.h includes core/tensor/tensor.h" &&
  echo "$out" | grep -q "base/bad.h includes kernels/common.h" &&
  echo "$out" | grep -q "core/tensor/bad.h includes core/ops/ops.h" &&
  echo "$out" | grep -q "core/cuda/bad.h includes core/tensor/storage.h" || {
  echo "layering_catches: a violation went unreported"
  exit 1
}
if echo "$out" | grep -q "good.h"; then
  echo "layering_catches: an arrow that points down was reported"
  exit 1
fi
echo "layering_catches: ok"
