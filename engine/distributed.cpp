#include "engine/distributed.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <thread>

#include <fmt/core.h>

#include "engine/device.h"
#include "engine/kernel_table.h"
#include "engine/shard_rounds.h"

#ifdef WEDGE_HAVE_MPI
// The C API only: the deprecated C++ bindings would come with their own warnings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace wedge::dist {

namespace {

// The first of the launchers' variables `names` that is set, as a number of at least
// `least`; `otherwise` when none is.
int launcher_variable(std::initializer_list<const char*> names, int least, int otherwise) {
  for (const char* name : names) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::max(least, std::atoi(v));
  }
  return otherwise;
}

// The job's size as the launcher wrote it into the environment, or 0 when none did.
int launcher_size() {
  if (const int size = launcher_variable({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, 0); size > 0) return size;
  // PMIx names the rank but not the size; the size is then MPI's to say.
  if (std::getenv("PMIX_RANK") != nullptr) return 1;
  return 0;
}

// Seconds a collective waits for the other ranks before it ends the job; 0 waits forever.
double g_timeout_s = 600;

bool valid_timeout(double seconds) { return std::isfinite(seconds) && seconds >= 0; }

// WEDGE_COMM_TIMEOUT, when set and not empty, replaces the default: a number of seconds,
// 0 or more.
void read_timeout_variable() {
  const char* text = std::getenv("WEDGE_COMM_TIMEOUT");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !valid_timeout(seconds))
    throw std::invalid_argument(fmt::format(
        "WEDGE_COMM_TIMEOUT is '{}': it must be a number of seconds, 0 or more (0 waits forever)", text));
  g_timeout_s = seconds;
}

#ifdef WEDGE_HAVE_MPI
bool g_mpi_started = false;
// A second communicator over the same ranks, for the all-gathers that complete started
// all-reduces (PendingSum): a rank starts each as soon as its reduce-scatter has arrived,
// so where they fall among the world's collectives differs from rank to rank. MPI matches
// collectives per communicator, so they need one of their own, where every rank starts
// them in one order: the order the sums were started.
MPI_Comm g_gather_comm = MPI_COMM_NULL;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(fmt::format("MPI: {} failed: {}", what, std::string(text, static_cast<std::size_t>(len))));
}

int checked_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::length_error(fmt::format("MPI: {} of {} elements exceeds one message's limit", what, n));
  return static_cast<int>(n);
}

template <typename T> MPI_Datatype mpi_type();
template <> MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

// A rank that has waited too long ends the job: one line on stderr, then MPI_Abort, which
// has the launcher end every rank (the one that hangs or was stopped included).
[[noreturn]] void give_up(const Communicator& comm, const char* collective, double waited_s) {
  fmt::print(stderr,
             "wedge: rank {} of {}: no answer from the other ranks within {:g} s in {} (a process died, hangs or was "
             "stopped); ending the job\n",
             comm.rank(), comm.size(), waited_s, collective);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; were it to, this rank still ends
}

// Waits for the nonblocking collective `request` under the timeout (Communicator::wait_until).
void wait_for(const Communicator& comm, MPI_Request& request, const char* collective) {
  comm.wait_until(
      [&] {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        return done != 0;
      },
      collective);
}

// Every collective runs this way: `start` begins it nonblocking (MPI_Ibcast, MPI_Iallgather,
// ...) with the request it is given, then wait_for() sees it through.
template <typename Start> void run_collective(const Communicator& comm, const char* collective, Start start) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(start(&request), collective);
  wait_for(comm, request, collective);
}

// out[i] <- the sum over the N slices of slice[i] (n values each, one after another in
// `slices`), in the tree order of Communicator::tree_mid: the CPU's tree_sum kernel
// (engine/kernels.def), the one summation of every collective that adds ranks' values and
// of the GPU's sums too (engine/nccl.h), so they all give the same bits. out may be the
// first slice.
template <typename T> void tree_sum(const T* slices, std::size_t n, std::size_t count, T* out) {
  const kernels::KernelTable<T>* cpu = kernels::kernel_table<T>(static_cast<int>(DeviceKind::CPU));
  if (cpu == nullptr || cpu->tree_sum == nullptr)
    throw std::logic_error("the collectives need the CPU kernels (link wedge::kernels)");
  cpu->tree_sum(slices, static_cast<std::int64_t>(n), static_cast<std::int64_t>(count), out);
}

