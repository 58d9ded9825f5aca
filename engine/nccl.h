// The GPUs of a data-parallel job: the collectives of engine/distributed.h on float32
// device memory, through NCCL, so that GPU ranks sum their gradients GPU to GPU (NVLink,
// InfiniBand with GPUDirect) instead of through host memory and MPI.
//
// The ranks are those of Communicator::world(), which also bootstraps NCCL: rank 0 makes
// NCCL's unique id and MPI broadcasts it. Each rank joins on the GPU wedge uses, device 0
// of what CUDA_VISIBLE_DEVICES shows it (so one process per GPU, each shown its own).
//
// The sums are those of the host collectives, bit for bit: NCCL only moves the values (an
// all-gather, or point-to-point sends), and the CUDA tree_sum kernel (engine/kernels.def)
// adds the ranks' slices in Communicator::tree_mid's order. NCCL's own reductions would be
// faster for many ranks but add in an order of their own that changes with the number of
// ranks and the topology; wedge's "same bits for any N" needs the fixed one.
//
// Every call queues its work on wedge's CUDA stream, in order with the kernels around it,
// and returns when it is done on this GPU, waiting as the host collectives do: past
// Communicator::timeout() the job ends with one line naming the collective. The started
// sums (start_*, finish) run on a stream of their own instead, beside the backward pass.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace wedge::dist {

// Whether this build has the NCCL collectives (CUDA and MPI built in, and NCCL found with
// the CUDA toolkit when wedge was configured).
bool nccl_built();

class DeviceCommunicator {
 public:
  // The job's GPU communicator, made by the first call: every rank of world() must make it,
  // at the same point (it is a collective). Throws std::runtime_error naming what is
  // missing when NCCL is not built in or this process has no GPU.
  static DeviceCommunicator& world();

  int rank() const;
  int size() const;
  // "NCCL 2.28.9", the library this process runs.
  std::string library() const;

  // As Communicator's collectives of the same names (distributed.h), on n floats of device
  // memory at `values`: the same contracts, the same bits.
  void all_reduce_sum(float* values, std::size_t n) const;
  void reduce_scatter_sum(float* values, std::size_t n, std::span<const std::size_t> bounds) const;
  void all_gather(float* values, std::size_t n, std::span<const std::size_t> bounds) const;

  // all_reduce_sum and reduce_scatter_sum in two halves, as Communicator's start_* and
  // finish (distributed.h), so that a bucket of gradients travels and is added while the
  // backward pass computes the next. A start queues the exchange on this communicator's
  // own stream, after everything queued on wedge's stream so far (the bucket's gradients
  // included), and returns at once; `values` must stay allocated and untouched until
  // finish(), which waits for the exchange (under the timeout) and orders wedge's stream
  // after it. The bits are those of the calls above. Every rank starts the same sums in the
  // same order and finishes them in that order. The started sums share one scratch buffer
  // of kBucketBytes (they run one after another), made by the first. A PendingSum dropped
  // unfinished (an exception on the way) leaves its exchange running: the process must end.
  class PendingSum {
   public:
    PendingSum();
    PendingSum(PendingSum&&) noexcept;
    PendingSum& operator=(PendingSum&&) noexcept;
    ~PendingSum();

   private:
    friend class DeviceCommunicator;
    struct State;
    std::unique_ptr<State> state_;
  };
  PendingSum start_all_reduce_sum(float* values, std::size_t n) const;
  PendingSum start_reduce_scatter_sum(float* values, std::size_t n, std::span<const std::size_t> bounds) const;
  void finish(PendingSum& pending) const;

  ~DeviceCommunicator();
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

 private:
  DeviceCommunicator();
  // A started sum whose exchange `queue` puts on the own stream, with the own scratch.
  PendingSum start(const std::function<void(float*)>& queue) const;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace wedge::dist
