// The CUDA kernels' launch-shape arithmetic (kernels/cuda/launch.h), on the host: grid
// and block sizes, reduction splits, layout collapsing, the row-major to column-major
// GEMM mapping handed to cuBLAS and cuBLASLt (bias included), the Adam chunks, Plücker
// pair numbering and attention tile sizes.
#include <doctest/doctest.h>

#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/launch.h"

using namespace wedge::kernels;
using namespace wedge::kernels::cuda_launch;

TEST_CASE("cuda launch: element-wise grids and row block sizes") {
  CHECK(ceil_div(1, 256) == 1);
  CHECK(ceil_div(256, 256) == 1);
  CHECK(ceil_div(257, 256) == 2);
  CHECK(round_up(33, 32) == 64);

  CHECK(elementwise_blocks(1) == 1);
  CHECK(elementwise_blocks(257) == 2);
  CHECK(elementwise_blocks(i64(1) << 40) == kMaxElementwiseBlocks);  // grid-stride beyond

  CHECK(row_threads(1) == 32);
  CHECK(row_threads(256) == 32);   // the model width: one warp, 8 elements per lane
  CHECK(row_threads(257) == 64);
  CHECK(row_threads(1000) == 128);
  CHECK(row_threads(30522) == 1024);  // a vocabulary row
  for (i64 n = 1; n < 100000; n = n * 3 + 1) {
    const int t = row_threads(n);
    CHECK((t & (t - 1)) == 0);  // a power of two: the block reductions assume whole warps
    CHECK(t >= 32);
    CHECK(t <= 1024);
    CHECK((t == 1024 || i64(t) * 8 >= n));
  }
}

TEST_CASE("cuda launch: reduction splits cover the axis exactly and depend on the shape only") {
  // A bias gradient, (4096 rows, 256 columns): 8 column tiles, so the rows are split.
  SplitPlan bias = plan_splits(4096, 8, kColumnReduceMinChunk);
  CHECK(bias.splits == 64);
  CHECK(bias.chunk == 64);
  // Plenty of independent blocks already: no split.
  CHECK(plan_splits(30522, 4096, kRowReduceMinChunk).splits == 1);
  // Short axis: no split.
  CHECK(plan_splits(100, 1, kRowReduceMinChunk).splits == 1);
  CHECK(plan_splits(0, 1, kRowReduceMinChunk).splits == 1);

  for (i64 n : {i64(1), i64(63), i64(64), i64(65), i64(4097), i64(100003), i64(3000017)}) {
    for (i64 blocks : {i64(1), i64(3), i64(100), i64(2000)}) {
      for (i64 min_chunk : {kColumnReduceMinChunk, kRowReduceMinChunk}) {
        const SplitPlan p = plan_splits(n, blocks, min_chunk);
        CAPTURE(n);
        CAPTURE(blocks);
        CHECK(p.splits >= 1);
        CHECK(p.splits <= kReduceMaxSplits);
        CHECK(p.splits * p.chunk >= n);          // every element in some chunk
        CHECK((p.splits - 1) * p.chunk < n);     // and no chunk empty
        if (p.splits > 1) CHECK(p.chunk * 2 >= min_chunk);  // chunks are never tiny
      }
    }
  }
}

namespace {

// Every (offset_0, offset_1) pair of an index space, in row-major order: the plain
// odometer, independent of coalesce.
std::vector<std::pair<i64, i64>> walk(int ndim, const i64* shape, const i64* s0, const i64* s1) {
  std::vector<std::pair<i64, i64>> out;
  i64 size = 1;
  for (int d = 0; d < ndim; ++d) size *= shape[d];
  for (i64 linear = 0; linear < size; ++linear) {
    i64 rest = linear, o0 = 0, o1 = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const i64 c = rest % shape[d];
      rest /= shape[d];
      o0 += c * s0[d];
      o1 += c * s1[d];
    }
    out.emplace_back(o0, o1);
  }
  return out;
}

}  // namespace

