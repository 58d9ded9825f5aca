// One training step's gradient, from a batch's rows to the update, in one process or over
// the ranks of a data-parallel job (engine/distributed.h).
//
// The batch's rows are cut into pieces of `--micro-batch` rows (by default one piece per
// rank: its whole share). A rank runs forward and backward for its contiguous run of pieces,
// one at a time, so a large batch never needs more activation memory than one piece. Then:
//
//   1. The rank's pieces are summed: by autograd's own accumulation, piece after piece, or,
//      when deterministic, in the fixed tree order of Communicator::tree_mid over the
//      pieces, so the bits do not depend on which rank computed which piece.
//   2. The ranks' sums are summed (in the same tree order over ranks): every rank receives
//      the whole gradient, or with ZeRO stage 1 only its shard of it (a reduce-scatter).
//      The sums run where the gradients are laid out: on the host, through MPI, or, for GPU
//      ranks that mpirun started in a build with NCCL, on the GPU (engine/nccl.h).
//      The sum over ranks overlaps the last piece's backward (the pieces before it summed
//      already, as they come or as the fixed order's left halves): the parameters
//      form buckets of about kOverlapBucketBytes, and a bucket's exchange (its all-reduce,
//      or under ZeRO-1 its reduce-scatter) starts as soon as autograd has finished the
//      gradients of its parameters and of every bucket after it (engine/autograd.h
//      LeafGradientHook), last bucket first, so that every rank starts them in one order.
//      The bits are those of one collective over the whole gradient.
//   3. The gradient's global norm, for clipping, is summed in double over fixed blocks of
//      the gradient laid end to end, each rank taking the blocks of its shard.
//   4. AdamW updates the parameters; under ZeRO-1 each rank updates its shard only (and
//      keeps moments for it only, engine/optim.h) and then the ranks all-gather the
//      parameters.
//
// With a fixed --micro-batch, --deterministic gives bit-identical weights for any number of
// ranks N that is a power of two and divides the number of pieces: each rank's pieces are
// then one subtree of the pieces' sum. ZeRO-1 changes none of the bits: the reduce-scatter
// sums each element as the all-reduce does, the norm is summed over the same blocks, and
// AdamW is element-wise.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/distributed.h"
#include "engine/nccl.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/tensor.h"

namespace wedge::tools {

// How a batch of `batch` rows is cut into pieces and shared among the ranks.
struct PiecePlan {
  std::int64_t rows_per_piece = 0;
  std::int64_t pieces = 0;             // per batch
  std::int64_t first = 0, last = 0;    // this rank's pieces [first, last)

  // `micro_batch` 0: one piece per rank. Throws std::invalid_argument naming the flag (or
  // `config_file`'s field) when the batch does not cut evenly into pieces, the pieces not
  // evenly among the ranks, or (deterministic) the ranks are not a power of two.
  static PiecePlan make(std::int64_t batch, std::int64_t micro_batch, bool deterministic, const dist::Communicator& comm,
                        const std::string& config_file);
  // Rows [begin, end) of a batch of `rows` rows (an epoch's last batch may be short) in piece k.
  std::int64_t piece_begin(std::int64_t k, std::int64_t rows) const { return std::min(rows, k * rows_per_piece); }
  std::int64_t piece_end(std::int64_t k, std::int64_t rows) const { return std::min(rows, (k + 1) * rows_per_piece); }
};

class GradientSync {
 public:
  // `zero`: ZeRO stage 1 — shards `opt`'s moments over the ranks now (before any step or
  // resume); with one rank it changes nothing.
  // `params`: the optimizer's parameters, by name, in its order (Module::named_parameters()).
  GradientSync(const dist::Communicator& comm, std::vector<std::pair<std::string, Tensor>> params, Adam& opt,
               bool deterministic, bool zero);

