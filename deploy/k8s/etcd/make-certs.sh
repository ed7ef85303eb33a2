#!/usr/bin/env bash
# Makes the etcd component's certificates and prints its two secrets as
# YAML for `kubectl apply -f -`: a CA, the members' certificate (valid for
# ps-etcd-0..2.ps-etcd in NAMESPACE, as client and peer), and the job's
# client certificate. The CA's key is left in the directory given (default
# ./ps-etcd-ca): keep it to sign more, or delete it.
#
#   deploy/k8s/etcd/make-certs.sh NAMESPACE [DIR] | kubectl apply -f -
set -euo pipefail
namespace=${1:?usage: make-certs.sh NAMESPACE [DIR]}
dir=${2:-./ps-etcd-ca}
mkdir -p "$dir"
cd "$dir"
days=825

openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -subj "/CN=ps-etcd-ca" \
  -keyout ca.key -out ca.crt 2>/dev/null

names="DNS:localhost,IP:127.0.0.1"
for i in 0 1 2; do
  names="$names,DNS:ps-etcd-$i.ps-etcd,DNS:ps-etcd-$i.ps-etcd.$namespace"
  names="$names,DNS:ps-etcd-$i.ps-etcd.$namespace.svc"
  names="$names,DNS:ps-etcd-$i.ps-etcd.$namespace.svc.cluster.local"
done
openssl req -newkey rsa:2048 -nodes -subj "/CN=ps-etcd" \
  -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' \
  "$names" >server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -days "$days" -extfile server.ext -out server.crt 2>/dev/null

openssl req -newkey rsa:2048 -nodes -subj "/CN=ps-job" \
  -keyout client.key -out client.csr 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -days "$days" -extfile client.ext -out client.crt 2>/dev/null

secret() {  # NAME CERT KEY
  cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $1
  namespace: $namespace
type: Opaque
data:
  ca.crt: $(base64 -w0 ca.crt)
  tls.crt: $(base64 -w0 "$2")
  tls.key: $(base64 -w0 "$3")
YAML
}
secret ps-etcd-server-tls server.crt server.key
echo "---"
secret ps-etcd-client-tls client.crt client.key