// One round of a reduce-scatter: this rank's piece of every rank's shard, packed into
// `send`, goes to that rank, and every rank's copy of this rank's piece arrives in
// `received`, N slices one after another (MPI_Ialltoallv). Their sum lands at `first`,
// `count` elements of the values.
template <typename T> struct ScatterRound {
  std::vector<T> send, received;
  std::size_t first = 0, count = 0;
  MPI_Request request = MPI_REQUEST_NULL;
};

template <typename T>
void post_scatter_round(const Communicator& comm, const T* values, const ShardRounds& shards, std::size_t k,
                        ScatterRound<T>& round) {
  const auto me = static_cast<std::size_t>(comm.rank());
  const ShardRounds::Round r = shards.round(k);
  round.send.resize(shards.buffer_elements());
  round.received.resize(shards.buffer_elements());
  for (std::size_t s = 0; s < shards.ranks(); ++s)
    std::copy_n(values + r.first[s], r.counts[s], round.send.data() + r.packed_at[s]);
  round.first = r.first[me];
  round.count = static_cast<std::size_t>(r.counts[me]);
  // From every rank, my piece: counts[me] values each, slice q at q * counts[me].
  const std::vector<int> mine(shards.ranks(), r.counts[me]);
  std::vector<int> slice_at(shards.ranks());
  for (std::size_t q = 0; q < shards.ranks(); ++q) slice_at[q] = static_cast<int>(q) * r.counts[me];
  check(MPI_Ialltoallv(round.send.data(), r.counts.data(), r.packed_at.data(), mpi_type<T>(), round.received.data(),
                       mine.data(), slice_at.data(), mpi_type<T>(), MPI_COMM_WORLD, &round.request),
        "reduce_scatter_sum");
}

template <typename T> void finish_scatter_round(const Communicator& comm, ScatterRound<T>& round, T* values) {
  wait_for(comm, round.request, "reduce_scatter_sum");
  tree_sum(round.received.data(), round.count, static_cast<std::size_t>(comm.size()), values + round.first);
}

template <typename T>
void reduce_scatter_sum_impl(const Communicator& comm, std::span<T> values, std::span<const std::size_t> bounds) {
  const ShardRounds shards(bounds, piece_elements<T>(comm.size()));
  ScatterRound<T> round;  // its buffers serve every round in turn
  for (std::size_t k = 0; k < shards.rounds(); ++k) {
    post_scatter_round(comm, values.data(), shards, k, round);
    finish_scatter_round(comm, round, values.data());
  }
}

// One round of an all-gather: every rank's piece of its shard, sent straight from the
// values, lands packed in `gathered` (MPI_Iallgatherv); then the other ranks' pieces go to
// their places in the values.
template <typename T> struct GatherRound {
  std::vector<T> gathered;
  ShardRounds::Round layout;
  MPI_Request request = MPI_REQUEST_NULL;
};

template <typename T>
void post_gather_round(const Communicator& comm, MPI_Comm on, const T* values, const ShardRounds& shards, std::size_t k,
                       GatherRound<T>& round) {
  const auto me = static_cast<std::size_t>(comm.rank());
  round.layout = shards.round(k);
  round.gathered.resize(shards.buffer_elements());
  const ShardRounds::Round& r = round.layout;
  check(MPI_Iallgatherv(values + r.first[me], r.counts[me], mpi_type<T>(), round.gathered.data(), r.counts.data(),
                        r.packed_at.data(), mpi_type<T>(), on, &round.request),
        "all_gather");
}

