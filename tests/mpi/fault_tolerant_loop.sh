#!/bin/bash
# The README's fault-tolerant loop, unchanged, on the mpi backend: under
# `mpirun --enable-recovery` rank 2 of 4 SIGKILLs itself at step 20 and the
# other three detect it, agree, reconfigure and finish with exact averages.
# The example keeps its bookkeeping in the job store, which rank 0 hosts for
# the mpi backend too. mpirun exits 0 under --enable-recovery whatever the
# survivors do, so the verdict comes from their output.
# usage: fault_tolerant_loop.sh MPIEXEC EXAMPLE
set -u
mpiexec=$1 example=$2
out=$(SINEW_BACKEND=mpi SINEW_FR_BUFFER_SIZE=0 timeout 100 "$mpiexec" --allow-run-as-root --oversubscribe \
  --enable-recovery --mca async_mpi_finalize 1 -np 4 \
  "$example" --kill-rank 2 --at-step 20 --steps 40 --admit-every 0 --elems 256 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun exited with $rc"; exit 1; }
grep -q "done: 40 steps, every average exact, weights identical on every rank; final world size 3 (started with 4, lost \[2\], joined \[\])" <<<"$out" ||
  { echo "FAIL: no exact finish with 3 ranks"; exit 1; }
[ "$(grep -c '^\[step 20\] rank 2 lost; continuing with 3 ranks' <<<"$out")" -eq 3 ] ||
  { echo "FAIL: not every survivor reported the loss"; exit 1; }
echo PASS
