#!/bin/bash
# The Flight Recorder on the mpi backend, end to end: rank 1 skips one
# allreduce under mpirun; every rank must dump (the skipper on the request
# the others post to the job store) and `sinew fr analyze` must name the
# collective and the missing rank.
# usage: fr_hang.sh MPIEXEC DEMO SINEW
set -u
mpiexec=$1 demo=$2 sinew=$3
dir=$(mktemp -d /tmp/sinew-fr-mpi-XXXXXX)
trap 'rm -rf "$dir"' EXIT
SINEW_FR_DUMP_TEMP_FILE=$dir/rank_ "$mpiexec" --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 10 -np 3 \
  -x SINEW_FR_DUMP_TEMP_FILE "$demo" --backend mpi --skip 1:3 --steps 6 --timeout 2 \
  >"$dir/run.log" 2>&1 &
mpirun_pid=$!
# Ranks 0 and 2 time out and dump, and post a dump request to the job store
# that rank 1 (the skipper, stuck in its next collective) answers.
for _ in $(seq 300); do
  [ -s "$dir/rank_0" ] && [ -s "$dir/rank_1" ] && [ -s "$dir/rank_2" ] && break
  sleep 0.1
done
# The user then stops the stuck job. mpirun itself is stopped, with SIGKILL
# if it lingers: Open MPI 4.1's mpirun can stay behind after its last
# process has gone.
kill -TERM $mpirun_pid 2>/dev/null
for _ in $(seq 150); do kill -0 $mpirun_pid 2>/dev/null || break; sleep 0.1; done
kill -KILL $mpirun_pid 2>/dev/null
pkill -KILL -f -- "$demo --backend mpi --skip 1:3 --steps 6 --timeout 2"
wait $mpirun_pid
rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: the run should have failed"; cat "$dir/run.log"; exit 1; }
for r in 0 1 2; do
  [ -s "$dir/rank_$r" ] || { echo "FAIL: rank $r did not dump"; cat "$dir/run.log"; exit 1; }
done
grep -q "dump (store_request) written" "$dir/run.log" ||
  { echo "FAIL: rank 1 did not answer the dump request posted to the job store"; cat "$dir/run.log"; exit 1; }
out=$("$sinew" fr analyze "$dir" 2>&1)
echo "$out"
grep -q "culprit: group default@e0 collective #4 allreduce — rank(s) \[1\] never joined" <<<"$out" ||
  { echo "FAIL: the analyzer did not name collective #4 and rank 1"; exit 1; }
echo PASS
