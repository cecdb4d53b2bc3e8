// Everything a program or a new layer needs from ember, in one include.
#pragma once

#include "core/autograd.h"
#include "core/cuda.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/serialize.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "layers/layers.h"
#include "layers/leaky_relu.h"
#include "layers/module.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
