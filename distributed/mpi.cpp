// The process group through MPI: init, ranks, and the collectives on host memory. CUDA tensors
// are handed to NCCL (distributed/nccl.h). Built without MPI, every entry point that needs a process
// group throws DistError saying how to get one.
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/config.h"
#include "distributed/dist.h"
#include "distributed/nccl.h"
#include "distributed/watchdog.h"

#if EMBER_WITH_MPI
#include <mpi.h>
#endif

namespace ember::dist {

bool launched_by_mpi() {
  // Open MPI's, MPICH/Hydra's and PMIx's launchers each set one of these in every process.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name)) return true;
  return false;
}

bool built_with_mpi() { return EMBER_WITH_MPI; }

#if EMBER_WITH_MPI
namespace {

struct Group {
  bool initialized = false;
  bool we_initialized_mpi = false;
  int rank = 0, size = 1, local_rank = 0;
  MPI_Comm world = MPI_COMM_NULL;  // our duplicate of MPI_COMM_WORLD, errors returned
};
Group& group() {
  static Group g;
  return g;
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw DistError(ember::detail::concat("dist: ", what, " failed on rank ", group().rank, ": ", text));
}

MPI_Comm world() {
  EMBER_CHECK(group().initialized, DistError,
              "dist: no process group; call dist::init() first (in a program started by mpirun)");
  return group().world;
}

void join() {
  Group& g = group();
  if (g.initialized) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    // Only the thread that trains calls MPI; the loader's workers never do.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    g.we_initialized_mpi = true;
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &g.world), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(g.world, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g.world, &g.rank);
  MPI_Comm_size(g.world, &g.size);
  MPI_Comm node;  // the ranks sharing this machine's memory: the local rank picks the GPU
  check(MPI_Comm_split_type(g.world, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_rank(node, &g.local_rank);
  MPI_Comm_free(&node);
  g.initialized = true;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
#define EMBER_MPI_TYPE(name, type, floating, safetensors, suffix, ...) \
  case DType::name:                                                    \
    return MPI_##suffix;
    EMBER_FORALL_DTYPES(EMBER_MPI_TYPE)
#undef EMBER_MPI_TYPE
  }
  throw DTypeError("dist: no MPI type for this dtype");
}

// MPI's reductions have no 16-bit floating type: bf16 and f16 would be summed as integers.
MPI_Datatype mpi_reduce_type(const Tensor& t) {
  EMBER_CHECK(!is_half(t.dtype()), DTypeError, "dist: MPI cannot reduce ", t.dtype(),
              " tensors (it has no 16-bit floating type): reduce them in f32 (t.to(DType::f32)), or on CUDA "
              "through NCCL");
  return mpi_type(t.dtype());
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

int count_of(const Tensor& t) {
  EMBER_CHECK(t.numel() <= std::numeric_limits<int>::max(), ValueError, "dist: a tensor of ", t.numel(),
              " elements is beyond one MPI call's count; split it");
  return static_cast<int>(t.numel());
}

class MpiWork final : public Work {
 public:
  MpiWork(Tensor t) : tensor_(std::move(t)) {
    check(MPI_Iallreduce(MPI_IN_PLACE, tensor_.raw_bytes(), count_of(tensor_), mpi_reduce_type(tensor_), MPI_SUM,
                         world(), &request_),
          "MPI_Iallreduce");
  }
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void wait() override {
    const CollectiveWatch watch("the gradients' all-reduce (MPI_Iallreduce)");
    if (request_ != MPI_REQUEST_NULL) check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
  }

 private:
  Tensor tensor_;  // kept alive until the reduction is done
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

void init() {
  if (group().initialized) return;
  EMBER_CHECK(launched_by_mpi(), DistError,
              "dist: this process was not started by mpirun; start every rank with it, e.g. "
              "mpirun -np 2 --bind-to none <program> ... (or train in one process)");
  join();
}

void init_single_process() { join(); }
bool is_initialized() { return group().initialized; }

void finalize() {
  Group& g = group();
  if (!g.initialized) return;
  nccl::shutdown();
  MPI_Comm_free(&g.world);
  g.initialized = false;
  if (g.we_initialized_mpi) MPI_Finalize();
}

void abort_all(int exit_code) {
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (mpi_up) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int rank() { return group().rank; }
int world_size() { return group().size; }
int local_rank() { return group().local_rank; }

void all_reduce(Tensor& t, ReduceOp op) {
  if (t.is_cuda()) return nccl::all_reduce(t, op);
  const CollectiveWatch watch("MPI_Allreduce");
  check(MPI_Allreduce(MPI_IN_PLACE, t.raw_bytes(), count_of(t), mpi_reduce_type(t), mpi_op(op), world()),
        "MPI_Allreduce");
}

void broadcast(Tensor& t, int root) {
  if (t.is_cuda()) return nccl::broadcast(t, root);
  const CollectiveWatch watch("MPI_Bcast");
  check(MPI_Bcast(t.raw_bytes(), count_of(t), mpi_type(t.dtype()), root, world()), "MPI_Bcast");
}

void barrier() {
  const CollectiveWatch watch("MPI_Barrier");
  check(MPI_Barrier(world()), "MPI_Barrier");
}

std::vector<std::uint64_t> all_gather(std::uint64_t value) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world_size()));
  const CollectiveWatch watch("MPI_Allgather");
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, world()), "MPI_Allgather");
  return all;
}

