// The bf16 GEMM micro-kernel for AMX tiles (Sapphire Rapids and later Xeons), for
// Precision::BF16: compiled with -mamx-tile -mamx-bf16 on top of the AVX-512-BF16 flags,
// called only after a run-time check that the CPU has AMX and that Linux granted this
// process the tile state (amx_usable below).
//
// A tile register holds up to 16 rows of 64 bytes; tdpbf16ps multiplies a 16 x 16-slot A
// tile (16 rows, 32 values of k as 16 pairs) by a 16-slot x 16-column B tile (in the VNNI
// pair layout: row s holds the pairs (k = 2s, 2s + 1) of 16 columns) into a 16 x 16 fp32 C
// tile: 8,192 multiply-adds in one instruction. The register tile here is 32 x 32 of C:
// four C tiles, two A tiles and two B tiles, all eight tile registers; per 16 slots of
// depth, four loads feed four tile multiplies.
//
// Panels (the driver's, gemm.h) are a whole number of 16 slots deep (depth_multiple 16),
// the slots past the data zero:
//   A panel, 32 rows: per block of 16 slots, the 32 rows one after the other, 16 slots
//            each (row-major, so a tile loads rows 64 bytes apart);
//   B panel, 32 columns: k-major as for the AVX-512-BF16 kernel, panel[s * 32 + c], so the
//            tile of columns 0-15 starts at the block and that of 16-31 16 slots in, each
//            row 128 bytes apart.
// Rounding to bf16 happens while packing (pack_bf16_avx512.h), as in the AVX-512-BF16 kernel.
//
// The kernel is written once against a tile interface with two implementations: the AMX
// instructions, and a plain C++ model of the same instructions (the tile registers as
// thread-local arrays, tdpbf16ps as its documented operation: exact bf16 products summed
// into fp32 with round-to-nearest-even, denormals in and out flushed). The model runs the
// kernel, its panels and its edge handling on any CPU with AVX-512-BF16, so the tests check
// them against the reference where the hardware is missing; on an AMX CPU the hardware
// kernel is checked against the reference too (not against the model bit for bit: how the
// hardware rounds the sum of a pair's two products is its own).
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/pack_bf16_avx512.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/ref/bf16.h"

namespace wedge::kernels::cpu {
namespace {

constexpr int kMr = 32, kNr = 32;
constexpr int kTileSlots = 16;  // slots (k pairs) per tile step: 64 bytes per A row
constexpr i64 kABlockFloats = kMr * kTileSlots;
// Tile registers: C00 C01 C10 C11, then A0 A1 (rows 0-15, 16-31), B0 B1 (columns 0-15, 16-31).
enum : int { kC00 = 0, kC01 = 1, kC10 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };

// The tile configuration (ldtilecfg's 64-byte operand): palette 1, every tile 16 rows of
// 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

TileConfig full_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  return cfg;
}

// ---- the two tile implementations ---------------------------------------------------------------

struct HardwareTiles {
  static void configure() {
    // The configuration is thread state; load it once per thread.
    thread_local bool configured = false;
    if (!configured) {
      static const TileConfig cfg = full_tiles();
      _tile_loadconfig(&cfg);
      configured = true;
    }
  }
  // The intrinsics paste the tile number into the instruction's text, so each takes a
  // literal: one branch per tile the kernel uses.
  template <int T> static void zero() {
    static_assert(T >= kC00 && T <= kC11);
    if constexpr (T == kC00) _tile_zero(0);
    else if constexpr (T == kC01) _tile_zero(1);
    else if constexpr (T == kC10) _tile_zero(2);
    else _tile_zero(3);
  }
  template <int T> static void load(const void* p, i64 stride) {
    static_assert(T >= kA0 && T <= kB1);
    if constexpr (T == kA0) _tile_loadd(4, p, stride);
    else if constexpr (T == kA1) _tile_loadd(5, p, stride);
    else if constexpr (T == kB0) _tile_loadd(6, p, stride);
    else _tile_loadd(7, p, stride);
  }
  template <int T> static void store(void* p, i64 stride) {
    static_assert(T >= kC00 && T <= kC11);
    if constexpr (T == kC00) _tile_stored(0, p, stride);
    else if constexpr (T == kC01) _tile_stored(1, p, stride);
    else if constexpr (T == kC10) _tile_stored(2, p, stride);
    else _tile_stored(3, p, stride);
  }
  template <int C, int A, int B> static void dot() {
    static_assert(A == (C < kC10 ? kA0 : kA1) && B == (C % 2 == 0 ? kB0 : kB1), "the kernel's four products only");
    if constexpr (C == kC00) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == kC01) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == kC10) _tile_dpbf16ps(2, 5, 6);
    else _tile_dpbf16ps(3, 5, 7);
  }
};

