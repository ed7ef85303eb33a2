#!/usr/bin/env bash
# The GPU machine's check (one H200; nvcc, PyTorch; no Bazel, gRPC or BLAS
# headers). Builds the kernels with plain nvcc, runs the CUDA-vs-CPU parity
# checks, then benchmarks a full training step of the default model
# (wide_deep) at batch 4096 and 16384 against the same model in PyTorch on the
# same GPU, and prints one table with the ratio. About a minute.
#
#   bash kernels/gpu_check.sh        (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out" /tmp/gpu_check_build
build=/tmp/gpu_check_build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

flags=(-std=c++17 -O3 -I. -DPS_KERNELS_NO_BLAS
       -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80)
sources=(kernels/cpu_backend.cc kernels/cuda_backend.cu kernels/ctr_model.cc)
echo "== build"
nvcc "${flags[@]}" "${sources[@]}" kernels/parity_checks.cc kernels/parity_main.cc \
  -lcublas -o "$build/parity"
nvcc "${flags[@]}" "${sources[@]}" kernels/step_benchmark_main.cc -lcublas -o "$build/step_benchmark"

echo "== parity (CUDA against the CPU reference)"
status=0
"$build/parity" | tee "$out/parity.txt" || status=$?

echo "== training step, wide_deep, examples/s"
results="$out/step_benchmark.txt"
: >"$results"
for batch in 4096 16384; do
  "$build/step_benchmark" --cuda --batch=$batch --steps=100 | tee -a "$results"
  "$build/step_benchmark" --cuda --tf32 --batch=$batch --steps=100 | tee -a "$results"
  python3 kernels/torch_step_benchmark.py --batch $batch --steps 100 | tee -a "$results"
  python3 kernels/torch_step_benchmark.py --batch $batch --steps 100 --tf32 | tee -a "$results"
done

echo
printf "%-8s %14s %14s %8s   %14s %14s %8s\n" batch "ours fp32" "torch fp32" ratio "ours tf32" "torch tf32" ratio
for batch in 4096 16384; do
  get() { grep "backend=$1 .*batch=$batch " "$results" | sed 's/.*examples_per_sec=\([0-9]*\).*/\1/'; }
  ours=$(get cuda); torch=$(get pytorch-cuda); ours_tf=$(get cuda-tf32); torch_tf=$(get pytorch-cuda-tf32)
  printf "%-8s %14s %14s %8.2f   %14s %14s %8.2f\n" "$batch" "$ours" "$torch" \
    "$(awk -v a="$ours" -v b="$torch" 'BEGIN {print a / b}')" "$ours_tf" "$torch_tf" \
    "$(awk -v a="$ours_tf" -v b="$torch_tf" 'BEGIN {print a / b}')"
done | tee "$out/table.txt"
exit $status
