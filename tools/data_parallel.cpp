#include "tools/data_parallel.h"

#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fmt/core.h>

#include "engine/autograd.h"
#include "engine/cuda_allocator.h"
#include "engine/nccl.h"
#include "engine/thread_pool.h"
#include "ops/ops.h"

namespace wedge::tools {

namespace {

// How a setting is named in an error: the flag, or the field of a resumed run's config.
std::string setting_name(const std::string& flag, const std::string& config_file) {
  if (config_file.empty()) return flag;
  std::string field = flag.substr(2);
  for (char& c : field)
    if (c == '-') c = '_';
  return config_file + ": train." + field;
}

// The sum of squares of n floats in double, always in the same order (eight interleaved
// partial sums, added pairwise): the same bits whoever computes it and however it is compiled.
double block_sum_squares(const float* x, std::size_t n) {
  double acc[8] = {};
  for (std::size_t i = 0; i < n; ++i) acc[i % 8] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The elements [at, at + numel) of a flat float32 tensor, seen in `shape` (no copy).
Tensor window(const Tensor& flat, std::size_t at, const Shape& shape) {
  return flat.as_strided(shape, contiguous_strides(shape), static_cast<std::int64_t>(at));
}

// `t` (any dtype, any device) into its window of `flat`.
void copy_into(const Tensor& flat, std::size_t at, const Tensor& t) {
  window(flat, at, t.shape()).copy_(t.dtype() == DType::F32 ? t : t.to(DType::F32));
}

// A packed copy of `like`'s window of `flat`, in `like`'s dtype and on its device.
Tensor window_like(const Tensor& flat, std::size_t at, const Tensor& like) {
  Tensor t = window(flat, at, like.shape()).clone();
  if (t.dtype() != like.dtype()) t = t.to(like.dtype());
  return t.device() == like.device() ? t : t.to(like.device());
}

// A float32 tensor on the CPU's data, as a span for the host collectives.
std::span<float> host_span(const Tensor& flat) {
  return {flat.data<float>(), static_cast<std::size_t>(flat.numel())};
}

// Adds the seconds from its making to its end to `total`.
class CommTimer {
 public:
  explicit CommTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~CommTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

PiecePlan PiecePlan::make(std::int64_t batch, std::int64_t micro_batch, bool deterministic, const dist::Communicator& comm,
                          const std::string& config_file) {
  const std::int64_t n = comm.size();
  const std::string batch_name = setting_name("--batch", config_file), micro_name = setting_name("--micro-batch", config_file);
  if (micro_batch < 0 || micro_batch > batch)
    throw std::invalid_argument(fmt::format("{} is {}; it must be at most {} ({}), or 0 for one piece per process",
                                            micro_name, micro_batch, batch_name, batch));
  if (deterministic && micro_batch == 0)
    throw std::invalid_argument(fmt::format(
        "{} needs {}: the rows whose gradient is computed as one piece must not depend on the number of processes",
        setting_name("--deterministic", config_file), micro_name));
  if (micro_batch == 0 && batch % n != 0)
    throw std::invalid_argument(fmt::format("{} is {}, not divisible by the {} processes of this run: each process takes an "
                                            "equal slice of every batch (--batch is the whole batch, over all processes)",
                                            batch_name, batch, n));
  PiecePlan p;
  p.rows_per_piece = micro_batch > 0 ? micro_batch : batch / n;
  if (batch % p.rows_per_piece != 0)
    throw std::invalid_argument(fmt::format("{} is {}, which does not divide {} ({}): every piece of a batch has the same rows",
                                            micro_name, micro_batch, batch_name, batch));
  p.pieces = batch / p.rows_per_piece;
  if (p.pieces % n != 0)
    throw std::invalid_argument(fmt::format("{} {} in pieces of {} {} makes {} pieces, which the {} processes of this run "
                                            "cannot share evenly",
                                            batch_name, batch, micro_name, micro_batch, p.pieces, n));
  if (deterministic && !std::has_single_bit(static_cast<std::uint64_t>(n)))
    throw std::invalid_argument(fmt::format("{} runs on 1, 2, 4, 8, ... processes (a power of two), not {}: only then is each "
                                            "process's run of pieces one subtree of the pieces' fixed sum",
                                            setting_name("--deterministic", config_file), n));
  p.first = comm.rank() * (p.pieces / n);
  p.last = p.first + p.pieces / n;
  return p;
}

GradientSync::GradientSync(const dist::Communicator& comm, std::vector<std::pair<std::string, Tensor>> params, Adam& opt,
                           bool deterministic, bool zero)
    : comm_(comm), opt_(opt), deterministic_(deterministic), zero_(zero && comm.distributed()) {
  std::size_t total = 0;
  for (auto& [name, p] : params) {
    names_.push_back(name);
    params_.push_back(p);
    total += static_cast<std::size_t>(p.numel());
  }
  if (static_cast<std::int64_t>(total) != opt.flat_size())
    throw std::logic_error("GradientSync: the parameters are not the optimizer's");
  // GPU ranks that mpirun started sum on their GPUs through NCCL, when this wedge has it
  // (with one rank too: the same calls, each rank its own peer).
  const bool on_gpu = !params_.empty() && params_.front().device().kind == DeviceKind::CUDA;
  if (on_gpu && dist::nccl_built() && dist::launched_by_mpi()) {
    gpu_comm_ = &dist::DeviceCommunicator::world();
    flat_device_ = params_.front().device();
  }
  flat_ = comm.distributed() || deterministic || gpu_comm_ != nullptr;
  // Shards of whole norm blocks, as even as blocks allow (the last block may be short).
  const std::size_t ranks = static_cast<std::size_t>(comm.size()), blocks = (total + kNormBlock - 1) / kNormBlock;
  for (std::size_t r = 0; r <= ranks; ++r) bounds_.push_back(std::min(total, r * blocks / ranks * kNormBlock));
  reached_.assign(params_.size(), 0.0f);
  if (zero_) opt_.keep_shard(shard_begin(), shard_end());
  // The overlap's buckets: runs of consecutive parameters of about kOverlapBucketBytes.
  const std::size_t target = kOverlapBucketBytes / sizeof(float);
  std::size_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto n = static_cast<std::size_t>(params_[i].numel());
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin + n > target) buckets_.push_back({i, i, at, at, 0});
    buckets_.back().end_param = i + 1;
    buckets_.back().end = at + n;
    bucket_of_.push_back(buckets_.size() - 1);
    param_index_[params_[i].impl_ptr().get()] = i;
    at += n;
  }
}

std::int64_t GradientSync::shard_begin() const { return static_cast<std::int64_t>(bounds_[static_cast<std::size_t>(comm_.rank())]); }
std::int64_t GradientSync::shard_end() const { return static_cast<std::int64_t>(bounds_[static_cast<std::size_t>(comm_.rank()) + 1]); }

std::string GradientSync::collectives() const {
  if (gpu_comm_ != nullptr) return gpu_comm_->library();
  return comm_.distributed() ? "MPI" : "";
}

double GradientSync::accumulate(std::int64_t first, std::int64_t last, const std::function<void(std::int64_t)>& run_piece) {
  if (!flat_) {
    // One process, pieces summed by autograd: nothing to lay out.
    for (std::int64_t k = first; k < last; ++k) run_piece(k);
    return grad_norm(params_);
  }
  std::fill(reached_.begin(), reached_.end(), 0.0f);
  // The sum over ranks overlaps the last piece's backward.
  const bool overlap = comm_.distributed();
  Tensor flat = overlap         ? overlapped_sum(first, last, run_piece)
                : deterministic_ ? tree_sum(first, last, run_piece)
                                 : gather_local(first, last, run_piece);
  {
    const CommTimer timer(comm_seconds_);
    comm_.all_reduce_sum(reached_);
    if (!overlap) {
      if (zero_)
        reduce_scatter(flat);
      else
        all_reduce(flat);
    }
  }
  set_gradients(flat);
  return global_norm(flat);
}

void GradientSync::all_reduce(const Tensor& flat) const {
  if (gpu_comm_ != nullptr)
    gpu_comm_->all_reduce_sum(flat.data<float>(), static_cast<std::size_t>(flat.numel()));
  else
    comm_.all_reduce_sum(host_span(flat));
}

void GradientSync::reduce_scatter(const Tensor& flat) const {
  if (gpu_comm_ != nullptr)
    gpu_comm_->reduce_scatter_sum(flat.data<float>(), static_cast<std::size_t>(flat.numel()), bounds_);
  else
    comm_.reduce_scatter_sum(host_span(flat), bounds_);
}

void GradientSync::all_gather(const Tensor& flat) const {
  if (gpu_comm_ != nullptr)
    gpu_comm_->all_gather(flat.data<float>(), static_cast<std::size_t>(flat.numel()), bounds_);
  else
    comm_.all_gather(host_span(flat), bounds_);
}

std::uint64_t GradientSync::bytes_received_per_step() const {
  if (!comm_.distributed()) return 0;
  const auto others = static_cast<std::uint64_t>(comm_.size() - 1);
  const auto mine = static_cast<std::uint64_t>(shard_end() - shard_begin());
  const std::uint64_t total = bounds_.back();
  // Two ranks gather each other's gradient; more reduce-scatter and all-gather it, as ZeRO-1
  // does (engine/distributed.h), over even shards that hold about as much as this rank's.
  return sizeof(float) * (zero_ || comm_.size() > 2 ? others * mine + (total - mine) : others * total);
}

Tensor GradientSync::gather_local(std::int64_t first, std::int64_t last, const std::function<void(std::int64_t)>& run_piece) {
  for (std::int64_t k = first; k < last; ++k) run_piece(k);
  return take_gradients();
}

// The pieces summed, and then over the ranks, the exchanges starting during the last
// piece's backward, bucket by bucket, last bucket first. The pieces before the last are
// summed by autograd as they come, or, in the fixed order, as the left halves along the
// tree's path down to the last piece: [lo, hi) = [lo, mid) + [mid, hi) with the last piece
// in [mid, hi), so the sum is left_1 + (left_2 + (... + (left_k + last))), and a bucket
// of the last piece completes its sum with k additions of the left halves' buckets.
Tensor GradientSync::overlapped_sum(std::int64_t first, std::int64_t last, const std::function<void(std::int64_t)>& run_piece) {
  lefts_.clear();
  if (deterministic_) {
    for (std::int64_t lo = first; last - lo > 1;) {
      const auto mid =
          static_cast<std::int64_t>(dist::Communicator::tree_mid(static_cast<std::size_t>(lo), static_cast<std::size_t>(last)));
      lefts_.push_back(tree_sum(lo, mid, run_piece));
      lo = mid;
    }
  } else {
    for (std::int64_t k = first; k + 1 < last; ++k) run_piece(k);
  }
  const Tensor flat = Tensor::zeros({static_cast<std::int64_t>(bounds_.back())}, DType::F32, flat_device_);
  for (Bucket& b : buckets_) b.waiting = b.end_param - b.first_param;
  next_bucket_ = buckets_.size();
  pending_.clear();
  pending_gpu_.clear();
  {
    const LeafGradientHook hook([&](const TensorImpl& leaf) {
      const auto it = param_index_.find(&leaf);
      if (it == param_index_.end()) return;  // not a parameter of this model
      const CommTimer timer(comm_seconds_);
      --buckets_[bucket_of_[it->second]].waiting;
      while (next_bucket_ > 0 && buckets_[next_bucket_ - 1].waiting == 0) bucket_ready(--next_bucket_, flat, true);
      if (gpu_comm_ == nullptr) comm_.progress(pending_);
    });
    run_piece(last - 1);
  }
  const CommTimer timer(comm_seconds_);
  // Buckets that the backward did not finish (parameters it never reached, a piece without
  // rows) go now, in the same order.
  while (next_bucket_ > 0) bucket_ready(--next_bucket_, flat, false);
  for (dist::Communicator::PendingSum& p : pending_) comm_.finish(p);
  for (dist::DeviceCommunicator::PendingSum& p : pending_gpu_) gpu_comm_->finish(p);
  pending_.clear();
  pending_gpu_.clear();
  lefts_.clear();
  for (Tensor& p : params_) p.zero_grad();
  return flat;
}

// Bucket b's gradients into their place in `flat` (zeros where a parameter has none), and
// their exchange started.
void GradientSync::bucket_ready(std::size_t b, const Tensor& flat, bool during_backward) {
  const Bucket& bucket = buckets_[b];
  std::size_t at = bucket.begin;
  for (std::size_t i = bucket.first_param; i < bucket.end_param; ++i) {
    const Tensor g = params_[i].grad();
    if (g.defined()) {
      copy_into(flat, at, g);
      reached_[i] = 1.0f;
    }
    at += static_cast<std::size_t>(params_[i].numel());
  }
  const std::size_t n = bucket.end - bucket.begin;
  const Shape shape{static_cast<std::int64_t>(n)};
  Tensor values = window(flat, bucket.begin, shape);
  {
    // The fixed order: the left halves along the path to the last piece, innermost first.
    NoGradGuard no_grad;
    for (auto left = lefts_.rbegin(); left != lefts_.rend(); ++left)
      values.copy_(ops::add(window(*left, bucket.begin, shape), values));
  }
  float* data = flat.data<float>() + bucket.begin;
  // ZeRO-1: each rank's shard of the bucket, the shards' bounds clipped to the bucket.
  std::vector<std::size_t> bounds;
  if (zero_)
    for (const std::size_t edge : bounds_) bounds.push_back(std::clamp(edge, bucket.begin, bucket.end) - bucket.begin);
  if (gpu_comm_ != nullptr)
    pending_gpu_.push_back(zero_ ? gpu_comm_->start_reduce_scatter_sum(data, n, bounds) : gpu_comm_->start_all_reduce_sum(data, n));
  else
    pending_.push_back(zero_ ? comm_.start_reduce_scatter_sum({data, n}, bounds) : comm_.start_all_reduce_sum({data, n}));
  sent_elements_ += static_cast<double>(n);
  if (during_backward) overlapped_elements_ += static_cast<double>(n);
}

// Pieces [lo, hi) summed as Communicator::tree_mid splits them: left half + right half.
Tensor GradientSync::tree_sum(std::int64_t lo, std::int64_t hi, const std::function<void(std::int64_t)>& run_piece) {
  if (hi - lo == 1) {
    run_piece(lo);
    return take_gradients();
  }
  const auto mid = static_cast<std::int64_t>(dist::Communicator::tree_mid(static_cast<std::size_t>(lo), static_cast<std::size_t>(hi)));
  const Tensor left = tree_sum(lo, mid, run_piece);
  const Tensor right = tree_sum(mid, hi, run_piece);
  NoGradGuard no_grad;
  return ops::add(left, right);
}

// The gradients laid end to end (zeros where a parameter has none) on the device the sums
// run on, then dropped from the parameters, so that the next piece's backward starts from
// nothing.
Tensor GradientSync::take_gradients() {
  const Tensor flat = Tensor::zeros({static_cast<std::int64_t>(bounds_.back())}, DType::F32, flat_device_);
  std::size_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (g.defined()) {
      copy_into(flat, at, g);
      reached_[i] = 1.0f;
    }
    params_[i].zero_grad();
    at += static_cast<std::size_t>(params_[i].numel());
  }
  return flat;
}

// A parameter that no piece of any rank reached keeps no gradient, as in one process, so the
// optimizer skips it (no weight decay either).
void GradientSync::set_gradients(const Tensor& flat) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (reached_[i] > 0) params_[i].set_grad(window_like(flat, at, params_[i]));
    at += static_cast<std::size_t>(params_[i].numel());
  }
}

