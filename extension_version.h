// The version of ember's extension API (extension.h, extension_cuda.cuh): grows when one of the
// names they list changes or goes, so a project can check what it was written against:
//   static_assert(EMBER_EXTENSION_API_VERSION == 2);
// 2: ext::AutocastInputs takes an OpKey (ember's ops) or an OpPolicy (an extension's op), no
//    longer an op's name as a string (Note [op lists]).
#pragma once

#define EMBER_EXTENSION_API_VERSION 2
