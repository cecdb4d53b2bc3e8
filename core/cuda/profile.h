// Named ranges for profilers: NVTX ranges on a CUDA build (an nsys or ncu user sees ember's
// structure — kernel families, forward, backward, optimizer), nothing otherwise. Cheap enough
// to leave in: without a profiler attached, NVTX calls return at once.
#pragma once

namespace ember {

class ProfileRange {
 public:
  explicit ProfileRange(const char* name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;
};

}  // namespace ember