template <typename T> void finish_gather_round(const Communicator& comm, GatherRound<T>& round, T* values) {
  wait_for(comm, round.request, "all_gather");
  const auto me = static_cast<std::size_t>(comm.rank());
  const ShardRounds::Round& r = round.layout;
  for (std::size_t s = 0; s < r.first.size(); ++s)
    if (s != me) std::copy_n(round.gathered.data() + r.packed_at[s], r.counts[s], values + r.first[s]);
}

template <typename T>
void all_gather_impl(const Communicator& comm, std::span<T> values, std::span<const std::size_t> bounds) {
  const ShardRounds shards(bounds, piece_elements<T>(comm.size()));
  GatherRound<T> round;  // its buffer serves every round in turn
  for (std::size_t k = 0; k < shards.rounds(); ++k) {
    post_gather_round(comm, MPI_COMM_WORLD, values.data(), shards, k, round);
    finish_gather_round(comm, round, values.data());
  }
}

// Two ranks: each gathers the other's values, bucket by bucket, and adds. More: a
// reduce-scatter over even shards, then an all-gather, so that a rank receives 2 (N - 1) / N
// of the values (a ring all-reduce's volume) instead of N - 1 copies; every element is
// still the tree-order sum of its N values, added by the rank that owns its shard.
template <typename T> void all_reduce_sum_impl(const Communicator& comm, std::span<T> values) {
  if (comm.size() > 2) {
    const std::vector<std::size_t> bounds = even_bounds(values.size(), comm.size());
    reduce_scatter_sum_impl(comm, values, bounds);
    all_gather_impl(comm, values, bounds);
    return;
  }
  const std::size_t bucket = piece_elements<T>(comm.size());
  std::vector<T> gathered(std::min(values.size(), bucket) * 2);
  for (std::size_t begin = 0; begin < values.size(); begin += bucket) {
    const std::size_t n = std::min(bucket, values.size() - begin);
    T* v = values.data() + begin;
    run_collective(comm, "all_reduce_sum", [&](MPI_Request* request) {
      const int count = static_cast<int>(n);
      return MPI_Iallgather(v, count, mpi_type<T>(), gathered.data(), count, mpi_type<T>(), MPI_COMM_WORLD, request);
    });
    tree_sum(gathered.data(), n, 2, v);
  }
}

// The exchanges of one start_all_reduce_sum, cut as all_reduce_sum cuts them: with two
// ranks, a gathered buffer and a request per bucket; with more, the reduce-scatter's rounds,
// then the all-gather's (PendingSum::State).
struct AsyncBucket {
  float* values = nullptr;
  std::size_t n = 0;
  std::vector<float> gathered;
  MPI_Request request = MPI_REQUEST_NULL;
};
#endif

}  // namespace

void check_shard_bounds(std::span<const std::size_t> bounds, std::size_t n_values, int n_ranks, const char* collective) {
  const auto expected = static_cast<std::size_t>(n_ranks) + 1;
  std::string problem;
  if (bounds.size() != expected)
    problem = fmt::format("there are {} offsets; there must be one per rank and one more, {}", bounds.size(), expected);
  else if (bounds.front() != 0)
    problem = fmt::format("they start at {}; they must start at 0", bounds.front());
  else if (bounds.back() != n_values)
    problem = fmt::format("they end at {}; they must end at values.size() = {}", bounds.back(), n_values);
  else if (auto at = std::adjacent_find(bounds.begin(), bounds.end(), [](std::size_t a, std::size_t b) { return a > b; });
           at != bounds.end())
    problem = fmt::format("they decrease: bounds[{}] = {} after bounds[{}] = {}", at - bounds.begin() + 1, at[1],
                          at - bounds.begin(), at[0]);
  if (!problem.empty()) throw std::invalid_argument(fmt::format("{}: bad shard bounds: {}", collective, problem));
}

