// The AVX-512 single-precision GEMM micro-kernel and its packers (compiled with
// -mavx512f and friends; only called after a run-time CPU check).
//
// Register tile: 14 rows x 32 columns of C = 28 zmm accumulators. Per step of k the
// kernel loads two vectors of the B panel (32 columns) and, for each of the 14 rows,
// broadcasts one element of the A panel into an FMA (the broadcast folds into the FMA's
// memory operand). That is 28 FMAs for 16 loads, which keeps both FMA ports busy on
// Skylake-X and later cores; 2 registers hold B and the rest is accumulators. Measured
// alternatives (12x32, 6x64, 8x48) run at the same in-cache speed; 14x32 has the
// smallest A-panel traffic per FMA among them.
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tile_avx512.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu {
namespace {

using avx512::first_lanes;
using avx512::transpose_block;

constexpr int kMr = kTileRows;
constexpr int kVectors = kTileVectors;
constexpr int kNr = kTileCols;

void sgemm_kernel_14x32(i64 kc, const float* __restrict ap, const float* __restrict bp, float* c,
                        i64 ldc, int m_valid, int n_valid, float alpha, float beta) {
  __m512 acc[kMr][kVectors];
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kVectors; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  // Ask for the C tile now so it is in cache by the time the epilogue reads/writes it.
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
    if (i < m_valid) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNr - 1), _MM_HINT_T0);
    }
  }
  // course 14 begin: the GEMM micro-kernel: a register tile of C, one broadcast FMA per row and vector per step of k (AVX-512 14 x 32; AVX2 6 x 16 on CPUs without AVX-512)
  for (i64 p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(bp);
    const __m512 b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      const __m512 a = _mm512_set1_ps(ap[i]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
    ap += kMr;
    bp += kNr;
  }
  // course 14 end

  store_tile(acc, c, ldc, m_valid, n_valid, alpha, beta);
}

// Packing is not overlapped with any arithmetic, and when it transposes it reads A or B
// in short runs (16 floats of 14 or 32 lines), too short for the hardware prefetcher to
// lock on. So while packing, each packer prefetches what it will read soon: for the
// transposing packers, the panel after next (+2 mr rows / +nr columns), into L2 where
// there is room for many requests in flight; and, when the caller says the data is
// small enough, the next k slice of the same lines, which is packed right after the
// current slice's arithmetic. Prefetches past the end of a matrix are harmless: they
// never fault.
inline void prefetch_l2(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
}

void pack_a_14(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 next_kc,
               float* out) {
  constexpr __mmask16 kPanelLanes = (1u << kMr) - 1u;
  const i64 panels = (rows + kMr - 1) / kMr;
  if (col_stride == 1) {
    // Rows of op(A) are contiguous in k: transpose 16-wide strips into k-major order,
    // panel by panel (each strip reads 14 rows front to back).
    for (i64 q = 0; q < panels; ++q) {
      const float* src = a + q * kMr * row_stride;
      const int lines = static_cast<int>(rows - q * kMr < kMr ? rows - q * kMr : kMr);
      float* panel = out + q * kMr * kc;
      for (i64 p = 0; p < kc; p += 16) {
        const int count = static_cast<int>(kc - p < 16 ? kc - p : 16);
        for (int i = 0; i < kMr; ++i) prefetch_l2(src + (2 * kMr + i) * row_stride + p);
        if (p < next_kc) {
          for (int i = 0; i < lines; ++i) prefetch_l2(src + i * row_stride + kc + p);
        }
        transpose_block(src + p, row_stride, lines, count, panel + p * kMr, kMr, kPanelLanes);
      }
    }
  } else {
    // op(A) = A^T: row p of the source holds the values for one k of every panel. Read
    // it once, front to back, dealing 14-float pieces to the panels.
    for (i64 p = 0; p < kc; ++p) {
      const float* src = a + p * col_stride;
      const float* ahead = rows_ahead(src, col_stride, rows, p, kc);
      if (p < next_kc) {
        for (i64 r = 0; r < rows; r += 16) prefetch_l2(src + kc * col_stride + r);
      }
      for (i64 q = 0; q < panels; ++q) {
        if (ahead != nullptr) prefetch_piece(ahead, q * kMr, kMr, rows, q + 1 == panels);
        _mm512_mask_storeu_ps(out + q * kMr * kc + p * kMr, kPanelLanes,
                              _mm512_maskz_loadu_ps(first_lanes(rows - q * kMr), src + q * kMr));
      }
    }
  }
}