// sqrt of the sum over blocks, in block order, of each block's sum of squares; each rank
// sums the blocks of its shard (of the gradient it holds summed), then all see all blocks.
double GradientSync::global_norm(const Tensor& flat) const {
  const std::size_t total = bounds_.back(), blocks = (total + kNormBlock - 1) / kNormBlock;
  std::vector<std::size_t> block_bounds;
  for (const std::size_t b : bounds_) block_bounds.push_back((b + kNormBlock - 1) / kNormBlock);
  std::vector<double> sums(blocks, 0.0);
  const auto r = static_cast<std::size_t>(comm_.rank());
  // This rank's shard on the host (a copy from the GPU where the sums ran there).
  const std::size_t begin = bounds_[r], end = bounds_[r + 1];
  Tensor shard;
  if (!flat.device().is_cpu()) shard = window(flat, begin, {static_cast<std::int64_t>(end - begin)}).to(Device::cpu());
  const float* values = shard.defined() ? shard.data<float>() : flat.data<float>() + begin;
  for (std::size_t b = block_bounds[r]; b < block_bounds[r + 1]; ++b) {
    const std::size_t from = b * kNormBlock;
    sums[b] = block_sum_squares(values + (from - begin), std::min(total, from + kNormBlock) - from);
  }
  {
    const CommTimer timer(comm_seconds_);
    comm_.all_gather(std::span<double>(sums), block_bounds);
  }
  double total_sum = 0;
  for (const double s : sums) total_sum += s;
  return std::sqrt(total_sum);
}