std::string broadcast_string(const std::string& text, int root) {
  const CollectiveWatch watch("MPI_Bcast");
  std::uint64_t length = text.size();
  check(MPI_Bcast(&length, 1, MPI_UINT64_T, root, world()), "MPI_Bcast");
  std::string out = rank() == root ? text : std::string(length, '\0');
  check(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, world()), "MPI_Bcast");
  return out;
}

std::unique_ptr<Work> all_reduce_async(Tensor t) {
  if (t.is_cuda()) return nccl::all_reduce_async(std::move(t));
  return std::make_unique<MpiWork>(std::move(t));
}

namespace nccl {
void broadcast_from_rank0(void* data, std::size_t bytes) {
  check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, world()), "MPI_Bcast");
}
}  // namespace nccl

#else  // ember built without MPI: a world of one, when asked for, and nothing more

namespace {
bool single = false;  // init_single_process() was called

[[noreturn]] void no_mpi() {
  throw DistError(
      "dist: ember was built without MPI, so it cannot train across processes; install Open MPI "
      "(Debian: openmpi-bin libopenmpi-dev, or scripts/install_deps.sh) and build again");
}
void require_group() {
  if (!single) no_mpi();
}

class DoneWork final : public Work {  // a sum over one rank: nothing to wait for
 public:
  bool test() override { return true; }
  void wait() override {}
};
}  // namespace

void init() { no_mpi(); }
void init_single_process() { single = true; }
bool is_initialized() { return single; }
void finalize() {
  if (single) nccl::shutdown();
  single = false;
}
void abort_all(int exit_code) { std::_Exit(exit_code); }
int rank() { return 0; }
int world_size() { return 1; }
int local_rank() { return 0; }
void all_reduce(Tensor& t, ReduceOp op) {
  require_group();
  if (t.is_cuda()) nccl::all_reduce(t, op);
}
void broadcast(Tensor& t, int root) {
  require_group();
  if (t.is_cuda()) nccl::broadcast(t, root);
}
void barrier() { require_group(); }
std::vector<std::uint64_t> all_gather(std::uint64_t value) {
  require_group();
  return {value};
}
std::string broadcast_string(const std::string& text, int) {
  require_group();
  return text;
}
std::unique_ptr<Work> all_reduce_async(Tensor t) {
  require_group();
  if (t.is_cuda()) return nccl::all_reduce_async(std::move(t));
  return std::make_unique<DoneWork>();
}
namespace nccl {
void broadcast_from_rank0(void*, std::size_t) { require_group(); }  // one rank: it has the id
}  // namespace nccl

#endif

}  // namespace ember::dist
