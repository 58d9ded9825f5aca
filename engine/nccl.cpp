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

// Device memory for the collectives, from wedge's caching allocator: one buffer per
// blocking call (on wedge's stream it may be freed while the work that uses it is still
// queued, the next user being queued after it), and one for the started sums that lives as
// long as the communicator (they run one after another on the own stream, so they share it).
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

// The CUDA tree_sum kernel, on `stream`: the ranks' slices added in Communicator::tree_mid's order.
void tree_sum(const float* slices, std::size_t n, std::size_t count, float* out, cudaStream_t stream) {
  const kernels::KernelTable<float>* gpu = kernels::kernel_table<float>(static_cast<int>(DeviceKind::CUDA));
  if (gpu == nullptr || gpu->tree_sum == nullptr)
    throw std::logic_error("the GPU collectives need the CUDA kernels (link wedge::kernels)");
  const cuda::StreamOverride on(stream);
  gpu->tree_sum(slices, static_cast<std::int64_t>(n), static_cast<std::int64_t>(count), out);
}

// A CUDA event that destroys itself.
class Event {
 public:
  Event() { cuda::check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "creating an event"); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

struct DeviceCommunicator::State {
  const Communicator* hosts = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t own = nullptr;             // the started sums' stream
  std::unique_ptr<Scratch> own_scratch;   // theirs, made by the first
  int rank = 0, size = 1;

  // The most scratch one collective takes: N pieces of a bucket, or of a shard's round.
  std::size_t scratch_elements() const { return piece_elements<float>(size) * static_cast<std::size_t>(size); }

  // Waits, under the job's timeout, until `done` has happened on the GPU; NCCL's own
  // errors end the wait too.
  void wait(cudaEvent_t done, const char* collective) const {
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
  }
  // Waits until wedge's stream has done everything queued so far (the collective just
  // queued and what came before it).
  void wait(const char* collective) const {
    const Event done;
    cuda::check(cudaEventRecord(done.get(), cuda::stream()), "recording an event");
    wait(done.get(), collective);
  }

  // The collectives queued on `stream`, using `scratch` (scratch_elements() floats) for
  // what arrives before it is added.
  void queue_all_reduce(float* values, std::size_t n, cudaStream_t stream, float* scratch) const;
  void queue_reduce_scatter(float* values, std::size_t n, std::span<const std::size_t> bounds, cudaStream_t stream,
                            float* scratch) const;
  void queue_all_gather(float* values, std::span<const std::size_t> bounds, cudaStream_t stream) const;
};

struct DeviceCommunicator::PendingSum::State {
  Event done;  // recorded on the own stream after the exchange
};

DeviceCommunicator::PendingSum::PendingSum() = default;
DeviceCommunicator::PendingSum::PendingSum(PendingSum&&) noexcept = default;
DeviceCommunicator::PendingSum& DeviceCommunicator::PendingSum::operator=(PendingSum&&) noexcept = default;
DeviceCommunicator::PendingSum::~PendingSum() = default;

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
  // The highest priority the GPU offers: a bucket's exchange should not wait behind the
  // backward pass's kernels, which it overlaps.
  int lowest = 0, highest = 0;
  cuda::check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "cudaDeviceGetStreamPriorityRange");
  cuda::check(cudaStreamCreateWithPriority(&state_->own, cudaStreamNonBlocking, highest), "creating the collectives' stream");
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
void DeviceCommunicator::State::queue_all_reduce(float* values, std::size_t n, cudaStream_t stream, float* scratch) const {
  const auto ranks = static_cast<std::size_t>(size);
  if (ranks > 2) {
    const std::vector<std::size_t> bounds = even_bounds(n, size);
    queue_reduce_scatter(values, n, bounds, stream, scratch);
    queue_all_gather(values, bounds, stream);
    return;
  }
  const std::size_t bucket = piece_elements<float>(size);
  for (std::size_t begin = 0; begin < n; begin += bucket) {
    const std::size_t count = std::min(bucket, n - begin);
    check(ncclAllGather(values + begin, scratch, count, ncclFloat, comm, stream), "ncclAllGather");
    tree_sum(scratch, count, ranks, values + begin, stream);
  }
}

