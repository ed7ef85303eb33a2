# Shell helpers shared by deploy/quickstart.sh and tests/bench/*.sh.
# Source it: . deploy/cluster_lib.sh

# ps_address FILE: waits (up to 10 s) until the ps_server whose stdout goes to
# FILE prints "ps_server listening on HOST:PORT", then prints HOST:PORT.
# Returns 1 if it never does.
ps_address() {
  local file=$1
  for _ in $(seq 100); do
    if grep -q "listening on" "$file" 2>/dev/null; then
      awk '/listening on/ {print $4}' "$file"
      return 0
    fi
    sleep 0.1
  done
  echo "no ps_server address in $file" >&2
  return 1
}