bool mpi_built() {
#ifdef WEDGE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() { return launcher_size() > 0; }

int ranks_on_this_machine() { return launcher_variable({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1, 1); }

int launcher_rank() { return launcher_variable({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}, 0, 0); }

int local_rank() { return launcher_variable({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0, 0); }

namespace {
const Communicator* g_world = nullptr;
}

const Communicator* Communicator::started() { return g_world; }

Communicator& Communicator::world() {
  static Communicator* world = [] {
    const int launched = launcher_size();
    // Only a job under a launcher has collectives to time out. Read before MPI starts, so
    // that a malformed value is one error and no half-started job.
    if (launched > 0) read_timeout_variable();
#ifdef WEDGE_HAVE_MPI
    if (launched > 0) {
      // Only the main thread calls MPI; the thread pool's workers never do.
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      g_mpi_started = true;
      int rank = 0, size = 1;
      check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
      check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
      check(MPI_Comm_dup(MPI_COMM_WORLD, &g_gather_comm), "MPI_Comm_dup");
      return new Communicator(rank, size);
    }
#else
    if (launched > 1)
      throw std::runtime_error(fmt::format(
          "started by mpirun with {} processes, but this wedge was built without MPI: install libopenmpi-dev "
          "(tools/setup.sh does) and rebuild, or run one process",
          launched));
#endif
    return new Communicator(0, 1);
  }();
  g_world = world;
  return *world;
}

void Communicator::set_timeout(double seconds) {
  if (!valid_timeout(seconds))
    throw std::invalid_argument(
        fmt::format("communicator timeout of {} s: it must be 0 or more (0 waits forever)", seconds));
  g_timeout_s = seconds;
}

double Communicator::timeout() { return g_timeout_s; }

// MPI_Wait could not give up, so this polls: back to back for the first millisecond (the
// ranks of one step usually meet sooner), then with naps of 100 us growing to 1 ms, so that
// a rank waiting for a slow one (rank 0 writing a checkpoint) leaves its core to the
// others. The naps stay short because Open MPI moves a nonblocking collective on only
// inside MPI calls (here: the MPI_Test of `done`): a long nap would be a long stall.
void Communicator::wait_until(const std::function<bool()>& done, const char* collective) const {
  using Clock = std::chrono::steady_clock;
  constexpr auto kSpin = std::chrono::milliseconds(1);
  constexpr std::chrono::microseconds kLongestNap{1000};
  const double limit_s = timeout();
  const auto start = Clock::now();
  std::chrono::microseconds nap{100};
  while (!done()) {
    const std::chrono::duration<double> waited = Clock::now() - start;
    if (limit_s > 0 && waited.count() >= limit_s) {
#ifdef WEDGE_HAVE_MPI
      if (g_mpi_started) give_up(*this, collective, limit_s);
#endif
      throw std::runtime_error(fmt::format("{}: no answer within {:g} s", collective, limit_s));
    }
    if (waited < kSpin) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min(2 * nap, kLongestNap);
  }
}

void Communicator::finalize() {
#ifdef WEDGE_HAVE_MPI
  if (g_mpi_started) {
    g_mpi_started = false;
    if (g_gather_comm != MPI_COMM_NULL) MPI_Comm_free(&g_gather_comm);
    MPI_Finalize();
  }
#endif
}

void Communicator::barrier() const {
  if (!distributed()) return;
#ifdef WEDGE_HAVE_MPI
  run_collective(*this, "barrier", [](MPI_Request* request) { return MPI_Ibarrier(MPI_COMM_WORLD, request); });
#endif
}

void Communicator::broadcast(void* data, std::size_t bytes, int root) const {
  if (!distributed()) return;
#ifdef WEDGE_HAVE_MPI
  // In pieces of at most INT_MAX bytes: one MPI message counts its elements in an int.
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const int n = static_cast<int>(std::min<std::size_t>(bytes, INT_MAX));
    run_collective(*this, "broadcast",
                   [&](MPI_Request* request) { return MPI_Ibcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD, request); });
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
#endif
}

void Communicator::broadcast(std::string& text, int root) const {
  if (!distributed()) return;
  std::uint64_t n = text.size();
  broadcast(&n, sizeof n, root);
  text.resize(n);
  broadcast(text.data(), n, root);
}

std::vector<std::string> Communicator::all_gather(const std::string& bytes) const {
  if (!distributed()) return {bytes};
  std::vector<std::string> out(static_cast<std::size_t>(size_));
#ifdef WEDGE_HAVE_MPI
  long long mine = static_cast<long long>(bytes.size());
  std::vector<long long> lengths(out.size());
  run_collective(*this, "all_gather", [&](MPI_Request* request) {
    return MPI_Iallgather(&mine, 1, MPI_LONG_LONG, lengths.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD, request);
  });
  std::vector<int> counts(out.size()), displs(out.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < out.size(); ++r) {
    counts[r] = checked_int(static_cast<std::size_t>(lengths[r]), "all_gather");
    displs[r] = checked_int(total, "all_gather");
    total += static_cast<std::size_t>(lengths[r]);
  }
  checked_int(total, "all_gather");
  std::string all(total, '\0');
  run_collective(*this, "all_gather", [&](MPI_Request* request) {
    return MPI_Iallgatherv(bytes.data(), counts[static_cast<std::size_t>(rank_)], MPI_BYTE, all.data(), counts.data(),
                           displs.data(), MPI_BYTE, MPI_COMM_WORLD, request);
  });
  for (std::size_t r = 0; r < out.size(); ++r)
    out[r] = all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(counts[r]));
#endif
  return out;
}

void Communicator::all_reduce_sum(std::span<float> values) const {
#ifdef WEDGE_HAVE_MPI
  if (distributed()) all_reduce_sum_impl(*this, values);
#endif
}

void Communicator::all_reduce_sum(std::span<double> values) const {
#ifdef WEDGE_HAVE_MPI
  if (distributed()) all_reduce_sum_impl(*this, values);
#endif
}

struct Communicator::PendingSum::State {
#ifdef WEDGE_HAVE_MPI
  std::vector<AsyncBucket> buckets;  // two ranks
  // More ranks, or a reduce-scatter: its rounds over the shards `bounds` of `values`, and
  // whether an all-gather of the summed shards completes it (an all-reduce).
  std::span<float> values;
  std::vector<std::size_t> bounds;
  std::vector<ScatterRound<float>> rounds;
  bool gather = false;
  bool summed = false;  // the rounds have arrived and this rank's shard holds its sums
  std::vector<GatherRound<float>> gathers;  // posted on g_gather_comm once summed
  bool gathering = false;
  std::uint64_t gather_turn = 0;  // this all-gather's place in the order they start

  bool rounds_arrived() const {
    return std::all_of(rounds.begin(), rounds.end(), [](const ScatterRound<float>& r) { return r.request == MPI_REQUEST_NULL; });
  }
  void sum_rounds(const Communicator& comm) {
    if (summed) return;
    for (ScatterRound<float>& r : rounds) finish_scatter_round(comm, r, values.data());
    summed = true;
  }
  void start_gather(const Communicator& comm, std::uint64_t& gathers_started) {
    ++gathers_started;
    const ShardRounds shards(bounds, piece_elements<float>(comm.size()));
    gathers.resize(shards.rounds());
    for (std::size_t k = 0; k < shards.rounds(); ++k)
      post_gather_round(comm, g_gather_comm, values.data(), shards, k, gathers[k]);
    gathering = true;
  }
#endif
};

Communicator::PendingSum::PendingSum() = default;
Communicator::PendingSum::PendingSum(PendingSum&&) noexcept = default;
Communicator::PendingSum& Communicator::PendingSum::operator=(PendingSum&&) noexcept = default;
Communicator::PendingSum::~PendingSum() = default;

bool Communicator::PendingSum::all_gather_started() const {
#ifdef WEDGE_HAVE_MPI
  return state_ && state_->gathering;
#else
  return false;
#endif
}

Communicator::PendingSum Communicator::start_all_reduce_sum(std::span<float> values) const {
  PendingSum p;
  p.state_ = std::make_unique<PendingSum::State>();
#ifdef WEDGE_HAVE_MPI
  if (!distributed()) return p;
  if (size_ > 2) {
    p = start_reduce_scatter_sum(values, even_bounds(values.size(), size_));
    p.state_->gather = true;
    p.state_->gather_turn = gathers_numbered_++;
    return p;
  }
  const std::size_t bucket = piece_elements<float>(size_);
  for (std::size_t begin = 0; begin < values.size(); begin += bucket) {
    AsyncBucket& b = p.state_->buckets.emplace_back();
    b.values = values.data() + begin;
    b.n = std::min(bucket, values.size() - begin);
    b.gathered.resize(b.n * 2);
    const int count = static_cast<int>(b.n);
    check(MPI_Iallgather(b.values, count, MPI_FLOAT, b.gathered.data(), count, MPI_FLOAT, MPI_COMM_WORLD, &b.request),
          "all_reduce_sum");
  }
#endif
  return p;
}

Communicator::PendingSum Communicator::start_reduce_scatter_sum(std::span<float> values,
                                                                std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, values.size(), size_, "reduce_scatter_sum");
  PendingSum p;
  p.state_ = std::make_unique<PendingSum::State>();
#ifdef WEDGE_HAVE_MPI
  if (!distributed()) return p;
  PendingSum::State& st = *p.state_;
  st.values = values;
  st.bounds.assign(bounds.begin(), bounds.end());
  const ShardRounds shards(st.bounds, piece_elements<float>(size_));
  st.rounds.resize(shards.rounds());
  for (std::size_t k = 0; k < shards.rounds(); ++k) post_scatter_round(*this, values.data(), shards, k, st.rounds[k]);
#endif
  return p;
}

