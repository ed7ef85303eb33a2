#!/usr/bin/env bash
# Packs ps_server, ps_serve, ps_worker, ps_admin, ps_predict, ps_export_dump
# and clicklog_gen with every shared library they load, except glibc's and
# CUDA's, and the CUDA backend (libps_cuda_backend.so, where the build has
# one), into one tarball that runs wherever it is unpacked, with no Debian
# package installed:
#
#   ps-bundle/bin/   the binaries; runpath $ORIGIN/../lib
#   ps-bundle/lib/   the libraries (runpath $ORIGIN) and the CUDA backend
#                    (runpath $ORIGIN, then the CUDA directories it was
#                    linked with)
#   ps-bundle/python/  the Python client's wheel (python/: pip install
#                    ps-bundle/python/ps_client-*.whl)
#   ps-bundle/MANIFEST  what is in it, and the commit it was built from
#
#   deploy/bundle.sh OUT.tar.gz            builds the binaries with Bazel first
#   deploy/bundle.sh OUT.tar.gz FILE...    packs these, already built (a
#                                          FILE ending in .so goes to lib/,
#                                          one ending in .whl to python/)
#
# glibc (libc, libm, libpthread, libdl, librt, the loader) comes from the
# machine that runs it, as does CUDA (the driver, and the toolkit's runtime
# and cuBLAS for --device=cuda): no binary links a CUDA library, only the
# CUDA backend does, and the binaries open it only when asked for a GPU.
# Needs patchelf (deploy/setup.sh installs it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 1 ]; then
  sed -n '2,25p' "$0" >&2
  exit 2
fi
out=$1
shift
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
if ! command -v patchelf >/dev/null; then
  echo "bundle: patchelf is missing (deploy/setup.sh installs it)" >&2
  exit 1
fi
binaries=("$@")
if [ ${#binaries[@]} -eq 0 ]; then
  (cd "$here" && bazel build --show_progress_rate_limit=5 //server:ps_server \
    //server:ps_serve //ops:ps_admin //worker:ps_worker //worker/predict:ps_predict \
    //worker/predict:ps_export_dump //worker/datagen:clicklog_gen //python:wheel)
  for path in server/ps_server server/ps_serve ops/ps_admin worker/ps_worker \
    worker/predict/ps_predict worker/predict/ps_export_dump worker/datagen/clicklog_gen \
    kernels/libps_cuda_backend.so \
    python/ps_client-0.1.0-py3-none-any.whl; do
    [ -e "$here/bazel-bin/$path" ] && binaries+=("$here/bazel-bin/$path")
  done
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/ps-bundle"
mkdir -p "$root/bin" "$root/lib"

# glibc's libraries and the loader, and anything of CUDA's: left to the host.
host_library() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | \
      libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | \
      libnsl.so.* | libmvec.so.*) return 0 ;;
    libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libnvidia-*) return 0 ;;
  esac
  case "$2" in */cuda*/*) return 0 ;; esac
  return 1
}

# The CUDA directories a file was linked with (its runpath's), if any.
cuda_runpath() { patchelf --print-rpath "$1" | tr ':' '\n' | grep cuda | paste -sd: || true; }

for binary in "${binaries[@]}"; do
  name=$(basename "$binary")
  case "$name" in
    *.whl)
      mkdir -p "$root/python"
      cp -L "$binary" "$root/python/$name"
      continue
      ;;
    *.so) destination="$root/lib/$name" ;;
    *) destination="$root/bin/$name" ;;
  esac
  cp -L "$binary" "$destination"
  chmod u+w "$destination"
  # ldd lists every library the binary loads, transitively.
  libraries=$(ldd "$binary") || { echo "bundle: ldd $binary failed" >&2; exit 1; }
  while read -r library arrow path _; do
    if [ "$arrow" != "=>" ]; then
      # The vDSO and the loader have no "=>"; anything else is unexpected.
      case "$library" in
        linux-vdso.so.* | /lib*/ld-linux*.so.*) continue ;;
        *) echo "bundle: $name: cannot read ldd's line for $library" >&2; exit 1 ;;
      esac
    fi
    if [ "$path" = "not" ]; then
      echo "bundle: $name needs $library, which is not found here" >&2
      exit 1
    fi
    host_library "$library" "$path" && continue
    [ -e "$root/lib/$library" ] || cp -L "$path" "$root/lib/$library"
  done <<<"$libraries"
done
for binary in "$root"/bin/*; do
  patchelf --set-rpath '$ORIGIN/../lib' "$binary"
done
for library in "$root"/lib/*; do
  chmod u+w "$library"
  cuda=$(cuda_runpath "$library")
  patchelf --set-rpath "\$ORIGIN${cuda:+:$cuda}" "$library"
done

# The commit the binaries were built from, as their --version says (a
# 12-digit commit, "-dirty" for a tree with uncommitted changes).
commit=$(env -i "$root/bin/ps_server" --version | awk '{print $2}')
[ -n "$commit" ] || { echo "bundle: ps_server --version printed no commit" >&2; exit 1; }
{
  echo "ps-bundle from $commit," \
    "built $(date -u +%Y-%m-%d) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "bin: $(cd "$root/bin" && echo *)"
  if [ -e "$root/lib/libps_cuda_backend.so" ]; then
    echo "cuda: lib/libps_cuda_backend.so (opened for --device=cuda|auto)"
  else
    echo "cuda: none (built without nvcc)"
  fi
  echo "lib: $(ls "$root/lib" | wc -l) libraries, $(du -sh "$root/lib" | cut -f1)"
  if [ -d "$root/python" ]; then
    echo "python: $(cd "$root" && echo python/*.whl) (pip install; needs grpcio and protobuf)"
  fi
  echo "needs from the host: glibc $(ldd --version | head -1 | awk '{print $NF}') or newer;" \
    "for --device=cuda, the CUDA driver and toolkit"
} >"$root/MANIFEST"
tar -C "$stage" -czf "$out" ps-bundle
echo "bundle: wrote $out ($(du -h "$out" | cut -f1)): $(sed -n 2p "$root/MANIFEST")"
