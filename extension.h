// ember's extension API, for layers and ops written outside ember (docs/writing-a-layer.md):
// everything in <ember/ember.h>, plus what an op with kernels of its own needs — ember's own ops
// are written with exactly these, so the API cannot drift from them.
//   ember::ext::check_defined, check_same_device, check_same_dtype, check_floating, check_dtype,
//     check_dim, normalize_dim, Arg     argument checks with PyTorch's messages (core/ops/op_helpers.h)
//   ember::ext::new_empty                an output like an input: same device, any shape and dtype
//   ember::ext::dispatch, dispatch_device, dispatch_dtype
//                                        the one seam from an op to its CPU or CUDA kernel, with the
//                                        stream (Note [device dispatch] in core/ops/dispatch.h)
//   ember::autograd::record, needs_recording, Gradients, NeedsGrad
//                                        a differentiable op's derivative rule (core/tensor/autograd.h)
//   ember::kernels::WriteMode, EMBER_HOST_DEVICE, ceil_div   (kernels/common.h)
//   ember::gradcheck                     finite-difference checks of the result (core/ops/gradcheck.h)
//   ember::ext::AutocastInputs, OpPolicy an op's inputs as autocast casts them (core/ops/autocast.h)
// Device code includes <ember/extension_cuda.cuh> for the launch helper.
#pragma once

#include "core/ops/dispatch.h"
#include "core/ops/gradcheck.h"
#include "core/ops/op_helpers.h"
#include "core/tensor/autograd.h"
#include "ember.h"
#include "extension_version.h"
#include "kernels/common.h"
