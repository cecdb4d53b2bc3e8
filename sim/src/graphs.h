// CUDA graphs on the software GPU: what stream capture records, and what a replay runs. The
// runtime (runtime.cpp and the files beside it) captures — it sees every operation issued to a stream — and replays, by
// issuing each node to the launch stream as an ordinary operation, checked like one; this header
// is the shape of a graph between the two.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime.h"

namespace ember_sim::graphs {

// One operation as captured: its kind, what it touches (checked again at every replay, against
// the other streams), and how to make its work for a replay — made afresh each time, so that a
// copy from pinned memory reads its source when the replay issues it.
struct Node {
  cudaGraphNodeType type = cudaGraphNodeTypeKernel;
  std::string what;
  std::vector<rt::Access> accesses;
  std::function<std::function<void()>()> make_work;
};

// A captured graph. Memory allocated inside the capture belongs to it: it may be used by the
// graph's own replays only, and is released with the graph.
struct Graph {
  int device = 0;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<void*> owned_memory;
  ~Graph();
};

// An instantiated graph: the captured nodes, shared with the graph they came from (either may be
// destroyed first).
struct Exec {
  std::shared_ptr<Graph> graph;
};

// What cudaGraph_t and cudaGraphExec_t point at.
struct GraphHandle {
  std::shared_ptr<Graph> graph;
};

// Releases memory a graph owned (graphs.cpp).
void release_graph_memory(const std::vector<void*>& blocks);

}  // namespace ember_sim::graphs