void pack_b_32(const float* b, i64 row_stride, i64 col_stride, i64 kc, i64 next_kc, i64 cols,
               float* out) {
  const i64 panels = (cols + kNr - 1) / kNr;
  if (col_stride == 1) {
    // op(B) = B: row p of the source holds 32 floats for each panel; read it front to back.
    for (i64 p = 0; p < kc; ++p) {
      const float* src = b + p * row_stride;
      const float* ahead = rows_ahead(src, row_stride, cols, p, kc);
      if (p < next_kc) {
        for (i64 c = 0; c < cols; c += 16) prefetch_l2(src + kc * row_stride + c);
      }
      for (i64 q = 0; q < panels; ++q) {
        const i64 c = q * kNr;
        if (ahead != nullptr) prefetch_piece(ahead, c, kNr, cols, q + 1 == panels);
        float* dst = out + q * kNr * kc + p * kNr;
        _mm512_store_ps(dst, _mm512_maskz_loadu_ps(first_lanes(cols - c), src + c));
        _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(first_lanes(cols - c - 16), src + c + 16));
      }
    }
  } else {
    // op(B) = B^T: column c of op(B) is contiguous in k; transpose 16x16 blocks.
    for (i64 q = 0; q < panels; ++q) {
      const float* src = b + q * kNr * col_stride;
      const i64 lines = cols - q * kNr < kNr ? cols - q * kNr : kNr;
      float* panel = out + q * kNr * kc;
      for (i64 p = 0; p < kc; p += 16) {
        const int count = static_cast<int>(kc - p < 16 ? kc - p : 16);
        for (int c = 0; c < kNr; ++c) prefetch_l2(src + (kNr + c) * col_stride + p);
        if (p < next_kc) {
          for (int c = 0; c < lines; ++c) prefetch_l2(src + c * col_stride + kc + p);
        }
        for (int half = 0; half < kVectors; ++half) {
          const i64 half_lines = lines - 16 * half;
          transpose_block(src + p + 16 * half * col_stride, col_stride,
                          static_cast<int>(half_lines < 0 ? 0 : half_lines), count,
                          panel + p * kNr + 16 * half, kNr, 0xFFFF);
        }
      }
    }
  }
}

// The epilogue on a finished tile (still in L1): bias, then GELU keeping h in aux.
// GCC 12 at -O2 with both ASan and UBSan miscompiles the b[j] load below (every tile gets
// b[1] in both halves); the code is correct, and the sanitizer build compiles this file with
// -fno-ivopts. kernels/README.md ("Compiler notes") has the analysis and a reproduction.
void epilogue_14x32(float* c, i64 ldc, int m_valid, int n_valid, const float* bias, Activation act,
                    float* aux) {
  const __mmask16 mask[kVectors] = {first_lanes(n_valid), first_lanes(n_valid - 16)};
  __m512 b[kVectors];
  for (int j = 0; j < kVectors; ++j)
    b[j] = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[j], bias + 16 * j);
  for (int i = 0; i < m_valid; ++i) {
    for (int j = 0; j < kVectors; ++j) {
      if (mask[j] == 0) continue;
      float* at = c + i * ldc + 16 * j;
      __m512 h = _mm512_add_ps(_mm512_maskz_loadu_ps(mask[j], at), b[j]);
      if (act == Activation::Gelu) {
        _mm512_mask_storeu_ps(aux + i * ldc + 16 * j, mask[j], h);
        h = avx512::gelu(h);
      }
      _mm512_mask_storeu_ps(at, mask[j], h);
    }
  }
}

}  // namespace

const SgemmMicroKernel& sgemm_avx512_microkernel() {
  static const SgemmMicroKernel kernel{"avx512 14x32", kMr,       kNr,       1,         1,
                                       sgemm_kernel_14x32, pack_a_14, pack_b_32, epilogue_14x32};
  return kernel;
}

}  // namespace wedge::kernels::cpu