  // Runs `run_piece(k)` (forward and backward of piece k, its loss already scaled by its
  // share of the batch) for this rank's pieces [first, last), sums the gradients over the
  // pieces and the ranks as the header says, and leaves the result (this rank's shard of it,
  // under ZeRO-1) in the parameters' gradients. Returns the global gradient norm.
  double accumulate(std::int64_t first, std::int64_t last, const std::function<void(std::int64_t)>& run_piece);
  // After the optimizer's step: under ZeRO-1 every rank's updated shard reaches every rank.
  void share_updated_parameters();

  // The full moments of the optimizer on rank 0 (for a checkpoint); every rank must call it.
  // Empty on the other ranks.
  std::map<std::string, Tensor> gather_moments() const;
  // Rank 0's full moments (read from a checkpoint; ignored elsewhere) and step count onto
  // every rank's optimizer, each keeping its shard.
  void scatter_moments(const std::map<std::string, Tensor>& on_root, std::int64_t step);

  // Seconds this rank spent in the collectives of accumulate() and
  // share_updated_parameters() since it was made (waiting for slower ranks included).
  double comm_seconds() const { return comm_seconds_; }
  // Bytes each rank receives per step in those collectives: with two ranks, the other's
  // float32 gradient (the all-reduce gathers it); with more, or under ZeRO-1, N - 1 copies of
  // its shard of the gradient plus every other rank's shard (of the summed gradient, or of
  // the updated parameters), about 2 (N - 1) / N of the gradient. (The norm's block sums and
  // the "reached" flags add well under 1 %.)
  std::uint64_t bytes_received_per_step() const;

  // Of the gradient elements sent so far, the share whose exchange started while the
  // backward pass still ran (0 when nothing overlaps).
  double overlap_share() const { return sent_elements_ > 0 ? overlapped_elements_ / sent_elements_ : 0.0; }

  // Elements laid end to end, and this rank's shard of them (all of them without ZeRO-1).
  std::int64_t flat_size() const { return static_cast<std::int64_t>(bounds_.back()); }
  std::int64_t shard_begin() const;
  std::int64_t shard_end() const;

  // What carries the gradients between the ranks: "NCCL 2.28.9" (GPU ranks started by
  // mpirun, in a build with NCCL; then with one rank too), "MPI" (through host memory), or
  // "" (one process, nothing to carry).
  std::string collectives() const;

  // The block of the gradient norm's sums; shards start at multiples of it.
  static constexpr std::size_t kNormBlock = 1024;
  // The size the overlap's buckets aim at (a parameter larger than this is a bucket alone).
  static constexpr std::size_t kOverlapBucketBytes = std::size_t{4} << 20;

 private:
  // The flat gradients are float32 tensors on flat_device_ (the host, or this rank's GPU
  // when NCCL sums them).
  Tensor gather_local(std::int64_t first, std::int64_t last, const std::function<void(std::int64_t)>& run_piece);
  Tensor tree_sum(std::int64_t lo, std::int64_t hi, const std::function<void(std::int64_t)>& run_piece);
  Tensor take_gradients();
  void set_gradients(const Tensor& flat);
  Tensor overlapped_sum(std::int64_t first, std::int64_t last, const std::function<void(std::int64_t)>& run_piece);
  void bucket_ready(std::size_t b, const Tensor& flat, bool during_backward);
  double global_norm(const Tensor& flat) const;
  // The collectives on a flat gradient, through NCCL or MPI (host memory).
  void all_reduce(const Tensor& flat) const;
  void reduce_scatter(const Tensor& flat) const;
  void all_gather(const Tensor& flat) const;