void GradientSync::share_updated_parameters() {
  if (!zero_) return;
  NoGradGuard no_grad;
  const Tensor flat = Tensor::empty({static_cast<std::int64_t>(bounds_.back())}, DType::F32, flat_device_);
  std::size_t at = 0;
  for (const Tensor& p : params_) {
    copy_into(flat, at, p);
    at += static_cast<std::size_t>(p.numel());
  }
  {
    const CommTimer timer(comm_seconds_);
    all_gather(flat);
  }
  at = 0;
  for (Tensor& p : params_) {
    p.copy_(window_like(flat, at, p));
    at += static_cast<std::size_t>(p.numel());
  }
}

std::map<std::string, Tensor> GradientSync::gather_moments() const {
  if (!zero_) return comm_.is_root() ? opt_.state_tensors() : std::map<std::string, Tensor>{};
  std::vector<float> m(bounds_.back(), 0.0f), v(bounds_.back(), 0.0f);
  opt_.export_moments(m, v);
  comm_.all_gather(std::span<float>(m), bounds_);
  comm_.all_gather(std::span<float>(v), bounds_);
  std::map<std::string, Tensor> out;
  if (!comm_.is_root()) return out;
  const std::int64_t n = static_cast<std::int64_t>(m.size());
  const Tensor flat_m = Tensor::from_vector(m, {n}), flat_v = Tensor::from_vector(v, {n});
  std::size_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out[names_[i] + ".adam_m"] = window(flat_m, at, params_[i].shape()).clone();
    out[names_[i] + ".adam_v"] = window(flat_v, at, params_[i].shape()).clone();
    at += static_cast<std::size_t>(params_[i].numel());
  }
  return out;
}

