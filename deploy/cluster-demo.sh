#!/bin/sh
# A three-host PTO cluster on one machine (docs/remote.md): host1 runs a
# level-4 ptod (the coordinator, with one local L3 child), host2 and host3
# run level-3 ptods (one chip each) that host1 reaches as [[peers]] over
# TLS with client certificates and a bearer token. Each daemon gets its own
# network namespace (ip netns, a bridge and veth pairs, 10.77.<n>.0/24);
# without the rights for that (not root, no ip, or PTO_DEMO_NETNS=0) the
# three daemons share the host's loopback on separate ports, and the script
# says so. It registers the paged-attention example on the peers through the
# coordinator, runs three instances of it split across the three hosts as one
# job, checks every output against the reference, prints the topology, and
# stops everything.
#
# Usage: deploy/cluster-demo.sh [BUILD_DIR]      (default: build)
set -eu

BUILD=${1:-build}
PTOD=$BUILD/daemon/ptod
PTOCTL=$BUILD/client/ptoctl
EXAMPLE=$BUILD/examples/paged_attention/kernels.toml
SPREAD=$BUILD/examples/cluster/libpto_cluster.so
for f in "$PTOD" "$PTOCTL" "$EXAMPLE" "$SPREAD"; do
  [ -e "$f" ] || { echo "cluster-demo: $f is missing: build first (cmake --build $BUILD)" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/pto-cluster-XXXXXX)
TAG=$$
NET=$((TAG % 200 + 20))  # 10.77.NET.0/24, one per run
BR=ptobr$TAG
PIDS=""
MODE=loopback

cleanup() {
  for p in $PIDS; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $PIDS; do
    i=0
    while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$p" 2>/dev/null || true
  done
  if [ "$MODE" = netns ]; then
    for h in 1 2 3; do ip netns del "pto$TAG-h$h" 2>/dev/null || true; done
    ip link del "$BR" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# --- credentials: a CA, a server certificate for every host, a client
# certificate for the coordinator, a token.
ossl() { openssl "$@" >/dev/null 2>&1; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -days 1 -subj /CN=pto-demo-ca
for who in server client; do
  ossl req -newkey rsa:2048 -nodes -keyout "$WORK/$who.key" -out "$WORK/$who.csr" -subj /CN=localhost
  echo "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:10.77.$NET.11,IP:10.77.$NET.12,IP:10.77.$NET.13" > "$WORK/$who.ext"
  ossl x509 -req -in "$WORK/$who.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
    -out "$WORK/$who.pem" -days 1 -extfile "$WORK/$who.ext"
done
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/token"
chmod 600 "$WORK"/*.key "$WORK/token"

# --- the network: one namespace per host if we may.
if [ "${PTO_DEMO_NETNS:-1}" != 0 ] && command -v ip >/dev/null 2>&1 && ip netns add "pto$TAG-h1" 2>/dev/null; then
  MODE=netns
  ip link add "$BR" type bridge
  ip addr add "10.77.$NET.1/24" dev "$BR"
  ip link set "$BR" up
  for h in 1 2 3; do
    ns=pto$TAG-h$h
    [ $h = 1 ] || ip netns add "$ns"
    ip link add "ptov$TAG$h" type veth peer name eth0 netns "$ns"
    ip link set "ptov$TAG$h" master "$BR" up
    ip -n "$ns" addr add "10.77.$NET.1$h/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  echo "cluster-demo: three network namespaces (pto$TAG-h1..3) on bridge $BR, 10.77.$NET.0/24"
elif [ "${PTO_DEMO_NETNS:-1}" = 0 ]; then
  echo "cluster-demo: PTO_DEMO_NETNS=0: three daemons on this host's loopback, separate ports"
else
  echo "cluster-demo: network namespaces are not available here (needs root and iproute2);" \
       "falling back to three daemons on this host's loopback, separate ports"
fi

host_run() {  # host_run N command...: run in host N's namespace (or here); called with &, so
  h=$1           # exec makes $! the daemon itself (ip netns exec execs its command)
  shift
  if [ "$MODE" = netns ]; then exec ip netns exec "pto$TAG-h$h" "$@"; else exec "$@"; fi
}

wait_ready() {  # wait_ready FILE: the daemon's --ready-file, bounded
  i=0
  while [ ! -s "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  [ -s "$1" ] || { echo "cluster-demo: a daemon did not start; its log:" >&2; cat "${1%.ready}.log" >&2; exit 1; }
}

# --- host2 and host3: level-3 peers, TLS listener (client certificates required) and the token.
for h in 2 3; do
  if [ "$MODE" = netns ]; then listen="10.77.$NET.1$h:7000"; else listen="127.0.0.1:0"; fi
  cat > "$WORK/h$h.toml" <<EOF
[server]
socket = "$WORK/h$h.sock"
listen = ["$listen"]
tls_cert = "$WORK/server.pem"
tls_key = "$WORK/server.key"
tls_client_ca = "$WORK/ca.pem"
token_file = "$WORK/token"
[worker]
chips = 1
sub_workers = 1
[daemon]
state_dir = "$WORK/h$h"
[metrics]
listen = ""
EOF
  host_run $h "$PTOD" --config "$WORK/h$h.toml" --ready-file "$WORK/h$h.ready" > "$WORK/h$h.log" 2>&1 &
  PIDS="$PIDS $!"
done
for h in 2 3; do wait_ready "$WORK/h$h.ready"; done
peer_address() {
  if [ "$MODE" = netns ]; then echo "10.77.$NET.1$1:7000"
  else echo "127.0.0.1:$(sed -n 's/^grpc_port=//p' "$WORK/h$1.ready")"; fi
}

# --- host1: the level-4 coordinator, one local L3 child, the two peers.
cat > "$WORK/h1.toml" <<EOF
[server]
socket = "$WORK/h1.sock"
[worker]
level = 4
l3_children = 1
chips = 1
sub_workers = 0
[daemon]
state_dir = "$WORK/h1"
[metrics]
listen = ""
EOF
for h in 2 3; do
  cat >> "$WORK/h1.toml" <<EOF
[[peers]]
name = "host$h"
address = "$(peer_address $h)"
workers = 1
tls_ca = "$WORK/ca.pem"
tls_cert = "$WORK/client.pem"
tls_key = "$WORK/client.key"
token_file = "$WORK/token"
EOF
done
host_run 1 "$PTOD" --config "$WORK/h1.toml" --ready-file "$WORK/h1.ready" > "$WORK/h1.log" 2>&1 &
PIDS="$PIDS $!"
wait_ready "$WORK/h1.ready"

ctl() { "$PTOCTL" --address "unix:$WORK/h1.sock" "$@"; }
echo "cluster-demo: registering the spread orchestration on host1 and the example on every L3 worker"
ctl register import "$(readlink -f "$SPREAD")" pto_spread --orchestration -n spread
echo "cluster-demo: three paged-attention instances, one job, spread over host1's L3 child, host2 and host3"
status=0
ctl run-example "$EXAMPLE" --instances 3 --spread spread || status=$?
sleep 0.2  # the peers report their trees with their next heartbeat (100 ms)
echo "cluster-demo: topology"
ctl workers
if [ $status = 0 ]; then echo "cluster-demo: PASS ($MODE)"; else echo "cluster-demo: FAILED (exit $status)"; fi
exit $status
