#!/bin/bash
# Failure-detection soak (docs/fault_tolerance.md): RANKS ranks allreduce in
# the fault-tolerant loop for MINUTES minutes with nothing failing, while
# LOAD busy loops (default: one per core) keep the machine fully loaded.
# Any detection (a lost rank, an epoch above 0) is a false positive and
# fails the run. Usage: scripts/soak.sh [MINUTES] (default 10); BIN picks
# the build (default build/release/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${1:-10}"
BIN="${BIN:-build/release/bin}"
RANKS="${RANKS:-4}"
LOAD="${LOAD:-$(nproc)}"
for f in sinew fault_tolerant_loop; do
  [ -x "$BIN/$f" ] || { echo "soak: $BIN/$f not built (cmake --build --preset release)" >&2; exit 2; }
done
loads=()
cleanup() { [ ${#loads[@]} -eq 0 ] || kill "${loads[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$LOAD"); do (while :; do :; done) & loads+=($!); done
run() {  # steps -> the loop's output
  "$BIN/sinew" run --standalone --fault-tolerant --nproc-per-node "$RANKS" \
    "$BIN/fault_tolerant_loop" --steps "$1" --admit-every 0 --elems 4096 2>&1
}
# Steps per second under this load: two short runs, so start-up cancels out.
t0=$(date +%s.%N); run 1000 >/dev/null; t1=$(date +%s.%N); run 5000 >/dev/null; t2=$(date +%s.%N)
rate=$(python3 -c "print(4000 / max(($t2 - $t1) - ($t1 - $t0), 0.1))")
steps=$(python3 -c "print(int($rate * 60 * $MINUTES))")
echo "soak: $RANKS ranks, $LOAD busy loops, ${MINUTES} min: $steps steps at ~$(printf %.0f "$rate") steps/s"
t0=$(date +%s)
out=$(run "$steps") || { echo "$out" | tail -20; echo "soak: FAILED (the loop exited non-zero)"; exit 1; }
elapsed=$(( $(date +%s) - t0 ))
done_line=$(echo "$out" | grep "done:" || true)
echo "$done_line"
if [[ "$done_line" == *"lost [], joined []), epoch 0"* ]]; then
  echo "soak: PASSED: ${elapsed} s, $steps allreduces on $RANKS ranks, no failure detected (no false positive)"
else
  echo "$out" | grep -E "lost|epoch|PeerLost|Timeout" | head -20
  echo "soak: FAILED: a failure was detected with nothing failing (false positive), after ${elapsed} s"
  exit 1
fi
