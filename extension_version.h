// The version of ember's extension API (extension.h, extension_cuda.cuh): grows when one of the
// names they list changes or goes, so a project can check what it was written against:
//   static_assert(EMBER_EXTENSION_API_VERSION == 1);
#pragma once

#define EMBER_EXTENSION_API_VERSION 1