// The instructions' semantics in plain C++ (16 rows x 64 bytes per tile, as configured).
struct EmulatedTiles {
  struct alignas(64) Registers {
    std::uint8_t bytes[8][16 * 64];
  };
  static Registers& regs() {
    thread_local Registers r;
    return r;
  }
  static void configure() {}
  template <int T> static void zero() { std::memset(regs().bytes[T], 0, sizeof regs().bytes[T]); }
  template <int T> static void load(const void* p, i64 stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(regs().bytes[T] + r * 64, static_cast<const char*>(p) + r * stride, 64);
  }
  template <int T> static void store(void* p, i64 stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(p) + r * stride, regs().bytes[T] + r * 64, 64);
  }
  // tdpbf16ps: for each row m, each pair k, each column n, C[m][n] += A[m][2k] B[k][2n],
  // then += A[m][2k+1] B[k][2n+1]: two fp32 additions of exact products; subnormal inputs
  // read as zero and subnormal results flush to zero.
  template <int C, int A, int B> static void dot() {
    Registers& t = regs();
    float c[16][16];
    std::uint16_t a[16][32], b[16][32];
    std::memcpy(c, t.bytes[C], sizeof c);
    std::memcpy(a, t.bytes[A], sizeof a);
    std::memcpy(b, t.bytes[B], sizeof b);
    auto value = [](std::uint16_t h) {
      return (h & 0x7f80u) == 0 ? 0.0f : ref::bf16_to_float(h);  // denormals are zero
    };
    auto flush = [](float x) {
      return (ref::float_bits(x) & 0x7f800000u) == 0 ? ref::float_from_bits(ref::float_bits(x) & 0x80000000u) : x;
    };
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 16; ++n) {
          c[m][n] = flush(c[m][n] + value(a[m][2 * k]) * value(b[k][2 * n]));
          c[m][n] = flush(c[m][n] + value(a[m][2 * k + 1]) * value(b[k][2 * n + 1]));
        }
    std::memcpy(t.bytes[C], c, sizeof c);
  }
};

// ---- the kernel ---------------------------------------------------------------------------------

template <typename Tiles>
void amx_kernel_32x32(i64 depth, const float* ap, const float* bp, float* c, i64 ldc, int m_valid, int n_valid,
                      float alpha, float beta) {
  Tiles::configure();
  Tiles::template zero<kC00>();
  Tiles::template zero<kC01>();
  Tiles::template zero<kC10>();
  Tiles::template zero<kC11>();
  constexpr i64 kARow = kTileSlots * 4;  // bytes between A rows in a block
  constexpr i64 kBRow = kNr * 4;         // bytes between B rows (slots) in a panel
  for (i64 s = 0; s < depth; s += kTileSlots) {
    const float* a_block = ap + (s / kTileSlots) * kABlockFloats;
    const float* b_block = bp + s * kNr;
    Tiles::template load<kA0>(a_block, kARow);
    Tiles::template load<kA1>(a_block + 16 * kTileSlots, kARow);
    Tiles::template load<kB0>(b_block, kBRow);
    Tiles::template load<kB1>(b_block + 16, kBRow);
    Tiles::template dot<kC00, kA0, kB0>();
    Tiles::template dot<kC01, kA0, kB1>();
    Tiles::template dot<kC10, kA1, kB0>();
    Tiles::template dot<kC11, kA1, kB1>();
  }
  alignas(64) float tile[kMr][kNr];
  Tiles::template store<kC00>(&tile[0][0], kNr * 4);
  Tiles::template store<kC01>(&tile[0][16], kNr * 4);
  Tiles::template store<kC10>(&tile[16][0], kNr * 4);
  Tiles::template store<kC11>(&tile[16][16], kNr * 4);
  // C = alpha * tile + beta * C on the valid corner (C not read when beta == 0).
  const __m512 valpha = _mm512_set1_ps(alpha), vbeta = _mm512_set1_ps(beta);
  for (int i = 0; i < m_valid; ++i) {
    for (int half = 0; half < 2; ++half) {
      const __mmask16 mask = avx512::first_lanes(n_valid - 16 * half);
      if (mask == 0) break;
      float* at = c + i * ldc + 16 * half;
      __m512 r = _mm512_mul_ps(_mm512_load_ps(&tile[i][16 * half]), valpha);
      if (beta != 0.0f) r = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mask, at), r);
      _mm512_mask_storeu_ps(at, mask, r);
    }
  }
}