void Communicator::progress(std::span<PendingSum> pending) const {
#ifdef WEDGE_HAVE_MPI
  const auto test = [](MPI_Request& request) {
    if (request == MPI_REQUEST_NULL) return;  // done already
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  };
  for (PendingSum& p : pending) {
    if (!p.state_) continue;
    PendingSum::State& st = *p.state_;
    for (AsyncBucket& b : st.buckets) test(b.request);
    for (ScatterRound<float>& r : st.rounds) test(r.request);
    for (GatherRound<float>& g : st.gathers) test(g.request);
    // The all-gathers start in the order their sums did: this one when it is its turn.
    if (st.gather && !st.gathering && st.gather_turn == gathers_started_ && st.rounds_arrived()) {
      st.sum_rounds(*this);
      st.start_gather(*this, gathers_started_);
    }
  }
#endif
}

void Communicator::finish(PendingSum& pending) const {
  if (!pending.state_) throw std::logic_error("Communicator::finish: this sum was never started (or finished already)");
#ifdef WEDGE_HAVE_MPI
  PendingSum::State& st = *pending.state_;
  if (st.gather && !st.gathering && st.gather_turn != gathers_started_)
    throw std::logic_error(
        "Communicator::finish: an all-reduce started earlier has not started its all-gather yet; finish the sums in the "
        "order they were started");
  for (AsyncBucket& b : st.buckets) {
    wait_for(*this, b.request, "all_reduce_sum");
    tree_sum(b.gathered.data(), b.n, 2, b.values);
  }
  st.sum_rounds(*this);
  if (st.gather) {
    if (!st.gathering) st.start_gather(*this, gathers_started_);
    for (GatherRound<float>& g : st.gathers) finish_gather_round(*this, g, st.values.data());
  }
#endif
  pending.state_.reset();
}

void Communicator::reduce_scatter_sum(std::span<float> values, std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, values.size(), size_, "reduce_scatter_sum");
#ifdef WEDGE_HAVE_MPI
  if (distributed()) reduce_scatter_sum_impl(*this, values, bounds);
#endif
}

void Communicator::all_gather(std::span<float> values, std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, values.size(), size_, "all_gather");
#ifdef WEDGE_HAVE_MPI
  if (distributed()) all_gather_impl(*this, values, bounds);
#endif
}

void Communicator::all_gather(std::span<double> values, std::span<const std::size_t> bounds) const {
  check_shard_bounds(bounds, values.size(), size_, "all_gather");
#ifdef WEDGE_HAVE_MPI
  if (distributed()) all_gather_impl(*this, values, bounds);
#endif
}

}  // namespace wedge::dist
