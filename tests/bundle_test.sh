#!/usr/bin/env bash
# deploy/bundle.sh end to end: packs the built binaries (and the CUDA
# backend, where the build has one), unpacks the bundle into an empty
# directory, checks that ldd resolves every library inside it but glibc's,
# and that no binary links a CUDA library (only lib/libps_cuda_backend.so
# does), then trains 1 shard + 1 worker from it under `env -i` (no PATH, no
# LD_LIBRARY_PATH) on loopback, in a mount namespace where the CUDA
# toolkit's directories are empty (`unshare -m`, a tmpfs over each), exports
# and scores with ps_predict there, and asks for --device=cuda, which must
# fail in one line naming what is missing. Then
# checks deploy/Dockerfile against the bundle: what it adds is the bundle,
# the path it runs is in it, its user is not root, and the entrypoint runs
# with the default arguments (bound to loopback here).
set -euo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/parameter_server
work=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

cuda_backend="$runfiles/kernels/libps_cuda_backend.so"
[ -e "$cuda_backend" ] || cuda_backend=""
bash "$runfiles/deploy/bundle.sh" "$work/bundle.tar.gz" \
  "$runfiles/server/ps_server" "$runfiles/server/ps_serve" "$runfiles/ops/ps_admin" \
  "$runfiles/worker/ps_worker" "$runfiles/worker/predict/ps_predict" \
  "$runfiles/worker/predict/ps_export_dump" \
  "$runfiles/worker/datagen/clicklog_gen" ${cuda_backend:+"$cuda_backend"} \
  "$runfiles/python/ps_client-0.1.0-py3-none-any.whl"
mkdir "$work/unpacked"
tar -C "$work/unpacked" -xzf "$work/bundle.tar.gz"
bundle=$(realpath "$work/unpacked/ps-bundle")
for name in ps_server ps_serve ps_admin ps_worker ps_predict ps_export_dump clicklog_gen; do
  [ -x "$bundle/bin/$name" ] || fail "no bin/$name in the bundle"
done

# The Python client installs from the bundle with pip, offline, beside
# Debian's grpcio and protobuf (python/ps_client_test uses it against a job).
wheel=$(ls "$bundle"/python/ps_client-*.whl) || fail "no python/ps_client-*.whl in the bundle"
grep -q "^python: python/ps_client-" "$bundle/MANIFEST" || fail "MANIFEST: $(cat "$bundle/MANIFEST")"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --no-index --quiet "$wheel" || fail "pip install $wheel"
"$work/venv/bin/python" -c 'import ps_client; assert ps_client.slot_for_key(1) == 1509' ||
  fail "ps_client from the bundle does not import"

# MANIFEST names the commit every binary's --version reports.
manifest_commit=$(sed -n '1s/^ps-bundle from \([^,]*\),.*/\1/p' "$bundle/MANIFEST")
[[ "$manifest_commit" =~ ^[0-9a-f]{12}(-dirty)?$ ]] || fail "MANIFEST: $(head -1 "$bundle/MANIFEST")"
for name in ps_server ps_serve ps_admin ps_worker ps_predict ps_export_dump clicklog_gen; do
  version=$(env -i "$bundle/bin/$name" --version) || fail "$name --version exited non-zero"
  [ "$version" = "$name $manifest_commit $(cut -d' ' -f3- <<<"$version")" ] ||
    fail "$name --version says $version, MANIFEST $manifest_commit"
done

