// The processes of one data-parallel job, and the few collectives training needs.
//
// A job is every process one `mpirun -np N ...` started: N ranks, numbered 0 .. N-1. A
// process started any other way is a job of one rank and never touches MPI, so a build with
// MPI behaves exactly like one without it until it is started by mpirun.
//
// The sums add with the CPU's tree_sum kernel (engine/kernels.def), so a program that uses
// them links wedge::kernels, as wedge::wedge does.
//
// Every collective here is called by every rank, in the same order; a rank that skips one
// leaves the others waiting, until the timeout below ends the job. All of them run on the
// calling (main) thread, as nonblocking MPI operations that it polls to their end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace wedge::dist {

// Whether this build can run under mpirun (it found MPI when it was configured).
bool mpi_built();

// Whether an MPI launcher started this process: its environment says how many ranks the job
// has (Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, MPICH's PMI_SIZE).
bool launched_by_mpi();

// How many ranks of the job share this machine, as the launcher says (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS); 1 when it does not say.
int ranks_on_this_machine();
// This process's place among them, 0 .. ranks_on_this_machine() - 1, as the launcher says
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID); 0 when it does not say.
int local_rank();
// This process's rank in the whole job as the launcher says (OMPI_COMM_WORLD_RANK,
// PMIX_RANK, PMI_RANK), known before MPI starts; 0 when no launcher says.
int launcher_rank();

