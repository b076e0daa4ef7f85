#!/bin/bash
# The mpi backend survives killed ranks: under `mpirun --enable-recovery`
# ranks 1 and 3 of 4 SIGKILL themselves and ranks 0 and 2 must detect it,
# agree and reconfigure. mpirun exits 0 under --enable-recovery even when survivors
# fail, so the verdict comes from their reports.
# usage: reconfigure_kill.sh MPIEXEC CHECK
set -u
mpiexec=$1 check=$2
# async_mpi_finalize: MPI_Finalize's closing fence can wait forever on the
# dead ranks otherwise.
out=$("$mpiexec" --allow-run-as-root --oversubscribe --enable-recovery --mca async_mpi_finalize 1 -np 4 \
  "$check" --kill 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun exited with $rc"; exit 1; }
if grep -q "FAILED" <<<"$out"; then echo "FAIL: a survivor reported failures"; exit 1; fi
for r in 0 2; do
  grep -Eq "^\[rank $r\] [1-9][0-9]* passed, 0 failed$" <<<"$out" ||
    { echo "FAIL: rank $r did not report success"; exit 1; }
done
if grep -Eq "^\[rank [13]\]" <<<"$out"; then echo "FAIL: ranks 1 and 3 should have died"; exit 1; fi
echo PASS