# No binary links a CUDA library: they start on hosts without one.
for binary in "$bundle"/bin/*; do
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  [ -n "$needed" ] || fail "readelf -d $(basename "$binary") lists no NEEDED library"
  if grep -E '^lib(cuda|cudart|cublas|cublasLt|nvidia)' <<<"$needed"; then
    fail "$(basename "$binary") links a CUDA library (above)"
  fi
done
if [ -n "$cuda_backend" ]; then
  [ -f "$bundle/lib/libps_cuda_backend.so" ] || fail "the bundle has no lib/libps_cuda_backend.so"
  readelf -d "$bundle/lib/libps_cuda_backend.so" | grep -q 'NEEDED.*libcudart' ||
    fail "lib/libps_cuda_backend.so does not link CUDA's runtime"
  grep -q '^cuda: lib/libps_cuda_backend.so' "$bundle/MANIFEST" || fail "MANIFEST: $(cat "$bundle/MANIFEST")"
fi

# Every library resolves inside the bundle, or is glibc's, or CUDA's (the
# CUDA backend's).
for binary in "$bundle"/bin/* "$bundle"/lib/*.so*; do
  while read -r library arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ "$path" != "not" ] || fail "$(basename "$binary"): $library not found"
    path=$(realpath -m "$path")
    case "$path" in
      "$bundle"/lib/*) ;;
      */cuda*/*) ;;
      *)
        case "$library" in
          libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
            libresolv.so.* | libutil.so.* | libmvec.so.*) ;;
          *) fail "$(basename "$binary") loads $library from $path, outside the bundle" ;;
        esac
        ;;
    esac
  done < <(env -i /usr/bin/ldd "$binary")
done
[ "$(ls "$bundle/lib" | grep -c '^libgrpc++')" -ge 1 ] || fail "gRPC is not in lib/"

# A host without CUDA: every directory of the toolkit (and any other that
# ld.so's cache finds CUDA's libraries in) empty, in a mount namespace of
# this test's own; then `env -i`. without_cuda COMMAND ARGS...
cuda_dirs=$({
  for dir in /usr/local/cuda*; do [ -d "$dir" ] && [ ! -L "$dir" ] && echo "$dir"; done
  ldconfig -p | awk '/libcu(da|dart|blas)[^ ]*\.so/ {print $NF}' | xargs -r -n1 dirname
} | sort -u | awk 'kept == "" || index($0, kept "/") != 1 {print; kept = $0}' | paste -sd' ')
# Root makes the namespace itself; another user in a user namespace of its
# own, where it may mount (Debian allows unprivileged user namespaces).
namespace_flags=(-m)
[ "$(id -u)" = 0 ] || namespace_flags=(-r -m)
without_cuda() {
  CUDA_DIRS="$cuda_dirs" unshare "${namespace_flags[@]}" /bin/sh -c '
    for dir in $CUDA_DIRS; do
      mount -t tmpfs -o size=1m none "$dir" || { echo "cannot hide $dir" >&2; exit 97; }
    done
    exec env -i "$@"' sh "$@"
}
without_cuda /bin/true ||
  fail "cannot make a mount namespace without CUDA (unshare ${namespace_flags[*]}: root, or user namespaces for another user)"
echo "hiding CUDA: ${cuda_dirs:-(none on this host)}"
for dir in $cuda_dirs; do
  [ -z "$(without_cuda /bin/ls -A "$dir")" ] || fail "$dir is not empty in the namespace"
done

# Train and score from the bundle alone, without CUDA.
cd "$work"
without_cuda "$bundle/bin/ps_worker" --help >help.txt 2>&1 || true
grep -q -- "--device" help.txt || fail "ps_worker --help without CUDA: $(head -3 help.txt)"
without_cuda "$bundle/bin/clicklog_gen" --out=train.tsv --lines=20000 --sample_seed=1
without_cuda "$bundle/bin/clicklog_gen" --out=test.tsv --lines=5000 --sample_seed=2
without_cuda "$bundle/bin/ps_server" --listen=127.0.0.1:0 --data_dir="$work/shard" \
  >server.out 2>server.log &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "listening on" server.out 2>/dev/null && break
  sleep 0.1
done
address=$(awk '/listening on/ {print $4}' server.out)
[ -n "$address" ] || fail "ps_server did not start: $(cat server.log)"
without_cuda "$bundle/bin/ps_worker" --servers="$address" --train=train.tsv --test=test.tsv \
  --batch_size=1000 --hidden=32,16 --embedding_dim=8 --metrics_out=metrics.json 2>worker.log ||
  fail "ps_worker: $(tail -5 worker.log)"
grep -q "device: cpu; no usable GPU" worker.log || fail "ps_worker --device=auto: $(grep device: worker.log)"
# --device=cuda there: refused before anything else, in one line that names
# what is missing.
status=0
without_cuda "$bundle/bin/ps_worker" --servers="$address" --train=train.tsv \
  --device=cuda >cuda.out 2>cuda.log || status=$?
[ "$status" -ne 0 ] || fail "ps_worker --device=cuda without CUDA exited 0"
refusal=$(grep -- "--device=cuda:" cuda.log || true)
[ "$(wc -l <<<"$refusal")" -eq 1 ] && [ -n "$refusal" ] || fail "--device=cuda: $(cat cuda.log)"
if [ -n "$cuda_backend" ]; then
  grep -qE 'libcu(da|dart|blas)[^ ]*\.so' <<<"$refusal" || fail "the refusal names no CUDA library: $refusal"
else
  grep -q "this build has no CUDA backend" <<<"$refusal" || fail "$refusal"
fi
echo "without CUDA: $refusal"
auc=$(grep -o '"test_auc": [0-9.]*' metrics.json | awk '{print $2}')
awk -v auc="$auc" 'BEGIN {exit !(auc > 0.65)}' || fail "test AUC $auc"
without_cuda "$bundle/bin/ps_admin" --servers="$address" --dir="$work/export" export \
  >export.txt 2>&1 || fail "ps_admin export: $(cat export.txt)"
without_cuda "$bundle/bin/ps_predict" --export="$work/export" --input=test.tsv >predict.txt \
  2>predict.log || fail "ps_predict: $(tail -5 predict.log)"
grep -q "scored 5000 lines" predict.txt || fail "ps_predict: $(cat predict.txt)"
# The export as a TorchScript module, ps_export_dump found on the bundle's
# PATH (python/torchscript_test checks its scores against ps_predict's).
env -i PATH="$bundle/bin:/usr/bin:/bin" HOME="$work" "$work/venv/bin/python" \
  -m ps_client.torchscript build --export="$work/export" --out="$work/model.pt" \
  >torchscript.txt 2>&1 || fail "ps_client.torchscript build: $(tail -5 torchscript.txt)"
"$work/venv/bin/python" -m ps_client.torchscript score --module="$work/model.pt" \
  --input=test.tsv --out=torchscript_scores.txt >>torchscript.txt 2>&1 ||
  fail "ps_client.torchscript score: $(tail -5 torchscript.txt)"
[ "$(wc -l <torchscript_scores.txt)" -eq 5000 ] || fail "torchscript: $(wc -l <torchscript_scores.txt) scores"
kill $server
wait $server 2>/dev/null || true

# The Dockerfile.
dockerfile="$runfiles/deploy/Dockerfile"
grep -q '^FROM debian:12-slim$' "$dockerfile" || fail "Dockerfile: not FROM debian:12-slim"
while read -r _ source destination; do
  [ "$source" = "ps-bundle.tar.gz" ] || fail "Dockerfile adds $source, not the bundle"
  [ "$destination" = "/opt/" ] || fail "Dockerfile unpacks the bundle into $destination"
done < <(grep -E '^(ADD|COPY) ' "$dockerfile")
user=$(awk '$1 == "USER" {print $2}' "$dockerfile")
[[ "$user" =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "Dockerfile's USER '$user' is not a numeric non-root uid"
entrypoint=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)".*/\1/p' "$dockerfile")
case "$entrypoint" in
  /opt/ps-bundle/*) ;;
  *) fail "Dockerfile's entrypoint $entrypoint is not in the bundle" ;;
esac
[ -x "$work/unpacked/${entrypoint#/opt/}" ] || fail "no $entrypoint in the bundle"
for binary in $(grep -o '/opt/ps-bundle/bin/[a-z_]*' "$dockerfile" | sort -u); do
  [ -x "$work/unpacked/${binary#/opt/}" ] || fail "Dockerfile names $binary, not in the bundle"
done
# CMD's arguments (continuation lines joined).
mapfile -t arguments < <(sed -e ':join' -e '/\\$/N; s/\\\n//; tjoin' "$dockerfile" |
  sed -n 's/^CMD \[\(.*\)\]/\1/p' | tr ',' '\n' | sed 's/^ *"//; s/"$//')
[ ${#arguments[@]} -ge 3 ] || fail "no CMD arguments found"
# A shard listening beyond loopback must speak TLS (or be told it need not).
if printf '%s\n' "${arguments[@]}" | grep -q '^--listen=0.0.0.0' &&
  ! printf '%s\n' "${arguments[@]}" | grep -q '^--tls_cert=\|^--allow_insecure_remote'; then
  fail "the default command listens on 0.0.0.0 without TLS, which ps_server refuses"
fi
if printf '%s\n' "${arguments[@]}" | grep -q '^--listen=0.0.0.0' &&
  ! printf '%s\n' "${arguments[@]}" | grep -q '^--admin_token_file=\|^--allow_unauthenticated_admin'; then
  fail "the default command listens on 0.0.0.0 without an admin token, which ps_server refuses"
fi
# Run them: certificates where the image expects a mounted Secret, ports
# moved to loopback, the data directory to this test's.
mkdir tls
openssl req -x509 -newkey rsa:2048 -nodes -keyout tls/ca.key -out tls/ca.crt \
  -subj /CN=test-ca -days 1 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout tls/tls.key -out tls/tls.csr \
  -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >tls/san.ext
openssl x509 -req -in tls/tls.csr -CA tls/ca.crt -CAkey tls/ca.key -CAcreateserial \
  -out tls/tls.crt -days 1 -extfile tls/san.ext 2>/dev/null
mkdir admin worker-token
openssl rand -hex 32 >admin/token
openssl rand -hex 32 >worker-token/token
for i in "${!arguments[@]}"; do
  arguments[$i]=$(printf '%s' "${arguments[$i]}" |
    sed 's/^--\(listen\|health_listen\|metrics_listen\)=.*/--\1=127.0.0.1:0/' |
    sed 's|^--data_dir=.*|--data_dir='"$work"'/container-data|; s#/etc/ps/\(tls\|admin\|worker-token\)/#'"$work"'/\1/#')
done
env -i "$work/unpacked/${entrypoint#/opt/}" "${arguments[@]}" >entry.out 2>entry.log &
server=$!
for _ in $(seq 100); do
  grep -q "metrics on" entry.out 2>/dev/null && break
  sleep 0.1
done
for what in "listening on 127.0.0.1:" "health on 127.0.0.1:" "metrics on 127.0.0.1:"; do
  grep -q "$what" entry.out || fail "the entrypoint did not start ($what): $(cat entry.log)"
done
echo "bundle: $(sed -n 1,3p "$bundle/MANIFEST" | paste -sd' ')"
echo "trained from the bundle under env -i: test AUC $auc; $(cat predict.txt)"
