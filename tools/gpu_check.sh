#!/usr/bin/env bash
# The GPU checks in one go, for a machine with an NVIDIA GPU (e.g. an H200): builds with
# CUDA, runs the whole test suite (the CUDA parity and training tests run when a device is
# present, the bf16 GEMM and the streams' exactness among them), the CUDA teaching ladders (GEMM against cuBLAS;
# softmax cross-entropy, layer norm and causal attention against float64), the causality
# audit on the GPU, the GPU ranks' sums through NCCL, the paper models' steps in fp32 and
# bf16, and the training-step comparison with PyTorch on the same GPU. Logs go to $OUT
# (default gpu-logs/).
#
#   OUT=/some/dir tools/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/configure.log" 2>&1
cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
ctest --test-dir build-gpu --output-on-failure > "$OUT/ctest.log" 2>&1
build-gpu/test_kernels -tc="*CUDA*,*cuda*" -s > "$OUT/cuda_parity.log" 2>&1
build-gpu/test_tools -tc="CUDA*" -s > "$OUT/cuda_training.log" 2>&1
# GPU ranks through NCCL (built only where CMake found MPI and NCCL: configure.log says).
grep -E "wedge: (MPI|NCCL)" "$OUT/configure.log" > "$OUT/nccl.log"
if [ -x build-gpu/test_mpi ]; then build-gpu/test_mpi -tc="GPU*" -s >> "$OUT/nccl.log" 2>&1; fi
build-gpu/bench/cuda_gemm_ladder > "$OUT/cuda_gemm_ladder.log" 2>&1
build-gpu/bench/cuda_softmax_ladder > "$OUT/cuda_softmax_ladder.log" 2>&1
build-gpu/bench/cuda_layer_norm_ladder > "$OUT/cuda_layer_norm_ladder.log" 2>&1
build-gpu/bench/cuda_attention_ladder > "$OUT/cuda_attention_ladder.log" 2>&1
for m in transformer grassmann sheaf; do
  build-gpu/wedge audit-causal --model $m --device cuda > "$OUT/audit_$m.log" 2>&1
done
build-gpu/wedge audit-causal --model sheaf --leaky --device cuda > "$OUT/audit_sheaf_leaky.log" 2>&1 \
  && echo "the leaky SheafState variant was NOT caught on the GPU" >> "$OUT/audit_sheaf_leaky.log"
build-gpu/wedge bench-step --model sheaf --device cuda --batch 32 --steps 10 --json > "$OUT/bench_sheaf_cuda.log" 2>&1
for h in transformer grassmann sheaf; do  # the sentence-pair classifier's heads on the GPU
  build-gpu/wedge bench-step --task nli --head $h --device cuda --batch 32 --steps 10 --json > "$OUT/bench_nli_${h}_cuda.log" 2>&1
done
# Mixed precision on the GPU: the bf16 GEMM against the reference (the harness runs it with
# the rest of the CUDA parity checks), and the paper models' steps in fp32 and bf16.
for m in transformer grassmann sheaf; do
  for p in fp32 bf16; do
    build-gpu/wedge bench-step --model $m --device cuda --batch 32 --steps 10 --precision $p --json \
      > "$OUT/bench_${m}_${p}_cuda.log" 2>&1
  done
done
# Streaming generation on the GPU: prefill and decode of the paper models, batch 1 and 8.
build-gpu/wedge bench-generate --device cuda > "$OUT/bench_generate_cuda.log" 2>&1
build-gpu/wedge bench-generate --device cuda --batch 8 --prompts 128 >> "$OUT/bench_generate_cuda.log" 2>&1
build-gpu/bench/bench_backends > "$OUT/bench_backends.log" 2>&1
python3 bench/compare_pytorch.py --wedge build-gpu/wedge --device cuda --paper --steps 20 > "$OUT/compare_pytorch_cuda.log" 2>&1
tail -3 "$OUT/ctest.log"
echo "logs in $OUT"
