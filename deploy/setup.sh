#!/usr/bin/env bash
# Installs every Debian package the project needs to build, test and run.
# Idempotent and non-interactive: packages already present are not touched,
# and `apt-get update` runs only when something is missing.
#
#   deploy/setup.sh           build, test and run
#   deploy/setup.sh --bench   also what tests/bench/ compares against: Redis,
#                             the OpenMP OpenBLAS for PyTorch, ZeroMQ and
#                             CMake for the ps-lite peer; and perf
# (PyTorch itself is in both: tests/torch_agreement_test checks the model
# graph against it.)
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java default-jdk-headless
  build-essential pkg-config clang clang-format
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev libxxhash-dev libgoogle-glog-dev nlohmann-json3-dev
  libdnnl-dev zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev libhiredis-dev
  python3-matplotlib python3-yaml python3-grpcio python3-protobuf openssl patchelf
  python3-pip python3-venv python3-xxhash
  python3-torch nodejs
  prometheus-cpp-dev prometheus
  etcd-server etcd-client
)

if [ "${1:-}" = "--bench" ]; then
  packages+=(redis-server libopenblas0-openmp python3-numpy linux-perf libzmq3-dev cmake)
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
