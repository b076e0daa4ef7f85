#!/bin/bash
# Cross-host failure detection with real "hosts": two network namespaces
# joined by a veth pair, each with its own hostname (UTS namespace), so the
# ranks see two hosts and talk over UCX/TCP across the veth. Node 0 (ranks
# 0, 1) hosts the job store; rank KILL (default 3, on node 1) SIGKILLs
# itself at step 40 of the fault-tolerant loop; every survivor must report
# the loss, reconfigure to 3 ranks and finish with exact averages. Prints
# each survivor's detection latency (kill -> its PeerLost).
# Needs root and network namespaces; exits 77 (ctest: skipped) without them.
# Usage: cross_host_detect.sh BIN_DIR [TRIALS]
set -uo pipefail
BIN="$1"
TRIALS="${2:-1}"
KILL="${KILL:-3}"
NS_A="sinew-a-$$" NS_B="sinew-b-$$"
VA="sva$$" VB="svb$$"
NET=10.213.$(( $$ % 200 + 20 ))
cleanup() {
  ip netns pids "$NS_A" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$NS_B" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  rm -rf "$TMP"
}
TMP=$(mktemp -d)
trap cleanup EXIT
if [ "$(id -u)" != 0 ] || ! ip netns add "$NS_A" 2>/dev/null; then
  echo "cross_host_detect: needs root and network namespaces here; skipped"
  exit 77
fi
ip netns add "$NS_B" || exit 77
ip link add "$VA" type veth peer name "$VB" || { echo "cross_host_detect: no veth support; skipped"; exit 77; }
ip link set "$VA" netns "$NS_A" && ip link set "$VB" netns "$NS_B" || exit 1
ip -n "$NS_A" addr add "$NET.1/24" dev "$VA" && ip -n "$NS_B" addr add "$NET.2/24" dev "$VB" || exit 1
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VA" up && ip -n "$NS_B" link set "$VB" up || exit 1

# node NS HOSTNAME NODE_RANK DEVICE -> runs one node's launcher
node() {
  ip netns exec "$1" unshare --uts sh -c "hostname $2 && exec env UCX_NET_DEVICES=$4 UCX_TLS=tcp SINEW_STORE_TOKEN=netns-token-$$ \
    SINEW_LOG_LEVEL=warn $BIN/sinew run --nnodes 2 --node-rank $3 --nproc-per-node 2 --fault-tolerant \
    --rdzv-endpoint $NET.1:29631 --rdzv-id netns-$$ $BIN/fault_tolerant_loop --kill-rank $KILL --at-step 40 \
    --steps 200 --admit-every 0"
}
fail=0
for t in $(seq "$TRIALS"); do
  node "$NS_A" host-a 0 "$VA" >"$TMP/a.out" 2>&1 &
  a=$!
  node "$NS_B" host-b 1 "$VB" >"$TMP/b.out" 2>&1 &
  b=$!
  ok=1
  for p in $a $b; do
    for _ in $(seq 600); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
    if kill -0 $p 2>/dev/null; then echo "trial $t: a node did not finish in 60 s (hang)"; kill -9 $p; ok=0; fi
    wait $p || ok=0
  done
  out=$(cat "$TMP/a.out" "$TMP/b.out")
  if ! grep -q "done: 200 steps, every average exact" <<<"$out" || ! grep -q "lost \[$KILL\]" <<<"$out"; then ok=0; fi
  # Every survivor's own "lost" line carries its detection latency.
  lat=$(grep -o "rank $KILL lost; continuing with 3 ranks as rank [0-9] (epoch 1, [0-9.]* ms to detect" <<<"$out" |
        sed -E 's/.*epoch 1, ([0-9.]*) ms.*/\1/' | tr '\n' ' ')
  n=$(wc -w <<<"$lat")
  [ "$n" = 3 ] || ok=0
  if [ $ok = 1 ]; then
    echo "trial $t: PASSED: all 3 survivors detected the kill across hosts; detect ms: $lat"
  else
    echo "trial $t: FAILED"; echo "$out" | tail -30; fail=1
  fi
done
exit $fail
