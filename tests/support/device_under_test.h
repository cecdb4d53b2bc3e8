// The device a test written once for "a device" runs on (tests/support/device_main.cpp chooses it
// from --device; CTest runs such a binary once per device).
#pragma once

#include "core/tensor/device.h"

namespace ember::testing {

Device device_under_test();

}  // namespace ember::testing
