// Every layer, as `torch.nn` gathers them: one include for programs and tests. Each file below
// holds what its torch.nn namesake does.
#pragma once

#include "layers/activation.h"          // ReLU, Tanh, Sigmoid, GELU, Softmax, LogSoftmax
#include "layers/attention.h"           // MultiheadAttention
#include "layers/container.h"           // Sequential (and its fused runs)
#include "layers/conv.h"                // Conv2d
#include "layers/dropout.h"             // Dropout
#include "layers/embedding.h"           // Embedding
#include "layers/flatten.h"             // Flatten
#include "layers/leaky_relu.h"          // LeakyReLU (the worked example of adding an op)
#include "layers/linear.h"              // Linear
#include "layers/loss.h"                // CrossEntropyLoss
#include "layers/models.h"              // nn::mlp, nn::cnn and their inverses
#include "layers/module.h"              // Module, save and load
#include "layers/normalization.h"       // LayerNorm, BatchNorm2d
#include "layers/pooling.h"             // MaxPool2d
#include "layers/transformer.h"         // TransformerEncoderLayer (torch.nn's)
#include "layers/vision_transformer.h"  // VisionTransformer (torchvision's), its blocks, nn::vit
