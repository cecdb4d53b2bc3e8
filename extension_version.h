// The version of ember's extension API (extension.h, extension_cuda.cuh): grows when one of the
// names they list changes or goes, so a project can check what it was written against:
//   static_assert(EMBER_EXTENSION_API_VERSION == 3);
// 2: ext::AutocastInputs takes an OpKey (ember's ops) or an OpPolicy (an extension's op), no
//    longer an op's name as a string (Note [op lists]).
// 3: the floor moved: <ember/core/base/X.h> is now <ember/base/X.h> (errors, dtypes, half, env,
//    fusion, config.h), and Device and MemoryKind are defined in <ember/base/device.h> (still
//    reached through <ember/ember.h> and <ember/extension.h>); ext::AutocastOff is declared in
//    <ember/core/tensor/autocast_state.h>, which <ember/core/ops/autocast.h> includes.
#pragma once

#define EMBER_EXTENSION_API_VERSION 3
