#include "engine/distributed.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/core.h>

#ifdef WEDGE_HAVE_MPI
// The C API only: the deprecated C++ bindings would come with their own warnings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace wedge::dist {

namespace {

// The job's size as the launcher wrote it into the environment, or 0 when none did.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::max(1, std::atoi(v));
  }
  // PMIx names the rank but not the size; the size is then MPI's to say.
  if (std::getenv("PMIX_RANK") != nullptr) return 1;
  return 0;
}

#ifdef WEDGE_HAVE_MPI
bool g_mpi_started = false;

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
#endif

}  // namespace

bool mpi_built() {
#ifdef WEDGE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() { return launcher_size() > 0; }

int ranks_on_this_machine() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::max(1, std::atoi(v));
  }
  return 1;
}

namespace {
const Communicator* g_world = nullptr;
}

const Communicator* Communicator::started() { return g_world; }

Communicator& Communicator::world() {
  static Communicator* world = [] {
    const int launched = launcher_size();
#ifdef WEDGE_HAVE_MPI
    if (launched > 0) {
      // Only the main thread calls MPI; the thread pool's workers never do.
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      g_mpi_started = true;
      int rank = 0, size = 1;
      check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
      check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
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

void Communicator::finalize() {
#ifdef WEDGE_HAVE_MPI
  if (g_mpi_started) {
    g_mpi_started = false;
    MPI_Finalize();
  }
#endif
}

void Communicator::barrier() const {
#ifdef WEDGE_HAVE_MPI
  if (distributed()) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
#endif
}

void Communicator::broadcast(void* data, std::size_t bytes, int root) const {
  if (!distributed()) return;
#ifdef WEDGE_HAVE_MPI
  // In pieces of at most INT_MAX bytes: one MPI message counts its elements in an int.
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const std::size_t n = std::min<std::size_t>(bytes, INT_MAX);
    check(MPI_Bcast(p, static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    p += n;
    bytes -= n;
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
  check(MPI_Allgather(&mine, 1, MPI_LONG_LONG, lengths.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> counts(out.size()), displs(out.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < out.size(); ++r) {
    counts[r] = checked_int(static_cast<std::size_t>(lengths[r]), "all_gather");
    displs[r] = checked_int(total, "all_gather");
    total += static_cast<std::size_t>(lengths[r]);
  }
  checked_int(total, "all_gather");
  std::string all(total, '\0');
  check(MPI_Allgatherv(bytes.data(), counts[static_cast<std::size_t>(rank_)], MPI_BYTE, all.data(), counts.data(),
                       displs.data(), MPI_BYTE, MPI_COMM_WORLD),
        "MPI_Allgatherv");
  for (std::size_t r = 0; r < out.size(); ++r)
    out[r] = all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(counts[r]));
#endif
  return out;
}

template <typename T> void Communicator::all_reduce_sum_impl(std::span<T> values) const {
  if (!distributed() || values.empty()) return;
#ifdef WEDGE_HAVE_MPI
  const auto n_ranks = static_cast<std::size_t>(size_);
  const std::size_t bucket = std::max<std::size_t>(1, kBucketBytes / (sizeof(T) * n_ranks));
  std::vector<T> gathered(std::min(values.size(), bucket) * n_ranks);
  for (std::size_t begin = 0; begin < values.size(); begin += bucket) {
    const std::size_t n = std::min(bucket, values.size() - begin);
    T* v = values.data() + begin;
    const int count = checked_int(n, "all_reduce_sum");
    check(MPI_Allgather(v, count, mpi_type<T>(), gathered.data(), count, mpi_type<T>(), MPI_COMM_WORLD), "MPI_Allgather");
    // Rank order, the same on every rank: v = ((g0 + g1) + g2) + ...
    std::copy_n(gathered.data(), n, v);
    for (std::size_t r = 1; r < n_ranks; ++r) {
      const T* g = gathered.data() + r * n;
      for (std::size_t i = 0; i < n; ++i) v[i] += g[i];
    }
  }
#endif
}

void Communicator::all_reduce_sum(std::span<float> values) const { all_reduce_sum_impl(values); }
void Communicator::all_reduce_sum(std::span<double> values) const { all_reduce_sum_impl(values); }

}  // namespace wedge::dist