void GradientSync::scatter_moments(const std::map<std::string, Tensor>& on_root, std::int64_t step) {
  if (!comm_.distributed()) {
    opt_.load_state(on_root, step);
    return;
  }
  // Rank 0 checks and lays out the moments, as one process's optimizer would load them.
  std::vector<float> m(bounds_.back(), 0.0f), v(bounds_.back(), 0.0f);
  if (comm_.is_root()) opt_.flatten_state(on_root, m, v);
  comm_.broadcast(m.data(), m.size() * sizeof(float));
  comm_.broadcast(v.data(), v.size() * sizeof(float));
  opt_.import_moments(m, v, step);
}

void check_data_parallel_settings(std::int64_t micro_batch, int zero, double comm_timeout,
                                  const std::function<std::string(const char*)>& name) {
  if (micro_batch < 0)
    throw std::invalid_argument(fmt::format("{} is {}; it must be 0 (one piece per process) or at least 1", name("--micro-batch"), micro_batch));
  if (zero != 0 && zero != 1) throw std::invalid_argument(fmt::format("{} is {}; it must be 0 or 1", name("--zero"), zero));
  if (!(comm_timeout >= 0 || comm_timeout == -1))
    throw std::invalid_argument(fmt::format("{} is {}; it must be at least 0 (0: wait forever)", name("--comm-timeout"), comm_timeout));
}

