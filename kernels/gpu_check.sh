#!/usr/bin/env bash
# The GPU machine's check (one H200; nvcc, PyTorch; no Bazel, gRPC or oneDNN
# headers). Builds the kernels with plain nvcc, runs the CUDA-vs-CPU parity
# checks, benchmarks a full training step of the default model (wide_deep)
# at batch 4096 and 16384 against the same model in PyTorch on the same GPU,
# and, from the bundle (deploy/bundle.sh, carried with the working tree),
# trains 200k generated lines end to end with one ps_server and one
# ps_worker on loopback, --device=cuda beside --device=cpu (wide_deep, then
# dcn_v2 and dlrm, then din on lines with recent items and mmoe on lines of
# two labels). Prints the
# tables; exits non-zero if a parity check fails or the end-to-end AUCs
# differ by more than 0.002. A few minutes.
#
#   deploy/bundle.sh deploy/ps-bundle.tar.gz      (here, with Bazel)
#   bash kernels/gpu_check.sh                      (on the GPU machine)
#   GPU_CHECK_DRY_RUN=1 bash kernels/gpu_check.sh  (here: builds everything,
#       runs nothing that needs a GPU; end to end runs --device=cpu twice)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
dry_run=${GPU_CHECK_DRY_RUN:-}
bundle=${BUNDLE:-deploy/ps-bundle.tar.gz}
e2e_lines=${E2E_LINES:-200000}
mkdir -p "$out" /tmp/gpu_check_build
build=/tmp/gpu_check_build
[ -n "$dry_run" ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

flags=(-std=c++17 -O3 -I. -DPS_KERNELS_NO_ONEDNN
       -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80)
# The CUDA backend is a shared object the binaries open at run time (beside
# them here, as in the bundle's lib/); they link no CUDA library themselves.
sources=(kernels/cpu_backend.cc kernels/cuda_backend_loader.cc kernels/ctr_model.cc)
echo "== build"
nvcc "${flags[@]}" -shared -Xcompiler -fPIC -Xcompiler -fvisibility=hidden \
  kernels/cuda_backend.cu -lcublas -o "$build/libps_cuda_backend.so"
nvcc "${flags[@]}" -DPS_KERNELS_CUDA_BUILT=1 "${sources[@]}" kernels/parity_checks.cc \
  kernels/parity_main.cc -ldl -o "$build/parity"
nvcc "${flags[@]}" -DPS_KERNELS_CUDA_BUILT=1 "${sources[@]}" kernels/step_benchmark_main.cc \
  -ldl -o "$build/step_benchmark"

status=0
if [ -z "$dry_run" ]; then
echo "== parity (CUDA against the CPU reference)"
timeout 300 "$build/parity" | tee "$out/parity.txt" || status=1

fi

echo "== end to end from the bundle: 1 ps_server + 1 ps_worker, $e2e_lines lines"
if [ ! -f "$bundle" ]; then
  echo "no bundle at $bundle (deploy/bundle.sh $bundle, and carry it)" | tee "$out/e2e.txt"
  exit 1
fi
e2e=/tmp/gpu_check_e2e
rm -rf "$e2e" && mkdir -p "$e2e"
tar -xzf "$bundle" -C "$e2e"
bin="$e2e/ps-bundle/bin"
head -3 "$e2e/ps-bundle/MANIFEST" 2>/dev/null | tee "$out/bundle_manifest.txt" || true
# The bundle leaves CUDA's libraries to this machine (only its CUDA backend,
# lib/libps_cuda_backend.so, loads them): if the toolkit is not where the
# bundle was linked against, look next to nvcc and in PyTorch.
cuda_library="$e2e/ps-bundle/lib/libps_cuda_backend.so"
[ -f "$cuda_library" ] || { echo "the bundle has no lib/libps_cuda_backend.so (built without nvcc?)" | tee "$out/e2e.txt"; exit 1; }
ldd "$cuda_library" >"$out/ldd.txt" 2>&1 || true
if grep -q "not found" "$out/ldd.txt"; then
  extra=""
  if command -v nvcc >/dev/null; then extra="$(dirname "$(dirname "$(command -v nvcc)")")/lib64"; fi
  torch_libs=$(python3 -c 'import nvidia, os; d = os.path.dirname(nvidia.__path__[0] if hasattr(nvidia, "__path__") else nvidia.__file__) + "/nvidia"; print(":".join(os.path.join(d, x, "lib") for x in os.listdir(d)))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$extra${torch_libs:+:$torch_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "some libraries not found where the bundle was linked; LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
  ldd "$cuda_library" | grep "not found" >&2 || true
fi
"$bin/clicklog_gen" --out="$e2e/train.tsv" --lines="$e2e_lines" --sample_seed=1 \
  2>"$out/clicklog_gen.log" || { echo "clicklog_gen failed (see clicklog_gen.log)" >&2; exit 1; }
"$bin/clicklog_gen" --out="$e2e/test.tsv" --lines=$((e2e_lines / 4)) --sample_seed=2 \
  2>>"$out/clicklog_gen.log" || { echo "clicklog_gen failed" >&2; exit 1; }
# DIN's lines carry recent items (a seq column); MMoE's two labels.
"$bin/clicklog_gen" --out="$e2e/seq_train.tsv" --lines="$e2e_lines" --sample_seed=1 \
  --sequence_length=20 2>>"$out/clicklog_gen.log" || { echo "clicklog_gen failed" >&2; exit 1; }
"$bin/clicklog_gen" --out="$e2e/seq_test.tsv" --lines=$((e2e_lines / 4)) --sample_seed=2 \
  --sequence_length=20 2>>"$out/clicklog_gen.log" || { echo "clicklog_gen failed" >&2; exit 1; }
"$bin/clicklog_gen" --out="$e2e/tasks_train.tsv" --lines="$e2e_lines" --sample_seed=1 \
  --tasks=2 2>>"$out/clicklog_gen.log" || { echo "clicklog_gen failed" >&2; exit 1; }
"$bin/clicklog_gen" --out="$e2e/tasks_test.tsv" --lines=$((e2e_lines / 4)) --sample_seed=2 \
  --tasks=2 2>>"$out/clicklog_gen.log" || { echo "clicklog_gen failed" >&2; exit 1; }
# train NAME DEVICE [MODEL] -> "examples/s auc logloss backend", on a fresh
# shard; DATA (train.tsv's prefix: seq_, tasks_) and COLUMNS pick other lines.
train() {
  local device=$2 dir="$e2e/$1" model=${3:-wide_deep} data=${DATA:-}
  local columns=${COLUMNS_FLAG:-label,dense*13,cat*26}
  mkdir -p "$dir"
  "$bin/ps_server" --listen=127.0.0.1:0 --data_dir="$dir/shard" --durability=periodic \
    >"$dir/shard.out" 2>"$dir/shard.log" &
  local shard=$!
  local address=""
  for _ in $(seq 100); do
    address=$(awk '/listening on/ {print $4}' "$dir/shard.out" 2>/dev/null)
    [ -n "$address" ] && break
    sleep 0.1
  done
  timeout 240 "$bin/ps_worker" --servers="$address" --train="$e2e/${data}train.tsv" \
    --test="$e2e/${data}test.tsv" --batch_size=4096 --device="$device" --start_timeout_s=30 \
    --model="$model" --columns="$columns" \
    --metrics_out="$dir/worker.json" 2>"$dir/worker.log" \
    || { echo "ps_worker --device=$device failed:" >&2; tail -5 "$dir/worker.log" >&2; }
  kill "$shard"; wait "$shard" 2>/dev/null || true
  cp "$dir/worker.log" "$out/worker_$1.log"; cp "$dir/shard.log" "$out/shard_$1.log"
  local m="$dir/worker.json"
  get() { grep -o "\"$1\": [^,}]*" "$m" | head -1 | sed 's/.*: //; s/"//g' || true; }
  [ -f "$m" ] && echo "$(get examples_per_sec) $(get test_auc) $(get test_logloss) $(get backend)"
}
gpu_device=cuda
[ -n "$dry_run" ] && gpu_device=cpu
read -r gpu_rate gpu_auc gpu_logloss gpu_backend < <(train gpu "$gpu_device" || echo "0 0 0 failed")
read -r cpu_rate cpu_auc cpu_logloss cpu_backend < <(train cpu cpu || echo "0 0 0 failed")
{
  printf "%-10s %12s %10s %10s\n" device examples/s "test AUC" logloss
  printf "%-10s %12s %10s %10s\n" "$gpu_backend" "$gpu_rate" "$gpu_auc" "$gpu_logloss"
  printf "%-10s %12s %10s %10s\n" "$cpu_backend" "$cpu_rate" "$cpu_auc" "$cpu_logloss"
  awk -v g="$gpu_auc" -v c="$cpu_auc" -v gr="$gpu_rate" -v cr="$cpu_rate" 'BEGIN {
    d = g - c; if (d < 0) d = -d;
    printf "AUC difference %.4f (limit 0.002); examples/s ratio %.2f\n", d, (cr > 0 ? gr / cr : 0) }'
} | tee "$out/e2e.txt"
if ! awk -v g="$gpu_auc" -v c="$cpu_auc" 'BEGIN { d = g - c; if (d < 0) d = -d; exit !(g > 0 && c > 0 && d <= 0.002) }'; then
  echo "end to end: the AUCs differ by more than 0.002, or a run failed"
  status=1
fi
# The models from specs whose layers (DCN-v2's cross, DLRM's interaction,
# DIN's attention pooling, MMoE's experts and gates) only they use: the same
# AUC on both devices (MMoE's: its first task's).
for model in dcn_v2 dlrm din mmoe; do
  data="" columns="label,dense*13,cat*26"
  [ "$model" = din ] && data=seq_ columns="label,dense*13,cat*26,seq:0"
  [ "$model" = mmoe ] && data=tasks_ columns="label:click,label:convert,dense*13,cat*26"
  read -r gpu_rate gpu_auc _ gpu_backend < <(DATA=$data COLUMNS_FLAG=$columns train "gpu_$model" "$gpu_device" "$model" || echo "0 0 0 failed")
  read -r cpu_rate cpu_auc _ cpu_backend < <(DATA=$data COLUMNS_FLAG=$columns train "cpu_$model" cpu "$model" || echo "0 0 0 failed")
  printf "%-8s %-6s %10s examples/s, AUC %s; %-6s %10s examples/s, AUC %s\n" "$model" \
    "$gpu_backend" "$gpu_rate" "$gpu_auc" "$cpu_backend" "$cpu_rate" "$cpu_auc" | tee -a "$out/e2e.txt"
  if ! awk -v g="$gpu_auc" -v c="$cpu_auc" 'BEGIN { d = g - c; if (d < 0) d = -d; exit !(g > 0 && c > 0 && d <= 0.002) }'; then
    echo "end to end, $model: the AUCs differ by more than 0.002, or a run failed"
    status=1
  fi
done
if [ -z "$dry_run" ]; then
echo "== training step, wide_deep, examples/s"
results="$out/step_benchmark.txt"
: >"$results"
for batch in 4096 16384; do
  timeout 180 "$build/step_benchmark" --cuda --batch=$batch --steps=100 | tee -a "$results" || status=1
  timeout 180 "$build/step_benchmark" --cuda --tf32 --batch=$batch --steps=100 | tee -a "$results" || status=1
  timeout 180 python3 kernels/torch_step_benchmark.py --batch $batch --steps 100 | tee -a "$results" || status=1
  timeout 180 python3 kernels/torch_step_benchmark.py --batch $batch --steps 100 --tf32 | tee -a "$results" || status=1
done

echo
printf "%-8s %14s %14s %8s   %14s %14s %8s\n" batch "ours fp32" "torch fp32" ratio "ours tf32" "torch tf32" ratio
for batch in 4096 16384; do
  get() { grep "backend=$1 .*batch=$batch " "$results" | sed 's/.*examples_per_sec=\([0-9]*\).*/\1/' || true; }
  ours=$(get cuda); torch=$(get pytorch-cuda); ours_tf=$(get cuda-tf32); torch_tf=$(get pytorch-cuda-tf32)
  printf "%-8s %14s %14s %8.2f   %14s %14s %8.2f\n" "$batch" "$ours" "$torch" \
    "$(awk -v a="$ours" -v b="$torch" 'BEGIN {print a / b}')" "$ours_tf" "$torch_tf" \
    "$(awk -v a="$ours_tf" -v b="$torch_tf" 'BEGIN {print a / b}')"
done | tee "$out/table.txt"
fi
exit $status
