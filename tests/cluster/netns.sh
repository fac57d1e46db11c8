#!/usr/bin/env bash
# Several "hosts" on one machine: one network namespace per host, joined by a bridge.
#
#   tests/cluster/netns.sh up N      create (or complete) hosts 1..N; idempotent
#   tests/cluster/netns.sh down      remove every host created by `up` and the bridge
#   tests/cluster/netns.sh status    list hosts and addresses
#   tests/cluster/netns.sh check     exit 0 if namespaces can be used here, else 77 + reason
#   tests/cluster/netns.sh shape RATE  shape every host's egress (eth0) with a tc token bucket
#                                    (tbf) to RATE (tc units: 100mbit, 1gbit); `shape off` removes it
#   tests/cluster/netns.sh mpirun ARGS...  mpirun across the hosts (hostfile entries name hosts
#                                    h1, h2, ...): the options that make it run here, then ARGS
#
# Layout (defaults; override with the environment):
#   bridge  $FTB_NETNS_BRIDGE (ftbbr0) with ${FTB_NETNS_NET}.1/24 (10.77.0.1) in the root ns
#   host i  namespace ${FTB_NETNS_PREFIX}i (h1, h2, ...), eth0 = ${FTB_NETNS_NET}.(10+i)/24,
#           lo up; root side of its veth pair is ${FTB_NETNS_PREFIX}i-br on the bridge.
# All namespaces share the hostname, the filesystem and the PID space with the root ns.
# Exit codes: 0 ok, 77 not usable here (not root, no netns support), 1 error.
set -euo pipefail

PREFIX=${FTB_NETNS_PREFIX:-h}
BRIDGE=${FTB_NETNS_BRIDGE:-ftbbr0}
NET=${FTB_NETNS_NET:-10.77.0}
STATE_DIR=/run/ftb-netns
STATE=$STATE_DIR/$BRIDGE.hosts

die() { echo "netns.sh: $*" >&2; exit 1; }

check() {
  [[ $(id -u) == 0 ]] || { echo "netns.sh: needs root (uid $(id -u))" >&2; exit 77; }
  command -v ip >/dev/null || { echo "netns.sh: 'ip' (iproute2) not installed" >&2; exit 77; }
  local probe="ftbprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns.sh: cannot create network namespaces here" >&2; exit 77
  fi
  ip netns del "$probe"
}

has_ns() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

up() {
  local n=$1
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up: N must be 1..200, got '$n'"
  check
  mkdir -p "$STATE_DIR"
  exec 9>"$STATE_DIR/$BRIDGE.lock"
  flock 9
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr replace "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  touch "$STATE"
  for i in $(seq 1 "$n"); do
    local ns="$PREFIX$i" vr="$PREFIX$i-br"
    has_ns "$ns" || ip netns add "$ns"
    grep -qx "$ns" "$STATE" || echo "$ns" >>"$STATE"
    if ! ip link show "$vr" >/dev/null 2>&1; then
      ip -n "$ns" link del eth0 2>/dev/null || true
      ip link add "$vr" type veth peer name eth0 netns "$ns"
    fi
    ip link set "$vr" master "$BRIDGE" up
    ip -n "$ns" addr replace "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  # Wait until every host answers on TCP-free ground: the veth carrier is up.
  for i in $(seq 1 "$n"); do
    for _ in $(seq 1 50); do
      [[ $(ip -n "$PREFIX$i" -o link show eth0) == *"LOWER_UP"* ]] && break
      sleep 0.02
    done
  done
}

down() {
  [[ $(id -u) == 0 ]] || { echo "netns.sh: needs root" >&2; exit 77; }
  [[ -d $STATE_DIR ]] || return 0
  exec 9>"$STATE_DIR/$BRIDGE.lock"
  flock 9
  if [[ -f $STATE ]]; then
    while read -r ns; do
      [[ -n $ns ]] || continue
      if has_ns "$ns"; then
        local pids
        pids=$(ip netns pids "$ns" || true)
        if [[ -n $pids ]]; then
          echo "netns.sh: killing processes left in $ns: $pids" >&2
          # shellcheck disable=SC2086
          kill -9 $pids 2>/dev/null || true
        fi
        ip netns del "$ns"
      fi
      ip link del "$ns-br" 2>/dev/null || true
      rm -rf "${TMPDIR:-/tmp}/ftb-netns-$ns"  # OpenMPI session root made by netns_rsh.sh
    done <"$STATE"
    rm -f "$STATE"
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
}

status() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then echo "bridge $BRIDGE: absent"; return 0; fi
  echo "bridge $BRIDGE: $(ip -o -4 addr show dev "$BRIDGE" | awk '{print $4}')"
  [[ -f $STATE ]] || return 0
  while read -r ns; do
    [[ -n $ns ]] || continue
    if has_ns "$ns"; then
      echo "$ns: $(ip -n "$ns" -o -4 addr show dev eth0 2>/dev/null | awk '{print $4}')"
    else
      echo "$ns: missing"
    fi
  done <"$STATE"
}

# A link shaped to RATE in each direction: every host's eth0 sends through a token bucket
# (tbf; netem is not available on every kernel). The bucket holds 2 ms at RATE, at least
# 64 KiB (a GSO segment); the queue up to 100 ms at RATE before tbf drops (TCP backs off).
shape() {
  local rate=$1
  [[ -f $STATE ]] || die "shape: no hosts (run 'up N' first)"
  while read -r ns; do
    [[ -n $ns ]] || continue
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    [[ $rate == off ]] && continue
    local bps
    bps=$(rate_bps "$rate")
    local burst=$((bps / 8 / 500)) limit=$((bps / 8 / 10))
    ((burst >= 65536)) || burst=65536
    ((limit >= 4 * burst)) || limit=$((4 * burst))
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" limit "$limit"
  done <"$STATE"
}

rate_bps() {  # 100mbit, 1gbit, 2.5gbit, 500kbit -> bits per second
  local r=${1,,}
  local num=${r%%[a-z]*} unit=${r##*[0-9.]}
  case $unit in
    kbit) awk -v n="$num" 'BEGIN{printf "%d", n * 1e3}' ;;
    mbit) awk -v n="$num" 'BEGIN{printf "%d", n * 1e6}' ;;
    gbit) awk -v n="$num" 'BEGIN{printf "%d", n * 1e9}' ;;
    *) die "shape: rate '$1': expected a number with kbit, mbit or gbit (e.g. 100mbit)" ;;
  esac
}

# mpirun as tests/e2e/launcher/launcher_util.py's mpirun_prefix runs it across the hosts.
mpirun_hosts() {
  exec mpirun --allow-run-as-root --bind-to none \
    --mca plm_rsh_agent "$(dirname "$(readlink -f "$0")")/netns_rsh.sh" \
    --mca oob_tcp_if_include "$NET.0/24" --mca btl_tcp_if_include "$NET.0/24" \
    --mca btl self,tcp --mca odls_base_sigkill_timeout 0 "$@"
}

case "${1:-}" in
  up) up "${2:?usage: netns.sh up N}" ;;
  shape) shape "${2:?usage: netns.sh shape RATE|off}" ;;
  mpirun) shift; mpirun_hosts "$@" ;;
  down) down ;;
  status) status ;;
  check) check ;;
  *) echo "usage: $0 up N | down | status | check | shape RATE|off | mpirun ARGS..." >&2; exit 2 ;;
esac