// A panels: rows [0, rows) of op(A), 32 per panel, row-major blocks of 16 slots (above).
// Packed k-major first (the AVX-512-BF16 packers, 32 rows wide), then each 16 x 16 block
// of slots transposed into place.
void pack_a_amx(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 /*next_kc*/, float* out) {
  const i64 depth = ((kc + 1) / 2 + kTileSlots - 1) / kTileSlots * kTileSlots;
  alignas(64) float k_major[kMr * kTileSlots];
  for (i64 q = 0; q * kMr < rows; ++q) {
    const i64 lines = rows - q * kMr < kMr ? rows - q * kMr : kMr;
    float* panel = out + q * kMr * depth;
    for (i64 s = 0; s < depth; s += kTileSlots) {
      // 32 values of k (16 slots) of the panel's rows, k-major: k_major[slot * 32 + row]
      const i64 p0 = 2 * s, count = kc - p0 < 2 * kTileSlots ? (kc - p0 > 0 ? kc - p0 : 0) : 2 * kTileSlots;
      bf16::pack_k_major(a + q * kMr * row_stride + p0 * col_stride, row_stride, col_stride, lines, count, kMr,
                         kTileSlots, k_major);
      float* block = panel + (s / kTileSlots) * kABlockFloats;
      for (int half = 0; half < 2; ++half)
        avx512::transpose_block(k_major + 16 * half, kMr, kTileSlots, 16, block + 16 * half * kTileSlots, kTileSlots,
                                0xFFFF);
    }
  }
}

void pack_b_amx(const float* b, i64 row_stride, i64 col_stride, i64 kc, i64 /*next_kc*/, i64 cols, float* out) {
  const i64 depth = ((kc + 1) / 2 + kTileSlots - 1) / kTileSlots * kTileSlots;
  bf16::pack_k_major(b, col_stride, row_stride, cols, kc, kNr, depth, out);
}

}  // namespace

const SgemmMicroKernel& bf16_amx_microkernel() {
  static const SgemmMicroKernel kernel{"amx-bf16 32x32",   kMr,        kNr,        2, kTileSlots,
                                       amx_kernel_32x32<HardwareTiles>, pack_a_amx, pack_b_amx,
                                       sgemm_avx512_microkernel().epilogue};
  return kernel;
}

const SgemmMicroKernel& bf16_amx_emulated_microkernel() {
  static const SgemmMicroKernel kernel{"amx-bf16 32x32 (emulated tiles)", kMr,        kNr,        2, kTileSlots,
                                       amx_kernel_32x32<EmulatedTiles>,   pack_a_amx, pack_b_amx,
                                       sgemm_avx512_microkernel().epilogue};
  return kernel;
}

bool amx_usable() {
  static const bool yes = [] {
    if (!cpu_reports_amx_bf16() || !has_avx512_bf16()) return false;  // the packers need AVX-512-BF16
    // Linux (5.16+) hands out the 8 KB tile state only to processes that ask for it.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return yes;
}

}  // namespace wedge::kernels::cpu