TEST_CASE("coalescing a layout keeps every offset pair and their order") {
  // contiguous 3-d: one dimension
  BroadcastLayout contiguous{};
  contiguous.ndim = 3;
  const i64 shape[] = {4, 5, 6}, strides[] = {30, 6, 1};
  for (int d = 0; d < 3; ++d) {
    contiguous.shape[d] = shape[d];
    contiguous.stride_a[d] = strides[d];
    contiguous.stride_b[d] = strides[d];
  }
  BroadcastLayout c = coalesce(contiguous);
  CHECK(c.ndim == 1);
  CHECK(c.shape[0] == 120);
  CHECK(c.stride_a[0] == 1);

  // a row broadcast over (rows, D): stays 2-d
  BroadcastLayout bias{};
  bias.ndim = 2;
  bias.shape[0] = 4096; bias.shape[1] = 256;
  bias.stride_a[0] = 256; bias.stride_a[1] = 1;
  bias.stride_b[0] = 0; bias.stride_b[1] = 1;
  CHECK(coalesce(bias).ndim == 2);

  // a single element, any strides
  CopyLayout one{};
  one.ndim = 2;
  one.shape[0] = 1; one.shape[1] = 1;
  one.stride_src[0] = 7; one.stride_dst[1] = 3;
  CopyLayout o = coalesce(one);
  CHECK(o.ndim == 1);
  CHECK(o.shape[0] == 1);

  // random layouts: the walk is unchanged, and the rank never grows
  std::mt19937_64 gen(42);
  for (int trial = 0; trial < 500; ++trial) {
    CopyLayout l{};
    l.ndim = int(gen() % kMaxDims) + 1;
    for (int d = 0; d < l.ndim; ++d) l.shape[d] = i64(gen() % 4) + 1;
    // strides: contiguous for one operand sometimes, broadcast (0) or permuted otherwise
    i64 running = 1;
    for (int d = l.ndim - 1; d >= 0; --d) {
      l.stride_dst[d] = running;
      running *= l.shape[d];
      const int kind = int(gen() % 3);
      l.stride_src[d] = kind == 0 ? l.stride_dst[d] : (kind == 1 ? 0 : i64(gen() % 50) - 10);
    }
    if (trial % 7 == 0) l.shape[gen() % unsigned(l.ndim)] = 0;  // an empty space stays empty
    const CopyLayout k = coalesce(l);
    CHECK(k.ndim >= 1);
    CHECK(k.ndim <= l.ndim);
    CHECK(walk(k.ndim, k.shape, k.stride_src, k.stride_dst) == walk(l.ndim, l.shape, l.stride_src, l.stride_dst));
  }
}

TEST_CASE("cuda launch: 32-bit indexing only when every index and offset fits") {
  const i64 small[] = {1000, 1000}, s1[] = {1000, 1}, s0[] = {0, 1};
  CHECK(fits_int32(2, small, s1, s0));
  const i64 big[] = {70000, 70000};
  CHECK_FALSE(fits_int32(2, big, s1, s0));  // 4.9e9 elements
  const i64 far_shape[] = {3}, far_stride[] = {i64(1) << 31}, unit[] = {1};
  CHECK_FALSE(fits_int32(1, far_shape, far_stride, unit));  // offset 2^32
  const i64 negative[] = {-(i64(1) << 29)};
  CHECK(fits_int32(1, far_shape, negative, unit));  // offsets down to -2^30: signed 32-bit
}

TEST_CASE("cuda launch: the row-major GEMM handed to column-major cuBLAS computes the row-major product") {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  struct Shape { i64 m, n, k; };
  for (Shape sh : {Shape{1, 1, 1}, Shape{7, 33, 5}, Shape{33, 7, 64}, Shape{1, 9, 4}, Shape{5, 1, 3}}) {
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        for (i64 batch : {i64(1), i64(3)}) {
          GemmArgs<float> g;
          g.trans_a = ta; g.trans_b = tb;
          g.m = sh.m; g.n = sh.n; g.k = sh.k;
          g.alpha = 0.5f; g.beta = batch == 1 ? 0.0f : 2.0f;
          g.batch = batch;
          const i64 a_rows = ta == Trans::N ? sh.m : sh.k, a_cols = ta == Trans::N ? sh.k : sh.m;
          const i64 b_rows = tb == Trans::N ? sh.k : sh.n, b_cols = tb == Trans::N ? sh.n : sh.k;
          g.lda = a_cols + 2; g.ldb = b_cols + 1; g.ldc = sh.n + 3;
          g.stride_a = batch == 3 ? 0 : a_rows * g.lda;  // batch 3 broadcasts A
          g.stride_b = b_rows * g.ldb;
          g.stride_c = sh.m * g.ldc;
          std::vector<float> A(std::size_t(a_rows * g.lda)), B(std::size_t(b_rows * g.ldb * batch)),
              C(std::size_t(sh.m * g.ldc * batch));
          for (float& x : A) x = dist(gen);
          for (float& x : B) x = dist(gen);
          for (float& x : C) x = dist(gen);
          std::vector<float> expected = C;
          for (i64 b = 0; b < batch; ++b) {
            for (i64 i = 0; i < sh.m; ++i) {
              for (i64 j = 0; j < sh.n; ++j) {
                double dot = 0;
                for (i64 p = 0; p < sh.k; ++p) {
                  const float a = ta == Trans::N ? A[std::size_t(b * g.stride_a + i * g.lda + p)]
                                                 : A[std::size_t(b * g.stride_a + p * g.lda + i)];
                  const float bv = tb == Trans::N ? B[std::size_t(b * g.stride_b + p * g.ldb + j)]
                                                  : B[std::size_t(b * g.stride_b + j * g.ldb + p)];
                  dot += double(a) * bv;
                }
                float& c = expected[std::size_t(b * g.stride_c + i * g.ldc + j)];
                c = float(g.alpha * dot + (g.beta == 0 ? 0.0 : double(g.beta) * c));
              }
            }
          }
          g.a = A.data(); g.b = B.data(); g.c = C.data();
          const ColumnMajorGemm cm = row_major_as_column_major(g);
          CHECK(cm.m == sh.n);  // operands and sizes swapped
          CHECK(cm.n == sh.m);
          CHECK(cm.a == g.b);
          column_major_gemm_host(cm);
          for (std::size_t e = 0; e < C.size(); ++e) CHECK(C[e] == doctest::Approx(expected[e]).epsilon(1e-5));
        }
      }
    }
  }

  // cuBLAS rejects ld < rows even for a single column; the mapping raises it where unused.
  GemmArgs<float> vec;
  vec.m = 1; vec.n = 5; vec.k = 4;
  vec.lda = 0;  // a 1 x 4 row: its leading dimension is never used
  vec.ldb = 5; vec.ldc = 5;
  const ColumnMajorGemm cm = row_major_as_column_major(vec);
  CHECK(cm.ldb >= cm.k);  // B' = A, column-major k x 1
  CHECK(cm.lda == 5);
  CHECK(cm.ldc == 5);
}

