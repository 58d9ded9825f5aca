// The step profiler: timed copies of the CPU kernel tables, generated from kernels.def.
#include "engine/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "engine/autograd.h"

namespace wedge::profile {

using kernels::KernelId;
using kernels::KernelTable;
using kernels::MemoryTable;

std::string_view kind_of(KernelId id) {
  switch (id) {
    case KernelId::gemm: return "GEMM";
    case KernelId::bias_act_backward: return "bias and GELU backward";
    case KernelId::fill:
    case KernelId::unary:
    case KernelId::unary_backward:
    case KernelId::binary: return "element-wise";
    case KernelId::reduce:
    case KernelId::sum_squares:
    case KernelId::tree_sum: return "reductions";
    case KernelId::softmax_forward:
    case KernelId::softmax_backward: return "softmax";
    case KernelId::cross_entropy_forward:
    case KernelId::cross_entropy_backward: return "cross-entropy";
    case KernelId::layer_norm_forward:
    case KernelId::layer_norm_backward:
    case KernelId::residual_layer_norm_forward:
    case KernelId::residual_layer_norm_backward: return "layer norm";
    case KernelId::embedding_forward:
    case KernelId::embedding_backward: return "embedding";
    case KernelId::dropout_forward:
    case KernelId::dropout_backward: return "dropout";
    case KernelId::attention_forward:
    case KernelId::attention_backward:
    case KernelId::attention_decode_forward: return "attention";
    case KernelId::plucker_forward:
    case KernelId::plucker_backward:
    case KernelId::plucker_mean_forward:
    case KernelId::plucker_mean_backward: return "Plücker";
    case KernelId::gate_mix_forward:
    case KernelId::gate_mix_backward: return "gate mix";
    case KernelId::selective_scan_forward:
    case KernelId::selective_scan_backward: return "selective scan";
    case KernelId::adam_update: return "AdamW update";
    case KernelId::strided_copy:
    case KernelId::cast: return "copies and casts";
  }
  return "other";
}

namespace {

thread_local const char* t_part = "";
thread_local bool t_backward = false;

std::atomic<bool> g_recording{false};
std::atomic<std::int64_t> g_packing_ns{0};
std::atomic<std::int64_t> g_allocation_ns{0};

enum Phase : int { kForward = 0, kBackward = 1, kOther = 2 };

Phase phase_now() {
  if (t_backward) return kBackward;
  return grad_enabled() ? kForward : kOther;
}

struct Cell {
  std::int64_t ns = 0, calls = 0, packing_ns = 0;
};

struct GemmKey {
  std::int64_t m, n, k, batch;
  int flags;
  const char* part;
  auto tie() const { return std::tie(m, n, k, batch, flags, part); }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};
enum GemmFlag : int { kTransA = 1, kTransB = 2, kBias = 4, kGelu = 8, kBf16 = 16 };

struct Records {
  std::mutex mutex;
  std::map<std::tuple<int, int, const char*>, Cell> kernels;  // (kernel, phase, part)
  std::map<GemmKey, Cell> gemms;
  void clear() {
    std::lock_guard<std::mutex> lock(mutex);
    kernels.clear();
    gemms.clear();
    g_packing_ns.store(0);
    g_allocation_ns.store(0);
  }
};
Records& records() {
  static Records r;
  return r;
}

void record(KernelId id, std::int64_t ns) {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  Cell& c = r.kernels[{static_cast<int>(id), phase_now(), t_part}];
  c.ns += ns;
  ++c.calls;
}

void record_gemm(std::int64_t ns, std::int64_t packing_ns, const kernels::GemmArgs<float>& g) {
  record(KernelId::gemm, ns);
  const int flags = (g.trans_a == kernels::Trans::T ? kTransA : 0) | (g.trans_b == kernels::Trans::T ? kTransB : 0) |
                    (g.bias != nullptr ? kBias : 0) | (g.act == kernels::Activation::Gelu ? kGelu : 0) |
                    (g.precision == kernels::Precision::BF16 ? kBf16 : 0);
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  Cell& c = r.gemms[GemmKey{g.m, g.n, g.k, g.batch, flags, t_part}];
  c.ns += ns;
  c.packing_ns += packing_ns;
  ++c.calls;
}

// The compiled tables the timed ones call through.
const KernelTable<float>* g_real_f32 = nullptr;
const MemoryTable* g_real_memory = nullptr;

template <typename Table>
const Table* real_table();
template <>
const KernelTable<float>* real_table() { return g_real_f32; }
template <>
const MemoryTable* real_table() { return g_real_memory; }

template <typename Member>
struct MemberOf;
template <typename Table, typename Fn>
struct MemberOf<Fn Table::*> {
  using table = Table;
  using fn = Fn;
};

// Timed<id, &Table::name>::call has the kernel's own signature: it calls the compiled
// kernel and records the wall time of the call.
template <KernelId id, auto Member, typename Fn = typename MemberOf<decltype(Member)>::fn>
struct Timed;
template <KernelId id, auto Member, typename... A>
struct Timed<id, Member, void (*)(A...)> {
  static void call(A... args) {
    using Table = typename MemberOf<decltype(Member)>::table;
    const auto kernel = real_table<Table>()->*Member;
    if (!g_recording.load(std::memory_order_relaxed)) return kernel(args...);
    // One kernel runs at a time (the ops call them from one thread), so the packing time
    // added during this call is this call's.
    const std::int64_t packing0 = g_packing_ns.load(std::memory_order_relaxed);
    const std::int64_t t0 = now_ns();
    kernel(args...);
    const std::int64_t ns = now_ns() - t0;
    if constexpr (id == KernelId::gemm) {
      record_gemm(ns, g_packing_ns.load(std::memory_order_relaxed) - packing0, args...);
    } else {
      record(id, ns);
    }
  }
};

KernelTable<float> g_timed_f32;
MemoryTable g_timed_memory;
std::atomic<bool> g_installed{false};

void build_timed_tables() {
  g_timed_f32 = KernelTable<float>{};
  g_timed_memory = MemoryTable{};
#define WEDGE_KERNEL(name, cpu, params) \
  if (g_real_f32->name != nullptr) g_timed_f32.name = &Timed<KernelId::name, &KernelTable<float>::name>::call;
#define WEDGE_MEMORY_KERNEL(name, params) \
  if (g_real_memory->name != nullptr) g_timed_memory.name = &Timed<KernelId::name, &MemoryTable::name>::call;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
}

constexpr int kCpu = 0;  // engine/device.h DeviceKind::CPU
const KernelTable<double>* g_real_f64 = nullptr;

double ms_of(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

void add_to(Row& row, int phase, const Cell& c) {
  (phase == kForward ? row.forward_ms : phase == kBackward ? row.backward_ms : row.other_ms) += ms_of(c.ns);
  row.calls += c.calls;
}

std::vector<Row> sorted(std::map<std::string, Row>& by_name) {
  std::vector<Row> rows;
  for (auto& [name, row] : by_name) {
    row.name = name;
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms() > b.ms(); });
  return rows;
}

}  // namespace

const char* current_part() { return t_part; }

Part::Part(const char* name) : previous_(t_part) { t_part = name; }
Part::~Part() { t_part = previous_; }

BackwardScope::BackwardScope(const char* part) : previous_part_(t_part), previous_backward_(t_backward) {
  t_part = part;
  t_backward = true;
}
BackwardScope::~BackwardScope() {
  t_part = previous_part_;
  t_backward = previous_backward_;
}

bool active() { return g_recording.load(std::memory_order_relaxed); }

void add_packing_ns(std::int64_t ns) {
  if (active()) g_packing_ns.fetch_add(ns, std::memory_order_relaxed);
}
void add_allocation_ns(std::int64_t ns) {
  if (active()) g_allocation_ns.fetch_add(ns, std::memory_order_relaxed);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Profiler::Profiler() {
  if (g_installed.exchange(true)) throw std::logic_error("profile::Profiler: another profiler is already recording");
  g_real_f32 = kernels::compiled_kernel_table(kCpu);
  g_real_memory = kernels::compiled_memory_table(kCpu);
  g_real_f64 = kernels::kernel_table<double>(kCpu);
  if (g_real_f32 == nullptr || g_real_memory == nullptr) {
    g_installed.store(false);
    throw std::runtime_error("profile::Profiler: no CPU kernel table is registered");
  }
  build_timed_tables();
  records().clear();
  kernels::register_tables(kCpu, &g_timed_f32, g_real_f64, &g_timed_memory);
  g_recording.store(true);
}

Profiler::~Profiler() {
  g_recording.store(false);
  kernels::register_tables(kCpu, g_real_f32, g_real_f64, g_real_memory);
  g_installed.store(false);
}

void Profiler::set_recording(bool on) { g_recording.store(on); }
void Profiler::reset() { records().clear(); }

Report Profiler::report() const {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  Report out;
  std::map<std::string, Row> kernels, kinds, parts, part_kinds;
  std::int64_t total_ns = 0;
  for (const auto& [key, cell] : r.kernels) {
    const auto [id, phase, part] = key;
    const auto kid = static_cast<KernelId>(id);
    add_to(kernels[std::string(kernels::kernel_name(kid))], phase, cell);
    add_to(kinds[std::string(kind_of(kid))], phase, cell);
    const std::string part_name = *part != '\0' ? part : "(unnamed)";
    add_to(parts[part_name], phase, cell);
    add_to(part_kinds[part_name + ": " + std::string(kind_of(kid))], phase, cell);
    total_ns += cell.ns;
  }
  out.kernels = sorted(kernels);
  out.kinds = sorted(kinds);
  out.parts = sorted(parts);
  out.part_kinds = sorted(part_kinds);
  // Groups whose part pointers differ but whose names agree are one group.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, std::string>, GemmGroup> groups;
  for (const auto& [key, cell] : r.gemms) {
    const std::string part = *key.part != '\0' ? key.part : "(unnamed)";
    GemmGroup& g = groups[{key.m, key.n, key.k, key.batch, key.flags, part}];
    g.m = key.m, g.n = key.n, g.k = key.k, g.batch = key.batch;
    g.trans_a = key.flags & kTransA, g.trans_b = key.flags & kTransB, g.bias = key.flags & kBias;
    g.gelu = key.flags & kGelu, g.bf16 = key.flags & kBf16;
    g.part = part;
    g.calls += cell.calls;
    g.ms += ms_of(cell.ns);
    g.packing_ms += ms_of(cell.packing_ns);
    g.flops += 2.0 * double(key.m) * double(key.n) * double(key.k) * double(key.batch) * double(cell.calls);
  }
  for (auto& [key, g] : groups) out.gemms.push_back(g);
  std::stable_sort(out.gemms.begin(), out.gemms.end(), [](const GemmGroup& a, const GemmGroup& b) { return a.ms > b.ms; });
  out.kernel_ms = ms_of(total_ns);
  out.packing_ms = ms_of(g_packing_ns.load());
  out.allocation_ms = ms_of(g_allocation_ns.load());
  return out;
}

}  // namespace wedge::profile