void share_cores_among_ranks(const dist::Communicator& comm, int threads) {
  if (threads == 0 && comm.distributed() && std::getenv("WEDGE_NUM_THREADS") == nullptr && dist::ranks_on_this_machine() > 1)
    set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / dist::ranks_on_this_machine()));
}

void choose_gpu_of_rank(const dist::Communicator& comm, Device device) {
#ifdef WEDGE_HAVE_CUDA
  if (device.is_cuda() && comm.distributed() && dist::ranks_on_this_machine() > 1 && cuda::device_count() > 1)
    cuda::use_device(dist::local_rank() % cuda::device_count());
#else
  (void)comm;
  (void)device;
#endif
}

void broadcast_generator(const dist::Communicator& comm, Generator& gen) {
  std::array<std::uint64_t, 2> state{gen.seed(), gen.offset()};
  comm.broadcast(state.data(), sizeof state);
  gen.set_state(state[0], state[1]);
}

void broadcast_tensor(const dist::Communicator& comm, Tensor& t) {
  Tensor host = t.to(Device::cpu()).contiguous();
  comm.broadcast(host.raw_data(), static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype()));
  if (!comm.is_root() && !host.same(t)) t.copy_(host.to(t.device()));
}

std::string ranks_line(const dist::Communicator& comm, std::int64_t batch, Device device, const GradientSync& sync, bool zero) {
  return fmt::format("ranks: {} processes (MPI), each computing {} rows of every batch of {} on {}; gradients summed over "
                     "them before each update{}",
                     comm.size(), batch / comm.size(), batch,
                     device.is_cpu()                   ? fmt::format("{} thread{}", num_threads(), num_threads() == 1 ? "" : "s")
                     : sync.collectives() == "MPI" ? device.str() + " (through host memory)"
                                                   : fmt::format("{} ({})", device.str(), sync.collectives()),
                     zero ? fmt::format("; ZeRO-1: each keeps the optimizer state of {} of the {} parameters",
                                        sync.shard_end() - sync.shard_begin(), sync.flat_size())
                          : "");
}