  const dist::Communicator& comm_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  Adam& opt_;
  bool deterministic_, zero_;
  bool flat_;  // a step lays the gradient out end to end (several processes, the fixed order, NCCL)
  dist::DeviceCommunicator* gpu_comm_ = nullptr;  // NCCL, for GPU ranks started by mpirun
  Device flat_device_ = Device::cpu();
  std::vector<std::size_t> bounds_;      // N + 1 shard edges over the flat layout
  std::vector<float> reached_;           // per parameter: did any piece reach it (1) or not (0)
  mutable double comm_seconds_ = 0;
  // The overlap: consecutive parameters [first_param, end_param), elements [begin, end).
  struct Bucket {
    std::size_t first_param = 0, end_param = 0, begin = 0, end = 0;
    std::size_t waiting = 0;  // parameters whose gradient is not final yet
  };
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::unordered_map<const TensorImpl*, std::size_t> param_index_;
  std::vector<dist::Communicator::PendingSum> pending_;          // through MPI
  std::vector<dist::DeviceCommunicator::PendingSum> pending_gpu_;  // through NCCL
  std::vector<Tensor> lefts_;  // the fixed order's left halves before the last piece, outermost first
  std::size_t next_bucket_ = 0;  // buckets [next_bucket_, end) have started; next_bucket_ - 1 goes next
  double sent_elements_ = 0, overlapped_elements_ = 0;  // global_norm is const but times its gather
};

// ---- What every data-parallel training loop does around GradientSync ------------------
// (the language models' tools/trainer.h and the sentence-pair task's tools/nli_task.h)

// --micro-batch (0 or more), --zero (0 or 1) and --comm-timeout (0 or more, or -1: unset),
// or std::invalid_argument naming the setting as `name` gives it.
void check_data_parallel_settings(std::int64_t micro_batch, int zero, double comm_timeout,
                                  const std::function<std::string(const char*)>& name);

// "All cores" for each of several ranks on one machine would put k ranks x all cores on its
// cores: without --threads (`threads` 0) or WEDGE_NUM_THREADS each rank takes its share.
void share_cores_among_ranks(const dist::Communicator& comm, int threads);

// GPU ranks sharing a machine that shows each of them several GPUs: the k-th rank of the
// machine takes its k-th GPU (modulo their number), as if each had been shown its own.
void choose_gpu_of_rank(const dist::Communicator& comm, Device device);

// A random stream's state (seed and offset) from rank 0 on every rank.
void broadcast_generator(const dist::Communicator& comm, Generator& gen);

// A tensor's values from rank 0 on every rank (in place).
void broadcast_tensor(const dist::Communicator& comm, Tensor& t);

// The startup line of a run on several ranks: how many, how many rows of each batch of
// `batch` each computes, on which device, how the gradients travel, and ZeRO-1's shards.
std::string ranks_line(const dist::Communicator& comm, std::int64_t batch, Device device, const GradientSync& sync, bool zero);

// The startup line of a run whose batches go in several pieces per process, or in the
// fixed order: how many pieces of how many rows, and how their gradients are summed.
std::string pieces_line(const PiecePlan& plan, bool deterministic);

// Whether any rank says yes (every rank must ask, at the same point): the ranks stop
// together when a Ctrl-C reached one of them.
bool on_any_rank(const dist::Communicator& comm, bool mine);

// The dropout masks of a batch cut into pieces: each piece draws what the whole batch, in
// one forward pass, would draw for its rows (Generator::set_batch_slice), so the pieces and
// ranks change no mask. A piece's tensors must keep the whole batch's shape but for its
// leading (row) axis. Does nothing without a generator or with one piece per batch.
class PieceDropout {
 public:
  PieceDropout(Generator* generator, std::int64_t pieces) : gen_(pieces > 1 ? generator : nullptr) {}
  // Before a step's first piece.
  void begin_step() { from_ = gen_ != nullptr ? gen_->offset() : 0; }
  // Before the forward pass of rows [first_row, first_row + rows) of a batch of batch_rows.
  void piece(std::int64_t first_row, std::int64_t rows, std::int64_t batch_rows);
  // After the step: the stream moves past the whole batch's draw on every rank. A rank
  // whose pieces had no rows (`short_batch`: an epoch's last batch) drew nothing and takes
  // rank 0's state, which always had rows (every rank calls it, at the same point).
  void end_step(const dist::Communicator& comm, bool short_batch);

 private:
  Generator* gen_;
  std::uint64_t from_ = 0;
};

}  // namespace wedge::tools