TEST_CASE("cuda launch: the row-major bias is cuBLASLt's per-row bias of the column-major product") {
  // Row-major C (m x n) += bias[j] for every row i: in the mapped problem the bias has
  // cm.m = n values, one per column-major row, and D may be a buffer other than C.
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  struct Shape { i64 m, n, k; };
  for (Shape sh : {Shape{1, 1, 1}, Shape{7, 33, 5}, Shape{33, 7, 64}, Shape{1, 9, 4}, Shape{5, 1, 3}}) {
    for (i64 batch : {i64(1), i64(3)}) {
      for (float beta : {0.0f, 1.0f}) {
        GemmArgs<float> g;
        g.trans_a = Trans::N; g.trans_b = Trans::T;  // a linear layer: x W^T
        g.m = sh.m; g.n = sh.n; g.k = sh.k;
        g.alpha = 1.0f; g.beta = beta;
        g.batch = batch;
        g.lda = sh.k; g.ldb = sh.k + 1; g.ldc = sh.n + 2;
        g.stride_a = sh.m * g.lda;
        g.stride_b = 0;  // one weight for the whole batch
        g.stride_c = sh.m * g.ldc;
        std::vector<float> A(std::size_t(sh.m * g.lda * batch)), B(std::size_t(sh.n * g.ldb)),
            C(std::size_t(g.stride_c * batch)), bias(std::size_t(sh.n));
        for (float& x : A) x = dist(gen);
        for (float& x : B) x = dist(gen);
        for (float& x : C) x = dist(gen);
        for (float& x : bias) x = dist(gen);
        std::vector<float> expected(C.size(), -7.0f), D(C.size(), -7.0f);
        for (i64 b = 0; b < batch; ++b) {
          for (i64 i = 0; i < sh.m; ++i) {
            for (i64 j = 0; j < sh.n; ++j) {
              double dot = 0;
              for (i64 p = 0; p < sh.k; ++p) {
                dot += double(A[std::size_t(b * g.stride_a + i * g.lda + p)]) * B[std::size_t(j * g.ldb + p)];
              }
              const std::size_t at = std::size_t(b * g.stride_c + i * g.ldc + j);
              expected[at] = float(dot + (beta == 0 ? 0.0 : double(beta) * C[at]) + bias[std::size_t(j)]);
            }
          }
        }
        g.a = A.data(); g.b = B.data(); g.c = C.data(); g.bias = bias.data();
        ColumnMajorGemm cm = row_major_as_column_major(g);
        CHECK(cm.bias == bias.data());
        CHECK(cm.d == C.data());  // in place unless told otherwise
        cm.d = D.data();
        const std::vector<float> C_before = C;
        column_major_gemm_host(cm);
        CHECK(C == C_before);  // C only read
        for (std::size_t e = 0; e < D.size(); ++e) CHECK(D[e] == doctest::Approx(expected[e]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("cuda launch: operand alignment promised to cuBLASLt") {
  alignas(64) static float buffer[64];
  CHECK(gemm_alignment_bytes(buffer, 0, 4) == 16);       // capped at 16 bytes
  CHECK(gemm_alignment_bytes(buffer + 1, 0, 4) == 4);
  CHECK(gemm_alignment_bytes(buffer + 2, 0, 4) == 8);
  CHECK(gemm_alignment_bytes(buffer + 4, 0, 4) == 16);
  CHECK(gemm_alignment_bytes(buffer, 6, 4) == 8);        // every matrix of the batch: stride 24 bytes
  CHECK(gemm_alignment_bytes(buffer, 7, 4) == 4);
  CHECK(gemm_alignment_bytes(buffer, 64, 4) == 16);
}

TEST_CASE("cuda launch: Adam chunks cover every element of every tensor once") {
  std::vector<AdamSegment<float>> segments;
  std::vector<float> storage(1);  // the pointers are only compared
  for (int i = 0; i < 75; ++i) {
    const i64 n = i % 10 == 3 ? 0 : i + 1;
    float* base = storage.data() + 0;
    segments.push_back({base, base, base, base, n});
  }
  const auto chunks = adam_chunks(segments.data(), i64(segments.size()));
  // 75 tensors, 8 of them empty: 67 in chunks of 32
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].count == 32);
  CHECK(chunks[1].count == 32);
  CHECK(chunks[2].count == 3);
  std::size_t next = 0;
  for (const auto& c : chunks) {
    CHECK(c.begin[0] == 0);
    for (int s = 0; s < c.count; ++s) {
      while (segments[next].n == 0) ++next;
      CHECK(c.begin[s + 1] - c.begin[s] == segments[next].n);
      ++next;
    }
    // Each element finds its segment, whatever segment the search starts from (as long as
    // it is not past it): the grid-stride loop resumes from the previous element's.
    for (i64 e = 0, s = 0; e < c.begin[c.count]; ++e) {
      s = adam_segment_of(c.begin, c.count, e, int(s));
      CHECK(c.begin[s] <= e);
      CHECK(e < c.begin[s + 1]);
      CHECK(adam_segment_of(c.begin, c.count, e, 0) == s);
    }
  }
  CHECK(next == segments.size());
  CHECK(adam_chunks(segments.data(), 0).empty());
  static_assert(sizeof(AdamChunk<float>) <= 4096 - 64);
}

TEST_CASE("cuda launch: Plücker pairs are numbered row by row, and the inverse agrees") {
  for (i64 r = 1; r <= 40; ++r) {
    i64 expected = 0;
    for (i64 a = 0; a < r; ++a) {
      for (i64 b = a + 1; b < r; ++b) {
        CHECK(pair_index(a, b, r) == expected);
        int ra = -1, rb = -1;
        pair_of_index(expected, r, &ra, &rb);
        CHECK(ra == a);
        CHECK(rb == b);
        ++expected;
      }
    }
    CHECK(expected == r * (r - 1) / 2);
  }
  CHECK(pair_index(0, 1, 32) == 0);
  CHECK(pair_index(1, 2, 32) == 31);
  CHECK(pair_index(30, 31, 32) == 495);  // P = 496 for the paper's r = 32
}

TEST_CASE("cuda launch: attention and Plücker tiles fit the default shared memory") {
  CHECK(attention_head_dim_class(0) == 0);
  CHECK(attention_head_dim_class(1) == 16);
  CHECK(attention_head_dim_class(16) == 16);
  CHECK(attention_head_dim_class(17) == 32);
  CHECK(attention_head_dim_class(64) == 64);  // the paper models: d 256 / 4 heads
  CHECK(attention_head_dim_class(65) == 128);
  CHECK(attention_head_dim_class(128) == 128);
  CHECK(attention_head_dim_class(129) == 0);
  CHECK(AttentionTiles<64>::kTile == 32);
  CHECK(AttentionTiles<128>::kTile == 8);
  CHECK(AttentionTiles<64>::kGradQueryShared == 4 * (2 * 32 * 65 + 2 * 32 * 64));
  CHECK(AttentionTiles<128>::kGradKeyValueShared <= 48 * 1024);
  CHECK(attention_blocks(128, 128) == 512);  // batch 32 x 4 heads, block 128
  CHECK(attention_blocks(1, 1) == 1);

  CHECK(plucker_threads(0) == 32);
  CHECK(plucker_threads(6) == 32);
  CHECK(plucker_threads(496) == 256);
  CHECK(plucker_forward_shared(32, 6) == 4 * (7 * 32 + 6));
  CHECK(plucker_backward_shared(32, 6) == 4 * (14 * 32));
  CHECK(plucker_backward_shared(32, 6) <= kMaxDefaultShared);

  CHECK(scan_segment(30522) == 30);
  CHECK(scan_segment(30522) * kScanThreads >= 30522);
  CHECK(scan_segment(1) == 1);
}