std::string pieces_line(const PiecePlan& plan, bool deterministic) {
  return fmt::format("pieces: every batch in {} pieces of {} rows, {} per process, forward and backward one at a time; their "
                     "gradients summed {}",
                     plan.pieces, plan.rows_per_piece, plan.last - plan.first,
                     deterministic ? "in a fixed tree order (--deterministic: the same bits for 1, 2, 4, ... processes)"
                                   : "as they come");
}

bool on_any_rank(const dist::Communicator& comm, bool mine) {
  if (!comm.distributed()) return mine;
  double any = mine ? 1.0 : 0.0;
  comm.all_reduce_sum(std::span<double>(&any, 1));
  return any > 0;
}

void PieceDropout::piece(std::int64_t first_row, std::int64_t rows, std::int64_t batch_rows) {
  if (gen_ == nullptr) return;
  gen_->set_state(gen_->seed(), from_);
  gen_->set_batch_slice(static_cast<std::uint64_t>(first_row), static_cast<std::uint64_t>(rows),
                        static_cast<std::uint64_t>(batch_rows));
}

void PieceDropout::end_step(const dist::Communicator& comm, bool short_batch) {
  if (gen_ == nullptr) return;
  gen_->set_batch_slice(0, 1, 1);
  if (comm.distributed() && short_batch) broadcast_generator(comm, *gen_);
}

}  // namespace wedge::tools