class Communicator {
 public:
  // The job's communicator. Its first use initialises MPI when the process was launched by
  // mpirun; a build without MPI started by mpirun with more than one rank is an error (each
  // process would otherwise train alone, all on the same run folder).
  static Communicator& world();
  // The world if something has used it already, else null (never starts MPI).
  static const Communicator* started();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }

  void barrier() const;
  // Root's `bytes` bytes at `data` land at `data` on every rank.
  void broadcast(void* data, std::size_t bytes, int root = 0) const;
  // Root's string on every rank (the other ranks' strings are replaced, whatever their size).
  void broadcast(std::string& text, int root = 0) const;
  // Every rank's bytes, in rank order, on every rank (lengths may differ between ranks).
  std::vector<std::string> all_gather(const std::string& bytes) const;

  // The one order in which wedge adds N partial sums, over ranks and over a batch's
  // pieces alike: the range [lo, hi) splits at tree_mid(lo, hi) into [lo, mid) and
  // [mid, hi), each half is summed the same way, and the two are added, left + right.
  // N = 2: v0 + v1; N = 3: (v0 + v1) + v2; N = 4: (v0 + v1) + (v2 + v3). When N ranks each
  // hold a contiguous, equal run of the S pieces and N is a power of two dividing S, every
  // rank's run is one subtree, so summing locally and then over ranks gives the same bits
  // as summing all S pieces in one process.
  static std::size_t tree_mid(std::size_t lo, std::size_t hi) { return lo + (hi - lo + 1) / 2; }

  // values <- the sum over ranks of values, element by element.
  //
  // Deterministic: every element is added in the tree order above, by one rank, so the
  // result depends neither on timing nor on the network's reduction tree, and it is
  // bit-identical on every rank. With two ranks each gathers the other's values and adds;
  // with more, the ranks reduce-scatter even shards (each adds the N copies of its shard) and
  // then all-gather them, so each receives 2 (N - 1) / N of the values, a ring all-reduce's
  // volume, in two steps. The buffer goes through in buckets of at most kBucketBytes moved
  // at once (N slices of kBucketBytes / N), so a large model never needs N full copies of
  // its gradient.
  void all_reduce_sum(std::span<float> values) const;
  void all_reduce_sum(std::span<double> values) const;

  // all_reduce_sum in two halves, so that other work runs while the values travel (a
  // bucket of gradients, while the rest of the backward pass runs). start_all_reduce_sum
  // posts the exchange and returns at once; `values` must stay in place and untouched until
  // finish(). progress() lets MPI move posted exchanges along: Open MPI advances a
  // nonblocking collective only inside MPI calls, so a rank that computes between start
  // and finish should call it now and then. finish() waits (as every collective does, under
  // the timeout) and leaves in `values` exactly what all_reduce_sum would.
  // start_reduce_scatter_sum is the same for reduce_scatter_sum (below). Every rank starts
  // the same exchanges in the same order. Dropping a PendingSum that was never finished
  // (an exception on the way) leaves its exchange to MPI_Finalize or the job's end.
  //
  // With more than two ranks a started all-reduce is a reduce-scatter and then an
  // all-gather (as all_reduce_sum is), and the all-gather starts early too: progress()
  // starts it as soon as the reduce-scatter has arrived and every all-reduce started before
  // this one has started its all-gather; finish() starts it otherwise. So finish such sums in
  // the order they were started: finishing one whose turn has not come (an earlier one has
  // not started its all-gather) is std::logic_error, before anything waits.
  class PendingSum {
   public:
    PendingSum();
    PendingSum(PendingSum&&) noexcept;
    PendingSum& operator=(PendingSum&&) noexcept;
    ~PendingSum();
    // Whether the all-gather completing this all-reduce (more than two ranks) has started.
    bool all_gather_started() const;

   private:
    friend class Communicator;
    struct State;
    std::unique_ptr<State> state_;
  };
  PendingSum start_all_reduce_sum(std::span<float> values) const;
  PendingSum start_reduce_scatter_sum(std::span<float> values, std::span<const std::size_t> bounds) const;
  void progress(std::span<PendingSum> pending) const;
  void finish(PendingSum& pending) const;

  // Shards: `bounds` has size() + 1 non-decreasing offsets, bounds[0] = 0 and
  // bounds[size()] = values.size(), the same on every rank; rank r's shard is
  // [bounds[r], bounds[r + 1]) (it may be empty). Other bounds are std::invalid_argument.
  // Both collectives move the shards in rounds of at most kBucketBytes / N bytes of each
  // shard, packed into buffers of at most kBucketBytes (reduce_scatter_sum: one to send, one
  // to receive; all_gather: one to receive), so their memory stays bounded.
  //
  // reduce_scatter_sum: this rank's shard of values <- the sum over ranks of that shard,
  // bit for bit what all_reduce_sum gives there (same tree order); the rest of values is
  // left unspecified. Each rank receives N - 1 copies of its shard only.
  void reduce_scatter_sum(std::span<float> values, std::span<const std::size_t> bounds) const;
  // all_gather: every rank's shard of values, from that rank, lands on every rank (in place).
  void all_gather(std::span<float> values, std::span<const std::size_t> bounds) const;
  void all_gather(std::span<double> values, std::span<const std::size_t> bounds) const;

  // A collective that waits longer than this for the other ranks (a rank died, hangs or was
  // stopped) ends the job: this rank prints one line to stderr naming itself, the collective
  // and the time waited, then aborts every rank (MPI_Abort), so no process waits forever.
  // 0 waits forever. The default, 600 s, outlasts any one step or checkpoint of the models
  // wedge trains; the environment variable WEDGE_COMM_TIMEOUT (seconds, a number >= 0; any
  // other value is an error naming it) replaces it when world() first runs under a
  // launcher (a process that mpirun did not start ignores it), and set_timeout() after that
  // replaces both. A negative or non-finite timeout is std::invalid_argument.
  static void set_timeout(double seconds);
  static double timeout();
  // Calls `done` until it answers true, waiting as every collective here does: a few naps
  // of at most 1 ms between calls, and past the timeout the job ends as described above.
  // For collectives that run elsewhere (the GPU's, engine/nccl.h); `collective` names it
  // in that message.
  void wait_until(const std::function<bool()>& done, const char* collective) const;

  static constexpr std::size_t kBucketBytes = std::size_t{16} << 20;

  // Ends MPI after a successful run (a no-op when it never started). A failing rank exits
  // without it: the launcher then ends the whole job instead of leaving the other ranks
  // waiting in a collective.
  static void finalize();

 private:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank_ = 0;
  int size_ = 1;
  // Started all-reduces over more than two ranks, numbered as they start, and how many of
  // them have started their all-gathers: the next to start one is the one numbered so.
  mutable std::uint64_t gathers_numbered_ = 0, gathers_started_ = 0;
};

}  // namespace wedge::dist
