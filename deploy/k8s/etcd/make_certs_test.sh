#!/usr/bin/env bash
# make-certs.sh's certificates against Debian's etcd, started with the
# etcd component's TLS flags on loopback: a client with the job's
# certificate reads and writes; one without a certificate, or with one
# another CA signed, is refused.
set -uo pipefail
# Under bazel test the working directory is the workspace in the runfiles.
here=deploy/k8s/etcd
[ -f "$here/make-certs.sh" ] || here=$(dirname "$0")
work=${TEST_TMPDIR:-$(mktemp -d)}/make_certs
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

bash "$here/make-certs.sh" test-namespace "$work/ca" >"$work/secrets.yaml" ||
  fail "make-certs.sh failed"
grep -q "name: ps-etcd-server-tls" "$work/secrets.yaml" || fail "no server secret"
grep -q "name: ps-etcd-client-tls" "$work/secrets.yaml" || fail "no client secret"
ca=$work/ca
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
/usr/bin/etcd --name=m --data-dir="$work/data" \
  --listen-client-urls="https://127.0.0.1:$port" \
  --advertise-client-urls="https://127.0.0.1:$port" \
  --listen-peer-urls="http://127.0.0.1:$peer" \
  --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
  --initial-cluster="m=http://127.0.0.1:$peer" \
  --cert-file="$ca/server.crt" --key-file="$ca/server.key" \
  --client-cert-auth --trusted-ca-file="$ca/ca.crt" \
  --log-level=error >"$work/etcd.log" 2>&1 &
etcd_pid=$!
trap 'kill $etcd_pid 2>/dev/null; wait $etcd_pid 2>/dev/null' EXIT

with_cert=(etcdctl --endpoints="https://localhost:$port" --cacert="$ca/ca.crt"
           --cert="$ca/client.crt" --key="$ca/client.key" --command-timeout=3s)
# Up to 20 s for etcd to listen.
python3 - "$port" <<'PY' || fail "etcd did not listen: $(cat "$work/etcd.log")"
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PY
"${with_cert[@]}" put /ps/ctr/probe 2 >/dev/null 2>&1 ||
  fail "a client with the job's certificate is refused: $(cat "$work/etcd.log")"
[ "$("${with_cert[@]}" get /ps/ctr/probe --print-value-only)" = 2 ] ||
  fail "the value did not read back"
etcdctl --endpoints="https://localhost:$port" --cacert="$ca/ca.crt" \
  --command-timeout=3s put /ps/ctr/probe 3 >/dev/null 2>&1 &&
  fail "a client without a certificate wrote"
other=$work/other
bash "$here/make-certs.sh" test-namespace "$other" >/dev/null ||
  fail "make-certs.sh failed again"
etcdctl --endpoints="https://localhost:$port" --cacert="$ca/ca.crt" \
  --cert="$other/client.crt" --key="$other/client.key" \
  --command-timeout=3s put /ps/ctr/probe 4 >/dev/null 2>&1 &&
  fail "a client whose certificate another CA signed wrote"
echo "PASS: the job's certificate is taken, none or another CA's refused"