// In rounds as the host's: each rank sends every rank that rank's piece of its values and
// receives every rank's copy of its own piece, then adds them in the tree order.
void DeviceCommunicator::State::queue_reduce_scatter(float* values, std::size_t n, std::span<const std::size_t> bounds,
                                                     cudaStream_t stream, float* received) const {
  check_shard_bounds(bounds, n, size, "reduce_scatter_sum");
  const auto me = static_cast<std::size_t>(rank);
  const ShardRounds shards(bounds, piece_elements<float>(size));
  for (std::size_t k = 0; k < shards.rounds(); ++k) {
    const ShardRounds::Round r = shards.round(k);
    const auto mine = static_cast<std::size_t>(r.counts[me]);
    if (mine > 0)
      cuda::check(cudaMemcpyAsync(received + me * mine, values + r.first[me], mine * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "copying this rank's own piece");
    check(ncclGroupStart(), "ncclGroupStart");
    for (std::size_t q = 0; q < shards.ranks(); ++q) {
      if (q == me) continue;
      const auto theirs = static_cast<std::size_t>(r.counts[q]);
      const int peer = static_cast<int>(q);
      if (theirs > 0) check(ncclSend(values + r.first[q], theirs, ncclFloat, peer, comm, stream), "ncclSend");
      if (mine > 0) check(ncclRecv(received + q * mine, mine, ncclFloat, peer, comm, stream), "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    tree_sum(received, mine, shards.ranks(), values + r.first[me], stream);
  }
}

// Every rank's shard straight into its place on every other rank: no scratch, no rounds.
void DeviceCommunicator::State::queue_all_gather(float* values, std::span<const std::size_t> bounds, cudaStream_t stream) const {
  const auto me = static_cast<std::size_t>(rank);
  const std::size_t mine = bounds[me + 1] - bounds[me];
  check(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t q = 0; q + 1 < bounds.size(); ++q) {
    if (q == me) continue;
    const int peer = static_cast<int>(q);
    if (mine > 0) check(ncclSend(values + bounds[me], mine, ncclFloat, peer, comm, stream), "ncclSend");
    if (const std::size_t theirs = bounds[q + 1] - bounds[q]; theirs > 0)
      check(ncclRecv(values + bounds[q], theirs, ncclFloat, peer, comm, stream), "ncclRecv");
  }
  check(ncclGroupEnd(), "ncclGroupEnd");
}

void DeviceCommunicator::all_reduce_sum(float* values, std::size_t n) const {
  const Scratch scratch(state_->scratch_elements());
  state_->queue_all_reduce(values, n, cuda::stream(), scratch.get());
  state_->wait("all_reduce_sum");
}

void DeviceCommunicator::reduce_scatter_sum(float* values, std::size_t n, std::span<const std::size_t> bounds) const {
  const Scratch scratch(state_->scratch_elements());
  state_->queue_reduce_scatter(values, n, bounds, cuda::stream(), scratch.get());
  state_->wait("reduce_scatter_sum");
}

void DeviceCommunicator::all_gather(float* values, std::size_t n, std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, n, state_->size, "all_gather");
  state_->queue_all_gather(values, bounds, cuda::stream());
  state_->wait("all_gather");
}

// A started sum: the own stream waits for everything queued on wedge's stream so far,
// `queue` puts the exchange on it, and an event marks its end. The own scratch is made by
// the first start (a block the allocator hands out then had its last use queued on wedge's
// stream before the event) and never given back.
DeviceCommunicator::PendingSum DeviceCommunicator::start(const std::function<void(float*)>& queue) const {
  PendingSum p;
  p.state_ = std::make_unique<PendingSum::State>();
  if (!state_->own_scratch) state_->own_scratch = std::make_unique<Scratch>(state_->scratch_elements());
  const Event ready;
  cuda::check(cudaEventRecord(ready.get(), cuda::stream()), "recording an event");
  cuda::check(cudaStreamWaitEvent(state_->own, ready.get(), 0), "ordering the collectives' stream");
  queue(state_->own_scratch->get());
  cuda::check(cudaEventRecord(p.state_->done.get(), state_->own), "recording an event");
  return p;
}

DeviceCommunicator::PendingSum DeviceCommunicator::start_all_reduce_sum(float* values, std::size_t n) const {
  return start([&](float* scratch) { state_->queue_all_reduce(values, n, state_->own, scratch); });
}

DeviceCommunicator::PendingSum DeviceCommunicator::start_reduce_scatter_sum(float* values, std::size_t n,
                                                                            std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, n, state_->size, "reduce_scatter_sum");
  return start([&](float* scratch) { state_->queue_reduce_scatter(values, n, bounds, state_->own, scratch); });
}

void DeviceCommunicator::finish(PendingSum& pending) const {
  if (!pending.state_)
    throw std::logic_error("DeviceCommunicator::finish: this sum was never started (or finished already)");
  state_->wait(pending.state_->done.get(), "a started sum (NCCL)");
  cuda::check(cudaStreamWaitEvent(cuda::stream(), pending.state_->done.get(), 0), "ordering wedge's stream");
  pending.state_.reset();
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
struct DeviceCommunicator::PendingSum::State {};
DeviceCommunicator::PendingSum::PendingSum() = default;
DeviceCommunicator::PendingSum::PendingSum(PendingSum&&) noexcept = default;
DeviceCommunicator::PendingSum& DeviceCommunicator::PendingSum::operator=(PendingSum&&) noexcept = default;
DeviceCommunicator::PendingSum::~PendingSum() = default;
DeviceCommunicator::PendingSum DeviceCommunicator::start_all_reduce_sum(float*, std::size_t) const { return {}; }
DeviceCommunicator::PendingSum DeviceCommunicator::start_reduce_scatter_sum(float*, std::size_t,
                                                                            std::span<const std::size_t>) const {
  return {};
}
void DeviceCommunicator::finish(PendingSum&) const {}
DeviceCommunicator::PendingSum DeviceCommunicator::start(const std::function<void(float*)>&) const { return {}; }

#endif

}  // namespace wedge::dist
