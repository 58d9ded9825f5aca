#include "engine/nccl.h"

#include <stdexcept>

#include <fmt/core.h>

#include "engine/distributed.h"

#ifdef WEDGE_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <vector>

#include "engine/cuda_allocator.h"
#include "engine/cuda_stream.h"
#include "engine/device.h"
#include "engine/kernel_table.h"
#include "engine/shard_rounds.h"
#endif

namespace wedge::dist {

bool nccl_built() {
#ifdef WEDGE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

#ifdef WEDGE_HAVE_NCCL

namespace {

void check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  throw std::runtime_error(fmt::format("NCCL: {} failed: {}", what, ncclGetErrorString(rc)));
}

// Device memory for one collective, from wedge's caching allocator. Freed while the work
// that uses it may still be queued: safe, as everything runs on the one stream.
class Scratch {
 public:
  explicit Scratch(std::size_t floats)
      : bytes_(std::max<std::size_t>(floats, 1) * sizeof(float)),
        data_(static_cast<float*>(cuda::device_allocator()->allocate(bytes_))) {}
  ~Scratch() { cuda::device_allocator()->deallocate(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return data_; }

 private:
  std::size_t bytes_;
  float* data_;
};

// The CUDA tree_sum kernel: the ranks' slices added in Communicator::tree_mid's order.
void tree_sum(const float* slices, std::size_t n, std::size_t count, float* out) {
  const kernels::KernelTable<float>* gpu = kernels::kernel_table<float>(static_cast<int>(DeviceKind::CUDA));
  if (gpu == nullptr || gpu->tree_sum == nullptr)
    throw std::logic_error("the GPU collectives need the CUDA kernels (link wedge::kernels)");
  gpu->tree_sum(slices, static_cast<std::int64_t>(n), static_cast<std::int64_t>(count), out);
}

}  // namespace

struct DeviceCommunicator::State {
  const Communicator* hosts = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1;

  // Waits, under the job's timeout, until the GPU has done everything queued so far (the
  // collective just queued and what came before it); NCCL's own errors end the wait too.
  void wait(const char* collective) const {
    cudaEvent_t done = nullptr;
    cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "creating an event");
    cuda::check(cudaEventRecord(done, cuda::stream()), "recording an event");
    try {
      hosts->wait_until(
          [&] {
            ncclResult_t async = ncclSuccess;
            check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
            check(async, collective);
            const cudaError_t state = cudaEventQuery(done);
            if (state == cudaErrorNotReady) return false;
            cuda::check(state, collective);
            return true;
          },
          collective);
    } catch (...) {
      cudaEventDestroy(done);
      throw;
    }
    cuda::check(cudaEventDestroy(done), "destroying an event");
  }
};

DeviceCommunicator::DeviceCommunicator() : state_(std::make_unique<State>()) {
  const Communicator& hosts = Communicator::world();
  if (cuda::device_allocator() == nullptr)
    throw std::runtime_error(
        fmt::format("rank {}: the NCCL collectives need a GPU, and this process sees none (CUDA_VISIBLE_DEVICES?)",
                    hosts.rank()));
  state_->hosts = &hosts;
  state_->rank = hosts.rank();
  state_->size = hosts.size();
  ncclUniqueId id{};
  if (hosts.is_root()) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  hosts.broadcast(&id, sizeof id);
  check(ncclCommInitRank(&state_->comm, state_->size, id, state_->rank), "ncclCommInitRank");
}

// The communicator lives as long as the process (as the CUDA stream does): at static
// destruction the CUDA runtime may be gone already.
DeviceCommunicator::~DeviceCommunicator() = default;

DeviceCommunicator& DeviceCommunicator::world() {
  static DeviceCommunicator* world = new DeviceCommunicator();
  return *world;
}

int DeviceCommunicator::rank() const { return state_->rank; }
int DeviceCommunicator::size() const { return state_->size; }

std::string DeviceCommunicator::library() const {
  int version = 0;
  check(ncclGetVersion(&version), "ncclGetVersion");
  // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z since 2.9.
  return fmt::format("NCCL {}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

// As the host all-reduce: with more than two ranks a reduce-scatter over even shards and
// an all-gather; with two (or one), buckets of every rank's values gathered, N slices one
// after another, then added in the tree order into place.
void DeviceCommunicator::all_reduce_sum(float* values, std::size_t n) const {
  const auto ranks = static_cast<std::size_t>(state_->size);
  if (ranks > 2) {
    const std::vector<std::size_t> bounds = even_bounds(n, state_->size);
    reduce_scatter_sum(values, n, bounds);
    all_gather(values, n, bounds);
    return;
  }
  const std::size_t bucket = piece_elements<float>(state_->size);
  const Scratch gathered(std::min(n, bucket) * ranks);
  for (std::size_t begin = 0; begin < n; begin += bucket) {
    const std::size_t count = std::min(bucket, n - begin);
    check(ncclAllGather(values + begin, gathered.get(), count, ncclFloat, state_->comm, cuda::stream()),
          "ncclAllGather");
    tree_sum(gathered.get(), count, ranks, values + begin);
  }
  state_->wait("all_reduce_sum");
}

// In rounds as the host's: each rank sends every rank that rank's piece of its values and
// receives every rank's copy of its own piece, then adds them in the tree order.
void DeviceCommunicator::reduce_scatter_sum(float* values, std::size_t n, std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, n, state_->size, "reduce_scatter_sum");
  const auto me = static_cast<std::size_t>(state_->rank);
  const ShardRounds shards(bounds, piece_elements<float>(state_->size));
  const Scratch received(shards.buffer_elements());
  for (std::size_t k = 0; k < shards.rounds(); ++k) {
    const ShardRounds::Round r = shards.round(k);
    const auto mine = static_cast<std::size_t>(r.counts[me]);
    if (mine > 0)
      cuda::check(cudaMemcpyAsync(received.get() + me * mine, values + r.first[me], mine * sizeof(float),
                                  cudaMemcpyDeviceToDevice, cuda::stream()),
                  "copying this rank's own piece");
    check(ncclGroupStart(), "ncclGroupStart");
    for (std::size_t q = 0; q < shards.ranks(); ++q) {
      if (q == me) continue;
      const auto theirs = static_cast<std::size_t>(r.counts[q]);
      const int peer = static_cast<int>(q);
      if (theirs > 0)
        check(ncclSend(values + r.first[q], theirs, ncclFloat, peer, state_->comm, cuda::stream()), "ncclSend");
      if (mine > 0)
        check(ncclRecv(received.get() + q * mine, mine, ncclFloat, peer, state_->comm, cuda::stream()), "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    tree_sum(received.get(), mine, shards.ranks(), values + r.first[me]);
  }
  state_->wait("reduce_scatter_sum");
}

// Every rank's shard straight into its place on every other rank: no scratch, no rounds.
void DeviceCommunicator::all_gather(float* values, std::size_t n, std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, n, state_->size, "all_gather");
  const auto me = static_cast<std::size_t>(state_->rank);
  const std::size_t mine = bounds[me + 1] - bounds[me];
  check(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t q = 0; q + 1 < bounds.size(); ++q) {
    if (q == me) continue;
    const int peer = static_cast<int>(q);
    if (mine > 0) check(ncclSend(values + bounds[me], mine, ncclFloat, peer, state_->comm, cuda::stream()), "ncclSend");
    if (const std::size_t theirs = bounds[q + 1] - bounds[q]; theirs > 0)
      check(ncclRecv(values + bounds[q], theirs, ncclFloat, peer, state_->comm, cuda::stream()), "ncclRecv");
  }
  check(ncclGroupEnd(), "ncclGroupEnd");
  state_->wait("all_gather");
}

#else  // no NCCL in this build

struct DeviceCommunicator::State {};

DeviceCommunicator::DeviceCommunicator() {
  throw std::runtime_error(
      "this wedge was built without NCCL (it needs CUDA, MPI and the CUDA toolkit's NCCL when configured): the GPU "
      "ranks exchange gradients through host memory");
}
DeviceCommunicator::~DeviceCommunicator() = default;
DeviceCommunicator& DeviceCommunicator::world() {
  static DeviceCommunicator* world = new DeviceCommunicator();
  return *world;
}
int DeviceCommunicator::rank() const { return 0; }
int DeviceCommunicator::size() const { return 1; }
std::string DeviceCommunicator::library() const { return {}; }
void DeviceCommunicator::all_reduce_sum(float*, std::size_t) const {}
void DeviceCommunicator::reduce_scatter_sum(float*, std::size_t, std::span<const std::size_t>) const {}
void DeviceCommunicator::all_gather(float*, std::size_t, std::span<const std::size_t>) const {}

#endif

}  // namespace wedge::dist
