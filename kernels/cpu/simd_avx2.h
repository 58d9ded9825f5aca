// The vector layer simd.h at 8 lanes (AVX2 + FMA), for the kernels written for that one
// instruction set (the GEMM's packers and micro-kernel, attention, GEMV). Include only from
// files compiled with -mavx2 -mfma.
#pragma once

#ifndef WEDGE_SIMD_LANES
#define WEDGE_SIMD_LANES 8
#endif
#if WEDGE_SIMD_LANES != 8
#error "kernels/cpu/simd_avx2.h in a file compiled for another vector width"
#endif
#include "kernels/cpu/simd.h"
